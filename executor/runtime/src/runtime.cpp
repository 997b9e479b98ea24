// The Plan interpreter (docs/executor.md).
//
// Each rank walks the Plan's tasks in order and runs those it takes part in:
// its compute and update tasks, and the transfers and sums whose flows name
// it. Plan order is topological and every rank follows the same order, so
// blocking sends and receives cannot deadlock (a rank waiting in task T for a
// peer means the peer has finished every earlier task both take part in).
//
// Buffers. A collective's data is resolved by an Endpoint for its buffer kind:
// weight gradients are the Model's gradient span of the bucket's layers,
// split into `parts` chunks and `segments` segments (integer splits, the
// remainder spread over the first pieces); owt activations and activation
// gradients move rows (examples) or channel slices of the Model's tensors,
// staged contiguously. A transfer followed by a reduce receives into scratch
// that the reduce adds (or, for softmax statistics, merges) into place.
#include "strata/exec/runtime.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <limits>
#include <map>
#include <mutex>
#include <numeric>
#include <set>
#include <thread>

#include "strata/exec/comm/collectives.h"
#include "strata/exec/comm/local_communicator.h"
#include "strata/exec/device.h"
#include "strata/exec/nn/dataset.h"
#include "strata/exec/nn/model.h"
#include "strata/model/error.h"
#include "strata/model/estimate.h"
#include "strata/model/limits.h"
#include "strata/model/plan.h"
#include "strata/model/quantity_text.h"

namespace strata::exec {

namespace {

using Clock = std::chrono::steady_clock;

// Reserved tags for the run's own bookkeeping (config check, step stats).
constexpr int kTagHash = kFirstReservedTag + 1;
constexpr int kTagVerdict = kFirstReservedTag + 2;
constexpr int kTagStats = kFirstReservedTag + 3;
constexpr int kTagSlices = kFirstReservedTag + 4;
constexpr int kTagLoss = kFirstReservedTag + 5;

int tagOf(size_t task) {
  return static_cast<int>(task % static_cast<size_t>(kFirstReservedTag));
}

// [begin, end) of piece i of n items cut into `parts` near-equal pieces.
std::pair<int64_t, int64_t> piece(int64_t n, int parts, int i) {
  const int64_t base = n / parts, extra = n % parts;
  const int64_t begin = i * base + std::min<int64_t>(i, extra);
  return {begin, begin + base + (i < extra ? 1 : 0)};
}

std::span<float> sub(std::span<float> s, std::pair<int64_t, int64_t> r) {
  return s.subspan(static_cast<size_t>(r.first), static_cast<size_t>(r.second - r.first));
}

// The parts of sorted, disjoint intervals inside [from, to].
Intervals clip(const Intervals& v, double from, double to) {
  Intervals out;
  for (const auto& [a, b] : v)
    if (std::min(b, to) > std::max(a, from))
      out.push_back({std::max(a, from), std::min(b, to)});
  return out;
}
double length(const Intervals& v) {
  double s = 0;
  for (const auto& [a, b] : v)
    s += b - a;
  return s;
}

// Examples of worker w in step s: global indices [(s K + w) b, +b).
int64_t firstExample(int step, int workers, int worker, int batch) {
  return (int64_t(step) * workers + worker) * batch;
}

// ---- endpoints ------------------------------------------------------------------

// Resolves a collective's data on one rank.
class Endpoint {
 public:
  virtual ~Endpoint() = default;
  // What this rank sends to `dst` for (part, segment).
  virtual std::span<const float> send(int part, int segment, int dst) = 0;
  // Where data from `src` for (part, segment) lands when nothing sums it.
  virtual std::span<float> land(int part, int segment, int src) = 0;
  // Size of the data from `src` for (part, segment).
  virtual size_t size(int part, int segment, int src) = 0;
  // Adds (merges) data received from `src` into this rank's (part, segment).
  virtual void reduce(int part, int segment, int src, std::span<const float> data) = 0;
  // How many consecutive parts the next calls cover (halving-doubling moves
  // several blocks at once); 1 otherwise.
  virtual void setParts(int) {}
  // After this rank's last task of the collective.
  virtual void finish() {}
};

// A flat buffer on every rank (weight gradients, softmax statistics): parts
// are chunks of it, segments pieces of a chunk. `group` keeps (max, sum) pairs
// of softmax statistics whole.
class FlatEndpoint final : public Endpoint {
 public:
  FlatEndpoint(BufferOps& ops, std::span<float> buffer, int parts, int segments, int group,
               bool mergeStats)
      : ops_(ops),
        buffer_(buffer),
        parts_(parts),
        segments_(segments),
        group_(group),
        merge_(mergeStats) {}

  void setParts(int count) override { count_ = std::max(1, count); }
  std::span<const float> send(int part, int segment, int) override { return at(part, segment); }
  std::span<float> land(int part, int segment, int) override { return at(part, segment); }
  size_t size(int part, int segment, int) override { return at(part, segment).size(); }
  void reduce(int part, int segment, int, std::span<const float> data) override {
    auto dst = at(part, segment);
    if (merge_) {
      nn::mergeSoftmaxStats(dst, data);  // on the host: the statistics are managed memory
      return;
    }
    ops_.add(dst, data);
  }

 private:
  std::span<float> at(int part, int segment) {
    const int64_t groups = static_cast<int64_t>(buffer_.size()) / group_;
    const int p = parts_ > 1 ? part : 0;
    auto chunk = piece(groups, parts_, p);
    if (count_ > 1)
      chunk.second = piece(groups, parts_, std::min(p + count_, parts_) - 1).second;
    const auto seg = piece(chunk.second - chunk.first, segments_, segment);
    return buffer_.subspan(static_cast<size_t>((chunk.first + seg.first) * group_),
                           static_cast<size_t>((seg.second - seg.first) * group_));
  }
  BufferOps& ops_;
  std::span<float> buffer_;
  int parts_, segments_, group_;
  bool merge_;
  int count_ = 1;
};

// A ps pull with staleness: this rank sends its server's updated chunk and
// lands the others' in a staging copy of the key's weights (a slot per step
// of delay), which the compute lane copies into the model before the forward
// that may use them.
class PullEndpoint final : public Endpoint {
 public:
  PullEndpoint(std::span<const float> shard, std::span<float> slot, int parts)
      : shard_(shard), slot_(slot), parts_(parts) {}
  std::span<const float> send(int, int, int) override { return shard_; }
  std::span<float> land(int part, int, int) override { return at(part); }
  size_t size(int part, int, int) override { return at(part).size(); }
  void reduce(int, int, int, std::span<const float>) override {
    throw InvariantError("a ps pull sums nothing");
  }

 private:
  std::span<float> at(int part) {
    const auto r = piece(static_cast<int64_t>(slot_.size()), parts_, part);
    return slot_.subspan(static_cast<size_t>(r.first), static_cast<size_t>(r.second - r.first));
  }
  std::span<const float> shard_;
  std::span<float> slot_;
  int parts_;
};

// Rows (examples) of a tensor: what a rank sends is rows of its own tensor
// chosen per destination; what it receives lands in rows chosen per source;
// sums go into an accumulator initialised with this rank's own share.
class RowsEndpoint final : public Endpoint {
 public:
  using RowsOf = std::function<std::pair<int64_t, int64_t>(int rank)>;
  // sendFrom: this rank's source tensor; sendRows(dst): rows sent to dst.
  // landIn: where received rows go (rows landRows(src)), or nullptr when
  // received data is summed into `acc` (rows accRows(src) of the sender's
  // tensor map onto the whole accumulator).
  RowsEndpoint(BufferOps& ops, std::span<float> sendFrom, int64_t rowSize, RowsOf sendRows,
               std::span<float> landIn, RowsOf landRows, int segments)
      : ops_(ops),
        from_(sendFrom),
        row_(rowSize),
        sendRows_(std::move(sendRows)),
        to_(landIn),
        landRows_(std::move(landRows)),
        segments_(segments) {}

  // Accumulator mode: the sum lands in `acc` (initialised by the caller).
  void accumulate(std::span<float> acc) { acc_ = acc; }

  std::span<const float> send(int, int segment, int dst) override {
    return seg(sub(from_, scale(sendRows_(dst))), segment);
  }
  std::span<float> land(int, int segment, int src) override {
    return seg(sub(to_, scale(landRows_(src))), segment);
  }
  size_t size(int, int segment, int src) override {
    // Rows from `src` have the size of the rows this rank would land or sum.
    const auto r = acc_.empty() ? landRows_(src) : std::pair<int64_t, int64_t>{0, accRows()};
    const int64_t n = (r.second - r.first) * row_;
    const auto s = piece(n, segments_, segment);
    return static_cast<size_t>(s.second - s.first);
  }
  void reduce(int, int segment, int, std::span<const float> data) override {
    ops_.add(seg(acc_, segment), data);
  }

 private:
  int64_t accRows() const { return static_cast<int64_t>(acc_.size()) / row_; }
  std::pair<int64_t, int64_t> scale(std::pair<int64_t, int64_t> rows) const {
    return {rows.first * row_, rows.second * row_};
  }
  std::span<float> seg(std::span<float> s, int segment) const {
    return sub(s, piece(static_cast<int64_t>(s.size()), segments_, segment));
  }
  BufferOps& ops_;
  std::span<float> from_;
  int64_t row_;
  RowsOf sendRows_;
  std::span<float> to_;
  RowsOf landRows_;
  int segments_;
  std::span<float> acc_;
};

// ---- the worker ----------------------------------------------------------------

struct TaskTiming {
  double start = 0;
  double end = 0;
};

struct Measured {
  PhaseTimes compute;
  double communication = 0;
  double exposed = 0;  // communication not overlapped by this rank's compute
  double sent = 0;
  double received = 0;
  double seconds = 0;
  double lossShare = 0;
};

class Worker {
 public:
  Worker(Communicator& comm, const Plan& plan, const Network& net, const RunOptions& opt)
      : comm_(comm),
        plan_(plan),
        net_(net),
        opt_(opt),
        k_(plan.scenario.workers),
        world_(plan.scenario.workers + plan.servers),
        w_(comm.rank()),
        b_(plan.scenario.batchPerWorker),
        owt_(isModelParallel(plan.scenario.strategy)),
        mp_(owt_ ? net.modelParallelFrom : static_cast<int>(net.layers.size())),
        dataset_(nn::SyntheticDataset::forNetwork(net, opt.seed)),
        backend_(makeBackend(opt.device, "--device", gpuOfWorker(opt, comm.rank()),
                             opt.threadsPerWorker)),
        model_(net, modelOptions()),
        timer_(*backend_) {
    for (size_t t = 0; t < plan.tasks.size(); ++t)
      if (involves(plan.tasks[t]))
        mine_.push_back(t);
    lastOf_.assign(plan.collectives.size(), -1);
    for (size_t t : mine_)
      if (plan.tasks[t].collective >= 0)
        lastOf_[static_cast<size_t>(plan.tasks[t].collective)] = static_cast<int64_t>(t);
    std::vector<char> isMine(plan.tasks.size(), 0);
    for (size_t t : mine_)
      isMine[t] = 1;
    ownDeps_.resize(plan.tasks.size());
    for (size_t t : mine_) {
      (onComputeLane(plan.tasks[t]) ? computeTasks_ : commTasks_).push_back(t);
      // Dependencies on other ranks' tasks are kept by the messages, except
      // one: waiting for a collective to finish (its last task may not involve
      // this rank, e.g. the fold-out of halving-doubling) means waiting for
      // this rank's last task of it.
      for (int d : plan.depsOf(plan.tasks[t])) {
        const auto du = static_cast<size_t>(d);
        if (isMine[du]) {
          ownDeps_[t].push_back(d);
        } else if (const int c = plan.tasks[du].collective; c >= 0) {
          const int64_t own = lastOf_[static_cast<size_t>(c)];
          if (own >= 0 && own < static_cast<int64_t>(t))
            ownDeps_[t].push_back(static_cast<int>(own));
        }
      }
    }
    done_.assign(plan.tasks.size(), 0);
    timing_.resize(plan.tasks.size());
    // The mean over the global batch's positions (one per example for a
    // classifier, T per sequence for a language model), as one worker's
    // Model takes it by default.
    model_.setLossNormalizer(double(k_) * b_ * positions());
    // ps: this rank's communication tasks job by job, and the tag of rank
    // 0's i-th choice (that of the i-th job's first server update: a task
    // that sends nothing, so no transfer uses its tag).
    serveByJob_ = !plan.jobs.empty() && k_ > 1;
    jobTasks_.resize(plan.jobs.size());
    for (size_t t : commTasks_) {
      if (plan.tasks[t].job < 0)
        serveByJob_ = false;
      else
        jobTasks_[static_cast<size_t>(plan.tasks[t].job)].push_back(t);
    }
    for (const auto& j : plan.jobs) {
      int tag = tagOf(j.lastTask);
      for (uint32_t t = j.firstTask; t <= j.lastTask; ++t)
        if (plan.tasks[t].kind == TaskKind::kUpdate) {
          tag = tagOf(t);
          break;
        }
      decisionTag_.push_back(tag);
    }
    keyOf_.assign(net.layers.size(), -1);
    // A dedicated server's model holds its chunks' current weights (it runs
    // no forward): staleness is the workers' matter.
    if (plan.scenario.strategy == Strategy::kPs && k_ > 1 && !server())
      stale_ = plan.scenario.options.staleness;
    if (stale_ > 0) {
      makeKeys();
      for (const auto& [first, key] : keys_)
        pulledUpTo_[first] = -1;
    }
  }

  nn::Model& model() { return model_; }
  // A ps plan's dedicated server (ranks K..K+N-1): no examples, no compute;
  // it sums, updates and sends its chunk of every key.
  bool server() const { return w_ >= k_; }

  // Runs the plan once: training steps firstStep, firstStep + 1, ... (one
  // step, or a ps plan's steps back to back). Returns this rank's
  // measurements per step; a step's `seconds` is the time from the end of
  // the step before on this rank (from the start for the first) to the end
  // of its own last task.
  std::vector<Measured> run(int firstStep) {
    const int n = plan_.iterations;
    for (int s = firstStep; s < firstStep + n; ++s)
      if (opt_.failRank == w_ && opt_.failStep == s)
        throw RunFailure(
            fmt::format("injected fault at step {} (--fail-rank {} --fail-step {})", s, w_, s));
    for (int s = firstStep; s < firstStep + n; ++s)
      if (opt_.hangRank == w_ && opt_.hangStep == s) {
        step_ = s;
        hang();
      }
    firstStep_ = firstStep;
    step_ = firstStep;
    prepared_ = -1;
    lossShares_.assign(static_cast<size_t>(n), 0.0);
    std::vector<Measured> ms(static_cast<size_t>(n));
    model_.zeroGradients();
    prepare(0);
    // The ranks start the step together. Making a step's examples is the
    // data loader's work, not the step's, and it takes each rank its own
    // time (the host's synthetic ImageNet batch of 64 took 0.1-0.3 s): a rank
    // would wait for the slowest in its first transfer, and that wait would
    // count as the step's communication (alexnet-owt ring, 2 workers on one
    // H100: steps of 17.5 to 53.9 ms for ~17 ms of work).
    if (world_ > 1)
      barrier(comm_);
    // Two lanes, as the Plan's resources: this thread runs the compute and
    // update tasks, a communication thread the transfers and sums (and a ps
    // server's updates), each in Plan order and each task once its own
    // dependencies on this rank are done. So gradients travel while backprop
    // goes on (overlap), a push returns at once and whatever needs the data
    // (the update, the next round's forward, a ps step's next forward of the
    // layer: PullWait) waits for it.
    // Time 0: compute and update tasks are timed by marks on the backend (the
    // GPU's own clock on CUDA, whose kernels run after the host enqueued
    // them), communication on the host clock from the same origin.
    const auto t0 = timer_.start();
    std::fill(done_.begin(), done_.end(), 0);
    marks_.assign(plan_.tasks.size(), {-1, -1});
    error_ = nullptr;
    std::thread commLane([&] { lane(t0, true, ms); });
    lane(t0, false, ms);
    commLane.join();
    if (error_)
      std::rethrow_exception(error_);
    timer_.finish();
    const double total = seconds(t0);
    std::vector<double> end(static_cast<size_t>(n), 0);
    for (size_t t : computeTasks_) {
      const auto [a, b] = marks_[t];
      timing_[t] = {timer_.seconds(a), timer_.seconds(b)};
      const double d = timing_[t].end - timing_[t].start;
      const Task& task = plan_.tasks[t];
      auto& m = ms[static_cast<size_t>(task.iteration)];
      if (task.kind == TaskKind::kUpdate)
        m.compute.update += Seconds(d);
      else
        (task.phase == Phase::kFwd       ? m.compute.fwd
         : task.phase == Phase::kBwdData ? m.compute.bwdData
                                         : m.compute.bwdWeights) += Seconds(d);
    }
    Intervals allCompute, allComm;  // each lane's tasks, in order: sorted and disjoint
    for (size_t t : mine_) {
      const auto& iv = timing_[t];
      const auto it = static_cast<size_t>(plan_.tasks[t].iteration);
      end[it] = std::max(end[it], iv.end);
      (onComputeLane(plan_.tasks[t]) ? allCompute : allComm).push_back({iv.start, iv.end});
    }
    // A step ends when its last task on this rank does; one step alone ends
    // when the rank's work does.
    if (n == 1)
      end[0] = total;
    for (int i = 0; i < n; ++i) {
      auto& m = ms[static_cast<size_t>(i)];
      const double from = i > 0 ? end[static_cast<size_t>(i - 1)] : 0.0;
      m.seconds = end[static_cast<size_t>(i)] - from;
      m.lossShare = lossShares_[static_cast<size_t>(i)];
      // Exposed communication: communication time in the step's window not
      // overlapped by compute in it.
      const double to = end[static_cast<size_t>(i)];
      const Intervals comm = clip(allComm, from, to);
      m.exposed = length(comm) - overlapSeconds(comm, clip(allCompute, from, to));
    }
    return ms;
  }

  // Before step i's first compute task on this rank: its dropout masks, its
  // examples and labels. A ps step's gradients start from zero layer by
  // layer (compute()): the push of the step before may still be reading the
  // others.
  void prepare(int i) {
    if (server())
      return;
    prepared_ = i;
    const int s = firstStep_ + i;
    step_ = s;
    model_.setStep(static_cast<uint64_t>(s));
    // Own examples for the data-parallel (conv) part.
    const int64_t first = firstExample(s, k_, w_, b_);
    model_.writeInput(dataset_.batch(first, b_));
    if (!owt_)
      model_.setLabels(dataset_.labels(first, b_, positions()));
  }

  // One training step of a one-step plan; returns this rank's measurements.
  Measured step(int s) { return run(s)[0]; }

  // The injected hang (RunOptions::hangRank). The stopped process is killed
  // by whatever ends the job, or by its guard after two timeouts and a minute.
  void hang() {
    if (opt_.hangStopsProcess) {
      stopThisProcessForTest(Seconds(2 * opt_.timeout.value() + 60));
      return;
    }
    while (!comm_.aborted())
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    throw CommError(
        fmt::format("hung at step {} (--hang-rank {} --hang-step {})", step_, w_, step_));
  }

  // Runs one lane's tasks of this run in Plan order (a ps plan's
  // communication lane: job by job, serveJobs).
  void lane(Clock::time_point t0, bool communication, std::vector<Measured>& ms) {
    try {
      if (communication && serveByJob_) {
        serveJobs(t0, ms);
        return;
      }
      for (size_t t : communication ? commTasks_ : computeTasks_)
        if (!runTask(t, t0, communication, ms))
          return;
    } catch (const std::exception& e) {
      {
        std::lock_guard lock(mutex_);
        if (!error_)
          error_ = std::current_exception();
      }
      cv_.notify_all();
      // The other lane may be blocked in a receive: end the world.
      comm_.abort(fmt::format("worker {}: {}", w_, e.what()));
    }
  }

  // ps: the server's thread runs one job (a key's push, server updates and
  // pull) at a time. When it frees, rank 0 starts the job with the biggest
  // priority among those ready on it (its own dependencies done; ties by
  // Plan order, which is the order they become ready, or the reverse for
  // last-ready), the simulator's rule, and sends its choice to every other
  // rank, so all run the jobs' blocking transfers in one order.
  void serveJobs(Clock::time_point t0, std::vector<Measured>& ms) {
    const size_t n = plan_.jobs.size();
    std::vector<char> started(n, 0);
    const bool lifo = plan_.scenario.options.psPriority == PsPriority::kLastReady;
    for (size_t i = 0; i < n; ++i) {
      std::vector<int32_t> choice{-1};
      if (w_ == 0) {
        std::unique_lock lock(mutex_);
        cv_.wait(lock, [&] {
          if (error_)
            return true;
          choice[0] = -1;
          for (size_t j = 0; j < n; ++j) {
            if (started[j] || !jobReady(j))
              continue;
            const int best = choice[0];
            const auto& a = plan_.jobs[j];
            if (best < 0 || a.priority > plan_.jobs[static_cast<size_t>(best)].priority ||
                (a.priority == plan_.jobs[static_cast<size_t>(best)].priority && lifo))
              choice[0] = static_cast<int32_t>(j);
          }
          return choice[0] >= 0;
        });
        if (error_)
          return;
        lock.unlock();
        for (int r = 1; r < world_; ++r)
          comm_.send(r, decisionTag_[i], std::as_bytes(std::span<const int32_t>(choice)));
      } else {
        comm_.recv(0, decisionTag_[i], std::as_writable_bytes(std::span<int32_t>(choice)));
      }
      const auto j = static_cast<size_t>(choice[0]);
      STRATA_ENFORCE(j < n && !started[j]);
      started[j] = 1;
      for (size_t t : jobTasks_[j])
        if (!runTask(t, t0, true, ms))
          return;
    }
  }

  // Under mutex_: this rank's first task of job j may start (a job it takes
  // no part in is ready at once).
  bool jobReady(size_t j) const {
    if (jobTasks_[j].empty())
      return true;
    for (int d : ownDeps_[jobTasks_[j].front()])
      if (!done_[static_cast<size_t>(d)])
        return false;
    return true;
  }

  // Runs task t on its lane once its own dependencies are done; false when
  // the other lane failed.
  bool runTask(size_t t, Clock::time_point t0, bool communication, std::vector<Measured>& ms) {
    {
      std::unique_lock lock(mutex_);
      cv_.wait(lock, [&] {
        if (error_)
          return true;
        for (int d : ownDeps_[t])
          if (!done_[static_cast<size_t>(d)])
            return false;
        return true;
      });
      if (error_)
        return false;
    }
    const Task& task = plan_.tasks[t];
    Measured& m = ms[static_cast<size_t>(task.iteration)];
    if (!communication) {
      if (task.iteration != prepared_)
        prepare(task.iteration);
      // Compute and update: marks on the backend, read after the step.
      const int a = timer_.mark();
      if (task.kind == TaskKind::kCompute)
        compute(task);
      else
        update(task);
      marks_[t] = {a, timer_.mark()};
    } else {
      // The compute lane only enqueued its tasks (a GPU runs them
      // later): wait for the ones this task reads, and only those.
      for (int d : ownDeps_[t])
        if (const int end = marks_[static_cast<size_t>(d)].second; end >= 0)
          timer_.wait(end);
      const double start = seconds(t0);
      if (task.kind == TaskKind::kTransfer)
        transfer(t, task, m);
      else if (task.kind == TaskKind::kReduce)
        reduce(t, task);
      else
        serverUpdate(task);
      const double end = seconds(t0);
      timing_[t] = {start, end};
      m.communication += end - start;
    }
    if (task.collective >= 0 && lastOf_[static_cast<size_t>(task.collective)] == int64_t(t)) {
      endCollective(task.collective);
      endpoints_.erase(task.collective);
      const auto& c = plan_.collectives[static_cast<size_t>(task.collective)];
      if (stale_ > 0 && c.buffer == BufferKind::kWeights) {
        std::lock_guard lock(mutex_);
        auto& newest = pulledUpTo_.at(c.firstLayer);
        newest = std::max(newest, firstStep_ + task.iteration);
      }
    }
    {
      std::lock_guard lock(mutex_);
      done_[t] = 1;
    }
    cv_.notify_all();
    return true;
  }

  const std::vector<size_t>& mine() const { return mine_; }
  // ps with staleness: the most steps a forward ran ahead of its layer's
  // newest landed pull (0: it never ran ahead).
  int stalenessSeen() const { return stalenessSeen_; }
  const std::vector<TaskTiming>& timing() const { return timing_; }

 private:
  static double seconds(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
  }

  nn::ModelOptions modelOptions() const {
    nn::ModelOptions o;
    o.backend = backend_.get();
    o.seed = opt_.seed;
    o.dropout = opt_.dropout;
    if (owt_)
      o.slices = nn::modelParallelSlices(net_, k_, w_);
    return o;
  }

  int positions() const {
    const auto& last = net_.layers.back().outShape;
    return last.h * last.w;
  }

  bool involves(const Task& t) const {
    if (t.kind == TaskKind::kCompute || t.kind == TaskKind::kUpdate)
      return t.worker == w_;
    for (const auto& f : plan_.flowsOf(t))
      if (f.src == w_ || f.dst == w_)
        return true;
    return false;
  }

  // ---- rounds of the FC phase (owt-*) -------------------------------------------
  // The examples of round r, as (worker, rows of that worker's batch), in the
  // order they stack in the round's batch.
  std::vector<std::pair<int, std::pair<int64_t, int64_t>>> roundRows(int r) const {
    std::vector<std::pair<int, std::pair<int64_t, int64_t>>> rows;
    switch (plan_.scenario.strategy) {
      case Strategy::kOwtA:
        for (int v = 0; v < k_; ++v)
          rows.push_back({v, {0, b_}});
        break;
      case Strategy::kOwtB:
        rows.push_back({r, {0, b_}});
        break;
      default:
        for (int v = 0; v < k_; ++v)
          rows.push_back({v, piece(b_, k_, r)});
    }
    return rows;
  }
  int roundBatch(int r) const {
    int64_t n = 0;
    for (const auto& [v, rows] : roundRows(r))
      n += rows.second - rows.first;
    return static_cast<int>(n);
  }
  // Offset in the round's batch of worker v's rows.
  int64_t roundOffset(int r, int v) const {
    int64_t n = 0;
    for (const auto& [u, rows] : roundRows(r)) {
      if (u == v)
        return n;
      n += rows.second - rows.first;
    }
    return -1;
  }
  std::pair<int64_t, int64_t> ownRows(int r, int v) const {
    for (const auto& [u, rows] : roundRows(r))
      if (u == v)
        return rows;
    return {0, 0};
  }

  // Before the first model-parallel layer runs round r: this rank's own rows
  // of the boundary activations go into the round's input (others' arrived by
  // transfer), and the labels are the round's.
  void startRound(int r) {
    const int batch = roundBatch(r);
    auto& in = model_.exchangeInput(mp_, batch);
    const auto own = ownRows(r, w_);
    const int64_t row = net_.layers[static_cast<size_t>(mp_)].inShape.elements();
    // Other workers' rows arrived in this round's staging buffer (a round
    // ahead of the compute, so they cannot land in the input in use).
    {
      std::lock_guard lock(stagingMutex_);  // the communication lane fills later rounds
      if (landed_.erase(r) > 0) {
        const auto& staged = staging_.at(r);
        STRATA_ENFORCE_OP(static_cast<int64_t>(staged.size()), <=, in.elements());
        copyOnStream(staged.data(), in.data(), static_cast<int64_t>(staged.size()));
      }
    }
    if (own.second > own.first) {
      const auto& boundary = model_.output(mp_ - 1);
      copyOnStream(boundary.data() + own.first * row, in.data() + roundOffset(r, w_) * row,
                   (own.second - own.first) * row);
    }
    std::vector<int32_t> labels(static_cast<size_t>(batch) * positions());
    size_t at = 0;
    for (const auto& [v, rows] : roundRows(r))
      for (int64_t e = rows.first; e < rows.second; ++e)
        for (int p = 0; p < positions(); ++p)
          labels[at++] = dataset_.label(firstExample(step_, k_, v, b_) + e);
    model_.setLabels(labels);
  }

  void compute(const Task& task) {
    const int l = task.layer;
    // ps, a later step: its backprop of layer l runs after the step before's
    // job of l's key (the pull before the forward; with staleness a
    // dependency of its own), which is then done with l's gradients.
    if (task.iteration > 0 && task.phase == Phase::kBwdWeights)
      model_.zeroGradientsBeforeBackprop(l);
    if (stale_ > 0 && task.phase == Phase::kFwd && task.iteration > 0)
      stagedWeights(l, firstStep_ + task.iteration);
    if (owt_ && l == mp_ && task.phase == Phase::kFwd)
      startRound(task.round);
    if (owt_ && l > mp_ && task.phase == Phase::kFwd && model_.modelParallel(l) &&
        net_.layers[static_cast<size_t>(l)].hasWeights())
      placeOwnSlice(l, roundBatch(task.round));
    switch (task.phase) {
      case Phase::kFwd:
        model_.forward(l);
        break;
      case Phase::kBwdData:
        // The loss of the examples just through the softmax (this worker's
        // share of them in owt-*), before its backward.
        if (net_.layers[static_cast<size_t>(l)].kind == LayerKind::kSoftmax)
          lossShares_[static_cast<size_t>(task.iteration)] += model_.loss();
        model_.backwardData(l);
        if (owt_ && k_ == 1 && l >= mp_ && model_.modelParallel(l) &&
            net_.layers[static_cast<size_t>(l)].hasWeights())
          keepOwnInputGradient(l, task.round);
        break;
      case Phase::kBwdWeights:
        model_.backwardWeights(l);
        break;
      case Phase::kUpdate:
        break;
    }
  }

  // One worker: the partial input gradient of a model-parallel layer is the
  // whole gradient, with no collective to deliver it; put it where the
  // layer before reads it.
  void keepOwnInputGradient(int l, int round) {
    const auto& partial = model_.exchangeInputGrad(l);
    auto& g = model_.outputGrad(l - 1);
    const int64_t offset =
        l == mp_ ? ownRows(round, w_).first * net_.layers[static_cast<size_t>(l)].inShape.elements()
                 : 0;
    STRATA_ENFORCE_OP(offset + partial.elements(), <=, g.elements());
    copyOnStream(partial.data(), g.data() + offset, partial.elements());
  }

  // n floats from `from` to `to` by the backend, on its stream (accumulate
  // with beta 0 copies; a GPU's kernel, which the compute after it follows):
  // the host touches neither buffer. Compute lane only.
  void copyOnStream(const float* from, float* to, int64_t n) {
    STRATA_ENFORCE(n >= 0 && n <= std::numeric_limits<int>::max());
    const nn::Dims flat{1, 1, 1, static_cast<int>(n)};
    backend_->accumulate(nn::ConstTensorView{from, flat}, nn::TensorView{to, flat}, 0.0f);
  }

  // A later model-parallel layer reads every worker's slice of the layer
  // before it: this rank's own slice is copied in place here.
  void placeOwnSlice(int l, int batch) {
    auto& in = model_.exchangeInput(l, batch);
    backend_->copyIntoChannels(model_.output(l - 1).view(), in.view(), model_.slice(l - 1).begin);
  }

  void update(const Task& task) {
    const bool fcPart = owt_ && task.layer >= mp_;
    for (int l = task.layer; l <= task.lastLayer; ++l)
      if (net_.layers[static_cast<size_t>(l)].hasWeights()) {
        model_.update(l, opt_.learningRate, opt_.momentum);
        // FC gradients accumulate over the rounds; after a per-round update
        // the next round starts from zero.
        if (fcPart)
          model_.zeroGradients(l);
      }
  }

  // A ps server's update of its shard: chunk `part` of the layers' parameters
  // (the chunk the push summed into this rank's gradients), as the pull's
  // endpoint cuts them.
  void serverUpdate(const Task& task) {
    const auto n = static_cast<int64_t>(model_.parametersNoWait(task.layer, task.lastLayer).size());
    const auto [begin, end] = piece(n, task.shards > 0 ? task.shards : k_, task.part);
    if (stale_ == 0) {
      // Synchronous: the server's chunk is the model's own (every worker
      // holds the same weights between steps).
      model_.updateShard(task.layer, task.lastLayer, begin, end, opt_.learningRate, opt_.momentum);
      return;
    }
    // With staleness the model holds older weights: the server keeps its
    // own, updates them as updateShard would, and stages its chunk for
    // this step's pull.
    auto& key = keys_.at(task.layer);
    const auto grads = model_.gradientsNoWait(task.layer, task.lastLayer)
                           .subspan(static_cast<size_t>(begin), static_cast<size_t>(end - begin));
    backend_->sgdMomentum(key.weights, key.momentum, grads, opt_.learningRate, opt_.momentum, 0);
    std::copy(key.weights.begin(), key.weights.end(),
              key.slot(task.iteration).begin() + static_cast<std::ptrdiff_t>(begin));
  }

  // A ps key (the layers of one push) on this rank with staleness: its
  // server's chunk of the weights and momentum, and S + 1 staging copies of
  // the key's weights, one per step of delay (step t's pull lands in slot
  // t mod (S + 1); the forward of step t + 1 + S copies it out).
  struct Key {
    int firstLayer = 0, lastLayer = 0;
    std::vector<float> weights, momentum;
    std::vector<std::vector<float>> slots;
    std::span<float> slot(int step) { return slots[static_cast<size_t>(step) % slots.size()]; }
  };

  void makeKeys() {
    for (const auto& j : plan_.jobs) {
      if (keys_.count(j.firstLayer))
        continue;
      Key key;
      key.firstLayer = j.firstLayer;
      key.lastLayer = j.lastLayer;
      const auto all = model_.parametersNoWait(j.firstLayer, j.lastLayer);
      const auto [begin, end] = piece(static_cast<int64_t>(all.size()), k_, w_);
      key.weights.assign(all.begin() + begin, all.begin() + end);
      key.momentum.assign(key.weights.size(), 0.0f);
      key.slots.assign(static_cast<size_t>(stale_) + 1, std::vector<float>(all.size()));
      for (int l = j.firstLayer; l <= j.lastLayer; ++l)
        keyOf_[static_cast<size_t>(l)] = j.firstLayer;
      keys_.emplace(j.firstLayer, std::move(key));
    }
  }

  // With staleness, before step s's forward of layer l: the weights of step
  // s - 1 - S's pull, from its slot (the initial weights before that), and
  // how many steps the newest pull that has landed is behind s - 1.
  void stagedWeights(int l, int s) {
    const int first = keyOf_[static_cast<size_t>(l)];
    if (first < 0)
      return;
    {
      std::lock_guard lock(mutex_);
      const int newest = pulledUpTo_.at(first);
      stalenessSeen_ = std::max(stalenessSeen_, s - 1 - newest);
    }
    const int from = s - 1 - stale_;
    if (from < 0)
      return;
    auto& key = keys_.at(first);
    const auto base = model_.paramBlock(key.firstLayer).offset;
    const auto b = model_.paramBlock(l);
    const auto src =
        key.slot(from).subspan(static_cast<size_t>(b.offset - base), static_cast<size_t>(b.size()));
    auto dst = model_.parameters(l);
    std::copy(src.begin(), src.end(), dst.begin());
  }

  // ---- collectives ------------------------------------------------------------
  Endpoint& endpoint(int c) {
    auto it = endpoints_.find(c);
    if (it != endpoints_.end())
      return *it->second;
    auto e = makeEndpoint(plan_.collectives[static_cast<size_t>(c)]);
    return *endpoints_.emplace(c, std::move(e)).first->second;
  }

  // `n` floats of staging for slot `slot` of collective `collective`, in the
  // backend's memory, contents unspecified; the same memory every step.
  // Communication lane only.
  std::span<float> stage(int collective, int slot, size_t n) {
    auto& buffer = stage_.try_emplace({collective, slot}, backend_->memory()).first->second;
    buffer.resizeUninitialized(n);
    return buffer.span();
  }

  int indexOf(const Collective& c) const {
    const auto i = &c - plan_.collectives.data();
    STRATA_ENFORCE(i >= 0 && i < static_cast<std::ptrdiff_t>(plan_.collectives.size()));
    return static_cast<int>(i);
  }

  std::unique_ptr<Endpoint> makeEndpoint(const Collective& c) {
    const int segs = c.segments;
    switch (c.buffer) {
      case BufferKind::kWeightGradients: {
        // No wait for the whole backend: the communication lane waited for
        // the tasks that produced these gradients (lane()).
        return std::make_unique<FlatEndpoint>(comm_.ops(),
                                              model_.gradientsNoWait(c.firstLayer, c.lastLayer),
                                              c.parts, segs, 1, false);
      }
      case BufferKind::kWeights: {
        if (stale_ > 0) {
          auto& key = keys_.at(c.firstLayer);
          const int it = plan_.tasks[c.firstTask].iteration;
          return std::make_unique<PullEndpoint>(key.weights, key.slot(it), c.parts);
        }
        // Synchronous: the servers' updated chunks land in place. The
        // compute lane reads these weights again only in the next step's
        // forward, which waits for the pull (PullWait).
        return std::make_unique<FlatEndpoint>(comm_.ops(),
                                              model_.parametersNoWait(c.firstLayer, c.lastLayer),
                                              c.parts, segs, 1, false);
      }
      case BufferKind::kLossStatistics:
        return std::make_unique<FlatEndpoint>(comm_.ops(), model_.softmaxStats(), c.parts, segs, 2,
                                              true);
      case BufferKind::kActivations:
        return activationsEndpoint(c);
      case BufferKind::kActivationGradients:
        return gradientsEndpoint(c);
    }
    throw InvariantError("unknown buffer kind");
  }

  // Activations: the conv/FC boundary (round inputs) or an FC slice (inner
  // allgather).
  std::unique_ptr<Endpoint> activationsEndpoint(const Collective& c) {
    const int r = c.round;
    if (c.firstLayer == mp_) {
      // Boundary: this rank sends its round rows of its own boundary output;
      // rows from v land at v's offset in the round's input.
      const int64_t row = net_.layers[static_cast<size_t>(mp_)].inShape.elements();
      std::span<float> staged;
      {
        std::lock_guard lock(stagingMutex_);
        // std::map: the element stays put while others come and go. Kept
        // from step to step (an allocation per round costs a device-wide
        // cudaFree on a GPU); this step's rows are in it once `landed_`
        // names the round.
        auto& buffer = staging_.try_emplace(r, backend_->memory()).first->second;
        buffer.resizeUninitialized(static_cast<size_t>(roundBatch(r) * row));
        staged = buffer.span();
        landed_.insert(r);
      }
      auto& boundary = const_cast<nn::Tensor&>(model_.output(mp_ - 1));
      return std::make_unique<RowsEndpoint>(
          comm_.ops(), boundary.span(), row, [this, r](int) { return ownRows(r, w_); }, staged,
          [this, r](int v) {
            const int64_t at = roundOffset(r, v);
            const auto rows = ownRows(r, v);
            return std::pair<int64_t, int64_t>{at, at + rows.second - rows.first};
          },
          c.segments);
    }
    // Inner allgather of layer firstLayer's output slices into the next
    // layer's input: staged per source, placed when the collective finishes.
    const int producer = c.firstLayer;
    const int batch = roundBatch(r);
    return std::make_unique<SliceGather>(*this, indexOf(c), producer, batch, c.segments);
  }

  std::unique_ptr<Endpoint> gradientsEndpoint(const Collective& c) {
    const int r = c.round;
    if (c.firstLayer == mp_ - 1) {
      // Gradients of the boundary activations: every rank's partial gradient
      // (exchangeInputGrad of the first FC layer, round batch x A) goes, by
      // rows, to the owners of the examples, which sum them into outputGrad.
      return std::make_unique<BoundaryReturn>(*this, indexOf(c), r, c.segments);
    }
    // Inner reduce-scatter: partial gradients of the whole input of layer
    // firstLayer + 1 go, by channel slice, to the producers of the slices.
    return std::make_unique<SliceScatter>(*this, indexOf(c), c.firstLayer, roundBatch(r),
                                          c.segments);
  }

  // Staged allgather of channel slices (inner FC exchange).
  class SliceGather final : public Endpoint {
   public:
    SliceGather(Worker& w, int collective, int producer, int batch, int segments)
        : w_(w), producer_(producer), batch_(batch), segments_(segments) {
      for (int v = 0; v < w.k_; ++v) {
        const auto s =
            nn::evenSlice(w.net_.layers[static_cast<size_t>(producer)].outShape.c, w.k_, v);
        staged_.push_back(w.stage(collective, v, static_cast<size_t>(batch) * s.size() * area()));
      }
      // This rank's own slice, copied now: the compute lane moves on.
      const auto& out = w.model_.output(producer);
      auto own = staged_[static_cast<size_t>(w.w_)];
      w.comm_.ops().copy(own.data(), out.data(), own.size_bytes());
    }
    std::span<const float> send(int, int segment, int) override {
      return seg(staged_[static_cast<size_t>(w_.w_)], segment);
    }
    std::span<float> land(int, int segment, int src) override {
      return seg(staged_[static_cast<size_t>(src)], segment);
    }
    size_t size(int, int segment, int src) override {
      return seg(staged_[static_cast<size_t>(src)], segment).size();
    }
    void reduce(int, int, int, std::span<const float>) override {
      throw InvariantError("an allgather has no sum");
    }
    void finish() override {
      auto& in = w_.model_.exchangeInput(producer_ + 1, batch_);
      const auto& shape = w_.net_.layers[static_cast<size_t>(producer_)].outShape;
      STRATA_ENFORCE(in.dims().n == batch_ && in.dims().h == shape.h && in.dims().w == shape.w);
      const size_t plane = static_cast<size_t>(area()) * sizeof(float);
      for (int v = 0; v < w_.k_; ++v) {
        if (v == w_.w_)
          continue;  // own slice placed before the forward
        // Slice v's channels of every example: rows of s.size() planes.
        const auto s = nn::evenSlice(shape.c, w_.k_, v);
        w_.comm_.ops().copyRows(
            in.data() + int64_t{s.begin} * area(), static_cast<size_t>(in.dims().c) * plane,
            staged_[static_cast<size_t>(v)].data(), static_cast<size_t>(s.size()) * plane,
            static_cast<size_t>(s.size()) * plane, static_cast<size_t>(batch_));
      }
    }

   private:
    int64_t area() const {
      const auto& s = w_.net_.layers[static_cast<size_t>(producer_)].outShape;
      return int64_t{s.h} * s.w;
    }
    std::span<float> seg(std::span<float> s, int segment) const {
      return sub(s, piece(static_cast<int64_t>(s.size()), segments_, segment));
    }
    Worker& w_;
    int producer_, batch_, segments_;
    std::vector<std::span<float>> staged_;  // per rank: Worker::stage memory
  };

  // Reduce-scatter of partial input gradients by channel slice.
  class SliceScatter final : public Endpoint {
   public:
    SliceScatter(Worker& w, int collective, int producer, int batch, int segments)
        : w_(w), producer_(producer), batch_(batch), segments_(segments) {
      const auto& shape = w.net_.layers[static_cast<size_t>(producer)].outShape;
      const auto& partial = w.model_.exchangeInputGrad(producer + 1);
      STRATA_ENFORCE(partial.dims().n == batch && partial.dims().c == shape.c &&
                     partial.dims().h == shape.h && partial.dims().w == shape.w);
      const size_t plane = static_cast<size_t>(shape.h) * shape.w * sizeof(float);
      for (int v = 0; v < w.k_; ++v) {
        // Slice v's channels of every example, packed.
        const auto s = nn::evenSlice(shape.c, w.k_, v);
        const auto st =
            w.stage(collective, v, static_cast<size_t>(batch) * s.size() * shape.h * shape.w);
        w.comm_.ops().copyRows(st.data(), static_cast<size_t>(s.size()) * plane,
                               partial.data() + int64_t{s.begin} * shape.h * shape.w,
                               static_cast<size_t>(shape.c) * plane,
                               static_cast<size_t>(s.size()) * plane, static_cast<size_t>(batch));
        staged_.push_back(st);
      }
    }
    std::span<const float> send(int, int segment, int dst) override {
      return seg(staged_[static_cast<size_t>(dst)], segment);
    }
    std::span<float> land(int, int, int) override {
      throw InvariantError("a reduce-scatter sums what it receives");
    }
    size_t size(int, int segment, int) override {
      return seg(staged_[static_cast<size_t>(w_.w_)], segment).size();
    }
    void reduce(int, int segment, int, std::span<const float> data) override {
      w_.comm_.ops().add(seg(staged_[static_cast<size_t>(w_.w_)], segment), data);
    }
    void finish() override {
      auto& g = w_.model_.outputGrad(producer_);
      const auto own = staged_[static_cast<size_t>(w_.w_)];
      STRATA_ENFORCE_OP(static_cast<int64_t>(own.size()), <=, g.elements());
      w_.comm_.ops().copy(g.data(), own.data(), own.size_bytes());
    }

   private:
    std::span<float> seg(std::span<float> s, int segment) const {
      return sub(s, piece(static_cast<int64_t>(s.size()), segments_, segment));
    }
    Worker& w_;
    int producer_, batch_, segments_;
    std::vector<std::span<float>> staged_;  // per rank: Worker::stage memory
  };

  // Boundary gradients back to the owners of the round's examples.
  class BoundaryReturn final : public Endpoint {
   public:
    BoundaryReturn(Worker& w, int collective, int round, int segments)
        : w_(w), round_(round), segments_(segments) {
      row_ = w.net_.layers[static_cast<size_t>(w.mp_)].inShape.elements();
      // Copied: the compute lane may start the next round before all is sent.
      const auto& g = w.model_.exchangeInputGrad(w.mp_);
      partial_ = w.stage(collective, -1, static_cast<size_t>(g.elements()));
      w.comm_.ops().copy(partial_.data(), g.data(), partial_.size_bytes());
      const auto own = w.ownRows(round, w.w_);
      const int64_t at = w.roundOffset(round, w.w_);
      const int64_t n = std::max<int64_t>(0, (own.second - own.first) * row_);
      acc_ = w.stage(collective, -2, static_cast<size_t>(n));
      if (n > 0)
        w.comm_.ops().copy(acc_.data(), partial_.data() + at * row_, acc_.size_bytes());
    }
    std::span<const float> send(int, int segment, int dst) override {
      const auto rows = w_.ownRows(round_, dst);
      const int64_t at = w_.roundOffset(round_, dst);
      return seg(sub(partial_, {at * row_, (at + rows.second - rows.first) * row_}), segment);
    }
    std::span<float> land(int, int, int) override {
      throw InvariantError("gradients coming back are summed");
    }
    size_t size(int, int segment, int) override { return seg(acc_, segment).size(); }
    void reduce(int, int segment, int, std::span<const float> data) override {
      w_.comm_.ops().add(seg(acc_, segment), data);
    }
    void finish() override {
      if (acc_.empty())
        return;
      const auto own = w_.ownRows(round_, w_.w_);
      auto& g = w_.model_.outputGrad(w_.mp_ - 1);
      STRATA_ENFORCE_OP(own.first * row_ + static_cast<int64_t>(acc_.size()), <=, g.elements());
      w_.comm_.ops().copy(g.data() + own.first * row_, acc_.data(), acc_.size_bytes());
    }

   private:
    std::span<float> seg(std::span<float> s, int segment) const {
      return sub(s, piece(static_cast<int64_t>(s.size()), segments_, segment));
    }
    Worker& w_;
    int round_, segments_;
    int64_t row_ = 0;
    std::span<float> partial_;  // Worker::stage memory
    std::span<float> acc_;
  };

  // Runs this rank's part of a transfer step: sends and receives paired by
  // distance so blocking calls never deadlock.
  void transfer(size_t t, const Task& task, Measured& m) {
    auto& e = endpoint(task.collective);
    const bool summed =
        t + 1 < plan_.tasks.size() && plan_.tasks[t + 1].kind == TaskKind::kReduce &&
        plan_.tasks[t + 1].collective == task.collective &&
        plan_.tasks[t + 1].flowBegin == task.flowBegin && plan_.tasks[t + 1].step == task.step &&
        plan_.tasks[t + 1].segment == task.segment;
    std::vector<int> sendPart(static_cast<size_t>(world_), -1),
        recvPart(static_cast<size_t>(world_), -1);
    for (const auto& f : plan_.flowsOf(task)) {
      if (f.src == w_)
        sendPart[static_cast<size_t>(f.dst)] = f.part;
      if (f.dst == w_)
        recvPart[static_cast<size_t>(f.src)] = f.part;
    }
    const int tag = tagOf(t);
    const int seg = std::max(task.segment, 0);
    e.setParts(partsCovered(task));
    // Scratch stays allocated from transfer to transfer (grow-only, per
    // source): a fresh buffer per segment cost an allocation and a zero-fill,
    // and on a GPU a cudaMallocManaged and a device-wide cudaFree, ~0.7 ms
    // per 4 MB segment on an H100, more than the copy.
    summedFrom_.clear();
    scratchPart_.clear();
    for (int i = 1; i < world_; ++i) {
      const int dst = (w_ + i) % world_, src = (w_ - i + world_) % world_;
      const int sp = sendPart[static_cast<size_t>(dst)], rp = recvPart[static_cast<size_t>(src)];
      std::span<const float> out;
      std::span<float> in;
      if (sp >= 0)
        out = e.send(sp, seg, dst);
      if (rp >= 0) {
        if (summed) {
          // In the backend's memory, so a GPU's reduce-add kernel reads it.
          auto& buf = scratch_.try_emplace(src, backend_->memory()).first->second;
          buf.resizeUninitialized(e.size(rp, seg, src));
          in = buf.span();
          summedFrom_.push_back(src);
        } else {
          in = e.land(rp, seg, src);
        }
      }
      if (sp >= 0 && rp >= 0) {
        comm_.sendRecv(dst, tag, out, src, tag, in);
      } else if (sp >= 0) {
        comm_.send(dst, tag, out);
      } else if (rp >= 0) {
        comm_.recv(src, tag, in);
      }
      m.sent += double(out.size()) * sizeof(float);
      m.received += double(in.size()) * sizeof(float);
      if (rp >= 0)
        scratchPart_[src] = rp;
    }
    std::sort(summedFrom_.begin(), summedFrom_.end());  // sums in rank order
  }

  // Parts (blocks) one flow of `task` carries: several in halving-doubling.
  int partsCovered(const Task& task) const {
    const auto& c = plan_.collectives[static_cast<size_t>(task.collective)];
    if (c.algorithm != toString(AllreduceAlgorithm::kHalvingDoubling) || c.parts <= 1)
      return 1;
    return static_cast<int>(std::lround(task.bytes.value() / (c.bytes.value() / c.parts)));
  }

  void reduce(size_t, const Task& task) {
    auto& e = endpoint(task.collective);
    const int seg = std::max(task.segment, 0);
    e.setParts(partsCovered(task));
    // A dedicated server's gradients are the sum of the workers' chunks
    // alone: it starts from zero (its buffer holds the step before's sum).
    if (server() && !summedFrom_.empty()) {
      const int src = summedFrom_.front();
      const auto dst = e.land(scratchPart_[src], seg, src);
      std::fill(dst.begin(), dst.end(), 0.0f);
    }
    // Sources in a fixed order (by rank) so every run sums alike.
    for (int src : summedFrom_)
      e.reduce(scratchPart_[src], seg, src, scratch_.at(src).span());
  }

  void endCollective(int c) {
    auto it = endpoints_.find(c);
    if (it != endpoints_.end())
      it->second->finish();
  }

  Communicator& comm_;
  const Plan& plan_;
  const Network& net_;
  const RunOptions& opt_;
  int k_, world_, w_, b_;  // workers, ranks (workers, then ps servers), this rank, batch
  bool owt_;
  int mp_;
  nn::SyntheticDataset dataset_;
  std::unique_ptr<nn::Backend> backend_;  // this worker's, on RunOptions::device
  nn::Model model_;
  WorkTimer timer_;                         // times compute and update tasks on the backend
  std::vector<std::pair<int, int>> marks_;  // per task: timer marks around it (-1: none)
  std::vector<size_t> mine_;
  std::vector<size_t> computeTasks_, commTasks_;
  std::vector<std::vector<int>> ownDeps_;
  std::vector<char> done_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::exception_ptr error_;
  std::vector<int64_t> lastOf_;
  std::vector<TaskTiming> timing_;
  std::map<int, std::unique_ptr<Endpoint>> endpoints_;
  std::map<int, nn::Buffer<float>> scratch_;  // received data to be summed, per source
  std::vector<int> summedFrom_;               // the sources summed in this transfer
  std::map<int, nn::Buffer<float>> staging_;  // round -> boundary rows received
  std::set<int> landed_;                      // rounds whose rows this step staged
  // Staging of the owt exchanges, per (collective, slot), kept from step to
  // step in the backend's memory (stage()).
  std::map<std::pair<int, int>, nn::Buffer<float>> stage_;
  std::mutex stagingMutex_;
  std::map<int, int> scratchPart_;
  int step_ = 0;
  int firstStep_ = 0;
  int prepared_ = -1;                          // the step whose inputs the model holds
  std::vector<double> lossShares_;             // per step of the plan
  int stale_ = 0;                              // ps: StrategyOptions::staleness (0 for the others)
  std::map<int, Key> keys_;                    // ps with staleness: by first layer
  std::vector<int> keyOf_;                     // per layer: its key's first layer, or -1
  bool serveByJob_ = false;                    // ps: the communication lane runs job by job
  std::vector<std::vector<size_t>> jobTasks_;  // ps: this rank's tasks of each job
  std::vector<int> decisionTag_;               // ps: the tag of rank 0's i-th choice
  std::map<int, int> pulledUpTo_;              // per key: the newest step whose pull landed here
  int stalenessSeen_ = 0;
};

// Per-rank figures of one step, as sent to rank 0.
struct StepStats {
  double fwd, bwdData, bwdWeights, update, communication, exposed, sent, received, seconds, loss;
};

StepStats statsOf(const Measured& m) {
  return {m.compute.fwd.value(),
          m.compute.bwdData.value(),
          m.compute.bwdWeights.value(),
          m.compute.update.value(),
          m.communication,
          m.exposed,
          m.sent,
          m.received,
          m.seconds,
          m.lossShare};
}

template <class T>
std::span<const std::byte> bytesOf(const std::vector<T>& v) {
  return std::as_bytes(std::span<const T>(v));
}
template <class T>
std::span<std::byte> writableBytesOf(std::vector<T>& v) {
  return std::as_writable_bytes(std::span<T>(v));
}

// Every rank's value of `mine` on rank 0 (others get their own only).
template <class T>
std::vector<T> gatherToRoot(Communicator& comm, const T& mine, int tag) {
  std::vector<T> all(static_cast<size_t>(comm.size()));
  all[static_cast<size_t>(comm.rank())] = mine;
  if (comm.rank() == 0) {
    for (int r = 1; r < comm.size(); ++r) {
      std::vector<T> one(1);
      comm.recv(r, tag, writableBytesOf(one));
      all[static_cast<size_t>(r)] = one[0];
    }
  } else {
    comm.send(0, tag, bytesOf(std::vector<T>{mine}));
  }
  return all;
}

void fnv(uint64_t& h, const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
}
template <class T>
void fnv(uint64_t& h, const T& v) {
  fnv(h, &v, sizeof(v));
}

}  // namespace

void checkRunnable(const Network& network, const Scenario& sc) {
  if (sc.options.element != ElementType::kFp32)
    throw OptionError("--element", "the CPU executor computes in fp32 only");
  if (sc.strategy == Strategy::kPs && sc.options.psNode > 0 && sc.options.staleness > 0 &&
      sc.workers > 1)
    throw OptionError("--staleness",
                      "the executor runs two-level ps (--ps-node) with staleness 0 only; the "
                      "model and the simulator price S > 0");
  // One level of workers (threads, or ranks): no nodes to be hierarchical
  // over, and no cluster to choose by.
  if (const auto a = syncAllreduce(sc);
      a && (*a == AllreduceAlgorithm::kHierarchical || *a == AllreduceAlgorithm::kAuto))
    throw OptionError(isModelParallel(sc.strategy) ? "--conv-sync" : "--allreduce",
                      fmt::format("the executor runs one level of workers (threads, or MPI "
                                  "ranks) and runs ring, tree, halving-doubling, direct and "
                                  "naive; {} is priced and simulated (strata predict, strata "
                                  "simulate)",
                                  toString(*a)));
  for (size_t i = 0; i < network.layers.size(); ++i)
    if (network.layers[i].kind == LayerKind::kRnn)
      throw ConfigError(network.sourceFile, network.layers[i].configLine,
                        fmt::format("layers[{}]", i),
                        fmt::format("layer '{}' is an rnn, which the executor cannot run yet",
                                    network.layers[i].name));
}

uint64_t configHash(const Network& network, const Scenario& sc, const RunOptions& o) {
  uint64_t h = 1469598103934665603ull;
  fnv(h, network.name.data(), network.name.size());
  for (const auto& l : network.layers) {
    fnv(h, l.kind);
    fnv(h, l.outShape);
    fnv(h, l.params);
  }
  fnv(h, sc.strategy);
  fnv(h, sc.workers);
  fnv(h, sc.batchPerWorker);
  fnv(h, sc.options.overlap);
  fnv(h, sc.options.fcUpdate);
  fnv(h, sc.options.segment);
  fnv(h, sc.options.bucket);
  fnv(h, sc.options.element);
  fnv(h, sc.options.convSync);
  fnv(h, sc.options.gradientSync);
  fnv(h, sc.options.psPriority);
  fnv(h, sc.options.staleness);
  fnv(h, sc.options.psServers);
  fnv(h, sc.options.psNode);
  fnv(h, o.steps);
  fnv(h, o.learningRate);
  fnv(h, o.momentum);
  fnv(h, o.seed);
  fnv(h, o.dropout);
  return h;
}

RunResult runWorker(Communicator& comm, const Plan& given, const Network& network,
                    const RunOptions& options) {
  // A ps plan holds every step of the run, back to back (any other plan one
  // step, run once per step): one lowered for another number of steps is
  // lowered again for this run.
  Plan relowered;
  if (given.iterations > 1 && given.iterations != options.steps && options.steps >= 1 &&
      options.steps <= kMaxRunSteps)
    relowered = lowerToPlan(network, given.scenario, options.steps);
  const Plan& plan = relowered.tasks.empty() ? given : relowered;
  const int k = plan.scenario.workers;
  // Ranks: the workers, then a ps plan's dedicated servers.
  const int world = k + plan.servers;
  if (comm.size() != world)
    throw OptionError(
        "--workers",
        plan.servers > 0
            ? fmt::format("the plan has {} workers and {} ps server{} ({} ranks) but {} ranks "
                          "were started",
                          k, plan.servers, plan.servers == 1 ? "" : "s", world, comm.size())
            : fmt::format("the plan has {} workers but {} ranks were started", k, comm.size()));
  checkRunnable(network, plan.scenario);
  checkRunOptions(options);
  checkRunDevice(options, k);
  if (plan.scenario.strategy == Strategy::kPs && plan.scenario.options.staleness > 0 &&
      options.device != Device::kCpu)
    throw OptionError("--staleness",
                      "the GPU executor runs ps with staleness 0 only (the CPU executor, the "
                      "model and the simulator take S > 0)");
  if (plan.servers > 0 && options.device != Device::kCpu)
    throw OptionError("--ps-servers",
                      "the GPU executor runs ps with its servers sharded over the workers only "
                      "(the CPU executor, the model and the simulator take dedicated servers)");
  comm.setTimeout(options.timeout);
  if (plan.scenario.options.element != ElementType::kFp32)
    throw OptionError("--element", "the CPU executor computes in fp32 only");

  // Ranks started with different configs would compute nonsense together.
  const uint64_t hash = configHash(network, plan.scenario, options);
  const auto hashes = gatherToRoot(comm, hash, kTagHash);
  // verdict: (first rank that differs + 1 or 0, rank 0's hash, that rank's hash)
  std::vector<uint64_t> verdict{0, hash, 0};
  if (comm.rank() == 0) {
    for (int r = world - 1; r >= 1; --r)
      if (hashes[static_cast<size_t>(r)] != hash)
        verdict = {uint64_t(r) + 1, hash, hashes[static_cast<size_t>(r)]};
    for (int r = 1; r < world; ++r)
      comm.send(r, kTagVerdict, bytesOf(verdict));
  } else {
    comm.recv(0, kTagVerdict, writableBytesOf(verdict));
  }
  if (verdict[0] > 0)
    throw ConfigMismatch(fmt::format(
        "rank {} was started with a different configuration than rank 0 (config hash {:016x} vs "
        "{:016x}); start every rank with the same network, strategy, workers, batch, options and "
        "run options",
        verdict[0] - 1, verdict[2], verdict[1]));

  Worker worker(comm, plan, network, options);
  const bool unrolled = plan.iterations > 1;
  RunResult result;
  std::vector<std::vector<StepStats>> stats;     // rank 0: [step][rank]
  std::vector<std::vector<TaskTiming>> timings;  // this rank: [pass][own task]
  for (int first = 0; first < options.steps; first += plan.iterations) {
    const std::vector<Measured> ms = worker.run(first);
    std::vector<TaskTiming> own;
    for (size_t t : worker.mine())
      own.push_back(worker.timing()[t]);
    timings.push_back(std::move(own));
    for (size_t i = 0; i < ms.size(); ++i) {
      const int s = first + static_cast<int>(i);
      const auto all = gatherToRoot(comm, statsOf(ms[i]), kTagStats);
      if (comm.rank() == 0) {
        // The workers' step (a server computes no loss and ends with its
        // last pull, which the workers' step includes).
        StepLog log{s, 0, 0};
        for (int r = 0; r < k; ++r) {
          log.loss += all[static_cast<size_t>(r)].loss;
          log.seconds = std::max(log.seconds, all[static_cast<size_t>(r)].seconds);
        }
        result.steps.push_back(log);
        stats.push_back(all);
        if (options.onStep)
          options.onStep(s, log.loss, log.seconds);
      }
    }
  }

  // The measured step: the median (by time) of the steps after warmup.
  std::vector<int32_t> chosen{0};
  if (comm.rank() == 0) {
    std::vector<int> order;
    for (int s = std::min(options.warmup, options.steps - 1); s < options.steps; ++s)
      order.push_back(s);
    std::sort(order.begin(), order.end(), [&](int a, int b) {
      return result.steps[static_cast<size_t>(a)].seconds <
             result.steps[static_cast<size_t>(b)].seconds;
    });
    chosen[0] = order[order.size() / 2];
    for (int r = 1; r < world; ++r)
      comm.send(r, kTagVerdict, bytesOf(chosen));
  } else {
    comm.recv(0, kTagVerdict, writableBytesOf(chosen));
  }
  const int med = chosen[0];

  // This rank's slices of the chosen step; rank 0 collects them all.
  std::vector<Slice> slices;
  const auto& mine = worker.mine();
  const auto& tm = timings[static_cast<size_t>(unrolled ? 0 : med)];
  // A ps step's slices from the start of its first task on this rank.
  double origin = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < mine.size(); ++i)
    if (!unrolled || plan.tasks[mine[i]].iteration == med)
      origin = std::min(origin, tm[i].start);
  if (!unrolled || !std::isfinite(origin))
    origin = 0;
  for (size_t i = 0; i < mine.size() && !worker.server(); ++i) {  // servers are not traced
    const Task& task = plan.tasks[mine[i]];
    if (unrolled && task.iteration != med)
      continue;
    const auto t = static_cast<uint32_t>(mine[i]);
    const double a = tm[i].start - origin, e = tm[i].end - origin;
    switch (task.kind) {
      case TaskKind::kCompute:
      case TaskKind::kUpdate:
        slices.push_back({t, comm.rank(), Track::kCompute, -1, a, e});
        break;
      case TaskKind::kReduce:
        slices.push_back({t, comm.rank(), Track::kReduce, -1, a, e});
        break;
      case TaskKind::kTransfer:
        for (const auto& f : plan.flowsOf(task)) {
          if (f.src == comm.rank())
            slices.push_back({t, f.src, Track::kSend, f.dst, a, e});
          if (f.dst == comm.rank())
            slices.push_back({t, f.dst, Track::kReceive, f.src, a, e});
        }
        break;
    }
  }
  if (comm.rank() == 0) {
    result.timeline.slices = slices;
    for (int r = 1; r < world; ++r) {
      std::vector<uint64_t> n(1);
      comm.recv(r, kTagSlices, writableBytesOf(n));
      std::vector<Slice> theirs(n[0]);
      if (n[0] > 0)
        comm.recv(r, kTagSlices, writableBytesOf(theirs));
      result.timeline.slices.insert(result.timeline.slices.end(), theirs.begin(), theirs.end());
    }
  } else {
    comm.send(0, kTagSlices, bytesOf(std::vector<uint64_t>{slices.size()}));
    if (!slices.empty())
      comm.send(0, kTagSlices, bytesOf(slices));
  }

  if (comm.rank() == 0) {
    auto& est = result.measured;
    est.engine = "executor";
    est.network = network.name;
    est.scenario = plan.scenario;
    const auto& step = result.steps[static_cast<size_t>(med)];
    est.step = Seconds(step.seconds);
    est.firstStep = Seconds(result.steps[0].seconds);
    est.steadySteps = options.steps;
    est.throughput = double(k) * plan.scenario.batchPerWorker / step.seconds;
    const double params = double(worker.model().allParameters().size()) * sizeof(float);
    for (int r = 0; r < k; ++r) {
      const auto& st = stats[static_cast<size_t>(med)][static_cast<size_t>(r)];
      WorkerEstimate w;
      w.rank = r;
      w.compute = PhaseTimes{Seconds(st.fwd), Seconds(st.bwdData), Seconds(st.bwdWeights),
                             Seconds(st.update)};
      w.communication = Seconds(st.communication);
      w.exposedCommunication = Seconds(st.exposed);
      w.idle = max(Seconds(0), est.step - w.compute.total() - w.exposedCommunication);
      w.sent = Bytes(st.sent);
      w.received = Bytes(st.received);
      w.memory.weights = w.memory.gradients = w.memory.optimizer = Bytes(params);
      est.workers.push_back(w);
    }
    est.bottleneck = "measured";
  }
  const auto seen = gatherToRoot(comm, worker.stalenessSeen(), kTagStats);
  if (comm.rank() == 0)
    result.stalenessSeen = *std::max_element(seen.begin(), seen.end());
  const auto p = worker.model().allParameters();
  result.parameters.assign(p.begin(), p.end());
  return result;
}

void checkRunOptions(const RunOptions& options) {
  if (options.steps < 1)
    throw OptionError("--steps", fmt::format("must be at least 1, got {}", options.steps));
  // Every step's timings are kept for the median step: bounded like any input.
  if (options.steps > kMaxRunSteps)
    throw OptionError("--steps",
                      fmt::format("must be at most {}, got {}", kMaxRunSteps, options.steps));
  // NaN, infinity or a huge rate would train to NaN losses and exit 0 (the
  // CLI's --lr takes the same range).
  if (!(options.learningRate > 0 && options.learningRate <= 1e6))
    throw OptionError("--lr", fmt::format("must be in (0, 1000000], got {}", options.learningRate));
  if (!(options.momentum >= 0 && options.momentum < 1))
    throw OptionError("--momentum", fmt::format("must be in [0, 1), got {}", options.momentum));
  checkThreadsPerWorker(options.threadsPerWorker);
  if (!(options.timeout.value() > 0 && std::isfinite(options.timeout.value())))
    throw OptionError("--timeout",
                      fmt::format("must be a positive time, got {} s", options.timeout.value()));
}

void checkRunDevice(const RunOptions& options, int workers) {
  checkDevice(options.device, "--device");
  (void)workers;  // any K: workers share the GPUs round-robin (gpuOfWorker)
  STRATA_ENFORCE_OP(options.gpu, >=, -1);
  if (options.device == Device::kCuda)
    STRATA_ENFORCE_OP(options.gpu, <, deviceCount(Device::kCuda));
}

int gpuOfWorker(const RunOptions& options, int worker) {
  if (options.device != Device::kCuda)
    return 0;
  if (options.gpu >= 0)
    return options.gpu;
  return worker % std::max(1, deviceCount(Device::kCuda));
}

double runMemoryLowerBound(const Network& network, const Scenario& sc) {
  // Per worker (nn::Model): parameters, gradients and momentum, and the copy
  // of the parameters each worker hands back (RunResult::parameters); every
  // layer's output and its gradient for b examples; the input batch. The
  // plan's bookkeeping: dependencies, done flags and timings per task.
  const double b = sc.batchPerWorker;
  double outputs = 0;
  for (const auto& l : network.layers)
    outputs += double(l.outShape.elements());
  const double floats =
      4 * double(network.totalParams()) + 2 * b * outputs + b * double(network.input.elements());
  const double perWorker = floats * sizeof(float) + 32 * estimatePlanTasks(network, sc);
  // A ps plan's dedicated servers hold a whole model each (no activations
  // to speak of, counted alike: a bound, not an estimate).
  return perWorker * (sc.workers + psServerRanks(sc));
}

void checkThreadRun(const Network& network, const Scenario& sc, Device device) {
  const int k = sc.workers;
  // Every rank of the run is a thread with a communication lane of its own
  // (two threads): the workers and a ps plan's dedicated servers.
  const int servers = psServerRanks(sc);
  const int64_t ranks = int64_t{k} + servers;
  const int64_t maxWorkers = threadWorkerLimit(limits());
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  if (k > maxWorkers)
    throw OptionError(
        "--workers",
        fmt::format("{} workers would start {} threads in this process, over the limit of {} "
                    "workers (64 or twice the {} cores, whichever is larger); use fewer workers, "
                    "run them as MPI ranks (mpirun -np {} strata run ...), or raise the limit "
                    "with {} N ({} lifts every limit)",
                    k, 2 * ranks, maxWorkers, cores, ranks, kMaxWorkersOption, kAllowLargeOption));
  if (ranks > maxWorkers)
    throw OptionError(
        "--ps-servers",
        fmt::format("{} workers and {} ps servers would start {} threads in this process (two "
                    "each), over the limit of {} workers and servers (64 or twice the {} cores, "
                    "whichever is larger); use fewer servers, run them as MPI ranks (mpirun -np "
                    "{} strata run ...), or raise the limit with {} N ({} lifts every limit)",
                    k, servers, 2 * ranks, maxWorkers, cores, ranks, kMaxWorkersOption,
                    kAllowLargeOption));
  // On GPUs, workers are placed round-robin: the busiest GPU holds
  // ceil(K / GPUs) of them.
  const int gpus = device == Device::kCpu ? 1 : std::max(1, deviceCount(device));
  const int sharing = (k + gpus - 1) / gpus;
  double need = runMemoryLowerBound(network, sc) / k * sharing;
  std::string bound;
  double available = 0;
  if (device == Device::kCpu) {
    const MemoryLimit memory = availableMemory();
    available = memory.bytes;
    bound = memory.what;
    if (memory.addressSpace)  // the threads' stacks and arenas count too
      need += threadsReservedBytes(2 * ranks);
  } else {
    available = deviceMemoryBytes(device);
    bound = "one GPU's memory";
  }
  if (available > 0 && need > available)
    throw OptionError(
        sc.batchPerWorker > 1 ? "--batch" : "--workers",
        fmt::format("{} workers x {} examples of {} need at least {} of memory (weights, "
                    "gradients, momentum and activations per worker{}), more than the {} "
                    "available ({}); use a smaller --batch or fewer --workers",
                    sharing, sc.batchPerWorker, network.name, formatBytes(Bytes(need)),
                    device == Device::kCpu && servers > 0 ? ", and a model per ps server" : "",
                    formatBytes(Bytes(available)), bound));
}

RunResult runThreads(const Plan& plan, const Network& network, const RunOptions& options,
                     std::vector<std::vector<float>>* perRankParameters) {
  checkRunOptions(options);
  checkRunDevice(options, plan.scenario.workers);
  checkThreadRun(network, plan.scenario, options.device);
  const int k = plan.scenario.workers;
  const int world = k + plan.servers;  // a ps plan's dedicated servers are threads too
  std::vector<RunResult> results(static_cast<size_t>(world));
  // On GPUs, the device communicator: each worker's messages are copied and
  // summed on its own GPU's stream (cuda_ops.h).
  std::vector<std::shared_ptr<BufferOps>> ops;
  for (int w = 0; w < world && (options.commOps || options.device != Device::kCpu); ++w)
    ops.push_back(options.commOps ? options.commOps(w)
                                  : makeCommOps(options.device, gpuOfWorker(options, w)));
  runLocal(
      world,
      [&](Communicator& comm) {
        results[static_cast<size_t>(comm.rank())] = runWorker(comm, plan, network, options);
      },
      options.timeout, std::move(ops));
  if (perRankParameters) {
    perRankParameters->clear();
    for (int r = 0; r < k; ++r)  // the workers' (a server's is current in its chunks only)
      perRankParameters->push_back(std::move(results[static_cast<size_t>(r)].parameters));
  }
  return std::move(results[0]);
}

}  // namespace strata::exec

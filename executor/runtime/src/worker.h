// One rank of a run: walks the Plan's tasks in order and runs those it takes
// part in, on two lanes (docs/executor.md, "How a Plan runs"). Internal to
// executor/runtime; its members are defined by concern:
//
//   worker.cpp        construction, the lanes and the order tasks run in,
//                     compute and update tasks (the owt rounds included)
//   worker_comm.cpp   transfer and reduce tasks
//   endpoints.cpp     where each collective's data is (makeEndpoint)
//   ps_server.cpp     ps: jobs in rank 0's order, server updates, staleness
//   measurement.cpp   the lanes' marks and times as per-step figures
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <utility>
#include <vector>

#include "endpoints.h"
#include "strata/exec/comm/communicator.h"
#include "strata/exec/device.h"
#include "strata/exec/nn/dataset.h"
#include "strata/exec/nn/model.h"
#include "strata/exec/runtime.h"
#include "strata/model/plan.h"

namespace strata::exec::detail {

using Clock = std::chrono::steady_clock;

// A transfer's tag: its task index, wrapped below the reserved tags.
inline int tagOf(size_t task) {
  return static_cast<int>(task % static_cast<size_t>(kFirstReservedTag));
}

// Examples of worker w in step s: global indices [(s K + w) b, +b); with M
// micro-batches (gradient accumulation), micro-batch m's are [((s K + w) M
// + m) b, +b), so the K M micro-batches of a step are one worker's batch of
// K M b.
inline int64_t firstExample(int step, int workers, int worker, int batch, int micro = 0,
                            int microbatches = 1) {
  return ((int64_t(step) * workers + worker) * microbatches + micro) * batch;
}

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
  Worker(Communicator& comm, const Plan& plan, const Network& net, const RunOptions& opt);

  nn::Model& model() { return model_; }
  // A ps plan's dedicated server (ranks K..K+N-1): no examples, no compute;
  // it sums, updates and sends its chunk of every key.
  bool server() const { return w_ >= k_; }

  // Runs the plan once: training steps firstStep, firstStep + 1, ... (one
  // step, or a ps plan's steps back to back). Returns this rank's
  // measurements per step; a step's `seconds` is the time from the end of
  // the step before on this rank (from the start for the first) to the end
  // of its own last task.
  std::vector<Measured> run(int firstStep);

  // One training step of a one-step plan; returns this rank's measurements.
  Measured step(int s) { return run(s)[0]; }

  const std::vector<size_t>& mine() const { return mine_; }
  // ps with staleness: the most steps a forward ran ahead of its layer's
  // newest landed pull (0: it never ran ahead).
  int stalenessSeen() const { return stalenessSeen_; }
  const std::vector<TaskTiming>& timing() const { return timing_; }

 private:
  // ---- the lanes (worker.cpp) ---------------------------------------------------
  // Before step i's first compute task on this rank: its dropout masks, its
  // examples and labels. A ps step's gradients start from zero layer by
  // layer (compute()): the push of the step before may still be reading the
  // others.
  // With micro-batches, prepare(i, m) before micro-batch m's first forward:
  // its examples, labels and dropout masks (step s's micro-batch m draws
  // the masks of "step" s M + m).
  void prepare(int i, int micro = 0);
  // Before the timed window of a run of several steps on the CPU: every
  // step's examples made as values and its labels (premade_), so that
  // prepare() inside the window only copies them. Making them is the data
  // loader's work, not the step's (see run()): a ps pass of 6 steps made
  // steps 2..6's examples inside their steps (tiny-cnn at batch 32: 2.7 ms
  // of a 12.6 ms step idle, against none for the strategies of one step).
  // The GPU makes its examples with a kernel in microseconds: not premade.
  void premake();
  // The injected hang (RunOptions::hangRank). The stopped process is killed
  // by whatever ends the job, or by its guard after two timeouts and a minute.
  void hang();
  // Runs one lane's tasks of this run in Plan order (a ps plan's
  // communication lane: job by job, serveJobs).
  void lane(Clock::time_point t0, bool communication, std::vector<Measured>& ms);
  // Runs task t on its lane once its own dependencies are done; false when
  // the other lane failed.
  bool runTask(size_t t, Clock::time_point t0, bool communication, std::vector<Measured>& ms);

  static double seconds(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
  }
  nn::ModelOptions modelOptions() const;
  int positions() const;
  bool involves(const Task& t) const;

  // ---- the lanes' times as per-step figures (measurement.cpp) ------------------
  // After both lanes of run() ended and the backend finished: each step's
  // compute phases, duration (`total`: the whole run's, for a one-step plan)
  // and exposed communication into `ms`, and every compute task's timing_.
  void measure(double total, std::vector<Measured>& ms);

  // ---- compute and update tasks, rounds of the FC phase (owt-*) (worker.cpp) ----
  // The examples of round r, as (worker, rows of that worker's batch), in the
  // order they stack in the round's batch.
  std::vector<std::pair<int, std::pair<int64_t, int64_t>>> roundRows(int r) const;
  int roundBatch(int r) const;
  // Offset in the round's batch of worker v's rows.
  int64_t roundOffset(int r, int v) const;
  std::pair<int64_t, int64_t> ownRows(int r, int v) const;
  // Before the first model-parallel layer runs round r: this rank's own rows
  // of the boundary activations go into the round's input (others' arrived by
  // transfer), and the labels are the round's.
  void startRound(int r);
  void compute(const Task& task);
  // One worker: the partial input gradient of a model-parallel layer is the
  // whole gradient, with no collective to deliver it; put it where the
  // layer before reads it.
  void keepOwnInputGradient(int l, int round);
  // n floats from `from` to `to` by the backend, on its stream (accumulate
  // with beta 0 copies; a GPU's kernel, which the compute after it follows):
  // the host touches neither buffer. Compute lane only.
  void copyOnStream(const float* from, float* to, int64_t n);
  // A later model-parallel layer reads every worker's slice of the layer
  // before it: this rank's own slice is copied in place here.
  void placeOwnSlice(int l, int batch);
  void update(const Task& task);

  // ---- pipelines (worker.cpp) ---------------------------------------------------
  // With pp > 1 this rank runs one stage's layers (computes_), each
  // micro-batch of the step in its own activation slot (Model): a 1F1B
  // stage has several in flight, and a transfer lands the next one's input
  // while another's compute runs. Before a compute task: its micro-batch's
  // slot and step (dropout masks), and at its first forward here its
  // inputs (prepare).
  void enterMicro(const Task& task);
  // A tied table's copy: an embedding this rank does not run, named by a
  // collective or update of the stage holding the fc tied to it.
  bool tiedCopy(int first, int last) const;
  // Layers [first, last] of the parameters or their gradients as a
  // collective or an update names them: a tied copy's (or, `tokensOnly`,
  // an embedding's) token table alone.
  std::span<float> paramsOf(int first, int last, bool tokensOnly = false);
  std::span<float> gradsOf(int first, int last, bool tokensOnly = false);
  // `all` (layers [first, last] of a parameter-shaped buffer) as paramsOf
  // and gradsOf name it.
  std::span<float> named(std::span<float> all, int first, int last, bool tokensOnly) const;
  // The dropout masks' step of micro-batch m of the run's i-th step: s M + m.
  uint64_t microStep(int i, int m) const {
    return static_cast<uint64_t>(firstStep_ + i) * static_cast<uint64_t>(microbatches_) +
           static_cast<uint64_t>(m);
  }
  // ZeRO-3, after the run's last step: each worker's updated chunks of every
  // gather unit all-gathered (the next step's forward would have), so that
  // every worker ends with the whole current weights. Untimed.
  void gatherShards();

  // ---- ps (ps_server.cpp) -------------------------------------------------------
  // The server's thread runs one job (a key's push, server updates and
  // pull) at a time. When it frees, rank 0 starts the job with the biggest
  // priority among those ready on it (its own dependencies done; ties by
  // Plan order, which is the order they become ready, or the reverse for
  // last-ready), the simulator's rule, and sends its choice to every other
  // rank, so all run the jobs' blocking transfers in one order.
  void serveJobs(Clock::time_point t0, std::vector<Measured>& ms);
  // Under mutex_: this rank's first task of job j may start (a job it takes
  // no part in is ready at once).
  bool jobReady(size_t j) const;
  // A ps server's update of its shard: chunk `part` of the layers' parameters
  // (the chunk the push summed into this rank's gradients), as the pull's
  // endpoint cuts them.
  void serverUpdate(const Task& task);

  // A ps key (the layers of one push) on this rank with staleness: its
  // server's chunk of the weights and the optimizer's states (momentum, or
  // Adam's m and v), and S + 1 staging copies of
  // the key's weights, one per step of delay (step t's pull lands in slot
  // t mod (S + 1); the forward of step t + 1 + S copies it out).
  struct Key {
    int firstLayer = 0, lastLayer = 0;
    std::vector<float> weights, momentum, adamM, adamV;
    std::vector<std::vector<float>> slots;
    std::span<float> slot(int step) { return slots[static_cast<size_t>(step) % slots.size()]; }
  };
  void makeKeys();
  // With staleness, before step s's forward of layer l: the weights of step
  // s - 1 - S's pull, from its slot (the initial weights before that), and
  // how many steps the newest pull that has landed is behind s - 1.
  void stagedWeights(int l, int s);

  // ---- collectives: endpoints (endpoints.cpp) -----------------------------------
  std::unique_ptr<Endpoint> makeEndpoint(const Collective& c);
  // Activations: the conv/FC boundary (round inputs) or an FC slice (inner
  // allgather).
  std::unique_ptr<Endpoint> activationsEndpoint(const Collective& c);
  std::unique_ptr<Endpoint> gradientsEndpoint(const Collective& c);
  // A pipeline's p2p transfer: one micro-batch's boundary tensor (or its
  // gradient) in its slot, or the tied table's exchange.
  std::unique_ptr<Endpoint> pipelineEndpoint(const Collective& c);
  // A tensor-parallel group's collective: the sum of a split layer's partial
  // outputs or partial input gradients in place, or the loss's statistics.
  std::unique_ptr<Endpoint> tensorParallelEndpoint(const Collective& c);
  class SliceGather;     // staged allgather of channel slices (inner FC exchange)
  class SliceScatter;    // reduce-scatter of partial input gradients by channel slice
  class BoundaryReturn;  // boundary gradients back to the owners of the round's examples

  // ---- collectives: transfer and reduce tasks (worker_comm.cpp) -----------------
  Endpoint& endpoint(int c);
  // `n` floats of staging for slot `slot` of collective `collective`, in the
  // backend's memory, contents unspecified; the same memory every step.
  // Communication lane only.
  std::span<float> stage(int collective, int slot, size_t n);
  int indexOf(const Collective& c) const;
  // Runs this rank's part of a transfer step: sends and receives paired by
  // distance so blocking calls never deadlock.
  void transfer(size_t t, const Task& task, Measured& m);
  // Parts (blocks) one flow of `task` carries: several in halving-doubling.
  int partsCovered(const Task& task) const;
  void reduce(size_t, const Task& task);
  void endCollective(int c);

  Communicator& comm_;
  const Plan& plan_;
  const Network& net_;
  const RunOptions& opt_;
  nn::UpdateRule rule_;    // the plan's optimizer with opt_'s hyper-parameters
  int k_, world_, w_, b_;  // workers, ranks (workers, then ps servers), this rank, batch
  bool owt_;
  int mp_;
  // Tensor parallelism: workers per group (consecutive ranks); pipeline
  // stages; data-parallel replicas. Rank w = layout_.rank(d, s, i) (--placement):
  // the tp pp workers of a replica share its examples (data-parallel rank
  // layout_.replica(w)).
  int tp_, pp_, dp_;
  RankLayout layout_;
  int replica() const { return layout_.replica(w_); }
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
  int prepared_ = -1;           // the step whose inputs the model holds
  int microbatches_ = 1;        // StrategyOptions::microbatches: gradients accumulated over them
  int preparedMicro_ = 0;       // the micro-batch whose inputs the model holds
  bool pipeline_ = false;       // pp > 1 (enterMicro)
  std::vector<char> computes_;  // per layer: this rank runs its phases
  bool readsInput_ = true;      // this rank runs a layer reading the network input
  bool holdsLoss_ = true;       // and the loss
  std::vector<char> microPrepared_;  // pipelines: per micro-batch of the step
  struct Premade {
    nn::SyntheticBatch batch;  // its values made
    std::vector<int32_t> labels;
  };
  std::vector<Premade> premade_;               // per step of this run, or empty (premake())
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

}  // namespace strata::exec::detail

// What a run measures: each rank's lanes' times as per-step figures (phases,
// duration, exposed communication), rank 0's view of every step, the median
// step and its slices for the trace, and the StepEstimate of the run.
#include "measurement.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "strata/model/estimate.h"
#include "strata/model/model_flops.h"
#include "strata/model/timeline.h"
#include "worker.h"

namespace strata::exec::detail {

namespace {

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

}  // namespace

void Worker::measure(double total, std::vector<Measured>& ms) {
  const int n = plan_.iterations;
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
}

RunResult runMeasured(Communicator& comm, const Plan& plan, const Network& network,
                      const RunOptions& options) {
  const int k = plan.scenario.workers;
  const int world = k + plan.servers;
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
    // dp x microbatches x b a step (strategy.h, examplesPerStep).
    est.throughput = examplesPerStep(plan.scenario) / step.seconds;
    setUtilisation(est, network, nullptr);  // tokens/s: a run knows no peak
    const double params = double(worker.model().parameterCount()) * sizeof(float);
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
  result.parameters = worker.model().parametersToHost();
  return result;
}

}  // namespace strata::exec::detail

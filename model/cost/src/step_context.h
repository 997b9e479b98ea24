// What the closed form's strategies share (cost/src/*.cpp): the context of
// one evaluation, the per-worker tallies, and the building blocks of a step.
// Private to strata::model_cost; each strategy's step lives in the file named
// after it (data_parallel.cpp, param_server.cpp, weird_trick.cpp).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "strata/model/collectives.h"
#include "strata/model/compute_cost.h"
#include "strata/model/estimate.h"
#include "strata/model/tensor_parallel.h"
#include "strata/model/topology.h"

namespace strata::cost {

// Everything one evaluation needs, computed once.
struct Context {
  const Network& net;
  const Cluster& cluster;
  const Scenario& sc;
  Topology topo;
  double e;             // bytes per element
  FlopsPerSecond peak;  // for the element type
  CommParams comm;
  int k;
  int b;
  ComputeCosts costs;  // compute pricing (profile, kernel tables or roofline)
  // Speeds of compute and communication while both run on a worker.
  LaneSpeeds lanes;
  Seconds handoff;  // a lane's wake-up when the other lane releases it

  Context(const Network& n, const Cluster& c, const Scenario& s)
      : net(n),
        cluster(c),
        sc(s),
        topo(c, s.workers),
        e(elementBytes(s.options.element)),
        peak(c.device.peakFor(s.options.element, c.sourceFile)),
        k(s.workers),
        b(s.batchPerWorker),
        costs(n, c, s.options.element, workersPerNode(c, s.workers), s.options.optimizer,
              s.options.threadsPerWorker, s.batchPerWorker),
        lanes(overlapSpeeds(c, topo, s.workers)),
        handoff(c.device.handoffFor(workersPerNode(c, s.workers))) {
    comm.segment = s.options.segment;
    comm.gamma = 1.0 / c.device.reduceBandwidth.value();
  }

  Seconds time(const Layer& l, Phase p, double examples, double fraction) const {
    return costs.layer(static_cast<int>(&l - net.layers.data()), p, examples, fraction);
  }
  Seconds update(double params) const { return costs.update(params); }
};

// Per-worker accumulators shared by all strategies.
struct Tally {
  PhaseTimes compute;
  std::vector<double> sent, received;
  Seconds communication;  // sum of collective durations
  Seconds exposed;
  Seconds worstCollective;
  int bottleneckLink = -1;
  bool bottleneckUp = true;
  // Each gradient allreduce's algorithm and bytes (describeAllreduce).
  std::vector<std::pair<std::string, double>> picks;
  // A pipeline (pipeline.cpp): each stage's times (worker r is on stage
  // (r / tp) mod pp; the fields above then hold the slowest stage's), what
  // it is, and its bubble (StepEstimate::pipelineBubble).
  struct StageTimes {
    PhaseTimes compute;
    Seconds communication, exposed;
  };
  std::vector<StageTimes> stages;
  std::string pipeline;
  Seconds bubble;

  explicit Tally(int k)
      : sent(static_cast<size_t>(k), 0.0), received(static_cast<size_t>(k), 0.0) {}

  // Communication with the same bytes for every worker, added in bulk.
  void addSymmetricBytes(double sentEach, double receivedEach) {
    for (auto& x : sent)
      x += sentEach;
    for (auto& x : received)
      x += receivedEach;
  }
  void addTime(Seconds time, const PatternCost& pattern) {
    communication += time;
    if (time > worstCollective && pattern.bottleneckLink >= 0) {
      worstCollective = time;
      bottleneckLink = pattern.bottleneckLink;
      bottleneckUp = pattern.bottleneckUp;
    }
  }

  void add(const CollectiveCost& c, double times = 1.0) {
    for (size_t i = 0; i < sent.size(); ++i) {
      sent[i] += c.sent[i] * times;
      received[i] += c.received[i] * times;
    }
    communication += c.time * times;
    if (c.time > worstCollective && c.bottleneckLink >= 0) {
      worstCollective = c.time;
      bottleneckLink = c.bottleneckLink;
      bottleneckUp = c.bottleneckUp;
    }
  }
};

// Where a worker's communication and compute share its cores (CPU workers),
// both slow down while both run: compute at `computeSpeed`, communication at
// `commSpeed` of their speeds alone. A fluid schedule of one compute lane
// (`compute` seconds of work alone) and one communication lane running jobs
// in order, job j once compute has done ready[j] of its work and job j-1 is
// over, each needing work[j] seconds alone. With both speeds 1 it is the
// plain overlap max(compute, ready + work chained).
struct LaneTimes {
  Seconds computeEnd;     // wall time when compute finishes
  Seconds end;            // wall time when the last job finishes (>= computeEnd)
  Seconds communication;  // sum of the jobs' wall durations
};

// With `duty` (lanes with a duty curve, LaneSpeeds::commByDuty) a job that
// starts while compute runs keeps one speed for its whole window, the
// curve's s(d) at the window's duty d (LaneSpeeds::windowDuty of the compute
// left and the job's work), instead of commSpeed while compute runs and 1
// after; a job that starts after compute is over runs at 1.
LaneTimes sharedLanes(Seconds compute, const std::vector<Seconds>& ready,
                      const std::vector<Seconds>& work, double computeSpeed, double commSpeed,
                      const LaneSpeeds* duty = nullptr);

// The lane arithmetic itself (sharedLanes and the owt rounds use it): one
// worker's tasks, every worker alike, each on its compute lane or its
// communication side, each needing `work` seconds alone and starting once its
// `deps` (earlier tasks) are over. Compute runs one task at a time, the ready
// one listed first; communication tasks run as soon as they are ready, side by
// side (priced alone: contention off). While any communication runs, compute
// goes at `computeSpeed`; while compute runs, communication at `commSpeed`
// (fluid: re-rated whenever the other lane starts or stops). A task released
// by one on the other lane (the last of its deps to end) is ready `handoff`
// later, as the simulator's lane wake-up (engine.cpp, finish).
// With `duty` (a duty curve, LaneSpeeds::commByDuty), a communication task
// marked byDuty keeps one speed from its start to its end: the curve at the
// duty of its window (windowDuty of the compute left on the worker and its
// own work), 1 when no compute is left; the others stay fluid.
struct LaneTask {
  bool comm = false;
  Seconds work;
  std::vector<int> deps;
  bool byDuty = false;
  // It starts no earlier than this (a peer outside the tasks is ready then).
  double notBefore = 0;
};
struct LaneSchedule {
  std::vector<double> start, end;  // wall clock per task
};
LaneSchedule playLanes(const std::vector<LaneTask>& tasks, double computeSpeed, double commSpeed,
                       Seconds handoff, const LaneSpeeds* duty = nullptr);

// Forward of layers [first, last) on `examples` examples.
Seconds forward(const Context& ctx, int first, int last, double examples, double fraction,
                Tally& t);

// Backprop of data-parallel layers [first, last) with their gradient
// synchronisation. Gradients become ready layer by layer (bwd_weights runs
// before bwd_data so the gradient leaves early). With overlap a communication
// stream allreduces each bucket (strategy.h) as soon as its last gradient is
// ready, one bucket after another, last layers first; without overlap one
// allreduce of every gradient follows backprop. Returns the time from the
// start of backprop until gradients are synced.
Seconds backpropWithSync(const Context& ctx, int first, int last, AllreduceAlgorithm algorithm,
                         Tally& t);

// Parameters of layers [first, last).
double paramsIn(const Network& net, int first, int last);

// One step of each strategy family: returns its period; sets the first
// step's time and the steps played (ps plays several; the others one).
using StepCost = Seconds (*)(const Context& ctx, Tally& t, RoundInfo& info, Seconds& firstStep,
                             int& steps);
Seconds dataParallelStep(const Context& ctx, Tally& t, RoundInfo& info, Seconds& firstStep,
                         int& steps);  // data_parallel.cpp
Seconds paramServerStep(const Context& ctx, Tally& t, RoundInfo& info, Seconds& firstStep,
                        int& steps);  // param_server.cpp
// Ring with tensor parallelism, ZeRO or recomputation (usesShardedStep):
// sharded.cpp. dataParallelStep hands such a scenario to it.
Seconds shardedStep(const Context& ctx, Tally& t, RoundInfo& info, Seconds& firstStep, int& steps);
Seconds weirdTrickStep(const Context& ctx, Tally& t, RoundInfo& info, Seconds& firstStep,
                       int& steps);  // weird_trick.cpp
// A pipeline or gradient accumulation (usesPipeline): pipeline.cpp;
// shardedStep hands such a scenario to it.
Seconds pipelineStep(const Context& ctx, Tally& t, RoundInfo& info, Seconds& firstStep, int& steps);

// Per example, in elements (a dropout's 1-byte masks as bytes / e), what
// layers [first, last) keep for their backward under `tp` and the
// recomputation of the scenario: `kept` until the backward, plus
// `largestBlock` while full recomputation reruns its largest block
// (estimate.cpp, shardedMemory). The network input counts when first is 0.
struct KeptActivations {
  double kept = 0;
  double largestBlock = 0;
};
KeptActivations keptActivations(const Context& ctx, const TpLayout& tp, int first, int last);
// Memory of a worker on pipeline stage `stage`, and of every stage's
// (pipeline.cpp).
MemoryUse pipelineMemory(const Context& ctx, int stage);
std::vector<MemoryUse> pipelineMemories(const Context& ctx);
// The first layer of each chunk, then the layer count (pipelineChunks).
std::vector<int> pipelineStarts(const Context& ctx);

}  // namespace strata::cost

// The discrete-event simulator: plays one training step's Plan on simulated
// devices and links (docs/simulator.md).
//
// Resources: one compute stream per worker (compute and update tasks, in plan
// order among the ready ones), a reduction engine per worker (reduce tasks),
// and the cluster's links, each direction a channel of bandwidth beta (both
// directions share one channel on a half-duplex link). A transfer task waits
// its pattern's latency alpha, then moves its bytes; its flows advance in
// lockstep, as in the alpha-beta pattern cost.
//
// Sharing rule (contention on): a channel's bandwidth is split equally among
// the flows crossing it, whichever tasks they belong to (per-flow fairness,
// as TCP and InfiniBand arbitration approximate); a task moves at the pace of
// its slowest flow, so its rate is 1 / max over its channels of
// (flows on the channel, all tasks) / beta, recomputed whenever a task joins
// or leaves a channel. With contention off every task is priced alone (its
// own flows only), which is the analytic model's assumption.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "strata/model/cluster.h"
#include "strata/model/network.h"
#include "strata/model/plan.h"
#include "strata/model/strategy.h"
#include "strata/model/timeline.h"

namespace strata::sim {

struct Options {
  bool contention = true;
  // Per-worker slowdown of compute and update tasks (1 = nominal); workers
  // beyond the vector's size run at 1.
  std::vector<double> slowdown;
  // Each compute and update task's time is multiplied by 1 + u, u uniform in
  // [-jitter, +jitter], drawn from (seed, task id): the same input gives the
  // same output.
  double jitter = 0;
  uint64_t seed = 1;
  // Record per-task slices for a trace.
  bool timeline = false;
  // With timeline: record only these workers' slices and the link channels
  // they use (a trace of some ranks of a large run costs a fraction of the
  // time and memory); empty: every worker. Ranks must be in [0, K).
  std::vector<int> timelineRanks;
};

// One direction of one link (or both, half duplex), with what crossed it.
struct LinkUse {
  std::string name;
  BytesPerSecond bandwidth;
  Bytes bytes;
  Seconds busy;        // time with at least one flow on it
  double utilisation;  // bytes / (bandwidth x step)
};

struct Result {
  StepEstimate estimate;       // engine "sim"
  std::vector<LinkUse> links;  // every channel that carried bytes, busiest first
  std::vector<double> taskStart, taskEnd;
  Timeline timeline;  // slices with Options::timeline; channel names always
  uint64_t events = 0;
  // How the step was simulated (simulateScenario): "representative: ..." or
  // "full: ..." with the reason; "" from simulate().
  std::string detail;
};

// Simulates `plan` (lowered from `network`) on `cluster`. Deterministic.
// A representative plan (Plan::representative) must only be given when
// every worker computes alike (representativeReason returns "").
Result simulate(const Plan& plan, const Network& network, const Cluster& cluster,
                const Options& options);

// The work of simulating `plan`, bounded by the event limit before anything
// is allocated: its tasks, the flows of each patterned step's shape once
// (its load is cached), and each stored-flow task's flows when it starts and
// ends; every task's flows where a trace or lanes sharing the cores need each
// task's workers (an all-to-all step of K workers has K(K-1) flows).
double estimatedWork(const Plan& plan, const Cluster& cluster, const Options& options);

// Why `scenario` must be simulated in full detail ("": a representative plan
// gives the same result): the strategy's workers differ (owt-*, ps), or
// --straggler, --jitter, a trace, or lanes sharing a worker's cores make them.
std::string representativeReason(const Scenario& scenario, const Cluster& cluster,
                                 const Options& options);

// Lowers `scenario` with `cluster` and simulates it: worker 0's compute for
// every worker (PlanDetail::kRepresentative) where representativeReason is
// "", which takes O(layers + collective steps) instead of O(K layers) and
// gives the same result; every worker's tasks otherwise. Result::detail says
// which, and why. `iterations`: the steps of a ps plan (lowerToPlan).
Result simulateScenario(const Network& network, const Cluster& cluster, const Scenario& scenario,
                        const Options& options, int iterations = 0);

}  // namespace strata::sim

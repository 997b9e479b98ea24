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
};

// Simulates `plan` (lowered from `network`) on `cluster`. Deterministic.
Result simulate(const Plan& plan, const Network& network, const Cluster& cluster,
                const Options& options);

}  // namespace strata::sim

// The simulator's entry points: the checks of a run's inputs, the bound on
// its work, and the choice of a representative plan. The engine that plays a
// Plan is engine.h (engine.cpp, lanes.cpp, network.cpp, accounting.cpp).
#include "strata/sim/simulator.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>
#include <tuple>

#include "engine.h"
#include "strata/model/error.h"
#include "strata/model/estimate.h"
#include "strata/model/limits.h"
#include "strata/model/topology.h"

namespace strata::sim {

Result simulate(const Plan& plan, const Network& network, const Cluster& cluster,
                const Options& options) {
  // A slowdown of 1000 turns a millisecond into a second: beyond it a factor
  // is a typo, and NaN, infinity or a denormal would stall the clock.
  for (double s : options.slowdown)
    if (!(s >= 1e-3 && s <= 1e3))
      throw OptionError("--straggler",
                        fmt::format("slowdown factors must be in [0.001, 1000], got {}", s));
  if (!(options.jitter >= 0 && options.jitter < 1))
    throw OptionError("--jitter", fmt::format("must be in [0, 1), got {}", options.jitter));
  if (options.slowdown.size() > static_cast<size_t>(plan.scenario.workers))
    throw OptionError("--straggler",
                      fmt::format("names worker {} but there are {} workers",
                                  options.slowdown.size() - 1, plan.scenario.workers));
  // Bounded before allocating (estimatedWork).
  const Limits& lim = limits();
  const double work = estimatedWork(plan, cluster, options);
  if (work > double(lim.maxSimEvents))
    throw OptionError(
        "--workers",
        fmt::format("simulating the plan of {} ({}, {} workers: {} tasks, {:.3g} flows) would take "
                    "about {:.3g} events, over the limit of {}; use fewer workers or larger "
                    "segments, or raise the limit with {} N ({} lifts every limit)",
                    plan.network, toString(plan.scenario.strategy), plan.scenario.workers,
                    plan.tasks.size(), plan.totalFlows(), work, lim.maxSimEvents, kMaxEventsOption,
                    kAllowLargeOption));
  checkPsPlacement(cluster, plan.scenario);
  if (plan.representative) {
    const auto why = representativeReason(plan.scenario, cluster, options);
    if (!why.empty())
      throw InvariantError("a representative plan was given to simulate, but " + why);
  }
  detail::Engine engine(plan, network, cluster, options, lim.maxSimEvents);
  return engine.run();
}

double estimatedWork(const Plan& plan, const Cluster& cluster, const Options& options) {
  const bool perTask = options.timeline || !cluster.device.overlapCompute.empty() ||
                       !cluster.device.overlapComm.empty();
  double work = double(plan.tasks.size());
  std::set<std::tuple<int, int, int, int>> patterns;
  for (const auto& t : plan.tasks) {
    if (t.kind != TaskKind::kTransfer && t.kind != TaskKind::kReduce)
      continue;
    const double flows = double(plan.flowCountOf(t));
    if (t.pattern == PatternKind::kPairs || perTask)
      work += 2 * flows;
    else if (patterns.insert({static_cast<int>(t.pattern), t.root, t.ringSpan, t.ringStride})
                 .second)
      work += flows;
  }
  return work;
}

std::string representativeReason(const Scenario& scenario, const Cluster& cluster,
                                 const Options& options) {
  if (!canBeRepresentative(scenario))
    return fmt::format("{} workers hold different tasks", toString(scenario.strategy));
  for (double s : options.slowdown)
    if (s != 1.0)
      return "--straggler makes workers differ";
  if (options.jitter > 0)
    return "--jitter makes workers differ";
  if (options.timeline)
    return "a trace shows every worker's tasks";
  const auto lanes = overlapSpeeds(cluster, Topology(cluster, scenario.workers), scenario.workers);
  if (lanes.shared())
    return "communication shares the workers' cores, each worker's by its own part";
  return "";
}

Result simulateScenario(const Network& network, const Cluster& cluster, const Scenario& scenario,
                        const Options& options, int iterations) {
  checkSimWorkers(scenario.workers, limits());
  const std::string reason = representativeReason(scenario, cluster, options);
  const auto detail = reason.empty() ? PlanDetail::kRepresentative : PlanDetail::kFull;
  const Plan plan = lowerToPlan(network, scenario, cluster, iterations, detail);
  auto r = simulate(plan, network, cluster, options);
  const int stages = std::max(1, scenario.options.pp);
  r.detail = !reason.empty() ? "full: " + reason
             : stages > 1    ? fmt::format(
                                   "representative: one worker's compute stands for each stage's {} "
                                      "(every worker of a stage computes alike), {} stages",
                                   scenario.workers / stages, stages)
                          : fmt::format(
                                "representative: worker 0's compute stands for all {} "
                                "(every worker computes alike)",
                                scenario.workers);
  return r;
}

}  // namespace strata::sim

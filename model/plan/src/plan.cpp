// The Plan: its tasks' flows, the strategy registry and lowerToPlan. The
// Builder (builder.h) lowers each collective as its cost formula in
// cost/src/collectives.cpp prices it (same stages, same pipelining), and each
// strategy's lowering (plan/src/<strategy>.cpp) mirrors its schedule in
// cost/src/<strategy>.cpp, so that a simulator with contention off reproduces
// the analytic model.
#include "strata/model/plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <utility>

#include "builder.h"
#include "strata/model/collectives.h"
#include "strata/model/error.h"
#include "strata/model/estimate.h"
#include "strata/model/lowering.h"
#include "strata/model/quantity_text.h"
#include "strata/model/tensor_parallel.h"

namespace strata {

std::string_view toString(TaskKind kind) {
  switch (kind) {
    case TaskKind::kCompute:
      return "compute";
    case TaskKind::kTransfer:
      return "transfer";
    case TaskKind::kReduce:
      return "reduce";
    case TaskKind::kUpdate:
      return "update";
  }
  return "?";
}

std::string_view toString(PatternKind kind) {
  switch (kind) {
    case PatternKind::kRing:
      return "ring";
    case PatternKind::kAllToAll:
      return "all-to-all";
    case PatternKind::kGather:
      return "gather";
    case PatternKind::kScatter:
      return "scatter";
    case PatternKind::kPairs:
      return "pairs";
  }
  return "?";
}

std::string_view toString(BufferKind kind) {
  switch (kind) {
    case BufferKind::kWeightGradients:
      return "weight gradients";
    case BufferKind::kActivations:
      return "activations";
    case BufferKind::kActivationGradients:
      return "activation gradients";
    case BufferKind::kWeights:
      return "weights";
    case BufferKind::kLossStatistics:
      return "loss statistics";
  }
  return "?";
}

size_t Plan::flowCountOf(const Task& t) const {
  const size_t k = static_cast<size_t>(scenario.workers);
  if (t.kind != TaskKind::kTransfer && t.kind != TaskKind::kReduce)
    return 0;
  switch (t.pattern) {
    case PatternKind::kRing:
      return k > 1 && (t.ringSpan == 0 || t.ringSpan > t.ringStride) ? k : 0;
    case PatternKind::kAllToAll:
      return k * (k - 1);
    case PatternKind::kGather:
    case PatternKind::kScatter:
      return k - 1;
    case PatternKind::kPairs:
      return t.flowCount;
  }
  return 0;
}

std::vector<PlanFlow> Plan::flowsOf(const Task& t) const {
  std::vector<PlanFlow> f;
  const int k = scenario.workers;
  if (t.kind != TaskKind::kTransfer && t.kind != TaskKind::kReduce)
    return f;
  f.reserve(flowCountOf(t));
  // A ring's chunks are numbered by position in the flow's own ring (ring.h).
  const int span = t.ringSpan > 0 ? t.ringSpan : k, stride = t.ringSpan > 0 ? t.ringStride : 1;
  const int size = span / stride;
  auto part = [&](int src, int dst) {
    const int pos = src % span / stride;
    switch (t.parts) {
      case PartRule::kRingReduceScatter:
        return ringReduceScatterSends(pos, t.step, size);
      case PartRule::kRingAllGather:
        return ringAllGatherSends(pos, t.step - (size - 1), size);
      case PartRule::kDestination:
        return dst;
      case PartRule::kSource:
        return src;
      case PartRule::kExplicit:
        return 0;
    }
    return 0;
  };
  switch (t.pattern) {
    case PatternKind::kRing:
      if (flowCountOf(t) > 0)
        for (int r = 0; r < k; ++r) {
          const int next = ringNext(r, span, stride);
          f.push_back({r, next, part(r, next)});
        }
      break;
    case PatternKind::kAllToAll:
      for (int i = 0; i < k; ++i)
        for (int j = 0; j < k; ++j)
          if (i != j)
            f.push_back({i, j, part(i, j)});
      break;
    case PatternKind::kGather:
      for (int i = 0; i < k; ++i)
        if (i != t.root)
          f.push_back({i, t.root, part(i, t.root)});
      break;
    case PatternKind::kScatter:
      for (int i = 0; i < k; ++i)
        if (i != t.root)
          f.push_back({t.root, i, part(t.root, i)});
      break;
    case PatternKind::kPairs:
      f.assign(flows.begin() + t.flowBegin, flows.begin() + t.flowBegin + t.flowCount);
      break;
  }
  return f;
}

double Plan::totalFlows() const {
  double n = 0;
  for (const auto& t : tasks)
    n += double(flowCountOf(t));
  return n;
}

int Plan::computesFor(int worker) const {
  if (!representative)
    return worker;
  if (!usesPipeline(scenario.options))
    return 0;
  const RankLayout layout = rankLayoutOf(scenario);
  return layout.rank(0, layout.stage(worker), 0);
}

size_t Plan::count(TaskKind kind) const {
  size_t n = 0;
  for (const auto& t : tasks)
    n += t.kind == kind ? 1 : 0;
  return n;
}

using namespace planning;

// Mirrors the lowering above, counting instead of building: compute and
// update tasks per worker and layer, and each collective's steps (ring:
// 3 (K-1) per segment, direct and naive: 3 per segment, reduce-scatter and
// reduce: 2 per segment, halving-doubling: 3 per exchange plus the folds).
double estimatePlanTasks(const Network& net, const Scenario& sc, int iterations,
                         PlanDetail detail) {
  const double k = sc.workers;
  const int layers = static_cast<int>(net.layers.size());
  const double e = elementBytes(sc.options.element);
  const double segment = sc.options.segment.value();
  auto segs = [&](double bytes) {
    return segment <= 0 || bytes <= segment ? 1.0 : std::ceil(bytes / segment);
  };
  auto allReduceTasks = [&](AllreduceAlgorithm a, double n) {
    switch (a) {
      case AllreduceAlgorithm::kRing:
        return 3 * (k - 1) * segs(n / k);
      case AllreduceAlgorithm::kNaive:
        return 3 * segs(n);
      case AllreduceAlgorithm::kDirect:
        return 3 * segs(n / k);
      case AllreduceAlgorithm::kHalvingDoubling:
        return 3 * std::ceil(std::log2(k)) + 3;
      case AllreduceAlgorithm::kHierarchical:
      case AllreduceAlgorithm::kAuto:  // at most the ring's
        return 3 * (k - 1) * segs(n / k);
      case AllreduceAlgorithm::kTree:
        return 3 * 2 * std::ceil(std::log2(k) + 1) * segs(n / 2);
    }
    return 0.0;
  };
  // Workers whose compute and update tasks are in the plan.
  const double cw = detail == PlanDetail::kRepresentative ? 1 : k;
  // Backprop of [first, last) on every worker and its gradient buckets.
  auto backprop = [&](int first, int last, AllreduceAlgorithm a) {
    double t = 0;
    for (int l = first; l < last; ++l) {
      const auto& layer = net.layers[static_cast<size_t>(l)];
      t += cw * ((layer.hasWeights() ? 1 : 0) + (layer.readsNetworkInput() ? 0 : 1));
    }
    if (k > 1)
      for (const auto& bucket : gradientBuckets(net, first, last, sc.options))
        t += allReduceTasks(a, bucket.params * e);
    return t;
  };
  if (sc.strategy == Strategy::kPs) {
    // Per step: the compute tasks; per bucket a push (2 per segment of a
    // chunk), K server updates and a one-step pull; one update per step alone.
    double step = k * layers;
    for (int l = 0; l < layers; ++l) {
      const auto& layer = net.layers[static_cast<size_t>(l)];
      step += k * ((layer.hasWeights() ? 1 : 0) + (layer.readsNetworkInput() ? 0 : 1));
    }
    if (k > 1) {
      const double nodes =
          sc.options.psNode > 0 ? std::ceil(k / std::min(k, double(sc.options.psNode))) : 0;
      for (const auto& bucket : psKeys(net, sc.options))
        step += sc.options.psNode > 0      ? 6 + nodes
                : sc.options.psServers > 0 ? 3 + sc.options.psServers
                                           : 2 * segs(bucket.params * e / k) + k + 1;
    } else {
      step += 1;
    }
    return step * (k > 1 && iterations > 0 ? iterations : defaultPlanIterations(sc));
  }
  if (usesPipeline(sc.options)) {
    // Per micro-batch, each stage's K / pp workers (one: a representative
    // plan) run its layers' passes (all stages together: every layer once
    // per K / pp) with its
    // tensor-parallel collectives (3 (t - 1) steps each at most), and two
    // transfers per chunk boundary; then each bucket's sync and update.
    const auto& o = sc.options;
    const TpLayout tp = tensorParallelLayout(net, o.tp, o.sequenceParallel);
    const double t = tp.t, m = o.microbatches, pp = o.pp;
    const double chunks = pp * (o.schedule == PipelineSchedule::kInterleaved ? o.virtualStages : 1);
    double perMicro = 2 * (chunks - 1);
    for (int l = 0; l < layers; ++l) {
      const auto& layer = net.layers[static_cast<size_t>(l)];
      const auto& x = tp.layers[static_cast<size_t>(l)];
      const double passes = 1 + (layer.hasWeights() ? 1 : 0) + (layer.readsNetworkInput() ? 0 : 1) +
                            (o.recompute != Recompute::kNone ? 1 : 0);
      perMicro += (detail == PlanDetail::kRepresentative ? 1 : k / pp) * passes;
      for (const auto* c : {&x.fwdBefore, &x.fwdAfter, &x.bwdBefore, &x.bwdAfter})
        if (c->op != TpCollective::kNone && t > 1)
          perMicro += 3 * (t - 1) * segs(c->elems * sc.batchPerWorker * e / t) *
                      (o.recompute == Recompute::kFull ? 1.5 : 1);
    }
    const double dp = k / (t * pp);
    double syncs = 0;
    if (dp > 1)
      for (const auto& bucket : gradientBuckets(net, 0, layers, o))
        syncs += 3 * (dp - 1) * segs(bucket.params / t * e / dp) * 2;
    return m * perMicro + syncs + (detail == PlanDetail::kRepresentative ? pp : k) * chunks * 2;
  }
  if (!isModelParallel(sc.strategy))
    return cw * layers + backprop(0, layers, gradientAllreduce(sc)) + cw;
  const int mp = net.modelParallelFrom;
  const bool owtA = sc.strategy == Strategy::kOwtA;
  const double rounds = owtA ? 1 : k;
  const double bw = sc.batchPerWorker;
  const double batch = owtA ? k * bw : bw;
  const double boundary = double(net.layers[static_cast<size_t>(mp)].inShape.elements()) * e;
  double round = k;  // the first model-parallel layer's fwd
  if (k > 1)
    round += 1;  // activations in
  for (int l = mp + 1; l < layers; ++l) {
    const auto& layer = net.layers[static_cast<size_t>(l)];
    round += k + (k > 1 && layer.hasWeights() ? 1 : 0);
    if (k > 1 && layer.kind == LayerKind::kSoftmax)
      round += allReduceTasks(AllreduceAlgorithm::kDirect, 2 * batch * e);
  }
  for (int l = layers - 1; l >= mp; --l) {
    const auto& layer = net.layers[static_cast<size_t>(l)];
    round += k * (layer.hasWeights() ? 2 : 1);
    if (k > 1 && l > mp && layer.hasWeights())
      round += 2 * segs(batch * double(layer.inShape.elements()) * e / k);
  }
  const bool perRoundUpdate = !owtA && sc.options.fcUpdate == FcUpdate::kRound;
  if (perRoundUpdate)
    round += k;
  if (k > 1)
    round += sc.strategy == Strategy::kOwtB ? 2 * segs(bw * boundary)
                                            : 2 * segs((owtA ? bw : bw / k) * boundary);
  const double updates = perRoundUpdate ? k : 2 * k;
  return k * mp + rounds * round + backprop(0, mp, sc.options.convSync) + updates;
}

void checkPlanSize(const Network& network, const Scenario& sc, const Limits& limits, int iterations,
                   PlanDetail detail) {
  const double tasks = estimatePlanTasks(network, sc, iterations, detail);
  if (tasks <= double(limits.maxPlanTasks))
    return;
  // Name what makes the plan large: a ps run's steps when one step fits,
  // segments when they dominate, else workers.
  if (iterations > 1 && estimatePlanTasks(network, sc, 1) * iterations <= tasks &&
      estimatePlanTasks(network, sc, 1) <= double(limits.maxPlanTasks))
    throw OptionError(
        "--steps",
        fmt::format("a ps plan holds every step it runs: {} steps of {} ({} workers) would be "
                    "about {:.3g} tasks, over the limit of {}; run fewer steps, or raise the "
                    "limit with {} N ({} lifts every limit)",
                    iterations, network.name, sc.workers, tasks, limits.maxPlanTasks,
                    kMaxTasksOption, kAllowLargeOption));
  Scenario unsegmented = sc;
  unsegmented.options.segment = Bytes(0);
  const bool bySegments = estimatePlanTasks(network, unsegmented, iterations, detail) * 2 < tasks;
  const std::string option = bySegments ? "--segment" : "--workers";
  const std::string cure =
      bySegments ? fmt::format("use larger segments than {} (or 0 for unsegmented transfers)",
                               formatBytes(sc.options.segment))
                 : std::string("use fewer workers");
  throw OptionError(
      option, fmt::format("the plan of {} ({}, {} workers) would have about {:.3g} tasks, over the "
                          "limit of {} (about {} of memory); {}, or raise the limit with {} N ({} "
                          "lifts every limit)",
                          network.name, toString(sc.strategy), sc.workers, tasks,
                          limits.maxPlanTasks, formatBytes(Bytes(tasks * kBytesPerPlanTask)), cure,
                          kMaxTasksOption, kAllowLargeOption));
}

void checkPlanPrintable(const Plan& plan, const Limits& limits) {
  const double items = double(plan.tasks.size()) + plan.totalFlows();
  if (items > double(limits.maxPrintedPlanItems))
    throw OptionError(
        "--workers",
        fmt::format("the plan of {} ({}, {} workers) has {} tasks and {:.3g} flows, over the "
                    "limit of {} printed; print a smaller plan (fewer workers; `strata simulate` "
                    "summarises large ones), or print it anyway with {}",
                    plan.network, toString(plan.scenario.strategy), plan.scenario.workers,
                    plan.tasks.size(), plan.totalFlows(), limits.maxPrintedPlanItems,
                    kAllowLargeOption));
}

bool canBeRepresentative(const Scenario& scenario) {
  // A pipeline's stages compute different layers: each stage's first rank
  // stands for the stage's.
  return scenario.strategy == Strategy::kNaive || scenario.strategy == Strategy::kRing;
}

namespace {

// The strategy registry of the Plan: one row per strategy, naming the lowering
// of its family (plan/src/<family>.cpp), beside cost/src/estimate.cpp's row
// for the closed form.
struct StrategyLowering {
  Strategy strategy;
  LowerStrategy lower;
};
constexpr StrategyLowering kStrategyLowerings[] = {
    {Strategy::kNaive, lowerDataParallel}, {Strategy::kRing, lowerDataParallel},
    {Strategy::kOwtA, lowerWeirdTrick},    {Strategy::kOwtB, lowerWeirdTrick},
    {Strategy::kOwtC, lowerWeirdTrick},    {Strategy::kPs, lowerParamServer},
};
static_assert(std::size(kStrategyLowerings) == std::size(kAllStrategies));

LowerStrategy loweringOf(Strategy strategy) {
  for (const auto& row : kStrategyLowerings)
    if (row.strategy == strategy)
      return row.lower;
  STRATA_ENFORCE(false);
  return nullptr;
}

Plan lower(const Network& network, const Scenario& scenario, const Cluster* cluster, int iterations,
           PlanDetail detail) {
  checkScenario(network, scenario);
  iterations = scenario.strategy != Strategy::kPs || scenario.workers == 1 ? 1
               : iterations > 0                                            ? iterations
                                : defaultPlanIterations(scenario);
  STRATA_ENFORCE(detail == PlanDetail::kFull || canBeRepresentative(scenario));
  checkPlanSize(network, scenario, limits(), iterations, detail);
  Plan plan;
  // Reserved: grown by doubling, a plan of 10^6 tasks was copied ~20 times.
  const double tasks = estimatePlanTasks(network, scenario, iterations, detail);
  plan.tasks.reserve(static_cast<size_t>(tasks * 1.05) + 16);
  plan.deps.reserve(static_cast<size_t>(tasks * 2.1) + 16);
  plan.network = network.name;
  plan.scenario = scenario;
  plan.representative = detail == PlanDetail::kRepresentative;
  std::optional<Topology> topo;
  if (cluster) {
    checkPsPlacement(*cluster, scenario);  // its message before the topology's
    topo.emplace(*cluster, scenario.workers + psServerRanks(scenario));
  }
  Builder b(plan, topo ? &*topo : nullptr,
            cluster ? 1.0 / cluster->device.reduceBandwidth.value() : 0.0);
  plan.iterations = iterations;
  plan.servers = psServerRanks(scenario);
  if (usesPipeline(scenario.options))
    lowerPipeline(b, network, scenario,
                  cluster ? pipelineChunks(network, *cluster, scenario)
                          : pipelineChunksByFlops(network, scenario));
  else
    loweringOf(scenario.strategy)(b, network, scenario, iterations);
  const auto sync = syncAllreduce(scenario);
  plan.allreduce = sync ? describeAllreduce(*sync, b.picks) : "";
  return plan;
}

}  // namespace

Plan lowerToPlan(const Network& network, const Scenario& scenario, int iterations) {
  if (const auto a = syncAllreduce(scenario);
      a && (*a == AllreduceAlgorithm::kAuto || *a == AllreduceAlgorithm::kHierarchical))
    throw UserError(
        fmt::format("the {} allreduce needs the cluster to be lowered to a plan", toString(*a)));
  return lower(network, scenario, nullptr, iterations, PlanDetail::kFull);
}

Plan lowerToPlan(const Network& network, const Scenario& scenario, const Cluster& cluster,
                 int iterations, PlanDetail detail) {
  return lower(network, scenario, &cluster, iterations, detail);
}

}  // namespace strata

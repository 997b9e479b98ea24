// The analytic cost model. Formulas and their sources: docs/cost-model.md.
#include "strata/model/estimate.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "step_context.h"
#include "strata/model/checked.h"
#include "strata/model/collectives.h"
#include "strata/model/compute_cost.h"
#include "strata/model/error.h"
#include "strata/model/layer_kinds.h"
#include "strata/model/limits.h"
#include "strata/model/model_flops.h"
#include "strata/model/pipeline.h"
#include "strata/model/quantity_text.h"
#include "strata/model/tensor_parallel.h"
#include "strata/model/topology.h"

namespace strata {

Seconds layerTime(const Layer& layer, Phase phase, double examples, double fraction,
                  const DeviceSpec& device, FlopsPerSecond peak, ElementType element,
                  Optimizer optimizer) {
  double flops = 0, elems = 0, coreFlops = 0, scoreElems = 0, maskBytes = 0;
  switch (phase) {
    case Phase::kFwd:
      flops = layer.fwdFlops;
      elems = layer.fwdElems;
      coreFlops = layer.fwdCoreFlops;
      scoreElems = layer.fwdScoreElems;
      maskBytes = layer.scoreMaskBytes;
      break;
    case Phase::kBwdData:
      flops = layer.bwdDataFlops;
      elems = layer.bwdDataElems;
      break;
    case Phase::kBwdWeights:
      flops = layer.bwdWeightsFlops;
      elems = layer.bwdWeightsElems;
      coreFlops = layer.bwdWeightsCoreFlops;
      scoreElems = layer.bwdWeightsScoreElems;
      maskBytes = layer.scoreMaskBytes;
      break;
    case Phase::kUpdate:
      return updateTime(double(layer.params) * fraction, device, element, optimizer);
  }
  if (phase == Phase::kBwdWeights && !layer.computesWeightGradient())
    return Seconds(0);
  const Flops work(flops * examples * fraction);
  // Weights are read once per pass (fwd, bwd_data) or written once (bwd_weights).
  const Bytes traffic((elems * examples + double(layer.params)) * fraction * elementBytes(element));
  const double efficiency = device.efficiencyFor(layer.kind, element);
  Seconds computeBound = work / (peak * efficiency);
  // An attention layer's core (QK^T, PV: small batched GEMMs) at its own
  // efficiency when the device gives one, the projections at attention's.
  if (coreFlops > 0) {
    const double coreEfficiency = device.attentionCoreEfficiency(element);
    if (coreEfficiency != efficiency) {
      const double scale = examples * fraction;
      computeBound = Flops((flops - coreFlops) * scale) / (peak * efficiency) +
                     Flops(coreFlops * scale) / (peak * coreEfficiency);
    }
  }
  const BytesPerSecond stream = device.memoryBandwidth * device.memoryEfficiency;
  const Seconds memoryBound = traffic / stream;
  // An unfused attention core's softmax and dropout are kernels of their own
  // between its GEMMs: their score traffic adds to the time, not hidden
  // under the GEMMs' max.
  const Seconds scoreBound =
      Bytes((scoreElems * elementBytes(element) + maskBytes) * examples * fraction) / stream;
  return max(computeBound, memoryBound) + scoreBound;
}

int workersPerNode(const Cluster& cluster, int workers) {
  const int group = cluster.levels.front().group;
  return group == 0 ? workers : std::min(workers, group);
}

LaneSpeeds overlapSpeeds(const Cluster& cluster, const Topology& topo, int workers) {
  const int perNode = workersPerNode(cluster, workers);
  const double compute = cluster.device.overlapComputeSpeed(perNode);
  const double comm = cluster.device.overlapCommSpeed(perNode);
  LaneSpeeds s{compute, comm, compute, comm, {}};
  const double measured = cluster.device.overlapCommRateFor(perNode);
  const double perByte = topo.workers() > 1 ? topo.ringStep().secondsPerByte : 0.0;
  const double busy = measured <= 0 || perByte <= 0 ? 1.0 : std::min(1.0, 1.0 / perByte / measured);
  if (cluster.device.hasOverlapCommCurve()) {
    for (double d : cluster.device.overlapCommDutyBreaks())
      s.commByDuty.push_back(
          {d, d >= 1 ? std::min(1.0, comm / busy)
                     : std::min(1.0, cluster.device.overlapCommSpeedAt(perNode, d) / busy)});
  }
  if (measured <= 0 || perByte <= 0)
    return s;
  s.compute = 1 - (1 - s.compute) * busy;
  s.comm = std::min(1.0, s.comm / busy);
  return s;
}

double LaneSpeeds::commAtDuty(double duty) const {
  duty = std::clamp(duty, 0.0, 1.0);
  if (commByDuty.empty())
    return 1 - duty * (1 - comm);
  if (duty >= 1)
    return comm;
  for (size_t i = 1; i < commByDuty.size(); ++i) {
    const auto [d1, s1] = commByDuty[i];
    if (duty <= d1) {
      const auto [d0, s0] = commByDuty[i - 1];
      return s0 + (s1 - s0) * (duty - d0) / (d1 - d0);
    }
  }
  return comm;
}

double LaneSpeeds::windowDuty(double computeLeft, double work) const {
  if (computeLeft <= 0)
    return 0;
  if (work <= 0)
    return 1;
  const double busyFor = computeLeft / compute;
  // f(d) = busyFor s(d) / work - d falls from f(0) > 0.
  if (busyFor * commAtDuty(1) >= work)
    return 1;
  double lo = 0, hi = 1;
  for (int i = 0; i < 60; ++i) {
    const double mid = 0.5 * (lo + hi);
    (busyFor * commAtDuty(mid) / work - mid > 0 ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

UpdateCost updateCostPerParam(Optimizer optimizer, ElementType element) {
  // Master weights and optimizer states are fp32 (4 bytes) in every case:
  // the element's own size for fp32 and tf32, and kept in fp32 beside the
  // 2-byte working copy in mixed precision (Micikevicius et al. 2018).
  constexpr double kState = 4.0;
  const double e = elementBytes(element);
  const double states = optimizerStatesPerParam(optimizer);
  UpdateCost c;
  // Read g; read and write w (the fp32 master in mixed precision, which then
  // also writes the 2-byte working copy); read and write each state.
  c.bytes = e + 2 * kState + 2 * kState * states + (isMixedPrecision(element) ? e : 0.0);
  switch (optimizer) {
    case Optimizer::kSgd:
      c.flops = 2;  // w -= lr g
      break;
    case Optimizer::kMomentum:
      c.flops = 4;  // v = mu v + g; w -= lr v
      break;
    case Optimizer::kAdam:
    case Optimizer::kAdamW:  // its decay is one more multiply, within the rounding
      // m = b1 m + (1 - b1) g: 3; v = b2 v + (1 - b2) g^2: 4; w -= s m /
      // (sqrt(v) / c + eps), bias corrections s, c folded into per-step
      // scalars (PyTorch's Adam): sqrt, div, add, div, mul-sub = 5.
      c.flops = 12;
      break;
  }
  return c;
}

Seconds updateTime(double params, const DeviceSpec& device, ElementType element,
                   Optimizer optimizer) {
  const UpdateCost c = updateCostPerParam(optimizer, element);
  const Seconds memoryBound =
      Bytes(c.bytes * params) / (device.memoryBandwidth * device.memoryEfficiency);
  // Element-wise fp32 arithmetic on the fp32 (non-tensor) peak.
  const Seconds computeBound = Flops(c.flops * params) / device.peak[0];
  return max(memoryBound, computeBound);
}

namespace {

using namespace cost;

// Memory of worker `rank`. Every worker holds the same, except that only the
// naive reducer (rank 0) stages the K-1 incoming gradients.
MemoryUse shardedMemory(const Context& ctx);

MemoryUse memoryOf(const Context& ctx, int rank) {
  if (usesPipeline(ctx.sc.options))
    return pipelineMemory(ctx, rankLayoutOf(ctx.sc).stage(rank));
  if (usesShardedStep(ctx.sc.options))
    return shardedMemory(ctx);
  const auto& net = ctx.net;
  const int layers = static_cast<int>(net.layers.size());
  const double e = ctx.e;
  const double b = ctx.b;
  const int k = ctx.k;
  MemoryUse m;
  const bool owt = isModelParallel(ctx.sc.strategy);
  const int mp = owt ? net.modelParallelFrom : layers;
  const double local = paramsIn(net, 0, mp) + paramsIn(net, mp, layers) / k;
  m.weights = Bytes(local * e);
  m.gradients = Bytes(local * e);
  // The optimizer's states (0 sgd, 1 momentum, 2 adam moments per parameter)
  // and, in mixed precision, the fp32 master weights: 4 bytes each
  // (Micikevicius et al., "Mixed Precision Training", ICLR 2018; Adam in
  // fp16: 2 + 2 + 4 + 8 = 16 bytes per parameter with weights and gradients,
  // Rajbhandari et al., "ZeRO", SC 2020, section 3.1).
  const double optimizerPerParam = 4.0 * optimizerStatesPerParam(ctx.sc.options.optimizer) +
                                   (isMixedPrecision(ctx.sc.options.element) ? 4.0 : 0.0);
  // ps: a worker's server holds its 1/K of the optimizer state (none with
  // dedicated servers).
  // Two levels: a node's leader serves 1/M of it, its other workers nothing.
  const bool ps = ctx.sc.strategy == Strategy::kPs && k > 1;
  const int perNode = std::min(k, std::max(1, ctx.sc.options.psNode));
  const int nodes = (k + perNode - 1) / perNode;
  const double psShare = !ps                            ? 1.0
                         : ctx.sc.options.psNode > 0    ? (rank % perNode == 0 ? 1.0 / nodes : 0.0)
                         : ctx.sc.options.psServers > 0 ? 0.0
                                                        : 1.0 / k;
  const bool psServers = ps && ctx.sc.options.psServers > 0;
  m.optimizer = Bytes(local * optimizerPerParam * psShare);
  // Saved activations for b examples: what each layer's backward reads
  // (activationsKept: outputs read by their own or a consumer's backward,
  // saved tensors, dropout's 1-byte masks); model-parallel layers hold their
  // 1/K slice of a round's batch plus the whole input they gathered.
  const auto kept = activationsKept(net);
  double act = kept.input * b, maskBytes = 0;
  for (int i = 0; i < mp; ++i) {
    act += kept.elems[static_cast<size_t>(i)] * b;
    maskBytes += kept.maskBytes[static_cast<size_t>(i)] * b;
  }
  if (owt) {
    const double batch = ctx.sc.strategy == Strategy::kOwtA ? k * b : b;
    for (int i = mp; i < layers; ++i) {
      const auto& l = net.layers[static_cast<size_t>(i)];
      act += double(l.outShape.elements()) / k * batch;
      if (l.hasWeights())
        act += double(l.inShape.elements()) * batch;
    }
  }
  m.activations = Bytes(act * e + maskBytes);
  // Communication staging.
  const double seg = ctx.sc.options.segment.value();
  const double grads = paramsIn(net, 0, mp) * e;
  auto staged = [&](double bytes) { return seg > 0 ? std::min(seg, bytes) : bytes; };
  double buffers = 0;
  if (k > 1) {
    switch (ctx.sc.strategy) {
      case Strategy::kNaive:
        buffers = rank == 0 ? (k - 1) * staged(grads) : 0;
        break;  // on the reducer
      case Strategy::kRing:
        buffers = 2 * staged(grads / k);
        break;
      case Strategy::kPs:
        buffers = psServers ? 0.0 : grads * psShare;
        break;  // server shard accumulator
      case Strategy::kOwtA:
      case Strategy::kOwtB:
      case Strategy::kOwtC: {
        const double boundary = double(net.layers[static_cast<size_t>(mp)].inShape.elements()) * e;
        // Next round's activations prefetched (b, c) and the conv-gradient
        // chunks of the direct sync.
        buffers = (ctx.sc.strategy == Strategy::kOwtA ? 0 : b * boundary) + 2 * grads / k;
        break;
      }
    }
  }
  m.buffers = Bytes(buffers);
  return m;
}

// Memory of one worker with tensor parallelism, ZeRO or recomputation (every
// worker alike). Weights, gradients and optimizer states of the worker's
// tensor-parallel slice, divided over the dp data-parallel workers from the
// ZeRO stage that shards them (Rajbhandari et al. 2020, section 5.1:
// (2 + 2 + 12) psi / N per worker in mixed-precision Adam at stage 3).
// Activations: each layer's output and saved tensors times its
// tensor-parallel share (tensor_parallel.h); selective recomputation drops
// the attention scores and probabilities (H T^2 per example); full keeps each
// repeated block's output, the next block's input, plus the activations of
// the largest block while it is recomputed (Korthikanti et al. 2023, section
// 4.1 and 5).
MemoryUse shardedMemory(const Context& ctx) {
  const auto& net = ctx.net;
  const auto& o = ctx.sc.options;
  const TpLayout tp = tensorParallelLayout(net, o.tp, o.sequenceParallel);
  const int dp = dataParallelSize(ctx.sc);
  const double e = ctx.e, b = ctx.b;
  double local = 0, largestUnit = 0, unitParams = 0;
  int lastBlock = -2;
  for (size_t i = 0; i < net.layers.size(); ++i) {
    const double p = tp.layers[i].params;
    local += p;
    const int block = net.layers[i].block;
    if (block < 0 || block != lastBlock)
      unitParams = 0;
    unitParams += p;
    largestUnit = std::max(largestUnit, unitParams);
    lastBlock = block;
  }
  const double optimizerPerParam =
      4.0 * optimizerStatesPerParam(o.optimizer) + (isMixedPrecision(o.element) ? 4.0 : 0.0);
  MemoryUse m;
  m.weights = Bytes(local * e / (o.zero >= 3 ? dp : 1));
  m.gradients = Bytes(local * e / (o.zero >= 2 ? dp : 1));
  m.optimizer = Bytes(local * optimizerPerParam / (o.zero >= 1 ? dp : 1));
  const auto act = keptActivations(ctx, tp, 0, static_cast<int>(net.layers.size()));
  m.activations = Bytes((act.kept + act.largestBlock) * b * e);
  // Staging: two ring chunks of the gradients (as ring), one whole
  // tensor-parallel tensor (the largest a group sums or gathers), and with
  // ZeRO-3 two gathered units (the one computing and the one prefetched).
  const double seg = o.segment.value();
  const double chunk = local * e / std::max(1, dp);
  double buffers = ctx.k > 1 && dp > 1 ? 2 * (seg > 0 ? std::min(seg, chunk) : chunk) : 0;
  double tpTensor = 0;
  for (const auto& x : tp.layers)
    for (const auto* c : {&x.fwdBefore, &x.fwdAfter, &x.bwdBefore, &x.bwdAfter})
      tpTensor = std::max(tpTensor, c->elems);
  buffers += tpTensor * b * e;
  if (o.zero >= 3 && dp > 1)
    buffers += 2 * largestUnit * e;
  m.buffers = Bytes(buffers);
  return m;
}

}  // namespace

namespace cost {

KeptActivations keptActivations(const Context& ctx, const TpLayout& tp, int first, int last) {
  const auto& net = ctx.net;
  const auto& o = ctx.sc.options;
  const double e = ctx.e;
  // What each backward reads (activationsKept), times the layer's
  // tensor-parallel share.
  const auto keptAct = activationsKept(net);
  double kept = first == 0 ? keptAct.input : 0, largestBlock = 0, block = 0;
  int lastBlock = -2;
  for (int li = first; li < last; ++li) {
    const auto i = static_cast<size_t>(li);
    const auto& l = net.layers[i];
    double saved = l.savedElems, mask = keptAct.maskBytes[i];
    // Selective recomputation (Korthikanti et al. 2023) reruns the core: its
    // score-sized activations (probabilities, dropout's output and mask) go.
    if (l.kind == LayerKind::kAttention && o.recompute == Recompute::kSelective) {
      saved -= l.savedScoreElems;
      mask = 0;
    }
    const double a =
        (keptAct.elems[i] - l.savedElems + std::max(0.0, saved) + mask / e) * tp.layers[i].work;
    const bool lastOfBlock =
        l.block >= 0 && (i + 1 == net.layers.size() || net.layers[i + 1].block != l.block);
    if (o.recompute != Recompute::kFull || l.block < 0) {
      kept += a;
      continue;
    }
    // Full recomputation: a block's activations exist only while it reruns.
    if (l.block != lastBlock)
      block = 0;
    lastBlock = l.block;
    block += a;
    largestBlock = std::max(largestBlock, block);
    if (lastOfBlock)
      kept += double(l.outShape.elements()) * tp.layers[i].work;
  }
  return {kept, largestBlock};
}

}  // namespace cost

namespace {

// The strategy registry of the closed form: one row per strategy, naming the
// step of its family (cost/src/<family>.cpp). plan/src/plan.cpp has the
// matching row for the Plan; docs/architecture.md lists the rest of a new
// strategy's files.
struct StrategyCost {
  Strategy strategy;
  StepCost step;
};
constexpr StrategyCost kStrategyCosts[] = {
    {Strategy::kNaive, dataParallelStep}, {Strategy::kRing, dataParallelStep},
    {Strategy::kOwtA, weirdTrickStep},    {Strategy::kOwtB, weirdTrickStep},
    {Strategy::kOwtC, weirdTrickStep},    {Strategy::kPs, paramServerStep},
};
static_assert(std::size(kStrategyCosts) == std::size(kAllStrategies));

Seconds run(const Context& ctx, Tally& t, RoundInfo& info, Seconds& firstStep, int& steps) {
  for (const auto& row : kStrategyCosts)
    if (row.strategy == ctx.sc.strategy)
      return row.step(ctx, t, info, firstStep, steps);
  STRATA_ENFORCE(false);
  return {};
}

}  // namespace

namespace {
// A size option of a scenario: exactly 0 (off) or a whole, finite size in the
// byte range of quantity_text.h. A size between 0 and 1 B would round to 0,
// which means off: the request would silently change meaning.
void checkSizeOption(Bytes size, const char* option) {
  const double v = size.value();
  const auto range = quantityRange(QuantityKind::kBytes);
  if (!std::isfinite(v) || v < 0)
    throw OptionError(option, fmt::format("must be a size of at least 1 B, or 0 for off; got {}",
                                          formatBytes(size)));
  if (v > 0 && v < range.min)
    throw OptionError(option, fmt::format("{:g} B is less than one byte (it would round to 0, "
                                          "which means off); write 0 for off or at least 1 B",
                                          v));
  if (v > range.max)
    throw OptionError(option, fmt::format("{} is over 2^53 B, the largest size strata counts "
                                          "exactly",
                                          formatBytes(size)));
}
}  // namespace

namespace {
// --pp, --microbatches, --schedule and --virtual-stages against the strategy,
// K and the network.
void checkPipelineOptions(const Network& network, const Scenario& sc) {
  const auto& o = sc.options;
  if (o.pp < 1 || o.pp > kMaxPipelineStages)
    throw OptionError("--pp", fmt::format("must be a whole number of pipeline stages in [1, {}], "
                                          "got {}",
                                          kMaxPipelineStages, o.pp));
  if (o.microbatches < 1 || o.microbatches > kMaxMicrobatches)
    throw OptionError("--microbatches",
                      fmt::format("must be a whole number of micro-batches in [1, {}], got {}",
                                  kMaxMicrobatches, o.microbatches));
  if (o.virtualStages < 1 || o.virtualStages > kMaxVirtualStages)
    throw OptionError("--virtual-stages",
                      fmt::format("must be a whole number of chunks per stage in [1, {}], got {}",
                                  kMaxVirtualStages, o.virtualStages));
  const auto ignored = [&](OptionKey key) { return optionIgnoredBy(key, sc.strategy, o); };
  if (o.pp > 1 && !ignored(OptionKey::kPipelineParallel).empty())
    throw OptionError("--pp", ignored(OptionKey::kPipelineParallel));
  if (o.microbatches > 1 && !ignored(OptionKey::kMicrobatches).empty())
    throw OptionError("--microbatches", ignored(OptionKey::kMicrobatches));
  if (o.virtualStages > 1 && !ignored(OptionKey::kVirtualStages).empty())
    throw OptionError("--virtual-stages", ignored(OptionKey::kVirtualStages));
  if (o.schedule != PipelineSchedule::k1f1b && o.pp == 1)
    throw OptionError("--schedule", ignored(OptionKey::kSchedule));
  if (!o.stageStarts.empty() && !ignored(OptionKey::kStageStarts).empty())
    throw OptionError("--stage-starts", ignored(OptionKey::kStageStarts));
  if (o.placement != Placement::kTpPpDp && !ignored(OptionKey::kPlacement).empty())
    throw OptionError("--placement", ignored(OptionKey::kPlacement));
  if (!usesPipeline(o))
    return;
  const int64_t groups = int64_t{o.tp} * o.pp;
  if (sc.workers % groups != 0)
    throw OptionError("--pp", fmt::format("{} workers do not split into pipelines of {} stages x "
                                          "tensor-parallel groups of {}; K must be a multiple "
                                          "of tp x pp = {}",
                                          sc.workers, o.pp, o.tp, groups));
  if (o.zero >= 2)
    throw OptionError("--zero",
                      fmt::format("ZeRO-{} shards the gradients, which every micro-batch adds to: "
                                  "with --pp or --microbatches use --zero 0 or 1 (Megatron-LM's "
                                  "distributed optimizer), as DeepSpeed and Megatron-LM do",
                                  o.zero));
  if (o.schedule == PipelineSchedule::kInterleaved) {
    if (o.virtualStages < 2)
      throw OptionError("--virtual-stages",
                        "--schedule interleaved needs 2 or more chunks per stage (with 1 it is "
                        "1f1b)");
    if (o.microbatches % o.pp != 0)
      throw OptionError("--microbatches",
                        fmt::format("the interleaved schedule runs the micro-batches in groups of "
                                    "--pp {}: {} is not a multiple of it",
                                    o.pp, o.microbatches));
  }
  const int chunks = o.pp * (o.schedule == PipelineSchedule::kInterleaved ? o.virtualStages : 1);
  if (const auto why = pipelineObstacle(network, chunks); !why.empty())
    throw OptionError(o.virtualStages > 1 ? "--virtual-stages" : "--pp",
                      fmt::format("{} ({})", why, network.sourceFile));
  if (!o.stageStarts.empty())
    (void)chunkStartsByName(network, chunks, o.stageStarts);
}

// --tp, --sequence-parallel, --zero and --recompute against the strategy and
// the network.
void checkShardingOptions(const Network& network, const Scenario& sc) {
  const auto& o = sc.options;
  if (o.tp < 1 || o.tp > kMaxTensorParallel)
    throw OptionError("--tp", fmt::format("must be a whole number of workers per tensor-parallel "
                                          "group in [1, {}], got {}",
                                          kMaxTensorParallel, o.tp));
  if (o.zero < 0 || o.zero > kMaxZeroStage)
    throw OptionError(
        "--zero", fmt::format("must be a ZeRO stage in [0, {}], got {}", kMaxZeroStage, o.zero));
  const auto ignored = [&](OptionKey key) { return optionIgnoredBy(key, sc.strategy, o); };
  if (o.tp > 1 && !ignored(OptionKey::kTensorParallel).empty())
    throw OptionError("--tp", ignored(OptionKey::kTensorParallel));
  if (o.zero > 0 && !ignored(OptionKey::kZero).empty())
    throw OptionError("--zero", ignored(OptionKey::kZero));
  if (o.sequenceParallel && !ignored(OptionKey::kSequenceParallel).empty())
    throw OptionError("--sequence-parallel", ignored(OptionKey::kSequenceParallel));
  if (o.recompute != Recompute::kNone && !ignored(OptionKey::kRecompute).empty())
    throw OptionError("--recompute", ignored(OptionKey::kRecompute));
  if (sc.workers % o.tp != 0)
    throw OptionError("--tp", fmt::format("{} workers do not split into tensor-parallel groups of "
                                          "{}; use a --workers that is a multiple of {}",
                                          sc.workers, o.tp, o.tp));
  checkPipelineOptions(network, sc);
  if (const auto why = tensorParallelObstacle(network, o.tp, o.sequenceParallel); !why.empty())
    throw OptionError(o.sequenceParallel ? "--sequence-parallel" : "--tp",
                      fmt::format("{} ({})", why, network.sourceFile));
  if ((o.tp > 1 || o.zero > 0 || o.pp > 1) && o.gradientSync != AllreduceAlgorithm::kRing &&
      o.gradientSync != AllreduceAlgorithm::kHierarchical &&
      o.gradientSync != AllreduceAlgorithm::kAuto && o.gradientSync != AllreduceAlgorithm::kTree)
    throw OptionError(
        "--allreduce",
        fmt::format("with --tp, --pp or --zero the data-parallel groups synchronise over rings "
                    "(ring), a ring inside each node and one per rail across them "
                    "(hierarchical), double binary trees (tree), or the cheapest for each buffer "
                    "(auto); --allreduce {} applies without them",
                    toString(o.gradientSync)));
  if (o.zero > 0 && o.gradientSync == AllreduceAlgorithm::kTree)
    throw OptionError("--allreduce",
                      "ZeRO reduce-scatters the gradients and all-gathers the weights, which a "
                      "tree does not do; with --zero use ring, hierarchical or auto");
  if (o.recompute == Recompute::kSelective &&
      std::none_of(network.layers.begin(), network.layers.end(),
                   [](const Layer& l) { return l.kind == LayerKind::kAttention; }))
    throw OptionError("--recompute",
                      fmt::format("selective recomputes the attention core, and network '{}' "
                                  "has no attention layer (full reruns whole blocks)",
                                  network.name));
  if (o.recompute == Recompute::kFull && std::none_of(network.layers.begin(), network.layers.end(),
                                                      [](const Layer& l) { return l.block >= 0; }))
    throw OptionError("--recompute",
                      fmt::format("full reruns each repeated block (transformer, bottleneck) "
                                  "from its input, and network '{}' has none",
                                  network.name));
}
}  // namespace

void checkScenario(const Network& network, const Scenario& sc) {
  if (sc.workers < 1)
    throw OptionError("--workers", fmt::format("must be at least 1, got {}", sc.workers));
  if (sc.batchPerWorker < 1)
    throw OptionError("--batch", fmt::format("must be at least 1, got {}", sc.batchPerWorker));
  if (sc.options.psServers < 0 || sc.options.psServers > kMaxPsServers)
    throw OptionError("--ps-servers", fmt::format("must be a whole number of server nodes in [0, "
                                                  "{}], got {}",
                                                  kMaxPsServers, sc.options.psServers));
  if (sc.options.psNode < 0 || sc.options.psNode > kMaxPsServers)
    throw OptionError("--ps-node", fmt::format("must be a whole number of workers per node in [0, "
                                               "{}], got {}",
                                               kMaxPsServers, sc.options.psNode));
  checkThreadsPerWorker(sc.options.threadsPerWorker);
  if (sc.options.psNode > 0 && sc.options.psServers > 0)
    throw OptionError("--ps-node",
                      "two levels make the node leaders the servers: use --ps-node or "
                      "--ps-servers, not both");
  if (sc.options.staleness < 0 || sc.options.staleness > kMaxStaleness)
    throw OptionError("--staleness",
                      fmt::format("must be a whole number of steps in [0, {}], got {}",
                                  kMaxStaleness, sc.options.staleness));
  globalBatch(sc.workers, sc.batchPerWorker);
  checkSizeOption(sc.options.segment, "--segment");
  checkSizeOption(sc.options.bucket, "--bucket");
  checkShardingOptions(network, sc);
  if (isModelParallel(sc.strategy) && network.modelParallelFrom < 0)
    throw UserError(
        fmt::format("{}: network '{}' has no part that can run model-parallel ({}); {} needs "
                    "one (or set model_parallel_from); naive, ring and ps run any network",
                    network.sourceFile, network.name,
                    network.noModelParallelWhy.empty() ? "model_parallel_from is not set"
                                                       : network.noModelParallelWhy,
                    toString(sc.strategy)));
  if (isModelParallel(sc.strategy) && network.modelParallelFrom == 0)
    throw UserError(fmt::format("{}: network '{}' has no data-parallel part before '{}'",
                                network.sourceFile, network.name, network.layers[0].name));
}

MemoryUse estimateMemory(const Network& network, const Cluster& cluster, const Scenario& scenario,
                         int rank) {
  const Context ctx(network, cluster, scenario);
  return memoryOf(ctx, rank);
}

TrainingRun trainingRunOfSteps(double steps, const std::string& option) {
  if (!std::isfinite(steps) || steps < 1 || steps != std::floor(steps) || steps > kMaxTrainingSteps)
    throw OptionError(option, fmt::format("must be a whole number of steps in [1, {:.0e}], got {}",
                                          kMaxTrainingSteps, steps));
  TrainingRun run;
  run.steps = steps;
  return run;
}

TrainingRun trainingRunOfEpochs(double epochs, double dataset, int globalBatch,
                                const std::string& epochsOption, const std::string& datasetOption) {
  if (!std::isfinite(epochs) || epochs <= 0 || epochs > kMaxEpochs)
    throw OptionError(epochsOption, fmt::format("must be a number of epochs in (0, {:.0e}], got {}",
                                                kMaxEpochs, epochs));
  if (!std::isfinite(dataset) || dataset < 1 || dataset != std::floor(dataset) ||
      dataset > kMaxDatasetExamples)
    throw OptionError(
        datasetOption,
        fmt::format("must be a whole number of examples in [1, 2^53], got {}", dataset));
  STRATA_ENFORCE(globalBatch >= 1);
  TrainingRun run;
  run.epochs = epochs;
  run.dataset = dataset;
  // In integers: the dataset is at most 2^53, exact in an int64_t.
  const auto examples = static_cast<int64_t>(dataset);
  run.stepsPerEpoch = double((examples + globalBatch - 1) / globalBatch);
  // A fractional epoch count rounds up to a whole step; a product that is a
  // whole number but for the rounding of E in binary (1.1 x 100 =
  // 110.00000000000001) is that whole number.
  const double exact = epochs * run.stepsPerEpoch;
  const double nearest = std::round(exact);
  run.steps = std::abs(exact - nearest) <= 1e-9 * std::max(1.0, exact) ? nearest : std::ceil(exact);
  if (run.steps > kMaxTrainingSteps)
    throw OptionError(epochsOption,
                      fmt::format("{} epochs x {:.0f} steps per epoch is {:.0f} steps, over the "
                                  "{:.0e} a run may have",
                                  epochs, run.stepsPerEpoch, run.steps, kMaxTrainingSteps));
  return run;
}

TrainingRun priceTrainingRun(TrainingRun run, const StepEstimate& estimate) {
  // An engine that leaves firstStep unset synchronises every step.
  const Seconds first = estimate.firstStep.value() > 0 ? estimate.firstStep : estimate.step;
  run.time = run.steps > 0 ? first + estimate.step * (run.steps - 1) : Seconds(0);
  return run;
}

int globalBatch(int workers, int batchPerWorker) {
  int64_t examples = 0;
  if (!checkedMul(workers, batchPerWorker, examples, std::numeric_limits<int>::max()))
    throw OptionError("--batch",
                      fmt::format("{} examples per worker x {} workers is a global batch over {} "
                                  "examples; lower --batch or --workers",
                                  batchPerWorker, workers, std::numeric_limits<int>::max()));
  return static_cast<int>(examples);
}

int globalBatch(const Scenario& sc) {
  const int perReplica = globalBatch(sc.options.microbatches, sc.batchPerWorker);
  int64_t examples = 0;
  if (!checkedMul(dataParallelSize(sc), perReplica, examples, std::numeric_limits<int>::max()))
    throw OptionError("--microbatches",
                      fmt::format("{} data-parallel replicas x {} micro-batches x {} examples is a "
                                  "global batch over {} examples; lower --microbatches or --batch",
                                  dataParallelSize(sc), sc.options.microbatches, sc.batchPerWorker,
                                  std::numeric_limits<int>::max()));
  return static_cast<int>(examples);
}

void checkPsPlacement(const Cluster& cluster, const Scenario& sc) {
  const int servers = sc.options.psServers;
  const auto cap = cluster.capacity();
  if (sc.strategy == Strategy::kPs && servers > 0 && sc.workers > 1 && cap >= 0 &&
      int64_t(sc.workers) + servers > cap)
    throw OptionError("--ps-servers",
                      fmt::format("cluster '{}' ({}) has {} devices: {} workers and {} dedicated "
                                  "servers need {}; use fewer servers or workers, or --ps-servers "
                                  "0 (servers sharded over the workers)",
                                  cluster.name, cluster.sourceFile, cap, sc.workers, servers,
                                  int64_t(sc.workers) + servers));
}

StepEstimate estimate(const Network& network, const Cluster& cluster, const Scenario& scenario,
                      bool countBytes) {
  checkModelWorkers(scenario.workers, limits());
  checkScenario(network, scenario);
  checkPsPlacement(cluster, scenario);
  Context ctx(network, cluster, scenario);
  ctx.comm.countBytes = countBytes;
  Tally t(scenario.workers);
  StepEstimate est;
  est.network = network.name;
  est.cluster = cluster.name;
  est.scenario = scenario;
  est.step = run(ctx, t, est.rounds, est.firstStep, est.steadySteps);

  // One worker, b examples, no communication: the speedup's reference.
  const Scenario single = singleWorkerScenario(scenario);
  const Context one(network, cluster, single);
  Tally t1(1);
  RoundInfo unused;
  Seconds unusedFirst;
  int unusedSteps = 0;
  est.singleWorkerStep = run(one, t1, unused, unusedFirst, unusedSteps);

  const int k = scenario.workers;
  // A tensor-parallel group shares its examples, a pipeline's stages pass
  // them on: dp x microbatches x b per step.
  const double examples = examplesPerStep(scenario);
  est.throughput = examples / est.step.value();
  est.speedup = est.throughput / (scenario.batchPerWorker / est.singleWorkerStep.value());
  est.efficiency = est.speedup / k;
  setUtilisation(est, network, &cluster);
  est.bottleneck = ctx.topo.describeLink(t.bottleneckLink, t.bottleneckUp);
  if (const auto sync = syncAllreduce(scenario))
    est.allreduce = describeAllreduce(*sync, t.picks);
  est.computeSource = ctx.costs.describe();
  if (usesShardedStep(scenario.options))
    est.placement = describePlacement(ctx.topo, scenario);
  est.pipeline = t.pipeline;
  est.pipelineBubble = t.bubble;

  // Worker 0 and the others, each assigned whole: GCC 12.2 at -O3
  // (-ftree-loop-distribution) split this loop and ran a field store
  // `w.memory.buffers = 0` before the copy `w.memory = mem` it was meant to
  // amend, so the naive reducer's staging showed on every worker. One
  // aggregate store per worker leaves nothing to reorder; the model test
  // "every worker's memory is estimateMemory's" guards it (docs/testing.md).
  // A pipeline's workers hold and do what their stage does.
  const int stages = static_cast<int>(t.stages.size());
  const std::vector<MemoryUse> stageMemory =
      stages > 0 ? pipelineMemories(ctx) : std::vector<MemoryUse>{};
  const MemoryUse memRoot = stages > 0 ? stageMemory[0] : memoryOf(ctx, 0);
  const MemoryUse memOther = stages > 0 ? stageMemory.back() : memoryOf(ctx, 1);
  est.workers.resize(static_cast<size_t>(k));
  Bytes peak = max(memRoot.total(), memOther.total());
  for (const auto& mem : stageMemory)
    peak = max(peak, mem.total());
  for (int r = 0; r < k; ++r) {
    auto& w = est.workers[static_cast<size_t>(r)];
    const int stage = stages > 0 ? rankLayoutOf(scenario).stage(r) : -1;
    const auto& times = stage >= 0 ? t.stages[static_cast<size_t>(stage)]
                                   : Tally::StageTimes{t.compute, t.communication, t.exposed};
    w.rank = r;
    w.compute = times.compute;
    w.communication = times.communication;
    w.exposedCommunication = times.exposed;
    w.idle = max(Seconds(0), est.step - times.compute.total() - times.exposed);
    w.sent = Bytes(t.sent[static_cast<size_t>(r)]);
    w.received = Bytes(t.received[static_cast<size_t>(r)]);
    w.memory = stage >= 0 ? stageMemory[static_cast<size_t>(stage)] : r == 0 ? memRoot : memOther;
  }
  est.fitsInMemory = peak <= cluster.device.memoryCapacity;
  est.bytesCounted = countBytes;
  if (!countBytes)
    for (auto& w : est.workers)
      w.sent = w.received = Bytes(0);
  return est;
}

}  // namespace strata

namespace strata {

std::optional<FitChange> smallestFittingChange(const Network& network, const Cluster& cluster,
                                               const Scenario& scenario) {
  const auto peak = [&](const Scenario& sc) {
    Bytes most = max(estimateMemory(network, cluster, sc, 0).total(),
                     estimateMemory(network, cluster, sc, 1).total());
    for (int s = 1; s < sc.options.pp; ++s)
      most =
          max(most, estimateMemory(network, cluster, sc, rankLayoutOf(sc).rank(0, s, 0)).total());
    return most;
  };
  const Bytes capacity = cluster.device.memoryCapacity;
  if (peak(scenario) <= capacity)
    return std::nullopt;
  const auto& o = scenario.options;
  const bool ring = scenario.strategy == Strategy::kRing;
  std::vector<int> zeros{o.zero}, tps{o.tp};
  std::vector<bool> sps{o.sequenceParallel};
  if (ring) {
    for (int z = o.zero + 1; z <= kMaxZeroStage; ++z)
      zeros.push_back(z);
    const int node = workersPerNode(cluster, scenario.workers);
    for (int t = 2 * o.tp; t <= node; t *= 2)
      if (scenario.workers % t == 0)
        tps.push_back(t);
    if (!o.sequenceParallel)
      sps.push_back(true);
  }
  std::vector<Recompute> recomputes{o.recompute};
  if (ring || scenario.strategy == Strategy::kNaive)
    for (auto r : {Recompute::kSelective, Recompute::kFull})
      if (r != o.recompute)
        recomputes.push_back(r);
  std::optional<FitChange> best;
  int bestChanged = 0;
  for (int z : zeros)
    for (int t : tps)
      for (bool sp : sps)
        for (auto r : recomputes) {
          Scenario sc = scenario;
          sc.options.zero = z;
          sc.options.tp = t;
          sc.options.sequenceParallel = sp && t > 1;
          sc.options.recompute = r;
          if (sp && t <= 1)
            continue;
          const int changed =
              (z != o.zero) + (t != o.tp) + (sp != o.sequenceParallel) + (r != o.recompute);
          if (changed == 0 || (best && changed > bestChanged))
            continue;
          try {
            checkScenario(network, sc);
          } catch (const UserError&) {
            continue;  // a change this network or K cannot take
          }
          const Bytes mem = peak(sc);
          if (mem > capacity)
            continue;
          const Seconds step = estimate(network, cluster, sc).step;
          if (best && changed == bestChanged && step >= best->step)
            continue;
          std::vector<std::string> parts;
          if (z != o.zero)
            parts.push_back(fmt::format("--zero {}", z));
          if (t != o.tp)
            parts.push_back(fmt::format("--tp {}", t));
          if (sp != o.sequenceParallel)
            parts.push_back("--sequence-parallel on");
          if (r != o.recompute)
            parts.push_back(fmt::format("--recompute {}", toString(r)));
          best = FitChange{fmt::format("{}", fmt::join(parts, " ")), mem, step};
          bestChanged = changed;
        }
  return best;
}

}  // namespace strata

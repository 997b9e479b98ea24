// Data parallelism with today's dimensions: Megatron tensor (and sequence)
// parallelism inside groups of t workers, ZeRO stages over the dp = K / t
// workers holding the same slice, and activation recomputation. One worker's
// step is a list of lane tasks (playLanes): compute on its stream, the
// tensor-parallel collectives in the stream's path (the next layer waits for
// them), and the data-parallel ones beside it. Formulas and sources:
// docs/cost-model.md, "Tensor parallelism, ZeRO and recomputation".
#include <fmt/format.h>

#include <algorithm>

#include "sharded_tasks.h"

namespace strata::cost {

Seconds shardedStep(const Context& ctx, Tally& t, RoundInfo& info, Seconds& firstStep, int& steps) {
  if (usesPipeline(ctx.sc.options))
    return pipelineStep(ctx, t, info, firstStep, steps);
  steps = 1;
  const auto& net = ctx.net;
  const auto& o = ctx.sc.options;
  const int n = static_cast<int>(net.layers.size());
  const TpLayout tp = tensorParallelLayout(net, o.tp, o.sequenceParallel);
  const int dp = dataParallelSize(ctx.sc);
  const RankGroups tpGroups{tp.t, 1}, dpGroups{ctx.k, tp.t, gradientAllreduce(ctx.sc)};
  const double e = ctx.e;
  StepTasks s(ctx, t);
  const ShardedLayers layers{ctx, tp, tpGroups};

  // ZeRO-3: each unit's weights all-gathered over the data-parallel group
  // before its forward and again before its backward, one unit ahead (the
  // gather of unit u waits for the compute of the unit two before it: two
  // units' weights at most are whole at once). The gather before a unit's
  // backward also waits for that unit's forward, whose weights it rewrites.
  const bool zero3 = o.zero >= 3 && dp > 1;
  const auto units = zeroGatherUnits(net, tp);
  const auto& unitOf = units.unitOf;
  int lastGather = -1;
  std::vector<int> unitDone;  // per unit entered in this pass: the path when it was left
  std::vector<int> forwardDone(units.params.size(), -1);  // per unit: the path after its forward
  bool backward = false;
  std::vector<int> gatherOf(units.params.size(), -1);
  int unit = -1;
  // Before layer i (in the pass's order): a new unit's gather; the deps on it.
  auto enterUnit = [&](int i) -> std::vector<int> {
    const int u = unitOf[static_cast<size_t>(i)];
    if (!zero3 || u < 0)
      return {};
    if (u != unit) {
      if (unit >= 0) {
        unitDone.push_back(s.path());
        if (!backward)
          forwardDone[static_cast<size_t>(unit)] = s.path();
      }
      const int before = unitDone.size() >= 2 ? unitDone[unitDone.size() - 2] : -1;
      const int own = backward ? forwardDone[static_cast<size_t>(u)] : -1;
      lastGather = gatherOf[static_cast<size_t>(u)] =
          s.beside(groupAllGather(ctx.topo, dpGroups,
                                  Bytes(units.params[static_cast<size_t>(u)] * e), ctx.comm),
                   {lastGather, before, own});
      unit = u;
    }
    return {gatherOf[static_cast<size_t>(u)]};
  };

  // Forward.
  for (int i = 0; i < n; ++i)
    layers.forward(s, i, enterUnit(i));

  // Backward, last layer first, with the data-parallel gradient sync.
  GradientSyncs syncs(ctx, tp, s, t, dpGroups, 0, n);
  if (zero3 && unit >= 0)
    forwardDone[static_cast<size_t>(unit)] = s.path();
  backward = true;
  unitDone.clear();
  lastGather = -1;
  unit = -1;
  double unitGrads = 0;
  for (int i = n - 1; i >= 0; --i) {
    const int u = unitOf[static_cast<size_t>(i)];
    const auto extra = enterUnit(i);
    const int gradient = layers.backward(s, i, 0, extra);
    syncs.afterBackward(i, gradient, !zero3);
    if (zero3) {
      unitGrads += tp.layers[static_cast<size_t>(i)].params;
      const bool unitEnds = u >= 0 && (i == 0 || unitOf[static_cast<size_t>(i) - 1] != u);
      if (unitEnds) {
        syncs.sync(unitGrads, {s.path()});
        unitGrads = 0;
      }
    }
  }
  if (!zero3 && !o.overlap)
    syncs.syncBuckets({s.path()});
  syncs.update(zero3);
  firstStep = s.play();
  return firstStep;
}

GradientSyncs::GradientSyncs(const Context& ctx, const TpLayout& tp, StepTasks& s, Tally& t,
                             RankGroups dpGroups, int first, int last)
    : ctx_(ctx),
      tp_(tp),
      s_(s),
      t_(t),
      dpGroups_(dpGroups),
      dp_(dataParallelSize(ctx.sc)),
      first_(first),
      last_(last) {
  const auto& o = ctx.sc.options;
  sharded_ = o.zero >= 1 && dp_ > 1;
  ringGroups_ = tp.t > 1 || o.zero >= 1 || o.pp > 1;
  buckets(first, last, bucketOf_, bucketParams_, closer_);
}

void GradientSyncs::buckets(int first, int last, std::vector<int>& bucketOf,
                            std::vector<double>& params, std::vector<int>& closer) const {
  // Buckets of local gradients, last layers first (ZeRO-3 reduce-scatters
  // per unit instead).
  const auto& o = ctx_.sc.options;
  bucketOf.assign(static_cast<size_t>(last - first), -1);
  bool open = false;
  for (int i = last - 1; i >= first; --i) {
    const double p = tp_.layers[static_cast<size_t>(i)].params;
    if (p <= 0)
      continue;
    if (!open) {
      params.push_back(0);
      closer.push_back(i);
      open = true;
    }
    params.back() += p;
    bucketOf[static_cast<size_t>(i - first)] = static_cast<int>(params.size()) - 1;
    closer.back() = i;
    if (o.overlap && params.back() * ctx_.e >= o.bucket.value())
      open = false;
  }
}

void GradientSyncs::syncEarlier(int first, int last) {
  std::vector<int> bucketOf, closer;
  std::vector<double> params;
  buckets(first, last, bucketOf, params, closer);
  for (int i = first; i < last; ++i)
    if (const auto& x = tp_.layers[static_cast<size_t>(i)]; x.sumsGradient)
      beside(groupAllReduce(ctx_.topo, RankGroups{tp_.t, 1}, Bytes(x.params * ctx_.e), ctx_.comm),
             {});
  for (double p : params)
    sync(p, {});
  earlierParams_.insert(earlierParams_.end(), params.begin(), params.end());
}

void GradientSyncs::sync(double params, std::vector<int> deps) {
  if (dp_ <= 1 || params <= 0)
    return;
  const Bytes bytes(params * ctx_.e);
  CollectiveCost c;
  if (sharded_ || ringGroups_) {
    c = sharded_ ? groupReduceScatter(ctx_.topo, dpGroups_, bytes, ctx_.comm)
                 : groupAllReduce(ctx_.topo, dpGroups_, bytes, ctx_.comm);
    if (dpGroups_.algorithm == AllreduceAlgorithm::kAuto)
      t_.picks.emplace_back(c.algorithm, bytes.value());
  } else {
    c = allReduce(ctx_.topo, gradientAllreduce(ctx_.sc), bytes, ctx_.comm);
    t_.picks.emplace_back(c.algorithm, bytes.value());
  }
  beside(c, std::move(deps));
}

void GradientSyncs::beside(const CollectiveCost& c, std::vector<int> deps, double notBefore) {
  deps.push_back(syncs_.empty() ? -1 : syncs_.back());
  syncs_.push_back(s_.beside(c, std::move(deps), notBefore));
}

void GradientSyncs::afterBackward(int i, int gradient, bool buckets) {
  const auto& x = tp_.layers[static_cast<size_t>(i)];
  // Sequence parallelism: the group sums a replicated layer's weight
  // gradient, in turn with the syncs (which wait for it).
  if (x.sumsGradient)
    beside(groupAllReduce(ctx_.topo, RankGroups{tp_.t, 1}, Bytes(x.params * ctx_.e), ctx_.comm),
           {gradient});
  if (!buckets || !ctx_.sc.options.overlap)
    return;
  const int bk = bucketOf_[static_cast<size_t>(i - first_)];
  if (bk >= 0 && closer_[static_cast<size_t>(bk)] == i)
    sync(bucketParams_[static_cast<size_t>(bk)], {gradient >= 0 ? gradient : s_.path()});
}

void GradientSyncs::syncBuckets(const std::vector<int>& deps) {
  for (double p : bucketParams_)
    sync(p, deps);
}

void GradientSyncs::update(bool zero3, double extraParams) {
  // The update of this worker's parameters, once every gradient is
  // synchronised. ZeRO-1/2: per bucket, its 1/dp chunk, then the bucket's
  // weights all-gathered beside the next bucket's update (Megatron's
  // distributed optimizer); else all it holds (ZeRO-3: its 1/dp).
  double local = extraParams;
  for (int i = first_; i < last_; ++i)
    local += tp_.layers[static_cast<size_t>(i)].params;
  for (double p : earlierParams_)
    local += p;
  if (sharded_ && !zero3) {
    // The gathers take turns on the communication stream, as the syncs do.
    int gathered = -1;
    auto params = bucketParams_;
    params.insert(params.end(), earlierParams_.begin(), earlierParams_.end());
    if (extraParams > 0)
      params.push_back(extraParams);
    for (double p : params) {
      const int updated = s_.compute(ctx_.update(p / dp_), Phase::kUpdate, syncs_);
      gathered = s_.beside(groupAllGather(ctx_.topo, dpGroups_, Bytes(p * ctx_.e), ctx_.comm),
                           {updated, gathered});
    }
  } else {
    s_.compute(ctx_.update(zero3 ? local / dp_ : local), Phase::kUpdate, syncs_);
  }
}

void ShardedLayers::collective(StepTasks& s, const TpComm& c) const {
  if (c.op == TpCollective::kNone || tp.t <= 1)
    return;
  const Bytes bytes(c.elems * ctx.b * ctx.e);
  switch (c.op) {
    case TpCollective::kAllReduce:
      s.inPath(groupAllReduce(ctx.topo, tpGroups, bytes, ctx.comm));
      break;
    case TpCollective::kReduceScatter:
      s.inPath(groupReduceScatter(ctx.topo, tpGroups, bytes, ctx.comm));
      break;
    case TpCollective::kAllGather:
      s.inPath(groupAllGather(ctx.topo, tpGroups, bytes, ctx.comm));
      break;
    case TpCollective::kNone:
      break;
  }
}

void ShardedLayers::forward(StepTasks& s, int i, std::vector<int> extra) const {
  const auto& x = tp.layers[static_cast<size_t>(i)];
  collective(s, x.fwdBefore);
  s.compute(time(i, Phase::kFwd), Phase::kFwd, std::move(extra));
  collective(s, x.fwdAfter);
}

int ShardedLayers::backward(StepTasks& s, int i, int first, const std::vector<int>& extra) const {
  const auto& net = ctx.net;
  const auto& o = ctx.sc.options;
  const auto& l = net.layers[static_cast<size_t>(i)];
  const auto& x = tp.layers[static_cast<size_t>(i)];
  // Full recomputation: at a block's last layer, rerun the block's forward
  // (its tensor-parallel collectives included) from the kept input.
  if (o.recompute == Recompute::kFull && l.block >= 0 &&
      (i == static_cast<int>(net.layers.size()) - 1 ||
       net.layers[static_cast<size_t>(i) + 1].block != l.block)) {
    int from = i;
    while (from > first && net.layers[static_cast<size_t>(from) - 1].block == l.block)
      --from;
    for (int j = from; j <= i; ++j)
      forward(s, j, j == from ? extra : std::vector<int>{});
  }
  if (o.recompute == Recompute::kSelective && l.kind == LayerKind::kAttention)
    s.compute(ctx.time(l, Phase::kFwd, ctx.b, x.work * attentionCoreShare(l)), Phase::kFwd, extra);
  collective(s, x.bwdBefore);
  int gradient = -1;
  if (l.computesWeightGradient())
    gradient = s.compute(time(i, Phase::kBwdWeights), Phase::kBwdWeights, extra);
  if (!l.readsNetworkInput()) {
    s.compute(time(i, Phase::kBwdData), Phase::kBwdData, extra);
    collective(s, x.bwdAfter);
  }
  return gradient;
}

}  // namespace strata::cost

namespace strata {

std::string describePlacement(const Topology& topo, const Scenario& sc) {
  const auto& o = sc.options;
  const RankLayout lay = rankLayoutOf(sc);
  const int t = lay.tp, p = lay.pp, dp = lay.dp;
  // The outermost level a group's members meet at: consecutive ranks for
  // tensor parallelism, a replica's first and last stage, a stage's first
  // and last replica.
  auto over = [&](int first, int last) {
    const int level = topo.meetLevel(first, last);
    return level < 0 ? std::string("no link")
                     : topo.cluster().levels[static_cast<size_t>(level)].name + " links";
  };
  auto apart = [](int d) { return d > 1 ? fmt::format(" {} apart", d) : std::string(); };
  std::vector<std::string> parts;
  parts.push_back(p > 1 ? fmt::format("K = {} = dp {} x tp {} x pp {}{}", sc.workers, dp, t, p,
                                      o.placement == Placement::kTpPpDp
                                          ? std::string()
                                          : fmt::format(" (ranks {})", toString(o.placement)))
                        : fmt::format("K = {} = dp {} x tp {}", sc.workers, dp, t));
  if (t > 1)
    parts.push_back(fmt::format("tensor-parallel groups of {} consecutive workers over {}{}", t,
                                over(0, t - 1),
                                o.sequenceParallel ? " with sequence parallelism" : ""));
  if (p > 1)
    parts.push_back(fmt::format("pipelines of {} stages{} over {}", p, apart(lay.stageDistance()),
                                over(0, lay.rank(0, p - 1, 0))));
  if (dp > 1) {
    // How they synchronise where --allreduce says hierarchical (auto: where
    // it applies, per buffer).
    std::string how;
    const RankGroups groups{lay.dpSpan(), lay.dpStride(), gradientAllreduce(sc)};
    if (groups.algorithm == AllreduceAlgorithm::kHierarchical) {
      const auto [inner, outer] = hierarchicalLevels(topo, groups);
      if (inner.size() > 1 && outer.size() > 1)
        how = fmt::format(
            ", synchronised hierarchically: {} per node over {}, then one ring "
            "per rail across {} nodes over {}",
            inner.size(), over(0, inner.stride * (inner.size() - 1)), outer.size(),
            over(0, outer.stride * (outer.size() - 1)));
      else if (inner.size() > 1)
        how = ", each inside one node (hierarchical: its ring)";
      else
        how = ", one per node: a ring per rail (hierarchical)";
    } else if (groups.algorithm == AllreduceAlgorithm::kTree) {
      how = ", each synchronised by a double binary tree";
    } else if (groups.algorithm == AllreduceAlgorithm::kAuto) {
      how =
          ", each buffer synchronised by ring, hierarchically or by tree, whichever is cheapest "
          "(auto)";
    }
    parts.push_back(fmt::format("data-parallel groups of {} workers{} over {}{}", dp,
                                apart(lay.dpStride()), over(0, lay.rank(dp - 1, 0, 0)), how));
  }
  if (o.zero > 0)
    parts.push_back(fmt::format("ZeRO-{} ({} sharded over each data-parallel group)", o.zero,
                                o.zero == 1   ? "optimizer states"
                                : o.zero == 2 ? "optimizer states and gradients"
                                              : "optimizer states, gradients and weights"));
  if (o.recompute != Recompute::kNone)
    parts.push_back(fmt::format("{} recomputation", toString(o.recompute)));
  return fmt::format("{}", fmt::join(parts, "; "));
}

}  // namespace strata

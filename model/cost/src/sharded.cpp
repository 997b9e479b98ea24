// Data parallelism with today's dimensions: Megatron tensor (and sequence)
// parallelism inside groups of t workers, ZeRO stages over the dp = K / t
// workers holding the same slice, and activation recomputation. One worker's
// step is a list of lane tasks (playLanes): compute on its stream, the
// tensor-parallel collectives in the stream's path (the next layer waits for
// them), and the data-parallel ones beside it. Formulas and sources:
// docs/cost-model.md, "Tensor parallelism, ZeRO and recomputation".
#include <fmt/format.h>

#include <algorithm>

#include "step_context.h"
#include "strata/model/tensor_parallel.h"

namespace strata::cost {

namespace {

// A step being laid out as lane tasks, with what each task is.
class StepTasks {
 public:
  StepTasks(const Context& ctx, Tally& t) : ctx_(ctx), t_(t) {}

  // A compute task after everything in the stream's path (and `extra`).
  int compute(Seconds work, Phase phase, std::vector<int> extra = {}) {
    if (path_ >= 0)
      extra.push_back(path_);
    path_ = add({false, work, std::move(extra)}, phase);
    return path_;
  }
  // A collective in the stream's path: it waits for the path and the path
  // waits for it.
  void inPath(const CollectiveCost& c) {
    if (c.time.value() <= 0 && c.steps == 0)
      return;
    path_ = add({true, c.time, path_ >= 0 ? std::vector<int>{path_} : std::vector<int>{}}, {});
    note(c);
  }
  // A collective beside the stream, after `deps`.
  int beside(const CollectiveCost& c, std::vector<int> deps) {
    std::erase(deps, -1);
    note(c);
    return add({true, c.time, std::move(deps), true}, {});
  }
  int path() const { return path_; }
  const std::vector<LaneTask>& tasks() const { return tasks_; }

  // Plays the tasks and adds the step's times to the tally; returns the step.
  Seconds play() {
    const auto s =
        playLanes(tasks_, ctx_.lanes.compute, ctx_.lanes.comm, ctx_.handoff, &ctx_.lanes);
    double end = 0, computeWall = 0, commWall = 0;
    for (size_t i = 0; i < tasks_.size(); ++i) {
      const double wall = s.end[i] - s.start[i];
      end = std::max(end, s.end[i]);
      if (tasks_[i].comm) {
        commWall += wall;
        continue;
      }
      computeWall += wall;
      switch (phase_[i]) {
        case Phase::kFwd:
          t_.compute.fwd += Seconds(wall);
          break;
        case Phase::kBwdData:
          t_.compute.bwdData += Seconds(wall);
          break;
        case Phase::kBwdWeights:
          t_.compute.bwdWeights += Seconds(wall);
          break;
        case Phase::kUpdate:
          t_.compute.update += Seconds(wall);
          break;
      }
    }
    t_.communication += Seconds(commWall);
    t_.exposed += Seconds(std::max(0.0, end - computeWall));
    return Seconds(end);
  }

 private:
  int add(LaneTask task, Phase phase) {
    tasks_.push_back(std::move(task));
    phase_.push_back(phase);
    return static_cast<int>(tasks_.size()) - 1;
  }
  // Bytes and the bottleneck of a collective; its time is the task's wall.
  void note(const CollectiveCost& c) {
    for (size_t i = 0; i < t_.sent.size() && i < c.sent.size(); ++i) {
      t_.sent[i] += c.sent[i];
      t_.received[i] += c.received[i];
    }
    if (c.time > t_.worstCollective && c.bottleneckLink >= 0) {
      t_.worstCollective = c.time;
      t_.bottleneckLink = c.bottleneckLink;
      t_.bottleneckUp = c.bottleneckUp;
    }
  }

  const Context& ctx_;
  Tally& t_;
  std::vector<LaneTask> tasks_;
  std::vector<Phase> phase_;
  int path_ = -1;
};

}  // namespace

Seconds shardedStep(const Context& ctx, Tally& t, RoundInfo& /*info*/, Seconds& firstStep,
                    int& steps) {
  steps = 1;
  const auto& net = ctx.net;
  const auto& o = ctx.sc.options;
  const int n = static_cast<int>(net.layers.size());
  const TpLayout tp = tensorParallelLayout(net, o.tp, o.sequenceParallel);
  const int dp = dataParallelSize(ctx.sc);
  const RankGroups tpGroups{tp.t, 1}, dpGroups{ctx.k, tp.t};
  const double b = ctx.b, e = ctx.e;
  StepTasks s(ctx, t);

  auto tpCollective = [&](const TpComm& c) {
    if (c.op == TpCollective::kNone || tp.t <= 1)
      return;
    const Bytes bytes(c.elems * b * e);
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
  };
  auto time = [&](int i, Phase p) {
    return ctx.time(net.layers[static_cast<size_t>(i)], p, b,
                    tp.layers[static_cast<size_t>(i)].work);
  };

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
  for (int i = 0; i < n; ++i) {
    const auto extra = enterUnit(i);
    const auto& x = tp.layers[static_cast<size_t>(i)];
    tpCollective(x.fwdBefore);
    s.compute(time(i, Phase::kFwd), Phase::kFwd, extra);
    tpCollective(x.fwdAfter);
  }

  // Backward, last layer first, with the data-parallel gradient sync.
  const bool sharded = o.zero >= 1 && dp > 1;
  const bool ringGroups = tp.t > 1 || o.zero >= 1;
  std::vector<int> syncs;
  auto sync = [&](double params, std::vector<int> deps) {
    if (dp <= 1 || params <= 0)
      return;
    const Bytes bytes(params * e);
    CollectiveCost c;
    if (sharded) {
      c = groupReduceScatter(ctx.topo, dpGroups, bytes, ctx.comm);
    } else if (ringGroups) {
      c = groupAllReduce(ctx.topo, dpGroups, bytes, ctx.comm);
    } else {
      c = allReduce(ctx.topo, gradientAllreduce(ctx.sc), bytes, ctx.comm);
      t.picks.emplace_back(c.algorithm, bytes.value());
    }
    deps.push_back(syncs.empty() ? -1 : syncs.back());
    syncs.push_back(s.beside(c, std::move(deps)));
  };
  // Buckets of local gradients (ZeRO-0..2; ZeRO-3 reduce-scatters per unit).
  std::vector<int> bucketStart(static_cast<size_t>(n), -1);
  std::vector<double> bucketParams;
  {
    bool open = false;
    for (int i = n - 1; i >= 0; --i) {
      const double p = tp.layers[static_cast<size_t>(i)].params;
      if (p <= 0)
        continue;
      if (!open) {
        bucketParams.push_back(0);
        open = true;
      }
      bucketParams.back() += p;
      bucketStart[static_cast<size_t>(i)] = static_cast<int>(bucketParams.size()) - 1;
      if (o.overlap && bucketParams.back() * e >= o.bucket.value())
        open = false;
    }
  }
  // Per bucket: the layer whose gradient closes it (its lowest layer).
  std::vector<int> bucketCloser(bucketParams.size(), -1);
  for (int i = 0; i < n; ++i)
    if (const int bk = bucketStart[static_cast<size_t>(i)]; bk >= 0 && bucketCloser[size_t(bk)] < 0)
      bucketCloser[static_cast<size_t>(bk)] = i;

  if (zero3 && unit >= 0)
    forwardDone[static_cast<size_t>(unit)] = s.path();
  backward = true;
  unitDone.clear();
  lastGather = -1;
  unit = -1;
  double unitGrads = 0;
  for (int i = n - 1; i >= 0; --i) {
    const auto& l = net.layers[static_cast<size_t>(i)];
    const auto& x = tp.layers[static_cast<size_t>(i)];
    const int u = unitOf[static_cast<size_t>(i)];
    const auto extra = enterUnit(i);
    // Full recomputation: at a block's last layer, rerun the block's forward
    // (its tensor-parallel collectives included) from the kept input.
    if (o.recompute == Recompute::kFull && l.block >= 0 &&
        (i == n - 1 || net.layers[static_cast<size_t>(i) + 1].block != l.block)) {
      int first = i;
      while (first > 0 && net.layers[static_cast<size_t>(first) - 1].block == l.block)
        --first;
      for (int j = first; j <= i; ++j) {
        tpCollective(tp.layers[static_cast<size_t>(j)].fwdBefore);
        s.compute(time(j, Phase::kFwd), Phase::kFwd, j == first ? extra : std::vector<int>{});
        tpCollective(tp.layers[static_cast<size_t>(j)].fwdAfter);
      }
    }
    if (o.recompute == Recompute::kSelective && l.kind == LayerKind::kAttention)
      s.compute(ctx.time(l, Phase::kFwd, b,
                         tp.layers[static_cast<size_t>(i)].work * attentionCoreShare(l)),
                Phase::kFwd, extra);
    tpCollective(x.bwdBefore);
    int gradient = -1;
    if (l.computesWeightGradient())
      gradient = s.compute(time(i, Phase::kBwdWeights), Phase::kBwdWeights, extra);
    // Sequence parallelism: the group sums a replicated layer's weight
    // gradient, in turn with the syncs (which wait for it).
    if (x.sumsGradient)
      syncs.push_back(s.beside(groupAllReduce(ctx.topo, tpGroups, Bytes(x.params * e), ctx.comm),
                               {gradient, syncs.empty() ? -1 : syncs.back()}));
    if (!l.readsNetworkInput()) {
      s.compute(time(i, Phase::kBwdData), Phase::kBwdData, extra);
      tpCollective(x.bwdAfter);
    }
    if (zero3) {
      unitGrads += x.params;
      const bool unitEnds = u >= 0 && (i == 0 || unitOf[static_cast<size_t>(i) - 1] != u);
      if (unitEnds) {
        sync(unitGrads, {s.path()});
        unitGrads = 0;
      }
    } else if (const int bk = bucketStart[static_cast<size_t>(i)];
               o.overlap && bk >= 0 && bucketCloser[static_cast<size_t>(bk)] == i) {
      sync(bucketParams[static_cast<size_t>(bk)], {gradient >= 0 ? gradient : s.path()});
    }
  }
  if (!zero3 && !o.overlap)
    for (double p : bucketParams)
      sync(p, {s.path()});

  // The update of this worker's parameters, once every gradient is
  // synchronised. ZeRO-1/2: per bucket, its 1/dp chunk, then the bucket's
  // weights all-gathered beside the next bucket's update (Megatron's
  // distributed optimizer); else all it holds (ZeRO-3: its 1/dp).
  double local = 0;
  for (const auto& x : tp.layers)
    local += x.params;
  if (sharded && !zero3) {
    // The gathers take turns on the communication stream, as the syncs do.
    int gathered = -1;
    for (double p : bucketParams) {
      const int updated = s.compute(ctx.update(p / dp), Phase::kUpdate, syncs);
      gathered =
          s.beside(groupAllGather(ctx.topo, dpGroups, Bytes(p * e), ctx.comm), {updated, gathered});
    }
  } else {
    s.compute(ctx.update(zero3 ? local / dp : local), Phase::kUpdate, syncs);
  }
  firstStep = s.play();
  return firstStep;
}

}  // namespace strata::cost

namespace strata {

std::string describePlacement(const Topology& topo, const Scenario& sc) {
  const auto& o = sc.options;
  const int t = o.tp, dp = dataParallelSize(sc);
  // The outermost level a group's members meet at: consecutive ranks for
  // tensor parallelism, ranks t apart for data parallelism.
  auto over = [&](int first, int last) {
    const int level = topo.meetLevel(first, last);
    return level < 0 ? std::string("no link")
                     : topo.cluster().levels[static_cast<size_t>(level)].name + " links";
  };
  std::vector<std::string> parts;
  parts.push_back(fmt::format("K = {} = dp {} x tp {}", sc.workers, dp, t));
  if (t > 1)
    parts.push_back(fmt::format("tensor-parallel groups of {} consecutive workers over {}{}", t,
                                over(0, t - 1),
                                o.sequenceParallel ? " with sequence parallelism" : ""));
  if (dp > 1)
    parts.push_back(fmt::format("data-parallel groups of {} workers{} over {}", dp,
                                t > 1 ? fmt::format(" {} apart", t) : std::string(),
                                over(0, (dp - 1) * t)));
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

// Ring with tensor parallelism, ZeRO or recomputation as a Plan: the tasks of
// cost/src/sharded.cpp's step, task for task. Each worker's compute is its
// share of each layer (Task::fraction, tensor_parallel.h); the
// tensor-parallel collectives are ring collectives inside groups of t
// consecutive workers that the next layer waits for; the data-parallel ones
// run in the groups of ranks t apart beside backprop (buckets, or per unit
// with ZeRO-3, whose weight gathers run one unit ahead of the compute).
#include "builder.h"
#include "strata/model/tensor_parallel.h"

namespace strata::planning {

using GroupOp = Builder::GroupOp;

void lowerSharded(Builder& b, const Network& net, const Scenario& sc) {
  const auto& o = sc.options;
  const int n = static_cast<int>(net.layers.size());
  const TpLayout tp = tensorParallelLayout(net, o.tp, o.sequenceParallel);
  const int dp = dataParallelSize(sc);
  const RankGroups tpGroups{tp.t, 1}, dpGroups{sc.workers, tp.t, gradientAllreduce(sc)};
  const double e = elementBytes(o.element);
  const double examples = sc.batchPerWorker;
  const int workers = b.computeWorkers();
  std::vector<int> path(static_cast<size_t>(workers), -1);  // each worker's stream

  auto compute = [&](int layer, Phase phase, double fraction, const Deps& extra,
                     bool recompute = false) {
    for (int w = 0; w < workers; ++w) {
      Deps deps = extra;
      deps.push_back(path[static_cast<size_t>(w)]);
      auto& p = path[static_cast<size_t>(w)];
      p = b.compute(w, layer, phase, examples, fraction, deps);
      b.plan().tasks[static_cast<size_t>(p)].recompute = recompute;
    }
  };
  // A tensor-parallel collective in every worker's path.
  auto inPath = [&](const TpComm& c, int layer, BufferKind buffer) {
    if (c.op == TpCollective::kNone || tp.t <= 1)
      return;
    const int done = b.groupCollective(groupOpOf(c.op), tpGroups, Bytes(c.elems * examples * e),
                                       buffer, layer, layer, path);
    std::fill(path.begin(), path.end(), done);
  };
  auto work = [&](int i) { return tp.layers[static_cast<size_t>(i)].work; };

  // ZeRO-3's gathers (sharded.cpp): each unit's weights over the
  // data-parallel group, after the gather before it and the compute of the
  // unit two before it; before the backward, also after the unit's own
  // forward (the gather rewrites the weights that forward reads).
  const bool zero3 = o.zero >= 3 && dp > 1;
  const auto units = zeroGatherUnits(net, tp);
  const auto& unitOf = units.unitOf;
  int lastGather = -1;
  std::vector<Deps> unitDone;
  std::vector<Deps> forwardDone(units.params.size());  // per unit: the path after its forward
  bool backward = false;
  std::vector<int> gatherOf(units.params.size(), -1);
  auto gather = [&](int u, int layer) {
    Deps start{lastGather};
    if (unitDone.size() >= 2) {
      const auto& before = unitDone[unitDone.size() - 2];
      start.insert(start.end(), before.begin(), before.end());
    }
    if (backward) {
      const auto& own = forwardDone[static_cast<size_t>(u)];
      start.insert(start.end(), own.begin(), own.end());
    }
    gatherOf[static_cast<size_t>(u)] = lastGather = b.groupCollective(
        GroupOp::kAllGather, dpGroups, Bytes(units.params[static_cast<size_t>(u)] * e),
        BufferKind::kWeights, layer, layer, start);
  };
  int unit = -1;
  // Before layer i (in pass order): a new unit's gather; the deps on it.
  auto enterUnit = [&](int i) -> Deps {
    const int u = unitOf[static_cast<size_t>(i)];
    if (!zero3 || u < 0)
      return {};
    if (u != unit) {
      if (unit >= 0) {
        unitDone.push_back(path);
        if (!backward)
          forwardDone[static_cast<size_t>(unit)] = path;
      }
      gather(u, i);
      unit = u;
    }
    return {gatherOf[static_cast<size_t>(u)]};
  };

  for (int i = 0; i < n; ++i) {
    const Deps extra = enterUnit(i);
    const auto& x = tp.layers[static_cast<size_t>(i)];
    inPath(x.fwdBefore, i, BufferKind::kActivations);
    compute(i, Phase::kFwd, work(i), extra);
    inPath(x.fwdAfter, i, BufferKind::kActivations);
  }

  // Backward with the data-parallel sync.
  const bool sharded = o.zero >= 1 && dp > 1;
  const bool ringGroups = tp.t > 1 || o.zero >= 1;
  int lastSync = -1;
  auto sync = [&](double params, int firstLayer, int lastLayer, Deps start) {
    if (dp <= 1 || params <= 0)
      return;
    const Bytes bytes(params * e);
    start.push_back(lastSync);
    if (sharded)
      lastSync = b.groupCollective(GroupOp::kReduceScatter, dpGroups, bytes,
                                   BufferKind::kWeightGradients, firstLayer, lastLayer, start);
    else if (ringGroups)
      lastSync = b.groupCollective(GroupOp::kAllReduce, dpGroups, bytes,
                                   BufferKind::kWeightGradients, firstLayer, lastLayer, start);
    else
      lastSync = b.allReduce(gradientAllreduce(sc), bytes, BufferKind::kWeightGradients, firstLayer,
                             lastLayer, start);
  };
  // Buckets of local gradients, last layers first, as sharded.cpp.
  const std::vector<TpBucket> buckets = gradientBucketsOf(tp, o, e, 0, n);
  std::vector<int> bucketOf(static_cast<size_t>(n), -1);
  for (size_t k = 0; k < buckets.size(); ++k)
    for (int i = buckets[k].first; i <= buckets[k].last; ++i)
      if (tp.layers[static_cast<size_t>(i)].params > 0)
        bucketOf[static_cast<size_t>(i)] = static_cast<int>(k);

  if (zero3 && unit >= 0)
    forwardDone[static_cast<size_t>(unit)] = path;
  backward = true;
  unitDone.clear();
  lastGather = -1;
  unit = -1;
  double unitGrads = 0;
  int unitLast = -1;
  for (int i = n - 1; i >= 0; --i) {
    const auto& l = net.layers[static_cast<size_t>(i)];
    const auto& x = tp.layers[static_cast<size_t>(i)];
    const Deps extra = enterUnit(i);
    if (o.recompute == Recompute::kFull && l.block >= 0 &&
        (i == n - 1 || net.layers[static_cast<size_t>(i) + 1].block != l.block)) {
      int first = i;
      while (first > 0 && net.layers[static_cast<size_t>(first) - 1].block == l.block)
        --first;
      for (int j = first; j <= i; ++j) {
        inPath(tp.layers[static_cast<size_t>(j)].fwdBefore, j, BufferKind::kActivations);
        compute(j, Phase::kFwd, work(j), j == first ? extra : Deps{}, true);
        inPath(tp.layers[static_cast<size_t>(j)].fwdAfter, j, BufferKind::kActivations);
      }
    }
    if (o.recompute == Recompute::kSelective && l.kind == LayerKind::kAttention)
      compute(i, Phase::kFwd, work(i) * attentionCoreShare(l), extra, true);
    inPath(x.bwdBefore, i, BufferKind::kActivationGradients);
    Deps gradient;
    if (l.computesWeightGradient()) {
      compute(i, Phase::kBwdWeights, work(i), extra);
      gradient = path;
    }
    // Sequence parallelism: the group sums a replicated layer's weight
    // gradient, in turn with the syncs (which wait for it).
    if (x.sumsGradient && tp.t > 1) {
      Deps start = gradient;
      start.push_back(lastSync);
      lastSync = b.groupCollective(GroupOp::kAllReduce, tpGroups, Bytes(x.params * e),
                                   BufferKind::kWeightGradients, i, i, start);
    }
    if (!l.readsNetworkInput()) {
      compute(i, Phase::kBwdData, work(i), extra);
      inPath(x.bwdAfter, i, BufferKind::kActivationGradients);
    }
    if (zero3) {
      const int u = unitOf[static_cast<size_t>(i)];
      if (unitLast < 0)
        unitLast = i;
      unitGrads += x.params;
      if (u >= 0 && (i == 0 || unitOf[static_cast<size_t>(i) - 1] != u)) {
        sync(unitGrads, i, unitLast, path);
        unitGrads = 0;
        unitLast = -1;
      }
    } else if (const int bk = bucketOf[static_cast<size_t>(i)];
               o.overlap && bk >= 0 && buckets[static_cast<size_t>(bk)].first == i) {
      const auto& bucket = buckets[static_cast<size_t>(bk)];
      sync(bucket.params, bucket.first, bucket.last, gradient.empty() ? path : gradient);
    }
  }
  if (!zero3 && !o.overlap)
    for (const auto& bucket : buckets)
      sync(bucket.params, bucket.first, bucket.last, path);

  // The update of this worker's parameters. ZeRO-1/2: per bucket, its
  // chunk (its position in the data-parallel ring), then the bucket's
  // weights all-gathered beside the next bucket's update (Megatron's
  // distributed optimizer); else every parameter it holds (ZeRO-3: its 1/dp).
  double local = 0;
  for (const auto& x : tp.layers)
    local += x.params;
  // Worker w's update of its chunk of layers [first, last] (`params` of
  // them): the chunk its reduce-scatter summed, its position w / t in the
  // data-parallel ring (ringNext(w, K, t)).
  auto updateChunk = [&](int w, int first, int last, double params) {
    auto& p = path[static_cast<size_t>(w)];
    p = b.update(w, first, last, params, {p, lastSync});
    auto& task = b.plan().tasks[static_cast<size_t>(p)];
    task.part = w / tp.t;
    task.shards = dp;
    return p;
  };
  if (sharded && !zero3) {
    int gathered = -1;  // the gathers take turns on the communication stream
    for (const auto& bucket : buckets) {
      Deps updated{gathered};
      for (int w = 0; w < workers; ++w)
        updated.push_back(updateChunk(w, bucket.first, bucket.last, bucket.params / dp));
      gathered = b.groupCollective(GroupOp::kAllGather, dpGroups, Bytes(bucket.params * e),
                                   BufferKind::kWeights, bucket.first, bucket.last, updated);
    }
    return;
  }
  if (zero3) {
    // Per gather unit, this worker's chunk of it (its position in the
    // data-parallel ring: the chunk its reduce-scatter summed); the next
    // step's gathers bring the others' chunks.
    for (int first = 0; first < n;) {
      const int u = unitOf[static_cast<size_t>(first)];
      int last = first;
      while (last + 1 < n && unitOf[static_cast<size_t>(last) + 1] == u)
        ++last;
      if (u >= 0)
        for (int w = 0; w < workers; ++w)
          updateChunk(w, first, last, units.params[static_cast<size_t>(u)] / dp);
      first = last + 1;
    }
    return;
  }
  for (int w = 0; w < workers; ++w)
    path[static_cast<size_t>(w)] =
        b.update(w, 0, n - 1, local, {path[static_cast<size_t>(w)], lastSync});
}

}  // namespace strata::planning

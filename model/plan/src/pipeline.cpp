// Pipelines and gradient accumulation as a Plan: the tasks of
// cost/src/pipeline.cpp's step, task for task. Each stage runs its
// schedule's order (pipeline.h, pipelineOrder): a chunk's forward or backward
// of one micro-batch is its layers' compute tasks on the stage's workers with
// the stage's tensor-parallel collectives in their path (as sharded.cpp), and
// a "p2p" transfer carries the boundary tensor to the next chunk's stage (the
// gradient back). The first stage's forward waits for nothing but its own
// stream, so the bubble comes out of the dependencies. After a stage's last
// backward, as the closed form's tail: the other chunks' gradient syncs
// (ready at once), the last chunk's overlapped with that backward, the tied
// table's copy sent to the other stage holding one, then the update.
#include "strata/model/pipeline.h"

#include <fmt/format.h>

#include "builder.h"
#include "strata/model/tensor_parallel.h"

namespace strata::planning {

namespace {

using GroupOp = Builder::GroupOp;

}  // namespace

void lowerPipeline(Builder& b, const Network& net, const Scenario& sc,
                   const std::vector<int>& chunks) {
  const auto& o = sc.options;
  const int n = static_cast<int>(net.layers.size());
  const TpLayout tp = tensorParallelLayout(net, o.tp, o.sequenceParallel);
  const int t = tp.t, p = o.pp, m = o.microbatches, k = sc.workers;
  const int v = o.schedule == PipelineSchedule::kInterleaved ? o.virtualStages : 1;
  const int q = p * v;
  STRATA_ENFORCE(static_cast<int>(chunks.size()) == q + 1);
  const int dp = dataParallelSize(sc);
  const double e = elementBytes(o.element), examples = sc.batchPerWorker;
  const RankLayout layout = rankLayoutOf(sc);
  const RankGroups tpGroups{t, 1},
      dpGroups{layout.dpSpan(), layout.dpStride(), gradientAllreduce(sc)};
  const bool sharded = o.zero >= 1 && dp > 1;
  const bool ringGroups = t > 1 || o.zero >= 1 || p > 1;
  auto stageOf = [&](int j) { return j % p; };
  auto chunkOf = [&](int s, int local) { return local * p + s; };
  auto work = [&](int i) { return tp.layers[static_cast<size_t>(i)].work; };
  // Stage s's ranks (RankLayout::rank), ascending.
  std::vector<std::vector<int>> ranks(static_cast<size_t>(p));
  for (int r = 0; r < k; ++r)
    ranks[static_cast<size_t>(layout.stage(r))].push_back(r);
  // The ranks whose compute and update tasks are lowered: all of the
  // stage's, or in a representative plan its first (replica 0's
  // tensor-parallel rank 0), which stands for the stage's dp x tp ranks: they
  // compute the same layers at the same share. The collectives and
  // transfers still name every rank.
  std::vector<std::vector<int>> computing = ranks;
  if (b.plan().representative)
    for (auto& c : computing)
      c.resize(1);
  std::vector<int> path(static_cast<size_t>(k), -1);
  // What the next task in the stage's path also waits for (the transfer
  // that brought a chunk's input), whether a compute or a collective.
  Deps entry;

  auto only = [&](int s) { return Members{s, p, layout.stageDistance()}; };
  auto stagePath = [&](int s) {
    Deps d;
    for (int r : computing[static_cast<size_t>(s)])
      d.push_back(path[static_cast<size_t>(r)]);
    return d;
  };
  auto setPath = [&](int s, int task) {
    for (int r : ranks[static_cast<size_t>(s)])
      path[static_cast<size_t>(r)] = task;
  };
  auto compute = [&](int s, int layer, Phase phase, double fraction, const Deps& extra,
                     bool recompute = false) {
    int last = -1;
    for (int r : computing[static_cast<size_t>(s)]) {
      Deps deps = extra;
      deps.insert(deps.end(), entry.begin(), entry.end());
      auto& x = path[static_cast<size_t>(r)];
      deps.push_back(x);
      x = last = b.compute(r, layer, phase, examples, fraction, deps);
      b.plan().tasks[static_cast<size_t>(x)].recompute = recompute;
    }
    entry.clear();
    return last;
  };
  // A tensor-parallel collective in the stage's path.
  auto inPath = [&](int s, const TpComm& c, int layer, BufferKind buffer) {
    if (c.op == TpCollective::kNone || t <= 1)
      return;
    Deps deps = stagePath(s);
    deps.insert(deps.end(), entry.begin(), entry.end());
    entry.clear();
    setPath(s, b.groupCollective(groupOpOf(c.op), tpGroups, Bytes(c.elems * examples * e), buffer,
                                 layer, layer, deps, only(s)));
  };
  auto forward = [&](int s, int i, bool recompute = false) {
    const auto& x = tp.layers[static_cast<size_t>(i)];
    inPath(s, x.fwdBefore, i, BufferKind::kActivations);
    compute(s, i, Phase::kFwd, work(i), {}, recompute);
    inPath(s, x.fwdAfter, i, BufferKind::kActivations);
  };

  // The data-parallel syncs, in turn on each stage's communication side.
  std::vector<int> lastSync(static_cast<size_t>(p), -1);
  auto beside = [&](int s, auto&& collective, Deps deps) {
    deps.push_back(lastSync[static_cast<size_t>(s)]);
    const int micro = b.micro();
    b.setMicro(-1);  // what a sync carries is every micro-batch's
    const int done = collective(deps);
    b.setMicro(micro);
    if (done >= 0)
      lastSync[static_cast<size_t>(s)] = done;
  };
  auto sync = [&](int s, const TpBucket& bucket, const Deps& deps) {
    if (dp <= 1 || bucket.params <= 0)
      return;
    const Bytes bytes(bucket.params * e);
    beside(
        s,
        [&](const Deps& d) {
          if (sharded)
            return b.groupCollective(GroupOp::kReduceScatter, dpGroups, bytes,
                                     BufferKind::kWeightGradients, bucket.first, bucket.last, d,
                                     only(s));
          if (ringGroups)
            return b.groupCollective(GroupOp::kAllReduce, dpGroups, bytes,
                                     BufferKind::kWeightGradients, bucket.first, bucket.last, d,
                                     only(s));
          return b.allReduce(gradientAllreduce(sc), bytes, BufferKind::kWeightGradients,
                             bucket.first, bucket.last, d);
        },
        deps);
  };
  // Sequence parallelism: the group sums a replicated layer's weight gradient.
  auto sumReplicated = [&](int s, int i, const Deps& deps) {
    const auto& x = tp.layers[static_cast<size_t>(i)];
    if (!x.sumsGradient || t <= 1)
      return;
    beside(
        s,
        [&](const Deps& d) {
          return b.groupCollective(GroupOp::kAllReduce, tpGroups, Bytes(x.params * e),
                                   BufferKind::kWeightGradients, i, i, d, only(s));
        },
        deps);
  };

  // The tied tables (cost/src/pipeline.cpp, tiedCopies): an fc tied to an
  // embedding on another stage keeps a copy of its token table.
  struct Tied {
    int fc = -1, owner = -1, fcStage = 0, ownerStage = 0;
    double table = 0;
  };
  std::vector<Tied> tied;
  auto stageOfLayer = [&](int i) {
    return stageOf(
        static_cast<int>(std::upper_bound(chunks.begin(), chunks.end(), i) - chunks.begin() - 1));
  };
  for (int i = 0; i < n; ++i)
    if (const int owner = net.layers[static_cast<size_t>(i)].spec.tiedTo;
        owner >= 0 && stageOfLayer(i) != stageOfLayer(owner)) {
      const auto& l = net.layers[static_cast<size_t>(owner)];
      tied.push_back({i, owner, stageOfLayer(i), stageOfLayer(owner),
                      double((l.spec.vocab + t - 1) / t) * l.outShape.c});
    }

  // Every rank of stage `from` to the same replica's and tensor-parallel
  // position's rank of stage `to`.
  auto stageFlows = [&](int from, int to) {
    std::vector<PlanFlow> f;
    for (int r : ranks[static_cast<size_t>(from)])
      f.push_back({r, r + (to - from) * layout.stageDistance(), 0});
    return f;
  };
  // The boundary tensor of chunk j -> j + 1 (its last layer's output; with
  // sequence parallelism T / t of the positions per worker), every replica's
  // and tensor-parallel worker's to the same one of the other stage.
  auto boundary = [&](int j, bool backward, const Deps& deps) {
    int from = stageOf(j), to = stageOf(j + 1);
    if (backward)
      std::swap(from, to);
    const int layer = chunks[static_cast<size_t>(j) + 1] - 1;
    const auto& l = net.layers[static_cast<size_t>(layer)];
    const Bytes bytes(double(l.outShape.elements()) / (tp.sequenceParallel ? t : 1) * examples * e);
    return b.pointToPoint(
        fmt::format("pipeline {} -> {}", from, to), [&] { return stageFlows(from, to); }, bytes,
        backward ? BufferKind::kActivationGradients : BufferKind::kActivations, layer, deps);
  };

  // arrived[j][mb]: the transfer that brought micro-batch mb's input to
  // chunk j (forward) or its output's gradient (backward).
  const auto none = std::vector<std::vector<int>>(static_cast<size_t>(q),
                                                  std::vector<int>(static_cast<size_t>(m), -1));
  auto arrivedF = none, arrivedB = none;
  std::vector<std::vector<PipeTask>> orders;
  for (int s = 0; s < p; ++s)
    orders.push_back(pipelineOrder(o.schedule, p, v, m, s));

  auto runForward = [&](int s, int j, int mb) {
    const int first = chunks[static_cast<size_t>(j)], last = chunks[static_cast<size_t>(j) + 1];
    entry = {arrivedF[static_cast<size_t>(j)][static_cast<size_t>(mb)]};
    for (int i = first; i < last; ++i)
      forward(s, i);
    if (j + 1 < q)
      arrivedF[static_cast<size_t>(j) + 1][static_cast<size_t>(mb)] =
          boundary(j, false, stagePath(s));
  };
  // Per stage: the chunk of its last backward.
  std::vector<int> lastChunk(static_cast<size_t>(p), -1);
  // A chunk's backward; `tail`: the stage's last, with the syncs beside it.
  auto runBackward = [&](int s, int j, int mb, bool tail) {
    const int first = chunks[static_cast<size_t>(j)], last = chunks[static_cast<size_t>(j) + 1];
    entry = {arrivedB[static_cast<size_t>(j)][static_cast<size_t>(mb)]};
    std::vector<TpBucket> buckets;
    if (tail) {
      // The stage's other chunks: their backwards are over; their syncs
      // start with this one (the closed form's tail).
      Deps now = stagePath(s);
      now.insert(now.end(), entry.begin(), entry.end());
      for (int c = 0; c < v; ++c)
        if (const int jj = chunkOf(s, c); jj != j) {
          const int a = chunks[static_cast<size_t>(jj)], z = chunks[static_cast<size_t>(jj) + 1];
          for (int i = a; i < z; ++i)
            sumReplicated(s, i, now);
          for (const auto& bucket : gradientBucketsOf(tp, o, e, a, z))
            sync(s, bucket, now);
        }
      buckets = gradientBucketsOf(tp, o, e, first, last);
    }
    for (int i = last - 1; i >= first; --i) {
      const auto& l = net.layers[static_cast<size_t>(i)];
      const auto& x = tp.layers[static_cast<size_t>(i)];
      if (o.recompute == Recompute::kFull && l.block >= 0 &&
          (i == n - 1 || net.layers[static_cast<size_t>(i) + 1].block != l.block)) {
        int from = i;
        while (from > first && net.layers[static_cast<size_t>(from) - 1].block == l.block)
          --from;
        for (int jj = from; jj <= i; ++jj)
          forward(s, jj, true);
      }
      if (o.recompute == Recompute::kSelective && l.kind == LayerKind::kAttention)
        compute(s, i, Phase::kFwd, work(i) * attentionCoreShare(l), {}, true);
      inPath(s, x.bwdBefore, i, BufferKind::kActivationGradients);
      int gradient = -1;
      if (l.computesWeightGradient())
        gradient = compute(s, i, Phase::kBwdWeights, work(i), {});
      const Deps ready = gradient >= 0 ? stagePath(s) : Deps{};
      if (tail)
        sumReplicated(s, i, ready);
      if (!l.readsNetworkInput()) {
        compute(s, i, Phase::kBwdData, work(i), {});
        inPath(s, x.bwdAfter, i, BufferKind::kActivationGradients);
      }
      if (tail && o.overlap)
        for (const auto& bucket : buckets)
          if (bucket.first == i)
            sync(s, bucket, gradient >= 0 ? ready : stagePath(s));
    }
    if (j > 0)
      arrivedB[static_cast<size_t>(j) - 1][static_cast<size_t>(mb)] =
          boundary(j - 1, true, stagePath(s));
    if (!tail)
      return;
    if (!o.overlap)
      for (const auto& bucket : buckets)
        sync(s, bucket, stagePath(s));
    // The copy of a tied table is one of the stage's parameters: its
    // replicas sum its gradient too, before the two copies are summed.
    for (const auto& c : tied)
      if (c.fcStage == s)
        sync(s, {c.table, c.owner, c.owner}, stagePath(s));
    lastChunk[static_cast<size_t>(s)] = j;
  };
  // After every stage's last backward: the tied tables' exchanges, each
  // once both of its stages are there, then each stage's update.
  auto exchangeTied = [&] {
    for (const auto& c : tied) {
      Deps deps = stagePath(c.fcStage);
      const Deps owner = stagePath(c.ownerStage);
      deps.insert(deps.end(), owner.begin(), owner.end());
      deps.push_back(lastSync[static_cast<size_t>(c.fcStage)]);
      deps.push_back(lastSync[static_cast<size_t>(c.ownerStage)]);
      const int a = std::min(c.fcStage, c.ownerStage), z = std::max(c.fcStage, c.ownerStage);
      const int done = b.pointToPointSum(
          fmt::format("tied {} <-> {}", a, z),
          [&] {
            auto f = stageFlows(a, z);
            const auto back = stageFlows(z, a);
            f.insert(f.end(), back.begin(), back.end());
            return f;
          },
          Bytes(c.table * e), BufferKind::kWeightGradients, c.owner, deps);
      lastSync[static_cast<size_t>(c.fcStage)] = lastSync[static_cast<size_t>(c.ownerStage)] = done;
    }
  };
  auto updateStage = [&](int s) {
    const int j = lastChunk[static_cast<size_t>(s)];
    const int first = chunks[static_cast<size_t>(j)], last = chunks[static_cast<size_t>(j) + 1];
    const std::vector<TpBucket> buckets = gradientBucketsOf(tp, o, e, first, last);
    // The tied tables' copies the stage holds: updated with their fc's
    // chunk, or with ZeRO as buckets of their own named by the table's
    // embedding.
    double extraParams = 0;
    int extraLayer = -1;
    std::vector<TpBucket> copies;
    for (const auto& c : tied)
      if (c.fcStage == s) {
        extraParams += c.table;
        extraLayer = c.fc;
        copies.push_back({c.table, c.owner, c.owner});
      }
    // The update of every chunk's parameters on the stage (the tied copy's
    // with its fc's chunk): ZeRO-1 per bucket, its chunk of it, each
    // bucket's weights all-gathered beside the next one's update.
    const int done = lastSync[static_cast<size_t>(s)];
    if (sharded) {
      std::vector<TpBucket> all = buckets;
      for (int c = 0; c < v; ++c)
        if (const int jj = chunkOf(s, c); jj != j) {
          const auto more = gradientBucketsOf(tp, o, e, chunks[static_cast<size_t>(jj)],
                                              chunks[static_cast<size_t>(jj) + 1]);
          all.insert(all.end(), more.begin(), more.end());
        }
      all.insert(all.end(), copies.begin(), copies.end());
      int gathered = -1;
      for (const auto& bucket : all) {
        Deps updated{gathered};
        for (int r : computing[static_cast<size_t>(s)]) {
          auto& x = path[static_cast<size_t>(r)];
          x = b.update(r, bucket.first, bucket.last, bucket.params / dp, {x, done});
          auto& task = b.plan().tasks[static_cast<size_t>(x)];
          task.part = layout.replica(r);
          task.shards = dp;
          updated.push_back(x);
        }
        gathered =
            b.groupCollective(GroupOp::kAllGather, dpGroups, Bytes(bucket.params * e),
                              BufferKind::kWeights, bucket.first, bucket.last, updated, only(s));
      }
      return;
    }
    for (int c = 0; c < v; ++c) {
      const int jj = chunkOf(s, c);
      const int a = chunks[static_cast<size_t>(jj)], z = chunks[static_cast<size_t>(jj) + 1];
      double params = 0;
      for (int i = a; i < z; ++i)
        params += tp.layers[static_cast<size_t>(i)].params;
      if (extraLayer >= a && extraLayer < z)
        params += extraParams;
      for (int r : computing[static_cast<size_t>(s)]) {
        auto& x = path[static_cast<size_t>(r)];
        x = b.update(r, a, z - 1, params, {x, done});
      }
    }
  };

  // Every stage's order, a task lowered once what it needs is (a
  // transfer from another stage): dependencies point back in the plan.
  std::vector<size_t> next(static_cast<size_t>(p), 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < p; ++s) {
      const auto& order = orders[static_cast<size_t>(s)];
      for (auto& x = next[static_cast<size_t>(s)]; x < order.size(); ++x) {
        const auto& task = order[x];
        const int j = chunkOf(s, task.chunk);
        const auto mb = static_cast<size_t>(task.micro);
        if (!task.backward ? j > 0 && arrivedF[static_cast<size_t>(j)][mb] < 0
                           : j + 1 < q && arrivedB[static_cast<size_t>(j)][mb] < 0)
          break;
        b.setMicro(task.micro);
        if (task.backward)
          runBackward(s, j, task.micro, x + 1 == order.size());
        else
          runForward(s, j, task.micro);
        b.setMicro(-1);
        progress = true;
      }
    }
  }
  for (int s = 0; s < p; ++s)
    STRATA_ENFORCE(next[static_cast<size_t>(s)] == orders[static_cast<size_t>(s)].size());
  exchangeTied();
  for (int s = 0; s < p; ++s)
    updateStage(s);
}

// Chunks balanced by FLOPs (no cluster to time the layers on): each layer's
// forward and backward FLOPs per example at its tensor-parallel share.
std::vector<int> pipelineChunksByFlops(const Network& net, const Scenario& sc) {
  const auto& o = sc.options;
  if (!usesPipeline(o))
    return {0, static_cast<int>(net.layers.size())};
  const TpLayout tp = tensorParallelLayout(net, o.tp, o.sequenceParallel);
  std::vector<double> cost;
  for (size_t i = 0; i < net.layers.size(); ++i) {
    const auto& l = net.layers[i];
    cost.push_back((l.fwdFlops + l.bwdDataFlops + l.bwdWeightsFlops) * tp.layers[i].work);
  }
  const int v = o.schedule == PipelineSchedule::kInterleaved ? o.virtualStages : 1;
  if (!o.stageStarts.empty())
    return chunkStartsByName(net, o.pp * v, o.stageStarts);
  return balancedChunks(net, o.pp * v, cost);
}

}  // namespace strata::planning

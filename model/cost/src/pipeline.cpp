// Pipeline parallelism and gradient accumulation: P stages (each a
// tensor-parallel group of t workers, over dp replicas), M micro-batches of b
// examples per worker, run in a schedule's order (pipeline.h). Each chunk's
// forward and backward of one micro-batch is one worker's lane tasks with
// its tensor-parallel collectives (sharded_tasks.h); the schedule plays those
// durations stage by stage, each task starting once its stage is free and
// the activation (or gradient) it needs has crossed from the stage before
// (after) it; the bubble comes out of that play. After its last backward a
// stage synchronises its accumulated gradients over its data-parallel group
// (buckets overlapped with the last backward, as Megatron-LM's
// overlap_grad_reduce) and updates. Formulas and sources:
// docs/cost-model.md, "Pipeline parallelism".
#include "strata/model/pipeline.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "sharded_tasks.h"
#include "strata/model/error.h"

namespace strata::cost {

namespace {

// Where the chunks are: P x V chunks of consecutive layers, chunk j on stage
// j mod P, balanced by each layer's forward and backward time for b examples.
struct PipelineLayout {
  int p = 1, v = 1, m = 1;
  std::vector<int> starts;  // chunk j: layers [starts[j], starts[j + 1])
  int chunks() const { return p * v; }
  int stageOf(int chunk) const { return chunk % p; }
  int chunkOf(int stage, int local) const { return local * p + stage; }
};

PipelineLayout pipelineLayout(const Context& ctx, const TpLayout& tp) {
  const auto& o = ctx.sc.options;
  PipelineLayout lay;
  lay.p = o.pp;
  lay.v = o.schedule == PipelineSchedule::kInterleaved ? o.virtualStages : 1;
  lay.m = o.microbatches;
  const int n = static_cast<int>(ctx.net.layers.size());
  if (lay.chunks() == 1) {
    lay.starts = {0, n};
    return lay;
  }
  if (!o.stageStarts.empty()) {
    lay.starts = chunkStartsByName(ctx.net, lay.chunks(), o.stageStarts);
    return lay;
  }
  std::vector<double> cost(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    const auto& l = ctx.net.layers[static_cast<size_t>(i)];
    const double work = tp.layers[static_cast<size_t>(i)].work;
    cost[static_cast<size_t>(i)] =
        (ctx.time(l, Phase::kFwd, ctx.b, work) + ctx.time(l, Phase::kBwdData, ctx.b, work) +
         ctx.time(l, Phase::kBwdWeights, ctx.b, work))
            .value();
  }
  lay.starts = balancedChunks(ctx.net, lay.chunks(), cost);
  return lay;
}

// The token table (its ceil(V / t) rows on a worker) that a tied fc shares
// with embedding `owner`: its position table is not shared.
double tokenTable(const Context& ctx, const TpLayout& tp, int owner) {
  const auto& l = ctx.net.layers[static_cast<size_t>(owner)];
  const int v = l.spec.vocab;
  return double((v + tp.t - 1) / tp.t) * l.outShape.c;
}

// An fc tied to an embedding on another stage: Megatron-LM keeps a copy
// of the token table on the fc's stage (the last) and the two stages sum
// the copies' gradients.
struct TiedCopy {
  int fcStage = 0, ownerStage = 0;
  double table = 0;  // the copy's parameters on each worker
};
std::vector<TiedCopy> tiedCopies(const Context& ctx, const TpLayout& tp,
                                 const PipelineLayout& lay) {
  std::vector<TiedCopy> out;
  const auto stageOfLayer = [&](int i) {
    return lay.stageOf(static_cast<int>(std::upper_bound(lay.starts.begin(), lay.starts.end(), i) -
                                        lay.starts.begin() - 1));
  };
  for (int i = 0; i < static_cast<int>(ctx.net.layers.size()); ++i)
    if (const int owner = ctx.net.layers[static_cast<size_t>(i)].spec.tiedTo;
        owner >= 0 && stageOfLayer(i) != stageOfLayer(owner))
      out.push_back({stageOfLayer(i), stageOfLayer(owner), tokenTable(ctx, tp, owner)});
  return out;
}

// The copies' parameters stage `stage` holds besides its layers'.
double tiedCopy(const std::vector<TiedCopy>& copies, int stage) {
  double extra = 0;
  for (const auto& c : copies)
    extra += c.fcStage == stage ? c.table : 0.0;
  return extra;
}

// Elements per example of the tensor crossing from chunk j to j + 1 (the
// output of chunk j's last layer), per worker of the tensor-parallel group:
// with sequence parallelism each holds T / t of the positions.
double boundaryElems(const Context& ctx, const TpLayout& tp, const PipelineLayout& lay, int j) {
  const auto& l = ctx.net.layers[static_cast<size_t>(lay.starts[size_t(j) + 1]) - 1];
  return double(l.outShape.elements()) / (tp.sequenceParallel ? tp.t : 1);
}

// `bytes` from every rank of stage `from` to the same replica's and
// tensor-parallel position's rank of stage `to` (RankLayout::rank), all at
// once.
CollectiveCost stageTransfer(const Context& ctx, int from, int to, Bytes bytes) {
  const RankLayout ranks = rankLayoutOf(ctx.sc);
  CollectiveCost c;
  c.sent.assign(static_cast<size_t>(ctx.k), 0.0);
  c.received.assign(static_cast<size_t>(ctx.k), 0.0);
  if (from == to)
    return c;
  const auto& pattern =
      ctx.topo.cost(fmt::format("pipeline {} -> {} of {} stages x {} ({})", from, to, ranks.pp,
                                ranks.tp, toString(ranks.order)),
                    [&] {
                      std::vector<Flow> flows;
                      for (int d = 0; d < ranks.dp; ++d)
                        for (int i = 0; i < ranks.tp; ++i)
                          flows.push_back({ranks.rank(d, from, i), ranks.rank(d, to, i)});
                      return flows;
                    });
  c.time = pattern.time(bytes);
  c.steps = 1;
  for (int d = 0; d < ranks.dp; ++d)
    for (int i = 0; i < ranks.tp; ++i) {
      c.sent[static_cast<size_t>(ranks.rank(d, from, i))] = bytes.value();
      c.received[static_cast<size_t>(ranks.rank(d, to, i))] = bytes.value();
    }
  c.bottleneckLink = pattern.bottleneckLink;
  c.bottleneckUp = pattern.bottleneckUp;
  return c;
}

// The transfer of one micro-batch's boundary tensor from chunk j's stage to
// chunk j + 1's (forward) or back (backward).
CollectiveCost boundaryTransfer(const Context& ctx, const TpLayout& tp, const PipelineLayout& lay,
                                int j, bool backward) {
  int from = lay.stageOf(j), to = lay.stageOf(j + 1);
  if (backward)
    std::swap(from, to);
  return stageTransfer(ctx, from, to, Bytes(boundaryElems(ctx, tp, lay, j) * ctx.b * ctx.e));
}

// Stage `from`'s copy of a tied table's gradient to the other stage holding
// one (every worker's shard of it), which adds it to its own: both stages
// send at once, each then sums.
CollectiveCost tiedExchange(const Context& ctx, const TiedCopy& copy, int from) {
  const int to = from == copy.fcStage ? copy.ownerStage : copy.fcStage;
  const Bytes bytes(copy.table * ctx.e);
  auto c = stageTransfer(ctx, from, to, bytes);
  c.time += Seconds(bytes.value() * ctx.comm.gamma);
  return c;
}

// The ranks on pipeline stage `stage` (RankLayout::rank).
template <typename F>
void forStageRanks(const RankLayout& ranks, int stage, F&& f) {
  for (int d = 0; d < ranks.dp; ++d)
    for (int i = 0; i < ranks.tp; ++i)
      f(static_cast<size_t>(ranks.rank(d, stage, i)));
}

// Adds `from` x times to `into`, counting only the bytes of ranks on `stage`.
void addStage(Tally& into, const Tally& from, double times, int stage, const RankLayout& ranks) {
  forStageRanks(ranks, stage, [&](size_t r) {
    into.sent[r] += from.sent[r] * times;
    into.received[r] += from.received[r] * times;
  });
  if (from.worstCollective > into.worstCollective && from.bottleneckLink >= 0) {
    into.worstCollective = from.worstCollective;
    into.bottleneckLink = from.bottleneckLink;
    into.bottleneckUp = from.bottleneckUp;
  }
  into.picks.insert(into.picks.end(), from.picks.begin(), from.picks.end());
}

MemoryUse stageMemory(const Context& ctx, const TpLayout& tp, const PipelineLayout& lay, int stage);

PhaseTimes scaled(const PhaseTimes& a, double x) {
  return {a.fwd * x, a.bwdData * x, a.bwdWeights * x, a.update * x};
}
PhaseTimes plus(const PhaseTimes& a, const PhaseTimes& b) {
  return {a.fwd + b.fwd, a.bwdData + b.bwdData, a.bwdWeights + b.bwdWeights, a.update + b.update};
}

}  // namespace

Seconds pipelineStep(const Context& ctx, Tally& t, RoundInfo& /*info*/, Seconds& firstStep,
                     int& steps) {
  steps = 1;
  const auto& o = ctx.sc.options;
  const TpLayout tp = tensorParallelLayout(ctx.net, o.tp, o.sequenceParallel);
  const auto lay = pipelineLayout(ctx, tp);
  const int q = lay.chunks(), p = lay.p, m = lay.m;
  const RankLayout ranks = rankLayoutOf(ctx.sc);
  const RankGroups tpGroups{tp.t, 1},
      dpGroups{ranks.dpSpan(), ranks.dpStride(), gradientAllreduce(ctx.sc)};
  const ShardedLayers layers{ctx, tp, tpGroups};

  // One micro-batch through each chunk, forward and backward, alone.
  std::vector<Seconds> fwd(static_cast<size_t>(q)), bwd(static_cast<size_t>(q));
  std::vector<Tally> fwdTally, bwdTally;
  fwdTally.reserve(size_t(q));
  bwdTally.reserve(size_t(q));
  for (int j = 0; j < q; ++j) {
    const int first = lay.starts[size_t(j)], last = lay.starts[size_t(j) + 1];
    fwdTally.emplace_back(ctx.k);
    StepTasks f(ctx, fwdTally.back());
    for (int i = first; i < last; ++i)
      layers.forward(f, i);
    fwd[size_t(j)] = f.play();
    bwdTally.emplace_back(ctx.k);
    StepTasks b(ctx, bwdTally.back());
    for (int i = last - 1; i >= first; --i)
      layers.backward(b, i, first, {});
    bwd[size_t(j)] = b.play();
  }
  std::vector<CollectiveCost> sendF, sendB;  // chunk j -> j + 1 and back
  std::vector<double> fwdS, bwdS, sendFS, sendBS;
  for (int j = 0; j < q; ++j) {
    fwdS.push_back(fwd[size_t(j)].value());
    bwdS.push_back(bwd[size_t(j)].value());
    if (j + 1 < q) {
      sendF.push_back(boundaryTransfer(ctx, tp, lay, j, false));
      sendB.push_back(boundaryTransfer(ctx, tp, lay, j, true));
      sendFS.push_back(sendF.back().time.value());
      sendBS.push_back(sendB.back().time.value());
    }
  }
  // The schedule, played (pipeline.h): each stage runs its order; a task
  // starts when its stage is free and what it needs has arrived.
  const auto play = playPipeline(o.schedule, p, lay.v, m, fwdS, bwdS, sendFS, sendBS);
  t.bubble = Seconds(play.bubble());
  const auto tied = tiedCopies(ctx, tp, lay);

  // Per stage: its last backward again, with the gradient syncs beside it
  // and the update after them; the stage ends that long after the last
  // backward's start.
  // `tasks` gets stage s's tail up to its gradient syncs.
  auto syncTail = [&](int s, StepTasks& tasks, Tally& tail) {
    const int lastChunk = lay.chunkOf(s, play.last[size_t(s)].chunk);
    // The stage's layers span chunks s, s + P, ...: one GradientSyncs over
    // all its layers would bucket across chunks, so one per chunk, the
    // earlier chunks' syncs ready at once (their backwards are over).
    const int first = lay.starts[size_t(lastChunk)], last = lay.starts[size_t(lastChunk) + 1];
    GradientSyncs syncs(ctx, tp, tasks, tail, dpGroups, first, last);
    for (int c = 0; c < lay.v; ++c)
      if (const int j = lay.chunkOf(s, c); j != lastChunk)
        syncs.syncEarlier(lay.starts[size_t(j)], lay.starts[size_t(j) + 1]);
    for (int i = last - 1; i >= first; --i)
      syncs.afterBackward(i, layers.backward(tasks, i, first, {}), true);
    if (!o.overlap)
      syncs.syncBuckets({tasks.path()});
    // A tied table's copy is one of the stage's parameters: its replicas
    // sum its gradient too (before the copies are summed).
    for (const auto& c : tied)
      if (c.fcStage == s)
        syncs.sync(c.table, {tasks.path()});
    return syncs;
  };
  // When each stage's syncs are over (from the step's start): a tied
  // table's exchange waits for both of its stages.
  std::vector<double> synced(size_t(p), 0.0);
  if (!tied.empty())
    for (int s = 0; s < p; ++s) {
      Tally scratch(ctx.k);
      StepTasks tasks(ctx, scratch);
      syncTail(s, tasks, scratch);
      synced[size_t(s)] = play.lastStart[size_t(s)] + tasks.play().value();
    }
  double step = 0;
  t.stages.assign(size_t(p), {});
  for (int s = 0; s < p; ++s) {
    const int lastChunk = lay.chunkOf(s, play.last[size_t(s)].chunk);
    Tally tail(ctx.k);
    StepTasks tasks(ctx, tail);
    GradientSyncs syncs = syncTail(s, tasks, tail);
    // The two copies of a tied table (first and last stage) sum their
    // gradients once every micro-batch is in on both stages.
    std::vector<CollectiveCost> exchanges;
    for (const auto& c : tied)
      if (c.fcStage == s || c.ownerStage == s) {
        const int other = c.fcStage == s ? c.ownerStage : c.fcStage;
        exchanges.push_back(tiedExchange(ctx, c, s));
        syncs.beside(exchanges.back(), {tasks.path()},
                     synced[size_t(other)] - play.lastStart[size_t(s)]);
      }
    // The update of every chunk's parameters on the stage.
    syncs.update(false, tiedCopy(tied, s));
    const Seconds tailTime = tasks.play();
    const double end = play.lastStart[size_t(s)] + tailTime.value();
    step = std::max(step, end);

    // The stage's times: every micro-batch's chunks, the tail in place of
    // its last backward, and the boundary transfers it sends.
    auto& st = t.stages[size_t(s)];
    const auto& lastB = bwdTally[size_t(lastChunk)];
    st.compute = plus(tail.compute, scaled(lastB.compute, -1));
    st.communication = tail.communication - lastB.communication;
    st.exposed = tail.exposed - lastB.exposed;
    for (int c = 0; c < lay.v; ++c) {
      const int j = lay.chunkOf(s, c);
      for (const Tally* x : {&fwdTally[size_t(j)], &bwdTally[size_t(j)]}) {
        st.compute = plus(st.compute, scaled(x->compute, m));
        st.communication += x->communication * m;
        st.exposed += x->exposed * m;
        addStage(t, *x, m, s, ranks);
      }
      for (const auto* sends : {&sendF, &sendB})
        for (int jj : {j - 1, j})
          if (jj >= 0 && jj + 1 < q) {
            const auto& c2 = (*sends)[size_t(jj)];
            // What the stage sends: its activations on, its gradients back.
            if ((sends == &sendF) == (jj == j))
              st.communication += c2.time * m;
            forStageRanks(ranks, s, [&](size_t r) {
              t.sent[r] += c2.sent[r] * m;
              t.received[r] += c2.received[r] * m;
            });
          }
    }
    addStage(t, tail, 1, s, ranks);
    // What its tied copy's exchange delivers to the other stage.
    for (const auto& c : exchanges)
      for (size_t r = 0; r < t.received.size(); ++r)
        if (ranks.stage(static_cast<int>(r)) != s)
          t.received[r] += c.received[r];
    addStage(t, bwdTally[size_t(lastChunk)], -1, s, ranks);
  }
  // A boundary transfer may be the step's costliest communication.
  for (const auto& sends : {sendF, sendB})
    for (const auto& c : sends)
      if (c.time > t.worstCollective && c.bottleneckLink >= 0) {
        t.worstCollective = c.time;
        t.bottleneckLink = c.bottleneckLink;
        t.bottleneckUp = c.bottleneckUp;
      }
  // The slowest stage's times stand for the step's.
  const auto slowest = std::max_element(
      t.stages.begin(), t.stages.end(),
      [](const auto& a, const auto& b) { return a.compute.total() < b.compute.total(); });
  t.compute = slowest->compute;
  t.communication = slowest->communication;
  t.exposed = slowest->exposed;

  std::vector<std::string> stageText;
  for (int s = 0; s < p; ++s) {
    std::vector<std::string> ranges;
    for (int c = 0; c < lay.v; ++c) {
      const int j = lay.chunkOf(s, c);
      const int a = lay.starts[size_t(j)], z = lay.starts[size_t(j) + 1] - 1;
      ranges.push_back(a == z ? ctx.net.layers[size_t(a)].name
                              : fmt::format("{}..{}", ctx.net.layers[size_t(a)].name,
                                            ctx.net.layers[size_t(z)].name));
    }
    stageText.push_back(fmt::format("{}", fmt::join(ranges, " + ")));
  }
  t.pipeline = p == 1 ? fmt::format("gradient accumulation over {} micro-batches of {}", m, ctx.b)
                      : fmt::format("{} stages{} ({}), schedule {}, {} micro-batches of {}", p,
                                    lay.v > 1 ? fmt::format(" x {} chunks", lay.v) : std::string(),
                                    fmt::join(stageText, "; "), toString(o.schedule), m, ctx.b);
  firstStep = Seconds(step);
  return firstStep;
}

std::vector<int> pipelineStarts(const Context& ctx) {
  const auto& o = ctx.sc.options;
  return pipelineLayout(ctx, tensorParallelLayout(ctx.net, o.tp, o.sequenceParallel)).starts;
}

MemoryUse pipelineMemory(const Context& ctx, int stage) {
  return pipelineMemories(ctx).at(static_cast<size_t>(stage));
}

std::vector<MemoryUse> pipelineMemories(const Context& ctx) {
  const auto& o = ctx.sc.options;
  const TpLayout tp = tensorParallelLayout(ctx.net, o.tp, o.sequenceParallel);
  const auto lay = pipelineLayout(ctx, tp);
  std::vector<MemoryUse> out;
  for (int s = 0; s < lay.p; ++s)
    out.push_back(stageMemory(ctx, tp, lay, s));
  return out;
}

namespace {

MemoryUse stageMemory(const Context& ctx, const TpLayout& tp, const PipelineLayout& lay,
                      int stage) {
  const auto& o = ctx.sc.options;
  const int dp = dataParallelSize(ctx.sc);
  const double e = ctx.e, b = ctx.b;
  double local = tiedCopy(tiedCopies(ctx, tp, lay), stage), largestBlock = 0, boundary = 0;
  std::vector<double> perChunk;
  for (int c = 0; c < lay.v; ++c) {
    const int j = lay.chunkOf(stage, c);
    const int first = lay.starts[size_t(j)], last = lay.starts[size_t(j) + 1];
    for (int i = first; i < last; ++i)
      local += tp.layers[static_cast<size_t>(i)].params;
    const auto kept = keptActivations(ctx, tp, first, last);
    perChunk.push_back(kept.kept);
    largestBlock = std::max(largestBlock, kept.largestBlock);
    for (int jj : {j - 1, j})
      if (jj >= 0 && jj + 1 < lay.chunks())
        boundary = std::max(boundary, boundaryElems(ctx, tp, lay, jj));
  }
  const double optimizerPerParam =
      4.0 * optimizerStatesPerParam(o.optimizer) + (isMixedPrecision(o.element) ? 4.0 : 0.0);
  MemoryUse mem;
  mem.weights = Bytes(local * e);
  mem.gradients = Bytes(local * e);
  mem.optimizer = Bytes(local * optimizerPerParam / (o.zero >= 1 ? dp : 1));
  // The micro-batches the schedule holds at once on this stage, each with
  // its chunks' kept activations.
  const auto order = pipelineOrder(o.schedule, lay.p, lay.v, lay.m, stage);
  mem.activations = Bytes((peakInFlight(order, perChunk) + largestBlock) * b * e);
  // Staging: two ring chunks of the gradients, the largest tensor-parallel
  // tensor, and one boundary tensor received and one sent.
  const double seg = o.segment.value();
  const double chunk = local * e / std::max(1, dp);
  double buffers = dp > 1 ? 2 * (seg > 0 ? std::min(seg, chunk) : chunk) : 0;
  double tpTensor = 0;
  for (const auto& x : tp.layers)
    for (const auto* c : {&x.fwdBefore, &x.fwdAfter, &x.bwdBefore, &x.bwdAfter})
      tpTensor = std::max(tpTensor, c->elems);
  buffers += (tpTensor + 2 * boundary) * b * e;
  mem.buffers = Bytes(buffers);
  return mem;
}

}  // namespace

}  // namespace strata::cost

namespace strata {

std::vector<int> pipelineChunks(const Network& network, const Cluster& cluster,
                                const Scenario& scenario) {
  if (!usesPipeline(scenario.options))
    return {0, static_cast<int>(network.layers.size())};
  const cost::Context ctx(network, cluster, scenario);
  return cost::pipelineStarts(ctx);
}

}  // namespace strata

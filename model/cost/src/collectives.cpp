#include "strata/model/collectives.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "strata/model/error.h"
#include "strata/model/quantity_text.h"

namespace strata {

Seconds pipelineTime(int segments, std::span<const Seconds> stageTimes) {
  Seconds sum, slowest;
  for (auto t : stageTimes) {
    sum += t;
    slowest = max(slowest, t);
  }
  return sum + slowest * (segments - 1);
}

Seconds pipelineTime(int segments, std::initializer_list<Seconds> stageTimes) {
  return pipelineTime(segments, std::span<const Seconds>(stageTimes.begin(), stageTimes.size()));
}

int segmentCount(Bytes bytes, Bytes segment) {
  if (segment.value() <= 0 || bytes <= segment)
    return 1;
  const double count = std::ceil(bytes.value() / segment.value());
  if (!(count <= std::numeric_limits<int>::max()))
    throw OptionError("--segment",
                      fmt::format("segments of {} cut a {} transfer into {:.3g} pieces, more than "
                                  "{}; use a larger segment, or 0 for unsegmented",
                                  formatBytes(segment), formatBytes(bytes), count,
                                  std::numeric_limits<int>::max()));
  return static_cast<int>(count);
}

namespace {

CollectiveCost empty(const Topology& topo) {
  CollectiveCost c;
  c.sent.assign(static_cast<size_t>(topo.workers()), 0.0);
  c.received.assign(static_cast<size_t>(topo.workers()), 0.0);
  return c;
}

void noteBottleneck(CollectiveCost& c, const PatternCost& p) {
  if (c.bottleneckLink < 0 || p.bottleneckLink >= 0) {
    c.bottleneckLink = p.bottleneckLink;
    c.bottleneckUp = p.bottleneckUp;
  }
}

void addSymmetric(CollectiveCost& c, double sentEach, double receivedEach) {
  for (auto& s : c.sent)
    s += sentEach;
  for (auto& r : c.received)
    r += receivedEach;
}

// One phase of rings of `size` ranks moving chunks of `chunk` bytes, each
// step a `step` pattern: reduce-scatter, size-1 steps each a pipeline of
// send and add over the chunk's segments, or allgather, size-1 steps of
// sends (plan/src/builder.h's Builder::ringPhase lowers the same).
//
// Where the latency is paid once per step (PatternCost::latencyPerStep) the
// segments after a step's first move their bytes without it:
//   reduce-scatter step: alpha + P(m; s/beta, s gamma);  allgather step: alpha + m s/beta
Seconds ringPhase(const PatternCost& step, int size, Bytes chunk, const CommParams& p,
                  bool reduce) {
  if (size <= 1)
    return Seconds(0);
  const int segs = segmentCount(chunk, p.segment);
  const Bytes s = chunk / segs;
  const Seconds once = step.latencyPerStep ? step.latency : Seconds(0);
  const Seconds send = step.time(s) - once;
  return (reduce ? once + pipelineTime(segs, {send, Seconds(s.value() * p.gamma)})
                 : once + send * segs) *
         (size - 1);
}

}  // namespace

namespace {

// One ring phase in every group at once (ringPhase over ringStep(span,
// stride)): size-1 steps of n/size bytes.
CollectiveCost groupPhase(const Topology& topo, RankGroups g, Bytes n, const CommParams& p,
                          bool reduce) {
  auto c = p.countBytes ? empty(topo) : CollectiveCost{};
  const int size = g.size();
  if (size <= 1)
    return c;
  const auto& step = topo.ringStep(g.span, g.stride);
  const Bytes chunk = n / size;
  c.time = ringPhase(step, size, chunk, p, reduce);
  c.steps = size - 1;
  noteBottleneck(c, step);
  addSymmetric(c, (size - 1) * chunk.value(), (size - 1) * chunk.value());
  return c;
}

}  // namespace

namespace {

// Appends phase `x` after `c`: times and steps add, bytes add, the
// bottleneck is the longer phase's.
void appendPhase(CollectiveCost& c, const CollectiveCost& x, Seconds& longest) {
  if (x.time > longest) {
    longest = x.time;
    c.bottleneckLink = x.bottleneckLink;
    c.bottleneckUp = x.bottleneckUp;
  }
  c.time += x.time;
  c.steps += x.steps;
  if (c.sent.empty()) {
    c.sent = x.sent;
    c.received = x.received;
    return;
  }
  for (size_t i = 0; i < x.sent.size(); ++i) {
    c.sent[i] += x.sent[i];
    c.received[i] += x.received[i];
  }
}

// Ring reduce-scatter (size-1 steps of n/size, each a pipeline of send and
// add, as allReduceRing's first half), all-gather (size-1 steps of n/size),
// or the two (allreduce):
//   T = 2 (size-1) (alpha + n/(size beta)) + (size-1)/size n gamma  (unsegmented allreduce)
CollectiveCost groupRing(const Topology& topo, RankGroups g, GroupOp op, Bytes n,
                         const CommParams& p) {
  if (op == GroupOp::kReduceScatter)
    return groupPhase(topo, g, n, p, true);
  if (op == GroupOp::kAllGather)
    return groupPhase(topo, g, n, p, false);
  auto c = groupPhase(topo, g, n, p, true);
  Seconds longest = c.time;  // the two phases share one step pattern
  appendPhase(c, groupPhase(topo, g, n, p, false), longest);
  return c;
}

// Hierarchical (hierarchicalLevels): reduce-scatter inside, reduce-scatter
// across on the inner chunk n/m; all-gather across, then inside.
//   allreduce T = 2 (m-1) (alpha_1 + n/(m beta_1)) + (m-1)/m n gamma
//               + 2 (N-1) (alpha_2 + n/(m N beta_2)) + (N-1)/(m N) n gamma
CollectiveCost groupHierarchical(const Topology& topo, RankGroups g, GroupOp op, Bytes n,
                                 const CommParams& p) {
  const auto [inner, outer] = hierarchicalLevels(topo, g);
  const Bytes chunk = n / inner.size();
  CollectiveCost c = p.countBytes ? empty(topo) : CollectiveCost{};
  Seconds longest;
  if (op != GroupOp::kAllGather) {
    appendPhase(c, groupPhase(topo, inner, n, p, true), longest);
    appendPhase(c, groupPhase(topo, outer, chunk, p, true), longest);
  }
  if (op != GroupOp::kReduceScatter) {
    appendPhase(c, groupPhase(topo, outer, chunk, p, false), longest);
    appendPhase(c, groupPhase(topo, inner, n, p, false), longest);
  }
  return c;
}

// The double binary tree's allreduce on `view`'s trees (allReduceTree below).
CollectiveCost treeOn(const Topology& topo, const TreeView& view, Bytes n, const CommParams& p);

bool hierarchicalApplies(const Topology& topo, RankGroups g) {
  const int node = topo.nodeSize();
  if (topo.workers() % node != 0)
    return false;
  if (g.span % node != 0)
    return node % g.span == 0;
  return g.stride % node == 0 || node % g.stride == 0;
}

}  // namespace

GroupLevels hierarchicalLevels(const Topology& topo, RankGroups g) {
  const int k = topo.workers(), node = topo.nodeSize();
  if (k % node != 0)
    throw OptionError("--workers",
                      fmt::format("the hierarchical allreduce needs whole nodes: {} workers on "
                                  "nodes of {} devices (cluster '{}'); use a multiple of {}, or "
                                  "another --allreduce",
                                  k, node, topo.cluster().name, node));
  const auto uneven = [&] {
    return OptionError(
        "--allreduce",
        fmt::format("hierarchical needs every node to hold the same share of each data-parallel "
                    "group: groups of ranks {} apart{} on nodes of {} devices (cluster '{}') "
                    "straddle them unevenly; use --allreduce ring, or a tp x pp (--placement "
                    "tp,pp,dp) or tp (tp,dp,pp) that divides {} or is a multiple of it",
                    g.stride, g.span < k ? fmt::format(" in blocks of {}", g.span) : "", node,
                    topo.cluster().name, node));
  };
  if (g.span % node != 0) {
    if (node % g.span != 0)
      throw uneven();
    return {g, RankGroups{1, 1}};  // each group inside one node
  }
  if (g.stride % node == 0)  // one member per node: the rails' rings alone
    return {RankGroups{1, 1}, g};
  if (node % g.stride != 0)
    throw uneven();
  return {RankGroups{node, g.stride}, RankGroups{g.span, node}};
}

AllreduceAlgorithm chooseGroupAlgorithm(const Topology& topo, RankGroups g, GroupOp op, Bytes n,
                                        const CommParams& p) {
  if (g.algorithm != AllreduceAlgorithm::kAuto)
    return g.algorithm;
  if (g.size() <= 1)
    return AllreduceAlgorithm::kRing;
  CommParams timeOnly = p;
  timeOnly.countBytes = false;
  // In chooseAllreduce's order of preference on a tie: ring, hierarchical,
  // tree (an allreduce only).
  AllreduceAlgorithm best = AllreduceAlgorithm::kRing;
  Seconds bestTime = groupRing(topo, g, op, n, timeOnly).time;
  auto consider = [&](AllreduceAlgorithm a, Seconds t) {
    if (t < bestTime) {
      bestTime = t;
      best = a;
    }
  };
  if (hierarchicalApplies(topo, g))
    consider(AllreduceAlgorithm::kHierarchical, groupHierarchical(topo, g, op, n, timeOnly).time);
  if (op == GroupOp::kAllReduce)
    consider(AllreduceAlgorithm::kTree,
             treeOn(topo, topo.treeOf(g.span, g.stride), n, timeOnly).time);
  return best;
}

CollectiveCost groupCollective(const Topology& topo, RankGroups g, GroupOp op, Bytes n,
                               const CommParams& p) {
  const auto a = chooseGroupAlgorithm(topo, g, op, n, p);
  CollectiveCost c;
  if (g.size() <= 1 || a == AllreduceAlgorithm::kRing) {
    c = groupRing(topo, g, op, n, p);
  } else if (a == AllreduceAlgorithm::kHierarchical) {
    c = groupHierarchical(topo, g, op, n, p);
  } else {
    // The tree has no reduce-scatter or all-gather (checkScenario refuses
    // it with ZeRO).
    STRATA_ENFORCE(a == AllreduceAlgorithm::kTree && op == GroupOp::kAllReduce);
    c = treeOn(topo, topo.treeOf(g.span, g.stride), n, p);
  }
  c.algorithm = std::string(toString(a));
  return c;
}

CollectiveCost groupReduceScatter(const Topology& topo, RankGroups groups, Bytes n,
                                  const CommParams& p) {
  return groupCollective(topo, groups, GroupOp::kReduceScatter, n, p);
}

CollectiveCost groupAllGather(const Topology& topo, RankGroups groups, Bytes n,
                              const CommParams& p) {
  return groupCollective(topo, groups, GroupOp::kAllGather, n, p);
}

CollectiveCost groupAllReduce(const Topology& topo, RankGroups groups, Bytes n,
                              const CommParams& p) {
  return groupCollective(topo, groups, GroupOp::kAllReduce, n, p);
}

CollectiveCost pointToPoint(const Topology& topo, int src, int dst, Bytes n) {
  auto c = empty(topo);
  if (src == dst)
    return c;
  const Flow f{src, dst};
  const auto p = topo.cost(std::span<const Flow>(&f, 1));
  c.time = p.time(n);
  c.steps = 1;
  c.sent[static_cast<size_t>(src)] = n.value();
  c.received[static_cast<size_t>(dst)] = n.value();
  noteBottleneck(c, p);
  return c;
}

// Flat broadcast:  root --n--> r1, root --n--> r2, ...  (one step, K-1 flows)
//   T = alpha + n * (K-1) / beta_root   (when the root's link is the bottleneck)
Seconds broadcastTime(const Topology& topo, int root, Bytes n) {
  return topo.workers() == 1 ? Seconds(0) : topo.scatter(root).time(n);
}

CollectiveCost broadcast(const Topology& topo, int root, Bytes n) {
  auto c = empty(topo);
  const int k = topo.workers();
  if (k == 1)
    return c;
  const auto& p = topo.scatter(root);
  c.time = broadcastTime(topo, root, n);
  c.steps = 1;
  for (int i = 0; i < k; ++i) {
    if (i == root)
      continue;
    c.received[static_cast<size_t>(i)] = n.value();
    c.sent[static_cast<size_t>(root)] += n.value();
  }
  noteBottleneck(c, p);
  return c;
}

// Gather:  r1 --n--> root, r2 --n--> root, ...  (one step)
//   T = alpha + n * (K-1) / beta_root
CollectiveCost gather(const Topology& topo, int root, Bytes perRank) {
  auto c = empty(topo);
  const int k = topo.workers();
  if (k == 1)
    return c;
  const auto& p = topo.gather(root);
  c.time = p.time(perRank);
  c.steps = 1;
  for (int i = 0; i < k; ++i) {
    if (i == root)
      continue;
    c.sent[static_cast<size_t>(i)] = perRank.value();
    c.received[static_cast<size_t>(root)] += perRank.value();
  }
  noteBottleneck(c, p);
  return c;
}

// Streamed reduce to root: gather segment j while summing segment j-1.
//   stages per segment s: gather (alpha + s (K-1)/beta_root), sum ((K-1) s gamma)
Seconds reduceTime(const Topology& topo, int root, Bytes n, const CommParams& p) {
  const int k = topo.workers();
  if (k == 1)
    return Seconds(0);
  const int segs = segmentCount(n, p.segment);
  const Bytes s = n / segs;
  return pipelineTime(segs, {topo.gather(root).time(s), Seconds((k - 1) * s.value() * p.gamma)});
}

CollectiveCost reduce(const Topology& topo, int root, Bytes n, const CommParams& p) {
  auto c = gather(topo, root, n);
  c.time = reduceTime(topo, root, n, p);
  return c;
}

// Ring allgather: K-1 steps; in step i rank r sends block (r - i) to r+1.
//   T = (K-1) (alpha + n / beta_ring)
// Direct allgather: one step, every rank sends its block to every other rank.
//   T = alpha + n * flows-per-link / beta
CollectiveCost allGather(const Topology& topo, Bytes perRank, bool ring) {
  auto c = empty(topo);
  const int k = topo.workers();
  if (k == 1)
    return c;
  const auto& p = ring ? topo.ringStep() : topo.allToAll();
  c.time = ring ? p.time(perRank) * (k - 1) : p.time(perRank);
  c.steps = ring ? k - 1 : 1;
  addSymmetric(c, (k - 1) * perRank.value(), (k - 1) * perRank.value());
  noteBottleneck(c, p);
  return c;
}

// Ring reduce-scatter of n bytes in K chunks of c = n/K:
//   step i: rank r sends chunk (r - i) to r+1, which adds it to its own copy.
//   T = (K-1) * pipeline(segments of c: send alpha + s/beta, add s gamma)
// Direct reduce-scatter: every rank sends chunk j to rank j at once, each sums
// K-1 chunks:  T = pipeline(segments of c: all-to-all step, add (K-1) s gamma)
CollectiveCost reduceScatter(const Topology& topo, Bytes n, const CommParams& p, bool ring) {
  auto c = empty(topo);
  const int k = topo.workers();
  if (k == 1)
    return c;
  const Bytes chunk = n / k;
  if (ring) {
    const auto& step = topo.ringStep();
    c.time = ringPhase(step, k, chunk, p, true);
    c.steps = k - 1;
    noteBottleneck(c, step);
  } else {
    const int segs = segmentCount(chunk, p.segment);
    const Bytes s = chunk / segs;
    const auto& step = topo.allToAll();
    c.time = pipelineTime(segs, {step.time(s), Seconds((k - 1) * s.value() * p.gamma)});
    c.steps = 1;
    noteBottleneck(c, step);
  }
  addSymmetric(c, (k - 1) * chunk.value(), (k - 1) * chunk.value());
  return c;
}

// All-to-all: every rank sends n distinct bytes to every other rank, at once.
//   T = alpha + n * flows-per-link / beta
CollectiveCost allToAll(const Topology& topo, Bytes perPair) {
  auto c = empty(topo);
  const int k = topo.workers();
  if (k == 1)
    return c;
  const auto& p = topo.allToAll();
  c.time = p.time(perPair);
  c.steps = 1;
  addSymmetric(c, (k - 1) * perPair.value(), (k - 1) * perPair.value());
  noteBottleneck(c, p);
  return c;
}

namespace {

// Naive reducer (Baidu 2017): every rank streams its n bytes to rank 0, which
// sums each segment and streams the result back.
//
//   r1 ─┐                    ┌─> r1
//   r2 ─┼─> r0 (sum, K-1 s γ) ┼─> r2        per segment s of n
//   r3 ─┘                    └─> r3
//
//   T = pipeline(segments: gather alpha + s (K-1)/beta_0, sum (K-1) s gamma,
//                          broadcast alpha + s (K-1)/beta_0)
//     -> (K-1) n / beta on full-duplex links as segments shrink (the Baidu
//        post's figure), 2 (K-1) n / beta unsegmented.
CollectiveCost allReduceNaive(const Topology& topo, Bytes n, const CommParams& p) {
  auto c = empty(topo);
  const int k = topo.workers();
  const int segs = segmentCount(n, p.segment);
  const Bytes s = n / segs;
  // The root sends summed segment j-1 to a worker while it receives segment
  // j from it (the executor's sendRecv): those pairs exchange. Segment 0's
  // gather and the last segment's broadcast go one way, alone; every path
  // through the pipeline holds both, so their one-way price replaces the
  // exchange price exactly once each (a single segment: all one way).
  auto in = topo.gather(0);
  auto out = topo.scatter(0);
  const Seconds inAlone = in.time(s), outAlone = out.time(s);
  in.exchangeShare = out.exchangeShare = 1;
  const Seconds alone = (in.time(s) - inAlone) + (out.time(s) - outAlone);
  const Seconds sum((k - 1) * s.value() * p.gamma);
  // Gather and broadcast use opposite directions of the reducer's link, so
  // they overlap on full-duplex links; on a half-duplex one they take turns.
  c.time = (topo.allFullDuplex() ? pipelineTime(segs, {in.time(s), sum, out.time(s)})
                                 : pipelineTime(segs, {in.time(s) + out.time(s), sum})) -
           alone;
  c.steps = 2;
  for (int i = 1; i < k; ++i) {
    c.sent[static_cast<size_t>(i)] = n.value();
    c.received[static_cast<size_t>(i)] = n.value();
  }
  c.sent[0] = c.received[0] = (k - 1) * n.value();
  noteBottleneck(c, in.secondsPerByte >= out.secondsPerByte ? in : out);
  return c;
}

// Ring allreduce (Baidu 2017): reduce-scatter then allgather around the ring,
// 2 (K-1) steps of one chunk c = n/K each.
//
//   step i of reduce-scatter: rank r sends chunk (r - i) mod K to r+1, which
//   adds it; after K-1 steps rank r holds the sum of chunk (r + 1) mod K.
//   step i of allgather: rank r sends its finished chunk (r + 1 - i) to r+1.
//
//   T = (K-1) pipeline(send, add) + (K-1) segments (alpha + s/beta)
//     = 2 (K-1) alpha + 2 (K-1)/K n / beta + (K-1)/K n gamma   (unsegmented)
CollectiveCost allReduceRing(const Topology& topo, Bytes n, const CommParams& p) {
  auto c = reduceScatter(topo, n, p, true);
  const int k = topo.workers();
  const Bytes chunk = n / k;
  c.time += ringPhase(topo.ringStep(), k, chunk, p, false);
  c.steps += k - 1;
  addSymmetric(c, (k - 1) * chunk.value(), (k - 1) * chunk.value());
  return c;
}

// Direct allreduce (Krizhevsky 2014 for conv weights; a sharded parameter
// server): rank j owns chunk j; everyone sends chunk j to j (all-to-all), j
// sums it and sends it back to everyone (all-to-all). Per segment s of a
// chunk: scatter S_i, sum R_i ((K-1) s gamma), gather-back G_i. Both
// all-to-alls load every link in both directions, so they take turns on one
// communication stream, in the order
//
//   S_0 S_1 G_0 S_2 G_1 ... S_{m-1} G_{m-2} G_{m-1}      (G_i also waits for R_i)
//
// while the sums run beside it. With the network slower than the sum:
//   T = 2 m (alpha + s (K-1)/beta)   (m >= 2),   2 (alpha + c (K-1)/beta) + (K-1) c gamma  (m = 1)
Seconds allReduceDirectTime(Seconds step, Seconds sum, int segments) {
  Seconds net, sumPrev;
  std::vector<Seconds> sums(static_cast<size_t>(segments));
  auto gatherBack = [&](int i) { net = max(net, sums[static_cast<size_t>(i)]) + step; };
  for (int i = 0; i < segments; ++i) {
    net += step;  // S_i
    sumPrev = max(net, sumPrev) + sum;
    sums[static_cast<size_t>(i)] = sumPrev;
    if (i >= 1)
      gatherBack(i - 1);
  }
  gatherBack(segments - 1);
  return net;
}

CollectiveCost allReduceDirect(const Topology& topo, Bytes n, const CommParams& p) {
  auto c = empty(topo);
  const int k = topo.workers();
  const Bytes chunk = n / k;
  const int segs = segmentCount(chunk, p.segment);
  const Bytes s = chunk / segs;
  const auto& step = topo.allToAll();
  c.time = allReduceDirectTime(step.time(s), Seconds((k - 1) * s.value() * p.gamma), segs);
  c.steps = 2;
  addSymmetric(c, 2.0 * (k - 1) * chunk.value(), 2.0 * (k - 1) * chunk.value());
  noteBottleneck(c, step);
  return c;
}

// Recursive halving-doubling (Thakur, Rabenseifner & Gropp 2005). With p' the
// largest power of two <= K and r = K - p':
//   pre:  ranks 2i+1 (i < r) send all n bytes to 2i, which adds them;
//   reduce-scatter by recursive halving among the p' remaining ranks:
//         step j exchanges n / 2^(j+1) bytes with the rank at distance p'/2^(j+1);
//   allgather by recursive doubling: the same steps in reverse;
//   post: ranks 2i send the result to 2i+1.
//   T = 2 log2(p') alpha + 2 (p'-1)/p' n / beta + (p'-1)/p' n gamma
//       (+ 2 (alpha + n / beta) + n gamma when K is not a power of two)
CollectiveCost allReduceHalvingDoubling(const Topology& topo, Bytes n, const CommParams& p) {
  auto c = empty(topo);
  const int k = topo.workers();
  int pof2 = 1;
  while (pof2 * 2 <= k)
    pof2 *= 2;
  const int r = k - pof2;
  auto worker = [&](int active) { return active < r ? 2 * active : active + r; };
  std::vector<Flow> flows;
  Seconds worst;
  auto charge = [&](const PatternCost& pc, Seconds t) {
    c.time += t;
    ++c.steps;
    if (t > worst) {
      worst = t;
      c.bottleneckLink = pc.bottleneckLink;
      c.bottleneckUp = pc.bottleneckUp;
    }
  };
  if (r > 0) {
    flows.clear();
    for (int i = 0; i < r; ++i) {
      flows.push_back({2 * i + 1, 2 * i});
      c.sent[static_cast<size_t>(2 * i + 1)] += n.value();
      c.received[static_cast<size_t>(2 * i)] += n.value();
    }
    const auto pc = topo.cost(flows);
    charge(pc, pc.time(n) + Seconds(n.value() * p.gamma));
  }
  std::vector<Seconds> stepTimes;
  std::vector<PatternCost> stepCosts;
  for (int d = pof2 / 2; d >= 1; d /= 2) {
    stepCosts.push_back(topo.cost(fmt::format("halving-doubling {}", d), [&] {
      flows.clear();
      for (int i = 0; i < pof2; ++i)
        flows.push_back({worker(i), worker(i ^ d)});
      return flows;
    }));
  }
  Bytes size = n;
  for (const auto& pc : stepCosts) {
    size = size / 2;
    charge(pc, pc.time(size) + Seconds(size.value() * p.gamma));
    for (int i = 0; i < pof2; ++i) {
      c.sent[static_cast<size_t>(worker(i))] += size.value();
      c.received[static_cast<size_t>(worker(i))] += size.value();
    }
  }
  for (auto it = stepCosts.rbegin(); it != stepCosts.rend(); ++it) {
    charge(*it, it->time(size));
    for (int i = 0; i < pof2; ++i) {
      c.sent[static_cast<size_t>(worker(i))] += size.value();
      c.received[static_cast<size_t>(worker(i))] += size.value();
    }
    size = size * 2;
  }
  if (r > 0) {
    flows.clear();
    for (int i = 0; i < r; ++i) {
      flows.push_back({2 * i, 2 * i + 1});
      c.sent[static_cast<size_t>(2 * i)] += n.value();
      c.received[static_cast<size_t>(2 * i + 1)] += n.value();
    }
    const auto pc = topo.cost(flows);
    charge(pc, pc.time(n));
  }
  return c;
}

// Hierarchical ring (Horovod's hierarchical allreduce; NCCL's rings over
// rails): with G ranks per node and N = K / G nodes,
//
//   node 0: r0 r1 r2 r3    node 1: r4 r5 r6 r7          (G = 4, N = 2)
//   1. reduce-scatter inside each node, a ring of G (NVLink/NVSwitch): rank
//      l of a node then holds the node's sum of one chunk of n/G
//   2. allreduce of that chunk across the nodes, one ring per rail (r1 -> r5
//      -> r1, r2 -> r6 -> r2, ...): the G rails at once, each on its own NIC
//      (lane); reduce-scatter then allgather of N sub-chunks of n/(G N)
//   3. allgather inside each node
//
//   T = 2 (G-1) (alpha_1 + n/(G beta_1)) + (G-1)/G n gamma
//     + 2 (N-1) (alpha_2 + n/(G N beta_2)) + (N-1)/(G N) n gamma   (unsegmented;
//       segmented, each ring step pipelines its send and add as the ring does)
//
// Against the flat ring's 2 (K-1) latencies, 2 (G-1) + 2 (N-1); the bytes
// each rank sends are the same, 2 (K-1)/K n. Throws UserError when K is not
// whole nodes.
CollectiveCost allReduceHierarchical(const Topology& topo, Bytes n, const CommParams& p) {
  auto c = empty(topo);
  const int k = topo.workers();
  const int g = topo.nodeSize();
  (void)hierarchicalLevels(topo,
                           RankGroups{k, 1, AllreduceAlgorithm::kHierarchical});  // whole nodes
  const int nodes = k / g;
  const auto& inner = topo.ringStep(g, 1);
  const Bytes chunk = n / g, sub = chunk / nodes;
  const Seconds inside = ringPhase(inner, g, chunk, p, true) + ringPhase(inner, g, chunk, p, false);
  Seconds across;
  if (nodes > 1) {
    const auto& outer = topo.ringStep(k, g);
    across = ringPhase(outer, nodes, sub, p, true) + ringPhase(outer, nodes, sub, p, false);
    noteBottleneck(c, outer);
  }
  if (inside > across)
    noteBottleneck(c, inner);
  c.time = inside + across;
  c.steps = 2 * (g - 1) + 2 * (nodes - 1);
  const double each = 2.0 * (g - 1) * chunk.value() + 2.0 * (nodes - 1) * sub.value();
  addSymmetric(c, each, each);
  return c;
}

// Double binary tree (collectives.h, doubleBinaryTree): each tree reduces
// its half of the buffer up and broadcasts it down, both trees at once, in
// segments s of the half that pipeline through the stages:
//
//   up stage h:   children of height h send s to their parent, which adds
//                 them (inputs_h s gamma)
//   down stage h: the same flows reversed, highest first
//
// Segment j of a stage starts when segment j of the stage before it and
// segment j-1 of itself are done, and segment j-1 of every later stage
// that loads one of its links (Topology::treeConflicts; builder.h adds the
// same dependencies), so no two stages share a link at once:
//
//   C(p, j) = max(C(p-1, j), C(p, j-1), C(q, j-1) for q > p sharing a link) + t_p
//   T = C(last, m-1);  without shared links: sum of t_p + (m-1) max t_p
//
// The latency grows with log2 K instead of K; every rank sends about n
// (half up in one tree, half down in the other), as in the ring.
CollectiveCost treeOn(const Topology& topo, const TreeView& view, Bytes n, const CommParams& p) {
  auto c = p.countBytes ? empty(topo) : CollectiveCost{};
  const auto& stages = view.stages;
  const auto& conflicts = view.conflicts;
  const size_t count = stages.size();
  const Bytes half = n / 2;
  const int segs = segmentCount(half, p.segment);
  const Bytes s = half / segs;
  // Transfer stage q's time, and the sum after up stage q.
  std::vector<double> send(2 * count), add(count), once(2 * count, 0.0);
  Seconds worst;
  for (size_t q = 0; q < 2 * count; ++q) {
    const bool down = q >= count;
    const auto& pc = (down ? view.down : view.up).at(down ? 2 * count - 1 - q : q);
    send[q] = pc.time(s).value();
    // Paid by segment 0 only where the latency is per step.
    if (pc.latencyPerStep)
      once[q] = pc.latency.value();
    if (Seconds(send[q]) > worst) {
      worst = Seconds(send[q]);
      c.bottleneckLink = pc.bottleneckLink;
      c.bottleneckUp = pc.bottleneckUp;
    }
    if (!down)
      add[q] = stages[q].inputs * s.value() * p.gamma;
  }
  std::vector<double> sent(2 * count, 0.0), summed(count, 0.0);  // the segment before's ends
  double clock = 0;
  for (int j = 0; j < segs; ++j) {
    double before = 0;
    std::vector<double> now(2 * count);
    for (size_t q = 0; q < 2 * count; ++q) {
      double ready = std::max(before, sent[q]);
      for (size_t later = q + 1; later < 2 * count; ++later)
        if (conflicts[q] >> later & 1)
          ready = std::max(ready, sent[later]);
      now[q] = before = ready + send[q] - (j > 0 ? once[q] : 0.0);
      if (q < count)
        before = summed[q] = std::max(before, summed[q]) + add[q];
    }
    sent = now;
    clock = before;
  }
  c.time = Seconds(clock);
  c.steps = 2 * static_cast<int>(count);
  if (c.sent.empty())
    return c;
  for (const auto& st : stages)
    for (const auto& f : st.flows) {
      c.sent[static_cast<size_t>(f.src)] += half.value();
      c.received[static_cast<size_t>(f.dst)] += half.value();
      c.sent[static_cast<size_t>(f.dst)] += half.value();
      c.received[static_cast<size_t>(f.src)] += half.value();
    }
  return c;
}

CollectiveCost allReduceTree(const Topology& topo, Bytes n, const CommParams& p) {
  return treeOn(topo, topo.treeOf(topo.workers(), 1), n, p);
}

}  // namespace

AllreduceAlgorithm chooseAllreduce(const Topology& topo, Bytes n, const CommParams& p) {
  const int k = topo.workers(), g = topo.nodeSize();
  std::vector<AllreduceAlgorithm> candidates{AllreduceAlgorithm::kRing};
  if (g > 1 && k % g == 0 && k / g > 1)
    candidates.push_back(AllreduceAlgorithm::kHierarchical);
  candidates.push_back(AllreduceAlgorithm::kTree);
  candidates.push_back(AllreduceAlgorithm::kHalvingDoubling);
  AllreduceAlgorithm best = AllreduceAlgorithm::kRing;
  Seconds bestTime(std::numeric_limits<double>::infinity());
  for (auto a : candidates) {
    const Seconds t = allReduce(topo, a, n, p).time;
    if (t < bestTime) {
      bestTime = t;
      best = a;
    }
  }
  return best;
}

std::string describeAllreduce(AllreduceAlgorithm requested,
                              const std::vector<std::pair<std::string, double>>& picks) {
  if (requested != AllreduceAlgorithm::kAuto)
    return std::string(toString(requested));
  std::vector<std::pair<std::string, std::pair<int, double>>> counts;  // in order of first use
  for (const auto& pick : picks) {
    auto it = std::find_if(counts.begin(), counts.end(),
                           [&](const auto& x) { return x.first == pick.first; });
    if (it == counts.end())
      it = counts.insert(counts.end(), {pick.first, {0, 0.0}});
    ++it->second.first;
    it->second.second += pick.second;
  }
  std::string out = "auto";
  for (size_t i = 0; i < counts.size(); ++i) {
    const auto& [name, c] = counts[i];
    const char* what = i > 0 ? "" : c.first == 1 ? " buffer" : " buffers";
    out += fmt::format("{} {} for {}{} of {}", i == 0 ? ":" : ",", name, c.first, what,
                       formatBytes(Bytes(c.second / c.first)));
  }
  return out;
}

CollectiveCost allReduce(const Topology& topo, AllreduceAlgorithm algorithm, Bytes n,
                         const CommParams& p) {
  if (algorithm == AllreduceAlgorithm::kAuto)
    algorithm = chooseAllreduce(topo, n, p);
  auto c = [&] {
    if (topo.workers() == 1)
      return empty(topo);
    switch (algorithm) {
      case AllreduceAlgorithm::kNaive:
        return allReduceNaive(topo, n, p);
      case AllreduceAlgorithm::kRing:
        return allReduceRing(topo, n, p);
      case AllreduceAlgorithm::kHalvingDoubling:
        return allReduceHalvingDoubling(topo, n, p);
      case AllreduceAlgorithm::kDirect:
        return allReduceDirect(topo, n, p);
      case AllreduceAlgorithm::kHierarchical:
        return allReduceHierarchical(topo, n, p);
      case AllreduceAlgorithm::kTree:
        return allReduceTree(topo, n, p);
      case AllreduceAlgorithm::kAuto:
        break;
    }
    return empty(topo);
  }();
  c.algorithm = std::string(toString(algorithm));
  return c;
}

}  // namespace strata

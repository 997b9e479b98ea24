#include "strata/model/collectives.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "strata/model/error.h"
#include "strata/model/quantity_text.h"

namespace strata {

std::string_view toString(AllreduceAlgorithm algorithm) {
  switch (algorithm) {
    case AllreduceAlgorithm::kNaive:
      return "naive";
    case AllreduceAlgorithm::kRing:
      return "ring";
    case AllreduceAlgorithm::kHalvingDoubling:
      return "halving-doubling";
    case AllreduceAlgorithm::kDirect:
      return "direct";
  }
  return "?";
}

AllreduceAlgorithm parseAllreduceAlgorithm(std::string_view text, const std::string& option) {
  for (auto a : {AllreduceAlgorithm::kNaive, AllreduceAlgorithm::kRing,
                 AllreduceAlgorithm::kHalvingDoubling, AllreduceAlgorithm::kDirect})
    if (toString(a) == text)
      return a;
  throw OptionError(option, "unknown allreduce algorithm '" + std::string(text) +
                                "' (expected naive, ring, halving-doubling or direct)");
}

Seconds pipelineTime(int segments, std::initializer_list<Seconds> stageTimes) {
  Seconds sum, slowest;
  for (auto t : stageTimes) {
    sum += t;
    slowest = max(slowest, t);
  }
  return sum + slowest * (segments - 1);
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

}  // namespace

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
  const int segs = segmentCount(chunk, p.segment);
  const Bytes s = chunk / segs;
  if (ring) {
    const auto& step = topo.ringStep();
    c.time = pipelineTime(segs, {step.time(s), Seconds(s.value() * p.gamma)}) * (k - 1);
    c.steps = k - 1;
    noteBottleneck(c, step);
  } else {
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
CollectiveCost naiveAllReduce(const Topology& topo, Bytes n, const CommParams& p) {
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
CollectiveCost ringAllReduce(const Topology& topo, Bytes n, const CommParams& p) {
  auto c = reduceScatter(topo, n, p, true);
  const int k = topo.workers();
  const Bytes chunk = n / k;
  const int segs = segmentCount(chunk, p.segment);
  const auto& step = topo.ringStep();
  c.time += step.time(chunk / segs) * (segs * (k - 1));
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
Seconds directAllReduceTime(Seconds step, Seconds sum, int segments) {
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

CollectiveCost directAllReduce(const Topology& topo, Bytes n, const CommParams& p) {
  auto c = empty(topo);
  const int k = topo.workers();
  const Bytes chunk = n / k;
  const int segs = segmentCount(chunk, p.segment);
  const Bytes s = chunk / segs;
  const auto& step = topo.allToAll();
  c.time = directAllReduceTime(step.time(s), Seconds((k - 1) * s.value() * p.gamma), segs);
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
CollectiveCost halvingDoublingAllReduce(const Topology& topo, Bytes n, const CommParams& p) {
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
    flows.clear();
    for (int i = 0; i < pof2; ++i)
      flows.push_back({worker(i), worker(i ^ d)});
    stepCosts.push_back(topo.cost(flows));
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

}  // namespace

CollectiveCost allReduce(const Topology& topo, AllreduceAlgorithm algorithm, Bytes n,
                         const CommParams& p) {
  if (topo.workers() == 1)
    return empty(topo);
  switch (algorithm) {
    case AllreduceAlgorithm::kNaive:
      return naiveAllReduce(topo, n, p);
    case AllreduceAlgorithm::kRing:
      return ringAllReduce(topo, n, p);
    case AllreduceAlgorithm::kHalvingDoubling:
      return halvingDoublingAllReduce(topo, n, p);
    case AllreduceAlgorithm::kDirect:
      return directAllReduce(topo, n, p);
  }
  return empty(topo);
}

}  // namespace strata

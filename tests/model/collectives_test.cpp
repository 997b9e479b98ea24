// Every collective against its closed form on a flat switch (docs/cost-model.md),
// over K = 1..8 including primes, and bytes on the wire per rank.
#include "strata/model/collectives.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <tuple>

#include "helpers.h"
#include "strata/model/cluster_loader.h"
#include "strata/model/error.h"

using namespace strata;
using strata::test::flatCluster;

namespace {
constexpr double kBeta = 1e9;    // 1 GB/s
constexpr double kAlpha = 5e-6;  // 5 us
constexpr double kReduceBw = 4e9;
constexpr double kGamma = 1.0 / kReduceBw;
const Bytes kN(12'000'000);  // 12 MB: divisible by 1..8? not by 7 -- fine, the model is continuous

CommParams unsegmented() {
  return CommParams{Bytes(0), kGamma};
}
}  // namespace

TEST_CASE("point-to-point, broadcast, gather, all-to-all and allgather closed forms",
          "[collectives]") {
  const auto c = flatCluster(kBeta, kAlpha, 0, true, kReduceBw);
  const double n = kN.value();
  for (int k = 2; k <= 8; ++k) {
    INFO("K = " << k);
    const Topology t(c, k);
    CHECK(pointToPoint(t, 0, k - 1, kN).time.value() == Approx(kAlpha + n / kBeta));
    const auto bc = broadcast(t, 1, kN);
    CHECK(bc.time.value() == Approx(kAlpha + (k - 1) * n / kBeta));
    CHECK(bc.sent[1] == (k - 1) * n);
    CHECK(bc.received[0] == n);
    CHECK(gather(t, 0, kN).time.value() == Approx(kAlpha + (k - 1) * n / kBeta));
    const auto a2a = allToAll(t, kN);
    CHECK(a2a.time.value() == Approx(kAlpha + (k - 1) * n / kBeta));
    CHECK(a2a.sent[0] == (k - 1) * n);
    CHECK(allGather(t, kN, true).time.value() == Approx((k - 1) * (kAlpha + n / kBeta)));
    CHECK(allGather(t, kN, false).time.value() == Approx(kAlpha + (k - 1) * n / kBeta));
  }
}

TEST_CASE("ring allreduce: 2(K-1) alpha + 2(K-1)/K n/beta + (K-1)/K n gamma", "[collectives]") {
  const auto c = flatCluster(kBeta, kAlpha, 0, true, kReduceBw);
  const double n = kN.value();
  for (int k = 1; k <= 8; ++k) {
    INFO("K = " << k);
    const Topology t(c, k);
    const auto r = allReduce(t, AllreduceAlgorithm::kRing, kN, unsegmented());
    const double expect =
        2 * (k - 1) * kAlpha + 2.0 * (k - 1) / k * n / kBeta + double(k - 1) / k * n * kGamma;
    CHECK(r.time.value() == Approx(expect).epsilon(1e-12));
    for (int i = 0; i < k; ++i)
      CHECK(r.sent[static_cast<size_t>(i)] == Approx(2.0 * (k - 1) / k * n));
    CHECK(r.steps == 2 * (k - 1));
  }
}

TEST_CASE("segmenting a ring pipelines the sum behind the next segment's transfer",
          "[collectives]") {
  const auto c = flatCluster(kBeta, 0, 0, true, kReduceBw);
  const int k = 4;
  const Topology t(c, k);
  const Bytes seg(500'000);  // chunk 3 MB -> 6 segments
  const auto r = allReduce(t, AllreduceAlgorithm::kRing, kN, CommParams{seg, kGamma});
  const double s = 500'000;
  const double send = s / kBeta, add = s * kGamma;
  // reduce-scatter step: 6 segments through (send, add); allgather: 6 sends.
  const double expect = (k - 1) * (send + add + 5 * std::max(send, add)) + (k - 1) * 6 * send;
  CHECK(r.time.value() == Approx(expect).epsilon(1e-12));
}

TEST_CASE("naive reducer: streamed gather, sum, broadcast", "[collectives]") {
  const auto c = flatCluster(kBeta, kAlpha, 0, true, kReduceBw);
  const double n = kN.value();
  for (int k = 2; k <= 8; ++k) {
    INFO("K = " << k);
    const Topology t(c, k);
    // Unsegmented: gather, sum, broadcast one after the other.
    const auto u = allReduce(t, AllreduceAlgorithm::kNaive, kN, unsegmented());
    const double gatherT = kAlpha + (k - 1) * n / kBeta;
    CHECK(u.time.value() == Approx(2 * gatherT + (k - 1) * n * kGamma).epsilon(1e-12));
    CHECK(u.sent[0] == (k - 1) * n);
    CHECK(u.received[0] == (k - 1) * n);
    CHECK(u.sent[1] == n);
    // 12 segments of 1 MB: pipeline of three stages, the link stages slowest.
    const auto s = allReduce(t, AllreduceAlgorithm::kNaive, kN, CommParams{Bytes(1e6), kGamma});
    const double g = kAlpha + (k - 1) * 1e6 / kBeta, r = (k - 1) * 1e6 * kGamma;
    CHECK(s.time.value() == Approx(2 * g + r + 11 * std::max(g, r)).epsilon(1e-12));
  }
}

TEST_CASE("naive reducer: only the segments that cross pay the exchange rate", "[collectives]") {
  // One way at 1 GB/s; pairs exchanging both ways at 500 MB/s from 1 MB.
  const auto c = loadCluster(strata::test::dataFile("exchange-cluster.yaml"));
  const double alpha = 1e-6, oneWay = 1e9, both = 5e8;
  const double gamma = 1.0 / c.device.reduceBandwidth.value();
  for (int k = 2; k <= 5; ++k) {
    INFO("K = " << k);
    const Topology t(c, k);
    // One segment: the root receives everything, then sends it back. Nothing
    // crosses, so both transfers go at the one-way rate.
    const auto one =
        allReduce(t, AllreduceAlgorithm::kNaive, Bytes(4e6), CommParams{Bytes(0), gamma});
    const double g1 = alpha + (k - 1) * 4e6 / oneWay;
    CHECK(one.time.value() == Approx(2 * g1 + (k - 1) * 4e6 * gamma).epsilon(1e-12));
    // 4 segments of 1 MB: segment 0's gather and segment 3's broadcast go one
    // way; the 3 gathers and 3 broadcasts between are exchanges.
    const auto four =
        allReduce(t, AllreduceAlgorithm::kNaive, Bytes(4e6), CommParams{Bytes(1e6), gamma});
    const double g = alpha + (k - 1) * 1e6 / oneWay, x = alpha + (k - 1) * 1e6 / both;
    const double r = (k - 1) * 1e6 * gamma;
    CHECK(four.time.value() == Approx(g + r + g + 3 * std::max(x, r)).epsilon(1e-12));
  }
}

TEST_CASE("naive reducer on half-duplex links cannot overlap gather and broadcast",
          "[collectives]") {
  const auto c = flatCluster(kBeta, 0, 0, false, kReduceBw);
  const Topology t(c, 3);
  const auto s = allReduce(t, AllreduceAlgorithm::kNaive, kN, CommParams{Bytes(1e6), kGamma});
  const double g = 2 * 1e6 / kBeta;  // two flows into the reducer, half duplex
  const double r = 2 * 1e6 * kGamma;
  CHECK(s.time.value() == Approx((2 * g + r) + 11 * std::max(2 * g, r)).epsilon(1e-12));
}

TEST_CASE("recursive halving-doubling, powers of two and not", "[collectives]") {
  const auto c = flatCluster(kBeta, kAlpha, 0, true, kReduceBw);
  const double n = kN.value();
  for (int k : {2, 4, 8}) {
    INFO("K = " << k);
    const Topology t(c, k);
    const double lg = std::log2(k);
    const auto r = allReduce(t, AllreduceAlgorithm::kHalvingDoubling, kN, unsegmented());
    CHECK(r.time.value() ==
          Approx(2 * lg * kAlpha + 2.0 * (k - 1) / k * n / kBeta + double(k - 1) / k * n * kGamma)
              .epsilon(1e-12));
    CHECK(r.sent[0] == Approx(2.0 * (k - 1) / k * n));
  }
  // K = 6: p' = 4, r = 2. Ranks 1 and 3 fold into 0 and 2 first and get the result last.
  const Topology t6(c, 6);
  const auto r6 = allReduce(t6, AllreduceAlgorithm::kHalvingDoubling, kN, unsegmented());
  const double fold = kAlpha + n / kBeta;
  const double rs =
      (kAlpha + n / 2 / kBeta + n / 2 * kGamma) + (kAlpha + n / 4 / kBeta + n / 4 * kGamma);
  const double ag = (kAlpha + n / 4 / kBeta) + (kAlpha + n / 2 / kBeta);
  CHECK(r6.time.value() == Approx(fold + n * kGamma + rs + ag + fold).epsilon(1e-12));
  CHECK(r6.sent[1] == n);                         // folded rank: sends its data once
  CHECK(r6.received[1] == n);                     // and receives the result
  CHECK(r6.sent[0] == Approx(2 * 0.75 * n + n));  // active: halving-doubling + result
  CHECK(r6.sent[4] == Approx(2 * 0.75 * n));      // active, not folded
  CHECK(r6.steps == 6);
}

TEST_CASE("direct allreduce: reduce-scatter and allgather as all-to-alls", "[collectives]") {
  const auto c = flatCluster(kBeta, kAlpha, 0, true, kReduceBw);
  const double n = kN.value();
  for (int k = 2; k <= 8; ++k) {
    INFO("K = " << k);
    const Topology t(c, k);
    const auto r = allReduce(t, AllreduceAlgorithm::kDirect, kN, unsegmented());
    CHECK(r.time.value() ==
          Approx(2 * kAlpha + 2.0 * (k - 1) / k * n / kBeta + double(k - 1) / k * n * kGamma)
              .epsilon(1e-12));
    CHECK(r.sent[static_cast<size_t>(k - 1)] == Approx(2.0 * (k - 1) / k * n));
  }
}

TEST_CASE("reduce-scatter ring and direct, streamed reduce", "[collectives]") {
  const auto c = flatCluster(kBeta, kAlpha, 0, true, kReduceBw);
  const double n = kN.value();
  for (int k = 2; k <= 7; ++k) {
    const Topology t(c, k);
    const double chunk = n / k;
    CHECK(reduceScatter(t, kN, unsegmented(), true).time.value() ==
          Approx((k - 1) * (kAlpha + chunk / kBeta + chunk * kGamma)));
    CHECK(reduceScatter(t, kN, unsegmented(), false).time.value() ==
          Approx(kAlpha + (k - 1) * chunk / kBeta + (k - 1) * chunk * kGamma));
    CHECK(reduce(t, 0, kN, unsegmented()).time.value() ==
          Approx(kAlpha + (k - 1) * n / kBeta + (k - 1) * n * kGamma));
  }
}

TEST_CASE("one worker communicates nothing", "[collectives]") {
  const auto c = flatCluster(kBeta, kAlpha);
  const Topology t(c, 1);
  for (auto a : {AllreduceAlgorithm::kNaive, AllreduceAlgorithm::kRing,
                 AllreduceAlgorithm::kHalvingDoubling, AllreduceAlgorithm::kDirect}) {
    const auto r = allReduce(t, a, kN, unsegmented());
    CHECK(r.time.value() == 0.0);
    CHECK(r.sent[0] == 0.0);
  }
}

TEST_CASE("segmented direct allreduce: scatters and gathers take turns on one stream",
          "[collectives]") {
  const auto c = flatCluster(kBeta, 0, 0, true, kReduceBw);
  const int k = 4;
  const Topology t(c, k);
  // chunk 3 MB in 3 segments of 1 MB: each all-to-all step 3 MB / 1 GB/s = 3 ms,
  // each sum 3 x 1 MB / 4 GB/s = 0.75 ms, hidden behind the stream:
  // S0 S1 G0 S2 G1 G2 = 6 steps = 18 ms.
  const auto r = allReduce(t, AllreduceAlgorithm::kDirect, kN, CommParams{Bytes(1e6), kGamma});
  CHECK(r.time.value() == Approx(6 * 3e-3));
  // A sum slower than the network holds up each gather-back: with reduction at
  // 0.5 GB/s each sum takes 6 ms. S0 0-3, S1 3-6, R0 3-9, G0 9-12, S2 12-15,
  // R1 9-15, G1 15-18, R2 15-21, G2 21-24.
  const auto slow = flatCluster(kBeta, 0, 0, true, 0.5e9);
  const auto rs = allReduce(Topology(slow, k), AllreduceAlgorithm::kDirect, kN,
                            CommParams{Bytes(1e6), 1.0 / 0.5e9});
  CHECK(rs.time.value() == Approx(24e-3));
}

namespace {
// Nodes of `g` devices on a switch (beta1, alpha1) behind a second level of
// any number of nodes (beta2, alpha2), `lanes` NICs per node (rails).
Cluster twoLevel(int g, double beta1, double alpha1, double beta2, double alpha2, int lanes) {
  auto c = flatCluster(beta1, alpha1, g, true, kReduceBw);
  TopologyLevel net;
  net.name = "network";
  net.group = 0;
  net.link.bandwidth = BytesPerSecond(beta2);
  net.link.latency = Seconds(alpha2);
  net.link.lanes = lanes;
  c.levels.push_back(net);
  return c;
}
}  // namespace

TEST_CASE("hierarchical allreduce: rings inside the nodes, one ring per rail across them",
          "[collectives][scale]") {
  const int g = 4;
  const double beta1 = 10e9, alpha1 = 2e-6, beta2 = 1e9, alpha2 = 10e-6;
  const double n = kN.value();
  for (int lanes : {g, 1}) {
    const auto c = twoLevel(g, beta1, alpha1, beta2, alpha2, lanes);
    for (int nodes : {1, 2, 3, 5}) {
      const int k = g * nodes;
      INFO("lanes " << lanes << ", " << nodes << " nodes");
      const Topology t(c, k);
      const auto r = allReduce(t, AllreduceAlgorithm::kHierarchical, kN, unsegmented());
      // One NIC per device (rails): each inter-node flow has its lane; one
      // NIC per node: the node's G rails share it.
      const double railBeta = lanes == g ? beta2 : beta2 / g;
      const double expect = 2 * (g - 1) * (alpha1 + n / g / beta1) + (g - 1) * n / g * kGamma +
                            2 * (nodes - 1) * (alpha2 + n / g / nodes / railBeta) +
                            (nodes - 1) * n / g / nodes * kGamma;
      CHECK(r.time.value() == Approx(expect).epsilon(1e-12));
      CHECK(r.steps == 2 * (g - 1) + 2 * (nodes - 1));
      CHECK(r.algorithm == "hierarchical");
      // The same bytes per rank as the flat ring: 2 (K-1)/K n.
      for (int i = 0; i < k; ++i)
        CHECK(r.sent[static_cast<size_t>(i)] == Approx(2.0 * (k - 1) / k * n));
      // Fewer latencies than the flat ring, and (rails) less time.
      const auto ring = allReduce(t, AllreduceAlgorithm::kRing, kN, unsegmented());
      if (nodes > 1 && lanes == g)
        CHECK(r.time < ring.time);
    }
  }
  // Not whole nodes: refused, naming --workers.
  const auto c = twoLevel(g, beta1, alpha1, beta2, alpha2, g);
  const Topology t(c, 6);
  CHECK_THROWS_AS(allReduce(t, AllreduceAlgorithm::kHierarchical, kN, unsegmented()), OptionError);
  CHECK(chooseAllreduce(t, kN, unsegmented()) != AllreduceAlgorithm::kHierarchical);
}

TEST_CASE("hierarchical data-parallel groups: each node's members, then one ring per rail",
          "[collectives][scale]") {
  const int g = 4;
  const double beta1 = 10e9, alpha1 = 2e-6, beta2 = 1e9, alpha2 = 10e-6;
  const double n = kN.value();
  const auto p = unsegmented();
  for (int lanes : {g, 1}) {
    const auto c = twoLevel(g, beta1, alpha1, beta2, alpha2, lanes);
    const double railBeta = lanes == g ? beta2 : beta2 / g;
    for (int nodes : {1, 2, 3, 4}) {
      const int k = g * nodes;
      const Topology t(c, k);
      // Stride 1 (no tp, pp): the whole-cluster hierarchical allreduce.
      const RankGroups all{k, 1, AllreduceAlgorithm::kHierarchical};
      CHECK(groupAllReduce(t, all, kN, p).time.value() ==
            Approx(allReduce(t, AllreduceAlgorithm::kHierarchical, kN, p).time.value())
                .epsilon(1e-12));
      // Stride 2 (tp 2): m = 2 members of a group per node, N = nodes.
      INFO("lanes " << lanes << ", " << nodes << " nodes");
      const int m = 2, dp = m * nodes;
      const RankGroups half{k, 2, AllreduceAlgorithm::kHierarchical};
      const double rsInside = (m - 1) * (alpha1 + n / m / beta1 + n / m * kGamma);
      const double rsAcross =
          (nodes - 1) * (alpha2 + n / m / nodes / railBeta + n / m / nodes * kGamma);
      const double agInside = (m - 1) * (alpha1 + n / m / beta1);
      const double agAcross = (nodes - 1) * (alpha2 + n / m / nodes / railBeta);
      const auto rs = groupReduceScatter(t, half, kN, p);
      const auto ag = groupAllGather(t, half, kN, p);
      const auto ar = groupAllReduce(t, half, kN, p);
      CHECK(rs.time.value() == Approx(rsInside + rsAcross).epsilon(1e-12));
      CHECK(ag.time.value() == Approx(agAcross + agInside).epsilon(1e-12));
      CHECK(ar.time.value() == Approx(rsInside + rsAcross + agAcross + agInside).epsilon(1e-12));
      CHECK(ar.steps == 2 * (m - 1) + 2 * (nodes - 1));
      CHECK(ar.algorithm == "hierarchical");
      // The bytes of the flat ring over the group: 2 (dp-1)/dp n per rank.
      for (int r = 0; r < k; ++r) {
        CHECK(ar.sent[static_cast<size_t>(r)] == Approx(2.0 * (dp - 1) / dp * n));
        CHECK(rs.received[static_cast<size_t>(r)] == Approx(1.0 * (dp - 1) / dp * n));
      }
      // Stride g (tp x pp fills a node): one member per node, the rails'
      // rings alone, as the ring.
      if (nodes > 1) {
        const RankGroups rails{k, g, AllreduceAlgorithm::kHierarchical};
        CHECK(groupAllReduce(t, rails, kN, p).time.value() ==
              Approx(groupAllReduce(t, RankGroups{k, g}, kN, p).time.value()).epsilon(1e-12));
      }
      // auto: hierarchical only where strictly cheaper than the group's ring.
      const RankGroups pick{k, 2, AllreduceAlgorithm::kAuto};
      const auto ring = groupAllReduce(t, RankGroups{k, 2}, kN, p);
      const auto chosen = groupAllReduce(t, pick, kN, p);
      CHECK(chosen.time.value() == Approx(std::min(ring.time, ar.time).value()).epsilon(1e-12));
      CHECK(chosen.algorithm == (ar.time < ring.time ? "hierarchical" : "ring"));
    }
  }
  // tp x pp = 3 on nodes of 4: groups cross node boundaries unevenly,
  // refused naming --allreduce; auto keeps the ring.
  const auto c = twoLevel(g, beta1, alpha1, beta2, alpha2, g);
  const Topology t(c, 12);
  try {
    (void)groupAllReduce(t, RankGroups{12, 3, AllreduceAlgorithm::kHierarchical}, kN, p);
    FAIL("expected an OptionError");
  } catch (const OptionError& e) {
    CHECK_THAT(e.what(), Catch::StartsWith("--allreduce: ") &&
                             Catch::Contains("groups of ranks 3 apart on nodes of 4 devices"));
  }
  CHECK(groupAllReduce(t, RankGroups{12, 3, AllreduceAlgorithm::kAuto}, kN, p).algorithm == "ring");
  // Not whole nodes: refused naming --workers.
  const Topology six(c, 6);
  CHECK_THROWS_AS(groupAllReduce(six, RankGroups{6, 2, AllreduceAlgorithm::kHierarchical}, kN, p),
                  OptionError);
}

TEST_CASE("tree data-parallel groups: each group's double binary tree, every group at once",
          "[collectives]") {
  // On a flat switch the groups share no link: each group's tree costs what
  // the tree of dp workers alone does, and sends what it sends.
  const auto flat = flatCluster(kBeta, kAlpha, 0, true, kReduceBw);
  for (const CommParams p : {unsegmented(), CommParams{Bytes(1 << 20), kGamma}})
    for (const auto& [k, span, stride] : std::vector<std::tuple<int, int, int>>{
             {8, 8, 2}, {8, 8, 4}, {8, 4, 1}, {6, 6, 2}, {12, 12, 4}, {6, 3, 1}, {5, 5, 1}}) {
      INFO("K " << k << " span " << span << " stride " << stride);
      const Topology t(flat, k);
      const int dp = span / stride;
      const auto g = groupAllReduce(t, RankGroups{span, stride, AllreduceAlgorithm::kTree}, kN, p);
      const Topology alone(flat, dp);
      const auto ref = allReduce(alone, AllreduceAlgorithm::kTree, kN, p);
      CHECK(g.algorithm == "tree");
      CHECK(g.time.value() == Approx(ref.time.value()).epsilon(1e-12));
      CHECK(g.steps == ref.steps);
      for (int r = 0; r < k; ++r) {
        const int position = r % span / stride;
        CHECK(g.sent[static_cast<size_t>(r)] ==
              Approx(ref.sent[static_cast<size_t>(position)]).epsilon(1e-12));
      }
      // auto takes the cheapest of ring, hierarchical and tree.
      const auto ring = groupAllReduce(t, RankGroups{span, stride}, kN, p);
      const auto pick =
          groupAllReduce(t, RankGroups{span, stride, AllreduceAlgorithm::kAuto}, kN, p);
      CHECK(pick.time.value() == Approx(std::min(ring.time, g.time).value()).epsilon(1e-12));
    }
  // The whole cluster's group is the tree allreduce.
  const auto c = twoLevel(4, 10e9, 2e-6, 1e9, 10e-6, 4);
  const Topology t(c, 16);
  CHECK(groupAllReduce(t, RankGroups{16, 1, AllreduceAlgorithm::kTree}, kN, unsegmented())
            .time.value() ==
        Approx(allReduce(t, AllreduceAlgorithm::kTree, kN, unsegmented()).time.value())
            .epsilon(1e-12));
}

TEST_CASE("double binary tree: two spanning trees, a leaf in one is inside the other",
          "[collectives][scale]") {
  // K = 8 as drawn in collectives.h.
  const auto eight = doubleBinaryTree(8);
  std::vector<std::vector<int>> parent(2, std::vector<int>(8, -1));
  for (const auto& st : eight)
    for (size_t f = 0; f < st.flows.size(); ++f)
      parent[static_cast<size_t>(st.tree[f])][static_cast<size_t>(st.flows[f].src)] =
          st.flows[f].dst;
  CHECK(parent[0] == std::vector<int>{1, 3, 1, 7, 5, 3, 5, -1});
  CHECK(parent[1] == std::vector<int>{-1, 2, 4, 2, 0, 6, 4, 6});
  for (int k = 2; k <= 70; ++k) {
    INFO("K = " << k);
    const auto stages = doubleBinaryTree(k);
    std::vector<std::vector<int>> up(2, std::vector<int>(static_cast<size_t>(k), -1));
    std::vector<std::vector<int>> children(2, std::vector<int>(static_cast<size_t>(k), 0));
    std::vector<int> stageOf(static_cast<size_t>(k) * 2, -1);
    for (size_t s = 0; s < stages.size(); ++s) {
      const auto& st = stages[s];
      REQUIRE(st.flows.size() == st.tree.size());
      std::vector<int> into(static_cast<size_t>(k), 0);
      int most = 0;
      for (size_t f = 0; f < st.flows.size(); ++f) {
        const auto [src, dst] = st.flows[f];
        const auto tr = static_cast<size_t>(st.tree[f]);
        CHECK(up[tr][static_cast<size_t>(src)] == -1);  // one parent per tree
        up[tr][static_cast<size_t>(src)] = dst;
        ++children[tr][static_cast<size_t>(dst)];
        stageOf[tr * static_cast<size_t>(k) + static_cast<size_t>(src)] = static_cast<int>(s);
        most = std::max(most, ++into[static_cast<size_t>(dst)]);
      }
      CHECK(st.inputs == most);
    }
    for (size_t tr = 0; tr < 2; ++tr) {
      // K-1 edges, one root, every rank reaches it, each child's stage
      // before its parent's (the reduce goes up in stage order).
      int roots = 0;
      for (int r = 0; r < k; ++r) {
        roots += up[tr][static_cast<size_t>(r)] < 0 ? 1 : 0;
        int at = r, hops = 0;
        while (up[tr][static_cast<size_t>(at)] >= 0 && hops <= k) {
          const int p = up[tr][static_cast<size_t>(at)];
          if (up[tr][static_cast<size_t>(p)] >= 0)
            CHECK(stageOf[tr * static_cast<size_t>(k) + static_cast<size_t>(at)] <
                  stageOf[tr * static_cast<size_t>(k) + static_cast<size_t>(p)]);
          at = p;
          ++hops;
        }
        CHECK(hops < k);
      }
      CHECK(roots == 1);
      for (int r = 0; r < k; ++r)
        CHECK(children[tr][static_cast<size_t>(r)] <= 2);
    }
    // Even K (mirror): no rank has children in both trees.
    if (k % 2 == 0)
      for (int r = 0; r < k; ++r)
        CHECK(
            (children[0][static_cast<size_t>(r)] == 0 || children[1][static_cast<size_t>(r)] == 0));
  }
}

TEST_CASE("tree allreduce: stages up with sums, the same down, each tree half the buffer",
          "[collectives][scale]") {
  const auto c = flatCluster(kBeta, kAlpha, 0, true, kReduceBw);
  const double n = kN.value();
  {
    // K = 4: A is r0, r2 -> r1 -> r3; B (mirrored) r3, r1 -> r2 -> r0. Stage
    // 0 puts two flows into r1 and r2 (2 s / beta, 2 inputs summed); stage 1
    // one flow per link, into the roots, which sum it. Down: the same,
    // reversed.
    const Topology t(c, 4);
    const auto r = allReduce(t, AllreduceAlgorithm::kTree, kN, unsegmented());
    const double s = n / 2;
    const double expect = (kAlpha + 2 * s / kBeta) + 2 * s * kGamma + (kAlpha + s / kBeta) +
                          s * kGamma + (kAlpha + s / kBeta) + (kAlpha + 2 * s / kBeta);
    CHECK(r.time.value() == Approx(expect).epsilon(1e-12));
    CHECK(r.steps == 4);
    double total = 0;
    for (double x : r.sent)
      total += x;
    CHECK(total == Approx(2 * 2 * 3 * s));  // two trees, 3 edges each, up and down
  }
  {
    // K = 2 segmented: both halves cross at once (an exchange), then come
    // back on the same links, so a segment goes up only once the one before
    // has come down: 6 segments of send, add, send.
    const Topology t(c, 2);
    const Bytes seg(1'000'000);
    const auto r = allReduce(t, AllreduceAlgorithm::kTree, kN, CommParams{seg, kGamma});
    const double s = 1'000'000;  // 6 MB halves in 6 segments
    const double send = kAlpha + s / kBeta, add = s * kGamma;
    CHECK(r.time.value() == Approx(6 * (2 * send + add)).epsilon(1e-12));
  }
  {
    // K = 8 on nodes of 2 with a NIC per device: stages that load other
    // links pipeline, those sharing one take turns. The time lies between 12
    // segments each through every stage alone and one segment's stages
    // plus 11 segments on one link.
    const auto two = twoLevel(2, kBeta, kAlpha, kBeta, kAlpha, 2);
    const Topology t(two, 8);
    const Bytes seg(500'000);
    const auto r = allReduce(t, AllreduceAlgorithm::kTree, kN, CommParams{seg, kGamma});
    const auto one =
        allReduce(t, AllreduceAlgorithm::kTree, Bytes(1'000'000), CommParams{seg, kGamma});
    CHECK(r.time.value() <= 12 * one.time.value() * (1 + 1e-12));  // 12 segments of 500 kB
    CHECK(r.time.value() >= one.time.value() + 11 * 500'000 / kBeta);
  }
}

TEST_CASE("auto picks the least predicted time and says so", "[collectives][scale]") {
  const auto dgx = test::presetCluster("dgx-h100");
  const CommParams p{Bytes(4.0 * 1024 * 1024), 1.0 / dgx.device.reduceBandwidth.value()};
  for (int k : {2, 8, 12, 16, 64, 1024}) {
    const Topology t(dgx, k);
    for (double bytes : {4e3, 1e6, 64e6, 1e9}) {
      INFO("K = " << k << ", " << bytes << " bytes");
      const auto pick = chooseAllreduce(t, Bytes(bytes), p);
      const auto best = allReduce(t, AllreduceAlgorithm::kAuto, Bytes(bytes), p);
      CHECK(best.algorithm == toString(pick));
      for (auto a : {AllreduceAlgorithm::kRing, AllreduceAlgorithm::kTree,
                     AllreduceAlgorithm::kHalvingDoubling})
        CHECK(best.time <= allReduce(t, a, Bytes(bytes), p).time);
      if (k % 8 == 0)
        CHECK(best.time <= allReduce(t, AllreduceAlgorithm::kHierarchical, Bytes(bytes), p).time);
    }
  }
  // 1,024 H100s: a 4 KB buffer is latency-bound (log K steps beat the ring's
  // 2 (K-1)); a 1 GB one on 2 nodes goes the hierarchical way (NVLink first).
  CHECK(chooseAllreduce(Topology(dgx, 1024), Bytes(4e3), p) != AllreduceAlgorithm::kRing);
  CHECK(chooseAllreduce(Topology(dgx, 16), Bytes(1e9), p) == AllreduceAlgorithm::kHierarchical);
  CHECK(describeAllreduce(AllreduceAlgorithm::kRing, {{"ring", 1e6}}) == "ring");
  CHECK(
      describeAllreduce(AllreduceAlgorithm::kAuto, {{"tree", 1e6}, {"ring", 8e6}, {"tree", 3e6}}) ==
      "auto: tree for 2 buffers of 2.00 MB, ring for 1 of 8.00 MB");
}

TEST_CASE("latency per step: a ring step's segments after the first pay no alpha",
          "[collectives][scale]") {
  // NCCL keeps several chunks of a step in flight: the step pays alpha once.
  auto c = flatCluster(kBeta, kAlpha, 0, true, kReduceBw);
  c.levels[0].link.latencyPerStep = true;
  const int k = 4;
  const Topology t(c, k);
  const Bytes seg(500'000);  // chunk 3 MB -> 6 segments
  const auto r = allReduce(t, AllreduceAlgorithm::kRing, kN, CommParams{seg, kGamma});
  const double s = 500'000;
  const double send = s / kBeta, add = s * kGamma;
  const double expect =
      (k - 1) * (kAlpha + send + add + 5 * std::max(send, add)) + (k - 1) * (kAlpha + 6 * send);
  CHECK(r.time.value() == Approx(expect).epsilon(1e-12));
  // Unsegmented, or per message: as before.
  auto perMessage = c;
  perMessage.levels[0].link.latencyPerStep = false;
  const Topology u(perMessage, k);
  CHECK(allReduce(u, AllreduceAlgorithm::kRing, kN, CommParams{seg, kGamma}).time.value() ==
        Approx((k - 1) * (kAlpha + send + add + 5 * std::max(kAlpha + send, add)) +
               (k - 1) * 6 * (kAlpha + send))
            .epsilon(1e-12));
  CHECK(allReduce(t, AllreduceAlgorithm::kRing, kN, unsegmented()).time ==
        allReduce(u, AllreduceAlgorithm::kRing, kN, unsegmented()).time);
}

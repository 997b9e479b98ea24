#include "strata/model/topology.h"

#include <catch2/catch.hpp>
#include <cmath>

#include "helpers.h"
#include "strata/model/cluster_loader.h"
#include "strata/model/error.h"

using namespace strata;
using strata::test::flatCluster;
using strata::test::presetCluster;

TEST_CASE("k20x8-pcie: two switch groups of four", "[topology]") {
  const auto c = presetCluster("k20x8-pcie");
  const Topology t(c, 8);
  CHECK(t.meetLevel(0, 3) == 0);
  CHECK(t.meetLevel(3, 4) == 1);
  CHECK(t.meetLevel(5, 5) == -1);
  const double pcie = c.levels[0].link.bandwidth.value();
  const double host = c.levels[1].link.bandwidth.value();
  // Ring step 0->1->...->7->0: every link carries one flow per direction.
  CHECK(t.ringStep().secondsPerByte == Approx(1.0 / std::min(pcie, host)));
  CHECK(t.ringStep().latency == c.levels[1].link.latency);  // 3->4 crosses the host
  // Gather to 0: device 0's port receives 7 flows; the upper switch's uplink 4.
  CHECK(t.gather(0).secondsPerByte == Approx(std::max(7.0 / pcie, 4.0 / host)));
  // All-to-all: the group uplink carries 4 x 4 = 16 flows each way.
  CHECK(t.allToAll().secondsPerByte == Approx(std::max(7.0 / pcie, 16.0 / host)));
}

TEST_CASE("a ring inside one switch group never crosses the host", "[topology]") {
  const auto c = presetCluster("k20x8-pcie");
  const Topology t(c, 3);
  CHECK(t.ringStep().latency == c.levels[0].link.latency);
  CHECK(t.ringStep().secondsPerByte == Approx(1.0 / c.levels[0].link.bandwidth.value()));
}

TEST_CASE("dgx-h100: one NIC lane per GPU between nodes", "[topology]") {
  const auto c = presetCluster("dgx-h100");
  REQUIRE(c.capacity() == -1);
  const Topology t(c, 16);
  const double nic = c.levels[1].link.bandwidth.value();
  const double nvlink = c.levels[0].link.bandwidth.value();
  // Ring: 7->8 and 15->0 cross nodes on lane 7 (up) and lanes 0/7 (down), one flow each.
  CHECK(t.ringStep().secondsPerByte == Approx(std::max(1.0 / nic, 1.0 / nvlink)));
  // Gather to 0 from 15 others: 8 remote flows arrive on node 0's lane 0.
  CHECK(t.gather(0).secondsPerByte == Approx(std::max(15.0 / nvlink, 8.0 / nic)));
  CHECK(t.describeLink(t.gather(0).bottleneckLink, t.gather(0).bottleneckUp).find("lane 0") !=
        std::string::npos);
}

TEST_CASE("dgx-a100: the datasheet's figures and NCCL's, one HDR lane per GPU", "[topology]") {
  const auto c = presetCluster("dgx-a100");
  REQUIRE(c.capacity() == -1);
  // A100 datasheet (80GB SXM): 19.5 TFLOP/s fp32, 312 bf16 dense, 2,039 GB/s.
  CHECK(c.device.memoryBandwidth.value() == Approx(2039e9));
  REQUIRE(c.levels.size() == 2);
  CHECK(c.levels[0].group == 8);
  const double nvlink = c.levels[0].link.bandwidth.value();
  const double nic = c.levels[1].link.bandwidth.value();
  CHECK(nvlink == Approx(230e9));  // nccl-tests #175: 232.5 GB/s busbw on 8 A100s
  CHECK(nic == Approx(24e9));      // nccl-tests #119: 24 GB/s per 200G NIC
  CHECK(c.levels[1].link.lanes == 8);
  const Topology t(c, 16);
  CHECK(t.ringStep().secondsPerByte == Approx(std::max(1.0 / nic, 1.0 / nvlink)));
}

TEST_CASE("half-duplex links add both directions", "[topology]") {
  const auto full = flatCluster(1e9, 0, 0, true);
  const auto half = flatCluster(1e9, 0, 0, false);
  CHECK(Topology(full, 4).ringStep().secondsPerByte == Approx(1e-9));
  CHECK(Topology(half, 4).ringStep().secondsPerByte == Approx(2e-9));
  CHECK(Topology(half, 4).allToAll().secondsPerByte == Approx(6e-9));
}

TEST_CASE("more workers than devices is a user error naming the cluster", "[topology][errors]") {
  const auto c = presetCluster("k20x8-pcie");
  CHECK_THROWS_AS(Topology(c, 9), UserError);
  CHECK_THROWS_WITH(Topology(c, 9), Catch::Contains("k20x8-pcie"));
  CHECK_THROWS_AS(Topology(c, 0), OptionError);
}

TEST_CASE("closed-form gather, scatter and all-to-all equal the flow-by-flow cost", "[topology]") {
  struct Case {
    const char* cluster;
    int maxK;
  };
  // Partial groups (K not a multiple of the group), lanes, half duplex, several levels.
  for (const auto& c :
       {Case{"k20x8-pcie", 8}, Case{"dgx-h100", 27}, Case{"dgx-a100", 19}, Case{"baidu-5x8-ib", 40},
        Case{"localhost-cpu", 2}, Case{"gige-cluster", 11}}) {
    const auto cl = presetCluster(c.cluster);
    for (int k = 1; k <= c.maxK; ++k) {
      INFO(c.cluster << " K = " << k);
      const Topology t(cl, k);
      std::vector<Flow> all;
      for (int i = 0; i < k; ++i)
        for (int j = 0; j < k; ++j)
          if (i != j)
            all.push_back({i, j});
      const auto a = t.cost(all);
      CHECK(t.allToAll().secondsPerByte == Approx(a.secondsPerByte));
      CHECK(t.allToAll().latency == a.latency);
      for (int root = 0; root < k; ++root) {
        std::vector<Flow> in, out;
        for (int i = 0; i < k; ++i)
          if (i != root) {
            in.push_back({i, root});
            out.push_back({root, i});
          }
        const auto g = t.cost(in);
        const auto s = t.cost(out);
        CHECK(t.gather(root).secondsPerByte == Approx(g.secondsPerByte));
        CHECK(t.gather(root).latency == g.latency);
        CHECK(t.scatter(root).secondsPerByte == Approx(s.secondsPerByte));
      }
    }
  }
  const auto half = flatCluster(1e9, 0, 0, false);
  for (int k = 2; k <= 6; ++k) {
    const Topology t(half, k);
    std::vector<Flow> in;
    for (int i = 1; i < k; ++i)
      in.push_back({i, 0});
    CHECK(t.gather(0).secondsPerByte == Approx(t.cost(in).secondsPerByte));
  }
}

TEST_CASE("a hundred thousand workers are priced without enumerating flows", "[topology]") {
  const auto cl = presetCluster("dgx-h100");
  const Topology t(cl, 100'000);
  const double nic = cl.levels[1].link.bandwidth.value();
  // Each GPU's NIC lane carries its own flows to the 99,992 GPUs in other nodes.
  CHECK(t.allToAll().secondsPerByte == Approx(99'992.0 / nic));
  CHECK(t.gather(12'345).secondsPerByte == Approx(99'992.0 / nic));
}

TEST_CASE("patterns whose every flow has its reverse are exchanges", "[topology]") {
  CHECK(allExchanges(std::vector<Flow>{{0, 1}, {1, 0}}));
  CHECK(allExchanges(std::vector<Flow>{{0, 1}, {1, 0}, {2, 2}}));  // a flow to itself is no flow
  CHECK(allExchanges(std::vector<Flow>{{0, 1}, {0, 2}, {1, 0}, {1, 2}, {2, 0}, {2, 1}}));
  CHECK(!allExchanges(std::vector<Flow>{{0, 1}, {1, 2}, {2, 0}}));  // a ring of 3
  CHECK(!allExchanges(std::vector<Flow>{{0, 1}, {1, 0}, {0, 2}}));
  CHECK(!allExchanges(std::vector<Flow>{}));
  CHECK(!allExchanges(std::vector<Flow>{{3, 3}}));
}

TEST_CASE("an exchange table prices pairs sending both ways, one-way flows keep the link's",
          "[topology]") {
  const auto cl = loadCluster(strata::test::dataFile("exchange-cluster.yaml"));
  REQUIRE(cl.levels[0].link.exchangeTable.size() == 2);
  REQUIRE(cl.levels[0].link.bandwidthTable.empty());
  // K = 2: the ring's two flows are one exchange.
  const Topology two(cl, 2);
  CHECK(two.ringStep().exchangeShare == 1);
  CHECK(two.ringStep().time(Bytes(64e3)).value() == Approx(1e-6 + 64e3 / 1e9));
  CHECK(two.ringStep().time(Bytes(4e6)).value() == Approx(1e-6 + 4e6 / 5e8));
  // Linear in log n between the rows.
  const double at = std::log(256e3 / 64e3) / std::log(1e6 / 64e3);
  CHECK(two.ringStep().time(Bytes(256e3)).value() == Approx(1e-6 + 256e3 / (1e9 - at * 5e8)));
  // K = 3: each worker sends to one neighbour and receives from the other.
  const Topology three(cl, 3);
  CHECK(three.ringStep().exchangeShare == 0);
  CHECK(three.ringStep().time(Bytes(4e6)).value() == Approx(1e-6 + 4e6 / 1e9));
  // An all-to-all runs in K-1 shifted rounds (send to i+r, receive from i-r): one way
  // for K = 3; for K = 4 round 2 pairs both ways, a third of the bytes.
  CHECK(three.allToAll().exchangeShare == 0);
  CHECK(three.allToAll().time(Bytes(4e6)).value() == Approx(1e-6 + 2 * 4e6 / 1e9));
  const Topology four(cl, 4);
  CHECK(four.allToAll().exchangeShare == Approx(1.0 / 3));
  CHECK(four.allToAll().time(Bytes(4e6)).value() ==
        Approx(1e-6 + 3 * 4e6 * (2.0 / 3 / 1e9 + 1.0 / 3 / 5e8)));
  CHECK(two.allToAll().exchangeShare == 1);
}

TEST_CASE("a bandwidth table prices each message size at its own bandwidth", "[topology]") {
  const auto cl = loadCluster(strata::test::dataFile("table-cluster.yaml"));
  REQUIRE(cl.levels[0].link.bandwidthTable.size() == 2);
  const Topology t(cl, 2);
  const auto& ring = t.ringStep();
  CHECK(ring.time(Bytes(1e3)).value() == Approx(1e-6 + 1e3 / 1e8));
  CHECK(ring.time(Bytes(1e6)).value() == Approx(1e-6 + 1e6 / 1e9));
  CHECK(ring.time(Bytes(1e8)).value() == Approx(1e-6 + 1e8 / 1e9));  // held beyond the table
}

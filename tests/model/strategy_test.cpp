// Limiting behaviour of every strategy, the Baidu post's arithmetic and the
// weird-trick paper's reasoning, as numbers.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "helpers.h"
#include "strata/model/collectives.h"
#include "strata/model/error.h"
#include "strata/model/estimate.h"
#include "strata/model/network_loader.h"
#include "strata/model/plan.h"
#include "strata/model/topology.h"
#include "strata/study/validation.h"

using namespace strata;
using strata::test::flatCluster;
using strata::test::presetCluster;
using strata::test::presetNetwork;

namespace {
Scenario scenario(Strategy s, int k, int b = 128) {
  Scenario sc;
  sc.strategy = s;
  sc.workers = k;
  sc.batchPerWorker = b;
  return sc;
}
Seconds maxExposed(const StepEstimate& e) {
  Seconds m;
  for (const auto& w : e.workers)
    m = max(m, w.exposedCommunication);
  return m;
}
}  // namespace

TEST_CASE("one worker: every strategy is the single-worker step", "[strategy]") {
  const auto net = presetNetwork("alexnet-owt");
  const auto cl = presetCluster("k20x8-pcie");
  for (auto s : kAllStrategies) {
    INFO(toString(s));
    const auto e = estimate(net, cl, scenario(s, 1));
    CHECK(e.step.value() == Approx(e.singleWorkerStep.value()).epsilon(1e-12));
    CHECK(e.speedup == Approx(1.0).epsilon(1e-12));
    CHECK(e.workers[0].sent.value() == 0.0);
  }
}

TEST_CASE("free communication gives perfect scaling for every synchronous strategy", "[strategy]") {
  const auto net = presetNetwork("alexnet-owt");
  // 1 PB/s links, no latency, instant reduction.
  const auto cl = flatCluster(1e15, 0, 0, true, 1e18);
  for (int k : {2, 3, 5, 8}) {
    for (auto s : {Strategy::kNaive, Strategy::kRing}) {
      INFO(toString(s) << " K = " << k);
      CHECK(estimate(net, cl, scenario(s, k)).efficiency == Approx(1.0).epsilon(1e-6));
    }
    // Model parallelism also splits the FC weights' reads and updates K ways,
    // so it scales slightly better than linearly when communication is free.
    for (auto s : {Strategy::kOwtA, Strategy::kOwtB, Strategy::kOwtC}) {
      INFO(toString(s) << " K = " << k);
      const auto e = estimate(net, cl, scenario(s, k));
      CHECK(e.efficiency >= 1.0 - 1e-9);
      CHECK(e.efficiency < 1.05);
    }
  }
}

TEST_CASE("the Baidu post's arithmetic: naive adds (K-1) x 1.2 s, ring 2(K-1)/K x 1.2 s",
          "[strategy][baidu]") {
  const auto net = presetNetwork("lm-300m");
  const auto cl = presetCluster("ideal-1gbps");
  REQUIRE(net.totalParams() == 300'000'000);  // 1.2 GB of fp32 gradients
  for (int k : {2, 3, 5, 7, 10}) {
    INFO("K = " << k);
    auto sc = scenario(Strategy::kNaive, k, 32);
    sc.options.overlap = false;
    sc.options.segment = Bytes(4096);
    const auto naive = estimate(net, cl, sc);
    const double added = naive.step.value() - naive.singleWorkerStep.value();
    CHECK(added == Approx((k - 1) * 1.2).epsilon(1e-5));  // 1.2 s at 2, 10.8 s at 10
    sc.strategy = Strategy::kRing;
    const auto ring = estimate(net, cl, sc);
    const double ringAdded = ring.step.value() - ring.singleWorkerStep.value();
    CHECK(ringAdded == Approx(2.0 * (k - 1) / k * 1.2).epsilon(0.01));  // + the sum's gamma
    CHECK(ringAdded >= 2.0 * (k - 1) / k * 1.2);
    CHECK(ring.workers[0].sent.value() == Approx(2.0 * (k - 1) / k * 1.2e9));
    CHECK(naive.workers[0].sent.value() == Approx((k - 1) * 1.2e9));
  }
}

TEST_CASE("ring traffic per worker is nearly independent of K, naive grows linearly",
          "[strategy]") {
  const auto net = presetNetwork("alexnet-owt");
  const auto cl = presetCluster("dgx-h100");
  const double grads = double(net.totalParams()) * 4;
  for (int k : {2, 4, 16, 64}) {
    const auto ring = estimate(net, cl, scenario(Strategy::kRing, k));
    const auto naive = estimate(net, cl, scenario(Strategy::kNaive, k));
    CHECK(ring.workers[1].sent.value() == Approx(2.0 * (k - 1) / k * grads));
    CHECK(naive.workers[0].received.value() == Approx((k - 1) * grads));
    CHECK(naive.workers[1].sent.value() == Approx(grads));
  }
}

TEST_CASE("overlapping gradient communication with backprop never hurts a pipelined collective",
          "[strategy]") {
  const auto net = presetNetwork("vgg16");
  const auto cl = presetCluster("gige-cluster");
  // Not naive: each bucket's streamed reduce pays a pipeline fill of (K-1)
  // segments through the reducer's link, which on 1 Gb/s with 22 buckets of
  // vgg16 can cost more than overlap saves (see the next test).
  for (auto s :
       {Strategy::kRing, Strategy::kOwtA, Strategy::kOwtB, Strategy::kOwtC, Strategy::kPs}) {
    for (int k : {2, 5, 8}) {
      INFO(toString(s) << " K = " << k);
      auto on = scenario(s, k, 32);
      auto off = on;
      off.options.overlap = false;
      const auto a = estimate(net, cl, on);
      const auto b = estimate(net, cl, off);
      CHECK(a.step <= b.step);
      CHECK(maxExposed(a) <= maxExposed(b));
      CHECK(a.workers[0].sent.value() == Approx(b.workers[0].sent.value()));
    }
  }
}

TEST_CASE("the naive reducer pays one pipeline fill per bucket", "[strategy]") {
  const auto net = presetNetwork("vgg16");
  const auto cl = flatCluster(1e9, 0, 0, true, 1e18);  // 1 GB/s, no latency, free sums
  const int k = 4;
  auto on = scenario(Strategy::kNaive, k, 32);
  on.options.segment = Bytes(1e6);
  auto off = on;
  off.options.overlap = false;
  const auto buckets = gradientBuckets(net, 0, int(net.layers.size()), on.options);
  REQUIRE(buckets.size() > 3);
  const auto a = estimate(net, cl, on);
  const auto b = estimate(net, cl, off);
  // A streamed naive allreduce of n bytes in m = ceil(n/s) segments takes
  // (K-1)(n + n/m)/beta here: the buckets pay one fill each, the fused one once.
  auto naive = [&](double n) { return (k - 1) * (n + n / std::ceil(n / 1e6)) / 1e9; };
  double perBucket = 0, total = 0;
  for (const auto& bucket : buckets) {
    perBucket += naive(bucket.params * 4);
    total += bucket.params * 4;
  }
  CHECK(a.workers[1].communication.value() == Approx(perBucket).epsilon(1e-9));
  CHECK(b.workers[1].communication.value() == Approx(naive(total)).epsilon(1e-9));
  CHECK(perBucket > naive(total));
}

TEST_CASE("owt-b hides K-1 of the K activation transfers when FC compute is longer",
          "[strategy][owt]") {
  const auto net = presetNetwork("alexnet-owt");
  const auto cl = presetCluster("k20x8-pcie");
  for (int k : {2, 3, 4}) {
    INFO("K = " << k);
    const auto e = estimate(net, cl, scenario(Strategy::kOwtB, k));
    REQUIRE(e.rounds.rounds == k);
    REQUIRE(e.rounds.compute + e.rounds.innerComm >= e.rounds.transfer);
    CHECK(e.rounds.hiddenTransfers == k - 1);
    // Only the first transfer and the last gradient return stay exposed.
    const Seconds fc =
        e.rounds.transfer + (e.rounds.compute + e.rounds.innerComm) * k + e.rounds.gradientReturn;
    CHECK(e.rounds.transfer + e.rounds.gradientReturn < fc * 0.25);
  }
  // On 1 Gb/s Ethernet the transfer is far longer than the FC compute: none hide.
  const auto slow = estimate(net, presetCluster("gige-cluster"), scenario(Strategy::kOwtB, 8));
  CHECK(slow.rounds.transfer > slow.rounds.compute);
  CHECK(slow.rounds.hiddenTransfers == 0);
}

TEST_CASE("owt-b with fast compute: step = pipeline of rounds, transfers hidden exactly",
          "[strategy][owt]") {
  // Flat switch: round transfer X = alpha + (K-1) b A e / beta from the sender.
  const auto net = presetNetwork("alexnet-owt");
  const auto cl = flatCluster(6e9, 0, 0, true, 1e18);
  const int k = 4;
  const auto e = estimate(net, cl, scenario(Strategy::kOwtB, k));
  const double boundary = 9216 * 4.0;  // pool5 output, fp32
  CHECK(e.rounds.transfer.value() == Approx((k - 1) * 128 * boundary / 6e9));
  CHECK(e.rounds.egressPerRound.value() == Approx((k - 1) * 128 * boundary));
}

TEST_CASE("owt-c spreads each round over every sender: per-round egress bounded in K",
          "[strategy][owt]") {
  const auto net = presetNetwork("alexnet-owt");
  const auto cl = flatCluster(6e9, 0, 0, true, 1e18);
  const double bAe = 128 * 9216 * 4.0;
  for (int k : {2, 3, 4, 5, 6, 7, 8, 16}) {
    INFO("K = " << k);
    const auto a = estimate(net, cl, scenario(Strategy::kOwtA, k));
    const auto b = estimate(net, cl, scenario(Strategy::kOwtB, k));
    const auto c = estimate(net, cl, scenario(Strategy::kOwtC, k));
    // Busiest worker's outgoing activations per round: a and b grow as K-1,
    // c stays below b A e (Krizhevsky's "constant in K").
    CHECK(a.rounds.egressPerRound.value() == Approx((k - 1) * bAe));
    CHECK(b.rounds.egressPerRound.value() == Approx((k - 1) * bAe));
    CHECK(c.rounds.egressPerRound.value() == Approx((k - 1.0) / k * bAe));
    CHECK(c.rounds.egressPerRound.value() < bAe);
    // A round's transfer is K times shorter in c than in b (no latency here).
    CHECK(b.rounds.transfer.value() / c.rounds.transfer.value() == Approx(k));
    // Per-round communication / computation: b's grows with K, c's is K times smaller.
    const double ratioB = b.rounds.transfer / b.rounds.compute;
    const double ratioC = c.rounds.transfer / c.rounds.compute;
    CHECK(ratioB / ratioC == Approx(k));
    // Every scheme moves the same activation bytes per step: (K-1) b A e in and out.
    CHECK(a.workers[0].sent.value() == Approx(b.workers[0].sent.value()));
    CHECK(c.workers[0].sent.value() == Approx(b.workers[0].sent.value()));
  }
}

TEST_CASE("owt-a holds the largest batch: most memory", "[strategy][owt]") {
  const auto net = presetNetwork("alexnet-owt");
  const auto cl = presetCluster("k20x8-pcie");
  const auto a = estimate(net, cl, scenario(Strategy::kOwtA, 8));
  const auto b = estimate(net, cl, scenario(Strategy::kOwtB, 8));
  CHECK(a.workers[0].memory.activations > b.workers[0].memory.activations);
  CHECK(a.rounds.batchPerRound == 8 * 128);
  CHECK(b.rounds.batchPerRound == 128);
}

TEST_CASE("owt-b with per-round FC updates pays K FC updates per step", "[strategy][owt]") {
  const auto net = presetNetwork("alexnet-owt");
  const auto cl = presetCluster("k20x8-pcie");
  const int k = 4;
  auto step = scenario(Strategy::kOwtB, k);
  auto round = step;
  round.options.fcUpdate = FcUpdate::kRound;
  const auto es = estimate(net, cl, step);
  const auto er = estimate(net, cl, round);
  double fcParams = 0;
  for (size_t i = static_cast<size_t>(net.modelParallelFrom); i < net.layers.size(); ++i)
    fcParams += double(net.layers[i].params);
  const Seconds one = updateTime(fcParams / k, cl.device, ElementType::kFp32);
  CHECK((er.workers[0].compute.update - es.workers[0].compute.update).value() ==
        Approx((k - 1) * one.value()));
}

TEST_CASE(
    "ps updates on its servers: a 1/K shard per key inside the job, none on the compute stream",
    "[strategy][ps]") {
  // Three 1000 x 1000 fc layers: three keys of 4 MB. A job is the push
  // (direct reduce-scatter), the server's update of 1/K of the key and the
  // pull (direct allgather of the updated chunks), one job at a time.
  const auto net = loadNetwork(strata::test::dataFile("three-fc.yaml"));
  const auto cl = flatCluster(1e9, 1e-5, 0, true, 1e10);
  for (int k : {2, 3, 5, 8}) {
    INFO("K = " << k);
    auto sc = scenario(Strategy::kPs, k);
    sc.options.segment = Bytes(0);
    const auto e = estimate(net, cl, sc);
    const Topology topo(cl, k);
    CommParams p;
    p.segment = Bytes(0);
    p.gamma = 1e-10;
    const double job = reduceScatter(topo, Bytes(4e6), p, false).time.value() +
                       updateTime(1e6 / k, cl.device, ElementType::kFp32).value() +
                       allGather(topo, Bytes(4e6 / k), false).time.value();
    CHECK(e.workers[0].compute.update.value() == 0);
    CHECK(e.workers[0].communication.value() == Approx(3 * job).epsilon(1e-12));
    // Bytes per step: each key's chunks out and back, (K-1)/K of it each way.
    CHECK(e.workers[0].sent.value() == Approx(3 * 2.0 * (k - 1) / k * 4e6).epsilon(1e-12));
  }
}

TEST_CASE("ps steady state: first-needed lets the next forward start under the last pull",
          "[strategy][ps]") {
  // Hand-computed on three-fc, K = 2 (tests/sim/sim_test.cpp plays the same
  // timeline): every phase 256 us, every job J = 2.01 + 0.2 + 0.1 + 2.01 ms.
  // Step 0: compute ends at 2048 us; J3 runs 1280-5600; then first-needed
  // serves J1 (5600-9920) before J2 (9920-14240): the first step is 14.24 ms.
  // Step 1's fc1 forward starts at 9920 under J2; the period is 14.24 ms
  // less that forward: 13.984 ms. Fifo serves J2 first: no forward overlaps.
  const auto net = loadNetwork(strata::test::dataFile("three-fc.yaml"));
  const auto cl = flatCluster(1e9, 1e-5, 0, true, 1e10);
  auto sc = scenario(Strategy::kPs, 2);
  sc.options.segment = Bytes(0);
  const auto first = estimate(net, cl, sc);
  CHECK(first.firstStep.value() == Approx(14.24e-3).epsilon(1e-9));
  CHECK(first.step.value() == Approx(13.984e-3).epsilon(1e-9));
  CHECK(first.steadySteps >= kPsSteadySteps);
  CHECK(first.workers[0].exposedCommunication.value() ==
        Approx(13.984e-3 - 8 * 256e-6).epsilon(1e-9));
  sc.options.psPriority = PsPriority::kFifo;
  const auto fifo = estimate(net, cl, sc);
  CHECK(fifo.firstStep.value() == Approx(14.24e-3).epsilon(1e-9));
  CHECK(fifo.step.value() == Approx(14.24e-3).epsilon(1e-9));
  // Last-ready: within one step the last key ready is the first needed.
  sc.options.psPriority = PsPriority::kLastReady;
  CHECK(estimate(net, cl, sc).step.value() == Approx(first.step.value()).epsilon(1e-12));
}

TEST_CASE(
    "ps on alexnet-owt, k20x8-pcie: the steady step is below the first where communication "
    "outlasts backprop",
    "[strategy][ps]") {
  const auto net = presetNetwork("alexnet-owt");
  const auto cl = presetCluster("k20x8-pcie");
  // b = 128: the fc keys' syncs hide behind conv backprop; only conv1's is
  // exposed, and every step waits for it (it is ready last and needed first).
  const auto full = estimate(net, cl, scenario(Strategy::kPs, 8, 128));
  CHECK(full.step.value() == Approx(full.firstStep.value()).epsilon(1e-6));
  // b = 32: they do not; the next step's conv forward runs under them.
  const auto small = estimate(net, cl, scenario(Strategy::kPs, 8, 32));
  CHECK(small.step < small.firstStep * 0.9);
  // Staleness never slows a step; S = 0 is the default.
  auto stale = scenario(Strategy::kPs, 8, 32);
  stale.options.staleness = 1;
  CHECK(estimate(net, cl, stale).step <= small.step * (1 + 1e-9));
}

TEST_CASE("every worker's memory is estimateMemory's, only the naive reducer stages gradients",
          "[strategy][memory]") {
  // Release builds with GCC 12.2 (-O3) once printed the reducer's staging on
  // every naive worker: the estimate's per-worker loop was miscompiled (see
  // docs/testing.md). Closed forms: the reducer stages K-1 segments, a ring
  // worker two segments of its chunk, a ps server its 1/K gradient shard.
  const auto net = presetNetwork("alexnet-owt");
  const auto cl = presetCluster("k20x8-pcie");
  const double grads = double(net.totalParams()) * 4;
  const double seg = 4.0 * 1024 * 1024;  // the default segment, 4 MiB
  REQUIRE(grads / 8 > seg);
  for (int k : {1, 2, 3, 5, 8}) {
    for (auto s : kAllStrategies) {
      INFO(toString(s) << " K = " << k);
      const auto sc = scenario(s, k);
      const auto e = estimate(net, cl, sc);
      REQUIRE(e.workers.size() == static_cast<size_t>(k));
      for (int r = 0; r < k; ++r) {
        INFO("rank " << r);
        const auto& got = e.workers[static_cast<size_t>(r)].memory;
        const auto want = estimateMemory(net, cl, sc, r);
        CHECK(got.weights.value() == want.weights.value());
        CHECK(got.gradients.value() == want.gradients.value());
        CHECK(got.optimizer.value() == want.optimizer.value());
        CHECK(got.activations.value() == want.activations.value());
        CHECK(got.buffers.value() == want.buffers.value());
        double buffers = 0;
        if (k > 1 && s == Strategy::kNaive)
          buffers = r == 0 ? (k - 1) * seg : 0;
        else if (k > 1 && s == Strategy::kRing)
          buffers = 2 * seg;
        else if (k > 1 && s == Strategy::kPs)
          buffers = grads / k;
        if (!isModelParallel(s))
          CHECK(got.buffers.value() == Approx(buffers).epsilon(1e-12));
      }
    }
  }
}

TEST_CASE("a batch that does not fit is flagged", "[strategy]") {
  const auto net = presetNetwork("vgg16");
  const auto cl = presetCluster("k20x8-pcie");
  CHECK(estimate(net, cl, scenario(Strategy::kRing, 2, 32)).fitsInMemory);
  CHECK_FALSE(estimate(net, cl, scenario(Strategy::kRing, 2, 512)).fitsInMemory);
}

TEST_CASE("bad scenarios are user errors", "[strategy][errors]") {
  const auto net = presetNetwork("alexnet-owt");
  const auto cl = presetCluster("k20x8-pcie");
  CHECK_THROWS_AS(estimate(net, cl, scenario(Strategy::kRing, 0)), OptionError);
  CHECK_THROWS_AS(estimate(net, cl, scenario(Strategy::kRing, 2, 0)), OptionError);
  CHECK_THROWS_AS(estimate(net, cl, scenario(Strategy::kRing, 9)), UserError);
  auto fp16 = scenario(Strategy::kRing, 2);
  fp16.options.element = ElementType::kFp16;
  CHECK_THROWS_AS(estimate(net, cl, fp16), OptionError);  // the K20 has no fp16 peak
}

TEST_CASE("estimates are deterministic", "[strategy]") {
  const auto net = presetNetwork("resnet50");
  const auto cl = presetCluster("baidu-5x8-ib");
  for (auto s : kAllStrategies) {
    const auto a = estimate(net, cl, scenario(s, 7, 64));
    const auto b = estimate(net, cl, scenario(s, 7, 64));
    CHECK(a.step.value() == b.step.value());
    CHECK(a.bottleneck == b.bottleneck);
  }
}

TEST_CASE("workers sharing a node compute at the calibrated speed", "[strategy]") {
  auto cl = flatCluster(1e15, 0, 4, true, 1e18);
  const auto net = presetNetwork("tiny-cnn");
  const double alone = estimate(net, cl, scenario(Strategy::kRing, 1, 32)).step.value();
  cl.device.sharing = {{1, 1.0}, {2, 0.8}, {4, 0.5}};
  CHECK(cl.device.sharingSpeed(3) == Approx(0.65));
  CHECK(cl.device.sharingSpeed(8) == Approx(0.25));  // 4 x 0.5 shared by 8
  // No communication cost: the step is the compute at the shared speed.
  CHECK(estimate(net, cl, scenario(Strategy::kRing, 2, 32)).step.value() ==
        Approx(alone / 0.8).epsilon(1e-5));
  CHECK(estimate(net, cl, scenario(Strategy::kRing, 4, 32)).step.value() ==
        Approx(alone / 0.5).epsilon(1e-5));
}

TEST_CASE("a link slower than the calibrated lane leaves the cores to compute", "[strategy]") {
  // Calibrated: with 2 workers the lanes run at 0.6 (compute) and 0.5
  // (communication) while both run, the communication lane moving 4 GB/s alone.
  auto speeds = [](double linkBytesPerSecond, bool withRate) {
    auto cl = flatCluster(linkBytesPerSecond, 0, 0, true);
    cl.device.overlapCompute = {{1, 1.0}, {2, 0.6}};
    cl.device.overlapComm = {{1, 1.0}, {2, 0.5}};
    if (withRate)
      cl.device.overlapCommRate = {{2, 4e9}};
    return overlapSpeeds(cl, Topology(cl, 2), 2);
  };
  // A link as fast as the lane or faster: the speeds as measured.
  for (double beta : {4e9, 16e9}) {
    CHECK(speeds(beta, true).compute == Approx(0.6));
    CHECK(speeds(beta, true).comm == Approx(0.5));
  }
  // 1 GB/s: the lane is busy a quarter of the time. Compute loses a quarter
  // of its 40 %; communication at half speed still keeps up with the wire.
  CHECK(speeds(1e9, true).compute == Approx(1 - 0.4 * 0.25));
  CHECK(speeds(1e9, true).comm == Approx(1.0));
  // 2.5 GB/s: busy 5/8; the slowed lane moves 2 GB/s of the 2.5 the link could.
  CHECK(speeds(2.5e9, true).compute == Approx(1 - 0.4 * 0.625));
  CHECK(speeds(2.5e9, true).comm == Approx(0.8));
  // Without a measured rate (older calibrations): as measured, on any link.
  CHECK(speeds(1e8, false).compute == Approx(0.6));
  CHECK(speeds(1e8, false).comm == Approx(0.5));
  // One worker: nothing to share.
  auto one = flatCluster(1e8, 0);
  one.device.overlapCompute = {{1, 1.0}, {2, 0.6}};
  one.device.overlapCommRate = {{2, 4e9}};
  CHECK(overlapSpeeds(one, Topology(one, 1), 1).compute == Approx(1.0));
}

TEST_CASE("a duty curve prices a window by how busy the compute lane is in it",
          "[strategy][duty]") {
  // Compute at 0.5 and communication at 0.4 while both run; measured: 0.9 at
  // duty 0.5. A window that starts with 0.1 s of compute left (0.2 s at half
  // speed) and 0.3 s of communication (alone).
  LaneSpeeds lanes{0.5, 0.4, 0.5, 0.4, {{0, 1.0}, {0.5, 0.9}, {1, 0.4}}};
  CHECK(lanes.commAtDuty(0.25) == Approx(0.95));
  CHECK(lanes.commAtDuty(0.75) == Approx(0.65));
  // Saturated (today's): 0.4 for 0.2 s moves 0.08 s of the work, the other
  // 0.22 s at full speed once compute is over: 0.42 s.
  // With the curve: d = 0.2 s(d) / 0.3 on the segment s = 1.4 - d (from
  // (0.5, 0.9) to (1, 0.4)): d = (2/3)(1.4 - d), d = 0.56, s = 0.84; the
  // window lasts 0.3 / 0.84 = 0.357142857 s (0.062857 s less), and compute
  // is busy 0.2 s of it: 0.56.
  const double d = lanes.windowDuty(0.1, 0.3);
  CHECK(d == Approx(0.56).epsilon(1e-12));
  CHECK(lanes.commAtDuty(d) == Approx(0.84).epsilon(1e-12));
  CHECK(0.3 / lanes.commAtDuty(d) == Approx(0.3 / 0.84).epsilon(1e-12));
  CHECK(0.42 - 0.3 / lanes.commAtDuty(d) == Approx(0.062857142857).epsilon(1e-9));
  // Compute outlasting the window: d = 1, the saturated speed.
  CHECK(lanes.windowDuty(1.0, 0.3) == 1.0);
  // No compute left: d = 0.
  CHECK(lanes.windowDuty(0.0, 0.3) == 0.0);
  // Without a curve: the average of 0.4 while busy and 1 after.
  LaneSpeeds plain{0.5, 0.4, 0.5, 0.4, {}};
  CHECK(plain.commAtDuty(0.5) == Approx(0.7));

  // Through the model: alexnet-owt, ring, K = 2 on a calibrated CPU node
  // behind a 119 MB/s link, where the last buckets' allreduces outlast
  // backprop. A straight curve from (0, 1) to (1, 0.37) is the saturated
  // model exactly (a window at 0.37 while compute runs and 1 after averages
  // 1 - 0.63 d); a curve above the line is faster.
  auto cl = presetCluster("localhost-cpu");
  cl.device.overlapCompute = {{1, 1.0}, {2, 0.62}};
  cl.device.overlapComm = {{1, 1.0}, {2, 0.37}};
  cl.levels[0].link.bandwidth = BytesPerSecond(119e6);
  cl.levels[0].link.bandwidthTable.clear();
  const auto net = presetNetwork("alexnet-owt");
  Scenario sc;
  sc.strategy = Strategy::kRing;
  sc.workers = 2;
  sc.batchPerWorker = 16;
  sc.options.overlap = true;
  const double saturated = estimate(net, cl, sc).step.value();
  auto straight = cl;
  straight.device.overlapCommByDuty = {{2, {{0, 1.0}, {0.5, 1 - 0.63 * 0.5}, {1, 0.37}}}};
  CHECK(estimate(net, straight, sc).step.value() == Approx(saturated).epsilon(1e-9));
  auto above = cl;
  above.device.overlapCommByDuty = {{2, {{0, 1.0}, {0.5, 0.85}, {1, 0.37}}}};
  CHECK(estimate(net, above, sc).step.value() < saturated * 0.99);
  // The link's rate scales every point as the saturated one: at 1 GB/s of a
  // 4 GB/s lane the lane is busy a quarter of the time, and 0.85 / 0.25 > 1.
  auto fast = flatCluster(1e9, 0, 0, true);
  fast.device.overlapCompute = {{1, 1.0}, {2, 0.6}};
  fast.device.overlapComm = {{1, 1.0}, {2, 0.2}};
  fast.device.overlapCommRate = {{2, 4e9}};
  fast.device.overlapCommByDuty = {{2, {{0.5, 0.1}}}};
  const auto scaled = overlapSpeeds(fast, Topology(fast, 2), 2);
  REQUIRE(scaled.commByDuty.size() == 3);
  CHECK(scaled.commByDuty[0].second == 1.0);
  CHECK(scaled.commByDuty[1].second == Approx(0.4));  // 0.1 / 0.25
  CHECK(scaled.commByDuty[2].second == Approx(0.8));  // 0.2 / 0.25, scaled.comm
  CHECK(scaled.comm == Approx(0.8));
}

TEST_CASE("validation error arithmetic", "[validation]") {
  auto make = [](double measured, double model, double sim, bool within = true) {
    ValidationRow r;
    r.measured.step = Seconds(measured);
    r.model.step = Seconds(model);
    r.sim.step = Seconds(sim);
    r.withinClaims = within;
    return r;
  };
  // Errors: model +10 %, -4 %, +2 %; sim -5 %, +1 %, 0 %; an excluded row at +50 %.
  const std::vector<ValidationRow> rows = {make(1.0, 1.1, 0.95), make(2.0, 1.92, 2.02),
                                           make(0.5, 0.51, 0.5), make(1.0, 1.5, 1.5, false)};
  CHECK(rows[0].modelError() == Approx(0.10));
  CHECK(rows[1].modelError() == Approx(-0.04));
  const auto s = summarize(rows);
  CHECK(s.rows == 4);
  CHECK(s.rowsWithinClaims == 3);
  CHECK(s.medianModelError == Approx(0.04));
  CHECK(s.worstModelError == Approx(0.10));
  CHECK(s.medianSimError == Approx(0.01));
  CHECK(s.worstSimError == Approx(0.05));
}

// ---- optimizer state and training runs ----------------------------------------

namespace {
// fc 10 -> 100 without bias: exactly 1,000 parameters.
Network thousandParams() {
  const auto dir =
      std::filesystem::temp_directory_path() / ("strata-thousand-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto path = dir / "thousand.yaml";  // a network's name is its file's
  std::ofstream(path) << "name: thousand\ndescription: 1,000 weights\n"
                         "input: {channels: 10, height: 1, width: 1}\n"
                         "layers:\n  - {name: fc, kind: fc, outputs: 100, bias: false}\n";
  auto net = loadNetwork(path.string());
  std::filesystem::remove_all(dir);
  return net;
}
MemoryUse memoryWith(const Network& net, const Cluster& cl, Optimizer o, ElementType e,
                     Strategy s = Strategy::kRing, int k = 1) {
  auto sc = scenario(s, k, 1);
  sc.options.optimizer = o;
  sc.options.element = e;
  return estimateMemory(net, cl, sc, 0);
}
}  // namespace

TEST_CASE("optimizer memory per element type: states and fp32 master weights",
          "[strategy][memory][optimizer]") {
  const auto net = thousandParams();
  REQUIRE(net.totalParams() == 1000);
  auto cl = flatCluster(1e9, 0);
  for (auto t : {ElementType::kFp16, ElementType::kBf16, ElementType::kTf32})
    cl.device.peak[static_cast<size_t>(t)] = FlopsPerSecond(1e12);
  struct Row {
    Optimizer o;
    ElementType e;
    double weights, gradients, optimizer;  // bytes, by hand
  };
  const Row rows[] = {
      // fp32 and tf32: 4-byte weights and gradients, 4 bytes per state.
      {Optimizer::kSgd, ElementType::kFp32, 4000, 4000, 0},
      {Optimizer::kMomentum, ElementType::kFp32, 4000, 4000, 4000},
      {Optimizer::kAdam, ElementType::kFp32, 4000, 4000, 8000},
      {Optimizer::kAdam, ElementType::kTf32, 4000, 4000, 8000},
      // Mixed precision: 2-byte weights and gradients, fp32 master (4) and
      // states (4 each). Adam: 2 + 2 + 4 + 8 = 16 bytes per parameter (ZeRO).
      {Optimizer::kSgd, ElementType::kFp16, 2000, 2000, 4000},
      {Optimizer::kMomentum, ElementType::kBf16, 2000, 2000, 8000},
      {Optimizer::kAdam, ElementType::kFp16, 2000, 2000, 12000},
      {Optimizer::kAdam, ElementType::kBf16, 2000, 2000, 12000},
  };
  for (const auto& r : rows) {
    INFO(toString(r.o) << " " << toString(r.e));
    const auto m = memoryWith(net, cl, r.o, r.e);
    CHECK(m.weights.value() == r.weights);
    CHECK(m.gradients.value() == r.gradients);
    CHECK(m.optimizer.value() == r.optimizer);
  }
  const auto adam16 = memoryWith(net, cl, Optimizer::kAdam, ElementType::kFp16);
  CHECK(adam16.weights.value() + adam16.gradients.value() + adam16.optimizer.value() == 16000);
  // ps sharded over K = 4 workers: each server holds 1/4 of the optimizer
  // (states and master weights), whatever the optimizer.
  for (auto o : {Optimizer::kSgd, Optimizer::kMomentum, Optimizer::kAdam}) {
    const auto whole = memoryWith(net, cl, o, ElementType::kFp16);
    const auto shard = memoryWith(net, cl, o, ElementType::kFp16, Strategy::kPs, 4);
    CHECK(shard.optimizer.value() == Approx(whole.optimizer.value() / 4));
  }
  // The default is today's SGD with momentum.
  CHECK(StrategyOptions{}.optimizer == Optimizer::kMomentum);
}

TEST_CASE("optimizer names parse and print", "[strategy][optimizer]") {
  for (auto o : {Optimizer::kSgd, Optimizer::kMomentum, Optimizer::kAdam, Optimizer::kAdamW})
    CHECK(parseOptimizer(toString(o), "--optimizer") == o);
  CHECK(toString(Optimizer::kAdamW) == "adamw");
  CHECK(optimizerStatesPerParam(Optimizer::kSgd) == 0);
  CHECK(optimizerStatesPerParam(Optimizer::kMomentum) == 1);
  CHECK(optimizerStatesPerParam(Optimizer::kAdam) == 2);
  CHECK(optimizerStatesPerParam(Optimizer::kAdamW) == 2);
  CHECK(isAdam(Optimizer::kAdamW));
  CHECK(!isAdam(Optimizer::kMomentum));
  try {
    parseOptimizer("rmsprop", "--optimizer");
    FAIL("expected an OptionError");
  } catch (const OptionError& e) {
    const std::string what = e.what();
    CHECK(what.rfind("--optimizer: unknown optimizer 'rmsprop'", 0) == 0);
  }
}

TEST_CASE("the update of an estimate follows the optimizer", "[strategy][optimizer]") {
  // One worker, roofline: the step's update is updateTime's, and adam's
  // 28 bytes per parameter cost 28/12 of sgd's 12 on a memory-bound device.
  const auto net = presetNetwork("alexnet-owt");
  const auto cl = flatCluster(1e9, 0);
  auto sc = scenario(Strategy::kRing, 1, 32);
  double update[3];
  for (auto o : {Optimizer::kSgd, Optimizer::kMomentum, Optimizer::kAdam}) {
    sc.options.optimizer = o;
    update[static_cast<int>(o)] = estimate(net, cl, sc).workers[0].compute.update.value();
  }
  CHECK(update[1] / update[0] == Approx(20.0 / 12.0));
  CHECK(update[2] / update[0] == Approx(28.0 / 12.0));
  // AdamW is priced as Adam: the same kernel, states and memory.
  sc.options.optimizer = Optimizer::kAdamW;
  const auto adamw = estimate(net, cl, sc);
  sc.options.optimizer = Optimizer::kAdam;
  const auto adam = estimate(net, cl, sc);
  CHECK(adamw.workers[0].compute.update.value() == adam.workers[0].compute.update.value());
  CHECK(adamw.workers[0].memory.optimizer.value() == adam.workers[0].memory.optimizer.value());
  CHECK(adamw.step.value() == adam.step.value());
}

TEST_CASE("training runs: steps per epoch round up, time is first step + (n - 1) steps",
          "[strategy][training]") {
  // 1000 examples at a global batch of 64: 15.625, so 16 steps an epoch (the
  // last, partial batch is a step).
  const auto r = trainingRunOfEpochs(3, 1000, 64);
  CHECK(r.stepsPerEpoch == 16);
  CHECK(r.steps == 48);
  CHECK(trainingRunOfEpochs(2.5, 1000, 64).steps == 40);
  CHECK(trainingRunOfEpochs(0.3, 1000, 64).steps == 5);  // 4.8 steps: 5
  // 1.1 x 100 = 110.00000000000001 in binary: 110 steps, not 111.
  CHECK(trainingRunOfEpochs(1.1, 6400, 64).steps == 110);
  CHECK(trainingRunOfEpochs(1, 1024, 64).stepsPerEpoch == 16);
  CHECK(trainingRunOfEpochs(1, 1025, 64).stepsPerEpoch == 17);
  CHECK(trainingRunOfSteps(1000).steps == 1000);

  StepEstimate e;
  e.step = Seconds(2);
  e.firstStep = Seconds(2);
  CHECK(priceTrainingRun(trainingRunOfSteps(10), e).time.value() == 20);
  e.firstStep = Seconds(3);  // ps: the first step, then the steady period
  CHECK(priceTrainingRun(trainingRunOfSteps(10), e).time.value() == 21);
  e.firstStep = Seconds(0);  // unset: every step alike
  CHECK(priceTrainingRun(trainingRunOfSteps(10), e).time.value() == 20);

  auto option = [](auto f) -> std::string {
    try {
      f();
    } catch (const OptionError& err) {
      return std::string(err.what()).substr(0, std::string(err.what()).find(':'));
    }
    return "no error";
  };
  const double nan = std::nan(""), inf = HUGE_VAL;
  for (double bad : {0.0, -1.0, 1.5, nan, inf, 2e12})
    CHECK(option([&] { trainingRunOfSteps(bad); }) == "--steps");
  for (double bad : {0.0, -1.0, nan, inf, 2e6})
    CHECK(option([&] { trainingRunOfEpochs(bad, 1000, 64); }) == "--epochs");
  for (double bad : {0.0, -5.0, 10.5, nan, inf, 1e17})
    CHECK(option([&] { trainingRunOfEpochs(1, bad, 64); }) == "--dataset");
  // 10^6 epochs of 2^53 / 1 steps: over 10^12 steps.
  CHECK(option([&] { trainingRunOfEpochs(1e6, 9007199254740992.0, 1); }) == "--epochs");
}

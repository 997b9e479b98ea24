// Collectives at scale in the simulator: the hierarchical ring, the double
// binary tree, halving-doubling and auto against the model (contention off);
// a representative plan (worker 0's compute for all) against the full plan;
// and auto's picks against every algorithm simulated.
#include <algorithm>
#include <catch2/catch.hpp>
#include <map>

#include "../model/helpers.h"
#include "strata/model/error.h"
#include "strata/model/estimate.h"
#include "strata/model/plan.h"
#include "strata/model/topology.h"
#include "strata/sim/simulator.h"

using namespace strata;
using strata::test::presetCluster;
using strata::test::presetNetwork;

namespace {

Scenario ringWith(AllreduceAlgorithm a, int k, int b, bool overlap) {
  Scenario sc;
  sc.strategy = Strategy::kRing;
  sc.workers = k;
  sc.batchPerWorker = b;
  sc.options.overlap = overlap;
  sc.options.gradientSync = a;
  return sc;
}

sim::Result simulated(const Network& net, const Cluster& cl, const Scenario& sc, bool contention,
                      PlanDetail detail) {
  sim::Options o;
  o.contention = contention;
  return sim::simulate(lowerToPlan(net, sc, cl, 0, detail), net, cl, o);
}

constexpr AllreduceAlgorithm kScaleAlgorithms[] = {
    AllreduceAlgorithm::kHierarchical, AllreduceAlgorithm::kTree,
    AllreduceAlgorithm::kHalvingDoubling, AllreduceAlgorithm::kAuto};

}  // namespace

TEST_CASE("hierarchical, tree, halving-doubling and auto: the simulator equals the model (1 %)",
          "[sim][agreement][scale]") {
  // dgx-h100: nodes of 8 on NVSwitch, a NIC per GPU (rails); baidu-5x8-ib:
  // nodes of 8 behind one NIC each, 5 per rack.
  for (const char* c : {"dgx-h100", "baidu-5x8-ib"}) {
    const auto cl = presetCluster(c);
    for (const char* name : {"resnet50", "alexnet-owt"}) {
      const auto net = presetNetwork(name);
      for (auto a : kScaleAlgorithms)
        for (int k : {2, 3, 5, 8, 16, 24, 40}) {
          if (a == AllreduceAlgorithm::kHierarchical && k % Topology(cl, k).nodeSize() != 0)
            continue;  // not whole nodes: refused (collectives_test)
          for (bool overlap : {false, true}) {
            INFO(c << " " << name << " " << toString(a) << " K = " << k << " overlap " << overlap);
            const auto sc = ringWith(a, k, 32, overlap);
            const auto model = estimate(net, cl, sc);
            const auto sim = simulated(net, cl, sc, false, PlanDetail::kFull);
            CHECK(sim.estimate.step.value() == Approx(model.step.value()).epsilon(0.01));
            CHECK(sim.estimate.allreduce == model.allreduce);
            for (int w : {0, k - 1}) {
              const auto i = static_cast<size_t>(w);
              CHECK(sim.estimate.workers[i].sent.value() ==
                    Approx(model.workers[i].sent.value()).epsilon(1e-9));
              CHECK(sim.estimate.workers[i].received.value() ==
                    Approx(model.workers[i].received.value()).epsilon(1e-9));
            }
          }
        }
    }
  }
}

TEST_CASE("a representative plan simulates to the full plan's result, worker by worker",
          "[sim][scale][representative]") {
  const auto cl = presetCluster("dgx-h100");
  const auto net = presetNetwork("resnet50");
  std::vector<std::pair<Strategy, AllreduceAlgorithm>> cases{
      {Strategy::kNaive, AllreduceAlgorithm::kRing}, {Strategy::kRing, AllreduceAlgorithm::kRing}};
  for (auto a : kScaleAlgorithms)
    cases.push_back({Strategy::kRing, a});
  for (const auto& [s, a] : cases)
    for (int k : {1, 2, 3, 7, 16, 40, 64, 1024}) {
      if (a == AllreduceAlgorithm::kHierarchical && k > 8 && k % 8 != 0)
        continue;
      if (s == Strategy::kNaive && k > 64)
        continue;  // the naive reducer's root: K-1 flows a step, K = 64 shows it
      for (bool contention : {true, false}) {
        INFO(toString(s) << " " << toString(a) << " K = " << k << " contention " << contention);
        auto sc = ringWith(a, k, 64, true);
        sc.strategy = s;
        const auto full = simulated(net, cl, sc, contention, PlanDetail::kFull);
        const auto rep = simulated(net, cl, sc, contention, PlanDetail::kRepresentative);
        CHECK(rep.estimate.step.value() == Approx(full.estimate.step.value()).epsilon(1e-12));
        REQUIRE(rep.estimate.workers.size() == full.estimate.workers.size());
        for (size_t w = 0; w < full.estimate.workers.size(); ++w) {
          const auto& f = full.estimate.workers[w];
          const auto& r = rep.estimate.workers[w];
          CHECK(r.compute.total().value() == Approx(f.compute.total().value()).epsilon(1e-12));
          CHECK(r.communication.value() == Approx(f.communication.value()).epsilon(1e-12));
          CHECK(r.exposedCommunication.value() ==
                Approx(f.exposedCommunication.value()).epsilon(1e-12).margin(1e-15));
          CHECK(r.sent.value() == Approx(f.sent.value()).epsilon(1e-12));
          CHECK(r.received.value() == Approx(f.received.value()).epsilon(1e-12));
        }
        REQUIRE(rep.links.size() == full.links.size());
        for (size_t l = 0; l < full.links.size(); ++l) {
          CHECK(rep.links[l].name == full.links[l].name);
          CHECK(rep.links[l].bytes.value() == Approx(full.links[l].bytes.value()));
        }
        // Far fewer tasks: O(layers + collective steps).
        if (k >= 16)
          CHECK(lowerToPlan(net, sc, cl, 0, PlanDetail::kRepresentative).tasks.size() * 4 <
                lowerToPlan(net, sc, cl).tasks.size());
      }
    }
}

TEST_CASE("simulateScenario takes the representative plan only where workers compute alike",
          "[sim][scale][representative]") {
  const auto cl = presetCluster("dgx-h100");
  const auto net = presetNetwork("tiny-cnn");
  const auto sc = ringWith(AllreduceAlgorithm::kRing, 8, 16, true);
  CHECK_THAT(sim::simulateScenario(net, cl, sc, {}).detail,
             Catch::StartsWith("representative: worker 0's compute stands for all 8"));
  sim::Options straggler;
  straggler.slowdown = {1.0, 1.5};
  const auto slow = sim::simulateScenario(net, cl, sc, straggler);
  CHECK(slow.detail == "full: --straggler makes workers differ");
  CHECK(slow.estimate.step > sim::simulateScenario(net, cl, sc, {}).estimate.step);
  sim::Options jitter;
  jitter.jitter = 0.1;
  CHECK(sim::simulateScenario(net, cl, sc, jitter).detail == "full: --jitter makes workers differ");
  auto owt = sc;
  owt.strategy = Strategy::kOwtB;
  CHECK(sim::simulateScenario(net, cl, owt, {}).detail ==
        "full: owt-b workers hold different tasks");
  // A CPU node whose lanes share its cores: each worker slowed by its own part.
  auto cpu = presetCluster("localhost-cpu");
  cpu.device.overlapCompute = {{1, 1.0}, {2, 0.62}};
  cpu.device.overlapComm = {{1, 1.0}, {2, 0.37}};
  CHECK_THAT(
      sim::simulateScenario(net, cpu, ringWith(AllreduceAlgorithm::kRing, 2, 16, true), {}).detail,
      Catch::StartsWith("full: communication shares the workers' cores"));
  // Refused if given anyway.
  const auto rep = lowerToPlan(net, sc, cl, 0, PlanDetail::kRepresentative);
  CHECK_THROWS_AS(sim::simulate(rep, net, cl, straggler), InvariantError);
}

TEST_CASE("auto never picks an algorithm simulated more than 2 % slower than another",
          "[sim][scale][auto]") {
  // Every bucket of resnet50 (per layer: 256 B to 9 MB; 25 MiB buckets)
  // simulated with contention under each algorithm: the collective's span,
  // from its first task's start to its last task's end (buckets run one
  // after another, so they never share a link).
  const auto net = presetNetwork("resnet50");
  for (const char* c : {"dgx-h100", "baidu-5x8-ib"}) {
    const auto cl = presetCluster(c);
    for (int k : {8, 16, 40, 64, 256, 1024}) {
      if (cl.capacity() >= 0 && k > cl.capacity())
        continue;
      for (double bucket : {0.0, 25.0 * 1024 * 1024}) {
        INFO(c << " K = " << k << " bucket " << bucket);
        std::map<std::string, std::vector<double>> span;
        std::vector<std::string> picked;
        for (auto a : {AllreduceAlgorithm::kRing, AllreduceAlgorithm::kHierarchical,
                       AllreduceAlgorithm::kTree, AllreduceAlgorithm::kHalvingDoubling,
                       AllreduceAlgorithm::kAuto}) {
          auto sc = ringWith(a, k, 32, true);
          sc.options.bucket = Bytes(bucket);
          const auto plan = lowerToPlan(net, sc, cl, 0, PlanDetail::kRepresentative);
          const auto r = sim::simulate(plan, net, cl, {});
          auto& v = span[std::string(toString(a))];
          for (const auto& col : plan.collectives) {
            v.push_back(r.taskEnd[col.lastTask] - r.taskStart[col.firstTask]);
            if (a == AllreduceAlgorithm::kAuto)
              picked.push_back(col.algorithm);
          }
        }
        const auto& mine = span.at("auto");
        for (size_t i = 0; i < mine.size(); ++i) {
          double best = mine[i];
          std::string bestName = "auto";
          for (const auto& [name, v] : span)
            if (v[i] < best) {
              best = v[i];
              bestName = name;
            }
          INFO("bucket " << i << ": auto picked " << picked[i] << " (" << mine[i]
                         << " s), the fastest is " << bestName << " (" << best << " s)");
          CHECK(mine[i] <= best * 1.02);
        }
      }
    }
  }
}

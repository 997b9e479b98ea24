// Tensor and sequence parallelism, ZeRO and recomputation in the simulator:
// with contention off it plays cost/src/sharded.cpp's step task for task, so
// the simulated step, phases and bytes equal the model's (1 %), on a GPU
// cluster (lanes of their own), a CPU node (compute and communication share
// cores) and a flat switch, full and representative plans alike.
#include <catch2/catch.hpp>

#include "../model/helpers.h"
#include "strata/model/estimate.h"
#include "strata/model/plan.h"
#include "strata/sim/simulator.h"

using namespace strata;
using strata::test::flatCluster;
using strata::test::presetCluster;
using strata::test::presetNetwork;

namespace {

struct Case {
  int k, tp;
  bool sp;
  int zero;
  Recompute recompute;
  bool overlap;
};

}  // namespace

TEST_CASE("tensor parallelism, ZeRO and recomputation: the simulator equals the model (1 %)",
          "[sim][agreement][sharded]") {
  const Case cases[] = {
      {4, 1, false, 1, Recompute::kNone, true},      {4, 1, false, 2, Recompute::kNone, false},
      {8, 1, false, 3, Recompute::kNone, true},      {3, 1, false, 3, Recompute::kFull, true},
      {5, 1, false, 0, Recompute::kSelective, true}, {2, 2, false, 0, Recompute::kNone, true},
      {4, 2, true, 0, Recompute::kNone, true},       {8, 4, false, 1, Recompute::kSelective, true},
      {8, 2, true, 3, Recompute::kFull, true},       {6, 2, false, 2, Recompute::kFull, false},
      {16, 4, true, 1, Recompute::kSelective, true}, {16, 2, false, 3, Recompute::kNone, false},
  };
  for (const char* c : {"dgx-h100", "dgx-a100", "localhost-cpu", "flat"}) {
    const auto cl = std::string(c) == "flat" ? flatCluster(1e9, 2e-6) : presetCluster(c);
    for (const char* name : {"tiny-gpt", "tiny-llama"})
      for (const auto& x : cases) {
        if (cl.capacity() >= 0 && x.k > cl.capacity())
          continue;
        if (std::string(name) == "tiny-llama" && x.tp > 2)
          continue;  // 2 key/value heads
        const auto net = presetNetwork(name);
        Scenario sc;
        sc.strategy = Strategy::kRing;
        sc.workers = x.k;
        sc.batchPerWorker = 4;
        sc.options.tp = x.tp;
        sc.options.sequenceParallel = x.sp;
        sc.options.zero = x.zero;
        sc.options.recompute = x.recompute;
        sc.options.overlap = x.overlap;
        sc.options.bucket = Bytes(64 * 1024);  // several buckets
        INFO(c << " " << name << " K " << x.k << " tp " << x.tp << " sp " << x.sp << " zero "
               << x.zero << " recompute " << toString(x.recompute) << " overlap " << x.overlap);
        const auto model = estimate(net, cl, sc);
        sim::Options o;
        o.contention = false;
        const auto sim = sim::simulate(lowerToPlan(net, sc, cl, 0, PlanDetail::kFull), net, cl, o);
        CHECK(sim.estimate.step.value() == Approx(model.step.value()).epsilon(0.01));
        CHECK(sim.estimate.throughput == Approx(model.throughput).epsilon(0.01));
        const auto& mw = model.workers[0];
        const auto& sw = sim.estimate.workers[0];
        CHECK(sw.compute.total().value() == Approx(mw.compute.total().value()).epsilon(0.01));
        CHECK(sw.sent.value() == Approx(mw.sent.value()).epsilon(1e-9));
        CHECK(sw.received.value() == Approx(mw.received.value()).epsilon(1e-9));
        CHECK(sw.memory.total().value() == Approx(mw.memory.total().value()).epsilon(1e-12));
      }
  }
}

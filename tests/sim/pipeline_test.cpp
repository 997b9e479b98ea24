// Pipelines and gradient accumulation in the simulator: the plan runs each
// stage's micro-batches in its schedule's order, with stage-to-stage
// transfers, the stages' own tensor- and data-parallel rings, and the
// syncs and update after the last backward. With contention off it plays
// cost/src/pipeline.cpp's step, so the simulated step, bubble, phases,
// bytes and memory equal the model's (1 %): the bubble comes out of the
// dependencies, nothing adds it.
#include "strata/model/pipeline.h"

#include <catch2/catch.hpp>
#include <optional>
#include <set>

#include "../model/helpers.h"
#include "strata/model/error.h"
#include "strata/model/estimate.h"
#include "strata/model/plan.h"
#include "strata/sim/simulator.h"

using namespace strata;
using strata::test::flatCluster;
using strata::test::presetCluster;
using strata::test::presetNetwork;

namespace {

struct Case {
  int k, tp, pp, m;
  PipelineSchedule schedule;
  int v;
  bool sp;
  int zero;
  Recompute recompute;
  bool overlap;
};

Scenario scenarioOf(const Case& x) {
  Scenario sc;
  sc.strategy = Strategy::kRing;
  sc.workers = x.k;
  sc.batchPerWorker = 2;
  sc.options.tp = x.tp;
  sc.options.pp = x.pp;
  sc.options.microbatches = x.m;
  sc.options.schedule = x.schedule;
  sc.options.virtualStages = x.v;
  sc.options.sequenceParallel = x.sp;
  sc.options.zero = x.zero;
  sc.options.recompute = x.recompute;
  sc.options.overlap = x.overlap;
  sc.options.bucket = Bytes(64 * 1024);  // several buckets
  return sc;
}

}  // namespace

TEST_CASE("pipelines and gradient accumulation: the simulator equals the model (1 %)",
          "[sim][agreement][pipeline]") {
  using S = PipelineSchedule;
  const auto none = Recompute::kNone;
  const Case cases[] = {
      {2, 1, 2, 1, S::k1f1b, 1, false, 0, none, true},
      {4, 1, 4, 8, S::k1f1b, 1, false, 0, none, true},
      {8, 1, 4, 6, S::k1f1b, 1, false, 1, none, true},
      {6, 1, 3, 5, S::kGpipe, 1, false, 0, Recompute::kFull, true},
      {4, 1, 2, 4, S::kInterleaved, 2, false, 0, none, true},
      {8, 2, 2, 4, S::kInterleaved, 2, true, 1, Recompute::kSelective, true},
      {8, 2, 2, 3, S::k1f1b, 1, true, 0, Recompute::kFull, false},
      {8, 2, 4, 8, S::k1f1b, 1, false, 1, none, true},
      {3, 1, 1, 4, S::k1f1b, 1, false, 0, none, true},  // accumulation
      {4, 2, 1, 3, S::k1f1b, 1, true, 1, none, true},   // accumulation, tp
      {5, 1, 5, 7, S::k1f1b, 1, false, 0, none, false},
      {16, 2, 4, 8, S::kInterleaved, 2, true, 1, none, true},
  };
  for (const char* c : {"dgx-h100", "dgx-a100", "flat"}) {
    const auto cl = std::string(c) == "flat" ? flatCluster(1e9, 2e-6) : presetCluster(c);
    for (const char* name : {"tiny-gpt", "tiny-llama"})
      for (const auto& x : cases) {
        if (std::string(name) == "tiny-llama" && x.tp > 2)
          continue;  // 2 key/value heads
        const auto net = presetNetwork(name);
        auto sc = scenarioOf(x);
        // One layout cut where the user says (--stage-starts), not balanced.
        if (x.k == 6 && x.pp == 3)
          sc.options.stageStarts = {"h.1", "h.2"};
        INFO(c << " " << name << " K " << x.k << " tp " << x.tp << " pp " << x.pp << " M " << x.m
               << " " << toString(x.schedule) << " V " << x.v << " sp " << x.sp << " zero "
               << x.zero << " recompute " << toString(x.recompute) << " overlap " << x.overlap);
        const auto model = estimate(net, cl, sc);
        sim::Options o;
        o.contention = false;
        const auto sim = sim::simulate(lowerToPlan(net, sc, cl, 0, PlanDetail::kFull), net, cl, o);
        CHECK(sim.estimate.step.value() == Approx(model.step.value()).epsilon(0.01));
        CHECK(sim.estimate.throughput == Approx(model.throughput).epsilon(0.01));
        CHECK(sim.estimate.pipelineBubble.value() ==
              Approx(model.pipelineBubble.value()).epsilon(0.01).margin(1e-12));
        CHECK(sim.estimate.pipeline == model.pipeline);
        // Every stage's first worker: its compute, bytes and memory.
        for (int w = 0; w < x.k; w += x.tp) {
          INFO("worker " << w);
          const auto& mw = model.workers[static_cast<size_t>(w)];
          const auto& sw = sim.estimate.workers[static_cast<size_t>(w)];
          CHECK(sw.compute.total().value() == Approx(mw.compute.total().value()).epsilon(0.01));
          CHECK(sw.sent.value() == Approx(mw.sent.value()).epsilon(1e-9));
          CHECK(sw.received.value() == Approx(mw.received.value()).epsilon(1e-9));
          CHECK(sw.memory.total().value() == Approx(mw.memory.total().value()).epsilon(1e-12));
        }
      }
  }
}

TEST_CASE("a pipeline's plan: each stage's schedule, transfers and rings of its own",
          "[sim][plan][pipeline]") {
  const auto net = presetNetwork("tiny-gpt");
  const auto cl = presetCluster("dgx-h100");
  for (const auto schedule :
       {PipelineSchedule::kGpipe, PipelineSchedule::k1f1b, PipelineSchedule::kInterleaved}) {
    INFO(toString(schedule));
    // K 8 = dp 2 x tp 2 x pp 2; rank = d 4 + s 2 + i.
    const Case x{8,     2,        2,
                 4,     schedule, schedule == PipelineSchedule::kInterleaved ? 2 : 1,
                 false, 0,        Recompute::kNone,
                 true};
    const auto sc = scenarioOf(x);
    const Plan plan = lowerToPlan(net, sc, cl);
    const auto chunks = pipelineChunks(net, cl, sc);
    const int p = 2, v = x.v;
    REQUIRE(static_cast<int>(chunks.size()) == p * v + 1);
    auto stageOf = [&](int r) { return r / 2 % 2; };
    for (int r = 0; r < 8; ++r) {
      // A worker's compute tasks in plan order, a run of one chunk's
      // forward (or backward) of one micro-batch counted once: the
      // schedule's order (pipeline.h).
      std::vector<PipeTask> seen;
      for (const auto& t : plan.tasks) {
        if (t.kind != TaskKind::kCompute || t.worker != r)
          continue;
        const int j = static_cast<int>(std::upper_bound(chunks.begin(), chunks.end(), t.layer) -
                                       chunks.begin()) -
                      1;
        CHECK(j % p == stageOf(r));
        const PipeTask task{t.phase != Phase::kFwd || t.recompute, j / p, t.micro};
        if (seen.empty() || !(seen.back() == task))
          seen.push_back(task);
      }
      CHECK(seen == pipelineOrder(schedule, p, v, 4, stageOf(r)));
    }
    // Transfers and collectives stay inside their stage or pass between
    // two stages' same replica and tensor-parallel position.
    int p2p = 0;
    for (const auto& c : plan.collectives) {
      const auto& first = plan.tasks[c.firstTask];
      if (first.pattern != PatternKind::kPairs)
        continue;
      for (const auto& f : plan.storedFlows(first)) {
        if (c.algorithm == "p2p") {
          CHECK(stageOf(f.src) != stageOf(f.dst));
          CHECK(f.src / 4 == f.dst / 4);  // the replica
          CHECK(f.src % 2 == f.dst % 2);  // the tensor-parallel position
        } else {
          CHECK(stageOf(f.src) == stageOf(f.dst));
          if (c.buffer == BufferKind::kWeightGradients && c.firstLayer != c.lastLayer)
            CHECK(f.src % 4 == f.dst % 4);  // a data-parallel ring: ranks t pp apart
        }
      }
      p2p += c.algorithm == "p2p" && c.buffer != BufferKind::kWeightGradients;
    }
    // Every micro-batch crosses each chunk boundary forward and back.
    CHECK(p2p == 2 * 4 * (p * v - 1));
  }
}

TEST_CASE("a pipeline with transfers is slower under contention, and runs on a CPU node",
          "[sim][pipeline]") {
  const auto net = presetNetwork("tiny-gpt");
  const Case x{4, 1, 4, 8, PipelineSchedule::k1f1b, 1, false, 0, Recompute::kNone, true};
  const auto sc = scenarioOf(x);
  // One shared 1 GB/s switch port per worker: a stage receives activations
  // and sends gradients at once in the steady state.
  const auto cl = flatCluster(1e9, 2e-6);
  sim::Options off, on;
  off.contention = false;
  const auto plan = lowerToPlan(net, sc, cl);
  const auto a = sim::simulate(plan, net, cl, off), b = sim::simulate(plan, net, cl, on);
  CHECK(b.estimate.step.value() >= a.estimate.step.value());
  // The localhost CPU preset shares cores between compute and
  // communication: the plan still plays, every stage's work counted.
  const auto cpu = presetCluster("localhost-cpu");
  const auto two =
      scenarioOf({2, 1, 2, 4, PipelineSchedule::k1f1b, 1, false, 0, Recompute::kNone, true});
  const auto r = sim::simulateScenario(net, cpu, two, sim::Options{});
  const auto m = estimate(net, cpu, two);
  CHECK(r.estimate.throughput == Approx(4 * 2 / r.estimate.step.value()));
  // Shared cores: the lanes' speeds follow what runs beside them, so the
  // two engines agree less closely than on a GPU.
  CHECK(r.estimate.step.value() == Approx(m.step.value()).epsilon(0.2));
}

TEST_CASE("hierarchical, tree and auto data-parallel groups under tp, pp, ZeRO: sim equals model",
          "[sim][agreement][pipeline]") {
  using S = PipelineSchedule;
  const auto none = Recompute::kNone;
  // Nodes of 8: data-parallel strides tp x pp of 1, 2, 4 (members of a group
  // in each node) and 8 (one member per node, the rails alone).
  const Case cases[] = {
      {16, 2, 1, 1, S::k1f1b, 1, false, 0, none, true},
      {16, 1, 1, 1, S::k1f1b, 1, false, 3, none, true},
      {32, 2, 1, 1, S::k1f1b, 1, true, 2, none, true},
      {16, 2, 2, 4, S::k1f1b, 1, false, 1, none, true},
      {32, 1, 2, 4, S::kGpipe, 1, false, 0, none, true},
      {32, 2, 4, 8, S::kInterleaved, 2, false, 0, none, false},
      {24, 1, 1, 1, S::k1f1b, 1, false, 1, none, true},  // 3 nodes
  };
  for (const char* c : {"dgx-h100", "dgx-a100"}) {
    const auto cl = presetCluster(c);
    for (const char* name : {"tiny-gpt", "tiny-llama"})
      for (const auto& x : cases)
        for (auto a : {AllreduceAlgorithm::kHierarchical, AllreduceAlgorithm::kTree,
                       AllreduceAlgorithm::kAuto}) {
          if (std::string(name) == "tiny-llama" && x.tp > 2)
            continue;  // 2 key/value heads
          if (a == AllreduceAlgorithm::kTree && x.zero > 0)
            continue;  // no reduce-scatter in a tree
          const auto net = presetNetwork(name);
          auto sc = scenarioOf(x);
          sc.options.gradientSync = a;
          INFO(c << " " << name << " K " << x.k << " tp " << x.tp << " pp " << x.pp << " zero "
                 << x.zero << " " << toString(a));
          const auto model = estimate(net, cl, sc);
          sim::Options o;
          o.contention = false;
          const auto sim =
              sim::simulate(lowerToPlan(net, sc, cl, 0, PlanDetail::kFull), net, cl, o);
          CHECK(sim.estimate.step.value() == Approx(model.step.value()).epsilon(0.01));
          CHECK(sim.estimate.allreduce == model.allreduce);
          if (a == AllreduceAlgorithm::kAuto)
            CHECK_THAT(model.allreduce, Catch::StartsWith("auto: "));
          else
            CHECK(model.allreduce == toString(a));
          // Bytes per rank: hierarchical sends the flat ring's over the group.
          auto ring = sc;
          ring.options.gradientSync = AllreduceAlgorithm::kRing;
          const auto flat = estimate(net, cl, ring);
          for (int w = 0; w < x.k; w += x.tp) {
            INFO("worker " << w);
            const auto& mw = model.workers[static_cast<size_t>(w)];
            const auto& sw = sim.estimate.workers[static_cast<size_t>(w)];
            CHECK(sw.sent.value() == Approx(mw.sent.value()).epsilon(1e-9));
            CHECK(sw.received.value() == Approx(mw.received.value()).epsilon(1e-9));
            if (a == AllreduceAlgorithm::kHierarchical)
              CHECK(mw.sent.value() ==
                    Approx(flat.workers[static_cast<size_t>(w)].sent.value()).epsilon(1e-9));
          }
        }
  }
}

TEST_CASE("hierarchical groups that do not fit the nodes are refused, naming --allreduce",
          "[sim][pipeline]") {
  const auto net = presetNetwork("tiny-llama");
  const auto cl = presetCluster("dgx-h100");
  Scenario sc;
  sc.strategy = Strategy::kRing;
  sc.workers = 24;
  sc.batchPerWorker = 2;
  sc.options.pp = 3;  // tp x pp = 3 on nodes of 8
  sc.options.microbatches = 3;
  sc.options.gradientSync = AllreduceAlgorithm::kHierarchical;
  CHECK_THROWS_WITH(estimate(net, cl, sc), Catch::StartsWith("--allreduce: hierarchical needs"));
  CHECK_THROWS_WITH(lowerToPlan(net, sc, cl, 0, PlanDetail::kFull),
                    Catch::StartsWith("--allreduce: hierarchical needs"));
  // auto leaves hierarchical out there (ring or tree).
  sc.options.gradientSync = AllreduceAlgorithm::kAuto;
  CHECK_THAT(estimate(net, cl, sc).allreduce,
             Catch::StartsWith("auto: ") && !Catch::Contains("hierarchical"));
  // Without a cluster (the executor's plan) neither can be lowered.
  CHECK_THROWS_AS(lowerToPlan(net, sc, 0), UserError);
  // halving-doubling and the others stay refused with tp, pp or ZeRO, and
  // tree with ZeRO (it has no reduce-scatter).
  sc.options.gradientSync = AllreduceAlgorithm::kHalvingDoubling;
  CHECK_THROWS_WITH(estimate(net, cl, sc), Catch::StartsWith("--allreduce: with --tp, --pp or"));
  sc.options.gradientSync = AllreduceAlgorithm::kTree;
  sc.options.zero = 1;
  CHECK_THROWS_WITH(estimate(net, cl, sc), Catch::StartsWith("--allreduce: ZeRO reduce-scatters"));
}

TEST_CASE("placement tp,dp,pp: a stage's replicas side by side, sim equals model (1 %)",
          "[sim][agreement][pipeline]") {
  using S = PipelineSchedule;
  const auto none = Recompute::kNone;
  const Case cases[] = {
      {16, 1, 2, 4, S::k1f1b, 1, false, 0, none, true},
      {16, 2, 2, 4, S::kInterleaved, 2, true, 1, none, true},
      {24, 1, 3, 3, S::kGpipe, 1, false, 1, Recompute::kFull, true},
      {32, 2, 4, 8, S::k1f1b, 1, false, 0, none, false},
  };
  const auto cl = presetCluster("dgx-h100");  // nodes of 8
  for (const char* name : {"tiny-gpt", "tiny-llama"})
    for (const auto& x : cases)
      for (auto a : {AllreduceAlgorithm::kRing, AllreduceAlgorithm::kHierarchical}) {
        const auto net = presetNetwork(name);
        auto sc = scenarioOf(x);
        sc.options.placement = Placement::kTpDpPp;
        sc.options.gradientSync = a;
        INFO(name << " K " << x.k << " tp " << x.tp << " pp " << x.pp << " " << toString(a));
        const auto model = estimate(net, cl, sc);
        sim::Options o;
        o.contention = false;
        const auto sim = sim::simulate(lowerToPlan(net, sc, cl, 0, PlanDetail::kFull), net, cl, o);
        CHECK(sim.estimate.step.value() == Approx(model.step.value()).epsilon(0.01));
        CHECK(sim.estimate.pipelineBubble.value() ==
              Approx(model.pipelineBubble.value()).epsilon(0.01).margin(1e-12));
        const int dp = x.k / (x.tp * x.pp);
        for (int w = 0; w < x.k; ++w) {
          INFO("worker " << w);
          const auto& mw = model.workers[static_cast<size_t>(w)];
          const auto& sw = sim.estimate.workers[static_cast<size_t>(w)];
          CHECK(sw.compute.total().value() == Approx(mw.compute.total().value()).epsilon(0.01));
          CHECK(sw.sent.value() == Approx(mw.sent.value()).epsilon(1e-9));
          CHECK(sw.received.value() == Approx(mw.received.value()).epsilon(1e-9));
          // Worker w is on stage w / (tp dp): its stage's memory.
          const auto& same = model.workers[static_cast<size_t>(w / (x.tp * dp) * x.tp * dp)];
          CHECK(mw.memory.total().value() == same.memory.total().value());
          CHECK(sw.memory.total().value() == Approx(mw.memory.total().value()).epsilon(1e-12));
        }
      }
  // 16 H100s as dp 8 x pp 2: tp,dp,pp keeps each data-parallel group in a
  // node and sends the boundary tensors over InfiniBand; tp,pp,dp the reverse.
  const auto net = presetNetwork("tiny-gpt");
  auto sc = scenarioOf({16, 1, 2, 4, S::k1f1b, 1, false, 0, none, true});
  sc.options.placement = Placement::kTpDpPp;
  const auto outer = estimate(net, cl, sc);
  CHECK_THAT(outer.placement,
             Catch::Contains("(ranks tp,dp,pp)") &&
                 Catch::Contains("pipelines of 2 stages 8 apart over infiniband links") &&
                 Catch::Contains("data-parallel groups of 8 workers over nvswitch links"));
  sc.options.placement = Placement::kTpPpDp;
  const auto inner = estimate(net, cl, sc);
  CHECK_THAT(inner.placement,
             Catch::Contains("pipelines of 2 stages over nvswitch links") &&
                 Catch::Contains("data-parallel groups of 8 workers 2 apart over infiniband"));
  // Replica d's stage s is rank 8 s + d in one, 2 d + s in the other: the
  // same bytes, moved over other links.
  for (int d = 0; d < 8; ++d)
    for (int s = 0; s < 2; ++s)
      CHECK(outer.workers[static_cast<size_t>(8 * s + d)].sent.value() ==
            Approx(inner.workers[static_cast<size_t>(2 * d + s)].sent.value()).epsilon(1e-12));
  CHECK(outer.step != inner.step);
}

TEST_CASE("a pipeline's representative plan (one rank per stage) simulates to the full plan's",
          "[sim][pipeline][representative]") {
  // Each stage's first rank computes for the stage's dp x tp ranks; the
  // transfers, rings and syncs still name every rank. Contention on and off,
  // both placements, ring, hierarchical and tree groups: the step, bubble,
  // every worker's row and every link's bytes as the full plan's.
  using S = PipelineSchedule;
  const auto none = Recompute::kNone;
  const Case cases[] = {
      {16, 2, 2, 4, S::k1f1b, 1, false, 0, none, true},
      {24, 1, 3, 5, S::kGpipe, 1, false, 0, Recompute::kFull, false},
      {32, 2, 2, 4, S::kInterleaved, 2, true, 1, Recompute::kSelective, true},
      {16, 2, 1, 3, S::k1f1b, 1, true, 1, none, true},   // accumulation, tp
      {7, 1, 7, 7, S::k1f1b, 1, false, 0, none, false},  // one replica, a prime
      {30, 1, 5, 6, S::k1f1b, 1, false, 1, none, true},  // 6 replicas of 5 stages
  };
  const auto cl = presetCluster("dgx-a100");
  for (const char* name : {"tiny-gpt", "tiny-llama"}) {
    const auto net = presetNetwork(name);
    for (const auto& x : cases)
      for (auto placement : {Placement::kTpPpDp, Placement::kTpDpPp})
        for (auto a : {AllreduceAlgorithm::kRing, AllreduceAlgorithm::kHierarchical,
                       AllreduceAlgorithm::kTree})
          for (bool contention : {true, false}) {
            auto sc = scenarioOf(x);
            if (x.pp == 1 && placement == Placement::kTpDpPp)
              continue;  // refused with pp 1 (cli_test)
            if (a == AllreduceAlgorithm::kTree && x.zero > 0)
              continue;  // a tree has no reduce-scatter: refused
            sc.options.placement = placement;
            sc.options.gradientSync = a;
            INFO(name << " K " << x.k << " tp " << x.tp << " pp " << x.pp << " M " << x.m << " "
                      << toString(x.schedule) << " zero " << x.zero << " " << toString(placement)
                      << " " << toString(a) << " contention " << contention);
            sim::Options o;
            o.contention = contention;
            std::optional<Plan> full;
            try {
              full = lowerToPlan(net, sc, cl, 0, PlanDetail::kFull);
            } catch (const OptionError&) {
              continue;  // hierarchical groups that straddle nodes unevenly: refused
            }
            const auto rep = lowerToPlan(net, sc, cl, 0, PlanDetail::kRepresentative);
            if (x.k > x.pp)
              CHECK(rep.tasks.size() < full->tasks.size());
            else
              CHECK(rep.tasks.size() == full->tasks.size());  // one rank per stage already
            const auto f = sim::simulate(*full, net, cl, o).estimate;
            const auto r = sim::simulate(rep, net, cl, o).estimate;
            CHECK(r.step.value() == Approx(f.step.value()).epsilon(1e-12));
            CHECK(r.pipelineBubble.value() ==
                  Approx(f.pipelineBubble.value()).epsilon(1e-12).margin(1e-15));
            REQUIRE(r.workers.size() == f.workers.size());
            for (size_t w = 0; w < f.workers.size(); ++w) {
              INFO("worker " << w);
              const auto& fw = f.workers[w];
              const auto& rw = r.workers[w];
              CHECK(rw.compute.total().value() ==
                    Approx(fw.compute.total().value()).epsilon(1e-12));
              CHECK(rw.compute.update.value() ==
                    Approx(fw.compute.update.value()).epsilon(1e-12).margin(1e-15));
              CHECK(rw.communication.value() == Approx(fw.communication.value()).epsilon(1e-12));
              CHECK(rw.exposedCommunication.value() ==
                    Approx(fw.exposedCommunication.value()).epsilon(1e-12).margin(1e-15));
              CHECK(rw.sent.value() == Approx(fw.sent.value()).epsilon(1e-12));
              CHECK(rw.received.value() == Approx(fw.received.value()).epsilon(1e-12));
              CHECK(rw.memory.total().value() == fw.memory.total().value());
            }
          }
  }
}

TEST_CASE("simulateScenario plays a pipeline's representative plan and says so",
          "[sim][pipeline][representative]") {
  const auto net = presetNetwork("tiny-gpt");
  const auto cl = presetCluster("dgx-h100");
  const auto sc =
      scenarioOf({16, 2, 4, 8, PipelineSchedule::k1f1b, 1, false, 0, Recompute::kNone, true});
  const auto r = sim::simulateScenario(net, cl, sc, {});
  CHECK(r.detail ==
        "representative: one worker's compute stands for each stage's 4 (every worker of a stage "
        "computes alike), 4 stages");
  // Its plan: one rank per stage computes (4 of 16), the transfers name all.
  const auto plan = lowerToPlan(net, sc, cl, 0, PlanDetail::kRepresentative);
  std::set<int> computing;
  for (const auto& t : plan.tasks)
    if (t.kind == TaskKind::kCompute || t.kind == TaskKind::kUpdate)
      computing.insert(t.worker);
  CHECK(computing == std::set<int>{0, 2, 4, 6});
  for (int w = 0; w < 16; ++w)
    CHECK(plan.computesFor(w) == w % 8 / 2 * 2);
  CHECK(estimatePlanTasks(net, sc, 0, PlanDetail::kRepresentative) <
        estimatePlanTasks(net, sc, 0, PlanDetail::kFull) / 2);
  // A trace shows every worker: the full plan.
  sim::Options traced;
  traced.timeline = true;
  CHECK(sim::simulateScenario(net, cl, sc, traced).detail ==
        "full: a trace shows every worker's tasks");
}

// The simulator against the analytic model (contention off), against hand-
// computed timelines (contention on), and its trace.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <nlohmann/json.hpp>
#include <sstream>

#include "../model/helpers.h"
#include "../trace_checker.h"
#include "strata/model/cluster_loader.h"
#include "strata/model/error.h"
#include "strata/model/estimate.h"
#include "strata/model/limits.h"
#include "strata/model/network_loader.h"
#include "strata/model/plan.h"
#include "strata/sim/simulator.h"
#include "strata/study/trace.h"

using namespace strata;
using strata::test::flatCluster;
using strata::test::presetCluster;
using strata::test::presetNetwork;

namespace {

Scenario scenario(Strategy s, int k, int b = 128, bool overlap = false) {
  Scenario sc;
  sc.strategy = s;
  sc.workers = k;
  sc.batchPerWorker = b;
  sc.options.overlap = overlap;
  return sc;
}

sim::Result run(const Network& net, const Cluster& cl, const Scenario& sc, bool contention,
                bool timeline = false) {
  sim::Options o;
  o.contention = contention;
  o.timeline = timeline;
  return sim::simulate(lowerToPlan(net, sc), net, cl, o);
}

// Writes the trace of a simulated plan, checks it against Perfetto's import
// rules, and counts its slices per task (durations checked non-negative).
std::vector<int> traceSlicesPerTask(const Plan& plan, const Network& net, const sim::Result& r) {
  std::ostringstream os;
  writeTrace(os, plan, net, r.estimate, r.timeline);
  const auto check = test::checkTrace(os.str());
  for (const auto& p : check.problems)
    INFO(p);
  CHECK(check.ok());
  const auto j = nlohmann::json::parse(os.str());
  std::vector<int> seen(plan.tasks.size(), 0);
  for (const auto& e : j.at("traceEvents")) {
    if (e.at("ph") != "X" || e.at("cat") == "link")
      continue;
    CHECK(e.at("dur").get<double>() >= 0);
    ++seen[e.at("args").at("task").get<size_t>()];
  }
  return seen;
}

}  // namespace

TEST_CASE("with contention off the simulator reproduces the model (1 %)", "[sim][agreement]") {
  const char* networks[] = {"alexnet-owt", "alexnet", "vgg16", "resnet50", "lm-300m", "tiny-cnn"};
  const auto cluster = presetCluster("dgx-h100");
  for (const char* name : networks) {
    const auto net = presetNetwork(name);
    for (auto s : kAllStrategies) {
      for (int k : {1, 2, 3, 4, 5, 6, 7, 8, 16}) {
        for (bool overlap : {false, true}) {
          INFO(name << " " << toString(s) << " K = " << k << " overlap " << overlap);
          const auto sc = scenario(s, k, 32, overlap);
          const auto model = estimate(net, cluster, sc);
          const auto simulated = run(net, cluster, sc, false);
          CHECK(simulated.estimate.step.value() == Approx(model.step.value()).epsilon(0.01));
          CHECK(simulated.estimate.workers[0].sent.value() ==
                Approx(model.workers[0].sent.value()).epsilon(1e-9).margin(1e-3));
          CHECK(simulated.estimate.workers[k - 1].received.value() ==
                Approx(model.workers[k - 1].received.value()).epsilon(1e-9).margin(1e-3));
        }
      }
    }
  }
}

TEST_CASE("contention off agrees where compute and communication share cores (1 %)",
          "[sim][agreement][sharing]") {
  // A calibrated CPU node (strata calibrate): while a worker's transfers or
  // sums run, its compute goes at 0.62 of its speed and its communication
  // at 0.37 (the 2-core VM's figures), and a lane wakes up in 18 us. Both
  // engines slow a compute task only while communication runs beside it,
  // and communication only while compute runs beside it (the simulator
  // re-rates either when the other starts or stops): ps's per-layer jobs
  // start and end in the middle of compute tasks. The naive reducer parts
  // (alexnet-owt -6 to -15 %: its reducer's lanes are not every worker's,
  // the model's one worker stands for all); docs/simulator.md.
  auto cluster = presetCluster("localhost-cpu");
  cluster.device.overlapCompute = {{1, 1.0}, {2, 0.62}};
  cluster.device.overlapComm = {{1, 1.0}, {2, 0.37}};
  cluster.device.laneHandoff = Seconds(18.2e-6);
  // The same node behind a 1 Gbit/s link: the lanes' speeds scaled by how
  // busy the link lets the communication lane keep the cores (overlapSpeeds).
  auto slow = cluster;
  slow.device.overlapCommRate = {{2, 3.35e9}};
  slow.levels[0].link.bandwidth = BytesPerSecond(119e6);
  slow.levels[0].link.bandwidthTable.clear();
  for (const auto* cl : {&cluster, &slow})
    for (const char* name : {"tiny-cnn", "alexnet-owt", "resnet50"}) {
      const auto net = presetNetwork(name);
      for (auto s : {Strategy::kRing, Strategy::kPs}) {
        for (int b : {4, 16}) {
          INFO((cl == &slow ? "1 Gbit/s: " : "") << name << " " << toString(s) << " b = " << b);
          const auto sc = scenario(s, 2, b, true);
          const auto model = estimate(net, *cl, sc);
          const auto simulated = run(net, *cl, sc, false);
          CHECK(simulated.estimate.step.value() == Approx(model.step.value()).epsilon(0.01));
        }
      }
    }
}

TEST_CASE("contention off agrees with a duty curve for the communication lane (1 %)",
          "[sim][agreement][sharing][duty]") {
  // The calibrated node of the test above, without a measured link rate,
  // and a measured duty curve: the exchanges run at 0.97 of their speed
  // alone while the compute lane is busy a quarter of the time, 0.85 half,
  // 0.6 three quarters and 0.37 (the saturated figure) all the time. Both
  // engines run an allreduce that starts while its worker computes at the
  // curve's speed for the duty of its window (docs/cost-model.md,
  // docs/simulator.md).
  auto make = [](double linkBytesPerSecond, bool curve) {
    auto cl = presetCluster("localhost-cpu");
    cl.device.overlapCompute = {{1, 1.0}, {2, 0.62}};
    cl.device.overlapComm = {{1, 1.0}, {2, 0.37}};
    cl.device.laneHandoff = Seconds(18.2e-6);
    cl.levels[0].link.bandwidth = BytesPerSecond(linkBytesPerSecond);
    cl.levels[0].link.bandwidthTable.clear();
    if (curve)
      cl.device.overlapCommByDuty = {
          {2, {{0, 1.0}, {0.25, 0.97}, {0.5, 0.85}, {0.75, 0.6}, {1, 0.37}}}};
    return cl;
  };
  struct Case {
    const char* net;
    Strategy s;
    int b;
    double link;
    bool curveMatters;  // an allreduce straddles the end of backprop
  };
  // Ring on alexnet-owt behind a 119 MB/s and a 300 MB/s link: the last
  // buckets' allreduces outlast backprop (the curve's speed is above the
  // saturated one's average by 2-5 %). Naive on resnet50 at 3 GB/s: every
  // allreduce ends inside backprop or starts after it (d = 1 or 0, the curve
  // changes nothing): with shared lanes the naive reducer's two engines part
  // where communication is much of the step, curve or not (docs/simulator.md).
  for (const Case& c : {Case{"alexnet-owt", Strategy::kRing, 16, 119e6, true},
                        Case{"alexnet-owt", Strategy::kRing, 32, 119e6, true},
                        Case{"alexnet-owt", Strategy::kRing, 16, 300e6, true},
                        Case{"alexnet-owt", Strategy::kRing, 32, 300e6, true},
                        Case{"resnet50", Strategy::kRing, 16, 119e6, false},
                        Case{"tiny-cnn", Strategy::kRing, 32, 119e6, false},
                        Case{"resnet50", Strategy::kNaive, 16, 3e9, false},
                        Case{"resnet50", Strategy::kNaive, 32, 3e9, false},
                        Case{"tiny-cnn", Strategy::kNaive, 32, 119e6, false}}) {
    INFO(c.net << " " << toString(c.s) << " b = " << c.b << " link " << c.link << " B/s");
    const auto net = presetNetwork(c.net);
    const auto sc = scenario(c.s, 2, c.b, true);
    const auto curved = make(c.link, true);
    const auto model = estimate(net, curved, sc);
    const auto simulated = run(net, curved, sc, false);
    CHECK(simulated.estimate.step.value() == Approx(model.step.value()).epsilon(0.01));
    const double saturated = estimate(net, make(c.link, false), sc).step.value();
    if (c.curveMatters)
      CHECK(model.step.value() < saturated * 0.99);
    else
      CHECK(model.step.value() == Approx(saturated).epsilon(1e-12));
  }
}

TEST_CASE("contention off agrees on a two-level PCIe box and a 1 GbE cluster too",
          "[sim][agreement]") {
  const auto net = presetNetwork("alexnet-owt");
  for (const char* c : {"k20x8-pcie", "gige-cluster", "baidu-5x8-ib"}) {
    const auto cl = presetCluster(c);
    for (auto s : kAllStrategies)
      for (int k : {2, 3, 5, 8}) {
        INFO(c << " " << toString(s) << " K = " << k);
        const auto sc = scenario(s, k, 64, true);
        CHECK(run(net, cl, sc, false).estimate.step.value() ==
              Approx(estimate(net, cl, sc).step.value()).epsilon(0.01));
      }
  }
}

TEST_CASE("contention off agrees on the Llama presets over DGX A100 nodes (1 %)",
          "[sim][agreement][llama]") {
  // Grouped-query attention, rmsnorm and swiglu priced by both engines; 16
  // GPUs on two nodes (NVSwitch inside, one HDR lane per GPU between).
  const auto cl = presetCluster("dgx-a100");
  for (const char* name : {"tiny-llama", "llama2-7b", "llama3-8b"}) {
    const auto net = presetNetwork(name);
    for (auto s : {Strategy::kRing, Strategy::kNaive, Strategy::kOwtB})
      for (int k : {2, 16}) {
        INFO(name << " " << toString(s) << " K = " << k);
        const auto sc = scenario(s, k, 1, true);
        CHECK(run(net, cl, sc, false).estimate.step.value() ==
              Approx(estimate(net, cl, sc).step.value()).epsilon(0.01));
      }
  }
}

namespace {
// A hand-made plan of bare transfers on K workers: each entry is (src, dst,
// bytes, task it waits for or -1).
struct Send {
  int src, dst;
  double bytes;
  int after;
};
Plan transfersOnly(int k, const std::vector<Send>& sends) {
  Plan p;
  p.network = "none";
  p.scenario.workers = k;
  Collective c;
  c.algorithm = "p2p";
  p.collectives.push_back(c);
  for (const auto& s : sends) {
    Task t;
    t.kind = TaskKind::kTransfer;
    t.pattern = PatternKind::kPairs;
    t.bytes = Bytes(s.bytes);
    t.collective = 0;
    t.flowBegin = static_cast<uint32_t>(p.flows.size());
    t.flowCount = 1;
    p.flows.push_back({s.src, s.dst, 0});
    t.depBegin = static_cast<uint32_t>(p.deps.size());
    if (s.after >= 0)
      p.deps.push_back(s.after);
    t.depCount = static_cast<uint32_t>(p.deps.size()) - t.depBegin;
    p.tasks.push_back(t);
  }
  return p;
}
}  // namespace

TEST_CASE("two transfers into one receiver share its link", "[sim][contention]") {
  const auto net = presetNetwork("tiny-cnn");
  const auto cl = flatCluster(1e9, 0);  // 1 GB/s each way, no latency
  const auto plan = transfersOnly(3, {{0, 1, 1e6, -1}, {2, 1, 1e6, -1}});
  sim::Options off;
  off.contention = false;
  // The model's assumption: each alone, 1 ms.
  const auto a = sim::simulate(plan, net, cl, off);
  CHECK(a.taskEnd[0] == Approx(1e-3));
  CHECK(a.taskEnd[1] == Approx(1e-3));
  // Really: worker 1's down link carries both, 0.5 GB/s each: 2 ms.
  const auto b = sim::simulate(plan, net, cl, sim::Options{});
  CHECK(b.taskEnd[0] == Approx(2e-3));
  CHECK(b.taskEnd[1] == Approx(2e-3));
  CHECK(b.links.front().bytes.value() == Approx(2e6));
  CHECK(b.links.front().busy.value() == Approx(2e-3));
}

TEST_CASE("a transfer joining halfway slows the first one from then on", "[sim][contention]") {
  const auto net = presetNetwork("tiny-cnn");
  const auto cl = flatCluster(1e9, 0);
  // A: 0 -> 1, 1 MB. C: 2 -> 0, 0.5 MB (other links) ends at 0.5 ms. B: 2 -> 1,
  // 1 MB, after C. A alone moves 0.5 MB by 0.5 ms; then A and B share 1's
  // down link at 0.5 GB/s: A's last 0.5 MB ends at 1.5 ms; B has 0.5 MB left
  // then, alone again at 1 GB/s: ends at 2.0 ms.
  const auto plan = transfersOnly(3, {{0, 1, 1e6, -1}, {2, 0, 5e5, -1}, {2, 1, 1e6, 1}});
  const auto r = sim::simulate(plan, net, cl, sim::Options{});
  CHECK(r.taskEnd[1] == Approx(0.5e-3));
  CHECK(r.taskEnd[0] == Approx(1.5e-3));
  CHECK(r.taskStart[2] == Approx(0.5e-3));
  CHECK(r.taskEnd[2] == Approx(2.0e-3));
}

TEST_CASE("opposite transfers share a half-duplex link", "[sim][contention]") {
  const auto net = presetNetwork("tiny-cnn");
  const auto half = flatCluster(1e9, 0, 0, false);
  const auto plan = transfersOnly(2, {{0, 1, 1e6, -1}, {1, 0, 1e6, -1}});
  const auto r = sim::simulate(plan, net, half, sim::Options{});
  CHECK(r.taskEnd[0] == Approx(2e-3));
  const auto full = sim::simulate(plan, net, flatCluster(1e9, 0), sim::Options{});
  CHECK(full.taskEnd[0] == Approx(1e-3));
}

TEST_CASE("latency delays a transfer before its bytes move", "[sim]") {
  const auto net = presetNetwork("tiny-cnn");
  const auto cl = flatCluster(1e9, 5e-6);
  const auto r = sim::simulate(transfersOnly(2, {{0, 1, 1e6, -1}}), net, cl, sim::Options{});
  CHECK(r.taskEnd[0] == Approx(5e-6 + 1e-3));
}

TEST_CASE("exact timeline: one fc layer, ring, two workers", "[sim][timeline]") {
  const auto net = loadNetwork(strata::test::dataFile("one-fc.yaml"));
  // 1 TFLOP/s, 100 GB/s memory, 1 GB/s links with 10 us latency, sums at 10 GB/s.
  const auto cl = flatCluster(1e9, 1e-5, 0, true, 1e10);
  auto sc = scenario(Strategy::kRing, 2);
  sc.options.segment = Bytes(0);
  const auto plan = lowerToPlan(net, sc);
  // Per worker: fwd, bwd_weights (no bwd_data: the layer reads the input),
  // then the ring (send, sum, send), then the update.
  REQUIRE(plan.tasks.size() == 2 * 2 + 3 + 2);
  const auto r = sim::simulate(plan, net, cl, sim::Options{});
  // fwd and bwd_weights: 2 x 1e6 x 128 FLOP / 1e12 = 256 us each (compute-bound).
  // Ring of 4 MB on 2 workers: chunk 2 MB; send 10 us + 2 ms; sum 2 MB / 10 GB/s.
  // Update: 5 x 4 MB / 100 GB/s = 200 us.
  const double fwd = 2.56e-4, send = 1e-5 + 2e-3, sum = 2e-4, upd = 2e-4;
  // Tasks: fwd of worker 0 and 1, bwd_weights of worker 0 and 1, ring, updates.
  for (size_t w = 0; w < 2; ++w) {
    CHECK(r.taskStart[w] == 0.0);
    CHECK(r.taskEnd[w] == Approx(fwd));
    CHECK(r.taskEnd[2 + w] == Approx(2 * fwd));
  }
  CHECK(r.taskStart[4] == Approx(2 * fwd));
  CHECK(r.taskEnd[4] == Approx(2 * fwd + send));
  CHECK(r.taskEnd[5] == Approx(2 * fwd + send + sum));
  CHECK(r.taskEnd[6] == Approx(2 * fwd + 2 * send + sum));
  CHECK(r.taskEnd[7] == Approx(2 * fwd + 2 * send + sum + upd));
  CHECK(r.estimate.step.value() == Approx(2 * fwd + 2 * send + sum + upd));
  CHECK(r.estimate.workers[0].exposedCommunication.value() == Approx(2 * send + sum));
  CHECK(r.estimate.workers[0].sent.value() == Approx(4e6));
}

TEST_CASE("owt-b's transfers hide behind the previous round's FC compute", "[sim][owt]") {
  const auto net = presetNetwork("alexnet-owt");
  const auto cl = presetCluster("k20x8-pcie");
  const int k = 4;
  const auto sc = scenario(Strategy::kOwtB, k);
  const auto plan = lowerToPlan(net, sc);
  const auto r = sim::simulate(plan, net, cl, sim::Options{});
  // Round r's activations (a broadcast from worker r) arrive before worker 0
  // finishes round r-1's FC compute, for r = 1..K-1.
  std::vector<double> inEnd(k, -1), computeEnd(k, -1);
  for (size_t i = 0; i < plan.tasks.size(); ++i) {
    const auto& t = plan.tasks[i];
    if (t.round < 0)
      continue;
    if (t.kind == TaskKind::kTransfer &&
        plan.collectives[static_cast<size_t>(t.collective)].algorithm == "broadcast")
      inEnd[static_cast<size_t>(t.round)] = r.taskEnd[i];
    if (t.kind == TaskKind::kCompute && t.worker == 0)
      computeEnd[static_cast<size_t>(t.round)] =
          std::max(computeEnd[static_cast<size_t>(t.round)], r.taskEnd[i]);
  }
  for (int round = 1; round < k; ++round) {
    INFO("round " << round);
    CHECK(inEnd[static_cast<size_t>(round)] > 0);
    CHECK(inEnd[static_cast<size_t>(round)] <= computeEnd[static_cast<size_t>(round - 1)]);
  }
}

TEST_CASE("a straggler slows a ring by exactly its delay", "[sim][straggler]") {
  const auto net = presetNetwork("tiny-cnn");
  const auto cl = flatCluster(1e9, 1e-6);
  for (int k : {2, 3, 4, 7}) {
    INFO("K = " << k);
    const auto sc = scenario(Strategy::kRing, k);
    const auto plan = lowerToPlan(net, sc);
    const auto nominal = sim::simulate(plan, net, cl, sim::Options{});
    sim::Options slow;
    slow.slowdown.assign(static_cast<size_t>(k), 1.0);
    slow.slowdown[1] = 1.5;
    const auto late = sim::simulate(plan, net, cl, slow);
    // Worker 1 computes everything 1.5x slower: it is late by half its compute.
    const double delay = 0.5 * nominal.estimate.workers[1].compute.total().value();
    CHECK(late.estimate.step.value() - nominal.estimate.step.value() == Approx(delay));
  }
}

TEST_CASE("ps pushes gradients while backprop is still running", "[sim][ps]") {
  const auto net = presetNetwork("resnet50");
  const auto cl = presetCluster("dgx-h100");
  const auto sc = scenario(Strategy::kPs, 4, 32, true);
  const auto plan = lowerToPlan(net, sc);
  const auto r = sim::simulate(plan, net, cl, sim::Options{});
  double firstTransfer = 1e30, lastBackprop = 0;
  for (size_t i = 0; i < plan.tasks.size(); ++i) {
    const auto& t = plan.tasks[i];
    if (t.kind == TaskKind::kTransfer)
      firstTransfer = std::min(firstTransfer, r.taskStart[i]);
    if (t.kind == TaskKind::kCompute && t.phase != Phase::kFwd && t.worker == 0)
      lastBackprop = std::max(lastBackprop, r.taskEnd[i]);
  }
  CHECK(firstTransfer < lastBackprop);
  const auto& w = r.estimate.workers[0];
  CHECK(w.exposedCommunication < w.communication);
}

TEST_CASE("exact ps timeline: PullWait and priorities over three fc layers, two workers",
          "[sim][ps][timeline]") {
  // The timeline of tests/model/strategy_test.cpp's hand-computed case: every
  // phase 256 us; a job J = push 2.01 ms + sum 0.2 ms + server update 0.1 ms
  // + pull 2.01 ms = 4.32 ms, one at a time.
  const auto net = loadNetwork(strata::test::dataFile("three-fc.yaml"));
  const auto cl = flatCluster(1e9, 1e-5, 0, true, 1e10);
  auto sc = scenario(Strategy::kPs, 2, 128, true);
  sc.options.segment = Bytes(0);
  const auto plan = lowerToPlan(net, sc);
  REQUIRE(plan.iterations == kPsSteadySteps);
  REQUIRE(plan.jobs.size() == 3u * kPsSteadySteps);
  const auto r = sim::simulate(plan, net, cl, sim::Options{});
  // Step 0's jobs (keys fc3, fc2, fc1 in the order they are ready): fc3 runs
  // 1280-5600 us, then first-needed serves fc1 before fc2.
  auto jobSpan = [&](int step, int layer) {
    for (const auto& j : plan.jobs)
      if (j.iteration == step && j.firstLayer == layer)
        return std::pair{r.taskStart[j.firstTask], r.taskEnd[j.lastTask]};
    return std::pair{-1.0, -1.0};
  };
  const double us = 1e-6;
  CHECK(jobSpan(0, 2).first == Approx(1280 * us));
  CHECK(jobSpan(0, 2).second == Approx(5600 * us));
  CHECK(jobSpan(0, 0).first == Approx(5600 * us));
  CHECK(jobSpan(0, 0).second == Approx(9920 * us));
  CHECK(jobSpan(0, 1).second == Approx(14240 * us));
  // Step 1's fc1 forward waits only for fc1's pull (PullWait): it runs under
  // fc2's job.
  for (size_t i = 0; i < plan.tasks.size(); ++i) {
    const auto& t = plan.tasks[i];
    if (t.kind == TaskKind::kCompute && t.iteration == 1 && t.layer == 0 &&
        t.phase == Phase::kFwd) {
      CHECK(r.taskStart[i] == Approx(9920 * us));
      CHECK(r.taskStart[i] < jobSpan(0, 1).second);
    }
  }
  CHECK(r.estimate.firstStep.value() == Approx(14.24e-3));
  CHECK(r.estimate.step.value() == Approx(13.984e-3));
  CHECK(r.estimate.steadySteps == kPsSteadySteps);
  // Per step: three pushes and pulls of 2 MB each way.
  CHECK(r.estimate.workers[0].sent.value() == Approx(3 * 2 * 2e6));
  CHECK(r.estimate.step.value() == Approx(estimate(net, cl, sc).step.value()).epsilon(1e-9));
  sc.options.psPriority = PsPriority::kFifo;
  const auto fifo = sim::simulate(lowerToPlan(net, sc), net, cl, sim::Options{});
  CHECK(fifo.estimate.step.value() == Approx(14.24e-3));
}

TEST_CASE("ps: model and simulator agree on priorities, staleness and batch (1 %)",
          "[sim][ps][agreement]") {
  const auto net = presetNetwork("alexnet-owt");
  for (const char* c : {"k20x8-pcie", "gige-cluster"}) {
    const auto cl = presetCluster(c);
    for (auto priority : {PsPriority::kFirstNeeded, PsPriority::kFifo, PsPriority::kLastReady})
      for (int stale : {0, 1, 3})
        for (int b : {16, 128})
          for (int k : {2, 5, 8}) {
            INFO(c << " " << toString(priority) << " S = " << stale << " b = " << b
                   << " K = " << k);
            auto sc = scenario(Strategy::kPs, k, b, true);
            sc.options.psPriority = priority;
            sc.options.staleness = stale;
            // Dedicated servers on the devices left (k20x8-pcie has 8), or
            // two levels over nodes of 2 (k20x8-pcie) or 4 (gige-cluster).
            sc.options.psServers = stale == 1 && k < 8 ? 8 - k : 0;
            sc.options.psNode = stale == 3 ? (c == std::string("k20x8-pcie") ? 2 : 4) : 0;
            const auto model = estimate(net, cl, sc);
            const auto simulated = run(net, cl, sc, false).estimate;
            CHECK(simulated.step.value() == Approx(model.step.value()).epsilon(0.01));
            CHECK(simulated.firstStep.value() == Approx(model.firstStep.value()).epsilon(0.01));
          }
  }
}

TEST_CASE("ps with staleness: a straggler no longer waits for its pulls", "[sim][ps][straggler]") {
  // Worker 1 computes 1.5x slower. With S = 0 every step waits for the
  // straggler's push and then for the pull before its next forward; with
  // S >= 1 the straggler computes step after step and the pulls land behind
  // it, so the steps take the straggler's compute alone.
  const auto net = presetNetwork("alexnet-owt");
  const auto cl = presetCluster("k20x8-pcie");
  const int k = 4;
  sim::Options slow;
  slow.slowdown = {1.0, 1.5};
  auto sc = scenario(Strategy::kPs, k, 32, true);
  const auto sync = sim::simulate(lowerToPlan(net, sc), net, cl, slow).estimate;
  sc.options.staleness = 1;
  const auto plan = lowerToPlan(net, sc);
  REQUIRE(plan.iterations == kPsSteadySteps + 2);
  const auto r = sim::simulate(plan, net, cl, slow);
  const auto& stale = r.estimate;
  CHECK(stale.step < sync.step);
  CHECK(stale.step.value() == Approx(stale.workers[1].compute.total().value()).epsilon(1e-6));
  CHECK(sync.step > sync.workers[1].compute.total());
  // Step s's forward of a layer ran before step s-1's pull of it ended.
  bool ahead = false;
  for (const auto& j : plan.jobs) {
    if (j.iteration + 1 >= plan.iterations)
      continue;
    for (size_t i = 0; i < plan.tasks.size(); ++i) {
      const auto& t = plan.tasks[i];
      if (t.kind == TaskKind::kCompute && t.phase == Phase::kFwd && t.layer == j.firstLayer &&
          t.iteration == j.iteration + 1 && r.taskStart[i] < r.taskEnd[j.lastTask])
        ahead = true;
    }
  }
  CHECK(ahead);
}

TEST_CASE("ps with staleness: jitter averages out, each worker at its own pace",
          "[sim][ps][jitter]") {
  // Every compute task x (1 + u), u uniform in [-0.3, 0.3] (seed 7). With
  // S = 0 each step waits for that step's slowest worker: the period is the
  // mean over steps of the max over K = 8 workers (+5.5 % here: a step's
  // tasks average part of their noise out). With S >= 1 a worker waits only
  // for pulls S steps old, so over 40 steps the period is the slowest
  // worker's mean compute, the step without jitter to within the noise's
  // mean. At b = 128 every fc sync hides inside backprop, so the step
  // without jitter is the compute alone.
  const auto net = presetNetwork("alexnet-owt");
  const auto cl = presetCluster("k20x8-pcie");
  const int k = 8, steps = 40;
  auto sc = scenario(Strategy::kPs, k, 128, true);
  const double calm = estimate(net, cl, sc).step.value();
  sim::Options noisy;
  noisy.jitter = 0.3;
  noisy.seed = 7;
  const auto period = [&](int stale) {
    sc.options.staleness = stale;
    const auto plan = lowerToPlan(net, sc, steps);
    REQUIRE(plan.iterations == steps);
    const auto r = sim::simulate(plan, net, cl, noisy).estimate;
    CHECK(r.steadySteps == steps);
    return r.step.value();
  };
  const double sync = period(0), one = period(1), two = period(2);
  CHECK(sync > 1.04 * calm);
  CHECK(one < 0.96 * sync);
  CHECK(two <= one);
  CHECK(std::abs(one / calm - 1) < 0.01);
}

TEST_CASE("ps on dedicated servers: the closed form, the model, and a trace of the workers",
          "[sim][ps][servers]") {
  // Three 4 MB keys, K = 3 workers and N = 2 servers on one switch (1 GB/s,
  // 10 us, full duplex). Push: a worker sends N chunks of n/N (n/beta on its
  // uplink), a server receives K (K n/N / beta on its downlink): 10 us + 6 ms.
  // Sum of K chunks 2 MB x 3 / 10 GB/s = 0.6 ms; update of 500,000 weights
  // 5 x 2 MB / 100 GB/s = 0.1 ms; pull as the push. J = 12.72 ms, three a step.
  const auto net = loadNetwork(strata::test::dataFile("three-fc.yaml"));
  const auto cl = flatCluster(1e9, 1e-5, 0, true, 1e10);
  auto sc = scenario(Strategy::kPs, 3, 128, true);
  sc.options.psServers = 2;
  const auto model = estimate(net, cl, sc);
  const double job = 2 * 6.01e-3 + 0.6e-3 + 0.1e-3;
  CHECK(model.workers[0].communication.value() == Approx(3 * job).epsilon(1e-9));
  CHECK(model.workers[0].sent.value() == Approx(3 * 4e6));
  CHECK(model.workers[0].memory.optimizer.value() == 0);  // the momentum is on the servers
  const auto plan = lowerToPlan(net, sc);
  CHECK(plan.servers == 2);
  sim::Options o;
  o.contention = false;
  o.timeline = true;
  const auto r = sim::simulate(plan, net, cl, o);
  CHECK(r.estimate.step.value() == Approx(model.step.value()).epsilon(1e-9));
  CHECK(r.estimate.firstStep.value() == Approx(model.firstStep.value()).epsilon(1e-9));
  REQUIRE(r.estimate.workers.size() == 3u);
  CHECK(r.estimate.workers[2].sent.value() == Approx(3 * 4e6));
  // The trace holds the workers: every compute task once, servers' updates not at all.
  const auto seen = traceSlicesPerTask(plan, net, r);
  for (size_t i = 0; i < plan.tasks.size(); ++i) {
    const auto& t = plan.tasks[i];
    if (t.kind == TaskKind::kCompute)
      CHECK(seen[i] == 1);
    if (t.kind == TaskKind::kUpdate)
      CHECK(seen[i] == 0);
  }
  // Servers beyond the cluster's devices are refused, naming the option.
  const auto k20 = presetCluster("k20x8-pcie");
  auto tooMany = scenario(Strategy::kPs, 4, 32, true);
  tooMany.options.psServers = 5;
  CHECK_THROWS_WITH(estimate(net, k20, tooMany), Catch::Contains("--ps-servers"));
  CHECK_THROWS_WITH(sim::simulate(lowerToPlan(net, tooMany), net, k20, sim::Options{}),
                    Catch::Contains("--ps-servers"));
}

TEST_CASE("two-level ps: level 1 inside the nodes cuts the slow network's bytes by the node size",
          "[sim][ps][levels]") {
  // gige-cluster: nodes of 4 GPUs on PCIe joined by 1 Gb/s Ethernet. One
  // level: every worker's chunks cross the Ethernet; two levels: only the
  // leaders' (a quarter of the workers), each with the node's sum.
  const auto net = presetNetwork("alexnet-owt");
  const auto cl = presetCluster("gige-cluster");
  auto sc = scenario(Strategy::kPs, 16, 32, true);
  const auto one = estimate(net, cl, sc);
  sc.options.psNode = 4;
  const auto two = estimate(net, cl, sc);
  CHECK(two.step < one.step * 0.5);
  const auto simulated = run(net, cl, sc, false).estimate;
  CHECK(simulated.step.value() == Approx(two.step.value()).epsilon(0.01));
  // A member sends its whole gradient once, to its leader, per step.
  const double grads = double(net.totalParams()) * 4;
  CHECK(two.workers[1].sent.value() == Approx(grads));
  CHECK(simulated.workers[1].sent.value() == Approx(grads));
  // Leaders hold the momentum of their 1/M, members none.
  CHECK(two.workers[1].memory.optimizer.value() == 0);
  CHECK(two.workers[0].memory.optimizer.value() == Approx(grads / 4));
  // Both placements at once are refused.
  sc.options.psServers = 2;
  CHECK_THROWS_WITH(estimate(net, cl, sc), Catch::Contains("--ps-node"));
}

TEST_CASE("the trace is valid JSON with every task in it", "[sim][trace]") {
  const auto net = presetNetwork("tiny-cnn");
  const auto cl = presetCluster("k20x8-pcie");
  for (auto s : kAllStrategies) {
    INFO(toString(s));
    const auto sc = scenario(s, 3, 16, true);
    const auto plan = lowerToPlan(net, sc);
    sim::Options o;
    o.timeline = true;
    const auto r = sim::simulate(plan, net, cl, o);
    const auto seen = traceSlicesPerTask(plan, net, r);
    for (size_t i = 0; i < plan.tasks.size(); ++i) {
      const auto& t = plan.tasks[i];
      if (t.kind == TaskKind::kCompute || t.kind == TaskKind::kUpdate)
        CHECK(seen[i] == 1);  // one slice per compute task, on its worker
      if (t.kind == TaskKind::kTransfer)
        CHECK(seen[i] == int(2 * plan.flowCountOf(t)));  // send and receive per flow
      if (t.kind == TaskKind::kReduce)
        CHECK(seen[i] >= 1);
    }
  }
}

TEST_CASE("simulated traces keep every slice and flow under Perfetto's import rules",
          "[sim][trace]") {
  // Concurrent transfers (owt-b's broadcasts, ring segments on two levels of
  // links), back-to-back slices on every lane, contention on.
  const auto net = presetNetwork("alexnet-owt");
  for (const char* cluster : {"dgx-h100", "k20x8-pcie"}) {
    const auto cl = presetCluster(cluster);
    for (auto s : {Strategy::kRing, Strategy::kOwtB}) {
      INFO(cluster << " " << toString(s));
      const int k = std::string(cluster) == "dgx-h100" ? 16 : 8;
      const auto plan = lowerToPlan(net, scenario(s, k, 32, true));
      sim::Options o;
      o.timeline = true;
      const auto r = sim::simulate(plan, net, cl, o);
      std::ostringstream os;
      writeTrace(os, plan, net, r.estimate, r.timeline);
      const auto check = test::checkTrace(os.str());
      for (const auto& p : check.problems)
        INFO(p);
      CHECK(check.ok());
      // Nothing dropped: one X event per slice and per busy link interval.
      CHECK(check.slices == r.timeline.slices.size() + r.timeline.linkSlices.size());
      // One arrow per flow of every transfer that took time.
      size_t flows = 0;
      for (size_t t = 0; t < plan.tasks.size(); ++t)
        if (plan.tasks[t].kind == TaskKind::kTransfer &&
            detail::toNanoseconds(r.taskEnd[t]) > detail::toNanoseconds(r.taskStart[t]))
          flows += plan.flowCountOf(plan.tasks[t]);
      CHECK(check.flows == flows);
      // The Plan alone predicts every slice and flow event (not the links').
      Timeline noLinks = r.timeline;
      noLinks.linkSlices.clear();
      CHECK(checkTraceSize(plan, {}).events == estimateTrace(plan, noLinks, {}).events);
      CHECK(check.pids.size() == size_t(k) + 1);  // workers and links
      CHECK(*check.pids.begin() == 1);
      CHECK(check.processNames.at(1) == "worker 0");
      CHECK(check.processNames.at(k + 1) == "links");
      // owt-b's broadcast: one sender, K - 1 flows at once on its send lane.
      bool secondTrack = false;
      for (const auto& [key, name] : check.threadNames)
        secondTrack = secondTrack || name == "send 2" || name == "receive 2";
      CHECK(secondTrack == (s == Strategy::kOwtB));
      // Args exactly the plan's numbers.
      const auto j = nlohmann::json::parse(os.str());
      for (const auto& e : j.at("traceEvents")) {
        if (e.at("ph") != "X" || !e.contains("args"))
          continue;
        const auto& task = plan.tasks[e.at("args").at("task").get<size_t>()];
        if (task.kind == TaskKind::kTransfer || task.kind == TaskKind::kReduce)
          CHECK(e.at("args").at("bytes").get<double>() == task.bytes.value());
        if (task.kind == TaskKind::kCompute)
          CHECK(e.at("args").at("examples").get<double>() == task.examples);
      }
    }
  }
}

TEST_CASE("a trace of some ranks: their slices, their links, the same from either filter",
          "[sim][trace]") {
  // 16 H100s on two nodes: ranks 0-3 are on node 0.
  const auto net = presetNetwork("alexnet-owt");
  const auto cl = presetCluster("dgx-h100");
  const auto plan = lowerToPlan(net, scenario(Strategy::kRing, 16, 32, true));
  TraceOptions opt;
  opt.ranks = parseRankList("0-3", 16);
  sim::Options o;
  o.timeline = true;
  const auto all = sim::simulate(plan, net, cl, o);
  o.timelineRanks = opt.ranks;
  const auto some = sim::simulate(plan, net, cl, o);
  CHECK(some.estimate.step.value() == all.estimate.step.value());
  CHECK(some.timeline.slices.size() < all.timeline.slices.size() / 3);
  std::ostringstream fromAll, fromSome;
  writeTrace(fromAll, plan, net, all.estimate, all.timeline, opt);
  writeTrace(fromSome, plan, net, some.estimate, some.timeline, opt);
  CHECK(fromAll.str() == fromSome.str());
  const auto check = test::checkTrace(fromSome.str());
  for (const auto& p : check.problems)
    INFO(p);
  CHECK(check.ok());
  CHECK(check.pids == std::set<int64_t>{1, 2, 3, 4, 17});
  CHECK(check.otherData.at("ranks") == "0-3");
  CHECK(check.flows > 0);
  // Links: those of devices 0-3 and node 0's network lanes they use.
  std::set<std::string> links;
  for (const auto& [key, name] : check.threadNames)
    if (key.first == 17)
      links.insert(name);
  CHECK_FALSE(links.empty());
  for (const auto& name : links) {
    INFO(name);
    const bool own = name.find("of device 0 ") != std::string::npos ||
                     name.find("of device 1 ") != std::string::npos ||
                     name.find("of device 2 ") != std::string::npos ||
                     name.find("of device 3 ") != std::string::npos ||
                     name.find("of devices 0-7") != std::string::npos;
    CHECK(own);
  }
  CHECK(estimateTrace(plan, some.timeline, opt).events ==
        estimateTrace(plan, all.timeline, opt).events);

  sim::Options bad = o;
  bad.timelineRanks = {16};
  CHECK_THROWS_WITH(sim::simulate(plan, net, cl, bad),
                    "--trace-ranks: rank 16 is out of range: the step has 16 workers (ranks 0-15)");
}

TEST_CASE("a trace refuses a timeline of another plan (more ps steps) instead of misnaming it",
          "[sim][trace][ps]") {
  const auto net = presetNetwork("tiny-cnn");
  const auto cl = presetCluster("k20x8-pcie");
  const auto sc = scenario(Strategy::kPs, 2, 16, true);
  const auto six = lowerToPlan(net, sc), eight = lowerToPlan(net, sc, 8);
  sim::Options o;
  o.timeline = true;
  const auto r = sim::simulate(eight, net, cl, o);
  std::ostringstream os;
  CHECK_NOTHROW(writeTrace(os, eight, net, r.estimate, r.timeline));
  CHECK_THROWS_AS(writeTrace(os, six, net, r.estimate, r.timeline), std::logic_error);
}

TEST_CASE("same input, same output byte for byte, the seed moves the jitter", "[sim]") {
  const auto net = presetNetwork("alexnet-owt");
  const auto cl = presetCluster("k20x8-pcie");
  const auto plan = lowerToPlan(net, scenario(Strategy::kOwtC, 5, 32, true));
  auto traceOf = [&](uint64_t seed) {
    sim::Options o;
    o.timeline = true;
    o.jitter = 0.1;
    o.seed = seed;
    const auto r = sim::simulate(plan, net, cl, o);
    std::ostringstream os;
    writeTrace(os, plan, net, r.estimate, r.timeline);
    return os.str();
  };
  CHECK(traceOf(7) == traceOf(7));
  CHECK(traceOf(7) != traceOf(8));
}

TEST_CASE("transfers alone on the network are charged to their links exactly", "[sim]") {
  // Without a timeline a transfer alone on the network skips per-link
  // bookkeeping until another one starts; the links' bytes and busy time and
  // the step must equal the fully tracked run (timeline on).
  const auto net = presetNetwork("alexnet-owt");
  const auto cl = presetCluster("k20x8-pcie");
  for (auto s : kAllStrategies) {
    for (bool overlap : {false, true}) {
      INFO(toString(s) << " overlap " << overlap);
      const auto sc = scenario(s, 6, 32, overlap);
      const auto fast = run(net, cl, sc, true, false);
      const auto full = run(net, cl, sc, true, true);
      CHECK(fast.estimate.step.value() == Approx(full.estimate.step.value()).epsilon(1e-12));
      REQUIRE(fast.links.size() == full.links.size());
      // Equal utilisations may sort either way after rounding: match by name.
      for (const auto& f : fast.links) {
        INFO(f.name);
        const auto it = std::find_if(full.links.begin(), full.links.end(),
                                     [&](const auto& l) { return l.name == f.name; });
        REQUIRE(it != full.links.end());
        CHECK(f.bytes.value() == Approx(it->bytes.value()));
        CHECK(f.busy.value() == Approx(it->busy.value()));
      }
    }
  }
}

TEST_CASE("simulator and model agree on a cluster with a bandwidth table", "[sim][agreement]") {
  const auto net = presetNetwork("tiny-cnn");
  for (const char* file : {"table-cluster.yaml", "exchange-cluster.yaml"})
    for (auto s : kAllStrategies)
      for (int k : {2, 3, 5}) {
        INFO(file << ": " << toString(s) << " K = " << k);
        const auto cl = loadCluster(strata::test::dataFile(file));
        auto sc = scenario(s, k, 16, true);
        sc.options.bucket = Bytes(100e3);
        // In the exchange table's slope, and in the bandwidth table's.
        sc.options.segment = Bytes(std::string(file) == "exchange-cluster.yaml" ? 256e3 : 64e3);
        CHECK(run(net, cl, sc, false).estimate.step.value() ==
              Approx(estimate(net, cl, sc).step.value()).epsilon(0.01));
      }
}

TEST_CASE("a simulation over the event limit is refused before it starts", "[sim][limits]") {
  const auto net = presetNetwork("tiny-cnn");
  const auto cl = presetCluster("dgx-h100");
  const auto plan = lowerToPlan(net, scenario(Strategy::kPs, 8, 8));
  const double work = sim::estimatedWork(plan, cl, sim::Options{});
  // Each patterned shape's flows once, each stored flow twice: at most every
  // task and every flow twice.
  CHECK(work > double(plan.tasks.size()));
  CHECK(work <= double(plan.tasks.size()) + 2 * plan.totalFlows());
  const Limits saved = limits();
  Limits l;
  l.maxSimEvents = static_cast<int64_t>(work) - 1;
  setLimits(l);
  std::string message;
  try {
    sim::simulate(plan, net, cl, sim::Options{});
  } catch (const OptionError& e) {
    message = e.what();
  }
  setLimits(saved);
  CHECK_THAT(message, Catch::StartsWith("--workers: simulating the plan of tiny-cnn (ps, 8 "
                                        "workers: ") &&
                          Catch::Contains("over the limit of " + std::to_string(l.maxSimEvents) +
                                          "; use fewer workers or larger segments, or raise the "
                                          "limit with --max-events N"));
  // At the default limit the same plan runs, in fewer events than the bound.
  const auto r = sim::simulate(plan, net, cl, sim::Options{});
  CHECK(r.events > 0);
  CHECK(double(r.events) <= work);
}

TEST_CASE("straggler factors and jitter must be finite and sane", "[sim][errors]") {
  const auto net = presetNetwork("tiny-cnn");
  const auto cl = presetCluster("dgx-h100");
  const auto plan = lowerToPlan(net, scenario(Strategy::kRing, 2, 8));
  auto errorOf = [&](const sim::Options& o) {
    try {
      sim::simulate(plan, net, cl, o);
    } catch (const OptionError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  for (double bad : {std::nan(""), HUGE_VAL, 1e-320, 0.0, -1.0, 1e4}) {
    sim::Options o;
    o.slowdown = {1.0, bad};
    CHECK_THAT(errorOf(o),
               Catch::StartsWith("--straggler: slowdown factors must be in [0.001, 1000], got"));
  }
  sim::Options o;
  o.jitter = std::nan("");
  CHECK(errorOf(o) == "--jitter: must be in [0, 1), got nan");
}
namespace {
// flatCluster (1 GB/s full duplex, no latency, sums at 10 GB/s) whose two
// workers' lanes share their cores: each lane at half speed while both run,
// a lane wakes up 10 us after the other releases it.
Cluster halfSpeedLanes() {
  auto cl = flatCluster(1e9, 0, 0, true, 1e10);
  cl.device.overlapCompute = {{1, 1.0}, {2, 0.5}};
  cl.device.overlapComm = {{1, 1.0}, {2, 0.5}};
  cl.device.laneHandoff = Seconds(10e-6);
  return cl;
}
}  // namespace

TEST_CASE("shared lanes by hand: one ps per-layer job beside backprop",
          "[sim][agreement][sharing]") {
  // two-fc, K = 2, b = 128: every phase 256 us; a job J = push 2000 + sum
  // 200 + momentum update of 1/2 key 100 + pull 2000 = 4300 us. Step 0:
  // fwd1 fwd2 bwd_w2 bwd_d2 end at 1024; J2 is ready at 1034 (hand-off);
  // bwd_w1 runs alone 10 us, then beside J2 at half speed: its 246 us left
  // take 492, it ends at 1526 (J2 did 246 us of work); J2's 4054 left end at
  // 5580, J1 (ready at 1536) runs 5580-9880 alone: the first step 9.88 ms.
  // Step 1's fwd1 waits for J1 and its lane: 9890; its compute ends at 9890 +
  // 1024 + 10 + 492 = 11416: the period 11416 - 1526 = 9.89 ms (without
  // shared lanes and hand-offs: 9.624 ms).
  const auto net = loadNetwork(strata::test::dataFile("two-fc.yaml"));
  const auto cl = halfSpeedLanes();
  auto sc = scenario(Strategy::kPs, 2, 128, true);
  sc.options.segment = Bytes(0);
  const auto model = estimate(net, cl, sc);
  CHECK(model.firstStep.value() == Approx(9.88e-3).epsilon(1e-9));
  CHECK(model.step.value() == Approx(9.89e-3).epsilon(1e-9));
  const auto simulated = run(net, cl, sc, false).estimate;
  CHECK(simulated.firstStep.value() == Approx(9.88e-3).epsilon(1e-9));
  CHECK(simulated.step.value() == Approx(9.89e-3).epsilon(1e-9));
  // Alone: J2 1024-5324, J1 5324-9624, and the period 9624 us.
  CHECK(estimate(net, flatCluster(1e9, 0, 0, true, 1e10), sc).step.value() ==
        Approx(9.624e-3).epsilon(1e-9));
}

TEST_CASE("shared lanes by hand: owt-c's rounds, a chain of lane hand-offs",
          "[sim][agreement][sharing]") {
  // relu-two-fc, owt-c, K = 2, b = 128: per round 128 examples, each worker
  // 1/2 of fc1 and fc2 (every phase 128 us); activations in: all-to-all of
  // 64 examples (256 KB a pair, 256 us); fc2's input gathered (256 us), its
  // partial input gradients reduce-scattered (256 + 25.6 us sum), gradients
  // back the same (281.6 us). From the relu's forward F, h = 10 us:
  //   in0 10-266; in1 from 266, alone 10 us; fc1 fwd (r0) 276-532 beside in1
  //   at half speed (in1 did 128, 118 left); in1 alone to 542 (108 left);
  //   gather 542-798 beside in1 (ends 650), compute idle; fc2 fwd, bwd_w,
  //   bwd_d 808-1192; scatter 1202-1483.6; fc1 bwd_w, bwd_d 1493.6-1749.6.
  //   Round 1: fc1 fwd 1749.6, alone 10 us, then beside back0 (ready
  //   1759.6): 118 left take 236, ends 1995.6 (back0 did 118); back0 alone to
  //   2005.6, then with gather (r1) at full speed: ends 2159.2, the gather
  //   2261.6; fc2 2271.6-2655.6; scatter 2665.6-2947.2; fc1 2957.2-3213.2;
  //   back1 3223.2-3504.8; the relu's backprop (nothing) wakes at 3514.8.
  // Then the fc update, 10^6 parameters of momentum at 100 GB/s: 200 us.
  const auto net = loadNetwork(strata::test::dataFile("relu-two-fc.yaml"));
  const auto cl = halfSpeedLanes();
  auto sc = scenario(Strategy::kOwtC, 2, 128, true);
  sc.options.segment = Bytes(0);
  const double f = layerTime(net.layers[0], Phase::kFwd, 128, 1.0, cl.device, cl.device.peak[0],
                             ElementType::kFp32, Optimizer::kMomentum)
                       .value();
  const double expected = f + 3514.8e-6 + 200e-6;
  const auto model = estimate(net, cl, sc);
  CHECK(model.step.value() == Approx(expected).epsilon(1e-9));
  CHECK(model.rounds.hiddenTransfers == 1);
  CHECK(run(net, cl, sc, false).estimate.step.value() == Approx(expected).epsilon(1e-9));
  // Alone, the flow shop: in1 hides; round 0's compute and inner exchanges
  // 256-1561.6, back0 to 1843.2; round 1 1561.6-2867.2, back1 to 3148.8.
  CHECK(estimate(net, flatCluster(1e9, 0, 0, true, 1e10), sc).step.value() ==
        Approx(f + 3148.8e-6 + 200e-6).epsilon(1e-9));
}

TEST_CASE("contention off agrees on owt's rounds and ps's jobs where lanes share cores (1 %)",
          "[sim][agreement][sharing]") {
  // A 4-core node of the calibrated kind: each lane slower while both run
  // (the slower the more workers share the node) and an 18 us hand-off. The
  // owt rounds are a chain of hand-offs (compute -> exchange -> compute) with
  // the next round's activations and the last round's gradients running
  // beside the compute; ps's per-layer jobs start and end in the middle of
  // compute tasks. Both engines are fluid both ways (playLanes; the
  // simulator re-rates a transfer, sum or server update when its workers'
  // compute starts or stops).
  auto cl = presetCluster("localhost-cpu");
  cl.levels[0].group = 4;
  cl.device.overlapCompute = {{1, 1.0}, {2, 0.62}, {3, 0.55}, {4, 0.5}};
  cl.device.overlapComm = {{1, 1.0}, {2, 0.37}, {3, 0.33}, {4, 0.3}};
  cl.device.laneHandoff = Seconds(18.2e-6);
  for (const char* name : {"alexnet-owt", "tiny-cnn"})
    for (auto s : {Strategy::kOwtA, Strategy::kOwtB, Strategy::kOwtC, Strategy::kPs})
      for (int k : {2, 3, 4})
        for (int b : {4, 16}) {
          INFO(name << " " << toString(s) << " K = " << k << " b = " << b);
          const auto net = presetNetwork(name);
          const auto sc = scenario(s, k, b, true);
          const auto model = estimate(net, cl, sc);
          const auto simulated = run(net, cl, sc, false);
          CHECK(simulated.estimate.step.value() == Approx(model.step.value()).epsilon(0.01));
          // Where they share cores the lanes slow each other: dearer than alone.
          auto alone = cl;
          alone.device.overlapCompute.clear();
          alone.device.overlapComm.clear();
          alone.device.laneHandoff = Seconds(0);
          if (k > 1)
            CHECK(model.step > estimate(net, alone, sc).step);
        }
}

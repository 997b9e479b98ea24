// Pipeline parallelism and gradient accumulation in the closed form
// (types/src/pipeline.cpp, cost/src/pipeline.cpp): the schedules' orders by
// hand, what they keep in flight against their closed forms (1F1B's
// min(P - s, M), GPipe's M, the interleaved schedule's 1 + (P - 1) / (P V)),
// the bubble against (P - 1)(tf + tb) / V, the balanced split, memory per
// stage, and the options' mistakes.
#include "strata/model/pipeline.h"

#include <catch2/catch.hpp>
#include <set>

#include "helpers.h"
#include "strata/model/error.h"
#include "strata/model/estimate.h"
#include "strata/model/plan.h"
#include "strata/model/search.h"

using namespace strata;
using strata::test::flatCluster;
using strata::test::presetNetwork;

namespace {

Network loadText(const std::string& stem, const std::string& text) {
  return test::loadNetworkText("strata-pipeline", stem, text);
}

// A chain: a small first fc (it reads the network input, so it has no
// bwd_data), then `n` equal fcs of width w.
Network chain(int n, int w) {
  const std::string name = "chain" + std::to_string(n) + "x" + std::to_string(w);
  std::string text = "name: " + name + "\ninput: {channels: " + std::to_string(w) +
                     ", height: 1, width: 1}\nlayers:\n";
  for (int i = 0; i < n; ++i)
    text +=
        "  - {name: fc" + std::to_string(i) + ", kind: fc, outputs: " + std::to_string(w) + "}\n";
  return loadText(name, text);
}

Scenario pipeScenario(int k, int b, int pp, int m, PipelineSchedule schedule, int v = 1) {
  Scenario sc;
  sc.strategy = Strategy::kRing;
  sc.workers = k;
  sc.batchPerWorker = b;
  sc.options.segment = Bytes(0);
  sc.options.pp = pp;
  sc.options.microbatches = m;
  sc.options.schedule = schedule;
  sc.options.virtualStages = v;
  return sc;
}

// A cluster whose transfers take no time: the schedule alone.
Cluster freeLinks() {
  return flatCluster(1e300, 0.0);
}

std::string errorOf(const Network& n, const Scenario& sc) {
  return test::scenarioError(n, sc);
}

std::vector<PipeTask> F(std::initializer_list<std::pair<int, int>> chunkMicro) {
  std::vector<PipeTask> out;
  for (auto [c, m] : chunkMicro)
    out.push_back({false, c, m});
  return out;
}

}  // namespace

TEST_CASE("the schedules' orders, by hand", "[pipeline]") {
  using P = PipeTask;
  // 1f1b, P = 4, M = 6, stage 1: 2 warm-up forwards, then F and B in turn.
  CHECK(pipelineOrder(PipelineSchedule::k1f1b, 4, 1, 6, 1) == std::vector<P>{{false, 0, 0},
                                                                             {false, 0, 1},
                                                                             {false, 0, 2},
                                                                             {true, 0, 0},
                                                                             {false, 0, 3},
                                                                             {true, 0, 1},
                                                                             {false, 0, 4},
                                                                             {true, 0, 2},
                                                                             {false, 0, 5},
                                                                             {true, 0, 3},
                                                                             {true, 0, 4},
                                                                             {true, 0, 5}});
  // The last stage runs each backward right after its forward.
  CHECK(pipelineOrder(PipelineSchedule::k1f1b, 3, 1, 2, 2) ==
        std::vector<P>{{false, 0, 0}, {true, 0, 0}, {false, 0, 1}, {true, 0, 1}});
  // gpipe: every forward, then the backwards last first.
  CHECK(pipelineOrder(PipelineSchedule::kGpipe, 3, 1, 3, 0) ==
        std::vector<P>{
            {false, 0, 0}, {false, 0, 1}, {false, 0, 2}, {true, 0, 2}, {true, 0, 1}, {true, 0, 0}});
  // interleaved, P = 2, V = 2, M = 4, stage 0: (2 - 0 - 1) 2 + (2 - 1) 2 = 4
  // warm-up forwards (micro-batches 0, 1 through chunk 0, then chunk 1),
  // then F and B in turn, backwards through chunk 1 first.
  CHECK(pipelineOrder(PipelineSchedule::kInterleaved, 2, 2, 4, 0) == std::vector<P>{{false, 0, 0},
                                                                                    {false, 0, 1},
                                                                                    {false, 1, 0},
                                                                                    {false, 1, 1},
                                                                                    {false, 0, 2},
                                                                                    {true, 1, 0},
                                                                                    {false, 0, 3},
                                                                                    {true, 1, 1},
                                                                                    {false, 1, 2},
                                                                                    {true, 0, 0},
                                                                                    {false, 1, 3},
                                                                                    {true, 0, 1},
                                                                                    {true, 1, 2},
                                                                                    {true, 1, 3},
                                                                                    {true, 0, 2},
                                                                                    {true, 0, 3}});
  CHECK(F({{0, 0}}).size() == 1);
}

TEST_CASE("every schedule runs each forward and backward once, the backward after the forward",
          "[pipeline]") {
  for (auto schedule :
       {PipelineSchedule::kGpipe, PipelineSchedule::k1f1b, PipelineSchedule::kInterleaved})
    for (int p = 1; p <= 5; ++p)
      for (int v : {1, 2, 3})
        for (int m = 1; m <= 12; ++m) {
          const int vv = schedule == PipelineSchedule::kInterleaved ? v : 1;
          if (schedule == PipelineSchedule::kInterleaved && m % p != 0)
            continue;
          for (int s = 0; s < p; ++s) {
            const auto order = pipelineOrder(schedule, p, vv, m, s);
            INFO("schedule " << toString(schedule) << " P " << p << " V " << vv << " M " << m
                             << " stage " << s);
            REQUIRE(order.size() == size_t(2 * m * vv));
            std::vector<int> seen(size_t(2 * m * vv), 0);
            for (size_t i = 0; i < order.size(); ++i) {
              const auto& t = order[i];
              REQUIRE(t.chunk >= 0);
              REQUIRE(t.chunk < vv);
              REQUIRE(t.micro >= 0);
              REQUIRE(t.micro < m);
              ++seen[size_t((t.backward ? m * vv : 0) + t.chunk * m + t.micro)];
              if (t.backward) {
                const auto fwd =
                    std::find(order.begin(), order.end(), PipeTask{false, t.chunk, t.micro});
                REQUIRE(fwd - order.begin() < static_cast<long>(i));
              }
            }
            for (int x : seen)
              REQUIRE(x == 1);
          }
        }
}

TEST_CASE("what each schedule keeps in flight: its closed forms", "[pipeline]") {
  for (int p = 1; p <= 6; ++p)
    for (int m = 1; m <= 10; ++m)
      for (int s = 0; s < p; ++s) {
        INFO("P " << p << " M " << m << " stage " << s);
        // 1F1B: min(P - s, M) micro-batches (Narayanan et al. 2021, 2.2.1).
        CHECK(peakInFlight(pipelineOrder(PipelineSchedule::k1f1b, p, 1, m, s), {1.0}) ==
              std::min(p - s, m));
        // GPipe: all M.
        CHECK(peakInFlight(pipelineOrder(PipelineSchedule::kGpipe, p, 1, m, s), {1.0}) == m);
      }
  // Interleaved, stage 0, M > P: (P - 1) 2 + (V - 1) P + 1 chunk passes, each
  // holding 1 / V of what a 1F1B stage's micro-batch holds: P (1 + (P - 1) /
  // (P V)) micro-batches (Korthikanti et al. 2023, section 4.2.3).
  for (int p : {2, 4, 8})
    for (int v : {2, 3, 4}) {
      const int m = 4 * p;
      const double perChunk = 1.0 / v;
      const double held = peakInFlight(pipelineOrder(PipelineSchedule::kInterleaved, p, v, m, 0),
                                       std::vector<double>(size_t(v), perChunk));
      CHECK(held == Approx(p * (1.0 + double(p - 1) / (p * v))));
    }
}

TEST_CASE("a pipeline cuts only where one tensor crosses, into balanced chunks", "[pipeline]") {
  const auto gpt = presetNetwork("tiny-gpt");
  const auto cuts = pipelineCutPoints(gpt);
  // Inside a transformer block the residual stream and the branch cross
  // together; between the blocks and around ln2 (after add1) one tensor does.
  for (int c : cuts) {
    INFO("cut before " << gpt.layers[size_t(c)].name);
    for (size_t j = size_t(c); j < gpt.layers.size(); ++j)
      for (int in : gpt.layers[j].inputs)
        CHECK((in < 0 || in >= c - 1));
  }
  CHECK(std::find(cuts.begin(), cuts.end(), gpt.find("h.1.ln1")) != cuts.end());
  CHECK(std::find(cuts.begin(), cuts.end(), gpt.find("h.1.attn")) == cuts.end());
  CHECK(pipelineObstacle(gpt, int(cuts.size()) + 1).empty());
  CHECK_THAT(pipelineObstacle(gpt, int(cuts.size()) + 2),
             Catch::Contains("can be cut into at most"));

  const auto c4 = chain(5, 8);
  CHECK(balancedChunks(c4, 2, {1, 1, 1, 1, 4}) == std::vector<int>{0, 4, 5});
  CHECK(balancedChunks(c4, 2, {4, 1, 1, 1, 1}) == std::vector<int>{0, 1, 5});
  CHECK(balancedChunks(c4, 3, {1, 1, 1, 1, 1}) == std::vector<int>{0, 2, 4, 5});
  CHECK(balancedChunks(c4, 5, {9, 0, 0, 0, 0}) == std::vector<int>{0, 1, 2, 3, 4, 5});
}

TEST_CASE("a cut the user names (--stage-starts): layers or blocks, at legal places only",
          "[pipeline]") {
  const auto gpt = presetNetwork("tiny-gpt");
  const int n = int(gpt.layers.size());
  // A block's name is its first layer; a layer's name is itself.
  CHECK(chunkStartsByName(gpt, 3, {"h.1", "ln_f"}) ==
        std::vector<int>{0, gpt.find("h.1.ln1"), gpt.find("ln_f"), n});
  CHECK(chunkStartsByName(gpt, 2, {"h.2.ln2"}) == std::vector<int>{0, gpt.find("h.2.ln2"), n});
  auto refused = [&](int chunks, std::vector<std::string> names, const char* why) {
    INFO(chunks << " chunks");
    CHECK_THROWS_MATCHES(chunkStartsByName(gpt, chunks, names), OptionError,
                         Catch::Matchers::Message(std::string("--stage-starts: ") + why));
  };
  refused(3, {"h.1"},
          "gives 1 start for 3 chunks; give the first layer of each chunk after the first: 2 "
          "names");
  refused(2, {"h.9"},
          "'h.9' is no layer or block of network 'tiny-gpt' (strata describe tiny-gpt lists "
          "them)");
  refused(3, {"h.2", "h.1"},
          "'h.1' (layer 1) does not come after the chunk before it starts (layer 11): give the "
          "starts in the network's order, each chunk one layer or more");
  refused(2, {"wte"},
          "'wte' (layer 0) does not come after the chunk before it starts (layer 0): give the "
          "starts in the network's order, each chunk one layer or more");
  refused(2, {"h.1.attn"},
          "network 'tiny-gpt' cannot be cut before 'h.1.attn' (more than one tensor crosses "
          "there); the nearest places it can: h.1.ln1, h.1.ln2");
  // The model and the plan cut there, and say so.
  auto sc = pipeScenario(4, 2, 2, 4, PipelineSchedule::k1f1b);
  sc.options.stageStarts = {"h.2"};
  const auto cl = test::presetCluster("dgx-h100");
  CHECK(pipelineChunks(gpt, cl, sc) == std::vector<int>{0, gpt.find("h.2.ln1"), n});
  CHECK_THAT(estimate(gpt, cl, sc).pipeline,
             Catch::Contains("2 stages (wte..h.1.add2; h.2.ln1..loss)"));
  const Plan plan = lowerToPlan(gpt, sc, cl);
  for (const auto& t : plan.tasks)
    if (t.kind == TaskKind::kCompute)
      CHECK((t.layer < gpt.find("h.2.ln1")) == (t.worker % 2 == 0));
  // Only with a pipeline, and not in search (it balances every layout).
  sc.options.pp = 1;
  CHECK_THROWS_WITH(estimate(gpt, cl, sc), Catch::Contains("--stage-starts: applies with --pp 2"));
}

TEST_CASE("the bubble comes out of the schedule: (P - 1)(tf + tb) / V with free transfers",
          "[pipeline]") {
  const double tf = 1.0, tb = 2.0;
  for (auto schedule :
       {PipelineSchedule::kGpipe, PipelineSchedule::k1f1b, PipelineSchedule::kInterleaved})
    for (int p = 1; p <= 6; ++p)
      for (int v : {1, 2, 3})
        for (int m = 1; m <= 16; ++m) {
          const int vv = schedule == PipelineSchedule::kInterleaved ? v : 1;
          if (schedule == PipelineSchedule::kInterleaved && (m % p != 0 || v == 1))
            continue;
          INFO(toString(schedule) << " P " << p << " V " << vv << " M " << m);
          const size_t q = size_t(p * vv);
          // Each chunk 1 / V of a stage's tf + tb.
          const auto play = playPipeline(
              schedule, p, vv, m, std::vector<double>(q, tf / vv), std::vector<double>(q, tb / vv),
              std::vector<double>(q - 1, 0.0), std::vector<double>(q - 1, 0.0));
          // Narayanan et al. 2021, section 2.2: (P - 1)(tf + tb) / V, the
          // step (M + (P - 1) / V)(tf + tb).
          CHECK(play.bubble() == Approx((p - 1) * (tf + tb) / vv));
          CHECK(play.span == Approx((m + double(p - 1) / vv) * (tf + tb)));
        }
  // Transfers of d each way: GPipe streams, paying 2 (P - 1) d once in its
  // fill and drain. 1F1B holds at most P micro-batches on stage 0, each
  // round trip P (tf + tb) + 2 (P - 1) d: a micro-batch every (tf + tb) +
  // 2 (P - 1) d / P at most, the transfers paid again every cycle.
  const std::vector<double> t4f(4, tf), t4b(4, tb), d3(3, 0.25);
  const auto gpipe = playPipeline(PipelineSchedule::kGpipe, 4, 1, 8, t4f, t4b, d3, d3);
  CHECK(gpipe.span == Approx((8 + 3) * (tf + tb) + 2 * 3 * 0.25));
  const auto f1b = playPipeline(PipelineSchedule::k1f1b, 4, 1, 8, t4f, t4b, d3, d3);
  CHECK(f1b.span > gpipe.span);
  CHECK(f1b.span <= Approx((8 + 3) * (tf + tb + 2 * 3 * 0.25 / 4)));
  // One stage twice as slow: a single micro-batch passes every stage once.
  const auto slow =
      playPipeline(PipelineSchedule::k1f1b, 3, 1, 1, {1, 2, 1}, {2, 4, 2}, {0, 0}, {0, 0});
  CHECK(slow.span == 12);
  CHECK(slow.bubble() == 6);
}

TEST_CASE("a step's bubble is its schedule's: one micro-batch waits for every other stage",
          "[pipeline]") {
  // 17 fcs of 1024 features on a device of 1 TFLOP/s, transfers free, K =
  // P (one replica: no gradient sync). With one micro-batch the bubble is
  // the other stages' forwards and backwards.
  const auto net = chain(17, 1024);
  const auto cluster = freeLinks();
  for (auto schedule : {PipelineSchedule::kGpipe, PipelineSchedule::k1f1b})
    for (int p : {2, 3, 4}) {
      INFO(toString(schedule) << " P " << p);
      const auto est = estimate(net, cluster, pipeScenario(p, 8, p, 1, schedule));
      double sum = 0, most = 0;
      for (int s = 0; s < p; ++s) {
        const auto& c = est.workers[size_t(s)].compute;
        const double passes = (c.fwd + c.bwdData + c.bwdWeights).value();
        sum += passes;
        most = std::max(most, passes);
      }
      CHECK(est.pipelineBubble.value() == Approx(sum - most).epsilon(1e-9));
      // The step: every stage's passes, then the first stage's update (the
      // last to finish its backward).
      CHECK(est.step.value() == Approx(sum + est.workers[0].compute.update.value()).epsilon(1e-9));
      CHECK_THAT(est.pipeline, Catch::Contains(std::to_string(p) + " stages"));
    }
}

TEST_CASE("gradient accumulation: M micro-batches of forward and backward, one update",
          "[pipeline]") {
  const auto net = chain(5, 256);
  const auto cluster = freeLinks();
  const auto one = estimate(net, cluster, pipeScenario(1, 16, 1, 1, PipelineSchedule::k1f1b));
  for (int m : {1, 2, 5}) {
    const auto acc = estimate(net, cluster, pipeScenario(1, 16, 1, m, PipelineSchedule::k1f1b));
    const auto& c = one.workers[0].compute;
    CHECK(acc.step.value() ==
          Approx(m * (c.fwd + c.bwdData + c.bwdWeights).value() + c.update.value()));
    CHECK(acc.throughput == Approx(m * 16 / acc.step.value()));
  }
}

TEST_CASE("each stage holds its layers' weights and its schedule's activations", "[pipeline]") {
  const auto net = presetNetwork("tiny-gpt");
  const auto cluster = freeLinks();
  const int p = 2, m = 6;
  const auto whole =
      estimateMemory(net, cluster, pipeScenario(1, 4, 1, 1, PipelineSchedule::k1f1b), 0);
  const auto s1f1b = pipeScenario(p, 4, p, m, PipelineSchedule::k1f1b);
  const auto gpipe = pipeScenario(p, 4, p, m, PipelineSchedule::kGpipe);
  double weights = 0;
  for (int s = 0; s < p; ++s) {
    const auto a = estimateMemory(net, cluster, s1f1b, s);
    const auto g = estimateMemory(net, cluster, gpipe, s);
    weights += a.weights.value();
    // 1F1B holds min(P - s, M) micro-batches, GPipe all M.
    CHECK(a.activations.value() * m == Approx(g.activations.value() * std::min(p - s, m)));
  }
  // The tied lm_head's stage keeps a copy of the token table (512 x 64).
  CHECK(weights == Approx(whole.weights.value() + 512 * 64 * 4));
}

TEST_CASE("the pipeline options' mistakes are refused, naming the option", "[pipeline]") {
  const auto gpt = presetNetwork("tiny-gpt");
  auto sc = pipeScenario(6, 4, 4, 8, PipelineSchedule::k1f1b);
  CHECK_THAT(errorOf(gpt, sc), Catch::Contains("--pp") && Catch::Contains("multiple of tp x pp"));
  sc.workers = 8;
  CHECK(errorOf(gpt, sc).empty());
  sc.strategy = Strategy::kPs;
  CHECK_THAT(errorOf(gpt, sc), Catch::Contains("--pp") && Catch::Contains("ring only"));
  sc.strategy = Strategy::kRing;
  sc.options.zero = 2;
  CHECK_THAT(errorOf(gpt, sc), Catch::Contains("--zero") && Catch::Contains("0 or 1"));
  sc.options.zero = 1;
  CHECK(errorOf(gpt, sc).empty());
  sc.options.schedule = PipelineSchedule::kInterleaved;
  CHECK_THAT(errorOf(gpt, sc), Catch::Contains("--virtual-stages"));
  sc.options.virtualStages = 2;
  CHECK(errorOf(gpt, sc).empty());
  sc.options.microbatches = 6;
  CHECK_THAT(errorOf(gpt, sc), Catch::Contains("--microbatches") && Catch::Contains("multiple"));
  sc.options.microbatches = 8;
  sc.options.virtualStages = 64;
  CHECK_THAT(errorOf(gpt, sc), Catch::Contains("--virtual-stages") && Catch::Contains("at most"));
  auto one = pipeScenario(1, 4, 1, 1, PipelineSchedule::kGpipe);
  CHECK_THAT(errorOf(gpt, one), Catch::Contains("--schedule"));
  one.options.schedule = PipelineSchedule::k1f1b;
  one.options.pp = 0;
  CHECK_THAT(errorOf(gpt, one), Catch::Contains("--pp"));
  one.options.pp = 1;
  one.options.microbatches = 0;
  CHECK_THAT(errorOf(gpt, one), Catch::Contains("--microbatches"));
}

TEST_CASE("search prices every layout of K workers and one global batch, the fastest first",
          "[pipeline][search]") {
  const auto net = presetNetwork("tiny-gpt");
  const auto cluster = test::presetCluster("dgx-h100");
  SearchSpace space;
  space.workers = 8;
  space.globalBatch = 16;
  int calls = 0;
  const auto all = searchLayouts(net, cluster, space, [&](int done, int total) {
    CHECK(done <= total);
    ++calls;
  });
  CHECK(calls >= 1);
  REQUIRE(all.enumerated == static_cast<int>(all.rows.size()));
  REQUIRE(all.fitting >= 2);
  std::set<std::string> seen;
  for (size_t i = 0; i < all.rows.size(); ++i) {
    const auto& r = all.rows[i];
    const auto& o = r.scenario.options;
    INFO(describeLayout(r.scenario));
    CHECK(dataParallelSize(r.scenario) * o.tp * o.pp == 8);
    CHECK(dataParallelSize(r.scenario) * o.microbatches * r.scenario.batchPerWorker == 16);
    CHECK(seen.insert(describeLayout(r.scenario)).second);
    // Each row is the closed form's estimate of its layout.
    const auto again = estimate(net, cluster, r.scenario);
    CHECK(r.estimate.step.value() == again.step.value());
    CHECK(r.fits == again.fitsInMemory);
    if (i > 0 && r.fits)
      CHECK(all.rows[i - 1].estimate.step <= r.estimate.step);
  }
  // Every dimension appears: tensor, pipeline and data parallelism, the
  // interleaved schedule, ZeRO and recomputation.
  auto any = [&](auto pred) {
    return std::any_of(all.rows.begin(), all.rows.end(),
                       [&](const SearchRow& r) { return pred(r.scenario.options); });
  };
  CHECK(any([](const StrategyOptions& o) { return o.tp == 4 && o.sequenceParallel; }));
  CHECK(any([](const StrategyOptions& o) { return o.pp == 8; }));
  CHECK(any([](const StrategyOptions& o) {
    return o.schedule == PipelineSchedule::kInterleaved && o.virtualStages == 2;
  }));
  CHECK(any([](const StrategyOptions& o) { return o.zero == 3 && o.pp == 1; }));
  CHECK(!any([](const StrategyOptions& o) { return o.zero >= 2 && o.pp > 1; }));
  CHECK(any([](const StrategyOptions& o) { return o.recompute == Recompute::kFull; }));
  CHECK_THAT(all.why, Catch::Contains(describeLayout(all.rows[0].scenario) + " beats " +
                                      describeLayout(all.rows[1].scenario)));

  // A fixed dimension takes only its value, and the best of the whole
  // space is at least as fast as the best with tp fixed at 2.
  space.tp = 2;
  space.pp = 2;
  const auto fixed = searchLayouts(net, cluster, space);
  REQUIRE(!fixed.rows.empty());
  for (const auto& r : fixed.rows) {
    CHECK(r.scenario.options.tp == 2);
    CHECK(r.scenario.options.pp == 2);
  }
  CHECK(all.rows[0].estimate.step <= fixed.rows[0].estimate.step);

  // No layout: a global batch the replicas cannot share.
  SearchSpace odd;
  odd.workers = 8;
  odd.globalBatch = 3;
  odd.tp = 1;
  odd.pp = 1;
  CHECK_THROWS_WITH(searchLayouts(net, cluster, odd), Catch::Contains("--global-batch"));
}

TEST_CASE("search with --allreduce: hierarchical skips layouts whose groups do not fit the nodes",
          "[pipeline][search]") {
  const auto net = presetNetwork("tiny-gpt");
  const auto cluster = test::presetCluster("dgx-h100");  // nodes of 8
  SearchSpace space;
  space.workers = 48;
  space.globalBatch = 48;
  space.base.gradientSync = AllreduceAlgorithm::kHierarchical;
  const auto hier = searchLayouts(net, cluster, space);
  space.base.gradientSync = AllreduceAlgorithm::kRing;
  const auto ring = searchLayouts(net, cluster, space);
  // Every hierarchical layout's tp x pp divides 8 or is a multiple of it;
  // the ring also runs pp 3 (tp x pp 3, 6, 12), which splits groups.
  bool ringHasThrees = false;
  for (const auto& r : ring.rows)
    ringHasThrees |= r.scenario.options.pp % 3 == 0 && dataParallelSize(r.scenario) > 1 &&
                     (r.scenario.options.tp * r.scenario.options.pp) % 8 != 0;
  CHECK(ringHasThrees);
  REQUIRE(!hier.rows.empty());
  CHECK(hier.enumerated < ring.enumerated);
  for (const auto& r : hier.rows) {
    const int s = r.scenario.options.tp * r.scenario.options.pp;
    INFO(describeLayout(r.scenario));
    CHECK((dataParallelSize(r.scenario) == 1 || s % 8 == 0 || 8 % s == 0));
    CHECK(r.estimate.allreduce == "hierarchical");
  }
  // K not whole nodes: one error for the search.
  space.base.gradientSync = AllreduceAlgorithm::kHierarchical;
  space.workers = 12;
  space.globalBatch = 12;
  CHECK_THROWS_WITH(searchLayouts(net, cluster, space),
                    Catch::StartsWith("--workers: the hierarchical allreduce needs whole nodes"));
  // halving-doubling and the others would leave the tp, pp and ZeRO layouts
  // out: refused.
  space.base.gradientSync = AllreduceAlgorithm::kHalvingDoubling;
  CHECK_THROWS_WITH(searchLayouts(net, cluster, space), Catch::StartsWith("--allreduce: search"));
}

TEST_CASE("RankLayout: both placements place every (replica, stage, lane) on one rank",
          "[pipeline][placement]") {
  for (auto order : {Placement::kTpPpDp, Placement::kTpDpPp})
    for (int tp : {1, 2, 3})
      for (int pp : {1, 2, 5})
        for (int dp : {1, 2, 3, 4}) {
          const RankLayout lay{tp, pp, dp, order};
          INFO(toString(order) << " tp " << tp << " pp " << pp << " dp " << dp);
          std::vector<int> seen(static_cast<size_t>(tp * pp * dp), 0);
          for (int d = 0; d < dp; ++d)
            for (int s = 0; s < pp; ++s)
              for (int i = 0; i < tp; ++i) {
                const int r = lay.rank(d, s, i);
                // The closed forms of strategy.h's comment.
                CHECK(r == (order == Placement::kTpPpDp ? (d * pp + s) * tp + i
                                                        : (s * dp + d) * tp + i));
                REQUIRE(r >= 0);
                REQUIRE(r < tp * pp * dp);
                ++seen[static_cast<size_t>(r)];
                CHECK(lay.stage(r) == s);
                CHECK(lay.replica(r) == d);
                CHECK(r % tp == i);
                // The next stage is stageDistance on; the data-parallel
                // group is the ring of span, stride that holds r.
                if (s + 1 < pp)
                  CHECK(lay.rank(d, s + 1, i) == r + lay.stageDistance());
                if (d + 1 < dp)
                  CHECK(lay.rank(d + 1, s, i) == r + lay.dpStride());
                CHECK(r / lay.dpSpan() == lay.rank(0, s, i) / lay.dpSpan());
              }
          for (int n : seen)
            CHECK(n == 1);
        }
  // tp,pp,dp stays the default; a file or flag names the other.
  CHECK(StrategyOptions{}.placement == Placement::kTpPpDp);
  CHECK(parsePlacement("tp,dp,pp", "--placement") == Placement::kTpDpPp);
  CHECK_THROWS_WITH(parsePlacement("dp,tp,pp", "--placement"),
                    Catch::StartsWith("--placement: unknown placement 'dp,tp,pp'"));
  // Without a pipeline the order means nothing: refused.
  const auto net = presetNetwork("tiny-gpt");
  Scenario sc;
  sc.strategy = Strategy::kRing;
  sc.workers = 4;
  sc.batchPerWorker = 2;
  sc.options.placement = Placement::kTpDpPp;
  CHECK_THROWS_WITH(checkScenario(net, sc),
                    Catch::StartsWith("--placement: applies with --pp 2 or more only"));
  sc.options.pp = 2;
  CHECK_NOTHROW(checkScenario(net, sc));
}

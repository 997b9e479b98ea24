// Unit tests of the report library (reports/): the what-if transforms against
// closed forms, the SVG inlining, the validate-JSON reader and the analysis
// (verdicts, strong scaling) on the tiny golden configs.
#include "strata/reports/report.h"

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <tuple>
#include <vector>

#include "../../reports/src/gnuplot.h"
#include "strata/model/cluster_loader.h"
#include "strata/model/error.h"
#include "strata/model/estimate.h"
#include "strata/model/network_loader.h"
#include "strata/study/engine.h"
#include "strata/study/validation.h"

namespace {

using namespace strata;

std::string golden(const std::string& name) {
  return std::string(STRATA_CLI_TEST_DATA) + "/golden/" + name;
}

Scenario scenario(Strategy s, int k, bool overlap) {
  Scenario sc;
  sc.strategy = s;
  sc.workers = k;
  sc.batchPerWorker = 64;
  sc.options.overlap = overlap;
  return sc;
}

}  // namespace

TEST_CASE("what-ifs change exactly what they name", "[reports]") {
  const Cluster cl = loadCluster(golden("tiny-cluster.yaml"));
  const auto& names = reports::whatIfs();
  REQUIRE(names.size() == 4);
  const Cluster half = reports::applyWhatIf(cl, 0);
  const Cluster twice = reports::applyWhatIf(cl, 1);
  const Cluster faster = reports::applyWhatIf(cl, 2);
  const Cluster slow = reports::applyWhatIf(cl, 3);
  REQUIRE(half.levels.size() == cl.levels.size());
  for (size_t i = 0; i < cl.levels.size(); ++i) {
    CHECK(half.levels[i].link.bandwidth.value() == cl.levels[i].link.bandwidth.value() * 0.5);
    CHECK(twice.levels[i].link.bandwidth.value() == cl.levels[i].link.bandwidth.value() * 2);
    CHECK(slow.levels[i].link.latency.value() == cl.levels[i].link.latency.value() * 10);
    CHECK(half.levels[i].link.latency == cl.levels[i].link.latency);
    CHECK(faster.levels[i].link.bandwidth == cl.levels[i].link.bandwidth);
  }
  CHECK(faster.device.computeScale == 2.0);
  CHECK(faster.device.reduceBandwidth.value() == cl.device.reduceBandwidth.value() * 2);
  CHECK(half.device.computeScale == 1.0);
  CHECK_THROWS_AS(reports::applyWhatIf(cl, 4), InvariantError);
}

TEST_CASE("what-if steps against closed forms", "[reports]") {
  const Network net = loadNetwork(golden("tiny-net.yaml"));
  const Cluster cl = loadCluster(golden("tiny-cluster.yaml"));
  // One worker: the step is compute only, so compute x2 halves it exactly.
  const auto one = estimate(net, cl, scenario(Strategy::kRing, 1, false));
  const auto oneFaster =
      estimate(net, reports::applyWhatIf(cl, 2), scenario(Strategy::kRing, 1, false));
  CHECK(oneFaster.step.value() == Approx(one.step.value() / 2).epsilon(1e-12));
  // Communication after backprop (overlap off) is A + B / beta in the link
  // bandwidth beta, so T(beta/2) - T(beta) = 2 (T(beta) - T(2 beta)).
  for (auto s : {Strategy::kNaive, Strategy::kRing, Strategy::kPs}) {
    INFO(toString(s));
    const auto sc = scenario(s, 4, false);
    const double base = estimate(net, cl, sc).step.value();
    const double slower = estimate(net, reports::applyWhatIf(cl, 0), sc).step.value();
    const double quicker = estimate(net, reports::applyWhatIf(cl, 1), sc).step.value();
    CHECK(slower - base == Approx(2 * (base - quicker)).epsilon(1e-9));
    CHECK(slower > base);
  }
}

TEST_CASE("inlined SVG: declaration dropped, ids and references prefixed", "[reports]") {
  const std::string svg =
      "<?xml version=\"1.0\" encoding=\"utf-8\"  standalone=\"no\"?>\n"
      "<svg \n width=\"600\" height=\"400\" xmlns:xlink=\"http://www.w3.org/1999/xlink\">\n"
      "<g id=\"gnuplot_canvas\"><defs><circle id='gpDot' r='1'/></defs>"
      "<use xlink:href='#gpDot' x='1'/><rect fill=\"url(#grad)\"/>"
      "<path data-id='x' d='M0 0'/></g></svg>\n";
  const std::string out = reports::inlineSvg(svg, "fig-a");
  CHECK(out.rfind("<svg", 0) == 0);
  CHECK(out.find("<?xml") == std::string::npos);
  CHECK(out.find("id=\"fig-a-gnuplot_canvas\"") != std::string::npos);
  CHECK(out.find("id='fig-a-gpDot'") != std::string::npos);
  CHECK(out.find("xlink:href='#fig-a-gpDot'") != std::string::npos);
  CHECK(out.find("url(#fig-a-grad)") != std::string::npos);
  CHECK(out.find("data-id='x'") != std::string::npos);  // not an id attribute
  CHECK_THROWS_AS(reports::inlineSvg("<html/>", "p"), RunFailure);
}

TEST_CASE("validate JSON: every row read, mistakes named by row and key", "[reports]") {
  const auto rows = study::loadValidationJson(std::string(STRATA_VALIDATION_JSON), "--validation");
  REQUIRE(!rows.empty());
  CHECK(rows[0].network == "tiny-cnn");
  CHECK(rows[0].strategy == Strategy::kRing);
  CHECK(rows[0].workers == 2);
  CHECK(rows[0].step[0].value() == 0.04);
  CHECK(rows[0].step[1].value() == 0.038);
  CHECK(rows[0].step[2].value() == 0.042);
  CHECK(rows[0].spreadMin.value() == 0.038);
  CHECK(rows[0].spreadMax.value() == 0.044);
  CHECK(rows[0].source == "validation.json");
  CHECK(rows[0].heldOut);
  CHECK(rows[0].withinClaims);
  CHECK(!rows[0].busy);

  const auto dir = std::filesystem::temp_directory_path();
  auto refused = [&](const std::string& text, const std::string& needle) {
    const auto path = (dir / "strata-report-test.json").string();
    std::ofstream(path) << text;
    INFO(text);
    try {
      study::loadValidationJson(path, "--validation");
      FAIL("accepted");
    } catch (const OptionError& e) {
      CHECK(std::string(e.what()).find(needle) != std::string::npos);
      CHECK(std::string(e.what()).rfind("--validation", 0) == 0);
    }
    std::filesystem::remove(path);
  };
  refused("not json", "not JSON");
  refused("{}", "no \"rows\"");
  refused(R"({"rows":[]})", "no rows");
  refused(R"({"rows":[{"strategy":"ring"}]})", "rows[0].network: missing");
  refused(R"({"rows":[{"network":"n","strategy":"rung","workers":2,"batch_per_worker":8}]})",
          "rung");
  refused(R"({"rows":[{"network":"n","strategy":"ring","workers":0,"batch_per_worker":8}]})",
          "rows[0].workers");
  const std::string ok = R"("network":"n","strategy":"ring","workers":2,"batch_per_worker":8,)";
  const std::string phases = R"("compute_s":{"measured":1,"model":1,"sim":1},)"
                             R"("communication_s":{"measured":1,"model":1,"sim":1})";
  refused(
      "{\"rows\":[{" + ok + R"("step_s":{"measured":1e999,"model":1,"sim":1},)" + phases + "}]}",
      "");  // 1e999 is not JSON nlohmann reads as a finite number
  const std::string flags = R"(,"held_out":true,"within_claims":true,"busy":false)";
  refused("{\"rows\":[{" + ok + R"("step_s":{"measured":2,"model":1,"sim":1},)" + phases + flags +
              R"(,"spread_s":{"min":0.5,"max":1}}]})",
          "outside [min, max]");
  refused("{\"rows\":[{" + ok + R"("step_s":{"measured":1,"model":1,"sim":1},)" + phases +
              R"(,"held_out":"yes","within_claims":true,"busy":false)" +
              R"(,"spread_s":{"min":0.5,"max":1}}]})",
          "rows[0].held_out: must be true or false");
}

TEST_CASE("analysis: verdicts pick the fastest that fits, strong scaling splits the batch",
          "[reports]") {
  reports::ReportRequest rq;
  rq.networks = {loadNetwork(golden("tiny-net.yaml"))};
  rq.clusters = {loadCluster(golden("tiny-cluster.yaml"))};
  rq.strategies = {Strategy::kNaive, Strategy::kRing, Strategy::kPs};
  rq.workers = {1, 2, 4};
  rq.batches = {64, 16};
  StrategyOptions after;  // communication after backprop
  after.overlap = false;
  rq.optionSets = {after};
  int calls = 0, lastDone = 0, lastTotal = 0;
  rq.progress = [&](int done, int total) {
    ++calls;
    CHECK(done > lastDone);
    lastDone = done;
    lastTotal = total;
  };
  const auto report = reports::buildReport(rq);
  CHECK(lastDone == lastTotal);
  CHECK(calls == lastTotal);
  REQUIRE(report.panels.size() == 1);
  const auto& p = report.panels[0];
  CHECK(p.rows.size() == 9);
  CHECK(p.otherBatches.size() == 9);
  CHECK(p.strongGlobalBatch == 64);  // the largest batch at the smallest K
  REQUIRE(p.strong.size() == 9);
  for (const auto& e : p.strong)
    CHECK(e.scenario.workers * e.scenario.batchPerWorker == 64);
  // Each row as the engine prices it alone.
  for (const auto& e : p.rows)
    CHECK(e.step.value() ==
          study::evaluate(rq.networks[0], rq.clusters[0], e.scenario, study::Engine::kModel)
              .step.value());
  REQUIRE(report.verdicts[0].size() == 3);
  for (const auto& v : report.verdicts[0]) {
    REQUIRE(v.best);
    for (const auto& e : p.rows)
      if (e.scenario.workers == v.workers)
        CHECK(v.step.value() <= e.step.value());
  }
  // what-ifs at the largest K, one base and four changes per strategy.
  REQUIRE(p.sensitivity.size() == 3);
  for (const auto& s : p.sensitivity) {
    CHECK(s.workers == 4);
    CHECK(s.step.size() == 5);
  }
  // The timeline: the fastest strategy at the largest K <= 8.
  CHECK(p.timelineEstimate.scenario.workers == 4);
  CHECK(p.timelineEstimate.scenario.strategy == *report.verdicts[0].back().best);
  CHECK(!p.timeline.slices.empty());
  CHECK(p.timelineTaskKind.size() > 0);
}

TEST_CASE("option sets: each a panel, labelled by what differs", "[reports]") {
  reports::ReportRequest rq;
  rq.networks = {loadNetwork(golden("tiny-net.yaml"))};
  rq.clusters = {loadCluster(golden("tiny-cluster.yaml"))};
  rq.strategies = {Strategy::kRing};
  rq.workers = {1, 4};
  rq.batches = {64};
  StrategyOptions on, off;
  off.overlap = false;
  rq.optionSets = {on, off};
  CHECK(reports::optionSetLabel(rq, 0) == "overlap on");
  CHECK(reports::optionSetLabel(rq, 1) == "overlap off");
  const auto report = reports::buildReport(rq);
  REQUIRE(report.panels.size() == 2);
  CHECK(report.panels[0].optionSet == 0);
  CHECK(report.panels[1].optionSet == 1);
  CHECK(report.panels[0].rows[1].scenario.options.overlap);
  CHECK(!report.panels[1].rows[1].scenario.options.overlap);
  // Overlap hides communication behind backprop: never slower.
  CHECK(report.panels[0].rows[1].step <= report.panels[1].rows[1].step);
  rq.optionSets = {on};
  CHECK(reports::optionSetLabel(rq, 0).empty());
}

TEST_CASE("gnuplot is found on PATH or named by STRATA_GNUPLOT", "[reports]") {
  const char* old = std::getenv("STRATA_GNUPLOT");
  ::setenv("STRATA_GNUPLOT", "/nonexistent/gnuplot", 1);
  CHECK_THROWS_AS(reports::findGnuplot(), UserError);
  if (old)
    ::setenv("STRATA_GNUPLOT", old, 1);
  else
    ::unsetenv("STRATA_GNUPLOT");
}

TEST_CASE("the Pareto front of a search: no fitting layout beats one on both counts",
          "[reports][search]") {
  // (memory GB, examples/s, fits): a hand-made search.
  const std::vector<std::tuple<double, double, bool>> points = {
      {10, 100, true},   // 0: the leanest: on the front
      {20, 90, true},    // 1: more memory, slower than 0: off
      {20, 150, true},   // 2: on
      {30, 150, true},   // 3: as fast as 2 with more memory: off
      {40, 400, false},  // 4: fastest but does not fit: never on it
      {35, 200, true},   // 5: on (the fastest that fits)
      {10, 100, true},   // 6: the same as 0: the first listed stands
      {5, 50, true},     // 7: leaner still: on
  };
  std::vector<SearchRow> rows;
  for (const auto& [gb, throughput, fits] : points) {
    SearchRow r;
    r.peakMemory = Bytes(gb * 1e9);
    r.estimate.throughput = throughput;
    r.fits = fits;
    rows.push_back(r);
  }
  CHECK(reports::paretoFront(rows) == std::vector<size_t>{7, 0, 2, 5});
  CHECK(reports::paretoFront({}).empty());
  rows[7].fits = rows[0].fits = rows[2].fits = rows[5].fits = false;
  CHECK(reports::paretoFront(rows) == std::vector<size_t>{6, 3});
}

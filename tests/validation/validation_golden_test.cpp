// validate's printer on fixed measured / predicted rows: golden JSON, and the
// table's summary lines.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "output.h"

using namespace strata;

namespace {
StepEstimate step(const char* engine, double seconds, double compute, double comm, double exposed) {
  StepEstimate e;
  e.engine = engine;
  e.network = "tiny-cnn";
  e.scenario.strategy = Strategy::kRing;
  e.scenario.workers = 2;
  e.scenario.batchPerWorker = 32;
  e.step = Seconds(seconds);
  for (int r = 0; r < 2; ++r) {
    WorkerEstimate w;
    w.rank = r;
    w.compute.fwd = Seconds(compute / 2);
    w.compute.bwdData = Seconds(compute / 2);
    w.communication = Seconds(comm);
    w.exposedCommunication = Seconds(exposed);
    e.workers.push_back(w);
  }
  return e;
}
}  // namespace

TEST_CASE("validate's JSON for fixed measured / predicted rows", "[validation][golden]") {
  // ring, K = 2: three runs (38, 40, 44 ms: median 40 ms, spread -5 % / +10 %);
  // model -5 % (a tie: inside the spread), sim +5 %, profile-based model +2.5 %.
  ValidationRow ring;
  ring.measured = step("executor", 0.040, 0.030, 0.008, 0.004);
  ring.repeats = {Seconds(0.044), Seconds(0.038), Seconds(0.040)};
  ring.model = step("model", 0.038, 0.031, 0.006, 0.002);
  ring.sim = step("sim", 0.042, 0.031, 0.008, 0.003);
  ring.profileModel = step("model-profile", 0.041, 0.032, 0.006, 0.002);
  ring.othersCores = 0.02;
  // Before drift normalisation: 46, 40, 41 ms (median 41 ms, +12.2 %
  // spread); the reference moved 4 % across one run, so the measurement
  // could explain hypot(10 %, 2 %) = 10.2 %; the trace spans 1 % less than
  // the timed step.
  ring.rawRepeats = {Seconds(0.046), Seconds(0.040), Seconds(0.041)};
  ring.referenceSwing = 0.04;
  ring.clockCheck = -0.01;
  // naive, K = 2: measured 60 ms +- 1 ms, predicted 37 ms: faster than ring, a misordered pair.
  ValidationRow naive = ring;
  naive.measured.scenario.strategy = naive.model.scenario.strategy = naive.sim.scenario.strategy =
      Strategy::kNaive;
  naive.measured.step = Seconds(0.060);
  naive.repeats = {Seconds(0.059), Seconds(0.060), Seconds(0.061)};
  naive.model.step = Seconds(0.037);
  naive.sim.step = Seconds(0.062);
  naive.profileModel.reset();
  naive.rawRepeats.clear();  // not normalised (a GPU row): raw = normalised
  naive.referenceSwing = 0;
  naive.clockCheck.reset();
  naive.othersCores = 0.35;
  naive.busy = true;
  naive.note = "busy: others used 0.35 cores";
  // Outside the claims and fitted on the network: neither counts.
  ValidationRow outside = ring;
  outside.measured.scenario.workers = 4;
  outside.model.step = Seconds(0.060);  // +50 %, but outside the claims
  outside.withinClaims = false;
  outside.note = "4 workers on 2 cores, sharing not calibrated";
  ValidationRow fitted = ring;
  fitted.measured.scenario.workers = 1;
  fitted.model.step = Seconds(0.080);  // +100 %, but fitted
  fitted.fittedOnNetwork = true;
  fitted.note = "fitted on this network";
  const std::vector<ValidationRow> rows = {ring, naive, outside, fitted};
  LoadReport load;
  load.measured = true;
  load.cores = 2;
  load.loadAverageBefore = 0.12;
  load.othersCoresBefore = 0.01;
  load.busyRows = {"tiny-cnn b=32 naive K=2"};
  std::ostringstream os;
  cli::printValidation(os, rows, summarize(rows), cli::Format::kJson, load);
  const auto actual = nlohmann::json::parse(os.str());
  const std::string path = std::string(STRATA_GOLDEN_DIR) + "/validation.json";
  if (const char* update = std::getenv("STRATA_UPDATE_GOLDEN"); update && *update)
    std::ofstream(path) << os.str();  // then re-check the figures by hand (below)
  std::ifstream in(path);
  REQUIRE(in.good());
  const auto golden = nlohmann::json::parse(in);
  CHECK(actual == golden);
  // The hand check: |errors| of the two held-out rows are 5 % and 38.3 % (model).
  const auto& summary = actual.at("summary");
  CHECK(summary.at("rows_counted").get<int>() == 2);
  CHECK(summary.at("median_model_error").get<double>() == Approx((0.05 + 23.0 / 60) / 2));
  CHECK(summary.at("worst_sim_error").get<double>() == Approx(0.05));
  CHECK(summary.at("worst_profile_model_error").get<double>() == Approx(0.025));
  CHECK(summary.at("within_spread").at("model").get<int>() == 1);
  CHECK(summary.at("ranking").at("measurable_pairs").get<int>() == 1);
  CHECK(summary.at("ranking").at("model_ordered").get<int>() == 0);
  CHECK(summary.at("ranking").at("sim_ordered").get<int>() == 1);
  const auto& row0 = actual.at("rows")[0];
  CHECK(row0.at("compute_s").at("measured").get<double>() == Approx(0.030));
  CHECK(row0.at("spread_fraction").get<double>() == Approx(0.10));
  CHECK(row0.at("within_spread").at("model").get<bool>());
  CHECK(row0.at("communication_error").at("model").get<double>() == Approx(-0.25));
  CHECK(actual.at("rows")[1].at("profile_model_error").is_null());
  // Drift normalisation's figures, by hand (the ring and naive rows count).
  CHECK(row0.at("raw_step_s").get<double>() == Approx(0.041));
  CHECK(row0.at("raw_spread_fraction").get<double>() == Approx(0.005 / 0.041));
  CHECK(row0.at("measurement_error").get<double>() == Approx(std::hypot(0.10, 0.02)));
  CHECK(row0.at("model_error_explained").get<double>() == Approx(1.0));
  CHECK(row0.at("clock_check").get<double>() == Approx(-0.01));
  const auto& row1 = actual.at("rows")[1];
  CHECK(row1.at("raw_step_s").get<double>() == Approx(0.060));
  CHECK(row1.at("measurement_error").get<double>() == Approx(1.0 / 60));
  CHECK(row1.at("model_error_explained").get<double>() == Approx((1.0 / 60) / (23.0 / 60)));
  CHECK(row1.at("clock_check").is_null());
  CHECK(summary.at("rows_with_spread").get<int>() == 2);
  CHECK(summary.at("spread_median").get<double>() == Approx((0.10 + 1.0 / 60) / 2));
  CHECK(summary.at("raw_spread_median").get<double>() == Approx((0.005 / 0.041 + 1.0 / 60) / 2));
  CHECK(summary.at("model_errors_explained").get<int>() == 1);
  CHECK(summary.at("clock_check").at("rows").get<int>() == 1);
  CHECK(summary.at("clock_check").at("worst").get<double>() == Approx(0.01));
  CHECK(actual.at("load").at("busy").get<bool>());
}

TEST_CASE("validate's table names ties, misordered pairs and busy rows", "[validation]") {
  ValidationRow ring;
  ring.measured = step("executor", 0.040, 0.030, 0.008, 0.004);
  ring.repeats = {Seconds(0.044), Seconds(0.038), Seconds(0.040)};
  ring.model = step("model", 0.039, 0.031, 0.006, 0.002);
  ring.sim = step("sim", 0.050, 0.031, 0.008, 0.003);
  ValidationRow naive = ring;
  naive.measured.scenario.strategy = Strategy::kNaive;
  naive.measured.step = Seconds(0.060);
  naive.repeats = {Seconds(0.060)};
  naive.model.step = Seconds(0.030);
  const std::vector<ValidationRow> rows = {ring, naive};
  LoadReport load;
  load.measured = true;
  load.cores = 2;
  load.busyRows = {"tiny-cnn b=32 naive K=2"};
  std::ostringstream os;
  cli::printValidation(os, rows, summarize(rows), cli::Format::kTable, load);
  const std::string text = os.str();
  INFO(text);
  CHECK(text.find("±10.0 %") != std::string::npos);
  CHECK(text.find("ranking: 0 of 1 measurable pairs") != std::string::npos);
  CHECK(text.find("misordered by the model: tiny-cnn b=32 K=2: ring") != std::string::npos);
  CHECK(text.find("warning: other processes used more than 0.10 cores during 1 row(s): "
                  "tiny-cnn b=32 naive K=2") != std::string::npos);
  std::ostringstream none;
  cli::printValidation(none, rows, summarize(rows), cli::Format::kTable, LoadReport{});
  CHECK(none.str().find("load not measured") != std::string::npos);
}

TEST_CASE("drift normalisation scales a run to the calibrated speed, rounds rotate",
          "[validation]") {
  // A run of 110 ms while the reference ran at 90 GFLOP/s, calibrated at
  // 100 GFLOP/s: the calibrated machine would have taken 99 ms.
  CHECK(normalisedStep(Seconds(0.110), 0.9).value() == Approx(0.099));
  CHECK(normalisedStep(Seconds(0.050), 1.0).value() == Approx(0.050));
  // The row's speed: GEMM time at the GEMM reference's speed, memory-bound
  // time at the copy's. A step 40 % memory-bound on a machine whose GEMMs
  // run at full speed and whose copies at half: 0.6 / 1 + 0.4 / 0.5 = 1.4
  // times as long.
  CHECK(rowSpeed(1.0, 0.5, 0.4) == Approx(1 / 1.4));
  CHECK(rowSpeed(0.9, 0.9, 0.7) == Approx(0.9));  // both alike: either
  CHECK(rowSpeed(0.8, 0.5, 0.0) == Approx(0.8));  // nothing memory-bound: the GEMM's
  CHECK(rowSpeed(0.8, 0.5, 1.0) == Approx(0.5));  // all memory-bound: the copy's
  CHECK(rowSpeed(0.8, 0.0, 0.5) == Approx(0.8));  // no copy reference: the GEMM's
  CHECK(roundOrder(3, 0) == std::vector<int>{0, 1, 2});
  CHECK(roundOrder(3, 1) == std::vector<int>{1, 2, 0});
  CHECK(roundOrder(3, 2) == std::vector<int>{2, 0, 1});
  CHECK(roundOrder(3, 3) == std::vector<int>{0, 1, 2});
  CHECK(roundOrder(1, 5) == std::vector<int>{0});
  // Over n rounds every row runs once in every position (5 rows, a prime).
  for (int pos = 0; pos < 5; ++pos) {
    std::vector<int> seen;
    for (int r = 0; r < 5; ++r)
      seen.push_back(roundOrder(5, r)[static_cast<size_t>(pos)]);
    std::sort(seen.begin(), seen.end());
    CHECK(seen == std::vector<int>{0, 1, 2, 3, 4});
  }
}

TEST_CASE("validate's table shows the normalised and raw spread and unsteady rows",
          "[validation]") {
  ValidationRow ring;
  ring.measured = step("executor", 0.040, 0.030, 0.008, 0.004);
  ring.repeats = {Seconds(0.044), Seconds(0.038), Seconds(0.040)};
  ring.rawRepeats = {Seconds(0.046), Seconds(0.040), Seconds(0.041)};
  ring.referenceSwing = 0.04;
  ring.clockCheck = -0.01;
  ring.model = step("model", 0.039, 0.031, 0.006, 0.002);
  ring.sim = step("sim", 0.041, 0.031, 0.008, 0.003);
  const std::vector<ValidationRow> rows = {ring};
  LoadReport load;
  load.measured = true;
  load.cores = 2;
  load.unsteadyRows = {"tiny-cnn b=32 owt-a K=2"};
  std::ostringstream os;
  cli::printValidation(os, rows, summarize(rows), cli::Format::kTable, load);
  const std::string text = os.str();
  INFO(text);
  CHECK(text.find("±10.0 % (±12.2 %)") != std::string::npos);
  CHECK(text.find("±10.2 %") != std::string::npos);
  CHECK(text.find("measurement: run-to-run spread median ±10.0 % after drift normalisation "
                  "(±12.2 % raw) over 1 rows; the measurement's own error covers the model's "
                  "whole error in 1 of 1 rows") != std::string::npos);
  CHECK(text.find("step timing against the trace's span: median |difference| 1.00 %, worst "
                  "1.00 % over 1 rows") != std::string::npos);
  CHECK(text.find("warning: the machine's speed moved more than 10 % during a run") !=
        std::string::npos);
  std::ostringstream csv;
  cli::printValidation(csv, rows, summarize(rows), cli::Format::kCsv, load);
  CHECK(csv.str().find(",0.041,0.121951,0.04,0.10198,-0.01,") != std::string::npos);
}

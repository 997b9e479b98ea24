// validate's printer on fixed measured / predicted rows: golden JSON, and the
// table's summary lines.
#include <catch2/catch.hpp>
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
  // naive, K = 2: measured 60 ms +- 1 ms, predicted 37 ms: faster than ring, a misordered pair.
  ValidationRow naive = ring;
  naive.measured.scenario.strategy = naive.model.scenario.strategy = naive.sim.scenario.strategy =
      Strategy::kNaive;
  naive.measured.step = Seconds(0.060);
  naive.repeats = {Seconds(0.059), Seconds(0.060), Seconds(0.061)};
  naive.model.step = Seconds(0.037);
  naive.sim.step = Seconds(0.062);
  naive.profileModel.reset();
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

// validate's table on a fixed measured / predicted pair: golden JSON.
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

TEST_CASE("validate's JSON for a fixed measured / predicted pair", "[validation][golden]") {
  ValidationRow row;
  row.measured = step("executor", 0.040, 0.030, 0.008, 0.004);
  row.model = step("model", 0.038, 0.031, 0.006, 0.002);  // -5 %
  row.sim = step("sim", 0.042, 0.031, 0.008, 0.003);      // +5 %
  ValidationRow outside = row;
  outside.measured.scenario.workers = 4;
  outside.model.step = Seconds(0.060);  // +50 %, but outside the claims
  outside.withinClaims = false;
  outside.note = "4 workers on 2 cores, sharing not calibrated";
  const std::vector<ValidationRow> rows = {row, outside};
  std::ostringstream os;
  cli::printValidation(os, rows, summarize(rows), cli::Format::kJson);
  const auto actual = nlohmann::json::parse(os.str());
  const std::string path = std::string(STRATA_GOLDEN_DIR) + "/validation.json";
  if (const char* update = std::getenv("STRATA_UPDATE_GOLDEN"); update && *update)
    std::ofstream(path) << os.str();  // then re-check the errors by hand (below)
  std::ifstream in(path);
  REQUIRE(in.good());
  const auto golden = nlohmann::json::parse(in);
  CHECK(actual == golden);
  CHECK(actual.at("summary").at("median_model_error").get<double>() == Approx(0.05));
  CHECK(actual.at("summary").at("worst_sim_error").get<double>() == Approx(0.05));
  CHECK(actual.at("rows")[0].at("compute_s").at("measured").get<double>() == Approx(0.030));
}

// Unit tests of study/: the engine enum at the edge (its text in and out),
// evaluate, CSV quoting, and the one estimate schema (each column one
// definition, a measured step's inapplicable columns left empty).
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "../csv_cells.h"
#include "strata/model/cluster.h"
#include "strata/model/cluster_loader.h"
#include "strata/model/error.h"
#include "strata/model/network.h"
#include "strata/model/network_loader.h"
#include "strata/study/csv.h"
#include "strata/study/engine.h"
#include "strata/study/estimate_schema.h"
#include "strata/study/option_text.h"
#include "strata/study/queries.h"

namespace {

using namespace strata;
using study::Engine;
using study::EstimateColumn;

std::string golden(const std::string& name) {
  return std::string(STRATA_CLI_TEST_DATA) + "/golden/" + name;
}

// Two workers that differ in every per-worker figure: worker 0 computes 3 ms
// and sends 100 B, worker 1 computes 1 ms and sends 300 B (receives 50, 40).
StepEstimate twoWorkers(const char* engine) {
  StepEstimate e;
  e.engine = engine;
  e.network = "net, with a comma";
  e.cluster = "c";
  e.scenario.strategy = Strategy::kRing;
  e.scenario.workers = 2;
  e.scenario.batchPerWorker = 8;
  e.step = Seconds(0.010);
  e.throughput = 1600;
  e.speedup = 1.5;
  e.efficiency = 0.75;
  e.bottleneck = "link 0-1";
  const double compute[] = {0.003, 0.001}, sent[] = {100, 300}, received[] = {50, 40};
  for (int r = 0; r < 2; ++r) {
    WorkerEstimate w;
    w.rank = r;
    w.compute.fwd = Seconds(compute[r]);
    w.communication = Seconds(0.002 * (r + 1));
    w.exposedCommunication = Seconds(0.001 * (r + 1));
    w.idle = e.step - w.compute.total() - w.exposedCommunication;
    w.sent = Bytes(sent[r]);
    w.received = Bytes(received[r]);
    w.memory.weights = Bytes(1000.0 * (r + 1));
    e.workers.push_back(w);
  }
  return e;
}

}  // namespace

TEST_CASE("engines: the text each output writes, and --engine's", "[study]") {
  CHECK(study::toString(Engine::kModel) == "model");
  CHECK(study::toString(Engine::kSimulator) == "sim");
  CHECK(study::toString(Engine::kExecutor) == "executor");
  CHECK(study::parsePredictingEngine("model", "--engine") == Engine::kModel);
  CHECK(study::parsePredictingEngine("sim", "--engine") == Engine::kSimulator);
  // The executor measures: no command prices with it.
  for (const char* bad : {"executor", "oracle", "", "Model"}) {
    INFO(bad);
    try {
      study::parsePredictingEngine(bad, "--engine");
      FAIL("accepted");
    } catch (const OptionError& e) {
      CHECK(std::string(e.what()) ==
            "--engine: must be model or sim, got '" + std::string(bad) + "'");
    }
  }
  CHECK(study::engineOf(twoWorkers("sim")) == Engine::kSimulator);
  CHECK(study::engineOf(twoWorkers("model-profile")) == Engine::kModel);
  CHECK(study::isMeasured(twoWorkers("executor")));
  CHECK_FALSE(study::isMeasured(twoWorkers("model")));
  CHECK_THROWS_AS(study::engineOf(twoWorkers("oracle")), InvariantError);
}

TEST_CASE("evaluate prices with the engine it is given", "[study]") {
  const Network net = loadNetwork(golden("tiny-net.yaml"));
  const Cluster cl = loadCluster(golden("tiny-cluster.yaml"));
  Scenario sc;
  sc.strategy = Strategy::kRing;
  sc.workers = 2;
  sc.batchPerWorker = 10;
  const auto model = study::evaluate(net, cl, sc, Engine::kModel);
  const auto sim = study::evaluate(net, cl, sc, Engine::kSimulator);
  CHECK(study::engineOf(model) == Engine::kModel);
  CHECK(study::engineOf(sim) == Engine::kSimulator);
  CHECK(model.step.value() > 0);
  CHECK(sim.step.value() > 0);
  CHECK_THROWS_AS(study::evaluate(net, cl, sc, Engine::kExecutor), InvariantError);
}

TEST_CASE("CSV fields are quoted only when they must be", "[study]") {
  CHECK(study::csvField("ring") == "ring");
  CHECK(study::csvField("host link of devices 0-3 (up)") == "host link of devices 0-3 (up)");
  CHECK(study::csvField("a, b") == "\"a, b\"");
  CHECK(study::csvField("say \"hi\"") == "\"say \"\"hi\"\"\"");
  CHECK(study::csvField("two\nlines") == "\"two\nlines\"");
}

TEST_CASE("CSV cells: yes/no, 9 digits, integers as they are, null empty", "[study]") {
  const nlohmann::ordered_json row = {{"a", "x,y"}, {"b", true},    {"c", 1.0 / 3},
                                      {"d", 42},    {"e", nullptr}, {"f", false}};
  CHECK(study::csvHeader(row) == "a,b,c,d,e,f");
  CHECK(study::csvLine(row) == "\"x,y\",yes,0.333333333,42,,no");
  CHECK(study::csvLine(nlohmann::ordered_json{{"first", nullptr}, {"second", 1}}) == ",1");
}

TEST_CASE("estimate schema: every column one name, one definition", "[study][schema]") {
  using C = EstimateColumn;
  std::set<std::string> names;
  for (int c = 0; c <= int(C::kTrainingTime); ++c) {
    const std::string name(study::columnName(EstimateColumn(c)));
    CHECK(name != "?");
    CHECK(names.insert(name).second);  // no two columns share a key
  }
  const auto e = twoWorkers("model");
  // Per-step figures over workers: means for times, the largest for bytes.
  CHECK(study::columnValue(C::kCompute, e).get<double>() == Approx(0.002));
  CHECK(study::columnValue(C::kCommunication, e).get<double>() == Approx(0.003));
  CHECK(study::columnValue(C::kExposedCommunication, e).get<double>() == Approx(0.0015));
  CHECK(study::columnValue(C::kIdle, e).get<double>() == Approx(0.0065));
  // compute + exposed + idle = step, as the report's bars draw it.
  CHECK(study::columnValue(C::kCompute, e).get<double>() +
            study::columnValue(C::kExposedCommunication, e).get<double>() +
            study::columnValue(C::kIdle, e).get<double>() ==
        Approx(e.step.value()));
  CHECK(study::columnValue(C::kSentBytesPerWorker, e).get<double>() == 300);
  CHECK(study::columnValue(C::kReceivedBytesPerWorker, e).get<double>() == 50);
  CHECK(study::columnValue(C::kMemoryBytesPerWorker, e).get<double>() == 2000);
  CHECK(study::columnValue(C::kGlobalBatch, e).get<int64_t>() == 16);
  CHECK(study::columnValue(C::kTrainingSteps, e).is_null());

  // The CLI's CSV: the header's columns and the row's cells line up.
  const auto header = csvCells(study::estimateCsvHeader());
  const auto row = csvCells(study::estimateCsvRow(e));
  REQUIRE(header.size() == row.size());
  auto at = [&](const std::string& key) {
    for (size_t i = 0; i < header.size(); ++i)
      if (header[i] == key)
        return row[i];
    FAIL("no column " << key);
    return std::string();
  };
  CHECK(at("network") == "net, with a comma");
  CHECK(at("compute_s") == "0.002");
  CHECK(at("sent_bytes_per_worker") == "300");
  CHECK(at("speedup") == "1.5");
  CHECK(at("fits_in_memory") == "yes");
  CHECK(at("training_steps").empty());
}

TEST_CASE("estimate schema: a measured step leaves out what it has no model of",
          "[study][schema]") {
  const auto e = twoWorkers("executor");
  const auto j = study::estimateJson(e);
  for (const char* key : {"speedup", "efficiency", "bottleneck", "fits_in_memory"})
    CHECK_FALSE(j.contains(key));
  CHECK_FALSE(j["per_worker"][0].contains("memory"));
  // The same quantities are empty cells in CSV, not zeros.
  const auto header = csvCells(study::estimateCsvHeader());
  const auto row = csvCells(study::estimateCsvRow(e));
  REQUIRE(header.size() == row.size());
  for (size_t i = 0; i < header.size(); ++i) {
    INFO(header[i]);
    const bool none = header[i] == "speedup" || header[i] == "efficiency" ||
                      header[i] == "memory_bytes_per_worker" || header[i] == "fits_in_memory" ||
                      header[i] == "bottleneck" || header[i] == "training_steps" ||
                      header[i] == "training_time_s" || header[i] == "allreduce" ||
                      header[i] == "tokens_per_s" || header[i] == "mfu" || header[i] == "hfu";
    CHECK(row[i].empty() == none);
  }
}

namespace {

// The message of what `f` throws as OptionError ("" when it does not).
template <class F>
std::string optionMessage(F f) {
  try {
    f();
  } catch (const OptionError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("applyOptionText: every option from its text, refused values name the front end's option",
          "[study][options]") {
  StrategyOptions o;
  const std::pair<OptionKey, const char*> texts[] = {
      {OptionKey::kOverlap, "off"},         {OptionKey::kFcUpdate, "round"},
      {OptionKey::kSegment, "1MiB"},        {OptionKey::kBucket, "0"},
      {OptionKey::kElement, "bf16"},        {OptionKey::kOptimizer, "adam"},
      {OptionKey::kAllreduce, "tree"},      {OptionKey::kConvSync, "ring"},
      {OptionKey::kPsPriority, "fifo"},     {OptionKey::kStaleness, "3"},
      {OptionKey::kPsServers, "2"},         {OptionKey::kPsNode, "4"},
      {OptionKey::kThreadsPerWorker, "2"},  {OptionKey::kTensorParallel, "8"},
      {OptionKey::kSequenceParallel, "on"}, {OptionKey::kZero, "3"},
      {OptionKey::kRecompute, "full"},      {OptionKey::kPipelineParallel, "4"},
      {OptionKey::kMicrobatches, "16"},     {OptionKey::kSchedule, "interleaved"},
      {OptionKey::kVirtualStages, "2"},     {OptionKey::kStageStarts, "b4,b8,b12"},
      {OptionKey::kPlacement, "tp,dp,pp"}};
  // Every key has a reader: the table names each once.
  CHECK(std::size(texts) == std::size(kAllOptionKeys));
  for (const auto& [key, text] : texts)
    study::applyOptionText(key, text, std::string(optionFileKey(key)), o);
  CHECK_FALSE(o.overlap);
  CHECK(o.fcUpdate == FcUpdate::kRound);
  CHECK(o.segment.value() == 1048576);
  CHECK(o.bucket.value() == 0);
  CHECK(o.element == ElementType::kBf16);
  CHECK(o.optimizer == Optimizer::kAdam);
  CHECK(o.gradientSync == AllreduceAlgorithm::kTree);
  CHECK(o.convSync == AllreduceAlgorithm::kRing);
  CHECK(o.staleness == 3);
  CHECK(o.psServers == 2);
  CHECK(o.psNode == 4);
  CHECK(o.threadsPerWorker == 2);
  CHECK(o.tp == 8);
  CHECK(o.sequenceParallel);
  CHECK(o.zero == 3);
  CHECK(o.recompute == Recompute::kFull);
  CHECK(o.pp == 4);
  CHECK(o.microbatches == 16);
  CHECK(o.schedule == PipelineSchedule::kInterleaved);
  CHECK(o.virtualStages == 2);
  CHECK(o.stageStarts == std::vector<std::string>{"b4", "b8", "b12"});
  CHECK(o.placement == Placement::kTpDpPp);

  // Bounds: the same on every front end, named as the caller names the option.
  CHECK(optionMessage([&] { study::applyOptionText(OptionKey::kTensorParallel, "0", "tp", o); }) ==
        "tp: must be a whole number of workers per tensor-parallel group in [1, 1024], got '0'");
  CHECK(optionMessage([&] {
          study::applyOptionText(OptionKey::kPipelineParallel, "2.5", "--pp", o);
        }) == "--pp: must be a whole number of pipeline stages in [1, " +
                  std::to_string(kMaxPipelineStages) + "], got '2.5'");
  CHECK(optionMessage([&] { study::applyOptionText(OptionKey::kZero, "4", "zero", o); }) ==
        "zero: must be a whole number of ZeRO stage in [0, 3], got '4'");
  CHECK(optionMessage([&] { study::applyOptionText(OptionKey::kOverlap, "yes", "overlap", o); }) ==
        "overlap: must be on or off, got 'yes'");
  CHECK(optionMessage([&] {
          study::applyOptionText(OptionKey::kStageStarts, "b4,b4", "stage_starts", o);
        }).rfind("stage_starts: ", 0) == 0);
}

TEST_CASE("trainingRun and psSteps name the options as the front end gives them",
          "[study][options]") {
  Scenario sc;
  sc.strategy = Strategy::kRing;
  sc.workers = 4;
  sc.batchPerWorker = 32;
  CHECK(study::trainingRun(std::nullopt, std::nullopt, std::nullopt, sc).steps == 0);
  CHECK(study::trainingRun(100.0, std::nullopt, std::nullopt, sc).steps == 100);
  // 1000 examples at 4 x 32 = 128 a step: ceil(1000 / 128) = 8 steps an epoch.
  const auto run = study::trainingRun(std::nullopt, 2.0, 1000.0, sc);
  CHECK(run.stepsPerEpoch == 8);
  CHECK(run.steps == 16);
  const study::TrainingRunNames py{"steps", "epochs", "dataset"};
  CHECK(optionMessage([&] { study::trainingRun(10.0, 1.0, std::nullopt, sc, py); }) ==
        "steps: give the run's length once: steps N or epochs E dataset N, not both");
  CHECK(optionMessage([&] {
          study::trainingRun(std::nullopt, 1.0, std::nullopt, sc, py);
        }).rfind("epochs: needs dataset N", 0) == 0);
  CHECK(optionMessage([&] { study::trainingRun(std::nullopt, std::nullopt, 5.0, sc, py); }) ==
        "dataset: needs epochs E (or give the run as steps)");
  CHECK(optionMessage([&] { study::trainingRun(std::nullopt, 1.0, 0.5, sc, py); }) ==
        "dataset: must be a whole number of examples in [1, 2^53], got 0.5");
  CHECK(optionMessage([&] {
          study::trainingRun(std::nullopt, -1.0, 10.0, sc, py);
        }).rfind("epochs: must be a number of epochs", 0) == 0);

  CHECK(study::psSteps("", sc, "ps_steps") == 0);
  CHECK(optionMessage([&] { study::psSteps("4", sc, "ps_steps", "train_steps"); }) ==
        "ps_steps: applies to ps only (steps back to back); ring synchronises every step and "
        "plays one (the length of a training run to price is train_steps)");
  sc.strategy = Strategy::kPs;
  CHECK(study::psSteps("4", sc, "ps_steps") == 4);
  CHECK(optionMessage([&] { study::psSteps("1", sc, "--steps"); }) ==
        "--steps: ps needs at least 2 steps to have a period, got 1");
}

TEST_CASE("sweep: every combination, model-parallel strategies only where the network has the part",
          "[study]") {
  study::SweepGrid grid;
  grid.networks = {loadNetwork(golden("tiny-net.yaml"))};
  grid.clusters = {loadCluster(golden("tiny-cluster.yaml"))};
  grid.strategies = {Strategy::kNaive, Strategy::kRing, Strategy::kOwtA};
  grid.workers = {1, 2, 3};
  grid.batches = {4, 10};
  grid.overlaps = {true, false};
  grid.elements = {ElementType::kFp32};
  grid.fcUpdates = {FcUpdate::kStep};
  const bool modelParallel = grid.networks[0].modelParallelFrom > 0;
  const size_t strategies = modelParallel ? 3 : 2;
  CHECK(study::sweepSize(grid) == strategies * 3 * 2 * 2);
  size_t calls = 0, last = 0;
  const auto rows = study::sweep(grid, study::Engine::kModel, [&](size_t done, size_t total) {
    ++calls;
    CHECK(done == calls);
    last = total;
  });
  REQUIRE(rows.size() == study::sweepSize(grid));
  CHECK(calls == rows.size());
  CHECK(last == rows.size());
  // The order: batch, overlap, then workers, then strategy innermost.
  CHECK(rows[0].scenario.workers == 1);
  CHECK(rows[0].scenario.batchPerWorker == 4);
  CHECK(rows[1].scenario.strategy == Strategy::kRing);
  // Each row is what evaluate gives for its scenario.
  Scenario sc{Strategy::kRing, 3, 10, {}};
  sc.options.overlap = false;
  const auto direct =
      study::evaluate(grid.networks[0], grid.clusters[0], sc, study::Engine::kModel);
  bool found = false;
  for (const auto& r : rows)
    if (r.scenario.strategy == Strategy::kRing && r.scenario.workers == 3 &&
        r.scenario.batchPerWorker == 10 && !r.scenario.options.overlap) {
      CHECK(r.step.value() == direct.step.value());
      found = true;
    }
  CHECK(found);
}

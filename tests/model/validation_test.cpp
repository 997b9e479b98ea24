// Validation suites (loader and its errors) and validate's arithmetic: median
// and spread over repeats, ties, per-phase errors, held-out counting, the
// ranking check and the machine-load figures, on hand-made rows.
#include "strata/study/validation.h"

#include <catch2/catch.hpp>

#include "helpers.h"
#include "strata/model/error.h"
#include "strata/model/validation_suite.h"

using namespace strata;
using strata::test::dataFile;

namespace {

// The ConfigError message of loading `file`, which must fail.
std::string suiteError(const std::string& file) {
  try {
    loadValidationSuite(dataFile(file));
  } catch (const ConfigError& e) {
    return e.what();
  }
  FAIL("expected a ConfigError from " << file);
  return "";
}

// An estimate of one worker-count: every worker computes `compute` and
// communicates `comm` seconds.
StepEstimate step(const char* network, Strategy s, int k, double seconds, double compute = 0,
                  double comm = 0) {
  StepEstimate e;
  e.network = network;
  e.scenario.strategy = s;
  e.scenario.workers = k;
  e.scenario.batchPerWorker = 8;
  e.step = Seconds(seconds);
  for (int r = 0; r < k; ++r) {
    WorkerEstimate w;
    w.rank = r;
    w.compute.fwd = Seconds(compute);
    w.communication = Seconds(comm);
    e.workers.push_back(w);
  }
  return e;
}

// A row measured `repeats` (the median is the measured step) and predicted
// `model` (model and simulator alike).
ValidationRow row(Strategy s, std::vector<double> repeats, double model, int k = 2) {
  ValidationRow r;
  for (double t : repeats)
    r.repeats.push_back(Seconds(t));
  r.measured = step("net", s, k, medianOf(r.repeats).value());
  r.model = step("net", s, k, model);
  r.sim = r.model;
  return r;
}

}  // namespace

TEST_CASE("a validation suite loads with its entries and options", "[validation][suite]") {
  const auto s = loadValidationSuite(dataFile("suite-good.yaml"));
  CHECK(s.name == "good");
  REQUIRE(s.entries.size() == 2);
  CHECK(s.entries[0].network.name == "tiny-cnn");
  CHECK(s.entries[0].batches == std::vector<int>{16, 32});
  CHECK(s.entries[1].network.name == "one-fc");  // a path beside the suite file
  CHECK(s.entries[1].batches == std::vector<int>{8});
  CHECK(s.entries[1].where.find("suite-good.yaml:7: entries[1].network") != std::string::npos);
  // Every strategy, in the file's order (a strategy or worker count listed
  // twice is refused: tests/cli/suites/duplicate-*.yaml).
  REQUIRE(s.strategies.size() == 6);
  CHECK(s.strategies.front() == Strategy::kRing);
  CHECK(s.workers == std::vector<int>{1, 2});
  CHECK_FALSE(s.autoWorkers);
  CHECK(s.repeats == 4);
  CHECK(s.steps == 5);
  CHECK(isValidationSuite(dataFile("suite-good.yaml")));
  CHECK_FALSE(isValidationSuite(dataFile("suite-no-kind.yaml")));
  CHECK_FALSE(isValidationSuite(dataFile("no-such-file.yaml")));
}

TEST_CASE("a validation suite's defaults: every strategy, workers auto", "[validation][suite]") {
  const auto s = loadValidationSuite(dataFile("suite-auto.yaml"));
  CHECK(s.name == "suite-auto");
  CHECK(s.strategies.size() == 6);
  CHECK(s.autoWorkers);
  CHECK(s.workers.empty());
  CHECK(s.repeats == 3);
  CHECK(s.steps == 6);
}

TEST_CASE("the shipped full suite loads: six networks, two batches each, 132 rows on 2 cores",
          "[validation][suite]") {
  const auto s =
      loadValidationSuite(resolveConfig(ConfigKind::kExperiment, "validation-full", "--suite"));
  CHECK(s.name == "validation-full");
  const std::vector<std::pair<std::string, std::vector<int>>> expected = {
      {"tiny-cnn", {16, 32}}, {"tiny-gpt", {32, 128}}, {"alexnet-owt", {8, 16}},
      {"alexnet", {8, 16}},   {"resnet50", {2, 4}},    {"vgg16", {1, 2}}};
  REQUIRE(s.entries.size() == expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    CHECK(s.entries[i].network.name == expected[i].first);
    CHECK(s.entries[i].batches == expected[i].second);
  }
  CHECK(s.strategies.size() == 6);
  CHECK(s.autoWorkers);
  CHECK(s.repeats == 3);
  CHECK(s.steps == 5);
  // The row count its comment gives for the 2-core VM: owt-a/b/c only where a
  // network has a model-parallel part (tiny-gpt's output layer is tied).
  int rows = 0;
  for (const auto& e : s.entries)
    for (Strategy st : s.strategies)
      if (!isModelParallel(st) || e.network.modelParallelFrom >= 0)
        rows += int(e.batches.size()) * int(autoWorkerCounts(2).size());
  CHECK(rows == 132);
  CHECK(s.entries[1].network.modelParallelFrom == -1);
}

TEST_CASE("workers auto: powers of two up to the cores, the cores, at least 1 and 2",
          "[validation][suite]") {
  CHECK(autoWorkerCounts(1) == std::vector<int>{1, 2});
  CHECK(autoWorkerCounts(2) == std::vector<int>{1, 2});
  CHECK(autoWorkerCounts(4) == std::vector<int>{1, 2, 4});
  CHECK(autoWorkerCounts(6) == std::vector<int>{1, 2, 4, 6});
  CHECK(autoWorkerCounts(16) == std::vector<int>{1, 2, 4, 8, 16});
}

TEST_CASE("every suite mistake names file, line and key", "[validation][suite][errors]") {
  const std::string unknown = suiteError("suite-unknown-key.yaml");
  CHECK(unknown.find("suite-unknown-key.yaml:5: repeat: ") != std::string::npos);
  const std::string network = suiteError("suite-bad-network.yaml");
  CHECK(network.find("suite-bad-network.yaml:5: entries[1].network: unknown network "
                     "'alexnet-two'") != std::string::npos);
  const std::string batch = suiteError("suite-batch-zero.yaml");
  CHECK(batch.find("suite-batch-zero.yaml:5: entries[0].batches[1]: ") != std::string::npos);
  const std::string repeats = suiteError("suite-repeats-zero.yaml");
  CHECK(repeats.find("suite-repeats-zero.yaml:5: repeats: ") != std::string::npos);
  const std::string steps = suiteError("suite-steps-two.yaml");
  CHECK(steps.find("suite-steps-two.yaml:5: steps: must be at least 3") != std::string::npos);
  const std::string kind = suiteError("suite-no-kind.yaml");
  CHECK(kind.find("suite-no-kind.yaml:1: kind: missing") != std::string::npos);
  const std::string entry = suiteError("suite-entry-key.yaml");
  CHECK(entry.find("suite-entry-key.yaml:4: entries[0].batch: ") != std::string::npos);
}

TEST_CASE("an experiment loader refuses a validation suite", "[validation][suite][errors]") {
  try {
    loadExperiment(dataFile("suite-auto.yaml"));
    FAIL("expected a ConfigError");
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    CHECK(what.find("suite-auto.yaml:2: kind: this file is a validation suite") !=
          std::string::npos);
    CHECK(what.find("strata validate --suite") != std::string::npos);
  }
}

TEST_CASE("median and spread over repeats, a prediction inside the spread is a tie",
          "[validation]") {
  const auto r = row(Strategy::kRing, {0.110, 0.100, 0.095}, 0.104);
  CHECK(r.measured.step.value() == Approx(0.100));
  CHECK(r.spreadMin().value() == Approx(0.095));
  CHECK(r.spreadMax().value() == Approx(0.110));
  CHECK(r.spreadFraction() == Approx(0.10));  // +10 % above, -5 % below
  CHECK(r.withinSpread(Seconds(0.104)));
  CHECK_FALSE(r.withinSpread(Seconds(0.111)));
  CHECK(r.modelError() == Approx(0.04));
  // An even count: the mean of the two middle ones.
  CHECK(medianOf({Seconds(1), Seconds(4), Seconds(2), Seconds(3)}).value() == Approx(2.5));
  // One run: no spread, the measured step alone.
  const auto one = row(Strategy::kRing, {}, 0.1);
  CHECK(one.spreadFraction() == 0);
}

TEST_CASE("per-phase errors, negligible communication is not compared", "[validation]") {
  const auto measured = step("net", Strategy::kRing, 2, 0.100, 0.080, 0.020);
  const auto predicted = step("net", Strategy::kRing, 2, 0.090, 0.072, 0.025);
  CHECK(computeError(predicted, measured) == Approx(-0.10));
  REQUIRE(communicationError(predicted, measured));
  CHECK(*communicationError(predicted, measured) == Approx(0.25));
  // 0.5 ms of a 100 ms step is below kNegligibleCommunicationShare (1 %).
  const auto quiet = step("net", Strategy::kRing, 2, 0.100, 0.080, 0.0005);
  CHECK_FALSE(communicationError(predicted, quiet));
  CHECK_FALSE(communicationError(predicted, step("net", Strategy::kRing, 1, 0.1, 0.1, 0)));
}

TEST_CASE("ranking: a misordered pair is listed, a gap inside the spread is a tie",
          "[validation][ranking]") {
  std::vector<ValidationRow> rows = {
      // ring 100 ms +- 1 ms, naive 120 ms +- 1 ms, ps 101 ms +- 5 ms.
      row(Strategy::kRing, {0.099, 0.100, 0.101}, 0.105),
      row(Strategy::kNaive, {0.119, 0.120, 0.121}, 0.110),
      row(Strategy::kPs, {0.096, 0.101, 0.106}, 0.130),
  };
  const auto check = checkRanking(rows);
  // ring-naive (gap 20 ms) and naive-ps (19 ms) are measurable; ring-ps (1 ms,
  // inside ps's 10 ms spread) is a tie and not counted.
  CHECK(check.measurablePairs == 2);
  // ring < naive: the model agrees (105 < 110); ps < naive: the model says 130 > 110.
  CHECK(check.modelOrdered == 1);
  REQUIRE(check.modelMisordered.size() == 1);
  const auto& p = check.modelMisordered.front();
  CHECK(p.faster == Strategy::kPs);
  CHECK(p.slower == Strategy::kNaive);
  CHECK(p.measuredFaster.value() == Approx(0.101));
  CHECK(p.predictedFaster.value() == Approx(0.130));
  CHECK(p.predictedSlower.value() == Approx(0.110));
  CHECK(check.simOrdered == 1);

  // Rows of another K are another group: no pair across groups.
  rows.push_back(row(Strategy::kOwtA, {0.300}, 0.3, 1));
  CHECK(checkRanking(rows).measurablePairs == 2);

  // A model that predicts two measurably different strategies equal has not ordered them.
  const std::vector<ValidationRow> equal = {row(Strategy::kRing, {0.1}, 0.1),
                                            row(Strategy::kNaive, {0.2}, 0.1)};
  CHECK(checkRanking(equal).measurablePairs == 1);
  CHECK(checkRanking(equal).modelOrdered == 0);
}

TEST_CASE("summary: held-out rows within claims count, fitted and outside rows do not",
          "[validation]") {
  std::vector<ValidationRow> rows = {
      row(Strategy::kRing, {0.099, 0.100, 0.101}, 0.105),   // +5 %
      row(Strategy::kNaive, {0.119, 0.120, 0.121}, 0.108),  // -10 %
  };
  ValidationRow fitted = row(Strategy::kPs, {0.1}, 0.2);  // +100 %, fitted
  fitted.fittedOnNetwork = true;
  ValidationRow outside = row(Strategy::kOwtA, {0.1}, 0.3);  // +200 %, outside claims
  outside.withinClaims = false;
  rows.push_back(fitted);
  rows.push_back(outside);
  rows[0].profileModel = step("net", Strategy::kRing, 2, 0.102);  // +2 %

  const auto s = summarize(rows);
  CHECK(s.rows == 4);
  CHECK(s.rowsWithinClaims == 3);
  CHECK(s.rowsHeldOut == 2);
  CHECK(s.rowsCounted == 2);
  CHECK(s.countedHeldOut);
  CHECK(s.medianModelError == Approx(0.075));
  CHECK(s.worstModelError == Approx(0.10));
  CHECK(s.rowsWithProfile == 1);
  CHECK(s.medianProfileModelError == Approx(0.02));
  CHECK(s.modelWithinSpread == 0);
  CHECK(s.ranking.measurablePairs == 1);
  CHECK(s.ranking.modelOrdered == 1);

  // Every row fitted: the figures are over the fitted rows, and say so.
  for (auto& r : rows)
    r.fittedOnNetwork = true;
  const auto f = summarize(rows);
  CHECK_FALSE(f.countedHeldOut);
  CHECK(f.rowsHeldOut == 0);
  CHECK(f.rowsCounted == 3);
  CHECK(f.worstModelError == Approx(1.0));

  // No row within claims (say every row ran off the calibrated speed): nothing
  // is counted, and no held-out claim is made.
  for (auto& r : rows) {
    r.fittedOnNetwork = false;
    r.withinClaims = false;
  }
  const auto none = summarize(rows);
  CHECK_FALSE(none.countedHeldOut);
  CHECK(none.rowsCounted == 0);
  CHECK(none.rowsHeldOut == 0);
  CHECK(none.worstModelError == 0);
}

TEST_CASE("other processes' CPU use between two samples", "[validation][load]") {
  const CpuSample a{10.0, 100.0, 5.0};
  // 2 s of wall time: the machine was busy 2.6 core-seconds, this process 2.0.
  const CpuSample b{12.0, 102.6, 7.0};
  CHECK(othersCores(a, b) == Approx(0.3));
  // Own time counted a jiffy ahead of the machine's: never below 0.
  CHECK(othersCores(a, CpuSample{12.0, 101.9, 7.0}) == 0);
  CHECK(othersCores(a, a) == 0);
  CHECK(busyBeforeStart(0.6, 0.0, 2));
  CHECK_FALSE(busyBeforeStart(0.4, 0.05, 2));
  CHECK(busyBeforeStart(0.1, 0.2, 2));
  CHECK_FALSE(busyBeforeStart(3.0, 0.0, 16));
}

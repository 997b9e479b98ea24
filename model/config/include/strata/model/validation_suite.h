// Validation suites: the networks, batch sizes, strategies and worker counts
// `strata validate --suite FILE` runs for real and compares against the model
// and the simulator (schema: docs/validation.md, "Validation suites").
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "strata/model/network.h"
#include "strata/model/strategy.h"

namespace strata {

// The top-level `kind:` of files in configs/experiments/: comparisons
// (`strata compare`, the default when `kind` is absent) and validation suites
// (`strata validate --suite`, where `kind` is required).
inline constexpr std::string_view kExperimentKind = "experiment";
inline constexpr std::string_view kValidationSuiteKind = "validation-suite";

// One network of a suite and the batch sizes (examples per worker) it runs at.
struct SuiteEntry {
  Network network;
  std::vector<int> batches;
  // "file:line: entries[i].network", for errors found after loading (e.g. a
  // network the executor cannot run).
  std::string where;
  // "file:line: entries[i].batches[j]" for batches[j] (empty when not read
  // from a file), for a batch found too large only when a row is checked.
  std::vector<std::string> batchesWhere;
};

struct ValidationSuite {
  std::string name;
  std::string description;
  std::string sourceFile;
  std::vector<SuiteEntry> entries;
  std::vector<Strategy> strategies;
  // Worker counts; empty when `workers: auto` (autoWorkerCounts of the
  // machine's core count, decided where the suite runs).
  std::vector<int> workers;
  // "file:line: workers[i]" for workers[i] (empty when not read from a file).
  std::vector<std::string> workersWhere;
  bool autoWorkers = false;
  int repeats = 3;  // executor runs per row, to measure the run-to-run spread
  int steps = 6;    // steps per run: 2 warm-up, the median of the rest is the run's step
};

// The fewest steps of one validate run: 2 warm-up steps and one measured.
inline constexpr int kMinValidateSteps = 3;
// The most steps per run and runs per row a suite may ask for (each runs for
// real: a million steps is days of a small network).
inline constexpr int kMaxSuiteSteps = 1'000'000;
inline constexpr int kMaxSuiteRepeats = 1000;

// Loads a suite file; every mistake (unknown key, unknown network, batch or
// repeats < 1 or > kMaxSuiteRepeats, steps < kMinValidateSteps or >
// kMaxSuiteSteps, a global batch over 2^31 - 1, a file whose kind is not
// validation-suite, a network, batch, strategy or worker count listed twice,
// strategies that give no row: owt-* only on networks without a
// model-parallel part) is a ConfigError naming file, line and key.
ValidationSuite loadValidationSuite(const std::string& path);

// True when `path` is a YAML map whose top-level `kind` is validation-suite;
// false for anything else, unreadable files included (for listing presets).
bool isValidationSuite(const std::string& path);

// `workers: auto` on a machine with `cores` cores: 1, 2, 4, ... up to cores,
// and cores itself, at least {1, 2} (a row per doubling keeps a suite's time
// growing with log(cores), not cores).
std::vector<int> autoWorkerCounts(int cores);

}  // namespace strata

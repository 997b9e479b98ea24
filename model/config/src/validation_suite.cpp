// Loads validation suites (`strata validate --suite FILE`).
#include "strata/model/validation_suite.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <limits>

#include "config_node.h"
#include "config_reference.h"
#include "strata/model/checked.h"
#include "strata/model/error.h"
#include "strata/model/network_loader.h"
#include "strata/model/presets.h"

namespace fs = std::filesystem;

namespace strata {

ValidationSuite loadValidationSuite(const std::string& path) {
  const auto root = ConfigNode::loadFile(path);
  const auto kind = root.get("kind");
  if (!kind)
    throw ConfigError(path, 1, "kind",
                      "missing: a validation suite says `kind: " +
                          std::string(kValidationSuiteKind) + "` (experiments are run by compare)");
  if (kind->asString() != kValidationSuiteKind)
    kind->fail(
        "is '" + kind->asString() + "', expected " + std::string(kValidationSuiteKind) +
        (kind->asString() == kExperimentKind ? " (experiments are run by strata compare)" : ""));
  root.allowOnly(
      {"kind", "name", "description", "entries", "strategies", "workers", "repeats", "steps"});

  ValidationSuite suite;
  suite.sourceFile = path;
  suite.name = root.stringOr("name", fs::path(path).stem().string());
  suite.description = root.stringOr("description", "");

  const auto entries = root.require("entries");
  if (!entries.isSequence() || entries.items().empty())
    entries.fail("needs a list of at least one {network, batches} entry");
  for (const auto& e : entries.items()) {
    if (!e.isMap())
      e.fail("expected a map {network: NAME, batches: [B, ...]}");
    e.allowOnly({"network", "batches"});
    SuiteEntry entry;
    const auto netNode = e.require("network");
    entry.network = loadNetwork(resolveReference(ConfigKind::kNetwork, netNode));
    entry.where = path + ":" + std::to_string(netNode.line()) + ": " + netNode.path();
    const auto batches = e.require("batches");
    for (const auto& b : batches.items(true)) {
      const int v = b.asPositiveInt();
      if (std::find(entry.batches.begin(), entry.batches.end(), v) != entry.batches.end())
        b.fail("batch " + std::to_string(v) + " is listed twice");
      entry.batches.push_back(v);
      entry.batchesWhere.push_back(b.where());
    }
    if (entry.batches.empty())
      batches.fail("needs at least one batch size");
    for (const auto& other : suite.entries)
      if (other.network.name == entry.network.name)
        netNode.fail("network '" + entry.network.name +
                     "' is listed twice (give one entry several batches)");
    suite.entries.push_back(std::move(entry));
  }

  const auto strategies = root.get("strategies");
  if (strategies) {
    if (strategies->isSequence() && strategies->items().empty())
      strategies->fail("needs at least one strategy");
    suite.strategies = readStrategyList(*strategies);
  } else {
    suite.strategies = {std::begin(kAllStrategies), std::end(kAllStrategies)};
  }
  // Nothing to validate is a mistake, not an empty table: owt-* need a
  // model-parallel part, and no entry has one.
  const bool anyRow =
      std::any_of(suite.strategies.begin(), suite.strategies.end(), [&](Strategy s) {
        return !isModelParallel(s) ||
               std::any_of(suite.entries.begin(), suite.entries.end(),
                           [](const SuiteEntry& e) { return e.network.modelParallelFrom >= 0; });
      });
  if (!anyRow)
    strategies->fail(
        "nothing to validate: owt-a/b/c need a model-parallel part, and no network of the suite "
        "has one (add naive, ring or ps, or a network with fc layers)");

  if (auto workers = root.get("workers");
      !workers || (workers->isScalar() && workers->asString() == "auto")) {
    suite.autoWorkers = true;
  } else {
    if (workers->isSequence() && workers->items().empty())
      workers->fail("needs at least one worker count (or auto)");
    std::vector<int> lines;
    for (const auto& w : workers->items(true)) {
      if (w.isScalar() && w.asString() == "auto")
        w.fail("auto stands alone: `workers: auto`");
      const int k = w.asPositiveInt();
      if (const auto it = std::find(suite.workers.begin(), suite.workers.end(), k);
          it != suite.workers.end())
        w.fail(
            fmt::format("{} workers are listed twice (first at line {}): each count is one "
                        "row",
                        k, lines[static_cast<size_t>(it - suite.workers.begin())]));
      suite.workers.push_back(k);
      suite.workersWhere.push_back(w.where());
      lines.push_back(w.line());
    }
  }

  suite.repeats = root.positiveIntOr("repeats", suite.repeats);
  suite.steps = root.positiveIntOr("steps", suite.steps);
  // Every row runs repeats x steps steps for real: bounded like any input.
  if (suite.repeats > kMaxSuiteRepeats)
    root.require("repeats").fail(
        fmt::format("must be at most {} (runs per row), got {}", kMaxSuiteRepeats, suite.repeats));
  if (suite.steps > kMaxSuiteSteps)
    root.require("steps").fail(
        fmt::format("must be at most {} (steps per run), got {}", kMaxSuiteSteps, suite.steps));
  for (const auto& entry : suite.entries)
    for (int b : entry.batches)
      for (int k : suite.workers)
        if (int64_t examples = 0; !checkedMul(k, b, examples, std::numeric_limits<int>::max()))
          root.require("workers").fail(
              fmt::format("{} workers x batch {} of {} is a global batch over {} "
                          "examples",
                          k, b, entry.where, std::numeric_limits<int>::max()));
  if (suite.steps < kMinValidateSteps)
    root.require("steps").fail("must be at least " + std::to_string(kMinValidateSteps) +
                               " (2 warm-up steps, then measured ones)");
  return suite;
}

bool isValidationSuite(const std::string& path) {
  try {
    const YAML::Node root = YAML::LoadFile(path);
    return root.IsMap() && root["kind"] && root["kind"].IsScalar() &&
           root["kind"].as<std::string>() == kValidationSuiteKind;
  } catch (const YAML::Exception&) {
    return false;
  }
}

std::vector<int> autoWorkerCounts(int cores) {
  std::vector<int> ks = {1, 2};
  for (int k = 4; k <= cores; k *= 2)
    ks.push_back(k);
  if (cores > ks.back())
    ks.push_back(cores);
  return ks;
}

}  // namespace strata

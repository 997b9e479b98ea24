// Finding configs by preset name or path, and experiments (a comparison in a file).
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "strata/model/cluster.h"
#include "strata/model/error.h"
#include "strata/model/network.h"
#include "strata/model/strategy.h"

namespace strata {

enum class ConfigKind { kNetwork, kCluster, kExperiment };
std::string_view toString(ConfigKind kind);  // "network", "cluster", "experiment"

// Where presets are looked up, in order: each folder of $STRATA_CONFIG_DIR
// (colon-separated; a folder that does not exist, or holds none of networks/,
// clusters/, experiments/, is an OptionError naming it), then the
// built-in presets (the source tree's configs/, else
// <prefix>/share/strata/configs). A preset in an earlier folder hides one of
// the same name in a later folder.
std::vector<std::string> configDirs();

// Replaces the built-in presets' folder for this process (the Python wheel's
// strata/configs, which sits beside the module wherever pip put it); empty:
// back to the source tree's or the install prefix's.
void setBuiltinConfigDir(std::string dir);

// A path as given when it names an existing file or looks like one (contains
// '/' or ends in .yaml); otherwise the preset of that name. Throws
// OptionError(option) naming the unknown preset and listing the known ones.
std::string resolveConfig(ConfigKind kind, std::string_view nameOrPath, const std::string& option);

// Preset names of a kind over every folder of configDirs(), sorted, each once.
std::vector<std::string> listPresets(ConfigKind kind);

// A comparison stored in a file (schema: docs/configs.md, "Experiments").
struct Experiment {
  std::string name;
  std::string description;
  std::string sourceFile;
  Network network;
  Cluster cluster;
  std::vector<Strategy> strategies;
  std::vector<int> workers;
  int batchPerWorker = 128;
  StrategyOptions options;
  // Where each value was read, "file:line: key", for mistakes found only when
  // a scenario is evaluated: workersWhere[i] for workers[i] (empty when the
  // counts did not come from a file), optionWhere by the command-line option
  // that would set the value instead ("--batch", "--segment", "--ps-servers",
  // ...). A command that overrides a value with its option drops its entry.
  std::vector<std::string> workersWhere;
  std::map<std::string, std::string> optionWhere;
};

// Loads an experiment file. Every mistake is a ConfigError naming file, line
// and key; a strategy or a worker count listed twice (`strategies: [ring,
// ring]`, `[all, ps]`, `workers: [2, 2]`) is one, naming both lines.
Experiment loadExperiment(const std::string& path);

// `e`, raised while evaluating `ex` with `workers` workers, names a
// command-line option ("--workers: ...") whose value came from the experiment
// file: throws the same message naming the file, line and key instead
// ("owt.yaml:6: workers[1]: ..."). Returns when the option's value did not come
// from the file (the caller rethrows `e`).
void throwAtExperimentSource(const Experiment& ex, const OptionError& e, int workers);

}  // namespace strata

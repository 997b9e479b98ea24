// Finding configs by preset name or path, and experiments (a comparison in a file).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "strata/model/cluster.h"
#include "strata/model/network.h"
#include "strata/model/strategy.h"

namespace strata {

enum class ConfigKind { kNetwork, kCluster, kExperiment };
std::string_view toString(ConfigKind kind);  // "network", "cluster", "experiment"

// Where presets are looked up, in order: each folder of $STRATA_CONFIG_DIR
// (colon-separated; a folder that does not exist is an OptionError), then the
// built-in presets (the source tree's configs/, else
// <prefix>/share/strata/configs). A preset in an earlier folder hides one of
// the same name in a later folder.
std::vector<std::string> configDirs();

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
};

Experiment loadExperiment(const std::string& path);

}  // namespace strata

// Small hand-made clusters and networks for the model tests.
#pragma once

#include <filesystem>
#include <fstream>
#include <string>

#include "strata/model/cluster.h"
#include "strata/model/cluster_loader.h"
#include "strata/model/error.h"
#include "strata/model/estimate.h"
#include "strata/model/network.h"
#include "strata/model/network_loader.h"
#include "strata/model/presets.h"

namespace strata::test {

// One non-blocking switch with `group` ports (0: any number), every link
// beta bytes/s per direction and alpha seconds; reduction at reduceBw bytes/s.
inline Cluster flatCluster(double beta, double alpha, int group = 0, bool fullDuplex = true,
                           double reduceBw = 1e10) {
  Cluster c;
  c.name = "flat";
  c.sourceFile = "flat.yaml";
  c.device.name = "test device";
  c.device.peak[0] = FlopsPerSecond(1e12);
  c.device.memoryBandwidth = BytesPerSecond(1e11);
  c.device.memoryCapacity = Bytes(16e9);
  c.device.memoryEfficiency = 1.0;
  c.device.efficiency.fill(1.0);
  c.device.reduceBandwidth = BytesPerSecond(reduceBw);
  TopologyLevel level;
  level.name = "switch";
  level.group = group;
  level.link.bandwidth = BytesPerSecond(beta);
  level.link.latency = Seconds(alpha);
  level.link.fullDuplex = fullDuplex;
  c.levels.push_back(level);
  return c;
}

inline Network presetNetwork(const std::string& name) {
  return loadNetwork(resolveConfig(ConfigKind::kNetwork, name, "test"));
}
inline Cluster presetCluster(const std::string& name) {
  return loadCluster(resolveConfig(ConfigKind::kCluster, name, "test"));
}
inline std::string dataFile(const std::string& name) {
  return std::string(STRATA_TEST_DATA_DIR) + "/" + name;
}

// Writes <tmp>/<folder>/<stem>.yaml holding `text` and loads it as a network.
inline Network loadNetworkText(const std::string& folder, const std::string& stem,
                               const std::string& text) {
  const auto dir = std::filesystem::temp_directory_path() / folder;
  std::filesystem::create_directories(dir);
  const auto path = (dir / (stem + ".yaml")).string();
  std::ofstream(path) << text;
  return loadNetwork(path);
}

// The message of the ConfigError loading such a file throws ("" when none).
inline std::string networkLoadError(const std::string& folder, const std::string& stem,
                                    const std::string& text) {
  try {
    loadNetworkText(folder, stem, text);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

// The message checkScenario throws for `sc` on `n` ("" when it takes it).
inline std::string scenarioError(const Network& n, const Scenario& sc) {
  try {
    checkScenario(n, sc);
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

}  // namespace strata::test

// Small hand-made clusters and networks for the model tests.
#pragma once

#include <string>

#include "strata/model/cluster.h"
#include "strata/model/cluster_loader.h"
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

}  // namespace strata::test

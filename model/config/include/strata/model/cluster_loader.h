#pragma once

#include <string>

#include "strata/model/cluster.h"

namespace strata {

// Loads a cluster YAML file (schema in docs/configs.md).
Cluster loadCluster(const std::string& path);

}  // namespace strata

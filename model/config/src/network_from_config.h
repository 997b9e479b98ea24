// The network loader's core, shared by the YAML loader and the Hugging Face
// config importer (hf_config.cpp), which builds the same YAML tree.
//
// Internal to model/: public headers never include yaml-cpp.
#pragma once

#include <string>

#include "config_node.h"
#include "strata/model/network.h"

namespace strata {

// A network from a YAML tree of the schema in docs/configs.md; `path` is the
// file errors name, `expectedName` the name the tree must carry.
Network networkFromConfig(const ConfigNode& root, const std::string& path,
                          const std::string& expectedName);

}  // namespace strata

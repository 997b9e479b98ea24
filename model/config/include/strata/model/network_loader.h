#pragma once

#include <string>

#include "strata/model/network.h"

namespace strata {

// Loads a network YAML file (schema in docs/configs.md) or, for a path
// ending in .onnx, an ONNX model (docs/onnx.md).
Network loadNetwork(const std::string& path);
// Imports an ONNX model (docs/onnx.md): its nodes in order, each mapped to a
// strata layer or folded into one; shapes and costs derived as for YAML. Reads
// only the file itself (initializers' dims; external data is never opened).
// Name: the file stem. Throws ConfigError naming the file and the node
// ("nodes[i] (name)") for anything it cannot map, and, in a build without
// ONNX, one saying so.
Network loadOnnxNetwork(const std::string& path);

}  // namespace strata

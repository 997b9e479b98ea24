#pragma once

#include <string>

#include "strata/model/network.h"

namespace strata {

// Loads a network YAML file (schema in docs/configs.md), for a path ending in
// .onnx an ONNX model (docs/onnx.md), for one ending in .json a Hugging Face
// config.json (docs/networks.md, "Hugging Face configs").
Network loadNetwork(const std::string& path);
// Maps a Hugging Face `config.json` of a decoder family strata prices (gpt2,
// llama, mistral) onto strata's layers, as the YAML presets write them. Name:
// the folder of a file named config.json, else the file stem. Throws
// ConfigError naming the file, line and key for an unknown model_type, a key
// strata does not know, or a value it cannot price (never a guess).
Network loadHfConfigNetwork(const std::string& path);
// Imports an ONNX model (docs/onnx.md): its nodes in order, each mapped to a
// strata layer or folded into one; shapes and costs derived as for YAML. Reads
// only the file itself (initializers' dims; external data is never opened).
// Name: the file stem. Throws ConfigError naming the file and the node
// ("nodes[i] (name)") for anything it cannot map, and, in a build without
// ONNX, one saying so.
Network loadOnnxNetwork(const std::string& path);

}  // namespace strata

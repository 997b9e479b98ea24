// The config loaders the fuzz targets drive, in one place, so that a fuzz
// target (fuzz/*_fuzzer.cpp) and the regression test that replays its
// findings (tests/fuzz/) run exactly the same code on an input.
//
// Contract of every loader on any bytes: it returns, or throws UserError
// (ConfigError) naming the file; any other exception, a crash, a sanitizer
// report, a hang or an unbounded allocation is a bug.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace strata::fuzz {

// The loaders, by the name the fuzz targets and tests/fuzz/ folders use.
enum class Loader { kNetwork, kCluster, kExperiment, kSuite, kProfile, kOnnx, kHf };

// "network", "cluster", "experiment", "suite", "profile", "onnx", "hf" (a
// Hugging Face config.json); throws
// std::invalid_argument for any other name.
Loader parseLoader(std::string_view name);
std::string_view toString(Loader loader);

// Runs `loader` on the YAML file `path` (a profile is checked against the
// tiny-cnn preset; onnx: loadNetwork on an .onnx file; hf: on a .json file). Returns "" when it
// loaded and the
// UserError's message when it rejected the file; lets every other exception through.
std::string load(Loader loader, const std::string& path);

// Writes `size` bytes to a file in a per-process scratch folder and runs
// `loader` on it. The file's stem is the input's top-level `name:` value when
// that is a plain word, so that inputs get past the loaders' "name must equal
// the file name" check and reach the rest of the parser; an onnx input is
// written as input.onnx, an hf input as config.json. Returns as load().
std::string loadBytes(Loader loader, const uint8_t* data, size_t size);

}  // namespace strata::fuzz

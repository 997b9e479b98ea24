// libFuzzer target: loadNetwork on arbitrary bytes as an .onnx file (the ONNX
// import's protobuf parse and graph walk). Expected outcomes: the model loads,
// or a UserError (ConfigError) rejects it; anything else is a finding
// (docs/testing.md). Run: build-fuzz/fuzz/onnx_fuzzer tests/fixtures/onnx
#include "config_loaders.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  strata::fuzz::loadBytes(strata::fuzz::Loader::kOnnx, data, size);
  return 0;
}

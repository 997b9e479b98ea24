// libFuzzer target: loadNetwork on arbitrary bytes as a Hugging Face
// config.json (the JSON parse and the family mappings). Expected outcomes: the
// network loads, or a UserError (ConfigError) rejects it; anything else is a
// finding (docs/testing.md). Run: build-fuzz/fuzz/hf_fuzzer tests/fixtures/hf
#include "config_loaders.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  strata::fuzz::loadBytes(strata::fuzz::Loader::kHf, data, size);
  return 0;
}

// libFuzzer target: loadCluster on arbitrary bytes. Expected outcomes: the file
// loads, or a UserError (ConfigError) rejects it; anything else is a finding
// (docs/testing.md). Run: build-fuzz/fuzz/cluster_fuzzer -dict=fuzz/config.dict configs tests
#include "config_loaders.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  strata::fuzz::loadBytes(strata::fuzz::Loader::kCluster, data, size);
  return 0;
}

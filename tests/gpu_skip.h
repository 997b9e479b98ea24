// GPU test programs on machines without a usable GPU: they print why and exit
// 77, which their CTest registration (SKIP_RETURN_CODE 77) reports as
// skipped, never failed. Call strata::test::exitUnlessGpu() first in main.
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

namespace strata::test {

// The exit status CTest's SKIP_RETURN_CODE is set to for GPU programs.
inline constexpr int kSkipReturnCode = 77;

// Returns when a CUDA device is usable; else prints the reason and exits
// kSkipReturnCode (cudaGetDeviceCount fails without a driver, and reports 0
// devices on a machine with a driver but no GPU).
inline void exitUnlessGpu() {
  int devices = 0;
  const cudaError_t status = cudaGetDeviceCount(&devices);
  if (status != cudaSuccess) {
    std::printf("skipped: no usable CUDA device (cudaGetDeviceCount: %s)\n",
                cudaGetErrorString(status));
    std::exit(kSkipReturnCode);
  }
  if (devices == 0) {
    std::printf("skipped: no CUDA device\n");
    std::exit(kSkipReturnCode);
  }
}

}  // namespace strata::test

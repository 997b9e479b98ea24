// What every CUDA file of kernels/ shares: the check of a CUDA call or
// launch, and the launch constants. Included by the .cu files only.
#pragma once

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace strata::kernels::cuda {
namespace {

// Throws the failure of a CUDA call, naming the call (or kernel) and the error.
inline void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess)
    throw std::runtime_error(std::string("strata::kernels::cuda: ") + what + ": " +
                             cudaGetErrorString(status));
}

// After a launch: a bad configuration (or an earlier asynchronous failure)
// is an exception naming the kernel.
inline void checkLaunch(const char* kernel) {
  check(cudaGetLastError(), kernel);
}

constexpr int kThreads = 256;  // threads per block, unless a kernel says otherwise
constexpr int kWarp = 32;      // threads per warp

}  // namespace
}  // namespace strata::kernels::cuda

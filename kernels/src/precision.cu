// The CUDA kernels of precision.h: grid-stride loops over the element
// functions the twins call (precision_twin.cpp), so both agree bit for bit.
#include <cuda_runtime.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "strata/kernels/elementwise.h"
#include "strata/kernels/precision.h"

#include "launch.cuh"

namespace strata::kernels::cuda {

namespace {

// Blocks of a launch: one per kThreads elements, at most this many (a
// grid-stride loop needs no more than fill the device: 132 SMs x 8 resident
// blocks of 256 threads on an H100).
constexpr int64_t kMaxBlocks = 4096;

unsigned blocksFor(int64_t count) {
  return static_cast<unsigned>(
      std::max<int64_t>(1, std::min<int64_t>((count + kThreads - 1) / kThreads, kMaxBlocks)));
}

__global__ void toBf16Kernel(const float* x, uint16_t* y, int64_t count) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < count; i += stride)
    y[i] = element::bf16FromFloat(x[i]);
}

__global__ void fromBf16Kernel(const uint16_t* x, float* y, int64_t count, float beta) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < count; i += stride)
    y[i] = element::blend(y + i, element::floatFromBf16(x[i]), beta);
}

}  // namespace

void castToBf16(const float* x, uint16_t* y, int64_t count, CUstream_st* stream) {
  if (count <= 0)
    return;
  toBf16Kernel<<<blocksFor(count), kThreads, 0, stream>>>(x, y, count);
  check(cudaGetLastError(), "castToBf16");
}

void castFromBf16(const uint16_t* x, float* y, int64_t count, float beta, CUstream_st* stream) {
  if (count <= 0)
    return;
  fromBf16Kernel<<<blocksFor(count), kThreads, 0, stream>>>(x, y, count, beta);
  check(cudaGetLastError(), "castFromBf16");
}

}  // namespace strata::kernels::cuda

// The CUDA kernel of Adam and AdamW (kernels.h): one grid-stride loop over
// elementwise.h's adam, the per-step scalars computed once on the host by
// adamScalars as the twin computes them. Compiled with --fmad=false (as
// kernels.cu), so every element equals the twin's bit for bit.
#include <cuda_runtime.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "strata/kernels/elementwise.h"
#include "strata/kernels/kernels.h"

#include "launch.cuh"

namespace strata::kernels::cuda {

namespace {

constexpr int kThreadsPerSm = 2048;  // resident threads per SM on sm_90

// Blocks of kThreads for a grid-stride loop over `count` elements: one per
// kThreads elements, at most what the device holds at once, at least one.
unsigned gridFor(int64_t count) {
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice (adam's grid)");
  int sms = 0;
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device),
        "cudaDeviceGetAttribute(multiprocessors) (adam's grid)");
  const int64_t resident = int64_t{sms} * (kThreadsPerSm / kThreads);
  const int64_t needed = (count + kThreads - 1) / kThreads;
  return static_cast<unsigned>(std::max<int64_t>(1, std::min(needed, resident)));
}

__global__ void adamKernel(float* __restrict__ w, float* __restrict__ m, float* __restrict__ v,
                           const float* __restrict__ g, int64_t count, element::AdamScalars s) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < count; i += stride)
    element::adam(w + i, m + i, v + i, g[i], s);
}

}  // namespace

void adam(float* w, float* m, float* v, const float* g, int64_t count, const AdamParams& p,
          Stream stream) {
  if (count <= 0)
    return;
  if (p.step < 1)
    throw std::invalid_argument("strata::kernels::cuda::adam: step " + std::to_string(p.step) +
                                " < 1 (bias corrections start at step 1)");
  adamKernel<<<gridFor(count), kThreads, 0, stream>>>(w, m, v, g, count, element::adamScalars(p));
  check(cudaGetLastError(), "adam kernel launch");
}

}  // namespace strata::kernels::cuda

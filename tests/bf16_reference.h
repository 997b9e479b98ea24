// The reference of a bf16 GEMM with fp32 accumulation, on the CPU: what
// cuBLAS computes with CUDA_R_16BF operands and CUBLAS_COMPUTE_32F. Each
// operand is rounded to bf16 (round to nearest, ties to even: the twin's
// element function), each product of two bf16 values is exact in fp32 (8 + 8
// significant bits), and the products are summed in fp32 in k order. The
// GPU sums in another order (tensor-core tiles), so a bf16 result differs
// from this one only by fp32 rounding of the sum, never by bf16's.
#pragma once

#include <cstdint>
#include <vector>

#include "strata/kernels/precision.h"

namespace strata::test {

// C (m x n) = A (m x k) B^T, B (n x k), row-major, operands rounded to bf16.
inline std::vector<float> bf16GemmNt(const std::vector<float>& a, const std::vector<float>& b,
                                     int m, int n, int k) {
  std::vector<float> c(static_cast<size_t>(m) * n, 0.0f);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      float sum = 0.0f;
      for (int p = 0; p < k; ++p)
        sum += kernels::element::roundThroughBf16(a[size_t(i) * k + p]) *
               kernels::element::roundThroughBf16(b[size_t(j) * k + p]);
      c[size_t(i) * n + j] = sum;
    }
  return c;
}

// Every element rounded through bf16: the inputs with which an fp32 backend
// (CpuBackend) computes what a bf16 GEMM or convolution with fp32
// accumulation does, up to the order of the sums.
inline std::vector<float> roundedThroughBf16(std::vector<float> v) {
  for (float& x : v)
    x = kernels::element::roundThroughBf16(x);
  return v;
}

}  // namespace strata::test

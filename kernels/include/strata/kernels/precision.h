// Precision casts for mixed-precision GEMMs and convolutions: fp32 <-> bf16.
//
// bf16 (bfloat16) is the upper half of an IEEE-754 binary32: sign, the same
// 8-bit exponent, 7 stored mantissa bits. Its bits are held as uint16_t here,
// so that neither the twins nor executor/nn need CUDA's __nv_bfloat16 type
// (the CUDA kernels reinterpret nothing: cuBLAS and cuDNN read the same
// 16-bit patterns as CUDA_R_16BF / CUDNN_DATA_BFLOAT16).
//
// Rounding: fp32 -> bf16 rounds to nearest, ties to even (IEEE's default and
// __float2bfloat16_rn's), on the bits: finite values that round past the
// largest bf16 become infinity with their sign; denormals round as any other
// value (bf16 has fp32's denormal range, only fewer bits); a NaN stays a NaN
// with its sign, made quiet (its payload's top bit set, so that the dropped
// lower bits cannot turn it into an infinity). bf16 -> fp32 is exact.
//
// As for kernels.h: a CPU twin (namespace twin) and a CUDA kernel (namespace
// cuda, built with STRATA_CUDA) per cast, both calling the STRATA_HD element
// functions below, so they agree bit for bit.
#pragma once

#include <cstdint>
#include <cstring>

#include "strata/kernels/hd.h"

struct CUstream_st;

namespace strata::kernels {

namespace element {

// The bits of an fp32 value, and back (memcpy on the host: no aliasing UB).
STRATA_HD inline uint32_t floatBits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u = 0;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

STRATA_HD inline float bitsFloat(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f = 0;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

// fp32 -> bf16, round to nearest, ties to even. Adding 0x7fff plus the
// lowest kept bit to the 32-bit pattern carries into the kept half exactly
// when the dropped half is over one half, or is one half and the kept half
// is odd; a carry out of the mantissa raises the exponent (an overflow of the
// largest finite value reaches the infinity pattern 0x7f80).
STRATA_HD inline uint16_t bf16FromFloat(float f) {
  const uint32_t u = floatBits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u)  // NaN: keep sign and top payload, quiet
    return static_cast<uint16_t>((u >> 16) | 0x0040u);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// bf16 -> fp32: exact (the dropped mantissa bits are zero).
STRATA_HD inline float floatFromBf16(uint16_t h) {
  return bitsFloat(uint32_t{h} << 16);
}

// A float rounded through bf16 and back: what a bf16 GEMM multiplies.
STRATA_HD inline float roundThroughBf16(float f) {
  return floatFromBf16(bf16FromFloat(f));
}

}  // namespace element

// ---- the CPU twins ----------------------------------------------------------
namespace twin {

// y[i] = bf16(x[i]) for i < count.
void castToBf16(const float* x, uint16_t* y, int64_t count);
// y[i] = float(x[i]) + beta * y[i]; beta 0 overwrites without reading y.
void castFromBf16(const uint16_t* x, float* y, int64_t count, float beta);

}  // namespace twin

// ---- the CUDA kernels (STRATA_CUDA builds) ----------------------------------
namespace cuda {

// As the twins, on `stream` (device memory); enqueue only. A failed launch
// throws std::runtime_error naming the kernel and the CUDA error.
void castToBf16(const float* x, uint16_t* y, int64_t count, CUstream_st* stream);
void castFromBf16(const uint16_t* x, float* y, int64_t count, float beta, CUstream_st* stream);

}  // namespace cuda

}  // namespace strata::kernels

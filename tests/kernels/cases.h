// Inputs and comparisons shared by the kernel tests: the twins against
// CpuBackend (twin_test.cpp) and the CUDA kernels against the twins
// (cuda_kernels_test.cpp) draw the same kinds of shapes and values.
#pragma once

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "strata/kernels/kernels.h"

namespace strata::kernels::test {

// Deterministic pseudo-random test inputs.
class Random {
 public:
  explicit Random(uint64_t seed) : engine_(seed) {}

  // Uniform in [lo, hi].
  int integer(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(engine_); }
  float uniform(float lo, float hi) {
    return std::uniform_real_distribution<float>(lo, hi)(engine_);
  }
  bool coin() { return integer(0, 1) == 1; }

  std::vector<float> floats(int64_t count, float lo = -2.0f, float hi = 2.0f) {
    std::vector<float> v(static_cast<size_t>(count));
    for (float& x : v)
      x = uniform(lo, hi);
    return v;
  }
  // Whole numbers in [lo, hi] as floats: many ties (pooling's tie rule) and
  // exact zeros (relu's boundary).
  std::vector<float> levels(int64_t count, int lo, int hi) {
    std::vector<float> v(static_cast<size_t>(count));
    for (float& x : v)
      x = static_cast<float>(integer(lo, hi));
    return v;
  }
  std::vector<int32_t> labels(int64_t count, int lo, int hi) {
    std::vector<int32_t> v(static_cast<size_t>(count));
    for (int32_t& x : v)
      x = integer(lo, hi);
    return v;
  }

 private:
  std::mt19937_64 engine_;
};

// A destination that a beta-0 kernel must not read: every element NaN.
inline std::vector<float> nans(int64_t count) {
  return std::vector<float>(static_cast<size_t>(count), std::numeric_limits<float>::quiet_NaN());
}

// A destination for `beta`: NaN for 0 (never read), random values otherwise.
inline std::vector<float> destination(Random& r, int64_t count, float beta) {
  return beta == 0.0f ? nans(count) : r.floats(count);
}

// A small NCHW shape with odd sizes, n = 1 and 1 x 1 planes among them.
inline Shape4 randomShape(Random& r, int maxChannels = 9) {
  Shape4 s;
  s.n = r.integer(1, 4);
  s.c = r.integer(1, maxChannels);
  s.h = r.integer(1, 7);
  s.w = r.integer(1, 7);
  if (r.integer(0, 3) == 0)
    s.h = s.w = 1;
  return s;
}

// Pooling geometry over c planes of h x w, including strides below and
// above the kernel and padding up to the kernel (windows wholly in padding).
inline PoolParams randomPool(Random& r, int c, int h, int w) {
  PoolParams p;
  p.max = r.coin();
  p.c = c;
  p.kernelH = r.integer(1, 4);
  p.kernelW = r.integer(1, 4);
  p.stride = r.integer(1, 3);
  p.pad = r.integer(0, std::max(p.kernelH, p.kernelW));
  p.inH = std::max(h, p.kernelH);
  p.inW = std::max(w, p.kernelW);
  p.outH = (p.inH + 2 * p.pad - p.kernelH) / p.stride + 1;
  p.outW = (p.inW + 2 * p.pad - p.kernelW) / p.stride + 1;
  return p;
}

inline LrnParams randomLrn(Random& r) {
  LrnParams p;
  p.size = r.integer(1, 7);
  p.k = r.uniform(0.5f, 2.5f);
  p.alpha = r.uniform(1e-4f, 0.3f);
  p.beta = r.uniform(0.5f, 1.0f);
  return p;
}

inline DropoutParams randomDropout(Random& r) {
  DropoutParams p;
  p.rate = r.uniform(0.1f, 0.9f);
  p.seed = static_cast<uint64_t>(r.integer(0, 1 << 30));
  p.step = static_cast<uint64_t>(r.integer(0, 1000));
  p.layer = r.integer(0, 20);
  return p;
}

// Hexadecimal bits of a float, for messages about the last bit.
inline std::string bitsOf(float x) {
  uint32_t bits = 0;
  std::memcpy(&bits, &x, sizeof bits);
  char text[16];
  std::snprintf(text, sizeof text, "0x%08x", bits);
  return text;
}

// Every element identical, bit for bit (NaN payloads and the sign of zero
// included); the first difference is the failure message.
inline void requireSameBits(const float* expected, const float* actual, int64_t count,
                            const std::string& what) {
  for (int64_t i = 0; i < count; ++i) {
    if (std::memcmp(expected + i, actual + i, sizeof(float)) != 0) {
      FAIL(what << ": element " << i << " of " << count << " is " << actual[i] << " ("
                << bitsOf(actual[i]) << "), expected " << expected[i] << " (" << bitsOf(expected[i])
                << ")");
    }
  }
  SUCCEED(what << ": " << count << " elements identical");
}

// As requireSameBits, but where both are NaN their payloads may differ: an
// arithmetic result's NaN payload is left to the hardware by IEEE 754 (x86's
// SSE returns the NaN operand's, quieted: 0x7fc00000 + NaN is 0x7fc00000;
// an NVIDIA GPU returns its canonical 0x7fffffff, as an H100 did on
// 2026-11-27). For kernels that blend a NaN into dst (beta != 0).
inline void requireSameBitsOrNaN(const std::vector<float>& expected,
                                 const std::vector<float>& actual, const std::string& what) {
  REQUIRE(expected.size() == actual.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    if (std::isnan(expected[i]) && std::isnan(actual[i]))
      continue;
    if (std::memcmp(&expected[i], &actual[i], sizeof(float)) != 0) {
      FAIL(what << ": element " << i << " of " << expected.size() << " is " << actual[i] << " ("
                << bitsOf(actual[i]) << "), expected " << expected[i] << " (" << bitsOf(expected[i])
                << ")");
    }
  }
  SUCCEED(what << ": " << expected.size() << " elements identical (NaN payloads aside)");
}

inline void requireSameBits(const std::vector<float>& expected, const std::vector<float>& actual,
                            const std::string& what) {
  REQUIRE(expected.size() == actual.size());
  requireSameBits(expected.data(), actual.data(), static_cast<int64_t>(expected.size()), what);
}

// Every element within relative tolerance `relative` of the expected one (or
// `absolute` of it, for values near zero); NaN only where NaN is expected.
inline void requireClose(const float* expected, const float* actual, int64_t count, double relative,
                         double absolute, const std::string& what) {
  for (int64_t i = 0; i < count; ++i) {
    const double e = expected[i], a = actual[i];
    if (std::isnan(e) && std::isnan(a))
      continue;
    if (!(std::abs(a - e) <= std::max(absolute, relative * std::abs(e)))) {
      FAIL(what << ": element " << i << " of " << count << " is " << a << ", expected " << e
                << " (relative tolerance " << relative << ", absolute " << absolute << ")");
    }
  }
  SUCCEED(what << ": " << count << " elements within tolerance");
}

inline void requireClose(const std::vector<float>& expected, const std::vector<float>& actual,
                         double relative, double absolute, const std::string& what) {
  REQUIRE(expected.size() == actual.size());
  requireClose(expected.data(), actual.data(), static_cast<int64_t>(expected.size()), relative,
               absolute, what);
}

// "n x c x h x w" for messages.
inline std::string describe(Shape4 s) {
  return std::to_string(s.n) + "x" + std::to_string(s.c) + "x" + std::to_string(s.h) + "x" +
         std::to_string(s.w);
}

}  // namespace strata::kernels::test

// precision.h's casts (fp32 <-> bf16) against values worked out by hand from
// the bit patterns: round to nearest with ties to even, overflow to infinity,
// NaN kept (quiet, signed), denormals; and the bf16 GEMM reference that the
// CUDA tests compare cuBLAS and cuDNN with (tests/bf16_reference.h).
#include "strata/kernels/precision.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "bf16_reference.h"

namespace strata::kernels::test {
namespace {

using element::bf16FromFloat;
using element::bitsFloat;
using element::floatBits;
using element::floatFromBf16;

uint16_t castBits(uint32_t bits) {
  const float x = bitsFloat(bits);
  uint16_t y = 0xdead;
  twin::castToBf16(&x, &y, 1);
  CHECK(y == bf16FromFloat(x));  // the twin is the element function
  return y;
}

TEST_CASE("bf16 cast rounds to nearest, ties to even", "[kernels][precision]") {
  CHECK(castBits(0x3f800000u) == 0x3f80);  // 1.0 is exact
  CHECK(castBits(0xbfc00000u) == 0xbfc0);  // -1.5 is exact
  // 1 + 2^-8: exactly half a bf16 ulp (2^-7) above 1; 1 (0x3f80) is even.
  CHECK(castBits(0x3f808000u) == 0x3f80);
  // 1 + 3 * 2^-8: half an ulp above 0x3f81 (odd): up to 0x3f82.
  CHECK(castBits(0x3f818000u) == 0x3f82);
  // Just above the tie: up; just below: down.
  CHECK(castBits(0x3f808001u) == 0x3f81);
  CHECK(castBits(0x3f807fffu) == 0x3f80);
  // Negative ties go by the same bits: -(1 + 3 * 2^-8) to -(1 + 2^-6).
  CHECK(castBits(0xbf818000u) == 0xbf82);
  // A carry out of the mantissa raises the exponent: 2 - 2^-23 -> 2.
  CHECK(castBits(0x3fffffffu) == 0x4000);
  // Zeros keep their sign.
  CHECK(castBits(0x00000000u) == 0x0000);
  CHECK(castBits(0x80000000u) == 0x8000);
}

TEST_CASE("bf16 cast: overflow, infinities and NaN", "[kernels][precision]") {
  // The largest float is above bf16's largest finite (0x7f7f) by more than
  // half an ulp: infinity, with its sign.
  CHECK(castBits(0x7f7fffffu) == 0x7f80);
  CHECK(castBits(0xff7fffffu) == 0xff80);
  // Below the half-way point to infinity: the largest finite bf16.
  CHECK(castBits(0x7f7f7fffu) == 0x7f7f);
  CHECK(castBits(0x7f800000u) == 0x7f80);  // +inf
  CHECK(castBits(0xff800000u) == 0xff80);  // -inf
  // NaNs stay NaN (quiet), sign kept, even when the payload is only in the
  // dropped bits (plain truncation would make these infinities).
  CHECK(castBits(0x7fc00000u) == 0x7fc0);
  CHECK(castBits(0x7f800001u) == 0x7fc0);
  CHECK(castBits(0xff800001u) == 0xffc0);
  CHECK(castBits(0x7fa00000u) == 0x7fe0);  // payload's top bit kept, quiet bit set
  CHECK(std::isnan(floatFromBf16(castBits(0x7f800001u))));
  // Rounding must not carry a NaN's payload into the sign: 0x7fffffff.
  CHECK(castBits(0x7fffffffu) == 0x7fff);
}

TEST_CASE("bf16 cast: denormals round as any other value", "[kernels][precision]") {
  CHECK(castBits(0x00000001u) == 0x0000);  // the smallest denormal: under half of 0x0001
  CHECK(castBits(0x00008000u) == 0x0000);  // a tie onto 0 (even)
  CHECK(castBits(0x00018000u) == 0x0002);  // a tie above 0x0001 (odd): up
  CHECK(castBits(0x00010000u) == 0x0001);  // bf16's smallest denormal, 2^-133, is exact
  CHECK(castBits(0x807fffffu) == 0x8080);  // the largest denormal rounds up to -2^-126
  CHECK(floatFromBf16(0x0001) == std::ldexp(1.0f, -133));
  CHECK(floatFromBf16(0x0080) == std::numeric_limits<float>::min());
}

TEST_CASE("bf16 -> fp32 is exact, and beta 0 overwrites without reading", "[kernels][precision]") {
  const std::vector<uint16_t> x = {0x3f80, 0xbfc0, 0x4049, 0x0001, 0x7f80, 0xff80, 0x7fc0, 0x8000};
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> y(x.size(), nan);
  twin::castFromBf16(x.data(), y.data(), int64_t(x.size()), 0.0f);
  CHECK(y[0] == 1.0f);
  CHECK(y[1] == -1.5f);
  CHECK(y[2] == 3.140625f);  // 0x4049: 2 x (1 + 73/128)
  CHECK(y[3] == std::ldexp(1.0f, -133));
  CHECK(y[4] == std::numeric_limits<float>::infinity());
  CHECK(y[5] == -std::numeric_limits<float>::infinity());
  CHECK(std::isnan(y[6]));
  CHECK((y[7] == 0.0f && std::signbit(y[7])));
  // Round trip: every bf16 pattern that is not a NaN comes back unchanged.
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const float f = floatFromBf16(uint16_t(h));
    if (!std::isnan(f))
      REQUIRE(bf16FromFloat(f) == h);
  }
  // beta 1 adds, beta 0.5 scales the old value.
  std::vector<float> acc = {2.0f, 4.0f};
  const uint16_t one[] = {0x3f80, 0x3f80};
  twin::castFromBf16(one, acc.data(), 1, 1.0f);
  twin::castFromBf16(one + 1, acc.data() + 1, 1, 0.5f);
  CHECK(acc[0] == 3.0f);
  CHECK(acc[1] == 3.0f);
  // Casting then casting back rounds once: 1 + 3 * 2^-8 -> 1 + 2^-6.
  CHECK(element::roundThroughBf16(bitsFloat(0x3f818000u)) == 1.015625f);
  CHECK(floatBits(element::roundThroughBf16(1.0f)) == 0x3f800000u);
}

TEST_CASE("bf16 GEMM reference: operands rounded to bf16, fp32 sums", "[kernels][precision]") {
  // A (2 x 3), B (2 x 3): C = A B^T. 1 + 2^-8 rounds to 1 (tie to even),
  // 1 + 3 * 2^-8 to 1 + 2^-6, 3 + 2^-20 to 3: the products then are exact.
  const float t = 1.0f + std::ldexp(1.0f, -8), u = 1.0f + 3 * std::ldexp(1.0f, -8);
  const float v = 3.0f + std::ldexp(1.0f, -20);
  const std::vector<float> a = {t, 2.0f, -1.0f, u, 0.5f, v};
  const std::vector<float> b = {1.0f, 1.0f, 1.0f, 2.0f, -1.0f, u};
  const auto c = strata::test::bf16GemmNt(a, b, 2, 2, 3);
  const float u16 = 1.015625f;                    // u in bf16
  CHECK(c[0] == 1.0f + 2.0f - 1.0f);              // row 0 . (1, 1, 1)
  CHECK(c[1] == 2.0f - 2.0f - u16);               // row 0 . (2, -1, u)
  CHECK(c[2] == u16 + 0.5f + 3.0f);               // row 1 . (1, 1, 1)
  CHECK(c[3] == 2.0f * u16 - 0.5f + 3.0f * u16);  // row 1 . (2, -1, u)
  // The fp32 GEMM of the same operands differs: the rounding is visible.
  CHECK(float(t * 1.0f + 2.0f * 1.0f - 1.0f) != c[0]);
  CHECK(strata::test::roundedThroughBf16({t, u, v}) == std::vector<float>{1.0f, u16, 3.0f});
}

}  // namespace
}  // namespace strata::kernels::test

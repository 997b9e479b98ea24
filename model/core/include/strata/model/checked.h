// Checked integer arithmetic for counts: shape elements, parameters,
// multiply-accumulates, global batch. One place, so that every product of
// user-given integers is checked the same way (docs/configs.md, "Ranges").
#pragma once

#include <cstdint>
#include <limits>

namespace strata {

// The largest count strata computes with: per-example counts become doubles
// in the cost model, which represent every integer up to 2^53 exactly.
inline constexpr int64_t kMaxExactCount = int64_t{1} << 53;

// out = a * b for a, b >= 0; false when the product overflows int64 or
// exceeds `max` (out is then unspecified).
inline bool checkedMul(int64_t a, int64_t b, int64_t& out,
                       int64_t max = std::numeric_limits<int64_t>::max()) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r) || r > max)
    return false;
  out = r;
  return true;
}

// out = a + b; false when the sum overflows int64 or exceeds `max`.
inline bool checkedAdd(int64_t a, int64_t b, int64_t& out,
                       int64_t max = std::numeric_limits<int64_t>::max()) {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r) || r > max)
    return false;
  out = r;
  return true;
}

}  // namespace strata

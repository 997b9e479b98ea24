// Division of 64-bit indices by a divisor fixed for a whole kernel launch,
// as one high multiply, an add and two shifts: the CUDA kernels split a flat
// element index into (example, channel, position) this way, because a GPU
// has no integer divider and a 64-bit division is a long software routine
// that would make memory-bound kernels compute-bound.
//
// The method is Granlund and Montgomery's, "Division by Invariant Integers
// using Multiplication" (PLDI 1994), figure 4.1 (unsigned, N = 64): with
// l = ceil(log2 d) and m = floor(2^64 (2^l - d) / d) + 1,
//   t = mulhi(m, n),  n / d = (t + ((n - t) >> min(l, 1))) >> max(l - 1, 0)
// for every 0 <= n < 2^64. Divisors are limited to [1, 2^63] so 2^l fits.
// C++17, host and device (tests/kernels/ checks it on the host).
#pragma once

#include <cstdint>
#include <stdexcept>

#include "strata/kernels/hd.h"

namespace strata::kernels {

class Divider {
 public:
  Divider() = default;
  // Host only. Requires 1 <= divisor <= 2^63 (throws std::invalid_argument).
  explicit Divider(uint64_t divisor) : divisor_(divisor) {
    if (divisor == 0 || divisor > (uint64_t{1} << 63))
      throw std::invalid_argument("Divider: the divisor must be in [1, 2^63]");
    int l = 0;
    while (l < 64 && (uint64_t{1} << l) < divisor)
      ++l;
    // 2^64 (2^l - d) / d < 2^64 because 2^(l-1) < d (the paper's bound).
    __extension__ typedef unsigned __int128 Wide;
    const Wide numerator = static_cast<Wide>((uint64_t{1} << l) - divisor) << 64;
    magic_ = static_cast<uint64_t>(numerator / divisor) + 1;
    shift1_ = l < 1 ? l : 1;
    shift2_ = l > 1 ? l - 1 : 0;
  }

  STRATA_HD uint64_t divisor() const { return divisor_; }

  // n / divisor, exactly.
  STRATA_HD uint64_t quotient(uint64_t n) const {
    const uint64_t t = mulHigh(magic_, n);
    return (t + ((n - t) >> shift1_)) >> shift2_;
  }

  // n % divisor, given q = quotient(n).
  STRATA_HD uint64_t remainder(uint64_t n, uint64_t q) const { return n - q * divisor_; }

 private:
  // The high 64 bits of the 128-bit product a * b.
  STRATA_HD static uint64_t mulHigh(uint64_t a, uint64_t b) {
#if defined(__CUDA_ARCH__)
    return __umul64hi(a, b);
#else
    __extension__ typedef unsigned __int128 Wide;
    return static_cast<uint64_t>((static_cast<Wide>(a) * b) >> 64);
#endif
  }

  uint64_t divisor_ = 1;
  uint64_t magic_ = 1;
  int shift1_ = 0;
  int shift2_ = 0;
};

}  // namespace strata::kernels

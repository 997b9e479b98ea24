// Counter-based random numbers: a value is a pure function of its
// coordinates (seed, stream, index), with no generator state. This is what
// lets any worker produce any example, weight or dropout decision on its own
// and get the bits a single worker would have drawn, and a GPU thread the
// bits the CPU draws (every function is STRATA_HD: host and device).
#pragma once

#include <cmath>
#include <cstdint>

#include "strata/kernels/hd.h"

namespace strata::kernels {

// splitmix64's finaliser (Steele, Lea, Flood, "Fast splittable pseudorandom
// number generators", OOPSLA 2014): a bijective mix with full avalanche.
STRATA_HD inline uint64_t mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Hash of a coordinate tuple; chaining mix64 keeps distinct tuples apart.
STRATA_HD inline uint64_t hashOf(uint64_t a, uint64_t b) {
  return mix64(mix64(a) ^ b);
}
STRATA_HD inline uint64_t hashOf(uint64_t a, uint64_t b, uint64_t c) {
  return hashOf(hashOf(a, b), c);
}
STRATA_HD inline uint64_t hashOf(uint64_t a, uint64_t b, uint64_t c, uint64_t d) {
  return hashOf(hashOf(a, b, c), d);
}

// Uniform in [0, 1) from the top 24 bits (exactly representable in float).
STRATA_HD inline float uniformFloat(uint64_t bits) {
  return static_cast<float>(bits >> 40) * (1.0f / 16777216.0f);
}

// Standard normal from 64 random bits (Box-Muller on two 32-bit halves; the
// first half is shifted into (0, 1] so log() stays finite).
STRATA_HD inline float normalFloat(uint64_t bits) {
  const double u1 = (static_cast<double>(bits >> 32) + 1.0) * (1.0 / 4294967296.0);
  const double u2 = static_cast<double>(bits & 0xffffffffULL) * (1.0 / 4294967296.0);
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
}

}  // namespace strata::kernels

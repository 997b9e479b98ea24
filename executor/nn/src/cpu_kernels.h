// Inside the CPU kernels of one instruction set: the helpers that several of
// its files share (cpu_kernels.cpp lists the files). Compiled per ISA with
// them (cpu_isa.h): everything here lives in that ISA's namespace.
#pragma once

#ifndef STRATA_CPU_ISA
#error "cpu_kernels.h is for the per-ISA kernel files (STRATA_CPU_ISA names the ISA)"
#endif

#include <algorithm>
#include <cstdint>

#include "cpu_isa.h"
#include "thread_team.h"

namespace strata::nn::STRATA_CPU_ISA {

// The sum of n floats in an order fixed by n alone: 16 running sums over
// i mod 16, added 0..15, then the tail. Eigen's vectorised sum starts where
// the memory is aligned to its vector width, so its order (and last bits)
// would follow the buffer's address, which on AVX paths varies run to run
// for a malloc'd buffer. The lanes are independent sums, which the compiler
// vectorises without reordering: the same bits on every path.
inline float orderedSum(const float* x, int64_t n) {
  float lanes[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int j = 0; j < 16; ++j)
      lanes[j] += x[i + j];
  float sum = 0;
  for (float lane : lanes)
    sum += lane;
  for (; i < n; ++i)
    sum += x[i];
  return sum;
}

// Runs f(begin, end) over [0, count) cut into at most team.size() contiguous
// ranges of at least `grain` items each, on the team. For kernels whose items
// (elements, planes, channels, examples) are independent: every item is
// computed as on one thread, so the bits do not depend on the thread count.
template <class F>
void parallelRanges(ThreadTeam& team, int64_t count, int64_t grain, F&& f) {
  const int64_t most = count / std::max<int64_t>(grain, 1);
  const int parts = static_cast<int>(std::clamp<int64_t>(most, 1, team.size()));
  if (parts == 1) {
    f(int64_t{0}, count);
    return;
  }
  team.forEach(parts, [&](int t) {
    const auto [begin, end] = partOf(count, parts, t);
    f(begin, end);
  });
}

// Elementwise kernels split in ranges of at least this many elements (256
// KiB of floats, ~5 us of a memory-bound pass): less work than that does not
// pay for handing it to another core.
constexpr int64_t kElementGrain = 64 * 1024;

// dst = beta * dst before a kernel adds its result: beta is 0 (overwrite,
// which must not read dst: it may hold NaN from an earlier batch) or 1.
inline void scaleForAccumulate(float* dst, int64_t count, float beta) {
  if (beta == 0.0f) {
    std::fill_n(dst, count, 0.0f);
  } else if (beta != 1.0f) {
    for (int64_t i = 0; i < count; ++i)
      dst[i] *= beta;
  }
}

}  // namespace strata::nn::STRATA_CPU_ISA

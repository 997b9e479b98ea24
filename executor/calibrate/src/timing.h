// Wall-clock helpers of the measuring code (calibrate, kernel tables,
// profile). Internal to executor/calibrate.
#pragma once

#include <algorithm>
#include <chrono>
#include <vector>

namespace strata::exec::detail {

using Clock = std::chrono::steady_clock;

// Seconds since t0.
inline double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// The median of v (the upper one of an even count); v must not be empty.
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace strata::exec::detail

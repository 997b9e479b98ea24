#include "strata/model/fit.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

using namespace strata;

TEST_CASE("the alpha-beta fit recovers known alpha and beta from a timing table", "[fit]") {
  const double alpha = 2.5e-6, beta = 3.5e9;
  std::vector<TimingSample> samples;
  for (double n = 1024; n <= 64.0 * 1024 * 1024; n *= 4)
    samples.push_back({n, alpha + n / beta});
  const auto fit = fitAlphaBeta(samples);
  CHECK(fit.alpha.value() == Approx(alpha).epsilon(1e-9));
  CHECK(fit.beta.value() == Approx(beta).epsilon(1e-9));
  CHECK(fit.maxRelativeError < 1e-9);
}

TEST_CASE("the fit is robust to +-5 % noise", "[fit]") {
  const double alpha = 10e-6, beta = 1e9;
  std::vector<TimingSample> samples;
  int i = 0;
  for (double n = 1024; n <= 64.0 * 1024 * 1024; n *= 2, ++i)
    samples.push_back({n, (alpha + n / beta) * (i % 2 ? 1.05 : 0.95)});
  const auto fit = fitAlphaBeta(samples);
  CHECK(fit.alpha.value() == Approx(alpha).epsilon(0.1));
  CHECK(fit.beta.value() == Approx(beta).epsilon(0.1));
  CHECK(fit.maxRelativeError < 0.1);
}

TEST_CASE("effective bandwidth table and its interpolation", "[fit]") {
  // Small messages slow (a per-message cost on top of alpha), large fast.
  const std::vector<TimingSample> samples = {{1e3, 2e-6 + 1e3 / 1e8}, {1e6, 2e-6 + 1e6 / 1e9}};
  const auto table = bandwidthTable(samples, Seconds(2e-6));
  REQUIRE(table.size() == 2);
  CHECK(table[0].bandwidth.value() == Approx(1e8));
  CHECK(table[1].bandwidth.value() == Approx(1e9));
  CHECK(interpolateBandwidth(table, Bytes(1e2)).value() == Approx(1e8));  // held below
  CHECK(interpolateBandwidth(table, Bytes(1e7)).value() == Approx(1e9));  // held above
  // Halfway in log(n) between 1e3 and 1e6: sqrt(1e9) = 31622.8 bytes.
  CHECK(interpolateBandwidth(table, Bytes(std::sqrt(1e9))).value() == Approx(5.5e8));
}

TEST_CASE("the effective cache fit recovers the cache an LRU share was made with", "[fit]") {
  constexpr double MiB = 1024.0 * 1024;
  const double reported = 480 * MiB, operand = 64 * MiB;
  std::vector<double> distances;
  for (double part : {1.0 / 16, 1.0 / 8, 1.0 / 4, 1.0 / 2, 1.0})
    distances.push_back(part * reported);
  auto sharesOf = [&](double cache) {
    std::vector<double> s;
    for (double d : distances)
      s.push_back(1.0 - std::min(1.0, cache / (d + operand)));
    return s;
  };
  // The grid steps by 480^(1/96) (6.6 %): the fit lands within one step.
  for (double cache : {40 * MiB, 100 * MiB, 300 * MiB}) {
    INFO("cache " << cache / MiB << " MiB");
    const double fit = fitEffectiveCache(distances, sharesOf(cache), operand, reported);
    CHECK(fit == Approx(cache).epsilon(0.034));
  }
  // No slowdown at any distance: the reported cache stands.
  CHECK(fitEffectiveCache(distances, std::vector<double>(5, 0.0), operand, reported) == reported);
  // Cold at every distance: the smallest size tried, 1 MiB.
  CHECK(fitEffectiveCache(distances, std::vector<double>(5, 1.0), operand, reported) ==
        Approx(1 * MiB));
}

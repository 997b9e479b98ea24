// Divider (the CUDA kernels' division of indices) against the `/` operator,
// on the host: the same code runs on the device with __umul64hi.
#include "strata/kernels/divider.h"

#include <catch2/catch.hpp>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

namespace strata::kernels {
namespace {

// Numerators around the multiples of d and at the ends of the range.
std::vector<uint64_t> numeratorsFor(uint64_t d, std::mt19937_64& engine) {
  const uint64_t max = std::numeric_limits<uint64_t>::max();
  std::vector<uint64_t> out = {0, 1, 2, d - 1, d, d + 1, max, max - 1, max - d, max / 2};
  for (uint64_t k : {uint64_t{2}, uint64_t{3}, uint64_t{1} << 20, max / d}) {
    if (d <= max / k) {
      out.push_back(k * d);
      out.push_back(k * d - 1);
      if (k * d < max)
        out.push_back(k * d + 1);
    }
  }
  for (int i = 0; i < 64; ++i) {
    out.push_back(engine());
    out.push_back(engine() >> (engine() % 64));
  }
  return out;
}

TEST_CASE("Divider equals integer division over the whole 64-bit range") {
  std::mt19937_64 engine(42);
  std::vector<uint64_t> divisors;
  for (uint64_t d = 1; d <= 1000; ++d)
    divisors.push_back(d);
  for (int shift = 10; shift <= 63; ++shift) {
    const uint64_t power = uint64_t{1} << shift;
    divisors.insert(divisors.end(), {power - 1, power});
    if (shift < 63)
      divisors.push_back(power + 1);
  }
  for (int i = 0; i < 200; ++i)
    divisors.push_back((engine() >> (1 + engine() % 63)) | 1);
  for (uint64_t d : divisors) {
    const Divider divider(d);
    for (uint64_t n : numeratorsFor(d, engine)) {
      const uint64_t q = divider.quotient(n);
      if (q != n / d || divider.remainder(n, q) != n % d)
        FAIL(n << " / " << d << " gave " << q << ", expected " << n / d);
    }
  }
  SUCCEED(divisors.size() << " divisors checked");
}

TEST_CASE("Divider rejects 0 and divisors above 2^63") {
  CHECK_THROWS_AS(Divider(0), std::invalid_argument);
  CHECK_THROWS_AS(Divider((uint64_t{1} << 63) + 1), std::invalid_argument);
  CHECK(Divider(uint64_t{1} << 63).quotient(std::numeric_limits<uint64_t>::max()) == 1);
}

}  // namespace
}  // namespace strata::kernels

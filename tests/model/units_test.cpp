#include "strata/model/units.h"

#include <catch2/catch.hpp>

#include "strata/model/quantity_text.h"

using namespace strata;

TEST_CASE("quantities parse with their units", "[units]") {
  CHECK(*parseQuantity("1.5 us", QuantityKind::kTime) == Approx(1.5e-6));
  CHECK(*parseQuantity("0 s", QuantityKind::kTime) == 0.0);
  CHECK(*parseQuantity("16 GiB", QuantityKind::kBytes) == 16.0 * 1024 * 1024 * 1024);
  CHECK(*parseQuantity("5 GB", QuantityKind::kBytes) == 5e9);
  CHECK(*parseQuantity("400 Gb/s", QuantityKind::kBandwidth) == Approx(50e9));
  CHECK(*parseQuantity("6 GB/s", QuantityKind::kBandwidth) == 6e9);
  CHECK(*parseQuantity("3.52 TFLOP/s", QuantityKind::kFlopRate) == Approx(3.52e12));
  CHECK_FALSE(parseQuantity("1e9", QuantityKind::kBandwidth));  // 1e9 what? a unit is required
  CHECK(*parseQuantity("1e9", QuantityKind::kBandwidth, UnitRule::kImplied) == 1e9);  // base unit
  CHECK(*parseQuantity("0", QuantityKind::kTime) == 0.0);  // 0 is 0 in every unit
  CHECK(*parseQuantity("4MiB", QuantityKind::kBytes) == 4.0 * 1024 * 1024);
}

TEST_CASE("quantities with a wrong unit or no number are rejected", "[units]") {
  CHECK_FALSE(parseQuantity("6 parsecs", QuantityKind::kBandwidth));
  CHECK_FALSE(parseQuantity("6 GB", QuantityKind::kBandwidth));  // bytes are not a rate
  CHECK_FALSE(parseQuantity("fast", QuantityKind::kTime));
  CHECK_FALSE(parseQuantity("", QuantityKind::kTime));
  CHECK_FALSE(parseQuantity("1 TFLOP/s", QuantityKind::kTime));
}

TEST_CASE("printed quantities carry a unit", "[units]") {
  CHECK(formatSeconds(Seconds(0.0123)) == "12.3 ms");
  CHECK(formatSeconds(Seconds(1.2)) == "1.20 s");
  CHECK(formatSeconds(Seconds(36.5e-6)) == "36.5 us");
  CHECK(formatBytes(Bytes(1.2e9)) == "1.20 GB");
  CHECK(formatBytes(Bytes(0)) == "0 B");
  CHECK(formatSeconds(Seconds(0)) == "0 s");
  CHECK(formatSeconds(Seconds(1e-18)) == "0 s");
  CHECK(formatBandwidth(BytesPerSecond(6e9)) == "6.00 GB/s");
  CHECK(formatFlopRate(FlopsPerSecond(3.52e12)) == "3.52 TFLOP/s");
  CHECK(formatFlops(Flops(1.43e9)) == "1.43 GFLOP");
}

TEST_CASE("unit arithmetic gives the right unit", "[units]") {
  constexpr Seconds t = Bytes(1.2e9) / BytesPerSecond(1e9);
  static_assert(t.value() > 1.19 && t.value() < 1.21);
  const Seconds c = Flops(2e12) / FlopsPerSecond(1e12);
  CHECK(c.value() == 2.0);
  CHECK((BytesPerSecond(1e9) * Seconds(2)).value() == 2e9);
}

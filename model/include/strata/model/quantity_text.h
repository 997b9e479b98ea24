// Reading and writing quantities with units ("1.5 us", "16 GiB", "400 Gb/s").
//
// Configs and command-line options accept these forms; every number strata
// prints goes through the formatters so it always carries its unit.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "strata/model/units.h"

namespace strata {

enum class QuantityKind { kTime, kBytes, kBandwidth, kFlopRate, kCount };

// Parses a plain number (SI base unit) or "number unit" for the given kind.
// Returns nullopt when the text is not a number or the unit does not belong to
// the kind. Does not check the sign; callers decide what range is valid.
std::optional<double> parseQuantity(std::string_view text, QuantityKind kind);

// The units accepted for a kind, for error messages ("s, ms, us, ns").
std::string acceptedUnits(QuantityKind kind);

// Human-readable forms with three significant digits and a unit chosen so the
// number reads well: "12.3 ms", "1.21 GB", "5.96 GB/s", "3.52 TFLOP/s".
std::string formatSeconds(Seconds t);
std::string formatBytes(Bytes b);
std::string formatBandwidth(BytesPerSecond r);
std::string formatFlops(Flops f);
std::string formatFlopRate(FlopsPerSecond r);

}  // namespace strata

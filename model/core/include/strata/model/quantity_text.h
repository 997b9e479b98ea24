// Reading and writing quantities with units ("1.5 us", "16 GiB", "400 Gb/s").
//
// Configs and command-line options accept these forms; every number strata
// prints goes through the formatters so it always carries its unit.
//
// Reading is strict, because a quantity read wrong is a wrong answer printed
// with exit status 0: the number must be finite, not denormal, not negative,
// not hexadecimal, carry a unit of its kind (a bare number is accepted only
// when it is exactly 0, or when the caller says the unit is implied by the
// key's name), and lie in its kind's physical range (quantityRange).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "strata/model/units.h"

namespace strata {

enum class QuantityKind { kTime, kBytes, kBandwidth, kFlopRate, kCount };

// Whether a number without a unit is accepted.
enum class UnitRule {
  // "5" is an error (5 what?); "0" alone is accepted, being 0 in every unit.
  kRequired,
  // A bare number is in SI base units: for keys whose name says the unit
  // (`bytes:` of a bandwidth table); a unit is still accepted.
  kImplied,
};

// The range a non-zero quantity of a kind must lie in, and why: values
// outside it are unit mistakes, not machines (docs/configs.md, "Ranges").
struct QuantityRange {
  double min = 0;
  double max = 0;
  const char* what = "";  // "a time", "a size"
  const char* why = "";   // the reason for the bounds, for error messages and docs
};
QuantityRange quantityRange(QuantityKind kind);

// A quantity read from text: its value in SI base units, or why it could not
// be read (a phrase such as "needs a unit (a time: s, ms, us, ns)"; the caller
// adds the text and where it came from).
struct QuantityReading {
  std::optional<double> value;
  std::string error;
};

// Reads "number unit" (or a bare number as `rule` allows) as `kind`, with
// every check above. Zero is returned as 0; whether 0 is allowed is the
// caller's decision.
QuantityReading readQuantity(std::string_view text, QuantityKind kind,
                             UnitRule rule = UnitRule::kRequired);

// readQuantity's value, or nullopt when the text is rejected.
std::optional<double> parseQuantity(std::string_view text, QuantityKind kind,
                                    UnitRule rule = UnitRule::kRequired);

// The units accepted for a kind, for error messages ("s, ms, us, ns").
std::string acceptedUnits(QuantityKind kind);

// ---- command-line values ------------------------------------------------------
// Each throws OptionError naming `option` and quoting the text when the text is
// not a valid value; they are the CLI's parsers for -b, -k, --segment, --bucket,
// --timeout and friends.

// A size option such as --segment or --bucket: a unit is required; "0" alone
// means off when `zeroMeansOff` (else 0 is an error). A non-zero size below one
// byte is an error (it would round to 0, which means off).
Bytes parseSizeOption(std::string_view text, const std::string& option, bool zeroMeansOff);
// A time option such as --timeout: a unit is required; must be positive.
Seconds parseTimeOption(std::string_view text, const std::string& option);
// A positive integer option such as --batch or --workers, at most `max`
// (digits only: no sign, exponent, fraction or hexadecimal).
int parseCountOption(std::string_view text, const std::string& option, int max = 2'147'483'647);
// A comma-separated list of them ("1,2,4,8").
std::vector<int> parseCountListOption(std::string_view text, const std::string& option,
                                      int max = 2'147'483'647);

// Human-readable forms with three significant digits and a unit chosen so the
// number reads well: "12.3 ms", "1.21 GB", "5.96 GB/s", "3.52 TFLOP/s".
std::string formatSeconds(Seconds t);
std::string formatBytes(Bytes b);
std::string formatBandwidth(BytesPerSecond r);
std::string formatFlops(Flops f);
std::string formatFlopRate(FlopsPerSecond r);

}  // namespace strata

#include "strata/model/quantity_text.h"

#include <fmt/format.h>

#include <array>
#include <cfloat>
#include <charconv>
#include <cmath>
#include <utility>

#include "strata/model/error.h"

namespace strata {

namespace {

struct UnitScale {
  std::string_view name;
  double scale;
};

// Bandwidth in bits is converted to bytes (factor 1/8).
constexpr std::array kTimeUnits{UnitScale{"s", 1.0}, UnitScale{"ms", 1e-3}, UnitScale{"us", 1e-6},
                                UnitScale{"ns", 1e-9}};
constexpr std::array kByteUnits{
    UnitScale{"B", 1.0},         UnitScale{"KB", 1e3},           UnitScale{"MB", 1e6},
    UnitScale{"GB", 1e9},        UnitScale{"TB", 1e12},          UnitScale{"KiB", 1024.0},
    UnitScale{"MiB", 1048576.0}, UnitScale{"GiB", 1073741824.0}, UnitScale{"TiB", 1099511627776.0}};
constexpr std::array kBandwidthUnits{
    UnitScale{"B/s", 1.0},         UnitScale{"KB/s", 1e3},           UnitScale{"MB/s", 1e6},
    UnitScale{"GB/s", 1e9},        UnitScale{"TB/s", 1e12},          UnitScale{"KiB/s", 1024.0},
    UnitScale{"MiB/s", 1048576.0}, UnitScale{"GiB/s", 1073741824.0}, UnitScale{"Mb/s", 1e6 / 8},
    UnitScale{"Gb/s", 1e9 / 8},    UnitScale{"Mbit/s", 1e6 / 8},     UnitScale{"Gbit/s", 1e9 / 8}};
constexpr std::array kFlopRateUnits{UnitScale{"FLOP/s", 1.0}, UnitScale{"GFLOP/s", 1e9},
                                    UnitScale{"TFLOP/s", 1e12}, UnitScale{"PFLOP/s", 1e15}};

template <size_t N>
std::optional<double> scaleFor(std::string_view unit, const std::array<UnitScale, N>& units) {
  for (const auto& u : units)
    if (u.name == unit)
      return u.scale;
  return std::nullopt;
}

std::optional<double> unitScale(std::string_view unit, QuantityKind kind) {
  switch (kind) {
    case QuantityKind::kTime:
      return scaleFor(unit, kTimeUnits);
    case QuantityKind::kBytes:
      return scaleFor(unit, kByteUnits);
    case QuantityKind::kBandwidth:
      return scaleFor(unit, kBandwidthUnits);
    case QuantityKind::kFlopRate:
      return scaleFor(unit, kFlopRateUnits);
    case QuantityKind::kCount:
      return std::nullopt;
  }
  return std::nullopt;
}

template <size_t N>
std::string joinUnits(const std::array<UnitScale, N>& units) {
  std::string out;
  for (const auto& u : units) {
    if (!out.empty())
      out += ", ";
    out += u.name;
  }
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t'))
    s.remove_suffix(1);
  return s;
}

// Picks the largest unit whose scale is <= |v| (or the smallest) and prints
// three significant digits.
std::string withUnit(double v, std::initializer_list<std::pair<double, const char*>> units) {
  const double a = std::fabs(v);
  // Zero (and rounding noise far below the smallest unit) prints as "0 <base unit>".
  if (a < (units.end() - 1)->first * 1e-3) {
    for (const auto& u : units)
      if (u.first == 1.0)
        return fmt::format("0 {}", u.second);
    return fmt::format("0 {}", (units.end() - 1)->second);
  }
  auto chosen = *(units.end() - 1);
  for (const auto& u : units) {
    if (a >= u.first * 0.9995) {
      chosen = u;
      break;
    }
  }
  const double x = v / chosen.first;
  const double ax = std::fabs(x);
  if (ax >= 1e4)  // beyond the largest unit: scientific, still three digits
    return fmt::format("{:.2e} {}", x, chosen.second);
  const int decimals = ax >= 100 ? 0 : ax >= 10 ? 1 : 2;
  return fmt::format("{:.{}f} {}", x, decimals, chosen.second);
}

}  // namespace

namespace {

// The text's number, checked: finite, not denormal, not hexadecimal, not
// negative. Returns the number and the rest of the text (the unit), or an
// error phrase.
struct NumberPart {
  double value = 0;
  std::string_view rest;
  std::string error;
};

NumberPart readNumber(std::string_view text) {
  NumberPart out;
  if (text.empty()) {
    out.error = "is empty";
    return out;
  }
  // from_chars reads no hexadecimal (it would read the 0 of "0x1p3" and
  // leave "x1p3" as the unit); say so rather than "unknown unit".
  const size_t digits = text[0] == '-' ? 1 : 0;
  if (text.size() > digits + 1 && text[digits] == '0' &&
      (text[digits + 1] == 'x' || text[digits + 1] == 'X')) {
    out.error = "is hexadecimal (write a decimal number)";
    return out;
  }
  const char* begin = text.data();
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(begin, end, out.value);
  if (ec == std::errc::result_out_of_range) {
    out.error = "is out of range (too large or too small for a number)";
    return out;
  }
  if (ec != std::errc() || ptr == begin) {
    out.error = "is not a number";
    return out;
  }
  if (std::isnan(out.value) || std::isinf(out.value)) {
    out.error = "must be a finite number";
    return out;
  }
  if (std::fpclassify(out.value) == FP_SUBNORMAL) {
    out.error = "is too small to compute with (a denormal number)";
    return out;
  }
  if (out.value < 0) {
    out.error = "must not be negative";
    return out;
  }
  out.value = out.value == 0 ? 0.0 : out.value;  // -0 reads as 0
  out.rest = std::string_view(ptr, static_cast<size_t>(end - ptr));
  return out;
}

// "a time (s, ms, us, ns)"
std::string kindWithUnits(QuantityKind kind) {
  return std::string(quantityRange(kind).what) + " (" + acceptedUnits(kind) + ")";
}

// 1e6 s as "1e+06 s" is hard to read; ranges print in the kind's own units.
std::string rangeBound(QuantityKind kind, double v) {
  switch (kind) {
    case QuantityKind::kTime:
      return fmt::format("{:g} s", v);  // 1e-15 s is below formatSeconds' smallest unit
    case QuantityKind::kBytes:
      return v >= 1e15 ? fmt::format("2^53 B ({})", formatBytes(Bytes(v))) : formatBytes(Bytes(v));
    case QuantityKind::kBandwidth:
      return formatBandwidth(BytesPerSecond(v));
    case QuantityKind::kFlopRate:
      return formatFlopRate(FlopsPerSecond(v));
    case QuantityKind::kCount:
      return fmt::format("{:g}", v);
  }
  return fmt::format("{:g}", v);
}

}  // namespace

QuantityRange quantityRange(QuantityKind kind) {
  switch (kind) {
    case QuantityKind::kTime:
      return {1e-15, 1e6, "a time",
              "nothing a computer does is shorter than a femtosecond, and no step, latency or "
              "timeout strata handles is longer than a million seconds (11.6 days)"};
    case QuantityKind::kBytes:
      return {1.0, 9007199254740992.0, "a size",
              "a size is a whole number of bytes, and 2^53 B (9 PB) is the largest the cost "
              "model's double arithmetic counts exactly"};
    case QuantityKind::kBandwidth:
      return {1.0, 1e15, "a bandwidth",
              "below a byte per second nothing moves, and 1 PB/s is 200 times the fastest "
              "memory (HBM3e, ~5 TB/s) or link built"};
    case QuantityKind::kFlopRate:
      return {1.0, 1e18, "a compute rate",
              "one device does at least one FLOP per second and not an exaFLOP per second (an "
              "H100 does 2e15 with sparsity)"};
    case QuantityKind::kCount:
      return {0.0, 9007199254740992.0, "a count", "counts beyond 2^53 are not exact"};
  }
  return {};
}

QuantityReading readQuantity(std::string_view text, QuantityKind kind, UnitRule rule) {
  QuantityReading out;
  text = trim(text);
  NumberPart number = readNumber(text);
  if (!number.error.empty()) {
    out.error = number.error;
    return out;
  }
  const std::string_view unit = trim(number.rest);
  double value = number.value;
  if (unit.empty()) {
    // 0 is 0 in every unit; any other bare number is ambiguous.
    if (value != 0 && rule == UnitRule::kRequired && kind != QuantityKind::kCount) {
      out.error = "needs a unit: " + kindWithUnits(kind);
      return out;
    }
  } else {
    const auto scale = unitScale(unit, kind);
    if (!scale) {
      out.error = "unknown unit '" + std::string(unit) + "' for " + kindWithUnits(kind);
      return out;
    }
    value *= *scale;
    if (!std::isfinite(value)) {
      out.error = "is out of range (too large for a number)";
      return out;
    }
  }
  if (value != 0) {
    const auto range = quantityRange(kind);
    if (kind == QuantityKind::kBytes && value < range.min) {
      out.error = "is less than one byte (it would round to 0; write 0 where 0 is meant)";
      return out;
    }
    if (value < range.min || value > range.max) {
      out.error = fmt::format("is outside the range of {}, {} .. {} ({})", range.what,
                              rangeBound(kind, range.min), rangeBound(kind, range.max), range.why);
      return out;
    }
  }
  out.value = value;
  return out;
}

std::optional<double> parseQuantity(std::string_view text, QuantityKind kind, UnitRule rule) {
  return readQuantity(text, kind, rule).value;
}

std::string acceptedUnits(QuantityKind kind) {
  switch (kind) {
    case QuantityKind::kTime:
      return joinUnits(kTimeUnits);
    case QuantityKind::kBytes:
      return joinUnits(kByteUnits);
    case QuantityKind::kBandwidth:
      return joinUnits(kBandwidthUnits);
    case QuantityKind::kFlopRate:
      return joinUnits(kFlopRateUnits);
    case QuantityKind::kCount:
      return "none";
  }
  return "none";
}

Bytes parseSizeOption(std::string_view text, const std::string& option, bool zeroMeansOff) {
  const auto r = readQuantity(text, QuantityKind::kBytes);
  const std::string hint = zeroMeansOff ? "; e.g. 1MiB, or 0 for off" : "; e.g. 1MiB";
  if (!r.value)
    throw OptionError(option, r.error + ", got '" + std::string(text) + "'" + hint);
  if (*r.value == 0 && !zeroMeansOff)
    throw OptionError(option, "must be at least 1 B, got '" + std::string(text) + "'" + hint);
  return Bytes(*r.value);
}

Seconds parseTimeOption(std::string_view text, const std::string& option) {
  const auto r = readQuantity(text, QuantityKind::kTime);
  if (!r.value)
    throw OptionError(option, r.error + ", got '" + std::string(text) + "'; e.g. 30s");
  if (*r.value == 0)
    throw OptionError(option, "must be a positive time, got '" + std::string(text) + "'; e.g. 30s");
  return Seconds(*r.value);
}

int parseCountOption(std::string_view text, const std::string& option, int max) {
  const std::string quoted = fmt::format("'{}'", text);
  bool digits = !text.empty();
  for (char c : text)
    digits = digits && c >= '0' && c <= '9';
  if (!digits)
    throw OptionError(option, "must be a positive integer, got " + quoted);
  int64_t v = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec == std::errc::result_out_of_range || (ec == std::errc() && v > max))
    throw OptionError(option, fmt::format("is too large: at most {}, got {}", max, quoted));
  if (ec != std::errc() || ptr != text.data() + text.size() || v < 1)
    throw OptionError(option, "must be a positive integer, got " + quoted);
  return static_cast<int>(v);
}

std::vector<int> parseCountListOption(std::string_view text, const std::string& option, int max) {
  std::vector<int> out;
  size_t begin = 0;
  while (true) {
    const size_t comma = text.find(',', begin);
    const auto item =
        text.substr(begin, comma == std::string_view::npos ? text.npos : comma - begin);
    try {
      out.push_back(parseCountOption(item, option, max));
    } catch (const OptionError& e) {
      // Name the whole list too: "--workers: ... got '' in '1,,2'".
      if (text.find(',') == std::string_view::npos)
        throw;
      throw OptionError(option, std::string(e.what()).substr(option.size() + 2) + " in '" +
                                    std::string(text) + "'");
    }
    if (comma == std::string_view::npos)
      break;
    begin = comma + 1;
  }
  // Each value once: a row printed twice or merged silently is never meant.
  for (size_t i = 0; i < out.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (out[i] == out[j])
        throw OptionError(option, fmt::format("lists {} twice in '{}' (give each once)", out[i],
                                              std::string(text)));
  return out;
}

std::string formatSeconds(Seconds t) {
  return withUnit(t.value(), {{1.0, "s"}, {1e-3, "ms"}, {1e-6, "us"}, {1e-9, "ns"}});
}
std::string formatBytes(Bytes b) {
  return withUnit(b.value(), {{1e12, "TB"}, {1e9, "GB"}, {1e6, "MB"}, {1e3, "KB"}, {1.0, "B"}});
}
std::string formatBandwidth(BytesPerSecond r) {
  return withUnit(r.value(),
                  {{1e12, "TB/s"}, {1e9, "GB/s"}, {1e6, "MB/s"}, {1e3, "KB/s"}, {1.0, "B/s"}});
}
std::string formatFlops(Flops f) {
  return withUnit(f.value(), {{1e15, "PFLOP"},
                              {1e12, "TFLOP"},
                              {1e9, "GFLOP"},
                              {1e6, "MFLOP"},
                              {1e3, "KFLOP"},
                              {1.0, "FLOP"}});
}
std::string formatFlopRate(FlopsPerSecond r) {
  return withUnit(
      r.value(),
      {{1e15, "PFLOP/s"}, {1e12, "TFLOP/s"}, {1e9, "GFLOP/s"}, {1e6, "MFLOP/s"}, {1.0, "FLOP/s"}});
}

}  // namespace strata

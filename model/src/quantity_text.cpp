#include "strata/model/quantity_text.h"

#include <fmt/format.h>

#include <array>
#include <charconv>
#include <cmath>
#include <utility>

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

std::optional<double> parseQuantity(std::string_view text, QuantityKind kind) {
  text = trim(text);
  if (text.empty())
    return std::nullopt;
  double value = 0.0;
  const char* begin = text.data();
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(begin, end, value);
  if (ec != std::errc() || !std::isfinite(value))
    return std::nullopt;
  const std::string_view unit = trim(std::string_view(ptr, static_cast<size_t>(end - ptr)));
  if (unit.empty())
    return value;
  const auto scale = unitScale(unit, kind);
  if (!scale)
    return std::nullopt;
  return value * *scale;
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

#include "strata/model/cluster.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>

#include "strata/model/checked.h"
#include "strata/model/error.h"
#include "strata/model/limits.h"
#include "strata/model/quantity_text.h"

namespace strata {

std::string_view toString(ElementType type) {
  switch (type) {
    case ElementType::kFp32:
      return "fp32";
    case ElementType::kFp16:
      return "fp16";
    case ElementType::kBf16:
      return "bf16";
    case ElementType::kTf32:
      return "tf32";
  }
  return "?";
}

double elementBytes(ElementType type) {
  return isMixedPrecision(type) ? 2.0 : 4.0;
}

bool isMixedPrecision(ElementType type) {
  return type == ElementType::kFp16 || type == ElementType::kBf16;
}

ElementType parseElementType(std::string_view text, const std::string& option) {
  for (auto t : kAllElementTypes)
    if (text == toString(t))
      return t;
  throw OptionError(option, "unknown element type '" + std::string(text) +
                                "' (expected fp32, tf32, fp16 or bf16)");
}

FlopsPerSecond DeviceSpec::peakFor(ElementType type, const std::string& clusterFile) const {
  const auto p = peak[static_cast<size_t>(type)];
  if (p.value() <= 0)
    throw OptionError("--element", std::string(toString(type)) + ": the device of " + clusterFile +
                                       " has no peak for it (device.peak." +
                                       std::string(toString(type)) + ")");
  return p;
}

namespace {
// A figure by workers per node from rows sorted by workers: linear between
// rows, the first row below them. Beyond the last row, a speed shares the last
// row's total throughput (speed x last / workers); a time stays the last row's.
enum class Beyond { kShareThroughput, kHold };
double interpolateRows(const std::vector<std::pair<int, double>>& rows, int workers,
                       Beyond beyond) {
  if (workers <= rows.front().first)
    return rows.front().second;
  for (size_t i = 1; i < rows.size(); ++i) {
    const auto [k1, s1] = rows[i];
    if (workers <= k1) {
      const auto [k0, s0] = rows[i - 1];
      return s0 + (s1 - s0) * double(workers - k0) / double(k1 - k0);
    }
  }
  const auto [kn, sn] = rows.back();
  return beyond == Beyond::kHold ? sn : sn * double(kn) / double(workers);
}
double interpolateSharing(const std::vector<std::pair<int, double>>& sharing, int workers) {
  return sharing.empty() ? 1.0 : interpolateRows(sharing, workers, Beyond::kShareThroughput);
}
}  // namespace

double DeviceSpec::sharingSpeed(int workers) const {
  return interpolateSharing(sharing, workers);
}

double DeviceSpec::overlapComputeSpeed(int workers) const {
  return overlapCompute.empty() ? 1.0 : std::min(1.0, interpolateSharing(overlapCompute, workers));
}

double DeviceSpec::overlapCommSpeed(int workers) const {
  return overlapComm.empty() ? 1.0 : std::min(1.0, interpolateSharing(overlapComm, workers));
}

namespace {
// A row's curve at `duty`, with (0, 1) and (1, saturated) as its ends.
double curveAt(const std::vector<std::pair<double, double>>& points, double saturated,
               double duty) {
  double d0 = 0, s0 = 1;
  for (const auto& [d1, s1] : points) {
    if (duty <= d1)
      return d1 > d0 ? s0 + (s1 - s0) * (duty - d0) / (d1 - d0) : s1;
    d0 = d1;
    s0 = s1;
  }
  return d0 < 1 ? s0 + (saturated - s0) * (duty - d0) / (1 - d0) : s0;
}
}  // namespace

double DeviceSpec::overlapCommSpeedAt(int workers, double duty) const {
  duty = std::clamp(duty, 0.0, 1.0);
  const double saturated = overlapCommSpeed(workers);
  if (duty >= 1)
    return saturated;
  if (overlapCommByDuty.empty())
    return 1 - duty * (1 - saturated);
  // Each row's share of its saturated slowdown at `duty` (d where the row
  // is not slowed at all).
  std::vector<std::pair<int, double>> shares;
  for (const auto& [k, points] : overlapCommByDuty) {
    const double rowSaturated = overlapCommSpeed(k);
    const double s = curveAt(points, rowSaturated, duty);
    shares.push_back({k, rowSaturated < 1 ? (1 - s) / (1 - rowSaturated) : duty});
  }
  const double share = interpolateRows(shares, workers, Beyond::kHold);
  return std::clamp(1 - share * (1 - saturated), 1e-6, 1.0);
}

std::vector<double> DeviceSpec::overlapCommDutyBreaks() const {
  std::vector<double> out{0.0, 1.0};
  for (const auto& row : overlapCommByDuty)
    for (const auto& point : row.second)
      out.push_back(point.first);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

double DeviceSpec::overlapCommRateFor(int workers) const {
  return overlapCommRate.empty() ? 0.0 : interpolateSharing(overlapCommRate, workers);
}

Seconds DeviceSpec::handoffFor(int workers) const {
  return handoffs.empty() ? laneHandoff
                          : Seconds(interpolateRows(handoffs, workers, Beyond::kHold));
}

double DeviceSpec::sharingMemorySpeed(int workers) const {
  return sharingMemory.empty() ? sharingSpeed(workers) : interpolateSharing(sharingMemory, workers);
}

double DeviceSpec::sharingMemorySpeed(int workers, double bytes) const {
  if (sharingMemoryBySize.empty() || sharingMemoryBySize.size() != sharingMemory.size())
    return sharingMemorySpeed(workers);
  // Each row's speed at `bytes`, then across rows by workers as the others.
  std::vector<std::pair<int, double>> rows;
  for (const auto& [rowWorkers, bySize] : sharingMemoryBySize) {
    double speed = bySize.front().second;
    if (bytes >= bySize.back().first) {
      speed = bySize.back().second;
    } else {
      for (size_t i = 1; i < bySize.size(); ++i) {
        if (bytes > bySize[i].first)
          continue;
        const auto& [b0, s0] = bySize[i - 1];
        const auto& [b1, s1] = bySize[i];
        const double f = bytes <= b0 ? 0.0 : std::log(bytes / b0) / std::log(b1 / b0);
        speed = s0 + f * (s1 - s0);
        break;
      }
    }
    rows.push_back({rowWorkers, speed});
  }
  return interpolateSharing(rows, workers);
}

int64_t Cluster::capacity() const {
  int64_t n = 1;
  for (const auto& l : levels) {
    if (l.group == 0)
      return -1;
    n *= l.group;
  }
  return n;
}

}  // namespace strata

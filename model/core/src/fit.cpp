#include "strata/model/fit.h"

#include <algorithm>
#include <cmath>

#include "strata/model/error.h"

namespace strata {

AlphaBetaFit fitAlphaBeta(const std::vector<TimingSample>& samples) {
  // Weighted least squares for t = a + b n with weights w = 1/t^2:
  // minimise sum w (a + b n - t)^2, i.e. relative errors.
  double sw = 0, sn = 0, st = 0, snn = 0, snt = 0;
  for (const auto& s : samples) {
    STRATA_ENFORCE(s.seconds > 0);
    const double w = 1.0 / (s.seconds * s.seconds);
    sw += w;
    sn += w * s.bytes;
    st += w * s.seconds;
    snn += w * s.bytes * s.bytes;
    snt += w * s.bytes * s.seconds;
  }
  const double det = sw * snn - sn * sn;
  if (samples.size() < 2 || std::fabs(det) <= 1e-30 * sw * snn)
    throw UserError("fitting alpha and beta needs at least two message sizes");
  double b = (sw * snt - sn * st) / det;
  double a = (st - b * sn) / sw;
  if (a < 0) {
    // A negative latency is measurement noise: refit the slope through 0.
    a = 0;
    b = snt / snn;
  }
  STRATA_ENFORCE(b > 0);
  AlphaBetaFit fit{Seconds(a), BytesPerSecond(1.0 / b), 0};
  for (const auto& s : samples)
    fit.maxRelativeError =
        std::max(fit.maxRelativeError, std::fabs(a + b * s.bytes - s.seconds) / s.seconds);
  return fit;
}

std::vector<BandwidthPoint> bandwidthTable(const std::vector<TimingSample>& samples,
                                           Seconds alpha) {
  std::vector<BandwidthPoint> table;
  for (const auto& s : samples) {
    // Time beyond the latency; at least 1 % of the sample so tiny messages
    // whose time is all latency keep a finite, conservative bandwidth.
    const double moving = std::max(s.seconds - alpha.value(), 0.01 * s.seconds);
    table.push_back({Bytes(s.bytes), BytesPerSecond(s.bytes / moving)});
  }
  std::sort(table.begin(), table.end(),
            [](const auto& x, const auto& y) { return x.bytes < y.bytes; });
  return table;
}

BytesPerSecond interpolateBandwidth(const std::vector<BandwidthPoint>& table, Bytes bytes) {
  STRATA_ENFORCE(!table.empty());
  if (bytes <= table.front().bytes)
    return table.front().bandwidth;
  if (bytes >= table.back().bytes)
    return table.back().bandwidth;
  const auto hi = std::upper_bound(table.begin(), table.end(), bytes,
                                   [](Bytes n, const BandwidthPoint& p) { return n < p.bytes; });
  const auto lo = hi - 1;
  const double x = std::log(bytes.value()), x0 = std::log(lo->bytes.value()),
               x1 = std::log(hi->bytes.value());
  const double f = (x - x0) / (x1 - x0);
  return BytesPerSecond(lo->bandwidth.value() +
                        f * (hi->bandwidth.value() - lo->bandwidth.value()));
}

double fitEffectiveCache(const std::vector<double>& distances, const std::vector<double>& shares,
                         double operand, double cache) {
  STRATA_ENFORCE(distances.size() == shares.size());
  double best = cache, bestErr = -1;
  const double lo = std::min(cache, 1024.0 * 1024);
  for (int i = 0; i <= 96; ++i) {
    const double c = lo * std::pow(cache / lo, i / 96.0);
    double err = 0;
    for (size_t j = 0; j < distances.size(); ++j) {
      const double model = 1.0 - std::min(1.0, c / (distances[j] + operand));
      err += (model - shares[j]) * (model - shares[j]);
    }
    if (bestErr < 0 || err < bestErr - 1e-12) {
      best = c;
      bestErr = err;
    }
  }
  return best;
}

}  // namespace strata

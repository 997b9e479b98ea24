// Fitting a link's alpha-beta cost to measured transfer times, and the
// size-dependent effective bandwidth a single beta cannot express.
#pragma once

#include <vector>

#include "strata/model/units.h"

namespace strata {

// One measurement: a message of `bytes` took `seconds` one way.
struct TimingSample {
  double bytes = 0;
  double seconds = 0;
};

struct AlphaBetaFit {
  Seconds alpha;            // intercept: per-message latency
  BytesPerSecond beta;      // 1 / slope: asymptotic bandwidth
  double maxRelativeError;  // worst |model - sample| / sample over the samples
};

// Least-squares fit of t = alpha + n / beta, weighting every sample by 1/t^2
// (so the small messages that fix alpha count as much as the large ones that
// fix beta). Needs at least two distinct sizes; alpha is clamped at 0.
AlphaBetaFit fitAlphaBeta(const std::vector<TimingSample>& samples);

// Effective bandwidth n / (t(n) - alpha) of each sample, for a link's
// `bandwidth_table`: the transfer time of n bytes is then alpha + n / beta(n),
// beta(n) interpolated linearly in log(n) between the table's sizes and held
// constant beyond its ends.
struct BandwidthPoint {
  Bytes bytes;
  BytesPerSecond bandwidth;
};
std::vector<BandwidthPoint> bandwidthTable(const std::vector<TimingSample>& samples, Seconds alpha);

// beta(n) from a table (sorted by size, non-empty).
BytesPerSecond interpolateBandwidth(const std::vector<BandwidthPoint>& table, Bytes bytes);

// The cache an operand finds (KernelTables::effectiveCache): the size C, of
// 97 log-spaced sizes from 1 MiB (or `cache`, if smaller) to `cache`, whose
// LRU share 1 - min(1, C / (distance + operand)) fits the measured cold
// `shares` (0: as fast as hot, 1: as slow as cold) after `distances` bytes
// written since the operand's last use best in least squares; the smallest
// of equally good sizes. distances and shares of equal length.
double fitEffectiveCache(const std::vector<double>& distances, const std::vector<double>& shares,
                         double operand, double cache);

}  // namespace strata

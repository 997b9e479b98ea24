// Where a collective's data is on one rank (docs/executor.md, "How a Plan
// runs"). Internal to executor/runtime.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>

namespace strata::exec::detail {

// [begin, end) of piece i of n items cut into `parts` near-equal pieces.
inline std::pair<int64_t, int64_t> piece(int64_t n, int parts, int i) {
  const int64_t base = n / parts, extra = n % parts;
  const int64_t begin = i * base + std::min<int64_t>(i, extra);
  return {begin, begin + base + (i < extra ? 1 : 0)};
}

inline std::span<float> sub(std::span<float> s, std::pair<int64_t, int64_t> r) {
  return s.subspan(static_cast<size_t>(r.first), static_cast<size_t>(r.second - r.first));
}

// Resolves a collective's data on one rank. The kinds (endpoints.cpp): a flat
// buffer cut into chunks and segments (weight gradients, synchronous ps
// pulls, softmax statistics), a ps pull with staleness, rows of a tensor
// (owt boundary activations), and the owt exchanges that need the Worker's
// rounds (Worker::SliceGather, SliceScatter, BoundaryReturn).
class Endpoint {
 public:
  virtual ~Endpoint() = default;
  // What this rank sends to `dst` for (part, segment).
  virtual std::span<const float> send(int part, int segment, int dst) = 0;
  // Where data from `src` for (part, segment) lands when nothing sums it.
  virtual std::span<float> land(int part, int segment, int src) = 0;
  // Size of the data from `src` for (part, segment).
  virtual size_t size(int part, int segment, int src) = 0;
  // Adds (merges) data received from `src` into this rank's (part, segment).
  virtual void reduce(int part, int segment, int src, std::span<const float> data) = 0;
  // How many consecutive parts the next calls cover (halving-doubling moves
  // several blocks at once); 1 otherwise.
  virtual void setParts(int) {}
  // After this rank's last task of the collective.
  virtual void finish() {}
};

}  // namespace strata::exec::detail

// A run's measurements on their way to rank 0: the reserved tags and the
// gather they travel by, and the steps of a run measured into a RunResult.
// Internal to executor/runtime.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "strata/exec/comm/communicator.h"
#include "strata/exec/runtime.h"
#include "strata/model/network.h"
#include "strata/model/plan.h"

namespace strata::exec::detail {

// Reserved tags for the run's own bookkeeping (config check, step stats).
constexpr int kTagHash = kFirstReservedTag + 1;
constexpr int kTagVerdict = kFirstReservedTag + 2;
constexpr int kTagStats = kFirstReservedTag + 3;
constexpr int kTagSlices = kFirstReservedTag + 4;
constexpr int kTagLoss = kFirstReservedTag + 5;

template <class T>
std::span<const std::byte> bytesOf(const std::vector<T>& v) {
  return std::as_bytes(std::span<const T>(v));
}
template <class T>
std::span<std::byte> writableBytesOf(std::vector<T>& v) {
  return std::as_writable_bytes(std::span<T>(v));
}

// Every rank's value of `mine` on rank 0 (others get their own only).
template <class T>
std::vector<T> gatherToRoot(Communicator& comm, const T& mine, int tag) {
  std::vector<T> all(static_cast<size_t>(comm.size()));
  all[static_cast<size_t>(comm.rank())] = mine;
  if (comm.rank() == 0) {
    for (int r = 1; r < comm.size(); ++r) {
      std::vector<T> one(1);
      comm.recv(r, tag, writableBytesOf(one));
      all[static_cast<size_t>(r)] = one[0];
    }
  } else {
    comm.send(0, tag, bytesOf(std::vector<T>{mine}));
  }
  return all;
}

// This rank's part of a run whose checks passed and whose ranks agreed on
// their configuration: options.steps steps of `plan` (its steps once per
// plan.iterations), each step's figures gathered on rank 0, the median step
// after warmup chosen there and its slices collected. Returns what runWorker
// returns. Collective over every rank of `comm`.
RunResult runMeasured(Communicator& comm, const Plan& plan, const Network& network,
                      const RunOptions& options);

}  // namespace strata::exec::detail

// What `strata allreduce`'s measuring (allreduce.cpp) and printing
// (allreduce_output.cpp) share: the columns, the configuration and the cells.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "output.h"
#include "strata/exec/comm/collectives.h"
#include "strata/exec/device.h"

namespace strata::cli::allreduce {

enum class Algorithm { kRing, kNaive, kNccl, kMpi };
inline constexpr std::array<const char*, 4> kAlgorithmNames = {"ring", "naive", "nccl", "mpi"};

inline const char* nameOf(Algorithm a) {
  return kAlgorithmNames[static_cast<size_t>(a)];
}

// The "avg busbw" line averages sizes from here up: smaller ones measure the
// latency of a message more than the bandwidth of a link (nccl-tests averages
// every size; its default sweep is mostly large sizes).
inline constexpr std::size_t kAvgBusbwMinBytes = std::size_t{16} << 20;

// A benchmark's options and configuration, read and checked: every user
// mistake shows while this is made, before any worker starts.
struct Setup {
  int workers = 1;
  bool mpi = false;  // MPI ranks under mpirun, else threads
  exec::Device device = exec::Device::kCpu;
  std::vector<std::size_t> sizes;  // bytes, ascending, whole floats
  int iterations = 20;
  int warmup = 5;
  int stepFactor = 2;
  // Elements per segment of ring and naive (--segment); 0 = one per chunk.
  std::size_t segmentElems = exec::kDefaultRingSegmentElems;
  std::vector<Algorithm> algorithms;  // the columns, in the order given
  std::vector<bool> available;        // per column: false prints n/a (see notes)
  std::vector<std::string> notes;     // why a column is n/a
  Format format = Format::kTable;
  int gpu = 0;  // under mpirun with --device cuda: this rank's GPU
};

// One algorithm at one size, over every worker.
struct Cell {
  bool measured = false;
  double seconds = 0;  // median over iterations of the slowest worker's time
  int64_t wrong = 0;   // elements that differ from the expected sum, all workers
};
// [column][size index], as Setup::algorithms and Setup::sizes.
using Results = std::vector<std::vector<Cell>>;

// "1 KiB", "64 MiB", "24 B": sizes are given in binary units (-b 1KiB), so
// they are printed in them; a size that is no whole number of a unit (-f 3)
// gets two decimals.
std::string formatSize(double bytes);
std::string formatSize(std::size_t bytes);

// The results in s.format: nccl-tests' table, one JSON line, or CSV.
void printResults(std::ostream& out, const Setup& s, const Results& results);

}  // namespace strata::cli::allreduce

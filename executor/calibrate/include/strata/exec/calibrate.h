// Measuring the machine strata runs on and writing it as a cluster config
// (`strata calibrate`), so the model and the simulator price this machine's
// runs from measurements instead of datasheets.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "strata/exec/comm/communicator.h"
#include "strata/exec/device.h"
#include "strata/model/network.h"

namespace strata::exec {

struct CalibrationOptions {
  std::string name = "localhost-calibrated";  // the cluster's name (the file's stem)
  // cpu: this machine's cores (everything below); cuda: GPU 0 (kernel tables
  // through the CUDA backend, the device communicator between two workers on
  // it, and workers sharing it up to maxWorkers; network, batch and comm
  // unused).
  Device device = Device::kCpu;
  // Layers timed to find each layer kind's efficiency: the network a run will
  // use (validate passes its own); shapes of another network are a guess.
  const Network* network = nullptr;
  int batch = 32;      // examples per timed pass
  int maxWorkers = 4;  // sharing measured for 1, 2, 4, ... up to this
  // Sweeps over the CPU kernel tables, each point the median over them: on
  // the 2-core VM two single-sweep calibrations a minute apart differed by
  // 0.88x to 1.61x (10th to 90th percentile) per memory-kernel point.
  int sweeps = 3;
  // Communicator to measure alpha and beta on (MPI ranks 0 and 1); null:
  // two threads of this process, as `strata run` uses.
  Communicator* comm = nullptr;
  std::function<void(const std::string&)> progress;  // one line per measurement
};

// Throws OptionError naming the option (--sharing-up-to, --batch) when
// `options` cannot be measured; calibrate() checks too.
void checkCalibrationOptions(const CalibrationOptions& options);

// Measures peak GEMM rate, each layer kind's achieved share of it, streaming
// memory bandwidth, summing bandwidth (gamma), the communicator's alpha,
// beta and per-size bandwidth, and how compute speed falls when workers share
// the machine. Returns the cluster YAML, every number with a comment saying
// how it was measured. Takes well under a minute here.
std::string calibrate(const CalibrationOptions& options);

// How a worker's compute and communication lanes slow each other when each
// rank of `comm` is one worker: calibrate's overlap trial (each lane
// exchanging 4 MiB segments with its ring neighbours and summing them while
// the compute lane runs GEMMs, against each alone; median of 3) over that
// communicator. Under mpirun it measures the ranks' real transport (TCP's
// stack and the lane's polling take cores that a copy through shared memory
// does not), for the `sharing` row of comm.size() workers. Collective; the
// same result on every rank. Needs 2 or more ranks.
struct LaneOverlap {
  int workers = 1;
  double computeSpeed = 1;  // overlap_compute_speed
  double commSpeed = 1;     // overlap_comm_speed
  double commRate = 0;      // overlap_comm_rate: bytes/s each lane sent alone
  // overlap_comm_speed_by_duty: (d, communication speed) with the compute
  // lane running GEMMs a share d of every 2 ms slice, d = 0, 0.25, 0.5, 0.75,
  // 1 (d = 1: commSpeed); and the compute lane's speed while it runs.
  std::vector<std::pair<double, double>> commByDuty, computeByDuty;
};
LaneOverlap measureLaneOverlap(Communicator& comm);
// The same trial with `workers` (2 or more) threads of this process over the
// local communicator, as `strata run` runs workers.
LaneOverlap measureLaneOverlap(int workers);
// A sharing row's duty curve as calibrate writes it:
// ", overlap_comm_speed_by_duty: [[0, 1.000], [0.25, 0.9], ...]", or "" when empty.
std::string dutyCurveYaml(const std::vector<std::pair<double, double>>& curve);

// The GEMM shape validate re-times around every row to see whether the
// machine still runs at its calibrated speed (a VM's host may slow it down).
inline constexpr int kReferenceGemm = 256;
// FLOP/s of an nn GEMM of kReferenceGemm^3: the median of `calls` calls
// after a warm-up (about 0.5 ms each here), on `threads` threads at once
// (from a common start; the slowest thread's median). With as many threads
// as a row keeps cores busy it sees what slows that row: a VM host that
// takes time from one of its cores slows a 2-worker step, not a timing on
// the other core alone.
double referenceGemmRate(int calls = 7, int threads = 1);

// The memory-bound reference beside it: each thread copies kReferenceCopy
// floats (16 MiB) into a second buffer with the copy kernel calibrate's
// `copy` table times (out of the caches: the two buffers of two threads are
// twice the L3 of the development VM), so it slows with the memory bandwidth
// a VM's host leaves, which the in-cache GEMM does not see.
inline constexpr int64_t kReferenceCopy = int64_t(1) << 22;
// Floats copied per second per thread: the median of `calls` calls after a
// warm-up, on `threads` threads from a common start; the slowest thread's.
double referenceCopyRate(int calls = 7, int threads = 1);

}  // namespace strata::exec

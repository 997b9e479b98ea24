// `strata allreduce`: the sum of float buffers over K workers, the project's
// collectives (allReduceRing, allReduceNaive) beside baselines
// (ncclAllReduce, MPI_Allreduce) in one run, on the sizes and with the columns
// of NVIDIA's nccl-tests all_reduce_perf:
//
//   time    median over iterations of the slowest worker's time for one
//           allreduce (each iteration starts after a barrier, so a worker
//           that arrives late does not hide in another's wait)
//   algbw   size / time
//   busbw   algbw x 2(K-1)/K: what each worker's link carries in a
//           bandwidth-optimal allreduce, so it compares with the link's speed
//           whatever K is (nccl-tests' convention)
//   #wrong  elements that differ from the expected sum, over every worker,
//           in a check run after the timed iterations
//
// Workers are threads of this process (LocalWorld, with each worker's buffers
// in its own BufferOps' memory: the host's, or a GPU's with --device cuda),
// or MPI ranks under mpirun (over MpiCommunicator; over NcclCommunicator with
// --device cuda).
#include "allreduce.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "commands.h"
#include "flags.h"
#include "rank_start.h"
#include "strata/exec/comm/collectives.h"
#include "strata/exec/comm/local_communicator.h"
#include "strata/exec/comm/mpi_communicator.h"
#include "strata/exec/device.h"
#include "strata/model/limits.h"
#include "strata/model/quantity_text.h"
#ifdef STRATA_HAVE_NCCL
#include "strata/exec/comm/nccl_communicator.h"
#endif

namespace strata::cli {

using namespace allreduce;

namespace {

// -n and -w at most: every worker keeps one time per iteration and sends them
// to rank 0 (0.8 MB at this cap), and 100000 iterations of a 64 MiB allreduce
// already take hours on one machine.
constexpr int kMaxIterations = 100'000;
// Per-rank times and wrong counts travel to rank 0 under this tag, in the
// executor's bookkeeping range, clear of the runtime's and NCCL's bootstrap.
constexpr int kTagResults = exec::kFirstReservedTag + 70;
// Buffers are filled and checked through a host chunk of this many floats (a
// multiple of the pattern's 1024-element period): host memory stays at 1 MiB
// per worker whatever the buffer size.
constexpr std::size_t kChunkElems = std::size_t{1} << 18;
constexpr std::size_t kPatternPeriod = 1024;
// Sums of up to this many inputs of at most 1023 stay below 2^24, where
// floats still count every integer (Pattern).
constexpr int kMaxExactWorkers = (1 << 24) / 1023;

// The options as typed; read and checked by prepare().
struct AllreduceFlags {
  std::string minBytes = "8B", maxBytes = "64MiB", stepFactor = "2", workers, device = "cpu",
              iters = "20", warmup = "5", algorithms, format = "table", segment;
  CLI::Option* algorithmsOption = nullptr;
};

// A size option in bytes, rounded down to whole floats (at least one).
std::size_t sizeOption(const std::string& text, const std::string& option) {
  const double bytes = parseSizeOption(text, option, /*zeroMeansOff=*/false).value();
  const double floats = std::floor(bytes / 4);
  if (floats < 1)
    throw OptionError(option, "must be at least 4 B (one float), got '" + text + "'");
  return static_cast<std::size_t>(floats) * 4;
}

// -w: 0 (no warm-up) is allowed, unlike the other counts.
int warmupOption(const std::string& text) {
  int64_t v = -1;
  const bool digits = !text.empty() && text.find_first_not_of("0123456789") == std::string::npos;
  if (digits)
    std::from_chars(text.data(), text.data() + text.size(), v);  // too large: v stays -1
  if (v < 0 || v > kMaxIterations)
    throw OptionError("--warmup",
                      fmt::format("must be an integer in [0, {}], got '{}'", kMaxIterations, text));
  return static_cast<int>(v);
}

// The columns: --algorithms, or the default for this device and launch.
std::vector<Algorithm> algorithmsOption(const AllreduceFlags& f, exec::Device device, bool mpi) {
  std::vector<Algorithm> out;
  if (f.algorithmsOption == nullptr || f.algorithmsOption->count() == 0) {
    out = {Algorithm::kRing, Algorithm::kNaive};
#ifdef STRATA_HAVE_NCCL
    if (device == exec::Device::kCuda)
      out.push_back(Algorithm::kNccl);
#endif
    // MPI_Allreduce on host buffers only: a GPU buffer would need a
    // CUDA-aware MPI, which nothing here checks for.
    if (mpi && device == exec::Device::kCpu)
      out.push_back(Algorithm::kMpi);
    return out;
  }
  if (f.algorithms.empty())
    throw OptionError("--algorithms", "is empty (expected a list of ring, naive, nccl, mpi)");
  for (const auto& name : splitList(f.algorithms)) {
    const auto found = std::find(kAlgorithmNames.begin(), kAlgorithmNames.end(), name);
    if (found == kAlgorithmNames.end())
      throw OptionError("--algorithms", "unknown algorithm '" + name +
                                            "' (expected a list of ring, naive, nccl, mpi)");
    const auto a = static_cast<Algorithm>(found - kAlgorithmNames.begin());
    if (std::find(out.begin(), out.end(), a) != out.end())
      throw OptionError("--algorithms", "'" + name + "' is listed twice");
    if (a == Algorithm::kNccl) {
#ifndef STRATA_HAVE_NCCL
      throw OptionError("--algorithms",
                        "nccl: this strata was built without NCCL (it needs CUDA, NCCL and MPI "
                        "when configured)");
#endif
      if (device != exec::Device::kCuda)
        throw OptionError("--algorithms", "nccl needs --device cuda (ncclAllReduce runs on GPUs)");
    }
    if (a == Algorithm::kMpi) {
#ifndef STRATA_HAVE_MPI
      throw OptionError("--algorithms", "mpi: this strata was built without MPI");
#endif
      if (!mpi)
        throw OptionError("--algorithms",
                          "mpi (MPI_Allreduce) needs MPI ranks: start strata allreduce under "
                          "mpirun");
      if (device != exec::Device::kCpu)
        throw OptionError("--algorithms",
                          "mpi (MPI_Allreduce) runs on host buffers only; with --device cuda "
                          "compare nccl instead");
    }
    out.push_back(a);
  }
  return out;
}

// `ranks`: the number of MPI ranks, 0 on threads. Throws UserError.
Setup prepare(const AllreduceFlags& f, int ranks) {
  Setup s;
  s.format = parseFormat(f.format);
  const std::size_t minBytes = sizeOption(f.minBytes, "--minbytes");
  const std::size_t maxBytes = sizeOption(f.maxBytes, "--maxbytes");
  if (minBytes > maxBytes)
    throw OptionError("--minbytes", fmt::format("{} is larger than --maxbytes {}",
                                                formatSize(minBytes), formatSize(maxBytes)));
  s.stepFactor = parseCountOption(f.stepFactor, "--stepfactor");
  if (s.stepFactor < 2)
    throw OptionError("--stepfactor",
                      "must be an integer of at least 2 (each size is the previous one times "
                      "it), got '" +
                          f.stepFactor + "'");
  for (std::size_t size = minBytes;; size *= static_cast<std::size_t>(s.stepFactor)) {
    s.sizes.push_back(size);
    if (size > maxBytes / static_cast<std::size_t>(s.stepFactor))
      break;
  }
  s.iterations = parseCountOption(f.iters, "--iters", kMaxIterations);
  s.warmup = warmupOption(f.warmup);
  if (!f.segment.empty()) {
    const double bytes = parseSizeOption(f.segment, "--segment", /*zeroMeansOff=*/true).value();
    if (bytes != 0 && std::fmod(bytes, 4.0) != 0)
      throw OptionError("--segment", "must be a whole number of floats (a multiple of 4 B), got '" +
                                         f.segment + "'");
    s.segmentElems = static_cast<std::size_t>(bytes / 4);
  }

  s.mpi = ranks > 0;
  if (s.mpi) {
    s.workers = ranks;
    if (ranks > kMaxExactWorkers)
      throw OptionError("--workers",
                        fmt::format("{} ranks: the check's sums are exact in float up to {} "
                                    "workers; start fewer ranks",
                                    ranks, kMaxExactWorkers));
    if (!f.workers.empty() && parseCountOption(f.workers, "--workers") != ranks)
      throw OptionError("--workers",
                        fmt::format("is {} but mpirun started {} ranks", f.workers, ranks));
  } else {
    if (f.workers.empty())
      throw OptionError("--workers", "required when not started by mpirun (threads: --workers K)");
    s.workers = parseCountOption(f.workers, "--workers");
    const int64_t limit = threadWorkerLimit(limits());
    if (s.workers > limit)
      throw OptionError(
          "--workers",
          fmt::format("{} workers would start {} threads in this process, over the limit of {} "
                      "(64 or twice the cores, whichever is larger, as strata run); use fewer "
                      "workers or run them as MPI ranks (mpirun -np {} strata allreduce ...)",
                      s.workers, s.workers, limit, s.workers));
  }

  s.device = exec::parseDevice(f.device, "--device");
  // On a GPU each message costs 30-50 us of copy, stream waits and hand-off
  // (an H100, two workers: busbw 8.0 GB/s in 256 KiB segments, 104 GB/s in
  // 4 MiB ones, 266 GB/s unsegmented; docs/executor.md, "On an H100"), so
  // the CPU's default segment would measure the messages, not the transport.
  if (f.segment.empty() && s.device == exec::Device::kCuda)
    s.segmentElems = 0;
  exec::checkDevice(s.device, "--device");
  s.algorithms = algorithmsOption(f, s.device, s.mpi);
  s.available.assign(s.algorithms.size(), true);

  // Every worker holds one buffer of the largest size in its device's memory;
  // the workers of one process (or one GPU) share it.
  const int gpus = s.device == exec::Device::kCpu ? 1 : std::max(1, exec::deviceCount(s.device));
  int sharing = (s.workers + gpus - 1) / gpus;
  if (!s.mpi && s.device == exec::Device::kCuda && sharing > 1)
    s.notes.push_back(fmt::format(
        "{} workers on {} GPU{} (round-robin): up to {} share a GPU, its memory and copy engines",
        s.workers, gpus, gpus == 1 ? "" : "s", sharing));
  if (s.mpi) {
    sharing = 1;  // one rank's own buffer; other ranks may be on other nodes
    const int localSize = exec::localSizeFromLauncher();
    if (s.device == exec::Device::kCpu && localSize > 0)
      sharing = localSize;  // the ranks of this node share its memory
#ifdef STRATA_HAVE_NCCL
    const int localRank = exec::localRankFromLauncher();
    if (s.device == exec::Device::kCuda) {
      const int here = localSize > 0 ? localSize : ranks;
      if (here > gpus)
        throw OptionError("--device",
                          fmt::format("{} ranks on this node but {} GPU{}: NCCL needs a GPU of "
                                      "its own for each rank (start at most {} ranks per node)",
                                      here, gpus, gpus == 1 ? "" : "s", gpus));
      s.gpu = (localRank >= 0 ? localRank : 0) % gpus;
    }
#else
    if (s.device == exec::Device::kCuda)
      throw OptionError("--device",
                        "cuda under mpirun needs a strata built with NCCL (one rank per GPU); "
                        "without mpirun, workers run as threads on this machine's GPUs");
#endif
  }
  // On the CPU: what this process may allocate (physical memory, ulimit -v,
  // the cgroup's memory.max), with the threads' stacks under ulimit -v.
  const bool onCpu = s.device == exec::Device::kCpu;
  const MemoryLimit available = onCpu ? availableMemory() : MemoryLimit{};
  const double memory = onCpu ? available.bytes : exec::deviceMemoryBytes(s.device, s.gpu);
  double need = double(sharing) * double(maxBytes);
  if (onCpu && available.addressSpace)  // per process: a rank's own buffer, or the threads'
    need = s.mpi ? double(maxBytes) : need + threadsReservedBytes(s.workers);
  if (memory > 0 && need > memory)
    throw OptionError(
        "--maxbytes",
        fmt::format("{} worker{} x {} need {} of {} memory, more than the {} available ({}); use "
                    "a smaller --maxbytes or fewer workers",
                    sharing, sharing == 1 ? "" : "s", formatSize(maxBytes), formatSize(need),
                    onCpu ? "host" : "GPU", formatSize(std::floor(memory)),
                    onCpu ? available.what : "one GPU's memory"));
  const bool mpiBaseline =
      std::find(s.algorithms.begin(), s.algorithms.end(), Algorithm::kMpi) != s.algorithms.end();
  if (mpiBaseline && maxBytes / 4 > std::size_t{2'147'483'647})
    throw OptionError("--maxbytes", "MPI_Allreduce counts elements in an int: at most 8 GiB");

  // ncclAllReduce on threads runs as one clique of K GPUs (NcclClique): a
  // worker without a GPU of its own has no NCCL rank.
  for (std::size_t c = 0; c < s.algorithms.size(); ++c) {
    if (s.algorithms[c] != Algorithm::kNccl || s.mpi || s.workers <= gpus)
      continue;
    s.available[c] = false;
    s.notes.push_back(
        fmt::format("nccl n/a: ncclAllReduce needs one GPU per worker: {} workers, "
                    "{} GPU{}",
                    s.workers, gpus, gpus == 1 ? "" : "s"));
  }
  return s;
}

// ---- measuring ----------------------------------------------------------------------

// `bytes` of one worker's memory from its BufferOps (a GPU's device memory:
// never touched from the host but through ops.copy).
class OpsAllocation {
 public:
  OpsAllocation(exec::BufferOps& ops, std::size_t bytes)
      : ops_(ops), data_(static_cast<float*>(ops.allocate(bytes))), bytes_(bytes) {}
  ~OpsAllocation() { ops_.deallocate(data_, bytes_); }
  OpsAllocation(const OpsAllocation&) = delete;
  OpsAllocation& operator=(const OpsAllocation&) = delete;
  std::span<float> first(std::size_t elements) const { return {data_, elements}; }

 private:
  exec::BufferOps& ops_;
  float* data_;
  std::size_t bytes_;
};

// Worker r's input: element i is (7r + i) mod 1024, a small integer, so every
// sum over up to kMaxExactWorkers workers is exact in float whatever the
// order of the additions, and a result is either right or wrong. The pattern repeats every 1024
// elements, so one chunk fills any buffer and 1024 sums check it.
class Pattern {
 public:
  Pattern(int rank, int workers, std::size_t maxElems)
      : chunk_(std::min(maxElems, kChunkElems)),
        readBack_(chunk_.size()),
        expected_(kPatternPeriod) {
    for (std::size_t i = 0; i < chunk_.size(); ++i)
      chunk_[i] = float((std::size_t(rank) * 7 + i) % kPatternPeriod);
    for (std::size_t i = 0; i < kPatternPeriod; ++i) {
      double sum = 0;
      for (int r = 0; r < workers; ++r)
        sum += double((std::size_t(r) * 7 + i) % kPatternPeriod);
      expected_[i] = float(sum);
    }
  }

  // Writes this worker's input into `data` (memory of `ops`).
  void fill(exec::BufferOps& ops, std::span<float> data) const {
    for (std::size_t at = 0; at < data.size(); at += chunk_.size()) {
      const std::size_t n = std::min(chunk_.size(), data.size() - at);
      ops.copy(data.data() + at, chunk_.data(), n * sizeof(float));
    }
  }

  // The elements of `data` (memory of `ops`) that differ from the sum of
  // every worker's input.
  int64_t wrong(exec::BufferOps& ops, std::span<const float> data) {
    int64_t wrong = 0;
    for (std::size_t at = 0; at < data.size(); at += readBack_.size()) {
      const std::size_t n = std::min(readBack_.size(), data.size() - at);
      ops.copy(readBack_.data(), data.data() + at, n * sizeof(float));
      for (std::size_t i = 0; i < n; ++i)
        wrong += readBack_[i] != expected_[(at + i) % kPatternPeriod];
    }
    return wrong;
  }

 private:
  std::vector<float> chunk_, readBack_, expected_;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

double secondsSince(std::chrono::steady_clock::time_point start) {
  // At least the clock's 1 ns: a 1-worker allreduce may return within one
  // tick, and a time of 0 would make its bandwidth infinite.
  return std::max(1e-9,
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

// One column of the benchmark as a worker runs it: the allreduce, in place.
struct Lane {
  std::size_t column = 0;
  std::function<void(std::span<float>)> allreduce;
};

// Runs every lane at every size as one worker of `comm`: fill, warm-up,
// timed iterations (each after a barrier), then a fresh fill, one allreduce
// and the check. Rank 0 gathers every worker's times and wrong counts and
// writes the cells into `results` (the other ranks leave it alone).
void measureWorker(exec::Communicator& comm, const Setup& s, const std::vector<Lane>& lanes,
                   Results& results) {
  exec::BufferOps& ops = comm.ops();
  const std::size_t maxElems = s.sizes.back() / sizeof(float);
  const OpsAllocation buffer(ops, s.sizes.back());
  Pattern pattern(comm.rank(), comm.size(), maxElems);
  std::vector<double> seconds(static_cast<std::size_t>(s.iterations));
  std::vector<double> theirs(seconds.size());
  for (std::size_t i = 0; i < s.sizes.size(); ++i) {
    const std::span<float> data = buffer.first(s.sizes[i] / sizeof(float));
    for (const Lane& lane : lanes) {
      pattern.fill(ops, data);
      for (int w = 0; w < s.warmup; ++w) {
        exec::barrier(comm);
        lane.allreduce(data);
      }
      for (std::size_t it = 0; it < seconds.size(); ++it) {
        exec::barrier(comm);
        const auto start = std::chrono::steady_clock::now();
        lane.allreduce(data);
        seconds[it] = secondsSince(start);
      }
      // The timed iterations summed sums; the check starts from the inputs.
      pattern.fill(ops, data);
      lane.allreduce(data);
      int64_t wrong = pattern.wrong(ops, data);

      if (comm.rank() != 0) {
        comm.send(0, kTagResults, std::as_bytes(std::span(seconds)));
        comm.send(0, kTagResults, std::as_bytes(std::span(&wrong, 1)));
        continue;
      }
      std::vector<double> slowest = seconds;
      for (int r = 1; r < comm.size(); ++r) {
        int64_t theirWrong = 0;
        comm.recv(r, kTagResults, std::as_writable_bytes(std::span(theirs)));
        comm.recv(r, kTagResults, std::as_writable_bytes(std::span(&theirWrong, 1)));
        for (std::size_t it = 0; it < slowest.size(); ++it)
          slowest[it] = std::max(slowest[it], theirs[it]);
        wrong += theirWrong;
      }
      results[lane.column][i] = Cell{true, median(slowest), wrong};
    }
  }
}

#ifdef STRATA_HAVE_NCCL
// ncclAllReduce over K GPUs of this process, worker w on GPU w (one clique,
// driven from this thread): the baseline for thread mode on GPUs. The call
// returns when every GPU is done, so its time is the slowest GPU's.
void measureNcclClique(const Setup& s, std::size_t column, Results& results) {
  const int k = s.workers;
  const std::size_t maxElems = s.sizes.back() / sizeof(float);
  std::vector<int> devices;
  std::vector<std::shared_ptr<exec::BufferOps>> ops;  // outlive the buffers
  std::vector<std::unique_ptr<OpsAllocation>> buffers;
  std::vector<Pattern> patterns;
  for (int w = 0; w < k; ++w) {
    devices.push_back(w);
    ops.push_back(exec::makeCommOps(exec::Device::kCuda, w));
    buffers.push_back(std::make_unique<OpsAllocation>(*ops.back(), s.sizes.back()));
    patterns.emplace_back(w, k, maxElems);
  }
  exec::NcclClique clique(devices);
  std::vector<std::span<float>> data(static_cast<std::size_t>(k));
  auto fill = [&] {
    for (std::size_t w = 0; w < data.size(); ++w)
      patterns[w].fill(*ops[w], data[w]);
  };
  std::vector<double> seconds(static_cast<std::size_t>(s.iterations));
  for (std::size_t i = 0; i < s.sizes.size(); ++i) {
    for (std::size_t w = 0; w < data.size(); ++w)
      data[w] = buffers[w]->first(s.sizes[i] / sizeof(float));
    fill();
    for (int w = 0; w < s.warmup; ++w)
      clique.allreduce(data);
    for (double& t : seconds) {
      const auto start = std::chrono::steady_clock::now();
      clique.allreduce(data);
      t = secondsSince(start);
    }
    fill();
    clique.allreduce(data);
    int64_t wrong = 0;
    for (std::size_t w = 0; w < data.size(); ++w)
      wrong += patterns[w].wrong(*ops[w], data[w]);
    results[column][i] = Cell{true, median(seconds), wrong};
  }
}
#endif

// Prints the results; a wrong element anywhere is a failure of the collective
// (one line on stderr after the output, exit status 1). Returns the status.
int report(const Setup& s, const Results& results) {
  printResults(std::cout, s, results);
  std::cout.flush();
  int64_t wrong = 0;
  std::string where;
  for (std::size_t c = 0; c < s.algorithms.size(); ++c)
    for (std::size_t i = 0; i < s.sizes.size(); ++i) {
      if (results[c][i].wrong == 0)
        continue;
      if (wrong == 0)
        where = fmt::format(" (first: {} at {}, {} elements)", nameOf(s.algorithms[c]),
                            formatSize(s.sizes[i]), results[c][i].wrong);
      wrong += results[c][i].wrong;
    }
  if (wrong == 0)
    return 0;
  std::cerr << fmt::format("strata: error: allreduce gave {} wrong elements{}\n", wrong, where);
  return kRunFailureExit;
}

int runThreads(const AllreduceFlags& f) {
  const Setup s = prepare(f, 0);
  Results results(s.algorithms.size(), std::vector<Cell>(s.sizes.size()));
  std::vector<std::size_t> onThreads;  // ring and naive: over the LocalWorld
  for (std::size_t c = 0; c < s.algorithms.size(); ++c)
    if (s.algorithms[c] == Algorithm::kRing || s.algorithms[c] == Algorithm::kNaive)
      onThreads.push_back(c);
  if (!onThreads.empty()) {
    // Worker w on GPU w mod GPUs (as strata run places them); on the CPU
    // every worker has the host's ops.
    std::vector<std::shared_ptr<exec::BufferOps>> ops;
    for (int w = 0; w < s.workers; ++w)
      ops.push_back(exec::makeCommOps(s.device, w % exec::deviceCount(s.device)));
    exec::runLocal(
        s.workers,
        [&](exec::Communicator& comm) {
          std::vector<Lane> lanes;
          for (std::size_t c : onThreads) {
            if (s.algorithms[c] == Algorithm::kRing)
              lanes.push_back({c, [&comm, seg = s.segmentElems](std::span<float> d) {
                                 exec::allReduceRing(comm, d, seg);
                               }});
            else
              lanes.push_back({c, [&comm, seg = s.segmentElems](std::span<float> d) {
                                 exec::allReduceNaive(comm, d, seg);
                               }});
          }
          measureWorker(comm, s, lanes, results);
        },
        Seconds(exec::Communicator::kDefaultTimeoutSeconds), std::move(ops));
  }
#ifdef STRATA_HAVE_NCCL
  for (std::size_t c = 0; c < s.algorithms.size(); ++c)
    if (s.algorithms[c] == Algorithm::kNccl && s.available[c])
      measureNcclClique(s, c, results);
#endif
  return report(s, results);
}

#ifdef STRATA_HAVE_MPI
// `strata allreduce` as one MPI rank, as `strata run` does it (run.cpp,
// runRank) without heartbeat options or SIGTERM handling: every rank reads
// its options, the ranks agree on the mistakes so that all exit 2 together
// with one line from rank 0, then measure; rank 0 prints. `f` is null when
// the command line itself was wrong (`mistake`).
int runRank(const AllreduceFlags* f, std::string mistake, Process process) {
  exec::MpiSession session(*process.argc, *process.argv);
  std::optional<exec::MpiCommunicator> mpi;
  if (!openWorld(mpi))
    return kRunFailureExit;
  const bool root = mpi->rank() == 0;
  std::optional<Setup> setup;
  if (const int status = startRanks(
          *mpi, mistake, [&](exec::Communicator& c) { setup.emplace(prepare(*f, c.size())); });
      status != 0)
    return status;
  const Setup& s = *setup;
  Results results(s.algorithms.size(), std::vector<Cell>(s.sizes.size()));

  // On GPUs every message (ring, naive, the bookkeeping) goes over NCCL, one
  // rank per GPU; destroyed before `mpi`, which bootstraps it.
#ifdef STRATA_HAVE_NCCL
  std::optional<exec::NcclCommunicator> nccl;
  if (s.device == exec::Device::kCuda)
    exec::runOrAbort(*mpi, [&](exec::Communicator&) { nccl.emplace(*mpi, s.gpu); });
  exec::Communicator& comm = nccl ? static_cast<exec::Communicator&>(*nccl) : *mpi;
#else
  exec::Communicator& comm = *mpi;
#endif
  exec::runOrAbort(comm, [&](exec::Communicator& c) {
    std::vector<Lane> lanes;
    for (std::size_t col = 0; col < s.algorithms.size(); ++col) {
      switch (s.algorithms[col]) {
        case Algorithm::kRing:
          lanes.push_back({col, [&c, seg = s.segmentElems](std::span<float> d) {
                             exec::allReduceRing(c, d, seg);
                           }});
          break;
        case Algorithm::kNaive:
          lanes.push_back({col, [&c, seg = s.segmentElems](std::span<float> d) {
                             exec::allReduceNaive(c, d, seg);
                           }});
          break;
        case Algorithm::kMpi:
          lanes.push_back(
              {col, [&mpi](std::span<float> d) { exec::mpiAllreduceBaseline(*mpi, d); }});
          break;
        case Algorithm::kNccl:
#ifdef STRATA_HAVE_NCCL
          lanes.push_back({col, [&nccl](std::span<float> d) { nccl->allreduceNccl(d); }});
#endif
          break;
      }
    }
    measureWorker(c, s, lanes, results);
  });
  if (!root)
    return 0;
  // The other ranks are done: a failure here is rank 0's alone, and MPI
  // still finalises cleanly.
  try {
    return report(s, results);
  } catch (const std::exception& e) {
    std::cerr << "strata: error: " << e.what() << "\n";
    return kRunFailureExit;
  }
}
#endif

}  // namespace

int reportAllreduceMistake(Process process, const std::string& message) {
  if (exec::launchedByMpiexec()) {
#ifdef STRATA_HAVE_MPI
    return runRank(nullptr, message, process);
#endif
  }
  (void)process;
  std::cerr << "strata: error: " << message << "\n";
  return kUserErrorExit;
}

Command addAllreduceCommand(CLI::App& app, Process process) {
  auto f = std::make_shared<AllreduceFlags>();
  auto* sub = app.add_subcommand(
      "allreduce",
      "allreduce benchmark (float sum): ring and naive beside ncclAllReduce and MPI_Allreduce, "
      "sizes swept as nccl-tests all_reduce_perf");
  sub->add_option("--minbytes,-b", f->minBytes,
                  "smallest size, with its unit, e.g. 8B, 1KiB (default 8 B; sizes are rounded "
                  "down to whole floats)");
  sub->add_option("--maxbytes,-e", f->maxBytes, "largest size, e.g. 128MiB (default 64 MiB)");
  sub->add_option("--stepfactor,-f", f->stepFactor,
                  "each size is the previous one times this integer >= 2 (default 2)");
  sub->add_option("--workers,-k", f->workers,
                  "number of workers (threads); under mpirun the number of ranks");
  sub->add_option("--device", f->device,
                  "cpu (default) or cuda (thread workers round-robin on the GPUs; under mpirun "
                  "one GPU per rank, over NCCL)");
  sub->add_option("--iters,-n", f->iters, "timed iterations per size (default 20)");
  sub->add_option("--warmup,-w", f->warmup, "untimed iterations before them (default 5)");
  sub->add_option("--segment", f->segment,
                  "segment of ring and naive: each step moves its chunk in messages of this "
                  "size, e.g. 1MiB, 0 = one message per chunk (default 256 KiB; with --device "
                  "cuda 0)");
  f->algorithmsOption =
      sub->add_option("--algorithms", f->algorithms,
                      "comma list of ring, naive, nccl, mpi (default ring,naive, plus nccl with "
                      "--device cuda, plus mpi under mpirun)");
  addFormatOption(sub, f->format);
  sub->footer(
      "Examples:\n"
      "  strata allreduce -k 4 -b 1KiB -e 64MiB -f 4\n"
      "  strata allreduce -k 3 -b 4B -e 1KiB -n 2 -w 1 --format json\n"
      "  mpirun -q -np 4 strata allreduce -e 16MiB --algorithms ring,mpi\n"
      "busbw = algbw x 2(K-1)/K compares with a link's bandwidth whatever K (nccl-tests).");
  return {sub, [f, process] {
            if (!exec::launchedByMpiexec())
              return runThreads(*f);
#ifdef STRATA_HAVE_MPI
            return runRank(f.get(), "", process);
#else
            (void)process;
            throw UserError("started by mpirun, but this strata was built without MPI");
#endif
          }};
}

}  // namespace strata::cli

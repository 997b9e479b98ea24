// Allreduce bandwidth: strata's ring allreduce vs MPI_Allreduce vs the naive
// reducer, side by side, 1 KiB to 64 MiB (powers of 4).
//
//   build/bench/comm/comm_bench                    threads: K = 2 and 4 local ranks
//   mpirun -np 4 build/bench/comm/comm_bench       MPI ranks (MPI builds only)
//
// Counters as nccl-tests defines them: algbw = bytes / time and, for
// allreduce, busbw = algbw * 2(K-1)/K, in GB/s (1e9 B/s). Under MPI each
// iteration's time is the slowest rank's (MPI_MAX), so every rank reports the
// same manual time and Google Benchmark picks the same iteration counts on all
// ranks; only rank 0 prints.
//
// Own flags (before Google Benchmark's):
//   --local_ranks=2,4        world sizes of thread mode
//   --ring_segment=ELEMS     segment of the ring (default kDefaultRingSegmentElems)
//   --segment_sweep          also run the ring at several segment sizes (16, 64 MiB)
#include <benchmark/benchmark.h>

#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "strata/exec/comm/collectives.h"
#include "strata/exec/comm/local_communicator.h"
#include "strata/exec/comm/mpi_communicator.h"
#ifdef STRATA_HAVE_MPI
#include <mpi.h>
#endif

using namespace strata;
using namespace strata::exec;

namespace {

using Allreduce = std::function<void(Communicator&, std::span<float>)>;

struct Options {
  std::vector<int> localRanks = {2, 4};
  std::size_t ringSegment = kDefaultRingSegmentElems;
  bool segmentSweep = false;
};

// Takes our flags out of argv so Google Benchmark does not reject them.
Options parseOptions(int& argc, char** argv) {
  Options options;
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--local_ranks=", 0) == 0) {
      options.localRanks.clear();
      std::string list = arg.substr(std::strlen("--local_ranks="));
      for (std::size_t pos = 0; pos <= list.size();) {
        const std::size_t comma = std::min(list.find(',', pos), list.size());
        options.localRanks.push_back(std::atoi(list.substr(pos, comma - pos).c_str()));
        pos = comma + 1;
      }
    } else if (arg.rfind("--ring_segment=", 0) == 0) {
      options.ringSegment =
          std::strtoull(arg.c_str() + std::strlen("--ring_segment="), nullptr, 10);
    } else if (arg == "--segment_sweep") {
      options.segmentSweep = true;
    } else {
      argv[kept++] = argv[i];
    }
  }
  argc = kept;
  return options;
}

std::string sizeName(std::size_t bytes) {
  if (bytes >= (std::size_t{1} << 20))
    return std::to_string(bytes >> 20) + "MiB";
  return std::to_string(bytes >> 10) + "KiB";
}

void setCounters(benchmark::State& state, std::size_t bytes, int k, double totalSeconds) {
  if (state.iterations() == 0 || totalSeconds <= 0)
    return;
  const double seconds = totalSeconds / static_cast<double>(state.iterations());
  const double algbw = static_cast<double>(bytes) / seconds / 1e9;
  state.counters["algbw_GB/s"] = algbw;
  state.counters["busbw_GB/s"] = algbw * 2.0 * (k - 1) / k;
  state.counters["K"] = k;
}

// K-1 persistent helper threads plus the caller as rank 0: a benchmark run
// costs two barrier crossings rather than K thread starts.
class LocalTeam {
 public:
  using Job = std::function<void(Communicator&)>;

  explicit LocalTeam(int k) : world_(k), start_(k), done_(k) {
    for (int r = 1; r < k; ++r)
      helpers_.emplace_back([this, r] { serve(r); });
  }
  ~LocalTeam() {
    stop_ = true;
    start_.arrive_and_wait();
    for (auto& t : helpers_)
      t.join();
  }
  int size() const { return world_.size(); }
  // Runs job on every rank; returns when all ranks are done.
  void run(const Job& job) {
    job_ = &job;
    start_.arrive_and_wait();
    runRank(0);
    done_.arrive_and_wait();
  }

 private:
  void serve(int rank) {
    for (;;) {
      start_.arrive_and_wait();
      if (stop_)
        return;
      runRank(rank);
      done_.arrive_and_wait();
    }
  }
  void runRank(int rank) {
    try {
      (*job_)(world_.communicator(rank));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "comm_bench: worker %d: %s\n", rank, e.what());
      std::abort();  // a benchmark cannot continue with one rank missing
    }
  }

  LocalWorld world_;
  std::barrier<> start_;
  std::barrier<> done_;
  const Job* job_ = nullptr;
  std::atomic<bool> stop_{false};
  std::vector<std::thread> helpers_;
};

// Rank 0 runs Google Benchmark's loop on the benchmark thread; the other ranks
// run the same number of allreduces back to back. The collective itself keeps
// them in step, so no thread wake-up is timed, as in nccl-tests.
void benchLocal(benchmark::State& state, LocalTeam& team, const Allreduce& allreduce,
                std::size_t bytes) {
  const int k = team.size();
  std::vector<std::vector<float>> buffers(static_cast<std::size_t>(k),
                                          std::vector<float>(bytes / sizeof(float), 0.0f));
  auto bufferOf = [&](Communicator& comm) -> std::vector<float>& {
    return buffers[static_cast<std::size_t>(comm.rank())];
  };
  team.run([&](Communicator& comm) { allreduce(comm, bufferOf(comm)); });  // warm-up
  const benchmark::IterationCount iterations = state.max_iterations;
  double total = 0;
  team.run([&](Communicator& comm) {
    if (comm.rank() != 0) {
      for (benchmark::IterationCount i = 0; i < iterations; ++i)
        allreduce(comm, bufferOf(comm));
      return;
    }
    for (auto _ : state) {
      const auto start = std::chrono::steady_clock::now();
      allreduce(comm, bufferOf(comm));
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      state.SetIterationTime(seconds);
      total += seconds;
    }
  });
  setCounters(state, bytes, k, total);
}

#ifdef STRATA_HAVE_MPI
void benchMpi(benchmark::State& state, MpiCommunicator& comm, const Allreduce& allreduce,
              std::size_t bytes) {
  std::vector<float> buffer(bytes / sizeof(float), 0.0f);
  double total = 0;
  runOrAbort(comm, [&](Communicator& c) {
    allreduce(c, buffer);  // warm-up
    barrier(c);
    for (auto _ : state) {
      const double start = MPI_Wtime();
      allreduce(c, buffer);
      const double mine = MPI_Wtime() - start;
      double slowest = 0;
      checkMpi(MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD),
               "MPI_Allreduce");
      state.SetIterationTime(slowest);
      total += slowest;
    }
  });
  setCounters(state, bytes, comm.size(), total);
}

class NullReporter : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>&) override {}
};
#endif

const std::vector<std::size_t> kSizes = {
    std::size_t{1} << 10, std::size_t{1} << 12, std::size_t{1} << 14,
    std::size_t{1} << 16, std::size_t{1} << 18, std::size_t{1} << 20,
    std::size_t{1} << 22, std::size_t{1} << 24, std::size_t{1} << 26};

struct Candidate {
  std::string name;
  Allreduce run;
};

std::vector<Candidate> candidates(const Options& options, bool withMpi) {
  std::vector<Candidate> list;
  const std::size_t segment = options.ringSegment;
  list.push_back(
      {"ring", [segment](Communicator& c, std::span<float> d) { allReduceRing(c, d, segment); }});
#ifdef STRATA_HAVE_MPI
  if (withMpi) {
    list.push_back({"mpi", [](Communicator& c, std::span<float> d) {
                      mpiAllreduceBaseline(dynamic_cast<MpiCommunicator&>(c), d);
                    }});
  }
#else
  (void)withMpi;
#endif
  list.push_back({"naive", [](Communicator& c, std::span<float> d) { allReduceNaive(c, d); }});
  return list;
}

std::vector<Candidate> sweep() {
  std::vector<Candidate> list;
  for (std::size_t segment :
       {std::size_t{1} << 12, std::size_t{1} << 14, std::size_t{1} << 15, std::size_t{1} << 16,
        std::size_t{1} << 17, std::size_t{1} << 18, std::size_t{1} << 20, std::size_t{0}}) {
    list.push_back(
        {"ring-seg" + std::to_string(segment),
         [segment](Communicator& c, std::span<float> d) { allReduceRing(c, d, segment); }});
  }
  return list;
}

}  // namespace

int main(int argc, char** argv) {
  const Options options = parseOptions(argc, argv);
  bool mpiMode = false;
  [[maybe_unused]] int rank = 0;
#ifdef STRATA_HAVE_MPI
  std::optional<MpiSession> session;
  std::optional<MpiCommunicator> comm;
  if (launchedByMpiexec()) {
    session.emplace(argc, argv);
    comm.emplace();
    mpiMode = comm->size() > 1;
    rank = comm->rank();
  }
  for (int i = 1; mpiMode && i < argc; ++i) {
    // Each rank would shuffle with its own seed and run a different benchmark.
    if (std::strstr(argv[i], "random_interleaving") != nullptr) {
      if (rank == 0)
        std::fprintf(stderr, "comm_bench: %s cannot be used under MPI\n", argv[i]);
      return 1;
    }
  }
  if (rank != 0) {
    // Only rank 0 writes files; the others would race on --benchmark_out.
    int kept = 1;
    for (int i = 1; i < argc; ++i) {
      if (std::strncmp(argv[i], "--benchmark_out", 15) != 0)
        argv[kept++] = argv[i];
    }
    argc = kept;
  }
#endif

  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv))
    return 1;

  std::vector<std::unique_ptr<LocalTeam>> teams;
  const std::vector<std::size_t> sweepSizes = {std::size_t{1} << 24, std::size_t{1} << 26};
  if (mpiMode) {
#ifdef STRATA_HAVE_MPI
    MpiCommunicator* c = &*comm;
    const std::string where = ":mpi" + std::to_string(c->size());
    for (std::size_t bytes : kSizes) {
      for (const Candidate& candidate : candidates(options, true)) {
        benchmark::RegisterBenchmark(
            ("allreduce/" + candidate.name + where + "/" + sizeName(bytes)).c_str(),
            [c, run = candidate.run, bytes](benchmark::State& s) { benchMpi(s, *c, run, bytes); })
            ->UseManualTime()
            ->Unit(benchmark::kMicrosecond);
      }
    }
    if (options.segmentSweep) {
      for (std::size_t bytes : sweepSizes) {
        for (const Candidate& candidate : sweep()) {
          benchmark::RegisterBenchmark(
              ("sweep/" + candidate.name + where + "/" + sizeName(bytes)).c_str(),
              [c, run = candidate.run, bytes](benchmark::State& s) { benchMpi(s, *c, run, bytes); })
              ->UseManualTime()
              ->Unit(benchmark::kMicrosecond);
        }
      }
    }
#endif
  } else {
    for (int k : options.localRanks) {
      if (k < 1) {
        std::fprintf(stderr, "comm_bench: --local_ranks wants sizes >= 1\n");
        return 1;
      }
      teams.push_back(std::make_unique<LocalTeam>(k));
      LocalTeam* team = teams.back().get();
      const std::string where = ":local" + std::to_string(k);
      auto add = [&](const std::string& prefix, const Candidate& candidate, std::size_t bytes) {
        benchmark::RegisterBenchmark(
            (prefix + candidate.name + where + "/" + sizeName(bytes)).c_str(),
            [team, run = candidate.run, bytes](benchmark::State& s) {
              benchLocal(s, *team, run, bytes);
            })
            ->UseManualTime()
            ->Unit(benchmark::kMicrosecond);
      };
      for (std::size_t bytes : kSizes)
        for (const Candidate& candidate : candidates(options, false))
          add("allreduce/", candidate, bytes);
      if (options.segmentSweep)
        for (std::size_t bytes : sweepSizes)
          for (const Candidate& candidate : sweep())
            add("sweep/", candidate, bytes);
    }
  }

#ifdef STRATA_HAVE_MPI
  if (rank != 0) {
    NullReporter quiet;
    benchmark::RunSpecifiedBenchmarks(&quiet);
  } else {
    benchmark::RunSpecifiedBenchmarks();
  }
#else
  benchmark::RunSpecifiedBenchmarks();
#endif
  benchmark::Shutdown();
  return 0;
}

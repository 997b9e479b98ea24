// How large a question strata answers before refusing it: resources are
// bounded before anything is allocated, so an oversized request ends as one
// clear message (exit status 2), never as std::bad_alloc, a swapping machine
// or a run that does not end.
//
// Two kinds of bound:
//   - Limits: defaults chosen so a request within them finishes in seconds and
//     a few hundred MB on a laptop. The CLI may raise them (the lead wires
//     --max-workers, --max-tasks, --max-events and --allow-large); every
//     message names the option that raises the limit.
//   - hard ceilings (k* constants below): what the data structures can
//     represent (int worker and task ids, the cube of a kernel grid). Not
//     overridable; setLimits() clamps to them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace strata {

// Ceilings of what a config may describe (validated by the loaders).
inline constexpr int64_t kMaxClusterDevices = 2'147'483'647;  // workers are ints
inline constexpr int kMaxLanes = 4096;             // parallel links per unit of a topology level
inline constexpr int kMaxNetworkLayers = 100'000;  // after expanding `bottleneck` blocks
inline constexpr size_t kMaxGridDims = 64;         // values of a kernel table's GEMM grid

// Options that raise each limit (named in the messages; the CLI defines them).
inline constexpr const char* kMaxWorkersOption = "--max-workers";
inline constexpr const char* kMaxTasksOption = "--max-tasks";
inline constexpr const char* kMaxEventsOption = "--max-events";
inline constexpr const char* kAllowLargeOption = "--allow-large";

struct Limits {
  // Workers of one closed-form estimate (predict, compare, sweep). The model
  // keeps a row per worker (~250 B, ~3 KB more in JSON output): 131,072
  // workers of resnet50 on dgx-h100 take 0.7 s and 38 MB (6 s and 420 MB as
  // JSON), and the largest training clusters built (2024) have ~1e5 devices.
  int64_t maxModelWorkers = 131'072;
  // Tasks of one lowered Plan (plan, simulate, predict --engine sim, run).
  // Lowering builds ~0.5e6 tasks per second, ~190 B each with the simulator's
  // state: resnet50 ring on 4,096 workers has 1.9e6 tasks, lowered in 3.5 s
  // and simulated in 2 s in 360 MB; 5,000,000 is ~15 s and ~1 GB at most.
  int64_t maxPlanTasks = 5'000'000;
  // Simulator work: tasks plus the flows visited when transfers start and end
  // (twice per flow; an all-to-all step of K workers has K(K-1) flows). ~2e8
  // per second: 2,000,000,000 is ~10 s.
  int64_t maxSimEvents = 2'000'000'000;
  // Workers of `strata run` as threads of one process (two threads each, a
  // compute and a communication lane). 0: the default, max(64, 2 x cores):
  // more workers than that only time-slice the same cores, and each holds its
  // own copy of the network.
  int64_t maxThreadWorkers = 0;
  // Tasks plus flows of a plan printed by `strata plan` (every line is held in
  // memory before it is written: ~640 B per item in JSON, so ~650 MB).
  int64_t maxPrintedPlanItems = 1'000'000;
};

// The hard ceilings of the Limits themselves (ids are ints).
inline constexpr int64_t kCeilingModelWorkers = 2'147'483'647;
inline constexpr int64_t kCeilingPlanTasks = 2'147'483'647;
inline constexpr int64_t kCeilingSimEvents = int64_t{1} << 62;
inline constexpr int64_t kCeilingThreadWorkers = 4096;
inline constexpr int64_t kCeilingPrintedPlanItems = int64_t{1} << 62;

// The limits in force in this process (the defaults until setLimits()).
const Limits& limits();
// Sets the limits in force, each clamped to its ceiling (a value <= 0 keeps
// the default). Call before any work, from one thread (the CLI, after
// parsing its options); not synchronised.
void setLimits(const Limits& limits);
// Every limit at its ceiling: what --allow-large asks for.
Limits largestLimits();
// maxThreadWorkers with its default resolved (max(64, 2 x cores), at most the
// ceiling).
int64_t threadWorkerLimit(const Limits& limits);

// Throws OptionError("--workers") when an estimate of `workers` workers is
// over limits.maxModelWorkers, naming the option that raises it.
void checkModelWorkers(int64_t workers, const Limits& limits);
// The same bound for the simulator (simulate, --engine sim), which keeps
// state per worker too: `simulate -k 1000000000` is refused at once.
void checkSimWorkers(int64_t workers, const Limits& limits);

// The memory this process may still allocate, and which bound sets it: the
// smallest of
//   - this machine's physical memory (sysconf),
//   - the address-space limit (RLIMIT_AS, `ulimit -v`) less the address
//     space already mapped (/proc/self/statm),
//   - the memory.max of the process's cgroup v2 and of each cgroup above it
//     (/proc/self/cgroup, under /sys/fs/cgroup; "max" is none), or cgroup
//     v1's memory.limit_in_bytes.
// Every memory check (run, profile, allreduce, calibrate) compares with this
// one figure, before anything is allocated.
struct MemoryLimit {
  double bytes = 0;           // 0: no bound found (not Linux)
  std::string what;           // the bound in words, e.g. "this machine's physical memory"
  bool addressSpace = false;  // RLIMIT_AS sets it: reserved, untouched space counts too
  // "3.2 GB, the address-space limit (ulimit -v) less the 0.3 GB mapped".
  std::string describe() const;
};
MemoryLimit availableMemory();
// The part of availableMemory() that reads cgroups, on `procSelfCgroup` (the
// text of /proc/self/cgroup) under the mount `cgroupRoot`: the smallest limit
// of the process's cgroup and its ancestors, bytes 0 when none. For tests.
MemoryLimit cgroupMemoryLimit(const std::string& procSelfCgroup, const std::string& cgroupRoot);
// Address space `threads` new threads reserve without touching it, which
// counts under RLIMIT_AS: a stack each (RLIMIT_STACK, 8 MiB by default) and a
// malloc arena each (64 MiB on 64-bit glibc), up to glibc's 8 arenas per core.
// Checks add it when availableMemory().addressSpace.
double threadsReservedBytes(int64_t threads);

}  // namespace strata

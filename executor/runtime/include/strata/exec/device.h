// The compute device a run, a profile or a calibration uses, and how work on
// it is timed.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "strata/exec/comm/buffer_ops.h"
#include "strata/exec/nn/backend.h"
#include "strata/model/cluster.h"

namespace strata::exec {

enum class Device {
  kCpu,   // CpuBackend: Eigen on this thread
  kCuda,  // CudaBackend: cuBLAS, cuDNN and kernels/ on GPU 0
};

std::string_view toString(Device device);
// "cpu" or "cuda"; anything else is an OptionError naming `option`.
Device parseDevice(std::string_view text, const std::string& option);
// Whether this strata was built with the device's backend (CUDA: STRATA_CUDA).
bool deviceBuilt(Device device);
// Throws OptionError naming `option` when `device` cannot be used here: a
// build without its backend ("this strata was built without CUDA ...") or a
// machine without a usable GPU ("no CUDA device: cudaGetDeviceCount: ...").
void checkDevice(Device device, const std::string& option);

// Memory the workers of one process have on `device`, in bytes: what this
// process may allocate (CPU: availableMemory() in model/limits.h, the least of
// physical memory, ulimit -v and the cgroup's memory.max), or GPU `gpu`'s
// global memory (CUDA).
double deviceMemoryBytes(Device device, int gpu = 0);
// What device memory there is now: CUDA GPU `gpu`'s free and total bytes
// (cudaMemGetInfo) and its name; the CPU: availableMemory() for both, name
// "host". Throws RunFailure naming the call when a GPU cannot be read.
struct DeviceMemoryNow {
  double freeBytes = 0;
  double totalBytes = 0;
  std::string name;
};
DeviceMemoryNow deviceMemoryNow(Device device, int gpu = 0);
// How many of `device` this process sees: 1 for the CPU, the CUDA devices
// (0 when none or not built) for CUDA.
int deviceCount(Device device);

// A backend for one worker on `device` (checkDevice and checkElement
// first). The CPU's is a CpuBackend on `threads` threads; CUDA's a
// CudaBackend on GPU `gpu` whose GEMMs and convolutions compute in `element`
// (CudaBackendOptions::element: fp32 without TF32, tf32, or bf16 with fp32
// accumulation and fp32 master weights).
std::unique_ptr<nn::Backend> makeBackend(Device device, const std::string& option = "--device",
                                         int gpu = 0, int threads = 1,
                                         ElementType element = ElementType::kFp32);
// Throws OptionError naming --element (and the device) when the executor
// cannot compute in `element` on `device`: the CPU computes in fp32 only; the
// CUDA backend runs fp32, tf32 and bf16, not fp16 (it would need loss
// scaling, which is not built: use bf16).
void checkElement(ElementType element, Device device);
// The cores this process may run on (its CPU affinity mask; at least 1).
int usableCores();
// Their ids, in order.
std::vector<int> usableCoreIds();

// Where a worker's threads run (--bind-to): on cores of their own (kCore),
// wherever the scheduler puts them (kNone), or on cores of their own when
// every worker can have them (kAuto: workers x threads per worker <= usable
// cores). Bound, a worker's communication thread shares its compute's cores
// and never waits for a core another worker's compute holds: unbound on 2
// cores, a woken receiver waited up to 2.4 ms behind the other worker's
// compute (ZeRO-3, tiny-gpt, 2026-11-27; docs/executor.md, "Binding").
enum class CoreBinding { kAuto, kCore, kNone };
std::string_view toString(CoreBinding binding);
// Throws OptionError naming `option` for anything but auto, core or none.
CoreBinding parseCoreBinding(const std::string& text, const std::string& option);
// Worker (or ps server) `rank` of `ranks` run as threads of this process,
// `threads` kernel threads each: the cores it is bound to, empty when it is
// not bound. Throws OptionError naming --bind-to for kCore when the usable
// cores are fewer than ranks x threads.
std::vector<int> coresOfWorker(CoreBinding binding, int rank, int ranks, int threads);
// Binds the calling thread, and the threads it starts afterwards, to `cores`
// (nothing when empty).
void bindThisThread(const std::vector<int>& cores);
// How a worker on `device` (GPU `gpu`) copies and sums its messages: the
// host's, or its GPU's stream and kernels (cuda_ops.h).
std::shared_ptr<BufferOps> makeCommOps(Device device, int gpu = 0);

// Times work enqueued on a backend. On the CPU the work is done when a call
// returns and marks read the host clock; on CUDA, marks are events on the
// backend's stream, so the time between two marks is the GPU time of the
// kernels between them, not the host's time to enqueue them.
//
//   WorkTimer timer(backend);
//   const auto origin = timer.start();  // host time of time 0
//   const int a = timer.mark();  backend work ...  const int b = timer.mark();
//   timer.finish();                     // waits for the backend
//   double seconds = timer.seconds(b) - timer.seconds(a);
class WorkTimer {
 public:
  using Clock = std::chrono::steady_clock;
  explicit WorkTimer(nn::Backend& backend);
  ~WorkTimer();
  WorkTimer(const WorkTimer&) = delete;
  WorkTimer& operator=(const WorkTimer&) = delete;

  // Waits for the backend, then begins a new timeline (earlier marks are
  // dropped); returns the host time of its origin, so that host-timed work
  // (communication) and marks share one clock: origin + seconds(mark).
  Clock::time_point start();
  // Records a point after all work enqueued so far; its id.
  int mark();
  // Waits until every mark so far has been reached.
  void finish();
  // Waits until mark `id` has been reached (the work before it is done; later
  // work may still run). May be called from another thread than mark()'s.
  // On the CPU a mark is taken after its work is done: returns at once.
  void wait(int id);
  // Seconds from the origin to mark `id` (after finish()).
  double seconds(int id) const;
  // Whether marks measure device time (CUDA) rather than the host clock.
  bool onDevice() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace strata::exec

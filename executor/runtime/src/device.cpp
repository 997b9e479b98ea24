#include "strata/exec/device.h"

#include <fmt/format.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <thread>

#include "strata/exec/nn/cpu_backend.h"
#include "strata/model/error.h"
#include "strata/model/limits.h"

#if STRATA_HAVE_CUDA
#include "strata/exec/comm/cuda_ops.h"
#include "strata/exec/nn/cuda_backend.h"
#endif

namespace strata::exec {

std::string_view toString(Device device) {
  switch (device) {
    case Device::kCpu:
      return "cpu";
    case Device::kCuda:
      return "cuda";
  }
  return "?";
}

Device parseDevice(std::string_view text, const std::string& option) {
  if (text == "cpu")
    return Device::kCpu;
  if (text == "cuda")
    return Device::kCuda;
  throw OptionError(option, "unknown device '" + std::string(text) + "' (expected cpu or cuda)");
}

bool deviceBuilt(Device device) {
  switch (device) {
    case Device::kCpu:
      return true;
    case Device::kCuda:
      return STRATA_HAVE_CUDA != 0;
  }
  return false;
}

void checkDevice(Device device, const std::string& option) {
  if (!deviceBuilt(device))
    throw OptionError(option,
                      "this strata was built without CUDA (configure with nvcc and cuDNN "
                      "present, or -DSTRATA_WITH_CUDA=ON; see README)");
#if STRATA_HAVE_CUDA
  if (device == Device::kCuda) {
    const std::string why = nn::cudaUnavailableReason();
    if (!why.empty())
      throw OptionError(option, "no usable CUDA device here: " + why);
  }
#endif
}

double deviceMemoryBytes(Device device, int gpu) {
#if STRATA_HAVE_CUDA
  if (device == Device::kCuda)
    return double(nn::cudaDeviceMemoryBytes(gpu));
#endif
  (void)device;
  (void)gpu;
  return availableMemory().bytes;
}

DeviceMemoryNow deviceMemoryNow(Device device, int gpu) {
#if STRATA_HAVE_CUDA
  if (device == Device::kCuda) {
    const nn::CudaMemoryInfo info = nn::cudaMemoryInfo(gpu);
    return {double(info.freeBytes), double(info.totalBytes), info.name};
  }
#endif
  (void)device;
  (void)gpu;
  const double bytes = availableMemory().bytes;
  return {bytes, bytes, "host"};
}

int deviceCount(Device device) {
#if STRATA_HAVE_CUDA
  if (device == Device::kCuda)
    return cudaVisibleDeviceCount();
#endif
  return device == Device::kCpu ? 1 : 0;
}

int usableCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0)
    return std::max(1, CPU_COUNT(&set));
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

std::vector<int> usableCoreIds() {
  std::vector<int> ids;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0)
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set))
        ids.push_back(c);
  return ids;  // empty where the mask cannot be read: nothing is bound then
}

std::string_view toString(CoreBinding binding) {
  switch (binding) {
    case CoreBinding::kAuto:
      return "auto";
    case CoreBinding::kCore:
      return "core";
    case CoreBinding::kNone:
      return "none";
  }
  return "?";
}

CoreBinding parseCoreBinding(const std::string& text, const std::string& option) {
  for (auto b : {CoreBinding::kAuto, CoreBinding::kCore, CoreBinding::kNone})
    if (text == toString(b))
      return b;
  throw OptionError(option, fmt::format("must be auto, core or none, got '{}'", text));
}

std::vector<int> coresOfWorker(CoreBinding binding, int rank, int ranks, int threads) {
  if (binding == CoreBinding::kNone)
    return {};
  const auto ids = usableCoreIds();
  const int64_t need = int64_t{ranks} * std::max(1, threads);
  if (need > static_cast<int64_t>(ids.size())) {
    if (binding == CoreBinding::kCore)
      throw OptionError(
          "--bind-to",
          fmt::format("core needs {} cores ({} workers x {} thread{} each), but this process may "
                      "use {}; use fewer workers or --threads-per-worker, or --bind-to none",
                      need, ranks, threads, threads == 1 ? "" : "s", ids.size()));
    return {};
  }
  const auto first = ids.begin() + static_cast<std::ptrdiff_t>(int64_t{rank} * threads);
  return {first, first + std::max(1, threads)};
}

void bindThisThread(const std::vector<int>& cores) {
  if (cores.empty())
    return;
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cores)
    CPU_SET(c, &set);
  // A failure (a container forbidding it) leaves the thread where it was:
  // binding changes timings, never results.
  (void)pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

void checkElement(ElementType element, Device device) {
  if (element == ElementType::kFp32)
    return;
  const auto type = std::string(toString(element));
  if (device == Device::kCpu)
    throw OptionError("--element",
                      fmt::format("{} with --device cpu: the CPU executor computes in fp32 only "
                                  "(--element tf32 and bf16 run with --device cuda)",
                                  type));
  if (element == ElementType::kFp16)
    throw OptionError(
        "--element",
        "fp16 with --device cuda: the executor does not run fp16, which needs loss scaling "
        "(small gradients underflow fp16's 5-bit exponent) and that is not built; use --element "
        "bf16 (fp32's exponent range, no loss scaling, the same tensor-core peak on A100 and "
        "H100)");
}

std::unique_ptr<nn::Backend> makeBackend(Device device, const std::string& option, int gpu,
                                         int threads, ElementType element) {
  checkDevice(device, option);
  checkElement(element, device);
#if STRATA_HAVE_CUDA
  if (device == Device::kCuda) {
    nn::CudaBackendOptions o;
    o.device = gpu;
    o.element = element;
    return std::make_unique<nn::CudaBackend>(o);
  }
#endif
  (void)gpu;
  nn::CpuOptions cpu;
  cpu.threads = threads;
  return std::make_unique<nn::CpuBackend>(cpu);
}

std::shared_ptr<BufferOps> makeCommOps(Device device, int gpu) {
#if STRATA_HAVE_CUDA
  if (device == Device::kCuda)
    return makeCudaOps(gpu);
#endif
  (void)device;
  (void)gpu;
  return sharedHostOps();
}

// ---- WorkTimer ---------------------------------------------------------------

struct WorkTimer::Impl {
  nn::Backend* backend = nullptr;
#if STRATA_HAVE_CUDA
  nn::CudaBackend* cuda = nullptr;  // when the backend is CUDA's: marks are its events
#endif
  Clock::time_point origin;
  std::vector<Clock::time_point> marks;  // host marks (CPU)
};

WorkTimer::WorkTimer(nn::Backend& backend) : impl_(std::make_unique<Impl>()) {
  impl_->backend = &backend;
#if STRATA_HAVE_CUDA
  impl_->cuda = dynamic_cast<nn::CudaBackend*>(&backend);
#endif
}

WorkTimer::~WorkTimer() = default;

bool WorkTimer::onDevice() const {
#if STRATA_HAVE_CUDA
  return impl_->cuda != nullptr;
#else
  return false;
#endif
}

WorkTimer::Clock::time_point WorkTimer::start() {
  impl_->marks.clear();
#if STRATA_HAVE_CUDA
  if (impl_->cuda) {
    impl_->origin = impl_->cuda->startTimeline();
    return impl_->origin;
  }
#endif
  impl_->backend->synchronize();
  impl_->origin = Clock::now();
  return impl_->origin;
}

int WorkTimer::mark() {
#if STRATA_HAVE_CUDA
  if (impl_->cuda)
    return impl_->cuda->markTime();
#endif
  impl_->marks.push_back(Clock::now());
  return static_cast<int>(impl_->marks.size()) - 1;
}

void WorkTimer::wait(int id) {
#if STRATA_HAVE_CUDA
  if (impl_->cuda)
    impl_->cuda->waitMark(id);
#endif
  (void)id;
}

void WorkTimer::finish() {
  impl_->backend->synchronize();
}

double WorkTimer::seconds(int id) const {
#if STRATA_HAVE_CUDA
  if (impl_->cuda)
    return impl_->cuda->markSeconds(id);
#endif
  STRATA_ENFORCE(id >= 0 && id < static_cast<int>(impl_->marks.size()));
  return std::chrono::duration<double>(impl_->marks[static_cast<size_t>(id)] - impl_->origin)
      .count();
}

}  // namespace strata::exec

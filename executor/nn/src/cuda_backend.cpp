// The CUDA backend: cuDNN convolutions, cuBLAS fully-connected layers and the
// project's CUDA kernels for the rest, all on one stream per backend. Plain
// C++ calling the CUDA runtime, cuBLAS and cuDNN C APIs (no device code here:
// that lives in kernels/). This file: the checks' messages, devices, device
// memory (pooled) and managed memory, the backend's stream and handles, copies
// and the GPU timeline; the
// layers are in cuda_conv.cpp, cuda_fc.cpp and cuda_layers.cpp
// (cuda_internal.h).
#include "strata/exec/nn/cuda_backend.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <deque>
#include <limits>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "cuda_internal.h"
#include "strata/kernels/kernels.h"
#include "strata/model/error.h"

namespace strata::nn::cuda_detail {

// ---- errors -------------------------------------------------------------------

[[noreturn]] void fail(const char* call, const std::string& where, const std::string& status) {
  if (where.empty())
    throw RunFailure(fmt::format("{}: {}", call, status));
  throw RunFailure(fmt::format("{} ({}): {}", call, where, status));
}

std::string statusText(cudaError_t e) {
  return fmt::format("{} ({})", cudaGetErrorName(e), cudaGetErrorString(e));
}

std::string statusText(cublasStatus_t s) {
  return cublasGetStatusName(s);
}

std::string statusText(cudnnStatus_t s) {
  return cudnnGetErrorString(s);
}

std::string dimsText(const Dims& d) {
  return fmt::format("{}x{}x{}x{}", d.n, d.c, d.h, d.w);
}

void setDevice(int device) {
  int current = -1;
  check(cudaGetDevice(&current), "cudaGetDevice");
  if (current != device)
    check(cudaSetDevice(device), "cudaSetDevice", [&] { return fmt::format("device {}", device); });
}

}  // namespace strata::nn::cuda_detail

namespace strata::nn {

using namespace cuda_detail;

namespace {

// The number of CUDA devices in `count`, or why there is none to use.
std::string countDevices(int& count) {
  count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    // Leave no error behind for a later cudaGetLastError to report.
    static_cast<void>(cudaGetLastError());
    count = 0;
    return fmt::format("cudaGetDeviceCount: {}", statusText(e));
  }
  if (count == 0)
    return "cudaGetDeviceCount found no device";
  return {};
}

}  // namespace

// ---- availability ------------------------------------------------------------------------

std::string cudaUnavailableReason() {
  int count = 0;
  return countDevices(count);
}

size_t cudaDeviceMemoryBytes(int device) {
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties",
        [&] { return fmt::format("device {}", device); });
  return prop.totalGlobalMem;
}

// ---- CudaDeviceMemory ----------------------------------------------------------------------

namespace {

// The default memory pool of `device`, its release threshold raised to the
// maximum the first time (so blocks freed by cudaFreeAsync stay in the pool
// for the next allocation rather than going back to the driver at each
// synchronisation). One pool per device, shared by every worker on it.
cudaMemPool_t devicePool(int device) {
  static std::mutex mutex;
  static std::map<int, cudaMemPool_t> pools;
  std::lock_guard lock(mutex);
  if (auto it = pools.find(device); it != pools.end())
    return it->second;
  const auto where = [&] { return fmt::format("device {}", device); };
  int supported = 0;
  check(cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, device),
        "cudaDeviceGetAttribute (cudaDevAttrMemoryPoolsSupported)", where);
  if (!supported)
    throw RunFailure(fmt::format(
        "CUDA device {} has no memory pools (cudaDevAttrMemoryPoolsSupported 0): the CUDA "
        "backend allocates its buffers from one (cudaMallocFromPoolAsync)",
        device));
  cudaMemPool_t pool = nullptr;
  check(cudaDeviceGetDefaultMemPool(&pool, device), "cudaDeviceGetDefaultMemPool", where);
  uint64_t threshold = std::numeric_limits<uint64_t>::max();
  check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold),
        "cudaMemPoolSetAttribute (cudaMemPoolAttrReleaseThreshold)", where);
  pools.emplace(device, pool);
  return pool;
}

}  // namespace

CudaMemoryInfo cudaMemoryInfo(int device) {
  const auto where = [&] { return fmt::format("device {}", device); };
  setDevice(device);
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties", where);
  int pools = 0;
  check(cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, device),
        "cudaDeviceGetAttribute (cudaDevAttrMemoryPoolsSupported)", where);
  if (pools) {
    // Blocks an earlier backend of this process freed stay in the pool (its
    // release threshold keeps them): give them back first, so that they
    // count as free.
    cudaMemPool_t pool = nullptr;
    check(cudaDeviceGetDefaultMemPool(&pool, device), "cudaDeviceGetDefaultMemPool", where);
    check(cudaMemPoolTrimTo(pool, 0), "cudaMemPoolTrimTo", where);
  }
  CudaMemoryInfo info;
  check(cudaMemGetInfo(&info.freeBytes, &info.totalBytes), "cudaMemGetInfo", where);
  info.name = prop.name;
  return info;
}

// Pinned host memory used as a ring: each copy takes the next free region,
// and a region is written again only once the copy that used it has
// completed (its event). So a step's small uploads (keys, classes, labels,
// token ids) never wait for the kernels before them: their regions were last
// used many copies ago, by copies long done.
struct CudaDeviceMemory::Staging {
  struct Use {
    size_t begin = 0, end = 0;
    EventHandle event;  // recorded after the copy that used [begin, end)
  };

  std::mutex mutex;  // the compute and communication lanes both copy
  std::byte* pinned = nullptr;
  size_t bytes = 0;
  size_t head = 0;                 // where the next region starts
  std::deque<Use> uses;            // copies that may still use their region
  std::vector<EventHandle> spare;  // events of finished uses, for reuse

  ~Staging() {
    for (Use& u : uses)
      static_cast<void>(cudaEventSynchronize(u.event.get()));
    uses.clear();
    if (pinned)
      static_cast<void>(cudaFreeHost(pinned));
  }

  void finish(Use& u, bool wait) {
    if (wait)
      check(cudaEventSynchronize(u.event.get()), "cudaEventSynchronize",
            "a copy through pinned staging");
    spare.push_back(std::move(u.event));
  }

  // A region of `need` bytes (need <= kStagingBytes) that no pending copy
  // uses: waits only for the copies whose regions it overlaps.
  std::byte* take(size_t need) {
    // Drop the copies already done.
    for (auto it = uses.begin(); it != uses.end();) {
      const cudaError_t e = cudaEventQuery(it->event.get());
      if (e == cudaErrorNotReady) {
        ++it;
        continue;
      }
      check(e, "cudaEventQuery", "a copy through pinned staging");
      finish(*it, false);
      it = uses.erase(it);
    }
    if (need > bytes) {
      for (Use& u : uses)
        finish(u, true);
      uses.clear();
      if (pinned)
        check(cudaFreeHost(pinned), "cudaFreeHost", "pinned staging");
      pinned = nullptr;
      bytes = head = 0;
      // At least 1 MiB at once, so that small copies do not regrow it.
      const size_t size = std::min(kStagingBytes, std::max(need, size_t{1} << 20));
      void* p = nullptr;
      check(cudaMallocHost(&p, size), "cudaMallocHost",
            [&] { return fmt::format("{} bytes of pinned staging", size); });
      pinned = static_cast<std::byte*>(p);
      bytes = size;
    }
    if (head + need > bytes)
      head = 0;  // wrap around
    const size_t begin = head, end = head + need;
    for (auto it = uses.begin(); it != uses.end();) {
      if (it->begin < end && begin < it->end) {
        finish(*it, true);
        it = uses.erase(it);
      } else {
        ++it;
      }
    }
    head = end;
    return pinned + begin;
  }

  // Records, on `stream`, the end of the copy that used [at, at + n).
  void used(const std::byte* at, size_t n, cudaStream_t stream) {
    Use u;
    u.begin = static_cast<size_t>(at - pinned);
    u.end = u.begin + n;
    if (!spare.empty()) {
      u.event = std::move(spare.back());
      spare.pop_back();
    } else {
      // Timing off: the event only orders the reuse of the region.
      check(cudaEventCreateWithFlags(u.event.out(), cudaEventDisableTiming),
            "cudaEventCreateWithFlags", "pinned staging");
    }
    check(cudaEventRecord(u.event.get(), stream), "cudaEventRecord", "pinned staging");
    uses.push_back(std::move(u));
  }
};

CudaDeviceMemory::CudaDeviceMemory(int device, CUstream_st* stream)
    : device_(device), stream_(stream), staging_(std::make_unique<Staging>()) {
  setDevice(device_);
  static_cast<void>(devicePool(device_));  // a device without pools fails here, not later
}

CudaDeviceMemory::~CudaDeviceMemory() {
  static_cast<void>(cudaSetDevice(device_));
}

void* CudaDeviceMemory::allocate(size_t bytes) {
  setDevice(device_);
  const size_t size = bytes == 0 ? 1 : bytes;
  const auto where = [&] {
    return fmt::format("{} bytes ({:.3f} GiB) on device {}", bytes,
                       double(bytes) / double(1ull << 30), device_);
  };
  void* p = nullptr;
  check(cudaMallocFromPoolAsync(&p, size, devicePool(device_), stream_), "cudaMallocFromPoolAsync",
        where);
  // Zero-filled on the stream; waited for, so that any stream may use the
  // block once this returns (a pool's block is ordered on its stream only).
  cudaError_t e = cudaMemsetAsync(p, 0, size, stream_);
  const char* call = "cudaMemsetAsync";
  if (e == cudaSuccess) {
    e = cudaStreamSynchronize(stream_);
    call = "cudaStreamSynchronize";
  }
  if (e != cudaSuccess) {
    static_cast<void>(cudaFreeAsync(p, stream_));
    fail(call, where(), statusText(e));
  }
  return p;
}

void CudaDeviceMemory::deallocate(void* p, size_t) noexcept {
  static_cast<void>(cudaSetDevice(device_));
  static_cast<void>(cudaFreeAsync(p, stream_));
}

void CudaDeviceMemory::upload(void* dst, const void* src, size_t bytes) {
  if (bytes == 0)
    return;
  setDevice(device_);
  std::lock_guard lock(staging_->mutex);
  for (size_t at = 0; at < bytes; at += kStagingBytes) {
    const size_t n = std::min(kStagingBytes, bytes - at);
    std::byte* pinned = staging_->take(n);
    std::memcpy(pinned, static_cast<const std::byte*>(src) + at, n);
    check(cudaMemcpyAsync(static_cast<std::byte*>(dst) + at, pinned, n, cudaMemcpyHostToDevice,
                          stream_),
          "cudaMemcpyAsync", [&] { return fmt::format("upload of {} bytes", n); });
    staging_->used(pinned, n, stream_);
  }
}

void CudaDeviceMemory::download(void* dst, const void* src, size_t bytes) {
  if (bytes == 0)
    return;
  setDevice(device_);
  std::lock_guard lock(staging_->mutex);
  for (size_t at = 0; at < bytes; at += kStagingBytes) {
    const size_t n = std::min(kStagingBytes, bytes - at);
    std::byte* pinned = staging_->take(n);
    check(cudaMemcpyAsync(pinned, static_cast<const std::byte*>(src) + at, n,
                          cudaMemcpyDeviceToHost, stream_),
          "cudaMemcpyAsync", [&] { return fmt::format("download of {} bytes", n); });
    staging_->used(pinned, n, stream_);
    // The host reads the bytes: wait for this copy (and so for the kernels
    // before it on the stream).
    Staging::Use& mine = staging_->uses.back();
    staging_->finish(mine, true);
    staging_->uses.pop_back();
    std::memcpy(static_cast<std::byte*>(dst) + at, pinned, n);
  }
}

void CudaDeviceMemory::copy(void* dst, const void* src, size_t bytes) {
  if (bytes == 0)
    return;
  setDevice(device_);
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_), "cudaMemcpyAsync",
        [&] { return fmt::format("device copy of {} bytes", bytes); });
}

void CudaDeviceMemory::zero(void* dst, size_t bytes) {
  if (bytes == 0)
    return;
  setDevice(device_);
  check(cudaMemsetAsync(dst, 0, bytes, stream_), "cudaMemsetAsync",
        [&] { return fmt::format("zero fill of {} bytes", bytes); });
}

// ---- CudaManagedMemory ----------------------------------------------------------------------

void* CudaManagedMemory::allocate(size_t bytes) {
  setDevice(device_);
  // cudaMallocManaged rejects a size of 0; 256-byte aligned, as every CUDA
  // allocation.
  const size_t size = bytes == 0 ? 1 : bytes;
  const auto where = [&] { return fmt::format("{} bytes on device {}", bytes, device_); };
  DevicePointer p;
  check(cudaMallocManaged(p.out(), size, cudaMemAttachGlobal), "cudaMallocManaged", where);
  cudaMemLocation device{};
  device.type = cudaMemLocationTypeDevice;
  device.id = device_;
  check(cudaMemAdvise(p.get(), size, cudaMemAdviseSetPreferredLocation, device), "cudaMemAdvise",
        where);
  // Zero-filled by the device, so the pages start out there.
  check(cudaMemsetAsync(p.get(), 0, size, stream_), "cudaMemsetAsync", where);
  check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize", where);
  return p.release();  // the Buffer owns it now
}

void CudaManagedMemory::deallocate(void* p, size_t) noexcept {
  static_cast<void>(cudaFree(p));
}

void CudaManagedMemory::wait() {
  setDevice(device_);
  check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize", "managed memory copy");
}

void CudaManagedMemory::upload(void* dst, const void* src, size_t bytes) {
  wait();
  if (bytes > 0)
    std::memcpy(dst, src, bytes);
}

void CudaManagedMemory::download(void* dst, const void* src, size_t bytes) {
  wait();
  if (bytes > 0)
    std::memcpy(dst, src, bytes);
}

void CudaManagedMemory::copy(void* dst, const void* src, size_t bytes) {
  wait();
  if (bytes > 0)
    std::memcpy(dst, src, bytes);
}

void CudaManagedMemory::zero(void* dst, size_t bytes) {
  wait();
  if (bytes > 0)
    std::memset(dst, 0, bytes);
}

namespace {

// A stream that does not synchronise with the legacy default stream, so
// other code's use of stream 0 never serialises this worker's kernels.
cudaStream_t createStream(StreamHandle& s) {
  check(cudaStreamCreateWithFlags(s.out(), cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  return s.get();
}

}  // namespace

CudaBackend::Impl::Impl(const CudaBackendOptions& o, int dev)
    : options(o), memory(dev, createStream(stream)) {
  check(cublasCreate(cublas.out()), "cublasCreate");
  check(cublasSetStream(cublas.get(), stream.get()), "cublasSetStream");
  // Default math keeps FP32 products in FP32 (no TF32, no reduced-precision
  // emulation); TF32 only when asked for. bf16's GEMMs say their types in
  // each cublasGemmEx call (bf16 operands run on tensor cores whatever the
  // mode); any SGEMM beside them stays plain FP32.
  check(cublasSetMathMode(cublas.get(),
                          options.tf32() ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH),
        "cublasSetMathMode");
  check(cudnnCreate(cudnn.out()), "cudnnCreate");
  check(cudnnSetStream(cudnn.get(), stream.get()), "cudnnSetStream");
}

// ---- CudaBackend ---------------------------------------------------------------------------

namespace {

// fp16 needs loss scaling, which the backend does not do (the executor
// refuses --element fp16 first, naming the option; this guards other callers).
void checkElement(ElementType element) {
  if (element == ElementType::kFp16)
    throw RunFailure(
        "the CUDA backend does not run fp16: fp16 training needs loss scaling (small gradients "
        "underflow its 5-bit exponent), which is not implemented; use bf16 (fp32's exponent "
        "range, the same tensor-core peak on A100 and H100)");
}

}  // namespace

CudaBackend::CudaBackend(CudaBackendOptions options) : options_(options) {
  checkElement(options_.element);
  int count = 0;
  if (const std::string why = countDevices(count); !why.empty())
    throw RunFailure("no CUDA device: " + why);
  if (options_.device < 0 || options_.device >= count)
    throw RunFailure(fmt::format("no CUDA device {}: this machine has {} (devices 0 to {})",
                                 options_.device, count, count - 1));
  check(cudaSetDevice(options_.device), "cudaSetDevice");
  impl_ = std::make_unique<Impl>(options_, options_.device);
}

CudaBackend::CudaBackend(KernelRecorder& recorder, ElementType element)
    : reserved_(std::make_unique<ReservedMemory>()) {
  checkElement(element);
  options_.element = element;
  STRATA_ENFORCE(recorder.recordOnly());
  recorder_ = &recorder;
}

void CudaBackend::setRecorder(KernelRecorder* recorder) {
  STRATA_ENFORCE(impl_ || (recorder != nullptr && recorder->recordOnly()));
  recorder_ = recorder;
}

CudaBackend::~CudaBackend() {
  if (!impl_)
    return;
  // Nothing may still run on the workspace or the events when they go.
  static_cast<void>(cudaSetDevice(options_.device));
  static_cast<void>(cudaStreamSynchronize(impl_->stream.get()));
}

Memory& CudaBackend::memory() {
  if (!impl_)
    return *reserved_;
  return impl_->memory;
}

CUstream_st* CudaBackend::stream() const {
  STRATA_ENFORCE(impl_ != nullptr);
  return impl_->stream.get();
}

CudaBackend::DeviceInfo CudaBackend::deviceInfo() const {
  activate();
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, options_.device), "cudaGetDeviceProperties");
  return {prop.name, prop.multiProcessorCount, prop.totalGlobalMem};
}

std::pair<double, double> CudaBackend::hostCopySeconds(size_t bytes) {
  activate();
  void* host = nullptr;
  void* device = nullptr;
  check(cudaMallocHost(&host, bytes), "cudaMallocHost");
  std::pair<double, double> best{1e300, 1e300};
  try {
    check(cudaMalloc(&device, bytes), "cudaMalloc");
    std::memset(host, 1, bytes);
    cudaStream_t st = impl_->stream.get();
    for (int rep = 0; rep < 6; ++rep)
      for (int toDevice = 1; toDevice >= 0; --toDevice) {
        check(cudaStreamSynchronize(st), "cudaStreamSynchronize");
        const auto t0 = std::chrono::steady_clock::now();
        check(toDevice ? cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, st)
                       : cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, st),
              "cudaMemcpyAsync");
        check(cudaStreamSynchronize(st), "cudaStreamSynchronize");
        const double t =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (rep > 0)  // the first is the warm-up
          (toDevice ? best.first : best.second) = std::min(toDevice ? best.first : best.second, t);
      }
  } catch (...) {
    static_cast<void>(cudaFree(device));
    static_cast<void>(cudaFreeHost(host));
    throw;
  }
  static_cast<void>(cudaFree(device));
  static_cast<void>(cudaFreeHost(host));
  return best;
}

uint16_t* CudaBackend::Impl::bf16Slot(int slot, int64_t count) {
  STRATA_ENFORCE(slot >= 0 && slot < 3 && count >= 0);
  const size_t i = static_cast<size_t>(slot);
  // At least 128 elements (256 bytes), as exec::bf16ScratchBytes counts.
  const size_t elements = std::max<size_t>(static_cast<size_t>(count), 128);
  if (elements > bf16[i].size()) {
    // Kernels already enqueued may still read or write the old buffer: its
    // release (cudaFreeAsync on the stream) is ordered after them, and the
    // new block comes from the pool on the same stream. Released first, so
    // that the old and the new are not held at once.
    bf16[i] = Buffer<uint16_t>();
    try {
      bf16[i] = Buffer<uint16_t>(memory, elements);
    } catch (const RunFailure& e) {
      throw RunFailure(fmt::format("bf16 scratch {} of {} bytes: {}", slot,
                                   elements * sizeof(uint16_t), e.what()));
    }
  }
  return bf16[i].data();
}

uint16_t* CudaBackend::bf16Scratch(int slot, int64_t count) {
  return recordOnly() ? nullptr : impl_->bf16Slot(slot, count);
}

void CudaBackend::activate() const {
  STRATA_ENFORCE(impl_ != nullptr);  // a record-only backend has no device
  setDevice(options_.device);
}

void CudaBackend::synchronize() {
  if (!impl_)
    return;  // record only: nothing runs
  activate();
  check(cudaStreamSynchronize(impl_->stream.get()), "cudaStreamSynchronize",
        "kernels of the CUDA backend");
  impl_->reportBadToken();
}

void CudaBackend::writeSynthetic(const SyntheticBatch& batch, TensorView x) {
  if (recordOnly())
    return;  // no layer phase's kernel
  activate();
  if (batch.tokens.vocab > 0) {
    // Token ids (a language model's input): made on the device, on the
    // stream after the kernels that may still read x.
    if (batch.classes.size() != static_cast<size_t>(x.dims.n))
      throw InvariantError(fmt::format("writeSynthetic: token batch of {} examples for {}",
                                       batch.classes.size(), x.dims.n));
    launch(
        "kernels::cuda::syntheticTokens",
        [&] { return fmt::format("synthetic token batch of {} examples", x.dims.n); },
        [&] {
          kernels::cuda::syntheticTokens({batch.tokens.seed, batch.tokens.vocab,
                                          batch.tokens.firstIndex, x.dims.n, x.dims.perExample()},
                                         x.data, impl_->stream.get());
        });
    return;
  }
  if (!batch.values.empty()) {
    // Given elements: uploaded as they are (pinned staging, on the stream
    // after the kernels that may still read x).
    if (static_cast<int64_t>(batch.values.size()) != x.dims.elements())
      throw InvariantError(fmt::format("writeSynthetic: {} values for {} elements",
                                       batch.values.size(), x.dims.elements()));
    upload(impl_->memory, x.data, std::span<const float>(batch.values));
    return;
  }
  const auto n = static_cast<size_t>(x.dims.n);
  if (batch.classes.size() != n || batch.keys.size() != n)
    throw InvariantError(fmt::format("writeSynthetic: {} classes and {} keys for {} examples",
                                     batch.classes.size(), batch.keys.size(), n));
  if (n == 0 || x.dims.elements() == 0)
    return;
  Impl& m = *impl_;
  cudaStream_t st = m.stream.get();
  // Every class index must name a row of the means (as syntheticFill checks).
  const int64_t rows = static_cast<int64_t>(batch.means.size()) /
                       std::max<int64_t>(1, int64_t{x.dims.c} * batch.gridH * batch.gridW);
  for (int32_t c : batch.classes)
    if (c < 0 || c >= rows)
      throw InvariantError(fmt::format("writeSynthetic: class {} of {}", c, rows));
  if (batch.means.data() != m.synthMeansOf || batch.means.size() != m.synthMeansCount) {
    const size_t bytes = batch.means.size_bytes();
    m.synthMeans.reset();  // cudaFree: waits for the kernels that read the old means
    m.synthMeansOf = nullptr;
    check(cudaMalloc(m.synthMeans.out(), std::max<size_t>(bytes, 1)), "cudaMalloc",
          "the synthetic dataset's class means");
    // On the stream, so the kernel below reads them after they landed (a
    // cudaMemcpy from pageable memory may return before its DMA is done,
    // and the legacy stream does not order the backend's non-blocking one).
    upload(m.memory, static_cast<float*>(m.synthMeans.get()), batch.means);
    m.synthMeansOf = batch.means.data();
    m.synthMeansCount = batch.means.size();
  }
  // Keys (8-byte aligned) first, then the classes.
  const size_t keyBytes = n * sizeof(uint64_t), classBytes = n * sizeof(int32_t);
  if (keyBytes + classBytes > m.synthIndexBytes) {
    m.synthIndex.reset();
    m.synthIndexBytes = 0;
    check(cudaMalloc(m.synthIndex.out(), keyBytes + classBytes), "cudaMalloc",
          "a synthetic batch's classes and keys");
    m.synthIndexBytes = keyBytes + classBytes;
  }
  auto* keys = static_cast<uint64_t*>(m.synthIndex.get());
  auto* classes = reinterpret_cast<int32_t*>(keys + n);
  // Through the memory's pinned staging, on the stream: after the kernels
  // before it (which may still read the batch before), and the host's
  // vectors are free when the calls return.
  upload(m.memory, keys, std::span<const uint64_t>(batch.keys));
  upload(m.memory, classes, std::span<const int32_t>(batch.classes));
  launch(
      "kernels::cuda::syntheticExamples",
      [&] { return fmt::format("synthetic batch of {} examples", n); },
      [&] {
        kernels::cuda::syntheticExamples(
            static_cast<const float*>(m.synthMeans.get()), classes, keys,
            kernels::SyntheticShape{x.dims.n, x.dims.c, x.dims.h, x.dims.w, batch.gridH,
                                    batch.gridW},
            batch.noise, x.data, st);
      });
}

void CudaBackend::copyIntoChannels(ConstTensorView src, TensorView dst, int channelOffset) {
  if (src.dims.n != dst.dims.n || src.dims.h != dst.dims.h || src.dims.w != dst.dims.w ||
      channelOffset < 0 || channelOffset + src.dims.c > dst.dims.c)
    throw InvariantError(fmt::format("copyIntoChannels: {} into {} at channel {}",
                                     dimsText(src.dims), dimsText(dst.dims), channelOffset));
  if (src.dims.elements() == 0 || recordOnly())
    return;  // record only: no layer phase's kernel
  activate();
  const size_t plane = static_cast<size_t>(src.dims.h) * src.dims.w * sizeof(float);
  check(cudaMemcpy2DAsync(dst.data + int64_t{channelOffset} * src.dims.h * src.dims.w,
                          static_cast<size_t>(dst.dims.c) * plane, src.data,
                          static_cast<size_t>(src.dims.c) * plane,
                          static_cast<size_t>(src.dims.c) * plane, static_cast<size_t>(src.dims.n),
                          cudaMemcpyDefault, impl_->stream.get()),
        "cudaMemcpy2DAsync", [&] { return fmt::format("a slice into {}", dimsText(dst.dims)); });
}

// ---- timeline ------------------------------------------------------------------------------

CudaBackend::Clock::time_point CudaBackend::startTimeline() {
  activate();
  Impl& m = *impl_;
  if (!m.origin.get())
    check(cudaEventCreate(m.origin.out()), "cudaEventCreate", "timeline origin");
  check(cudaStreamSynchronize(m.stream.get()), "cudaStreamSynchronize", "timeline start");
  const Clock::time_point now = Clock::now();
  check(cudaEventRecord(m.origin.get(), m.stream.get()), "cudaEventRecord", "timeline origin");
  {
    std::lock_guard lock(m.marksMutex);
    m.marks = 0;
  }
  return now;
}

int CudaBackend::markTime() {
  Impl& m = *impl_;
  std::lock_guard lock(m.marksMutex);
  STRATA_ENFORCE_OP(m.marks, >=, 0);  // startTimeline() first
  activate();
  if (static_cast<size_t>(m.marks) == m.events.size()) {
    EventHandle e;
    check(cudaEventCreate(e.out()), "cudaEventCreate", "timeline mark");
    m.events.push_back(std::move(e));
  }
  const int id = m.marks;
  check(cudaEventRecord(m.events[static_cast<size_t>(id)].get(), m.stream.get()), "cudaEventRecord",
        [&] { return fmt::format("timeline mark {}", id); });
  ++m.marks;
  return id;
}

void CudaBackend::waitMark(int id) {
  Impl& m = *impl_;
  cudaEvent_t event = nullptr;
  {
    std::lock_guard lock(m.marksMutex);
    STRATA_ENFORCE(id >= 0 && id < m.marks);
    event = m.events[static_cast<size_t>(id)].get();
  }
  activate();
  check(cudaEventSynchronize(event), "cudaEventSynchronize",
        [&] { return fmt::format("timeline mark {}", id); });
}

double CudaBackend::markSeconds(int id) const {
  const Impl& m = *impl_;
  STRATA_ENFORCE(id >= 0 && id < m.marks);
  activate();
  float ms = 0;
  check(cudaEventElapsedTime(&ms, m.origin.get(), m.events[static_cast<size_t>(id)].get()),
        "cudaEventElapsedTime", [&] { return fmt::format("timeline mark {}", id); });
  return double(ms) * 1e-3;
}

}  // namespace strata::nn

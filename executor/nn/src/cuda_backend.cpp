// The CUDA backend: cuDNN convolutions, cuBLAS fully-connected layers and the
// project's CUDA kernels for the rest, all on one stream per backend. Plain
// C++ calling the CUDA runtime, cuBLAS and cuDNN C APIs (no device code here:
// that lives in kernels/).
#include "strata/exec/nn/cuda_backend.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "shape_checks.h"
#include "strata/kernels/kernels.h"
#include "strata/model/error.h"

namespace strata::nn {

namespace {

// ---- errors -------------------------------------------------------------------
//
// Every call is checked; a failure throws RunFailure "call (where): status".
// `where` is either text or a callable returning it, so that the text of a
// hot call is built only when the call fails.

template <class Where>
std::string whereText(const Where& where) {
  if constexpr (std::is_invocable_v<const Where&>)
    return where();
  else
    return std::string(where);
}

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

template <class Where = const char*>
void check(cudaError_t e, const char* call, const Where& where = "") {
  if (e != cudaSuccess)
    fail(call, whereText(where), statusText(e));
}

template <class Where = const char*>
void check(cublasStatus_t s, const char* call, const Where& where = "") {
  if (s != CUBLAS_STATUS_SUCCESS)
    fail(call, whereText(where), statusText(s));
}

template <class Where = const char*>
void check(cudnnStatus_t s, const char* call, const Where& where = "") {
  if (s != CUDNN_STATUS_SUCCESS)
    fail(call, whereText(where), statusText(s));
}

// Runs a kernels::cuda launcher. It only enqueues, and throws
// std::runtime_error naming the kernel and the CUDA error when the launch
// fails (bad configuration, no kernel image for this GPU, an earlier
// asynchronous failure): rethrown as RunFailure with the layer.
template <class Where, class Launcher>
void launch(const char* kernel, const Where& where, Launcher&& launcher) {
  try {
    launcher();
  } catch (const RunFailure&) {
    throw;
  } catch (const std::runtime_error& e) {
    fail(kernel, whereText(where), e.what());
  }
}

std::string dimsText(const Dims& d) {
  return fmt::format("{}x{}x{}x{}", d.n, d.c, d.h, d.w);
}

// ---- owned CUDA, cuBLAS and cuDNN objects ---------------------------------------

// Owns one object of a C API: `Destroy` releases it (its status is dropped:
// destruction cannot report, and a failure here means an earlier sticky
// error that a checked call has already reported or will report).
template <class T, auto Destroy>
class Owned {
 public:
  Owned() = default;
  ~Owned() { reset(); }
  Owned(Owned&& o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
  Owned& operator=(Owned&& o) noexcept {
    if (this != &o) {
      reset();
      p_ = std::exchange(o.p_, nullptr);
    }
    return *this;
  }
  Owned(const Owned&) = delete;
  Owned& operator=(const Owned&) = delete;

  T get() const { return p_; }
  // Gives up ownership.
  T release() { return std::exchange(p_, nullptr); }
  // For the C API's create call, which writes the new object here.
  T* out() {
    reset();
    return &p_;
  }
  void reset() noexcept {
    if (p_)
      static_cast<void>(Destroy(p_));
    p_ = nullptr;
  }

 private:
  T p_ = nullptr;
};

using StreamHandle = Owned<cudaStream_t, cudaStreamDestroy>;
using EventHandle = Owned<cudaEvent_t, cudaEventDestroy>;
using DevicePointer = Owned<void*, cudaFree>;
using CublasHandle = Owned<cublasHandle_t, cublasDestroy>;
using CudnnHandle = Owned<cudnnHandle_t, cudnnDestroy>;
using TensorDescriptor = Owned<cudnnTensorDescriptor_t, cudnnDestroyTensorDescriptor>;
using FilterDescriptor = Owned<cudnnFilterDescriptor_t, cudnnDestroyFilterDescriptor>;
using ConvolutionDescriptor =
    Owned<cudnnConvolutionDescriptor_t, cudnnDestroyConvolutionDescriptor>;

void setDevice(int device) {
  int current = -1;
  check(cudaGetDevice(&current), "cudaGetDevice");
  if (current != device)
    check(cudaSetDevice(device), "cudaSetDevice", [&] { return fmt::format("device {}", device); });
}

// ---- shape checks (the rest are shape_checks.h) -------------------------------------

void checkPool(const PoolDesc& d, const Dims& in, const Dims& out) {
  STRATA_ENFORCE_OP(in.n, ==, out.n);
  STRATA_ENFORCE_OP(in.c, ==, d.c);
  STRATA_ENFORCE_OP(out.c, ==, d.c);
  STRATA_ENFORCE(in.h == d.inH && in.w == d.inW && out.h == d.outH && out.w == d.outW);
}

// ---- nn descriptors -> kernel parameters ---------------------------------------------

kernels::Shape4 shapeOf(const Dims& d) {
  return {d.n, d.c, d.h, d.w};
}

kernels::PoolParams poolParams(const PoolDesc& d) {
  kernels::PoolParams p;
  p.max = d.mode == PoolMode::kMax;
  p.c = d.c;
  p.inH = d.inH;
  p.inW = d.inW;
  p.kernelH = d.kernelH;
  p.kernelW = d.kernelW;
  p.stride = d.stride;
  p.pad = d.pad;
  p.outH = d.outH;
  p.outW = d.outW;
  return p;
}

kernels::LrnParams lrnParams(const LrnDesc& d) {
  return {d.size, d.k, d.alpha, d.beta};
}

kernels::DropoutParams dropoutParams(const DropoutDesc& d) {
  kernels::DropoutParams p;
  p.rate = d.rate;
  p.seed = d.seed;
  p.step = d.step;
  p.layer = d.layer;
  p.firstRow = d.firstRow;
  p.channelOffset = d.channelOffset;
  return p;
}

// ---- convolution plans ---------------------------------------------------------------

// One direction's algorithm as chosen for a shape: the algorithm, the math
// type it was chosen (and must run) with, and its workspace.
struct ConvChoice {
  int algorithm = 0;
  cudnnMathType_t math = CUDNN_FMA_MATH;
  size_t workspace = 0;
};

// The cuDNN descriptors of one convolution shape (ConvDesc and batch) and the
// algorithms chosen for it so far, per direction. The choice does not depend
// on beta: cuDNN's algorithm search takes no scaling factors and every
// algorithm blends with any alpha and beta, so a shape's choice serves both
// the overwriting and the accumulating calls.
struct ConvPlan {
  TensorDescriptor x, y;
  FilterDescriptor w;
  ConvolutionDescriptor conv;
  std::optional<ConvChoice> forward, backwardData, backwardFilter;
  std::string where;  // "conv 96x3x11x11 stride 4 pad 0, input 224x224, batch 128"
};

using ConvKey = std::array<int, 12>;

ConvKey convKey(const ConvDesc& d, int n) {
  return {d.inC,    d.inH, d.inW,    d.filters, d.kernelH, d.kernelW,
          d.stride, d.pad, d.groups, d.outH,    d.outW,    n};
}

std::string convWhere(const ConvDesc& d, int n) {
  return fmt::format("conv {}x{}x{}x{} stride {} pad {}{}, input {}x{}, batch {}", d.filters,
                     d.inC / d.groups, d.kernelH, d.kernelW, d.stride, d.pad,
                     d.groups > 1 ? fmt::format(" groups {}", d.groups) : std::string(), d.inH,
                     d.inW, n);
}

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

const char* mathName(cudnnMathType_t m) {
  switch (m) {
    case CUDNN_DEFAULT_MATH:
      return "default";
    case CUDNN_TENSOR_OP_MATH:
      return "tensor-op";
    case CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION:
      return "tensor-op-allow-conversion";
    case CUDNN_FMA_MATH:
      return "fma";
  }
  return "?";
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

// ---- CudaMemory ------------------------------------------------------------------------------

void* CudaMemory::allocate(size_t bytes) {
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

void CudaMemory::deallocate(void* p, size_t) noexcept {
  static_cast<void>(cudaFree(p));
}

// ---- CudaBackend::Impl ---------------------------------------------------------------------

struct CudaBackend::Impl {
  Impl(const CudaBackendOptions& o, int dev);

  // The plan of a shape, created (descriptors only) on first use.
  ConvPlan& plan(const ConvDesc& d, int n);
  // The algorithm of each direction, chosen on first use of the plan in that
  // direction; the workspace grows to fit it.
  const ConvChoice& forward(ConvPlan& p);
  const ConvChoice& backwardData(ConvPlan& p);
  const ConvChoice& backwardFilter(ConvPlan& p);
  // Sets the plan's descriptor to the choice's math type (directions may
  // differ) and returns the workspace for it.
  void* prepare(ConvPlan& p, const ConvChoice& c);

  void growWorkspace(size_t bytes);

  const CudaBackendOptions& options;
  StreamHandle stream;
  CudaMemory memory;
  CublasHandle cublas;
  CudnnHandle cudnn;

  DevicePointer workspace;  // cuDNN's scratch, shared by every convolution
  size_t workspaceBytes = 0;
  std::map<ConvKey, ConvPlan> plans;

  // writeSynthetic's device copies: the dataset's class means (of the means
  // span last seen) and the batch's classes and keys.
  DevicePointer synthMeans;
  const float* synthMeansOf = nullptr;
  size_t synthMeansCount = 0;
  DevicePointer synthIndex;
  size_t synthIndexBytes = 0;

  // The current timeline (see CudaBackend::startTimeline): its origin and
  // the pool of mark events, of which the first `marks` are in use (-1: no
  // timeline started).
  EventHandle origin;
  std::vector<EventHandle> events;
  int marks = -1;
  // Guards `events` and `marks` between markTime (compute lane) and waitMark
  // (communication lane).
  std::mutex marksMutex;
};

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
  // emulation); TF32 only when asked for.
  check(cublasSetMathMode(cublas.get(),
                          options.allowTf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH),
        "cublasSetMathMode");
  check(cudnnCreate(cudnn.out()), "cudnnCreate");
  check(cudnnSetStream(cudnn.get(), stream.get()), "cudnnSetStream");
}

ConvPlan& CudaBackend::Impl::plan(const ConvDesc& d, int n) {
  const ConvKey key = convKey(d, n);
  if (auto it = plans.find(key); it != plans.end())
    return it->second;
  ConvPlan p;
  p.where = convWhere(d, n);
  check(cudnnCreateTensorDescriptor(p.x.out()), "cudnnCreateTensorDescriptor", p.where);
  check(cudnnSetTensor4dDescriptor(p.x.get(), CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, d.inC, d.inH,
                                   d.inW),
        "cudnnSetTensor4dDescriptor (input)", p.where);
  check(cudnnCreateTensorDescriptor(p.y.out()), "cudnnCreateTensorDescriptor", p.where);
  check(cudnnSetTensor4dDescriptor(p.y.get(), CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, d.filters,
                                   d.outH, d.outW),
        "cudnnSetTensor4dDescriptor (output)", p.where);
  check(cudnnCreateFilterDescriptor(p.w.out()), "cudnnCreateFilterDescriptor", p.where);
  check(cudnnSetFilter4dDescriptor(p.w.get(), CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, d.filters,
                                   d.inC / d.groups, d.kernelH, d.kernelW),
        "cudnnSetFilter4dDescriptor", p.where);
  check(cudnnCreateConvolutionDescriptor(p.conv.out()), "cudnnCreateConvolutionDescriptor",
        p.where);
  // Cross-correlation (no kernel flip), as CpuBackend and every framework.
  check(cudnnSetConvolution2dDescriptor(p.conv.get(), d.pad, d.pad, d.stride, d.stride, 1, 1,
                                        CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
        "cudnnSetConvolution2dDescriptor", p.where);
  check(cudnnSetConvolutionGroupCount(p.conv.get(), d.groups), "cudnnSetConvolutionGroupCount",
        p.where);
  // cuDNN's output shape must be the one ConvDesc says (the same formula).
  std::array<int, 4> out{};
  check(cudnnGetConvolution2dForwardOutputDim(p.conv.get(), p.x.get(), p.w.get(), &out[0], &out[1],
                                              &out[2], &out[3]),
        "cudnnGetConvolution2dForwardOutputDim", p.where);
  STRATA_ENFORCE_OP(out[1], ==, d.filters);
  STRATA_ENFORCE_OP(out[2], ==, d.outH);
  STRATA_ENFORCE_OP(out[3], ==, d.outW);
  return plans.emplace(key, std::move(p)).first->second;
}

namespace {

// Picks one direction's algorithm: asks cuDNN for its candidates (timed or
// heuristic, best first) and keeps the first that succeeded, has the math
// allowed (FMA only when TF32 is off: the search also tries the default
// math, which may use TF32 on Ampere and later), still reports a workspace
// size for its math and fits the workspace limit.
//   search(count, &returned, perf) runs cudnnFind* or cudnnGet*_v7;
//   workspaceOf(algo, &bytes) runs cudnnGet*WorkspaceSize.
template <class Perf, class Search, class WorkspaceOf>
ConvChoice chooseAlgorithm(const char* searchCall, cudnnConvolutionDescriptor_t conv,
                           const CudaBackendOptions& options, const std::string& where,
                           Search&& search, WorkspaceOf&& workspaceOf) {
  constexpr int kMaxCandidates = 16;  // more than any direction has (8, 6, 7)
  std::array<Perf, kMaxCandidates> perf{};
  int returned = 0;
  // The search runs with FMA math (plain FP32) unless TF32 is allowed, when
  // the default math lets cuDNN use TF32 tensor cores; an earlier direction's
  // choice may have left another math type on the descriptor.
  check(cudnnSetConvolutionMathType(conv, options.allowTf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH),
        "cudnnSetConvolutionMathType", where);
  check(search(kMaxCandidates, &returned, perf.data()), searchCall, where);
  // The search may try algorithms that fail inside (e.g. out of memory for a
  // large workspace) and leave that CUDA error behind, non-sticky, for the
  // next launch check to blame on its own kernel; those failures are in the
  // candidates' statuses.
  static_cast<void>(cudaGetLastError());
  std::string rejected;
  for (int i = 0; i < returned; ++i) {
    const Perf& p = perf[static_cast<size_t>(i)];
    const auto note = [&](const std::string& why) {
      rejected += fmt::format("{}algorithm {} ({} math): {}", rejected.empty() ? "" : "; ",
                              static_cast<int>(p.algo), mathName(p.mathType), why);
    };
    if (p.status != CUDNN_STATUS_SUCCESS) {
      note(cudnnGetErrorString(p.status));
      continue;
    }
    if (!options.allowTf32 && p.mathType != CUDNN_FMA_MATH) {
      note("not FMA math (TF32 is off)");
      continue;
    }
    check(cudnnSetConvolutionMathType(conv, p.mathType), "cudnnSetConvolutionMathType", where);
    size_t bytes = 0;
    if (const cudnnStatus_t s = workspaceOf(p.algo, &bytes); s != CUDNN_STATUS_SUCCESS) {
      note(fmt::format("workspace size: {}", cudnnGetErrorString(s)));
      continue;
    }
    bytes = std::max(bytes, p.memory);
    if (bytes > options.maxWorkspaceBytes) {
      note(fmt::format("needs {} bytes of workspace (limit {})", bytes, options.maxWorkspaceBytes));
      continue;
    }
    return {static_cast<int>(p.algo), p.mathType, bytes};
  }
  throw RunFailure(fmt::format("{} ({}): no usable algorithm among {} candidates{}{}", searchCall,
                               where, returned, rejected.empty() ? "" : ": ", rejected));
}

}  // namespace

const ConvChoice& CudaBackend::Impl::forward(ConvPlan& p) {
  if (!p.forward) {
    const auto workspaceOf = [&](cudnnConvolutionFwdAlgo_t a, size_t* bytes) {
      return cudnnGetConvolutionForwardWorkspaceSize(cudnn.get(), p.x.get(), p.w.get(),
                                                     p.conv.get(), p.y.get(), a, bytes);
    };
    if (options.benchmarkConvolutions)
      p.forward = chooseAlgorithm<cudnnConvolutionFwdAlgoPerf_t>(
          "cudnnFindConvolutionForwardAlgorithm", p.conv.get(), options, p.where,
          [&](int count, int* returned, cudnnConvolutionFwdAlgoPerf_t* perf) {
            return cudnnFindConvolutionForwardAlgorithm(
                cudnn.get(), p.x.get(), p.w.get(), p.conv.get(), p.y.get(), count, returned, perf);
          },
          workspaceOf);
    else
      p.forward = chooseAlgorithm<cudnnConvolutionFwdAlgoPerf_t>(
          "cudnnGetConvolutionForwardAlgorithm_v7", p.conv.get(), options, p.where,
          [&](int count, int* returned, cudnnConvolutionFwdAlgoPerf_t* perf) {
            return cudnnGetConvolutionForwardAlgorithm_v7(
                cudnn.get(), p.x.get(), p.w.get(), p.conv.get(), p.y.get(), count, returned, perf);
          },
          workspaceOf);
    growWorkspace(p.forward->workspace);
  }
  return *p.forward;
}

const ConvChoice& CudaBackend::Impl::backwardData(ConvPlan& p) {
  if (!p.backwardData) {
    const auto workspaceOf = [&](cudnnConvolutionBwdDataAlgo_t a, size_t* bytes) {
      return cudnnGetConvolutionBackwardDataWorkspaceSize(cudnn.get(), p.w.get(), p.y.get(),
                                                          p.conv.get(), p.x.get(), a, bytes);
    };
    if (options.benchmarkConvolutions)
      p.backwardData = chooseAlgorithm<cudnnConvolutionBwdDataAlgoPerf_t>(
          "cudnnFindConvolutionBackwardDataAlgorithm", p.conv.get(), options, p.where,
          [&](int count, int* returned, cudnnConvolutionBwdDataAlgoPerf_t* perf) {
            return cudnnFindConvolutionBackwardDataAlgorithm(
                cudnn.get(), p.w.get(), p.y.get(), p.conv.get(), p.x.get(), count, returned, perf);
          },
          workspaceOf);
    else
      p.backwardData = chooseAlgorithm<cudnnConvolutionBwdDataAlgoPerf_t>(
          "cudnnGetConvolutionBackwardDataAlgorithm_v7", p.conv.get(), options, p.where,
          [&](int count, int* returned, cudnnConvolutionBwdDataAlgoPerf_t* perf) {
            return cudnnGetConvolutionBackwardDataAlgorithm_v7(
                cudnn.get(), p.w.get(), p.y.get(), p.conv.get(), p.x.get(), count, returned, perf);
          },
          workspaceOf);
    growWorkspace(p.backwardData->workspace);
  }
  return *p.backwardData;
}

const ConvChoice& CudaBackend::Impl::backwardFilter(ConvPlan& p) {
  if (!p.backwardFilter) {
    const auto workspaceOf = [&](cudnnConvolutionBwdFilterAlgo_t a, size_t* bytes) {
      return cudnnGetConvolutionBackwardFilterWorkspaceSize(cudnn.get(), p.x.get(), p.y.get(),
                                                            p.conv.get(), p.w.get(), a, bytes);
    };
    if (options.benchmarkConvolutions)
      p.backwardFilter = chooseAlgorithm<cudnnConvolutionBwdFilterAlgoPerf_t>(
          "cudnnFindConvolutionBackwardFilterAlgorithm", p.conv.get(), options, p.where,
          [&](int count, int* returned, cudnnConvolutionBwdFilterAlgoPerf_t* perf) {
            return cudnnFindConvolutionBackwardFilterAlgorithm(
                cudnn.get(), p.x.get(), p.y.get(), p.conv.get(), p.w.get(), count, returned, perf);
          },
          workspaceOf);
    else
      p.backwardFilter = chooseAlgorithm<cudnnConvolutionBwdFilterAlgoPerf_t>(
          "cudnnGetConvolutionBackwardFilterAlgorithm_v7", p.conv.get(), options, p.where,
          [&](int count, int* returned, cudnnConvolutionBwdFilterAlgoPerf_t* perf) {
            return cudnnGetConvolutionBackwardFilterAlgorithm_v7(
                cudnn.get(), p.x.get(), p.y.get(), p.conv.get(), p.w.get(), count, returned, perf);
          },
          workspaceOf);
    growWorkspace(p.backwardFilter->workspace);
  }
  return *p.backwardFilter;
}

void* CudaBackend::Impl::prepare(ConvPlan& p, const ConvChoice& c) {
  check(cudnnSetConvolutionMathType(p.conv.get(), c.math), "cudnnSetConvolutionMathType", p.where);
  return c.workspace > 0 ? workspace.get() : nullptr;
}

void CudaBackend::Impl::growWorkspace(size_t bytes) {
  if (bytes <= workspaceBytes)
    return;
  // Kernels already enqueued may still use the old buffer.
  check(cudaStreamSynchronize(stream.get()), "cudaStreamSynchronize");
  workspace.reset();
  workspaceBytes = 0;
  check(cudaMalloc(workspace.out(), bytes), "cudaMalloc",
        [&] { return fmt::format("cuDNN workspace of {} bytes", bytes); });
  workspaceBytes = bytes;
}

// ---- CudaBackend ---------------------------------------------------------------------------

CudaBackend::CudaBackend(CudaBackendOptions options) : options_(options) {
  int count = 0;
  if (const std::string why = countDevices(count); !why.empty())
    throw RunFailure("no CUDA device: " + why);
  if (options_.device < 0 || options_.device >= count)
    throw RunFailure(fmt::format("no CUDA device {}: this machine has {} (devices 0 to {})",
                                 options_.device, count, count - 1));
  check(cudaSetDevice(options_.device), "cudaSetDevice");
  // The host reads and writes buffers in managed memory while this or
  // another worker's kernels run; without concurrent managed access that
  // is a fault (Windows, some virtual machines, GPUs before Pascal).
  int managed = 0, concurrent = 0;
  check(cudaDeviceGetAttribute(&managed, cudaDevAttrManagedMemory, options_.device),
        "cudaDeviceGetAttribute (cudaDevAttrManagedMemory)");
  check(cudaDeviceGetAttribute(&concurrent, cudaDevAttrConcurrentManagedAccess, options_.device),
        "cudaDeviceGetAttribute (cudaDevAttrConcurrentManagedAccess)");
  if (!managed || !concurrent)
    throw RunFailure(fmt::format(
        "CUDA device {} cannot share managed memory with the host while kernels run "
        "(cudaDevAttrManagedMemory {}, cudaDevAttrConcurrentManagedAccess {}): the CUDA backend "
        "needs both",
        options_.device, managed, concurrent));
  impl_ = std::make_unique<Impl>(options_, options_.device);
}

CudaBackend::~CudaBackend() {
  if (!impl_)
    return;
  // Nothing may still run on the workspace or the events when they go.
  static_cast<void>(cudaSetDevice(options_.device));
  static_cast<void>(cudaStreamSynchronize(impl_->stream.get()));
}

Memory& CudaBackend::memory() {
  return impl_->memory;
}

CUstream_st* CudaBackend::stream() const {
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

void CudaBackend::activate() const {
  setDevice(options_.device);
}

void CudaBackend::synchronize() {
  activate();
  check(cudaStreamSynchronize(impl_->stream.get()), "cudaStreamSynchronize",
        "kernels of the CUDA backend");
}

void CudaBackend::writeSynthetic(const SyntheticBatch& batch, TensorView x) {
  activate();
  if (!batch.values.empty()) {
    // Token ids (a language model's input): written as they are, on the host
    // into managed memory once the kernels that may read x have finished.
    synchronize();
    syntheticFill(batch, x);
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
    check(cudaMemcpy(m.synthMeans.get(), batch.means.data(), bytes, cudaMemcpyHostToDevice),
          "cudaMemcpy", "the synthetic dataset's class means");
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
  // From pageable memory: the copy has read the source when the call returns,
  // and it runs after the kernels before it on the stream (which may still
  // read the batch before).
  check(cudaMemcpyAsync(keys, batch.keys.data(), keyBytes, cudaMemcpyHostToDevice, st),
        "cudaMemcpyAsync", "a synthetic batch's keys");
  check(cudaMemcpyAsync(classes, batch.classes.data(), classBytes, cudaMemcpyHostToDevice, st),
        "cudaMemcpyAsync", "a synthetic batch's classes");
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
  if (src.dims.elements() == 0)
    return;
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

// ---- convolution ----------------------------------------------------------------------------

namespace {
constexpr float kOne = 1.0f;
constexpr float kZero = 0.0f;
}  // namespace

void CudaBackend::convForward(const ConvDesc& d, ConstTensorView x, const float* w,
                              const float* bias, TensorView y) {
  checkConv(d, x.dims, y.dims);
  if (x.dims.n == 0)
    return;
  activate();
  Impl& m = *impl_;
  ConvPlan& p = m.plan(d, x.dims.n);
  const ConvChoice& c = m.forward(p);
  void* ws = m.prepare(p, c);
  check(cudnnConvolutionForward(m.cudnn.get(), &kOne, p.x.get(), x.data, p.w.get(), w, p.conv.get(),
                                static_cast<cudnnConvolutionFwdAlgo_t>(c.algorithm), ws,
                                c.workspace, &kZero, p.y.get(), y.data),
        "cudnnConvolutionForward", p.where);
  if (bias) {
    launch("kernels::cuda::biasAdd", p.where, [&] {
      kernels::cuda::biasAdd(y.data, bias, y.dims.n, d.filters, int64_t{d.outH} * d.outW,
                             m.stream.get());
    });
  }
}

// cuDNN blends dx = 1 * result + beta * dx and does not read dx when beta
// is 0 (it may hold NaN from an earlier batch), as the Backend requires.
void CudaBackend::convBackwardData(const ConvDesc& d, ConstTensorView dy, const float* w,
                                   TensorView dx, float beta) {
  checkConv(d, dx.dims, dy.dims);
  if (dy.dims.n == 0)
    return;
  activate();
  Impl& m = *impl_;
  ConvPlan& p = m.plan(d, dy.dims.n);
  const ConvChoice& c = m.backwardData(p);
  void* ws = m.prepare(p, c);
  check(cudnnConvolutionBackwardData(m.cudnn.get(), &kOne, p.w.get(), w, p.y.get(), dy.data,
                                     p.conv.get(),
                                     static_cast<cudnnConvolutionBwdDataAlgo_t>(c.algorithm), ws,
                                     c.workspace, &beta, p.x.get(), dx.data),
        "cudnnConvolutionBackwardData", p.where);
}

// dw += (cuDNN's beta 1); dbias += by the project's kernel.
void CudaBackend::convBackwardWeights(const ConvDesc& d, ConstTensorView x, ConstTensorView dy,
                                      float* dw, float* dbias) {
  checkConv(d, x.dims, dy.dims);
  if (x.dims.n == 0)
    return;
  activate();
  Impl& m = *impl_;
  ConvPlan& p = m.plan(d, x.dims.n);
  const ConvChoice& c = m.backwardFilter(p);
  void* ws = m.prepare(p, c);
  check(cudnnConvolutionBackwardFilter(m.cudnn.get(), &kOne, p.x.get(), x.data, p.y.get(), dy.data,
                                       p.conv.get(),
                                       static_cast<cudnnConvolutionBwdFilterAlgo_t>(c.algorithm),
                                       ws, c.workspace, &kOne, p.w.get(), dw),
        "cudnnConvolutionBackwardFilter", p.where);
  if (dbias) {
    launch("kernels::cuda::biasGrad", p.where, [&] {
      kernels::cuda::biasGrad(dy.data, dbias, dy.dims.n, d.filters, int64_t{d.outH} * d.outW,
                              m.stream.get());
    });
  }
}

// ---- pooling -------------------------------------------------------------------------------

void CudaBackend::poolForward(const PoolDesc& d, ConstTensorView x, TensorView y, int32_t* argmax) {
  checkPool(d, x.dims, y.dims);
  STRATA_ENFORCE(d.mode != PoolMode::kMax || argmax != nullptr);
  activate();
  launch(
      "kernels::cuda::poolForward", [&] { return "pool " + dimsText(x.dims); },
      [&] {
        kernels::cuda::poolForward(poolParams(d), x.dims.n, x.data, y.data, argmax,
                                   impl_->stream.get());
      });
}

void CudaBackend::poolBackward(const PoolDesc& d, ConstTensorView dy, const int32_t* argmax,
                               TensorView dx, float beta) {
  checkPool(d, dx.dims, dy.dims);
  STRATA_ENFORCE(d.mode != PoolMode::kMax || argmax != nullptr);
  activate();
  launch(
      "kernels::cuda::poolBackward", [&] { return "pool " + dimsText(dx.dims); },
      [&] {
        kernels::cuda::poolBackward(poolParams(d), dy.dims.n, dy.data, argmax, dx.data, beta,
                                    impl_->stream.get());
      });
}

// ---- fully connected -------------------------------------------------------------------------
//
// cuBLAS is column-major: a row-major r x c matrix is, to cuBLAS, its c x r
// transpose with leading dimension c. So each row-major product C = A B is
// computed as C^T = B^T A^T, operands swapped.
//
// flatten (D = inFeatures, O = outputs, n examples):
//   forward         Y (n x O) = X (n x D) W^T      as  Y^T = W X^T
//   backward data   dX (n x D) = dY (n x O) W      as  dX^T = W^T dY^T
//   backward weights dW (O x D) += dY^T X          as  dW^T += X^T dY
// per position (C = inFeatures, P = h*w positions; per example e):
//   forward         Y_e (O x P) = W X_e            as  Y_e^T = X_e^T W^T
//   backward data   dX_e (C x P) = W^T dY_e        as  dX_e^T = dY_e^T W
//   backward weights dW (O x C) += dY_e X_e^T      as  dW^T += X_e dY_e^T
// The first two run as one strided-batched GEMM over the examples (W's batch
// stride 0); the weight gradient sums over examples into one matrix, so it
// runs as one GEMM per example. With a single position (P = 1) the
// per-position layer is the flattened one and runs as such.

namespace {
std::string fcWhere(const FcDesc& d, const Dims& x) {
  return fmt::format("fc {} outputs x {} inputs{}, input {}", d.outputs, d.inFeatures,
                     d.flatten ? "" : " per position", dimsText(x));
}
}  // namespace

void CudaBackend::fcForward(const FcDesc& d, ConstTensorView x, const float* w, const float* bias,
                            TensorView y) {
  STRATA_ENFORCE_OP(x.dims.n, ==, y.dims.n);
  STRATA_ENFORCE_OP(y.dims.c, ==, d.outputs);
  if (d.flatten)
    STRATA_ENFORCE_OP(x.dims.perExample(), ==, d.inFeatures);
  else
    STRATA_ENFORCE_OP(x.dims.c, ==, d.inFeatures);
  const int n = x.dims.n;
  if (n == 0)
    return;
  activate();
  Impl& m = *impl_;
  const auto where = [&] { return fcWhere(d, x.dims); };
  const int p = x.dims.h * x.dims.w;
  const int o = d.outputs, k = d.inFeatures;
  if (d.flatten || p == 1) {
    check(cublasSgemm(m.cublas.get(), CUBLAS_OP_T, CUBLAS_OP_N, o, n, k, &kOne, w, k, x.data, k,
                      &kZero, y.data, o),
          "cublasSgemm", where);
  } else {
    check(
        cublasSgemmStridedBatched(m.cublas.get(), CUBLAS_OP_N, CUBLAS_OP_N, p, o, k, &kOne, x.data,
                                  p, int64_t{k} * p, w, k, 0, &kZero, y.data, p, int64_t{o} * p, n),
        "cublasSgemmStridedBatched", where);
  }
  if (bias) {
    launch("kernels::cuda::biasAdd", where,
           [&] { kernels::cuda::biasAdd(y.data, bias, n, o, d.flatten ? 1 : p, m.stream.get()); });
  }
}

// cuBLAS does not read C when beta is 0, so a NaN in dx cannot leak.
void CudaBackend::fcBackwardData(const FcDesc& d, ConstTensorView dy, const float* w, TensorView dx,
                                 float beta) {
  STRATA_ENFORCE_OP(dx.dims.n, ==, dy.dims.n);
  STRATA_ENFORCE_OP(dy.dims.c, ==, d.outputs);
  if (d.flatten)
    STRATA_ENFORCE_OP(dx.dims.perExample(), ==, d.inFeatures);
  else
    STRATA_ENFORCE_OP(dx.dims.c, ==, d.inFeatures);
  const int n = dy.dims.n;
  if (n == 0)
    return;
  activate();
  Impl& m = *impl_;
  const auto where = [&] { return fcWhere(d, dx.dims); };
  const int p = dx.dims.h * dx.dims.w;
  const int o = d.outputs, k = d.inFeatures;
  if (d.flatten || p == 1) {
    check(cublasSgemm(m.cublas.get(), CUBLAS_OP_N, CUBLAS_OP_N, k, n, o, &kOne, w, k, dy.data, o,
                      &beta, dx.data, k),
          "cublasSgemm", where);
  } else {
    check(
        cublasSgemmStridedBatched(m.cublas.get(), CUBLAS_OP_N, CUBLAS_OP_T, p, k, o, &kOne, dy.data,
                                  p, int64_t{o} * p, w, k, 0, &beta, dx.data, p, int64_t{k} * p, n),
        "cublasSgemmStridedBatched", where);
  }
}

void CudaBackend::fcBackwardWeights(const FcDesc& d, ConstTensorView x, ConstTensorView dy,
                                    float* dw, float* dbias) {
  STRATA_ENFORCE_OP(x.dims.n, ==, dy.dims.n);
  STRATA_ENFORCE_OP(dy.dims.c, ==, d.outputs);
  if (d.flatten)
    STRATA_ENFORCE_OP(x.dims.perExample(), ==, d.inFeatures);
  else
    STRATA_ENFORCE_OP(x.dims.c, ==, d.inFeatures);
  const int n = x.dims.n;
  if (n == 0)
    return;
  activate();
  Impl& m = *impl_;
  const auto where = [&] { return fcWhere(d, x.dims); };
  const int p = x.dims.h * x.dims.w;
  const int o = d.outputs, k = d.inFeatures;
  if (d.flatten || p == 1) {
    check(cublasSgemm(m.cublas.get(), CUBLAS_OP_N, CUBLAS_OP_T, k, o, n, &kOne, x.data, k, dy.data,
                      o, &kOne, dw, k),
          "cublasSgemm", where);
  } else {
    for (int e = 0; e < n; ++e)
      check(cublasSgemm(m.cublas.get(), CUBLAS_OP_T, CUBLAS_OP_N, k, o, p, &kOne,
                        x.data + e * x.dims.perExample(), p, dy.data + e * dy.dims.perExample(), p,
                        &kOne, dw, k),
            "cublasSgemm", where);
  }
  if (dbias) {
    launch("kernels::cuda::biasGrad", where, [&] {
      kernels::cuda::biasGrad(dy.data, dbias, n, o, d.flatten ? 1 : p, m.stream.get());
    });
  }
}

// ---- elementwise ------------------------------------------------------------------------------

void CudaBackend::reluForward(ConstTensorView x, TensorView y) {
  checkSameDims(x.dims, y.dims);
  activate();
  launch(
      "kernels::cuda::reluForward", [&] { return "relu " + dimsText(x.dims); },
      [&] { kernels::cuda::reluForward(x.data, y.data, x.elements(), impl_->stream.get()); });
}

void CudaBackend::reluBackward(ConstTensorView y, ConstTensorView dy, TensorView dx, float beta) {
  checkSameDims(y.dims, dy.dims);
  checkSameDims(y.dims, dx.dims);
  activate();
  launch(
      "kernels::cuda::reluBackward", [&] { return "relu " + dimsText(y.dims); },
      [&] {
        kernels::cuda::reluBackward(y.data, dy.data, dx.data, y.elements(), beta,
                                    impl_->stream.get());
      });
}

void CudaBackend::dropoutForward(const DropoutDesc& d, ConstTensorView x, TensorView y) {
  checkSameDims(x.dims, y.dims);
  activate();
  launch(
      "kernels::cuda::dropoutForward", [&] { return "dropout " + dimsText(x.dims); },
      [&] {
        kernels::cuda::dropoutForward(dropoutParams(d), shapeOf(x.dims), x.data, y.data,
                                      impl_->stream.get());
      });
}

void CudaBackend::dropoutBackward(const DropoutDesc& d, ConstTensorView dy, TensorView dx,
                                  float beta) {
  checkSameDims(dy.dims, dx.dims);
  activate();
  launch(
      "kernels::cuda::dropoutBackward", [&] { return "dropout " + dimsText(dy.dims); },
      [&] {
        kernels::cuda::dropoutBackward(dropoutParams(d), shapeOf(dy.dims), dy.data, dx.data, beta,
                                       impl_->stream.get());
      });
}

void CudaBackend::fill(std::span<float> x, float value) {
  activate();
  launch(
      "kernels::cuda::fill", [&] { return fmt::format("fill of {} values", x.size()); },
      [&] {
        kernels::cuda::fill(x.data(), static_cast<int64_t>(x.size()), value, impl_->stream.get());
      });
}

void CudaBackend::add(ConstTensorView a, ConstTensorView b, TensorView y) {
  checkSameDims(a.dims, b.dims);
  checkSameDims(a.dims, y.dims);
  activate();
  launch(
      "kernels::cuda::add", [&] { return "add " + dimsText(a.dims); },
      [&] { kernels::cuda::add(a.data, b.data, y.data, a.elements(), impl_->stream.get()); });
}

void CudaBackend::accumulate(ConstTensorView src, TensorView dst, float beta) {
  checkSameDims(src.dims, dst.dims);
  activate();
  launch(
      "kernels::cuda::accumulate", [&] { return "accumulate " + dimsText(src.dims); },
      [&] {
        kernels::cuda::accumulate(src.data, dst.data, src.elements(), beta, impl_->stream.get());
      });
}

// ---- local response normalisation -------------------------------------------------------------

void CudaBackend::lrnForward(const LrnDesc& d, ConstTensorView x, TensorView y, TensorView scale) {
  checkSameDims(x.dims, y.dims);
  checkSameDims(x.dims, scale.dims);
  activate();
  launch(
      "kernels::cuda::lrnForward", [&] { return "lrn " + dimsText(x.dims); },
      [&] {
        kernels::cuda::lrnForward(lrnParams(d), shapeOf(x.dims), x.data, y.data, scale.data,
                                  impl_->stream.get());
      });
}

void CudaBackend::lrnBackward(const LrnDesc& d, ConstTensorView x, ConstTensorView y,
                              ConstTensorView scale, ConstTensorView dy, TensorView dx,
                              float beta) {
  checkSameDims(x.dims, y.dims);
  checkSameDims(x.dims, scale.dims);
  checkSameDims(x.dims, dy.dims);
  checkSameDims(x.dims, dx.dims);
  activate();
  launch(
      "kernels::cuda::lrnBackward", [&] { return "lrn " + dimsText(x.dims); },
      [&] {
        kernels::cuda::lrnBackward(lrnParams(d), shapeOf(x.dims), x.data, y.data, scale.data,
                                   dy.data, dx.data, beta, impl_->stream.get());
      });
}

// ---- batch normalisation ----------------------------------------------------------------------

void CudaBackend::batchNormForward(ConstTensorView x, const float* gamma, const float* shift,
                                   float eps, TensorView y) {
  checkSameDims(x.dims, y.dims);
  activate();
  launch(
      "kernels::cuda::batchNormForward", [&] { return "batchnorm " + dimsText(x.dims); },
      [&] {
        kernels::cuda::batchNormForward(shapeOf(x.dims), x.data, gamma, shift, eps, y.data,
                                        impl_->stream.get());
      });
}

void CudaBackend::batchNormBackwardData(ConstTensorView x, ConstTensorView dy, const float* gamma,
                                        float eps, TensorView dx, float beta) {
  checkSameDims(x.dims, dy.dims);
  checkSameDims(x.dims, dx.dims);
  activate();
  launch(
      "kernels::cuda::batchNormBackwardData", [&] { return "batchnorm " + dimsText(x.dims); },
      [&] {
        kernels::cuda::batchNormBackwardData(shapeOf(x.dims), x.data, dy.data, gamma, eps, dx.data,
                                             beta, impl_->stream.get());
      });
}

void CudaBackend::batchNormBackwardWeights(ConstTensorView x, ConstTensorView dy, float eps,
                                           float* dgamma, float* dshift) {
  checkSameDims(x.dims, dy.dims);
  activate();
  launch(
      "kernels::cuda::batchNormBackwardWeights", [&] { return "batchnorm " + dimsText(x.dims); },
      [&] {
        kernels::cuda::batchNormBackwardWeights(shapeOf(x.dims), x.data, dy.data, eps, dgamma,
                                                dshift, impl_->stream.get());
      });
}

// ---- softmax + cross-entropy --------------------------------------------------------------------

void CudaBackend::softmaxStats(ConstTensorView logits, float* stats) {
  activate();
  launch(
      "kernels::cuda::softmaxStats", [&] { return "softmax " + dimsText(logits.dims); },
      [&] {
        kernels::cuda::softmaxStats(shapeOf(logits.dims), logits.data, stats, impl_->stream.get());
      });
}

void CudaBackend::softmaxProbabilities(ConstTensorView logits, const float* stats, TensorView y) {
  checkSameDims(logits.dims, y.dims);
  activate();
  launch(
      "kernels::cuda::softmaxProbabilities", [&] { return "softmax " + dimsText(logits.dims); },
      [&] {
        kernels::cuda::softmaxProbabilities(shapeOf(logits.dims), logits.data, stats, y.data,
                                            impl_->stream.get());
      });
}

SoftmaxLossSum CudaBackend::softmaxLoss(ConstTensorView logits, const float* stats,
                                        const int32_t* labels, int classOffset) {
  activate();
  kernels::LossSum sum;
  launch(
      "kernels::cuda::softmaxLoss", [&] { return "softmax " + dimsText(logits.dims); },
      [&] {
        sum = kernels::cuda::softmaxLoss(shapeOf(logits.dims), logits.data, stats, labels,
                                         classOffset, impl_->stream.get());
      });
  return {sum.loss, sum.correct};
}

void CudaBackend::softmaxBackward(ConstTensorView logits, const float* stats, const int32_t* labels,
                                  int classOffset, float scale, TensorView dlogits, float beta) {
  checkSameDims(logits.dims, dlogits.dims);
  activate();
  launch(
      "kernels::cuda::softmaxBackward", [&] { return "softmax " + dimsText(logits.dims); },
      [&] {
        kernels::cuda::softmaxBackward(shapeOf(logits.dims), logits.data, stats, labels,
                                       classOffset, scale, dlogits.data, beta, impl_->stream.get());
      });
}

// ---- optimiser ----------------------------------------------------------------------------------

void CudaBackend::sgdMomentum(std::span<float> w, std::span<float> v, std::span<const float> g,
                              float learningRate, float momentum, float weightDecay) {
  STRATA_ENFORCE_OP(w.size(), ==, v.size());
  STRATA_ENFORCE_OP(w.size(), ==, g.size());
  activate();
  launch(
      "kernels::cuda::sgdMomentum", [&] { return fmt::format("sgd of {} weights", w.size()); },
      [&] {
        kernels::cuda::sgdMomentum(w.data(), v.data(), g.data(), static_cast<int64_t>(w.size()),
                                   learningRate, momentum, weightDecay, impl_->stream.get());
      });
}

}  // namespace strata::nn

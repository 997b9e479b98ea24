// Inside the CUDA backend (cuda_backend.h): what its files share. The call
// checks and kernel launches, owners of CUDA, cuBLAS and cuDNN objects, a
// convolution's cuDNN plan, and CudaBackend::Impl. The files, by concern:
//   cuda_backend.cpp  devices, device memory, the stream, copies, timeline
//   cuda_conv.cpp     convolutions on cuDNN: plans, algorithm choice, workspace
//   cuda_fc.cpp       fully-connected layers on cuBLAS
//   cuda_layers.cpp   the rest on the project's kernels: pooling, element-wise,
//                     LRN, batch normalisation, softmax, the optimiser
//   cuda_transformer.cpp  transformer layers: attention (its GEMMs and kernels as
//                     attention_plan.h lists them) on cuBLAS and kernels/,
//                     layer normalisation, GELU, embedding; their scratch
//                     (GrowingBuffer) and the bad-token record
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <fmt/format.h>

#include <array>
#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "attention_plan.h"
#include "strata/exec/nn/cuda_backend.h"
#include "strata/kernels/precision.h"
#include "strata/model/error.h"

namespace strata::nn::cuda_detail {

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

[[noreturn]] void fail(const char* call, const std::string& where, const std::string& status);

std::string statusText(cudaError_t e);
std::string statusText(cublasStatus_t s);
std::string statusText(cudnnStatus_t s);

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

// "n x c x h x w" of a shape, for messages.
std::string dimsText(const Dims& d);

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
using PinnedPointer = Owned<void*, cudaFreeHost>;

// A device buffer that grows to the largest size asked of it and is kept
// (CudaBackend::Impl::grow): scratch is never allocated per step.
struct GrowingBuffer {
  DevicePointer memory;
  size_t bytes = 0;
};
using CublasHandle = Owned<cublasHandle_t, cublasDestroy>;
using CudnnHandle = Owned<cudnnHandle_t, cudnnDestroy>;
using TensorDescriptor = Owned<cudnnTensorDescriptor_t, cudnnDestroyTensorDescriptor>;
using FilterDescriptor = Owned<cudnnFilterDescriptor_t, cudnnDestroyFilterDescriptor>;
using ConvolutionDescriptor =
    Owned<cudnnConvolutionDescriptor_t, cudnnDestroyConvolutionDescriptor>;

// Makes `device` current on the calling thread.
void setDevice(int device);

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

using ConvKey = std::array<int, 14>;

// cuDNN's and cuBLAS's scaling factors (alpha, and beta of an overwrite).
constexpr float kOne = 1.0f;
constexpr float kZero = 0.0f;

// ---- what each call is, in the lowering's vocabulary (kernel_recorder.h) ----

// A cuDNN convolution pass over n examples as its implicit GEMM per group
// (model/kernels.h, ConvPass): m = examples x output positions, n = filters
// per group, k = input channels per group x kernel area; `groups` of them.
inline KernelCall cudnnCall(ConvPass pass, const ConvDesc& d, int n) {
  return convCall(pass, int64_t{n} * d.outH * d.outW, d.filters / d.groups,
                  int64_t{d.inC / d.groups} * d.kernelH * d.kernelW, d.groups);
}

// The row-major GEMM that a column-major cuBLAS call C (M x N) = op(A) op(B)
// computes, `batch` times. Read row-major, the same memory holds C^T (N x M)
// = op(B)^T op(A)^T, and B's (A's) array read row-major is B^T (A^T): so
// m = N, n = M, k = K, with the first operand transposed when transb is, the
// second when transa is (both: not a shape the backend uses).
inline KernelCall cublasCall(cublasOperation_t transa, cublasOperation_t transb, int M, int N,
                             int K, int batch = 1) {
  const bool first = transb == CUBLAS_OP_T, second = transa == CUBLAS_OP_T;
  STRATA_ENFORCE(!(first && second));
  return gemmCall(first ? GemmOp::kTN : second ? GemmOp::kNT : GemmOp::kNN, N, M, K, batch);
}

}  // namespace strata::nn::cuda_detail

namespace strata::nn {

// ---- CudaBackend::Impl ---------------------------------------------------------------------

struct CudaBackend::Impl {
  Impl(const CudaBackendOptions& o, int dev);

  // The plan of a shape, created (descriptors only) on first use.
  cuda_detail::ConvPlan& plan(const ConvDesc& d, int n);
  // The algorithm of each direction, chosen on first use of the plan in that
  // direction; the workspace grows to fit it.
  const cuda_detail::ConvChoice& forward(cuda_detail::ConvPlan& p);
  const cuda_detail::ConvChoice& backwardData(cuda_detail::ConvPlan& p);
  const cuda_detail::ConvChoice& backwardFilter(cuda_detail::ConvPlan& p);
  // Sets the plan's descriptor to the choice's math type (directions may
  // differ) and returns the workspace for it.
  void* prepare(cuda_detail::ConvPlan& p, const cuda_detail::ConvChoice& c);

  void growWorkspace(size_t bytes);
  // Scratch slot `slot` with room for `count` bf16 elements (grow-only, as
  // the workspace: a larger need waits for the stream, then reallocates).
  uint16_t* bf16Slot(int slot, int64_t count);

  // ---- cuda_transformer.cpp ----
  // `buffer` holding at least `bytes` (what: for messages); growing waits for
  // the stream first (kernels enqueued may still use the old buffer).
  void* grow(cuda_detail::GrowingBuffer& buffer, size_t bytes, const char* what);
  // The device's bad-token record (kernels/transformer.h), created and
  // cleared on first use.
  uint64_t* badTokenRecord();
  // Enqueues the record's copy to its pinned host copy (after an embedding
  // kernel), read by reportBadToken.
  void copyBadTokenRecord();
  // After the stream has been waited for: throws the UserError CpuBackend
  // throws for a bad token id, naming the id and the vocabulary, when one
  // was recorded (and clears the record).
  void reportBadToken();

  const CudaBackendOptions& options;
  cuda_detail::StreamHandle stream;
  CudaDeviceMemory memory;
  cuda_detail::CublasHandle cublas;
  cuda_detail::CudnnHandle cudnn;

  cuda_detail::DevicePointer workspace;  // cuDNN's scratch, shared by every convolution
  size_t workspaceBytes = 0;
  std::map<cuda_detail::ConvKey, cuda_detail::ConvPlan> plans;

  // The transformer layers' scratch (cuda_transformer.cpp) and the
  // bad-token record with its host copy.
  cuda_detail::GrowingBuffer attnContextGrad, attnScoresGrad, layerNormStats, embeddingScratch;
  cuda_detail::DevicePointer badToken;
  cuda_detail::PinnedPointer badTokenHost;
  // Mixed precision (element bf16): the bf16 copies of a GEMM's or
  // convolution's operands (slots 0 and 1) and a convolution's bf16 result
  // (slot 2), each grown to the largest need so far and kept; from `memory`
  // (the device's pool), as every buffer of a run, and counted by the
  // run's memory bound (exec::bf16ScratchBytes).
  std::array<Buffer<uint16_t>, 3> bf16;
  // What each slot holds a copy of during one attention call (its GEMMs
  // find their bf16 operands by their fp32 pointers: attention_plan.h);
  // cleared at the start of every attention call.
  attention::Copies attentionCopies{};

  // writeSynthetic's device copies: the dataset's class means (of the means
  // span last seen) and the batch's classes and keys.
  cuda_detail::DevicePointer synthMeans;
  const float* synthMeansOf = nullptr;
  size_t synthMeansCount = 0;
  cuda_detail::DevicePointer synthIndex;
  size_t synthIndexBytes = 0;

  // The current timeline (see CudaBackend::startTimeline): its origin and
  // the pool of mark events, of which the first `marks` are in use (-1: no
  // timeline started).
  cuda_detail::EventHandle origin;
  std::vector<cuda_detail::EventHandle> events;
  int marks = -1;
  // Guards `events` and `marks` between markTime (compute lane) and waitMark
  // (communication lane).
  std::mutex marksMutex;
};

}  // namespace strata::nn

// ---- mixed precision: the casts around bf16 GEMMs and convolutions ------------

namespace strata::nn {

template <class Where>
const uint16_t* CudaBackend::castOperand(int slot, const float* x, int64_t count,
                                         const Where& where) {
  if (!runs(MemKernel::kCastBf16, double(count)))
    return nullptr;
  uint16_t* h = impl_->bf16Slot(slot, count);
  cuda_detail::launch("kernels::cuda::castToBf16", where,
                      [&] { kernels::cuda::castToBf16(x, h, count, impl_->stream.get()); });
  return h;
}

template <class Where>
void CudaBackend::castResult(const uint16_t* h, float* y, int64_t count, float beta,
                             const Where& where) {
  if (!runs(MemKernel::kCastFp32, double(count)))
    return;
  cuda_detail::launch("kernels::cuda::castFromBf16", where,
                      [&] { kernels::cuda::castFromBf16(h, y, count, beta, impl_->stream.get()); });
}

}  // namespace strata::nn

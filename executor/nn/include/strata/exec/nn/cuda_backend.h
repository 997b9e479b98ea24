// The CUDA backend: the Backend interface on one GPU.
//
// Convolutions run on cuDNN (its legacy convolution API, the algorithm
// chosen once per shape), fully-connected layers and attention's products on
// cuBLAS SGEMM, and every other layer (attention's softmax included) on the
// project's own kernels (kernels/, strata::kernels::cuda and transformer.h),
// which implement exactly CpuBackend's semantics (tie-breaking of max
// pooling, the LRN window and alpha, per-view batch statistics), so that the
// two backends give the same results within rounding. cuDNN's pooling, LRN
// and batch normalisation are not used: their conventions differ from the
// Backend contract.
//
// Buffers live in device memory (CudaDeviceMemory) from the device's memory
// pool: host code (Model, the Plan interpreter, communicators) never
// dereferences them; it hands their pointers to kernels and to a
// communicator's BufferOps, and moves values with the Memory's copies, which
// run on the backend's stream through pinned staging (memory.h). Kernels are
// enqueued on the backend's own stream and return at once; synchronize()
// waits for them.
//
// This header includes no CUDA header: callers compile without the toolkit's
// include path; the CUDA types appear only as their opaque struct pointers.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "strata/exec/nn/backend.h"
#include "strata/model/cluster.h"

// cudaStream_t is a pointer to this (driver_types.h).
struct CUstream_st;

namespace strata::nn {

struct CudaBackendOptions {
  // CUDA device ordinal.
  int device = 0;
  // The arithmetic of GEMMs (fc) and convolutions; every other layer, the
  // buffers the Model holds and the weights stay fp32 whatever this says.
  //  fp32: full FP32 arithmetic (cuBLAS CUBLAS_DEFAULT_MATH, cuDNN
  //        CUDNN_FMA_MATH), which the tests against CpuBackend need.
  //  tf32: fp32 tensors on TF32 tensor cores (cuBLAS
  //        CUBLAS_TF32_TENSOR_OP_MATH, cuDNN's default math): about 8x the
  //        FP32 throughput on A100/H100 with a 10-bit mantissa in the products.
  //  bf16: mixed precision. Each operand is cast to bf16 (round to nearest
  //        even, kernels/precision.h) into scratch the backend keeps, the
  //        weights included (per call: the Model may change them between any
  //        two calls); fc layers are cublasGemmEx with bf16 A and B, fp32 C
  //        and CUBLAS_COMPUTE_32F (products summed in fp32, written in fp32,
  //        beta applied in fp32); convolutions run on cuDNN with bf16 tensors
  //        and fp32 compute into bf16 scratch, cast back to fp32 with beta
  //        (weight gradients accumulated in fp32). Master weights, their
  //        gradients' sums and the update stay fp32 (the Model's buffers).
  //  fp16: refused (RunFailure; the executor's --element check says so
  //        first): fp16 training needs loss scaling, which is not built.
  ElementType element = ElementType::kFp32;
  // Whether GEMMs and convolutions of fp32 tensors may use TF32.
  bool tf32() const { return element == ElementType::kTf32; }
  // How a convolution algorithm is chosen, once per shape and direction:
  // true: cuDNN times every algorithm on scratch buffers of its own
  // (cudnnFind*Algorithm; blocks the host for a few milliseconds up to a
  // second the first time a shape is seen) and the fastest is kept; false:
  // cuDNN's heuristics pick without running anything (cudnnGet*Algorithm_v7),
  // deterministic from run to run but sometimes slower.
  bool benchmarkConvolutions = true;
  // The largest cuDNN workspace one convolution may use; algorithms needing
  // more are passed over. The workspace is one device buffer per backend,
  // grown to the largest need of the algorithms chosen.
  size_t maxWorkspaceBytes = size_t{1} << 30;
};

// Why no CUDA device can be used here ("cudaGetDeviceCount: CUDA driver
// version is insufficient for CUDA runtime version", "cudaGetDeviceCount
// found no device"), or empty when the machine has a device. For tests and
// the CLI to skip or refuse the CUDA backend with a clear line.
std::string cudaUnavailableReason();

// Global memory of CUDA device `device`, in bytes (cudaGetDeviceProperties);
// throws RunFailure naming the call when it cannot be read.
size_t cudaDeviceMemoryBytes(int device = 0);

// What device `device` has free now and in all, in bytes (cudaMemGetInfo:
// other processes' and this one's allocations count; the blocks this
// process's pool keeps unused are given back first, cudaMemPoolTrimTo), and
// its name; throws RunFailure naming the call when they cannot be read.
struct CudaMemoryInfo {
  size_t freeBytes = 0;
  size_t totalBytes = 0;
  std::string name;  // "NVIDIA H100 80GB HBM3"
};
CudaMemoryInfo cudaMemoryInfo(int device = 0);

// Device memory of one GPU, from the device's memory pool: allocate() is
// cudaMallocFromPoolAsync on the device's default pool (cudaMemPool_t), whose
// release threshold is raised to the maximum once per device so that freed
// blocks stay in the pool for the next allocation instead of going back to
// the driver at every synchronisation; deallocate() is cudaFreeAsync. Both on
// `stream` (the backend's). allocate() zero-fills on the stream and then
// waits for it, so the block is usable from any stream (a communicator's)
// when it returns; buffers grow in the first step, never per step.
//
// The host cannot address it (hostAccessible() is false). upload() and
// download() go through pinned host staging (cudaMallocHost, grown up to
// kStagingBytes and kept) used as a ring: each copy (cudaMemcpyAsync on the
// stream, chunk by chunk) takes the next region, and a region is written
// again only after the event recorded behind the copy that last used it.
// download() waits for its copies (so for the kernels before them on the
// stream); upload() returns once the host's bytes are in the staging. copy() and zero() are
// cudaMemcpyAsync / cudaMemsetAsync on the stream and do not wait: a consumer
// on another stream waits for the backend first (Model does). Thread-safe
// (the compute and communication lanes of a worker both copy).
class CudaDeviceMemory final : public Memory {
 public:
  // Pinned staging is at most this large; longer copies go in chunks.
  static constexpr size_t kStagingBytes = size_t{32} << 20;

  // Throws RunFailure when the device has no memory pools
  // (cudaDevAttrMemoryPoolsSupported) or a call fails.
  CudaDeviceMemory(int device, CUstream_st* stream);
  ~CudaDeviceMemory() override;
  CudaDeviceMemory(const CudaDeviceMemory&) = delete;
  CudaDeviceMemory& operator=(const CudaDeviceMemory&) = delete;

  void* allocate(size_t bytes) override;
  // A failure is dropped (this must not throw; cudaFreeAsync fails only
  // after an earlier sticky error, which the next checked call reports).
  void deallocate(void* p, size_t bytes) noexcept override;
  const char* name() const override { return "cuda-device"; }
  bool hostAccessible() const override { return false; }
  void upload(void* dst, const void* src, size_t bytes) override;
  void download(void* dst, const void* src, size_t bytes) override;
  void copy(void* dst, const void* src, size_t bytes) override;
  void zero(void* dst, size_t bytes) override;

 private:
  struct Staging;  // the pinned buffer and the event of its last copy
  int device_;
  CUstream_st* stream_;
  std::unique_ptr<Staging> staging_;
};

// CUDA managed memory (cudaMallocManaged) on one device: the host and the
// device address it through the same pointers, pages migrate on access.
// Allocations prefer the device (cudaMemAdviseSetPreferredLocation).
// allocate() zero-fills on the device, on the given stream, and waits for
// that stream. No backend uses it (the device machine's notes warn that
// asking for more managed memory than is free can hang the GPU; no framework
// trains from it): it is kept for the test that checks it, as the contrast
// to CudaDeviceMemory. Its copies are memcpy after waiting for the stream.
class CudaManagedMemory final : public Memory {
 public:
  // `stream` is the stream the zero-fill runs on.
  CudaManagedMemory(int device, CUstream_st* stream) : device_(device), stream_(stream) {}
  void* allocate(size_t bytes) override;
  // cudaFree, which may wait for the whole device.
  void deallocate(void* p, size_t bytes) noexcept override;
  const char* name() const override { return "cuda-managed"; }
  bool hostAccessible() const override { return true; }
  void upload(void* dst, const void* src, size_t bytes) override;
  void download(void* dst, const void* src, size_t bytes) override;
  void copy(void* dst, const void* src, size_t bytes) override;
  void zero(void* dst, size_t bytes) override;

 private:
  void wait();
  int device_;
  CUstream_st* stream_;
};

// One worker's GPU compute: one CUDA stream, a cuBLAS and a cuDNN handle on
// it, a cuDNN workspace, the convolution algorithms chosen so far and a pool
// of timing events. Not thread-safe (one backend per worker, as CpuBackend);
// several backends may share a device, each on its own stream. Every CUDA,
// cuBLAS and cuDNN call is checked: a failure throws RunFailure naming the
// call, its status and the layer ("cudnnConvolutionForward (conv
// 96x3x11x11 stride 4 pad 0, batch 128): CUDNN_STATUS_BAD_PARAM").
class CudaBackend final : public Backend {
 public:
  // Throws RunFailure when there is no usable device ("no CUDA device:
  // cudaGetDeviceCount: ..."), when it has no memory pools (CudaDeviceMemory)
  // or when a handle cannot be created.
  explicit CudaBackend(CudaBackendOptions options = {});
  // A backend without a device that only records (kernel_recorder.h;
  // `recorder` must be record-only and outlive it): each method reports the
  // cuBLAS and cuDNN calls and the kernel launches it would make, from the
  // same code and arguments as a device run, and makes no CUDA call at all
  // (memory() is ReservedMemory, synchronize() returns at once; stream(),
  // the timeline and the device queries need a device). How the tests hold
  // lowerCuda against this backend on machines without a GPU. `element` as
  // CudaBackendOptions::element (bf16 records the casts around its GEMMs and
  // convolutions).
  explicit CudaBackend(KernelRecorder& recorder, ElementType element = ElementType::kFp32);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  std::string_view name() const override { return "cuda"; }
  Memory& memory() override;
  // cudaStreamSynchronize on this backend's stream; an asynchronous failure
  // of any kernel enqueued since the last synchronize throws here, and so
  // does a bad token id an embedding met (UserError, as CpuBackend's).
  void synchronize() override;
  // A kernel on the stream (kernels::cuda::syntheticExamples); the means go
  // to the device once per dataset, the classes and keys with each batch
  // (uploads through the memory's pinned staging). A language model's token
  // ids (batch.tokens) come from a kernel too (kernels::cuda::syntheticTokens,
  // nothing uploaded); given values (batch.values) are uploaded as they are:
  // no wait for the kernels before.
  void writeSynthetic(const SyntheticBatch& batch, TensorView x) override;
  // A record-only backend takes only a record-only recorder.
  void setRecorder(KernelRecorder* recorder) override;
  // cudaMemcpy2DAsync on the stream: one row of src.c planes per example.
  void copyIntoChannels(ConstTensorView src, TensorView dst, int channelOffset) override;

  const CudaBackendOptions& options() const { return options_; }
  // The stream every kernel of this backend runs on (a cudaStream_t), for
  // device communicators and copies that must order with the kernels.
  CUstream_st* stream() const;

  // What `strata calibrate --device cuda` records of the device.
  struct DeviceInfo {
    std::string name;         // "NVIDIA H100 80GB HBM3"
    int multiprocessors = 0;  // SMs
    size_t memoryBytes = 0;   // global memory
  };
  DeviceInfo deviceInfo() const;
  // Seconds of one copy of `bytes` from pinned host memory to the device and
  // of one back (cudaMemcpyAsync on this stream, each waited for; best of 5
  // after a warm-up), for the host link of a calibrated cluster.
  std::pair<double, double> hostCopySeconds(size_t bytes);

  // ---- GPU time for traces ---------------------------------------------------
  // Timestamps taken by CUDA events on the stream, not by the host: a mark
  // completes when every kernel enqueued before it has finished, so the time
  // between two marks is the GPU time of the kernels between them (plus any
  // idle time of the stream in between, e.g. while the host waited).
  //
  //   auto origin = cuda.startTimeline();   // host time of GPU time 0
  //   int a = cuda.markTime();
  //   ... enqueue kernels ...
  //   int b = cuda.markTime();
  //   cuda.synchronize();
  //   double start = cuda.markSeconds(a), end = cuda.markSeconds(b);
  //   // on the host clock: origin + start, origin + end
  //
  // startTimeline waits for the stream (so it is idle), records the origin
  // event and returns the host time of that moment: the idle stream runs the
  // event at once, so origin + markSeconds(i) places mark i on the host's
  // steady clock (within a few microseconds), comparable with host-timed
  // communication. It discards the marks of the previous timeline (their
  // events are reused); marks need no release. Event resolution ~0.5 us.
  using Clock = std::chrono::steady_clock;
  Clock::time_point startTimeline();
  // Records a mark on the stream; returns its id within the current
  // timeline. Requires startTimeline() first.
  int markTime();
  // Seconds from the timeline's origin to mark `id`. Requires the mark to have
  // completed: call after synchronize() (else RunFailure: cudaErrorNotReady).
  double markSeconds(int id) const;
  // Blocks the calling thread until mark `id` of the current timeline has
  // completed (cudaEventSynchronize): the kernels enqueued before it are done,
  // those after it may still run. Safe from another thread than the one
  // recording marks (the Plan interpreter's communication lane waits for the
  // compute lane's tasks this way).
  void waitMark(int id);

  // ---- Backend -------------------------------------------------------------------
  void convForward(const ConvDesc& d, ConstTensorView x, const float* w, const float* bias,
                   TensorView y) override;
  void convBackwardData(const ConvDesc& d, ConstTensorView dy, const float* w, TensorView dx,
                        float beta) override;
  void convBackwardWeights(const ConvDesc& d, ConstTensorView x, ConstTensorView dy, float* dw,
                           float* dbias) override;

  void poolForward(const PoolDesc& d, ConstTensorView x, TensorView y, int32_t* argmax) override;
  void poolBackward(const PoolDesc& d, ConstTensorView dy, const int32_t* argmax, TensorView dx,
                    float beta) override;

  void fcForward(const FcDesc& d, ConstTensorView x, const float* w, const float* bias,
                 TensorView y) override;
  void fcBackwardData(const FcDesc& d, ConstTensorView dy, const float* w, TensorView dx,
                      float beta) override;
  void fcBackwardWeights(const FcDesc& d, ConstTensorView x, ConstTensorView dy, float* dw,
                         float* dbias) override;

  void reluForward(ConstTensorView x, TensorView y) override;
  void reluBackward(ConstTensorView y, ConstTensorView dy, TensorView dx, float beta) override;
  void dropoutForward(const DropoutDesc& d, ConstTensorView x, TensorView y) override;
  void dropoutBackward(const DropoutDesc& d, ConstTensorView dy, TensorView dx,
                       float beta) override;
  void fill(std::span<float> x, float value) override;
  void add(ConstTensorView a, ConstTensorView b, TensorView y) override;
  void accumulate(ConstTensorView src, TensorView dst, float beta) override;

  void lrnForward(const LrnDesc& d, ConstTensorView x, TensorView y, TensorView scale) override;
  void lrnBackward(const LrnDesc& d, ConstTensorView x, ConstTensorView y, ConstTensorView scale,
                   ConstTensorView dy, TensorView dx, float beta) override;

  void batchNormForward(ConstTensorView x, const float* gamma, const float* shift, float eps,
                        TensorView y) override;
  void batchNormBackwardData(ConstTensorView x, ConstTensorView dy, const float* gamma, float eps,
                             TensorView dx, float beta) override;
  void batchNormBackwardWeights(ConstTensorView x, ConstTensorView dy, float eps, float* dgamma,
                                float* dshift) override;

  void softmaxStats(ConstTensorView logits, float* stats) override;
  void softmaxProbabilities(ConstTensorView logits, const float* stats, TensorView y) override;
  // Waits for the stream: the sums come back to the host.
  SoftmaxLossSum softmaxLoss(ConstTensorView logits, const float* stats, const int32_t* labels,
                             int classOffset) override;
  void softmaxBackward(ConstTensorView logits, const float* stats, const int32_t* labels,
                       int classOffset, float scale, TensorView dlogits, float beta) override;

  // Transformer layers (cuda_transformer.cpp): attention's projections and
  // per-head products on cuBLAS, the rest on kernels/ (transformer.h).
  bool runsTransformerLayers() const override { return true; }
  void layerNormForward(ConstTensorView x, const float* gain, const float* bias, float eps,
                        TensorView y) override;
  void layerNormBackwardData(ConstTensorView x, ConstTensorView dy, const float* gain, float eps,
                             TensorView dx, float beta) override;
  void layerNormBackwardWeights(ConstTensorView x, ConstTensorView dy, float eps, float* dgain,
                                float* dbias) override;
  void geluForward(ConstTensorView x, TensorView y) override;
  void geluBackward(ConstTensorView x, ConstTensorView dy, TensorView dx, float beta) override;
  void attentionForward(const AttentionDesc& d, ConstTensorView x, const float* w,
                        const float* bias, const AttentionSaved& saved, TensorView y) override;
  // Selective recomputation (attention_plan.h's core): multi-head attention
  // only, as attentionForward.
  void attentionCoreForward(const AttentionDesc& d, const AttentionSaved& saved) override;
  bool runsAttentionCore() const override { return true; }
  // A tensor-parallel worker's share: attention over some heads
  // (attention_plan.h's inner width a), an embedding over some token rows.
  bool runsTensorParallelLayers() const override { return true; }
  void attentionBackwardWeights(const AttentionDesc& d, ConstTensorView x, ConstTensorView dy,
                                const float* w, const AttentionSaved& saved, float* dw,
                                float* dbias) override;
  void attentionBackwardData(const AttentionDesc& d, ConstTensorView dqkv, const float* w,
                             TensorView dx, float beta) override;
  // A bad token id (not an integer in [0, vocab)) is found on the device:
  // its output is 0 and the next synchronize() throws CpuBackend's
  // UserError naming the id and the vocabulary.
  void embeddingForward(const EmbeddingDesc& d, ConstTensorView ids, const float* table,
                        TensorView y) override;
  // Deterministic: a stable sort of (token, position) pairs, then each
  // token's positions added in order (no float atomics); equals CpuBackend
  // bit for bit.
  void embeddingBackwardWeights(const EmbeddingDesc& d, ConstTensorView ids, ConstTensorView dy,
                                float* dtable) override;

  void sgdMomentum(std::span<float> w, std::span<float> v, std::span<const float> g,
                   float learningRate, float momentum, float weightDecay) override;
  void adam(std::span<float> w, std::span<float> m, std::span<float> v, std::span<const float> g,
            const AdamParams& p) override;

 private:
  struct Impl;  // the CUDA, cuBLAS and cuDNN objects (src/cuda_internal.h)

  // Makes this backend's device current on the calling thread (workers may
  // call from threads that last used another device).
  void activate() const;
  // The calls of an attention plan on this backend (cuda_transformer.cpp,
  // which alone uses it), and the stream they launch on: this backend's,
  // its device made current, or null when it records only.
  auto attentionOps(const std::string& where, CUstream_st* stream);
  CUstream_st* attentionStream();

  // ---- mixed precision (element bf16: cuda_internal.h) ----
  bool bf16() const { return options_.element == ElementType::kBf16; }
  // `count` floats at x cast to bf16 into scratch slot `slot` (0, 1: the two
  // operands of a GEMM or convolution; 2: a convolution's result), reported as
  // one kCastBf16 call; the slot's bf16 copy, or null on a record-only
  // backend (which allocates nothing).
  template <class Where>
  const uint16_t* castOperand(int slot, const float* x, int64_t count, const Where& where);
  // Scratch slot `slot` as room for a bf16 result of `count` elements.
  uint16_t* bf16Scratch(int slot, int64_t count);
  // y = float(h) + beta * y over `count` elements, reported as one kCastFp32
  // call: a bf16 result back into the fp32 tensor the Backend contract names.
  template <class Where>
  void castResult(const uint16_t* h, float* y, int64_t count, float beta, const Where& where);

  CudaBackendOptions options_;
  std::unique_ptr<Impl> impl_;                // null: record only (no device)
  std::unique_ptr<ReservedMemory> reserved_;  // memory() of a record-only backend
};

}  // namespace strata::nn

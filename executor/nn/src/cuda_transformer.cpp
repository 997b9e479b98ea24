// The CUDA backend's transformer layers (cuda_internal.h): multi-head
// attention on cuBLAS with the softmax kernels of kernels/ (transformer.h),
// layer normalisation, GELU and token embedding on kernels/ alone.
//
// Attention follows attention_plan.h (CUDA-free, so that a test runs the
// same plan on the CPU): its GEMMs as cuBLAS SGEMMs (strided-batched over
// the examples, or over (examples x heads) in loops), its softmax and bias
// kernels from kernels/. With element bf16 the plan's casts put bf16 copies
// of the GEMM operands into the backend's bf16 scratch slots (as
// cuda_fc.cpp's), and each GEMM runs as cublasGemmEx /
// cublasGemmStridedBatchedEx on those copies with an fp32 result and
// CUBLAS_COMPUTE_32F; the softmax and the biases stay fp32.
//
// Scratch (dC and dP for backward, layer normalisation's statistics, the
// embedding's sort buffers) grows to the largest need and is kept; growing
// waits for the stream, as the cuDNN workspace does.
#include <cublas_v2.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "attention_plan.h"
#include "cuda_internal.h"
#include "shape_checks.h"
#include "strata/kernels/transformer.h"
#include "strata/model/error.h"

namespace strata::nn {

using namespace cuda_detail;

namespace {

kernels::Shape4 shapeOf(const Dims& d) {
  return {d.n, d.c, d.h, d.w};
}

// Runs a plan's GEMM as the cuBLAS call that computes it: an SGEMM, or with
// bf16 (`slots`: the bf16 scratch slots that `copies` describes) a GEMM on
// the bf16 copies of its operands with an fp32 result and accumulation.
template <class Where>
void runGemm(cublasHandle_t handle, const attention::RowMajorGemm& g, const Where& where,
             const attention::Copies* copies = nullptr,
             const std::array<Buffer<uint16_t>, 3>* slots = nullptr) {
  const attention::ColumnMajorGemm c = attention::columnMajor(g);
  const cublasOperation_t ta = c.transA ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t tb = c.transB ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (copies) {
    const auto bf16Of = [&](const float* p) {
      const int slot = attention::copyHolding(*copies, p);
      return (*slots)[size_t(slot)].data() + (p - (*copies)[size_t(slot)].from);
    };
    const uint16_t* a = bf16Of(c.a);
    const uint16_t* b = bf16Of(c.b);
    if (c.batch == 1)
      check(cublasGemmEx(handle, ta, tb, c.m, c.n, c.k, &kOne, a, CUDA_R_16BF, c.lda, b,
                         CUDA_R_16BF, c.ldb, &c.beta, c.c, CUDA_R_32F, c.ldc, CUBLAS_COMPUTE_32F,
                         CUBLAS_GEMM_DEFAULT),
            "cublasGemmEx (bf16 operands, fp32 result)", where);
    else
      check(cublasGemmStridedBatchedEx(handle, ta, tb, c.m, c.n, c.k, &kOne, a, CUDA_R_16BF, c.lda,
                                       c.strideA, b, CUDA_R_16BF, c.ldb, c.strideB, &c.beta, c.c,
                                       CUDA_R_32F, c.ldc, c.strideC, c.batch, CUBLAS_COMPUTE_32F,
                                       CUBLAS_GEMM_DEFAULT),
            "cublasGemmStridedBatchedEx (bf16 operands, fp32 result)", where);
    return;
  }
  if (c.batch == 1)
    check(cublasSgemm(handle, ta, tb, c.m, c.n, c.k, &kOne, c.a, c.lda, c.b, c.ldb, &c.beta, c.c,
                      c.ldc),
          "cublasSgemm", where);
  else
    check(cublasSgemmStridedBatched(handle, ta, tb, c.m, c.n, c.k, &kOne, c.a, c.lda, c.strideA,
                                    c.b, c.ldb, c.strideB, &c.beta, c.c, c.ldc, c.strideC, c.batch),
          "cublasSgemmStridedBatched", where);
}

std::string attentionWhere(const AttentionDesc& d, int n) {
  return fmt::format("attention d={} T={} heads {}{}, batch {}", d.features, d.positions, d.heads,
                     d.causal ? " causal" : "", n);
}

kernels::EmbeddingParams embeddingParams(const EmbeddingDesc& d, const Dims& ids) {
  kernels::EmbeddingParams p;
  p.n = ids.n;
  p.positions = ids.h * ids.w;
  p.vocab = d.vocab;
  p.features = d.features;
  p.positionTable = d.positions;
  p.firstToken = d.firstToken;
  p.tokens = d.tokens;
  p.addPositions = d.addPositions;
  return p;
}

}  // namespace

// ---- scratch and the bad-token record ------------------------------------------------------

void* CudaBackend::Impl::grow(GrowingBuffer& buffer, size_t bytes, const char* what) {
  if (bytes <= buffer.bytes)
    return buffer.memory.get();
  // Kernels already enqueued may still use the old buffer.
  check(cudaStreamSynchronize(stream.get()), "cudaStreamSynchronize",
        [&] { return fmt::format("before growing the {}", what); });
  buffer.memory.reset();
  buffer.bytes = 0;
  check(cudaMalloc(buffer.memory.out(), bytes), "cudaMalloc",
        [&] { return fmt::format("{} of {} bytes", what, bytes); });
  buffer.bytes = bytes;
  return buffer.memory.get();
}

uint64_t* CudaBackend::Impl::badTokenRecord() {
  if (!badToken.get()) {
    check(cudaMalloc(badToken.out(), sizeof(uint64_t)), "cudaMalloc", "the bad-token record");
    check(cudaMallocHost(badTokenHost.out(), sizeof(uint64_t)), "cudaMallocHost",
          "the bad-token record's host copy");
    *static_cast<uint64_t*>(badTokenHost.get()) = kernels::kNoBadToken;
    check(cudaMemsetAsync(badToken.get(), 0xff, sizeof(uint64_t), stream.get()), "cudaMemsetAsync",
          "clearing the bad-token record");
  }
  return static_cast<uint64_t*>(badToken.get());
}

void CudaBackend::Impl::copyBadTokenRecord() {
  check(cudaMemcpyAsync(badTokenHost.get(), badToken.get(), sizeof(uint64_t),
                        cudaMemcpyDeviceToHost, stream.get()),
        "cudaMemcpyAsync", "the bad-token record to the host");
}

void CudaBackend::Impl::reportBadToken() {
  if (!badTokenHost.get())
    return;
  auto* host = static_cast<uint64_t*>(badTokenHost.get());
  if (*host == kernels::kNoBadToken)
    return;
  const kernels::BadToken bad = kernels::decodeBadToken(*host);
  // Cleared, so that a caller who catches this can go on.
  *host = kernels::kNoBadToken;
  check(cudaMemsetAsync(badToken.get(), 0xff, sizeof(uint64_t), stream.get()), "cudaMemsetAsync",
        "clearing the bad-token record");
  // CpuBackend's message (cpu_transformer.cpp).
  throw UserError(fmt::format(
      "embedding: token id {} is not an integer in [0, {}) (the vocabulary)", bad.id, bad.vocab));
}

// ---- layer normalisation ------------------------------------------------------------------

void CudaBackend::layerNormForward(ConstTensorView x, const float* gain, const float* bias,
                                   float eps, TensorView y) {
  checkSameDims(x.dims, y.dims);
  if (!runs(MemKernel::kLayerNormFwd, double(x.elements())))
    return;
  activate();
  launch(
      "kernels::cuda::layerNormForward", [&] { return "layernorm " + dimsText(x.dims); },
      [&] {
        kernels::cuda::layerNormForward(shapeOf(x.dims), x.data, gain, bias, eps, y.data,
                                        impl_->stream.get());
      });
}

void CudaBackend::layerNormBackwardData(ConstTensorView x, ConstTensorView dy, const float* gain,
                                        float eps, TensorView dx, float beta) {
  checkSameDims(x.dims, dy.dims);
  checkSameDims(x.dims, dx.dims);
  if (!runs(MemKernel::kLayerNormBwdData, double(x.elements())))
    return;
  activate();
  launch(
      "kernels::cuda::layerNormBackwardData", [&] { return "layernorm " + dimsText(x.dims); },
      [&] {
        kernels::cuda::layerNormBackwardData(shapeOf(x.dims), x.data, dy.data, gain, eps, dx.data,
                                             beta, impl_->stream.get());
      });
}

void CudaBackend::layerNormBackwardWeights(ConstTensorView x, ConstTensorView dy, float eps,
                                           float* dgain, float* dbias) {
  checkSameDims(x.dims, dy.dims);
  if (!runs(MemKernel::kLayerNormBwdWeights, double(x.elements())))
    return;
  activate();
  const auto where = [&] { return "layernorm " + dimsText(x.dims); };
  const int64_t floats = kernels::cuda::layerNormWeightsScratch(shapeOf(x.dims));
  auto* stats = static_cast<float*>(impl_->grow(impl_->layerNormStats,
                                                static_cast<size_t>(floats) * sizeof(float),
                                                "layer normalisation's statistics"));
  launch("kernels::cuda::layerNormBackwardWeights", where, [&] {
    kernels::cuda::layerNormBackwardWeights(shapeOf(x.dims), x.data, dy.data, eps, dgain, dbias,
                                            stats, impl_->stream.get());
  });
}

// ---- GELU -----------------------------------------------------------------------------------

void CudaBackend::geluForward(ConstTensorView x, TensorView y) {
  checkSameDims(x.dims, y.dims);
  if (!runs(MemKernel::kGeluFwd, double(x.elements())))
    return;
  activate();
  launch(
      "kernels::cuda::geluForward", [&] { return "gelu " + dimsText(x.dims); },
      [&] { kernels::cuda::geluForward(x.data, y.data, x.elements(), impl_->stream.get()); });
}

void CudaBackend::geluBackward(ConstTensorView x, ConstTensorView dy, TensorView dx, float beta) {
  checkSameDims(x.dims, dy.dims);
  checkSameDims(x.dims, dx.dims);
  if (!runs(MemKernel::kGeluBwd, double(x.elements())))
    return;
  activate();
  launch(
      "kernels::cuda::geluBackward", [&] { return "gelu " + dimsText(x.dims); },
      [&] {
        kernels::cuda::geluBackward(x.data, dy.data, dx.data, x.elements(), beta,
                                    impl_->stream.get());
      });
}

// ---- attention ------------------------------------------------------------------------------

// The plan's calls on this backend: each reported to the recorder, run
// unless it only records. `st` is the stream (null when recording only).
// Clears the record of what the bf16 slots hold (a new plan call casts
// before its GEMMs read).
auto CudaBackend::attentionOps(const std::string& where, CUstream_st* st) {
  if (!recordOnly())
    impl_->attentionCopies = {};
  return attention::Ops{
      [this, &where](const attention::RowMajorGemm& g) {
        if (runs(g.call())) {
          if (bf16())
            runGemm(impl_->cublas.get(), g, where, &impl_->attentionCopies, &impl_->bf16);
          else
            runGemm(impl_->cublas.get(), g, where);
        }
      },
      [this, &where, st](float* y, const float* b, int n, int channels, int64_t positions) {
        if (runs(MemKernel::kBias, double(n) * channels * double(positions)))
          launch("kernels::cuda::biasAdd", where,
                 [&] { kernels::cuda::biasAdd(y, b, n, channels, positions, st); });
      },
      [this, &where, st](const float* dy, float* db, int n, int channels, int64_t positions) {
        if (runs(MemKernel::kBiasGrad, double(n) * channels * double(positions)))
          launch("kernels::cuda::biasGrad", where,
                 [&] { kernels::cuda::biasGrad(dy, db, n, channels, positions, st); });
      },
      [this, &where, st](float* scores, int64_t rows, int t, bool causal, float scale) {
        if (runs(MemKernel::kAttnSoftmaxFwd, double(rows) * t))
          launch("kernels::cuda::attnSoftmaxForward", where, [&] {
            kernels::cuda::attnSoftmaxForward(scores, scores, rows, t, causal, scale, st);
          });
      },
      [this, &where, st](const float* p, float* dp, int64_t rows, int t, float scale) {
        if (runs(MemKernel::kAttnSoftmaxBwd, double(rows) * t))
          launch("kernels::cuda::attnSoftmaxBackward", where,
                 [&] { kernels::cuda::attnSoftmaxBackward(p, dp, dp, rows, t, scale, st); });
      },
      [this, &where](int slot, const float* x, int64_t count) {
        if (bf16() && castOperand(slot, x, count, where))
          impl_->attentionCopies[size_t(slot)] = {x, count};
      }};
}

cudaStream_t CudaBackend::attentionStream() {
  if (recordOnly())
    return nullptr;
  activate();
  return impl_->stream.get();
}

void CudaBackend::attentionForward(const AttentionDesc& d, ConstTensorView x, const float* w,
                                   const float* bias, const AttentionSaved& saved, TensorView y) {
  checkAttention(d, x.dims, saved);
  STRATA_ENFORCE(!d.llama());  // Model refuses them first (runsLlamaLayers)
  checkSameDims(x.dims, y.dims);
  const int n = x.dims.n;
  if (n == 0)
    return;
  const std::string where = attentionWhere(d, n);
  auto ops = attentionOps(where, attentionStream());
  attention::forward(d, n, x.data, w, bias, saved.qkv.data, saved.probs, saved.context.data, y.data,
                     ops);
}

void CudaBackend::attentionCoreForward(const AttentionDesc& d, const AttentionSaved& saved) {
  const int n = saved.qkv.dims.n;
  checkAttention(d, Dims{n, d.features, d.positions, 1}, saved);
  STRATA_ENFORCE(!d.llama());  // Model refuses them first (runsLlamaLayers)
  if (n == 0)
    return;
  const std::string where = attentionWhere(d, n);
  auto ops = attentionOps(where, attentionStream());
  attention::core(d, n, saved.qkv.data, saved.probs, saved.context.data, ops);
}

void CudaBackend::attentionBackwardWeights(const AttentionDesc& d, ConstTensorView x,
                                           ConstTensorView dy, const float* w,
                                           const AttentionSaved& saved, float* dw, float* dbias) {
  checkAttention(d, x.dims, saved);
  STRATA_ENFORCE(!d.llama());  // Model refuses them first (runsLlamaLayers)
  checkSameDims(x.dims, dy.dims);
  STRATA_ENFORCE_OP(saved.dqkv.dims.n, ==, x.dims.n);
  STRATA_ENFORCE_OP(saved.dqkv.dims.perExample(), ==, 3 * int64_t{d.inner()} * d.positions);
  const int n = x.dims.n;
  if (n == 0)
    return;
  const attention::Sizes s(d);
  // Record only: no scratch (gpt3-xl's dP is 268 MB an example); the
  // pointers are formed but never used, so they point into the Model's
  // buffers of at least the size (the context, the scores), as CpuBackend's.
  float* dc = saved.context.data;
  float* dprobs = saved.probs;
  cudaStream_t st = attentionStream();
  if (!recordOnly()) {
    dc = static_cast<float*>(impl_->grow(impl_->attnContextGrad,
                                         static_cast<size_t>(n * s.at) * sizeof(float),
                                         "attention's context gradient"));
    dprobs = static_cast<float*>(
        impl_->grow(impl_->attnScoresGrad, static_cast<size_t>(n * s.heads * s.tt) * sizeof(float),
                    "attention's score gradients"));
  }
  const std::string where = attentionWhere(d, n);
  auto ops = attentionOps(where, st);
  attention::backwardWeights(d, n, x.data, dy.data, w, saved.qkv.data, saved.probs,
                             saved.context.data, saved.dqkv.data, dw, dbias, dc, dprobs, ops);
}

void CudaBackend::attentionBackwardData(const AttentionDesc& d, ConstTensorView dqkv,
                                        const float* w, TensorView dx, float beta) {
  STRATA_ENFORCE_OP(dqkv.dims.n, ==, dx.dims.n);
  STRATA_ENFORCE_OP(dx.dims.c, ==, d.features);
  STRATA_ENFORCE_OP(int64_t{dx.dims.h} * dx.dims.w, ==, d.positions);
  STRATA_ENFORCE_OP(dqkv.dims.perExample(), ==, 3 * int64_t{d.inner()} * d.positions);
  const int n = dx.dims.n;
  if (n == 0)
    return;
  const std::string where = attentionWhere(d, n);
  auto ops = attentionOps(where, attentionStream());
  attention::backwardDataCasts(d, n, dqkv.data, w, ops);
  ops.gemm(attention::backwardData(d, n, dqkv.data, w, dx.data, beta));
}

// ---- embedding ------------------------------------------------------------------------------

void CudaBackend::embeddingForward(const EmbeddingDesc& d, ConstTensorView ids, const float* table,
                                   TensorView y) {
  STRATA_ENFORCE_OP(ids.dims.n, ==, y.dims.n);
  STRATA_ENFORCE_OP(ids.dims.c, ==, 1);
  STRATA_ENFORCE_OP(y.dims.c, ==, d.features);
  STRATA_ENFORCE_OP(int64_t{y.dims.h} * y.dims.w, ==, int64_t{ids.dims.h} * ids.dims.w);
  if (!runs(MemKernel::kEmbeddingFwd, double(y.elements())))
    return;
  activate();
  uint64_t* bad = impl_->badTokenRecord();
  launch(
      "kernels::cuda::embeddingForward", [&] { return "embedding " + dimsText(y.dims); },
      [&] {
        kernels::cuda::embeddingForward(embeddingParams(d, ids.dims), ids.data, table, y.data, bad,
                                        impl_->stream.get());
      });
  // Read at the next synchronize(), which reports a bad id.
  impl_->copyBadTokenRecord();
}

void CudaBackend::embeddingBackwardWeights(const EmbeddingDesc& d, ConstTensorView ids,
                                           ConstTensorView dy, float* dtable) {
  STRATA_ENFORCE_OP(ids.dims.n, ==, dy.dims.n);
  STRATA_ENFORCE_OP(dy.dims.c, ==, d.features);
  STRATA_ENFORCE_OP(int64_t{dy.dims.h} * dy.dims.w, ==, int64_t{ids.dims.h} * ids.dims.w);
  if (!runs(MemKernel::kEmbeddingBwd, double(dy.elements())))
    return;
  activate();
  const auto where = [&] { return "embedding " + dimsText(dy.dims); };
  const kernels::EmbeddingParams p = embeddingParams(d, ids.dims);
  uint64_t* bad = impl_->badTokenRecord();
  size_t bytes = 0;
  launch("kernels::cuda::embeddingBackwardScratch", where,
         [&] { bytes = kernels::cuda::embeddingBackwardScratch(p); });
  void* scratch = impl_->grow(impl_->embeddingScratch, bytes, "embedding's sort buffers");
  launch("kernels::cuda::embeddingBackward", where, [&] {
    kernels::cuda::embeddingBackward(p, ids.data, dy.data, dtable, bad, scratch, bytes,
                                     impl_->stream.get());
  });
  impl_->copyBadTokenRecord();
}

}  // namespace strata::nn

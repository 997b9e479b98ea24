// The CUDA backend's transformer layers (cuda_internal.h): multi-head
// attention on cuBLAS with the softmax kernels of kernels/ (transformer.h),
// layer normalisation, GELU and token embedding on kernels/ alone.
//
// Attention, per example e of n (x_e: d x T row-major, as CpuBackend; see
// backend.h's AttentionDesc), each line one cuBLAS call or one launch:
//   QKV_e = Wqkv x_e             one strided-batched GEMM over the examples
//   + bqkv                        one bias launch over the batch
//   S_eh = Q_eh^T K_eh            strided-batched over (examples x heads)
//   P = softmax(S / sqrt(dh))     one launch over every row of every block
//   C_eh = V_eh P_eh^T            strided-batched over (examples x heads)
//   y_e = Wo C_e (+ bo)           one strided-batched GEMM, one bias launch
// The per-(example, head) operands are slices of the per-example QKV
// blocks: heads are dh*T floats apart and examples 3dT, which no single
// stride spans, so each batched call runs over the larger of the two counts
// and the calls loop over the smaller (per example over heads, or per head
// over examples). Backward follows CpuBackend's order of GEMMs (and
// model/cost/src/lowering.cpp's list); the weight gradients dWo and dWqkv sum
// over examples, so they run as one GEMM per example accumulating (beta 1).
//
// Scratch (dC and dP for backward, layer normalisation's statistics, the
// embedding's sort buffers) grows to the largest need and is kept; growing
// waits for the stream, as the cuDNN workspace does.
#include <cublas_v2.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string>

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

// A row-major GEMM C (m x n) = op(A) op(B) + beta C, `batch` times with the
// given strides, as the column-major cuBLAS call that computes it: C^T =
// op(B)^T op(A)^T, so cuBLAS's A is our B and its B our A (see cublasCall).
// lda, ldb, ldc: the row lengths of the arrays as stored.
struct RowMajorGemm {
  GemmOp op = GemmOp::kNN;
  int m = 0, n = 0, k = 0;
  const float* a = nullptr;
  int lda = 0;
  int64_t strideA = 0;
  const float* b = nullptr;
  int ldb = 0;
  int64_t strideB = 0;
  float* c = nullptr;
  int ldc = 0;
  int64_t strideC = 0;
  int batch = 1;
  float beta = 0.0f;

  cublasOperation_t transa() const { return op == GemmOp::kNT ? CUBLAS_OP_T : CUBLAS_OP_N; }
  cublasOperation_t transb() const { return op == GemmOp::kTN ? CUBLAS_OP_T : CUBLAS_OP_N; }
  KernelCall call() const { return cublasCall(transa(), transb(), n, m, k, batch); }

  template <class Where>
  void run(cublasHandle_t handle, const Where& where) const {
    if (batch == 1)
      check(cublasSgemm(handle, transa(), transb(), n, m, k, &kOne, b, ldb, a, lda, &beta, c, ldc),
            "cublasSgemm", where);
    else
      check(cublasSgemmStridedBatched(handle, transa(), transb(), n, m, k, &kOne, b, ldb, strideB,
                                      a, lda, strideA, &beta, c, ldc, strideC, batch),
            "cublasSgemmStridedBatched", where);
  }
};

// The strides of one operand of a per-(example, head) GEMM.
struct HeadStrides {
  int64_t example = 0;
  int64_t head = 0;
};

// A per-(example, head) GEMM: the operands of example 0, head 0, each
// operand's row length, and its strides between examples and heads.
struct HeadGemm {
  GemmOp op;
  int m, n, k;
  const float* a;
  int lda;
  const float* b;
  int ldb;
  float* c;
  int ldc;
};

// Calls gemm(call) for the cuBLAS calls that run `g` once per (example,
// head) of n examples and `heads` heads: batched over the larger count, one
// call per item of the smaller.
template <class Gemm>
void forEachHeadGemm(const HeadGemm& g, int n, int heads, HeadStrides a, HeadStrides b,
                     HeadStrides c, Gemm&& gemm) {
  RowMajorGemm call;
  call.op = g.op;
  call.m = g.m;
  call.n = g.n;
  call.k = g.k;
  call.lda = g.lda;
  call.ldb = g.ldb;
  call.ldc = g.ldc;
  const bool overHeads = heads >= n;  // batched over heads, a call per example
  const int calls = overHeads ? n : heads;
  call.batch = overHeads ? heads : n;
  call.strideA = overHeads ? a.head : a.example;
  call.strideB = overHeads ? b.head : b.example;
  call.strideC = overHeads ? c.head : c.example;
  for (int i = 0; i < calls; ++i) {
    call.a = g.a + i * (overHeads ? a.example : a.head);
    call.b = g.b + i * (overHeads ? b.example : b.head);
    call.c = g.c + i * (overHeads ? c.example : c.head);
    gemm(call);
  }
}

std::string attentionWhere(const AttentionDesc& d, int n) {
  return fmt::format("attention d={} T={} heads {}{}, batch {}", d.features, d.positions, d.heads,
                     d.causal ? " causal" : "", n);
}

void checkAttention(const AttentionDesc& d, const Dims& x, const AttentionSaved& saved) {
  STRATA_ENFORCE(d.heads > 0 && d.features % d.heads == 0);
  STRATA_ENFORCE_OP(x.c, ==, d.features);
  STRATA_ENFORCE_OP(int64_t{x.h} * x.w, ==, d.positions);
  STRATA_ENFORCE_OP(saved.qkv.dims.n, ==, x.n);
  STRATA_ENFORCE_OP(saved.qkv.dims.perExample(), ==, 3 * int64_t{d.features} * d.positions);
  STRATA_ENFORCE_OP(saved.context.dims.n, ==, x.n);
  STRATA_ENFORCE_OP(saved.context.dims.perExample(), ==, int64_t{d.features} * d.positions);
  STRATA_ENFORCE(saved.probs != nullptr);
}

kernels::EmbeddingParams embeddingParams(const EmbeddingDesc& d, const Dims& ids) {
  kernels::EmbeddingParams p;
  p.n = ids.n;
  p.positions = ids.h * ids.w;
  p.vocab = d.vocab;
  p.features = d.features;
  p.positionTable = d.positions;
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

void CudaBackend::attentionForward(const AttentionDesc& d, ConstTensorView x, const float* w,
                                   const float* bias, const AttentionSaved& saved, TensorView y) {
  checkAttention(d, x.dims, saved);
  checkSameDims(x.dims, y.dims);
  const int n = x.dims.n;
  if (n == 0)
    return;
  if (!recordOnly())
    activate();
  const std::string where = attentionWhere(d, n);
  const auto gemm = [&](const RowMajorGemm& call) {
    if (runs(call.call()))
      call.run(impl_->cublas.get(), where);
  };
  const int f = d.features, t = d.positions, heads = d.heads, dh = d.headFeatures();
  const int64_t ft = int64_t{f} * t, tt = int64_t{t} * t, head = int64_t{dh} * t;
  const float* wqkv = w;
  const float* wo = w + 3 * int64_t{f} * f;
  float* qkv = saved.qkv.data;
  float* probs = saved.probs;
  cudaStream_t st = recordOnly() ? nullptr : impl_->stream.get();

  // QKV_e (3f x t) = Wqkv (3f x f) x_e (f x t).
  RowMajorGemm proj;
  proj.op = GemmOp::kNN;
  proj.m = 3 * f;
  proj.n = t;
  proj.k = f;
  proj.a = wqkv;
  proj.lda = f;
  proj.b = x.data;
  proj.ldb = t;
  proj.strideB = ft;
  proj.c = qkv;
  proj.ldc = t;
  proj.strideC = 3 * ft;
  proj.batch = n;
  gemm(proj);
  if (bias && runs(MemKernel::kBias, 3.0 * double(ft) * n))
    launch("kernels::cuda::biasAdd", where,
           [&] { kernels::cuda::biasAdd(qkv, bias, n, 3 * f, t, st); });

  // S_eh (t x t) = Q_eh^T K_eh, Q_eh and K_eh dh x t.
  forEachHeadGemm({GemmOp::kTN, t, t, dh, qkv, t, qkv + ft, t, probs, t}, n, heads, {3 * ft, head},
                  {3 * ft, head}, {heads * tt, tt}, gemm);
  const float scale = 1.0f / std::sqrt(static_cast<float>(dh));
  const int64_t rows = int64_t{n} * heads * t;
  if (runs(MemKernel::kAttnSoftmaxFwd, double(rows) * t))
    launch("kernels::cuda::attnSoftmaxForward", where,
           [&] { kernels::cuda::attnSoftmaxForward(probs, probs, rows, t, d.causal, scale, st); });
  // C_eh (dh x t) = V_eh P_eh^T.
  forEachHeadGemm({GemmOp::kNT, dh, t, t, qkv + 2 * ft, t, probs, t, saved.context.data, t}, n,
                  heads, {3 * ft, head}, {heads * tt, tt}, {ft, head}, gemm);

  // y_e (f x t) = Wo C_e.
  RowMajorGemm out = proj;
  out.m = f;
  out.a = wo;
  out.b = saved.context.data;
  out.strideB = ft;
  out.c = y.data;
  out.strideC = ft;
  gemm(out);
  if (bias && runs(MemKernel::kBias, double(ft) * n))
    launch("kernels::cuda::biasAdd", where,
           [&] { kernels::cuda::biasAdd(y.data, bias + 3 * int64_t{f}, n, f, t, st); });
}

void CudaBackend::attentionBackwardWeights(const AttentionDesc& d, ConstTensorView x,
                                           ConstTensorView dy, const float* w,
                                           const AttentionSaved& saved, float* dw, float* dbias) {
  checkAttention(d, x.dims, saved);
  checkSameDims(x.dims, dy.dims);
  STRATA_ENFORCE_OP(saved.dqkv.dims.n, ==, x.dims.n);
  STRATA_ENFORCE_OP(saved.dqkv.dims.perExample(), ==, 3 * x.dims.perExample());
  const int n = x.dims.n;
  if (n == 0)
    return;
  const std::string where = attentionWhere(d, n);
  const auto gemm = [&](const RowMajorGemm& call) {
    if (runs(call.call()))
      call.run(impl_->cublas.get(), where);
  };
  const int f = d.features, t = d.positions, heads = d.heads, dh = d.headFeatures();
  const int64_t ft = int64_t{f} * t, tt = int64_t{t} * t, head = int64_t{dh} * t;
  const float* wo = w + 3 * int64_t{f} * f;
  float* dwqkv = dw;
  float* dwo = dw + 3 * int64_t{f} * f;
  const float* qkv = saved.qkv.data;
  float* dqkv = saved.dqkv.data;
  // Record only: no scratch (gpt3-xl's dP is 268 MB an example); the
  // pointers are formed but never used, so they point into the Model's
  // buffers of at least the size (the context, the scores), as CpuBackend's.
  float* dc = saved.context.data;
  float* dprobs = saved.probs;
  cudaStream_t st = nullptr;
  if (!recordOnly()) {
    activate();
    st = impl_->stream.get();
    dc = static_cast<float*>(impl_->grow(impl_->attnContextGrad,
                                         static_cast<size_t>(n * ft) * sizeof(float),
                                         "attention's context gradient"));
    dprobs = static_cast<float*>(impl_->grow(impl_->attnScoresGrad,
                                             static_cast<size_t>(n * heads * tt) * sizeof(float),
                                             "attention's score gradients"));
  }

  // dWo (f x f) += dy_e (f x t) C_e^T, per example.
  for (int e = 0; e < n; ++e) {
    RowMajorGemm g;
    g.op = GemmOp::kNT;
    g.m = f;
    g.n = f;
    g.k = t;
    g.a = dy.data + e * ft;
    g.lda = t;
    g.b = saved.context.data + e * ft;
    g.ldb = t;
    g.c = dwo;
    g.ldc = f;
    g.beta = 1.0f;
    gemm(g);
  }
  if (dbias && runs(MemKernel::kBiasGrad, double(ft) * n))
    launch("kernels::cuda::biasGrad", where,
           [&] { kernels::cuda::biasGrad(dy.data, dbias + 3 * int64_t{f}, n, f, t, st); });
  // dC_e (f x t) = Wo^T dy_e, over the examples at once.
  RowMajorGemm dcGemm;
  dcGemm.op = GemmOp::kTN;
  dcGemm.m = f;
  dcGemm.n = t;
  dcGemm.k = f;
  dcGemm.a = wo;
  dcGemm.lda = f;
  dcGemm.b = dy.data;
  dcGemm.ldb = t;
  dcGemm.strideB = ft;
  dcGemm.c = dc;
  dcGemm.ldc = t;
  dcGemm.strideC = ft;
  dcGemm.batch = n;
  gemm(dcGemm);
  // Per head: dP (t x t) = dC_h^T V_h; dV_h (dh x t) = dC_h P.
  forEachHeadGemm({GemmOp::kTN, t, t, dh, dc, t, qkv + 2 * ft, t, dprobs, t}, n, heads, {ft, head},
                  {3 * ft, head}, {heads * tt, tt}, gemm);
  forEachHeadGemm({GemmOp::kNN, dh, t, t, dc, t, saved.probs, t, dqkv + 2 * ft, t}, n, heads,
                  {ft, head}, {heads * tt, tt}, {3 * ft, head}, gemm);
  // dS = softmax'(dP), in place.
  const float scale = 1.0f / std::sqrt(static_cast<float>(dh));
  const int64_t rows = int64_t{n} * heads * t;
  if (runs(MemKernel::kAttnSoftmaxBwd, double(rows) * t))
    launch("kernels::cuda::attnSoftmaxBackward", where, [&] {
      kernels::cuda::attnSoftmaxBackward(saved.probs, dprobs, dprobs, rows, t, scale, st);
    });
  // dQ_h = K_h dS^T, dK_h = Q_h dS (dh x t).
  forEachHeadGemm({GemmOp::kNT, dh, t, t, qkv + ft, t, dprobs, t, dqkv, t}, n, heads,
                  {3 * ft, head}, {heads * tt, tt}, {3 * ft, head}, gemm);
  forEachHeadGemm({GemmOp::kNN, dh, t, t, qkv, t, dprobs, t, dqkv + ft, t}, n, heads,
                  {3 * ft, head}, {heads * tt, tt}, {3 * ft, head}, gemm);
  // dWqkv (3f x f) += dQKV_e (3f x t) x_e^T, per example.
  for (int e = 0; e < n; ++e) {
    RowMajorGemm g;
    g.op = GemmOp::kNT;
    g.m = 3 * f;
    g.n = f;
    g.k = t;
    g.a = dqkv + e * 3 * ft;
    g.lda = t;
    g.b = x.data + e * ft;
    g.ldb = t;
    g.c = dwqkv;
    g.ldc = f;
    g.beta = 1.0f;
    gemm(g);
  }
  if (dbias && runs(MemKernel::kBiasGrad, 3.0 * double(ft) * n))
    launch("kernels::cuda::biasGrad", where,
           [&] { kernels::cuda::biasGrad(dqkv, dbias, n, 3 * f, t, st); });
}

// cuBLAS applies beta (and does not read dx when it is 0): no zero fill.
void CudaBackend::attentionBackwardData(const AttentionDesc& d, ConstTensorView dqkv,
                                        const float* w, TensorView dx, float beta) {
  STRATA_ENFORCE_OP(dqkv.dims.n, ==, dx.dims.n);
  STRATA_ENFORCE_OP(dx.dims.c, ==, d.features);
  STRATA_ENFORCE_OP(int64_t{dx.dims.h} * dx.dims.w, ==, d.positions);
  STRATA_ENFORCE_OP(dqkv.dims.perExample(), ==, 3 * dx.dims.perExample());
  const int n = dx.dims.n;
  if (n == 0)
    return;
  const int f = d.features, t = d.positions;
  const int64_t ft = int64_t{f} * t;
  // dx_e (f x t) = Wqkv^T (f x 3f) dQKV_e (3f x t).
  RowMajorGemm g;
  g.op = GemmOp::kTN;
  g.m = f;
  g.n = t;
  g.k = 3 * f;
  g.a = w;
  g.lda = f;
  g.b = dqkv.data;
  g.ldb = t;
  g.strideB = 3 * ft;
  g.c = dx.data;
  g.ldc = t;
  g.strideC = ft;
  g.batch = n;
  g.beta = beta;
  if (runs(g.call())) {
    activate();
    g.run(impl_->cublas.get(), [&] { return attentionWhere(d, n); });
  }
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

// Inside the CUDA backend (cuda_transformer.cpp): the calls of one attention
// layer on a device whose GEMM runs over a batch of equally strided operands
// (cuBLAS's strided-batched SGEMM), written without CUDA so that a test runs
// the same plan on the CPU (a column-major GEMM emulating cuBLAS's, the
// kernels' twins) against CpuBackend (tests/executor/nn/attention_plan_test.cpp).
//
// Per example e of n (x_e: d x T row-major, backend.h's AttentionDesc), each
// line one GEMM call or one kernel:
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
// over examples). Backward follows CpuBackend's GEMMs (and
// model/cost/src/lowering.cpp's list); the weight gradients dWo and dWqkv sum
// over examples, so they run as one GEMM per example accumulating (beta 1).
//
// Mixed precision (element bf16): before the GEMMs that read an fp32 array,
// the plan casts it (ops.cast) into one of three bf16 scratch slots, and the
// GEMMs then read the bf16 copy (copyHolding finds it from the fp32
// pointer); results and accumulation stay fp32, as the softmax does. A slot
// is reused once the GEMMs reading its previous copy are enqueued (one
// stream orders them). The scores' copies (P, dS: heads x T x T an example,
// the largest) all go to slot 2, so that only one slot grows to their size.
// model/cost/src/lowering.cpp lists the same casts.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <functional>

#include "strata/exec/nn/backend.h"
#include "strata/exec/nn/kernel_recorder.h"
#include "strata/model/error.h"

namespace strata::nn::attention {

// A row-major GEMM C (m x n) = op(A) op(B) + beta C, `batch` times with the
// given strides between batch items; lda, ldb, ldc are the row lengths of
// the arrays as stored.
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

  // What the recorder hears (kernel_recorder.h): the GEMM, `batch` times.
  KernelCall call() const { return gemmCall(op, m, n, k, batch); }
};

// The column-major call (cuBLAS's arguments) computing a RowMajorGemm: read
// column-major, the row-major C is C^T = op(B)^T op(A)^T, so the column-major
// A is our B and its B our A, m and n swap, and an operand is transposed
// exactly when the row-major op transposes it (cuda_internal.h's cublasCall
// is the inverse of this mapping).
struct ColumnMajorGemm {
  bool transA = false, transB = false;
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
};

inline ColumnMajorGemm columnMajor(const RowMajorGemm& g) {
  ColumnMajorGemm c;
  c.transA = g.op == GemmOp::kNT;
  c.transB = g.op == GemmOp::kTN;
  c.m = g.n;
  c.n = g.m;
  c.k = g.k;
  c.a = g.b;
  c.lda = g.ldb;
  c.strideA = g.strideB;
  c.b = g.a;
  c.ldb = g.lda;
  c.strideB = g.strideA;
  c.c = g.c;
  c.ldc = g.ldc;
  c.strideC = g.strideC;
  c.batch = g.batch;
  c.beta = g.beta;
  return c;
}

// The bf16 scratch slots a plan casts into, and what each holds a copy of:
// the fp32 array [from, from + count).
constexpr int kCastSlots = 3;
struct Copy {
  const float* from = nullptr;
  int64_t count = 0;
};
using Copies = std::array<Copy, kCastSlots>;

// The slot whose copy holds the element `p` points at: exactly one must.
inline int copyHolding(const Copies& copies, const float* p) {
  int found = -1;
  for (int i = 0; i < kCastSlots; ++i) {
    const Copy& c = copies[size_t(i)];
    if (c.from && !std::less<const float*>{}(p, c.from) &&
        std::less<const float*>{}(p, c.from + c.count)) {
      STRATA_ENFORCE(found < 0);  // two copies hold one operand
      found = i;
    }
  }
  STRATA_ENFORCE(found >= 0);  // the operand was not cast
  return found;
}

// What a plan calls; each member a callable:
//   gemm(const RowMajorGemm&)
//   bias(float* y, const float* bias, int n, int channels, int64_t positions)
//   biasGrad(const float* dy, float* dbias, int n, int channels, int64_t positions)
//   softmaxForward(float* scores, int64_t rows, int t, bool causal, float scale)  (in place)
//   softmaxBackward(const float* p, float* dp, int64_t rows, int t, float scale)  (in place)
//   cast(int slot, const float* x, int64_t count)  bf16 only: x's copy into the slot
//                                                  (a no-op for fp32)
// The backend's versions report each call to the recorder and skip the work
// when it only records.
template <class Gemm, class Bias, class BiasGrad, class SoftmaxForward, class SoftmaxBackward,
          class Cast>
struct Ops {
  Gemm gemm;
  Bias bias;
  BiasGrad biasGrad;
  SoftmaxForward softmaxForward;
  SoftmaxBackward softmaxBackward;
  Cast cast;
};

// A per-(example, head) GEMM: the operands of example 0, head 0, each
// operand's row length, and its strides between examples and between heads.
struct HeadStrides {
  int64_t example = 0;
  int64_t head = 0;
};
struct HeadGemm {
  GemmOp op;
  int m, n, k;
  const float* a;
  int lda;
  HeadStrides sa;
  const float* b;
  int ldb;
  HeadStrides sb;
  float* c;
  int ldc;
  HeadStrides sc;
};

// Calls gemm(call) for the calls that run `g` once per (example, head) of n
// examples and `heads` heads: batched over the larger count, one call per
// item of the smaller.
template <class Gemm>
void forEachHead(const HeadGemm& g, int n, int heads, Gemm&& gemm) {
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
  call.strideA = overHeads ? g.sa.head : g.sa.example;
  call.strideB = overHeads ? g.sb.head : g.sb.example;
  call.strideC = overHeads ? g.sc.head : g.sc.example;
  for (int i = 0; i < calls; ++i) {
    call.a = g.a + i * (overHeads ? g.sa.example : g.sa.head);
    call.b = g.b + i * (overHeads ? g.sb.example : g.sb.head);
    call.c = g.c + i * (overHeads ? g.sc.example : g.sc.head);
    gemm(call);
  }
}

// The sizes every plan uses: f the features of x and y, a = heads x dh the
// inner width (f, or a tensor-parallel worker's share of the heads:
// AttentionDesc::innerFeatures); Q, K and V a x T each, C a x T, Wqkv
// 3a x f, Wo f x a.
struct Sizes {
  int f, a, t, heads, dh;
  int64_t ft, at, tt, head;
  explicit Sizes(const AttentionDesc& d)
      : f(d.features),
        a(d.inner()),
        t(d.positions),
        heads(d.heads),
        dh(d.headFeatures()),
        ft(int64_t{d.features} * d.positions),
        at(int64_t{d.inner()} * d.positions),
        tt(int64_t{d.positions} * d.positions),
        head(int64_t{d.headFeatures()} * d.positions) {}
  float scale() const { return 1.0f / std::sqrt(static_cast<float>(dh)); }
};

// The core over n examples from qkv (forward's, after its bias): the score
// GEMMs, their softmax into probs and the context GEMMs into context;
// forward runs it, and so does selective recomputation (backend.h's
// attentionCoreForward) on the saved qkv, casting it again first.
template <class O>
void core(const AttentionDesc& d, int n, const float* qkv, float* probs, float* context, O& ops) {
  const Sizes s(d);
  const int t = s.t;
  const int64_t scores = int64_t{n} * s.heads * s.tt;
  ops.cast(0, qkv, 3 * n * s.at);
  // S_eh (t x t) = Q_eh^T K_eh, Q_eh and K_eh dh x t.
  const HeadStrides inQkv{3 * s.at, s.head}, inScores{s.heads * s.tt, s.tt};
  forEachHead({GemmOp::kTN, t, t, s.dh, qkv, t, inQkv, qkv + s.at, t, inQkv, probs, t, inScores}, n,
              s.heads, ops.gemm);
  ops.softmaxForward(probs, int64_t{n} * s.heads * t, t, d.causal, s.scale());
  ops.cast(2, probs, scores);
  // C_eh (dh x t) = V_eh P_eh^T.
  forEachHead({GemmOp::kNT, s.dh, t, t, qkv + 2 * s.at, t, inQkv, probs, t, inScores, context, t,
               HeadStrides{s.at, s.head}},
              n, s.heads, ops.gemm);
}

// Forward over n examples: fills qkv, probs and context (AttentionSaved's
// layouts) and y. bias may be null; bo is added only with d.outputBias.
template <class O>
void forward(const AttentionDesc& d, int n, const float* x, const float* w, const float* bias,
             float* qkv, float* probs, float* context, float* y, O& ops) {
  const Sizes s(d);
  const int f = s.f, a = s.a, t = s.t;
  ops.cast(0, x, n * s.ft);
  ops.cast(1, w, 4 * int64_t{a} * f);  // Wqkv and Wo
  // QKV_e (3a x t) = Wqkv (3a x f) x_e (f x t), weights batch stride 0.
  RowMajorGemm proj;
  proj.op = GemmOp::kNN;
  proj.m = 3 * a;
  proj.n = t;
  proj.k = f;
  proj.a = w;
  proj.lda = f;
  proj.b = x;
  proj.ldb = t;
  proj.strideB = s.ft;
  proj.c = qkv;
  proj.ldc = t;
  proj.strideC = 3 * s.at;
  proj.batch = n;
  ops.gemm(proj);
  if (bias)
    ops.bias(qkv, bias, n, 3 * a, t);
  core(d, n, qkv, probs, context, ops);
  ops.cast(0, context, n * s.at);
  // y_e (f x t) = Wo (f x a) C_e (a x t).
  RowMajorGemm out = proj;
  out.m = f;
  out.k = a;
  out.a = w + 3 * int64_t{a} * f;
  out.lda = a;
  out.b = context;
  out.strideB = s.at;
  out.c = y;
  out.strideC = s.ft;
  ops.gemm(out);
  if (bias && d.outputBias && d.hasOutputBias)
    ops.bias(y, bias + 3 * int64_t{a}, n, f, t);
}

// Backward weights over n examples (backend.h's attentionBackwardWeights):
// dw and dbias (may be null) accumulate; writes dqkv. dc (n x a x t) and
// dprobs (n x heads x t x t) are scratch.
template <class O>
void backwardWeights(const AttentionDesc& d, int n, const float* x, const float* dy, const float* w,
                     const float* qkv, const float* probs, const float* context, float* dqkv,
                     float* dw, float* dbias, float* dc, float* dprobs, O& ops) {
  const Sizes s(d);
  const int f = s.f, a = s.a, t = s.t;
  const float* wo = w + 3 * int64_t{a} * f;
  float* dwo = dw + 3 * int64_t{a} * f;
  const int64_t scores = int64_t{n} * s.heads * s.tt;
  ops.cast(0, dy, n * s.ft);
  ops.cast(1, context, n * s.at);
  // dWo (f x a) += dy_e (f x t) C_e^T, per example.
  for (int e = 0; e < n; ++e) {
    RowMajorGemm g;
    g.op = GemmOp::kNT;
    g.m = f;
    g.n = a;
    g.k = t;
    g.a = dy + e * s.ft;
    g.lda = t;
    g.b = context + e * s.at;
    g.ldb = t;
    g.c = dwo;
    g.ldc = a;
    g.beta = 1.0f;
    ops.gemm(g);
  }
  if (dbias && d.hasOutputBias)
    ops.biasGrad(dy, dbias + 3 * int64_t{a}, n, f, t);
  ops.cast(1, wo, int64_t{f} * a);
  // dC_e (a x t) = Wo^T dy_e, over the examples at once.
  RowMajorGemm dcGemm;
  dcGemm.op = GemmOp::kTN;
  dcGemm.m = a;
  dcGemm.n = t;
  dcGemm.k = f;
  dcGemm.a = wo;
  dcGemm.lda = a;
  dcGemm.b = dy;
  dcGemm.ldb = t;
  dcGemm.strideB = s.ft;
  dcGemm.c = dc;
  dcGemm.ldc = t;
  dcGemm.strideC = s.at;
  dcGemm.batch = n;
  ops.gemm(dcGemm);
  ops.cast(1, dc, n * s.at);
  ops.cast(0, qkv, 3 * n * s.at);
  const HeadStrides inQkv{3 * s.at, s.head}, inScores{s.heads * s.tt, s.tt},
      inContext{s.at, s.head};
  // Per head: dP (t x t) = dC_h^T V_h; dV_h (dh x t) = dC_h P.
  forEachHead(
      {GemmOp::kTN, t, t, s.dh, dc, t, inContext, qkv + 2 * s.at, t, inQkv, dprobs, t, inScores}, n,
      s.heads, ops.gemm);
  ops.cast(2, probs, scores);
  forEachHead(
      {GemmOp::kNN, s.dh, t, t, dc, t, inContext, probs, t, inScores, dqkv + 2 * s.at, t, inQkv}, n,
      s.heads, ops.gemm);
  // dS = softmax'(dP), in place.
  ops.softmaxBackward(probs, dprobs, int64_t{n} * s.heads * t, t, s.scale());
  ops.cast(2, dprobs, scores);
  // dQ_h = K_h dS^T, dK_h = Q_h dS (dh x t).
  forEachHead({GemmOp::kNT, s.dh, t, t, qkv + s.at, t, inQkv, dprobs, t, inScores, dqkv, t, inQkv},
              n, s.heads, ops.gemm);
  forEachHead({GemmOp::kNN, s.dh, t, t, qkv, t, inQkv, dprobs, t, inScores, dqkv + s.at, t, inQkv},
              n, s.heads, ops.gemm);
  ops.cast(0, dqkv, 3 * n * s.at);
  ops.cast(1, x, n * s.ft);
  // dWqkv (3a x f) += dQKV_e (3a x t) x_e^T, per example.
  for (int e = 0; e < n; ++e) {
    RowMajorGemm g;
    g.op = GemmOp::kNT;
    g.m = 3 * a;
    g.n = f;
    g.k = t;
    g.a = dqkv + e * 3 * s.at;
    g.lda = t;
    g.b = x + e * s.ft;
    g.ldb = t;
    g.c = dw;
    g.ldc = f;
    g.beta = 1.0f;
    ops.gemm(g);
  }
  if (dbias)
    ops.biasGrad(dqkv, dbias, n, 3 * a, t);
}

// dx_e (f x t) = Wqkv^T (f x 3a) dQKV_e (3a x t) + beta dx_e, one GEMM
// over the examples (the GEMM applies beta: no zero fill). With bf16 the
// caller casts dqkv (3 n a t) into slot 0 and Wqkv (3 a f) into slot 1 first
// (backwardDataCasts).
inline RowMajorGemm backwardData(const AttentionDesc& d, int n, const float* dqkv, const float* w,
                                 float* dx, float beta) {
  const Sizes s(d);
  RowMajorGemm g;
  g.op = GemmOp::kTN;
  g.m = s.f;
  g.n = s.t;
  g.k = 3 * s.a;
  g.a = w;
  g.lda = s.f;
  g.b = dqkv;
  g.ldb = s.t;
  g.strideB = 3 * s.at;
  g.c = dx;
  g.ldc = s.t;
  g.strideC = s.ft;
  g.batch = n;
  g.beta = beta;
  return g;
}

template <class O>
void backwardDataCasts(const AttentionDesc& d, int n, const float* dqkv, const float* w, O& ops) {
  const Sizes s(d);
  ops.cast(0, dqkv, 3 * n * s.at);
  ops.cast(1, w, 3 * int64_t{s.a} * s.f);
}

}  // namespace strata::nn::attention

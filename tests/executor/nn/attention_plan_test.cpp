// The CUDA backend's attention plan (executor/nn/src/attention_plan.h) run on
// the CPU: each GEMM through the same row-major-to-column-major mapping the
// backend hands cuBLAS, into a column-major strided-batched SGEMM that
// checks its arguments as cuBLAS does (leading dimensions) and computes as
// cuBLAS's reference does; the bias and softmax kernels' CPU twins. Its
// results must equal CpuBackend's attention, so the GEMM descriptions
// (operands, row lengths, strides, the loops over examples or heads) are
// tested here, on machines without a GPU.
//
// The bf16 plan (element bf16) runs here too: each cast copies its fp32
// array into a slot's host vector, and each GEMM reads its operands from the
// slot that copyHolding names. With exact copies the results must equal the
// fp32 plan's (so every cast comes after its array is written and before it
// is read, and every operand is cast); with copies rounded through bf16
// (what the GPU's GEMMs read) they must stay within the bf16 tolerance that
// cuda_backend_test's "bf16 attention" case states.
#include "attention_plan.h"

#include <algorithm>
#include <array>
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <vector>

#include "helpers.h"
#include "strata/exec/nn/cpu_backend.h"
#include "strata/kernels/kernels.h"
#include "strata/kernels/precision.h"
#include "strata/kernels/transformer.h"

namespace strata::nn {
namespace {

// C = alpha op(A) op(B) + beta C with alpha 1, column-major, `batch` times
// (cublasSgemmStridedBatched's semantics; beta 0 does not read C). Sums in
// double. Every call is counted.
struct ColumnMajorDevice {
  int calls = 0;

  void operator()(const attention::ColumnMajorGemm& g) {
    ++calls;
    // cuBLAS's argument checks (CUBLAS_STATUS_INVALID_VALUE otherwise).
    REQUIRE(g.m >= 0);
    REQUIRE(g.n >= 0);
    REQUIRE(g.k >= 0);
    REQUIRE(g.lda >= std::max(1, g.transA ? g.k : g.m));
    REQUIRE(g.ldb >= std::max(1, g.transB ? g.n : g.k));
    REQUIRE(g.ldc >= std::max(1, g.m));
    REQUIRE(g.batch >= 1);
    for (int b = 0; b < g.batch; ++b) {
      const float* a = g.a + b * g.strideA;
      const float* bm = g.b + b * g.strideB;
      float* c = g.c + b * g.strideC;
      for (int j = 0; j < g.n; ++j)
        for (int i = 0; i < g.m; ++i) {
          double sum = 0;
          for (int l = 0; l < g.k; ++l) {
            const float av = g.transA ? a[l + int64_t{i} * g.lda] : a[i + int64_t{l} * g.lda];
            const float bv = g.transB ? bm[j + int64_t{l} * g.ldb] : bm[l + int64_t{j} * g.ldb];
            sum += double(av) * bv;
          }
          float& cv = c[i + int64_t{j} * g.ldc];
          cv = g.beta == 0.0f ? static_cast<float>(sum) : static_cast<float>(sum + g.beta * cv);
        }
    }
  }
};

struct PlanCase {
  int n, features, positions, heads;
  bool causal, bias;
  // A tensor-parallel worker's share: `heads` of dh = inner / heads each
  // (0: features), bo added or not.
  int inner = 0;
  bool outputBias = true;
};

// fp32: no casts; copy: casts into exact copies; bf16: into rounded ones.
enum class Casts { kNone, kCopy, kBf16 };

// Every element rounded through bf16 (as kernels::twin::castToBf16 then back).
void roundThroughBf16(std::vector<float>& v) {
  for (float& e : v)
    e = kernels::element::roundThroughBf16(e);
}

// The bf16 tolerance of attention's results against CpuBackend on the
// bf16-rounded inputs (x, w, dy), relative to the largest |value|: the QKV
// projection reads the same rounded operands as the CPU (fp32 rounding
// only), but every later GEMM reads an intermediate (QKV, P, C, dC, dS,
// dQKV) rounded once more (at most 2^-9 of each element), and these errors
// pass through up to four GEMMs and the softmax: a few times 2^-9, so
// 3e-2; a wrong operand or a stale copy is off by the order of 1.
constexpr double kBf16Tolerance = 3e-2;

void checkPlan(const PlanCase& c, Casts casts) {
  AttentionDesc d;
  d.features = c.features;
  d.positions = c.positions;
  d.heads = c.heads;
  d.causal = c.causal;
  d.innerFeatures = c.inner;
  d.outputBias = c.outputBias;
  const int f = c.features, a = d.inner(), t = c.positions, n = c.n;
  const int64_t ft = int64_t{f} * t, at = int64_t{a} * t, tt = int64_t{t} * t;
  const Dims xd{n, f, t, 1}, qkvd{n, 3 * a, t, 1}, cd{n, a, t, 1};
  std::vector<float> x(size_t(n * ft)), w(size_t(4) * a * f), bias(size_t(3 * a + f));
  std::vector<float> dy(x.size());
  test::fillUniform(x, 1);
  test::fillUniform(w, 2, -0.5f, 0.5f);
  test::fillUniform(bias, 3);
  test::fillUniform(dy, 4);
  if (casts == Casts::kBf16) {
    // The inputs the GPU's first GEMMs read: CpuBackend's reference, too.
    roundThroughBf16(x);
    roundThroughBf16(w);
    roundThroughBf16(dy);
  }

  // CpuBackend.
  CpuBackend cpu;
  std::vector<float> qkv(size_t(3 * n * at)), dqkv(qkv.size()), context(size_t(n * at));
  std::vector<float> y(x.size()), probs(size_t(n * c.heads * tt));
  std::vector<float> dw(w.size(), 0.25f), dbias(bias.size(), 0.5f), dx(x.size());
  const AttentionSaved saved{
      {qkv.data(), qkvd}, probs.data(), {context.data(), cd}, {dqkv.data(), qkvd}};
  const float* b = c.bias ? bias.data() : nullptr;
  cpu.attentionForward(d, {x.data(), xd}, w.data(), b, saved, {y.data(), xd});
  cpu.attentionBackwardWeights(d, {x.data(), xd}, {dy.data(), xd}, w.data(), saved, dw.data(),
                               c.bias ? dbias.data() : nullptr);
  cpu.attentionBackwardData(d, {dqkv.data(), qkvd}, w.data(), {dx.data(), xd}, 0.0f);

  // The plan, as the CUDA backend runs it.
  ColumnMajorDevice device;
  attention::Copies copies{};
  std::array<std::vector<float>, attention::kCastSlots> slots;
  int castCalls = 0;
  const auto gemm = [&](const attention::RowMajorGemm& g) {
    attention::ColumnMajorGemm cm = attention::columnMajor(g);
    if (casts != Casts::kNone) {
      const auto copyOf = [&](const float* p) {
        const int slot = attention::copyHolding(copies, p);
        return slots[size_t(slot)].data() + (p - copies[size_t(slot)].from);
      };
      cm.a = copyOf(cm.a);
      cm.b = copyOf(cm.b);
    }
    device(cm);
  };
  auto ops =
      attention::Ops{gemm,
                     [](float* out, const float* bs, int en, int channels, int64_t positions) {
                       kernels::twin::biasAdd(out, bs, en, channels, positions);
                     },
                     [](const float* g, float* db, int en, int channels, int64_t positions) {
                       kernels::twin::biasGrad(g, db, en, channels, positions);
                     },
                     [](float* scores, int64_t rows, int tt2, bool causal, float scale) {
                       kernels::twin::attnSoftmaxForward(scores, scores, rows, tt2, causal, scale);
                     },
                     [](const float* p, float* dp, int64_t rows, int tt2, float scale) {
                       kernels::twin::attnSoftmaxBackward(p, dp, dp, rows, tt2, scale);
                     },
                     [&](int slot, const float* from, int64_t count) {
                       if (casts == Casts::kNone)
                         return;
                       ++castCalls;
                       REQUIRE(slot >= 0);
                       REQUIRE(slot < attention::kCastSlots);
                       std::vector<float>& copy = slots[size_t(slot)];
                       copy.assign(from, from + count);
                       if (casts == Casts::kBf16)
                         roundThroughBf16(copy);
                       copies[size_t(slot)] = {from, count};
                     }};
  std::vector<float> pQkv(qkv.size()), pDqkv(qkv.size()), pContext(context.size()), pY(x.size());
  std::vector<float> pProbs(probs.size()), pDw(w.size(), 0.25f), pDbias(bias.size(), 0.5f);
  std::vector<float> pDx(x.size()), dc(context.size()), dprobs(probs.size());
  attention::forward(d, n, x.data(), w.data(), b, pQkv.data(), pProbs.data(), pContext.data(),
                     pY.data(), ops);
  attention::backwardWeights(d, n, x.data(), dy.data(), w.data(), pQkv.data(), pProbs.data(),
                             pContext.data(), pDqkv.data(), pDw.data(),
                             c.bias ? pDbias.data() : nullptr, dc.data(), dprobs.data(), ops);
  attention::backwardDataCasts(d, n, pDqkv.data(), w.data(), ops);
  ops.gemm(attention::backwardData(d, n, pDqkv.data(), w.data(), pDx.data(), 0.0f));

  const double rel = casts == Casts::kBf16 ? kBf16Tolerance : 1e-5;
  double worst = 0;  // the largest error seen, relative to its array's largest |value|
  const auto close = [&](const std::vector<float>& expected, const std::vector<float>& actual,
                         const char* what) {
    INFO(what);
    REQUIRE(expected.size() == actual.size());
    const double largest = std::max(test::maxAbs(expected), 1e-30);
    const double tolerance = rel * largest;
    for (size_t i = 0; i < expected.size(); ++i) {
      INFO("element " << i << ": cpu " << expected[i] << ", plan " << actual[i]);
      REQUIRE(std::abs(double(expected[i]) - actual[i]) <= tolerance);
      worst = std::max(worst, std::abs(double(expected[i]) - actual[i]) / largest);
    }
  };
  close(qkv, pQkv, "qkv");
  close(probs, pProbs, "probabilities");
  close(context, pContext, "context");
  close(y, pY, "y");
  close(dqkv, pDqkv, "dqkv");
  close(dw, pDw, "dw");
  close(dbias, pDbias, "dbias");
  close(dx, pDx, "dx");
  // One call per GEMM line (two per example for the weight gradients),
  // the per-head ones once per item of the smaller of n and heads.
  const int loops = std::min(n, c.heads);
  CHECK(device.calls == 2 + 2 * loops + 2 * n + 1 + 4 * loops + 1);
  // Five casts forward, nine for the weight gradients, two for dx.
  CHECK(castCalls == (casts == Casts::kNone ? 0 : 5 + 9 + 2));
  // Rounded operands do show (so the bf16 case tests rounding, not a no-op).
  if (casts == Casts::kBf16)
    CHECK(worst > 1e-5);

  // Selective recomputation's core from the saved qkv, after the saved
  // probabilities and context were poisoned: forward's bits again, with two
  // per-head GEMM lines and two casts.
  const auto probsBefore = pProbs, contextBefore = pContext;
  std::fill(pProbs.begin(), pProbs.end(), std::numeric_limits<float>::quiet_NaN());
  std::fill(pContext.begin(), pContext.end(), std::numeric_limits<float>::quiet_NaN());
  const int callsBefore = device.calls, castsBefore = castCalls;
  attention::core(d, n, pQkv.data(), pProbs.data(), pContext.data(), ops);
  CHECK(pProbs == probsBefore);
  CHECK(pContext == contextBefore);
  CHECK(device.calls - callsBefore == 2 * loops);
  CHECK(castCalls - castsBefore == (casts == Casts::kNone ? 0 : 2));
}

TEST_CASE(
    "the CUDA attention plan, on a CPU emulation of cuBLAS, equals CpuBackend's (bf16: within its "
    "tolerance)",
    "[transformer]") {
  // heads >= n: batched over heads, a call per example; else the reverse.
  // Tensor-parallel shares: 2 of 6 heads of dh 2 (a = 4 of d = 12), bo left
  // to another worker; 1 of 4 heads of dh 4 (a = 4 of 16), bo added.
  for (const PlanCase& c :
       {PlanCase{3, 6, 5, 3, true, true}, PlanCase{2, 8, 7, 4, false, true},
        PlanCase{5, 4, 3, 1, true, false}, PlanCase{5, 12, 9, 2, false, true},
        PlanCase{1, 16, 11, 4, true, true}, PlanCase{1, 3, 1, 1, true, true},
        PlanCase{3, 12, 5, 2, true, true, 4, false}, PlanCase{2, 16, 6, 1, false, true, 4, true}}) {
    INFO("n " << c.n << ", d " << c.features << ", T " << c.positions << ", heads " << c.heads
              << (c.causal ? ", causal" : "") << (c.bias ? ", bias" : "") << ", inner " << c.inner
              << (c.outputBias ? "" : ", no bo"));
    for (Casts casts : {Casts::kNone, Casts::kCopy, Casts::kBf16}) {
      INFO((casts == Casts::kNone ? "fp32" : casts == Casts::kCopy ? "exact copies" : "bf16"));
      checkPlan(c, casts);
    }
  }
}

}  // namespace
}  // namespace strata::nn

// The CPU kernels of one ISA (cpu_kernels.cpp): multi-head and grouped-query
// attention (its GEMMs, softmax and rotary positions) and token embedding.
#include <fmt/format.h>

#include <Eigen/Core>
#include <algorithm>
#include <cmath>

#include "cpu_kernels.h"
#include "shape_checks.h"
#include "strata/model/error.h"

namespace strata::nn::STRATA_CPU_ISA {

// ---- attention -----------------------------------------------------------------
//
// One kernel call per line of model/cost/src/lowering.cpp's lowering (kAttention):
// per example the projections, per example and head the score and context
// GEMMs, and one softmax over the scores of the whole batch, so the GEMMs
// before it run over every example first.

void CpuImpl::attentionForward(const AttentionDesc& d, ConstTensorView x, const float* w,
                               const float* bias, const AttentionSaved& saved, TensorView y) {
  checkAttention(d, x.dims, saved);
  checkSameDims(x.dims, y.dims);
  const int f = d.features, a = d.inner(), t = d.positions, dh = d.headFeatures();
  const int kv = d.keyValueFeatures(), rows = d.qkvFeatures();
  const int64_t ft = int64_t{f} * t, at = int64_t{a} * t, qt = int64_t{rows} * t;
  const float* wqkv = w;
  const float* wo = w + int64_t{rows} * f;
  const int turned = d.rotaryFeatures();
  if (d.rotary && !recordOnly())
    rotaryTable(turned, t, d.rotaryBase, rotary_);
  for (int n = 0; n < x.dims.n; ++n) {
    const float* xn = x.data + n * ft;
    float* qkv = saved.qkv.data + n * qt;
    teamGemm(GemmOp::kNN, rows, t, f, wqkv, xn, qkv, false);
    if (bias && runs(MemKernel::kBias, double(qt)))
      biasAdd(qkv, bias, rows, t);
    // Q's heads then K's: d.heads + kvHeads blocks of dh rows from row 0.
    if (d.rotary && runs(MemKernel::kRotary, double(a + kv) * t * turned / dh))
      rotaryKernel(qkv, d.heads + d.keyValueHeads(), dh, turned, t, rotary_.data(), false);
    attentionScores(d, n, saved);
  }
  attentionSoftmax(d, x.dims.n, saved);
  for (int n = 0; n < x.dims.n; ++n) {
    attentionContext(d, n, saved);
    float* yn = y.data + n * ft;
    teamGemm(GemmOp::kNN, f, t, a, wo, saved.context.data + n * at, yn, false);
    if (bias && d.outputBias && d.hasOutputBias && runs(MemKernel::kBias, double(ft)))
      biasAdd(yn, bias + rows, f, t);
  }
}

void CpuImpl::attentionCoreForward(const AttentionDesc& d, const AttentionSaved& saved) {
  const int n = saved.qkv.dims.n;
  checkAttention(d, Dims{n, d.features, d.positions, 1}, saved);
  for (int i = 0; i < n; ++i)
    attentionScores(d, i, saved);
  attentionSoftmax(d, n, saved);
  for (int i = 0; i < n; ++i)
    attentionContext(d, i, saved);
}

void CpuImpl::attentionScores(const AttentionDesc& d, int n, const AttentionSaved& saved) {
  const int a = d.inner(), t = d.positions, dh = d.headFeatures();
  const int group = d.heads / d.keyValueHeads();  // query heads per key/value head
  const int64_t at = int64_t{a} * t, tt = int64_t{t} * t, head = int64_t{dh} * t;
  const float* qkv = saved.qkv.data + n * int64_t{d.qkvFeatures()} * t;
  for (int h = 0; h < d.heads; ++h)
    teamGemm(GemmOp::kTN, t, t, dh, qkv + h * head, qkv + at + (h / group) * head,
             saved.probs + (int64_t{n} * d.heads + h) * tt, false);
}

void CpuImpl::attentionSoftmax(const AttentionDesc& d, int examples, const AttentionSaved& saved) {
  const int t = d.positions;
  const int64_t tt = int64_t{t} * t;
  // Whole (example, head) score blocks of t rows per thread: a row's mask
  // depends on its index mod t.
  const float scale = 1.0f / std::sqrt(static_cast<float>(d.headFeatures()));
  if (runs(MemKernel::kAttnSoftmaxFwd, double(examples) * d.heads * double(tt)))
    parallelRanges(team_, int64_t{examples} * d.heads, std::max<int64_t>(1, kElementGrain / tt),
                   [&](int64_t first, int64_t last) {
                     attnSoftmaxForward(saved.probs + first * tt, saved.probs + first * tt,
                                        (last - first) * t, t, d.causal, scale);
                   });
}

void CpuImpl::attentionContext(const AttentionDesc& d, int n, const AttentionSaved& saved) {
  const int a = d.inner(), t = d.positions, dh = d.headFeatures();
  const int group = d.heads / d.keyValueHeads();
  const int64_t at = int64_t{a} * t, tt = int64_t{t} * t, head = int64_t{dh} * t;
  const int64_t qt = int64_t{d.qkvFeatures()} * t, vAt = at + int64_t{d.keyValueFeatures()} * t;
  const float* qkv = saved.qkv.data + n * qt;
  float* context = saved.context.data + n * at;
  for (int h = 0; h < d.heads; ++h)
    teamGemm(GemmOp::kNT, dh, t, t, qkv + vAt + (h / group) * head,
             saved.probs + (int64_t{n} * d.heads + h) * tt, context + h * head, false);
}

void CpuImpl::attentionBackwardWeights(const AttentionDesc& d, ConstTensorView x,
                                       ConstTensorView dy, const float* w,
                                       const AttentionSaved& saved, float* dw, float* dbias) {
  checkAttention(d, x.dims, saved);
  checkSameDims(x.dims, dy.dims);
  const int f = d.features, a = d.inner(), t = d.positions, dh = d.headFeatures();
  const int kv = d.keyValueFeatures(), rows = d.qkvFeatures();
  const int group = d.heads / d.keyValueHeads();
  STRATA_ENFORCE_OP(saved.dqkv.dims.n, ==, x.dims.n);
  STRATA_ENFORCE_OP(saved.dqkv.dims.perExample(), ==, int64_t{rows} * t);
  const int64_t ft = int64_t{f} * t, at = int64_t{a} * t, tt = int64_t{t} * t;
  const int64_t head = int64_t{dh} * t, qt = int64_t{rows} * t, vAt = at + int64_t{kv} * t;
  const float* wo = w + int64_t{rows} * f;
  float* dwqkv = dw;
  float* dwo = dw + int64_t{rows} * f;
  // Record only: no scratch (the batch's dP is 268 MB an example for
  // gpt3-xl); the pointers below are formed but never used, so they point
  // into buffers of the Model of at least the size (the context, the scores).
  float* dc = saved.context.data;
  float* dprobs = saved.probs;
  if (!recordOnly()) {
    dcontext_.resize(static_cast<size_t>(at));
    dprobs_.resize(static_cast<size_t>(int64_t{x.dims.n} * d.heads * tt));
    dc = dcontext_.data();
    dprobs = dprobs_.data();
    if (d.rotary)
      rotaryTable(d.rotaryFeatures(), t, d.rotaryBase, rotary_);
  }
  // A key/value head's gradients sum over its group's query heads: the
  // group's first head writes them, the others add.
  for (int n = 0; n < x.dims.n; ++n) {
    const float* dyn = dy.data + n * ft;
    const float* qkv = saved.qkv.data + n * qt;
    float* dqkv = saved.dqkv.data + n * qt;
    teamGemm(GemmOp::kNT, f, a, t, dyn, saved.context.data + n * at, dwo, true);
    if (dbias && d.hasOutputBias && runs(MemKernel::kBiasGrad, double(ft)))
      biasGrad(dyn, dbias + rows, f, t);
    teamGemm(GemmOp::kTN, a, t, f, wo, dyn, dc, false);
    for (int h = 0; h < d.heads; ++h) {
      const int64_t ph = (int64_t{n} * d.heads + h) * tt;
      const int64_t g = h / group;
      teamGemm(GemmOp::kTN, t, t, dh, dc + h * head, qkv + vAt + g * head, dprobs + ph, false);
      teamGemm(GemmOp::kNN, dh, t, t, dc + h * head, saved.probs + ph, dqkv + vAt + g * head,
               h % group != 0);
    }
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(dh));
  if (runs(MemKernel::kAttnSoftmaxBwd, double(x.dims.n) * d.heads * double(tt)))
    parallelRanges(team_, int64_t{x.dims.n} * d.heads, std::max<int64_t>(1, kElementGrain / tt),
                   [&](int64_t first, int64_t last) {
                     attnSoftmaxBackward(saved.probs + first * tt, dprobs + first * tt,
                                         dprobs + first * tt, (last - first) * t, t, scale);
                   });
  for (int n = 0; n < x.dims.n; ++n) {
    const float* qkv = saved.qkv.data + n * qt;
    float* dqkv = saved.dqkv.data + n * qt;
    for (int h = 0; h < d.heads; ++h) {
      const float* ds = dprobs + (int64_t{n} * d.heads + h) * tt;
      const int64_t g = h / group;
      teamGemm(GemmOp::kNT, dh, t, t, qkv + at + g * head, ds, dqkv + h * head, false);
      teamGemm(GemmOp::kNN, dh, t, t, qkv + h * head, ds, dqkv + at + g * head, h % group != 0);
    }
    // The gradients of the turned Q and K, turned back: those of the
    // projection's Q and K.
    if (d.rotary && runs(MemKernel::kRotary, double(a + kv) * t * d.rotaryFeatures() / dh))
      rotaryKernel(dqkv, d.heads + d.keyValueHeads(), dh, d.rotaryFeatures(), t, rotary_.data(),
                   true);
    teamGemm(GemmOp::kNT, rows, f, t, dqkv, x.data + n * ft, dwqkv, true);
    if (dbias && runs(MemKernel::kBiasGrad, double(qt)))
      biasGrad(dqkv, dbias, rows, t);
  }
}

void CpuImpl::attentionBackwardData(const AttentionDesc& d, ConstTensorView dqkv, const float* w,
                                    TensorView dx, float beta) {
  STRATA_ENFORCE_OP(dqkv.dims.n, ==, dx.dims.n);
  STRATA_ENFORCE_OP(dx.dims.c, ==, d.features);
  STRATA_ENFORCE_OP(int64_t{dx.dims.h} * dx.dims.w, ==, d.positions);
  const int f = d.features, t = d.positions, rows = d.qkvFeatures();
  STRATA_ENFORCE_OP(dqkv.dims.perExample(), ==, int64_t{rows} * t);
  const int64_t ft = int64_t{f} * t, qt = int64_t{rows} * t;
  scaleForBeta(dx, beta);
  for (int n = 0; n < dx.dims.n; ++n)
    teamGemm(GemmOp::kTN, f, t, rows, w, dqkv.data + n * qt, dx.data + n * ft, true);
}

void CpuImpl::rotaryTable(int r, int t, float base, std::vector<float>& table) {
  const int half = r / 2;
  table.resize(2 * static_cast<size_t>(half) * static_cast<size_t>(t));
  // theta_i = base^(-2i/r) (Su et al. 2021, eq. 15, over the r turned
  // features; r = dh but for partial rotary); the angle p theta_i in
  // double, so that long contexts keep their digits.
  for (int i = 0; i < half; ++i) {
    const double theta = std::pow(double(base), -2.0 * i / r);
    for (int p = 0; p < t; ++p) {
      const double angle = p * theta;
      table[2 * (size_t(i) * size_t(t) + size_t(p))] = static_cast<float>(std::cos(angle));
      table[2 * (size_t(i) * size_t(t) + size_t(p)) + 1] = static_cast<float>(std::sin(angle));
    }
  }
}

void CpuImpl::rotaryKernel(float* x, int64_t blocks, int dh, int r, int t, const float* table,
                           bool inverse) {
  const int half = r / 2;
  const float sign = inverse ? -1.0f : 1.0f;  // R^T turns by minus the angle
  for (int64_t b = 0; b < blocks; ++b) {
    float* block = x + b * dh * int64_t{t};
    for (int i = 0; i < half; ++i) {
      float* lo = block + int64_t{i} * t;
      float* hi = block + int64_t{i + half} * t;
      const float* cs = table + 2 * int64_t{i} * t;
      for (int p = 0; p < t; ++p) {
        const float c = cs[2 * p], s = sign * cs[2 * p + 1];
        const float a = lo[p], h = hi[p];
        lo[p] = a * c - h * s;
        hi[p] = h * c + a * s;
      }
    }
  }
}

void CpuImpl::attnSoftmaxForward(const float* s, float* p, int64_t rows, int t, bool causal,
                                 float scale) {
  for (int64_t r = 0; r < rows; ++r) {
    const int keys = causal ? static_cast<int>(r % t) + 1 : t;
    const auto in = Eigen::Map<const Eigen::ArrayXf>(s + r * t, keys);
    auto out = Eigen::Map<Eigen::ArrayXf>(p + r * t, keys);
    // Eigen's vectorised exp (std::exp is a scalar libm call).
    const float mx = in.maxCoeff() * scale;
    out = (in * scale - mx).exp();
    out *= 1.0f / orderedSum(p + r * t, keys);
    std::fill(p + r * t + keys, p + r * t + t, 0.0f);
  }
}

void CpuImpl::attnSoftmaxBackward(const float* p, const float* dp, float* ds, int64_t rows, int t,
                                  float scale) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* pr = p + r * t;
    const float* g = dp + r * t;
    float* out = ds + r * t;
    float dot = 0;
    for (int j = 0; j < t; ++j)
      dot += g[j] * pr[j];
    for (int j = 0; j < t; ++j)
      out[j] = scale * pr[j] * (g[j] - dot);
  }
}

// ---- embedding -----------------------------------------------------------------

namespace {
int tokenOf(const EmbeddingDesc& d, float id) {
  const auto token = static_cast<int64_t>(id);
  if (!(static_cast<float>(token) == id && token >= 0 && token < d.vocab))
    throw UserError(
        fmt::format("embedding: token id {} is not an integer in [0, {}) (the "
                    "vocabulary)",
                    id, d.vocab));
  return static_cast<int>(token);
}
}  // namespace

void CpuImpl::embeddingForward(const EmbeddingDesc& d, ConstTensorView ids, const float* table,
                               TensorView y) {
  STRATA_ENFORCE_OP(ids.dims.n, ==, y.dims.n);
  STRATA_ENFORCE_OP(ids.dims.c, ==, 1);
  STRATA_ENFORCE_OP(y.dims.c, ==, d.features);
  const int64_t t = int64_t{ids.dims.h} * ids.dims.w;
  STRATA_ENFORCE_OP(int64_t{y.dims.h} * y.dims.w, ==, t);
  const float* pos =
      d.positions && d.addPositions ? table + int64_t{d.rows()} * d.features : nullptr;
  if (!runs(MemKernel::kEmbeddingFwd, double(y.elements())))
    return;
  for (int n = 0; n < ids.dims.n; ++n) {
    float* out = y.data + n * y.dims.perExample();
    for (int64_t p = 0; p < t; ++p) {
      const int token = tokenOf(d, ids.data[n * t + p]);
      // A row this worker does not hold: zero (another worker's adds it).
      const float* row =
          d.holds(token) ? table + int64_t{token - d.firstToken} * d.features : nullptr;
      const float* at = pos ? pos + p * d.features : nullptr;
      for (int c = 0; c < d.features; ++c)
        out[c * t + p] = row && at ? row[c] + at[c] : row ? row[c] : at ? at[c] : 0.0f;
    }
  }
}

void CpuImpl::embeddingBackwardWeights(const EmbeddingDesc& d, ConstTensorView ids,
                                       ConstTensorView dy, float* dtable) {
  STRATA_ENFORCE_OP(ids.dims.n, ==, dy.dims.n);
  STRATA_ENFORCE_OP(dy.dims.c, ==, d.features);
  const int64_t t = int64_t{ids.dims.h} * ids.dims.w;
  STRATA_ENFORCE_OP(int64_t{dy.dims.h} * dy.dims.w, ==, t);
  float* dpos = d.positions ? dtable + int64_t{d.rows()} * d.features : nullptr;
  if (!runs(MemKernel::kEmbeddingBwd, double(dy.elements())))
    return;
  for (int n = 0; n < ids.dims.n; ++n) {
    const float* g = dy.data + n * dy.dims.perExample();
    for (int64_t p = 0; p < t; ++p) {
      const int token = tokenOf(d, ids.data[n * t + p]);
      float* row = d.holds(token) ? dtable + int64_t{token - d.firstToken} * d.features : nullptr;
      float* at = dpos ? dpos + p * d.features : nullptr;
      for (int c = 0; c < d.features; ++c) {
        if (row)
          row[c] += g[c * t + p];
        if (at)
          at[c] += g[c * t + p];
      }
    }
  }
}

}  // namespace strata::nn::STRATA_CPU_ISA

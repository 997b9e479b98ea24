// The CPU twins of transformer.h: plain loops over its element functions in
// CpuBackend's loop order wherever that order decides a sum (layer
// normalisation's channel sums and per-example weight sums, the embedding's
// scatter in position order, the softmax's 16-lane row sum).
#include <algorithm>
#include <cmath>
#include <vector>

#include "strata/kernels/elementwise.h"
#include "strata/kernels/transformer.h"

namespace strata::kernels::twin {

namespace {

// CpuBackend's orderedSum (cpu_kernels.h): 16 lanes over whole groups of 16,
// the lanes added in order, then the tail one by one.
float orderedSum(const float* x, int64_t n) {
  float lanes[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int j = 0; j < 16; ++j)
      lanes[j] += x[i + j];
  float sum = 0;
  for (float lane : lanes)
    sum += lane;
  for (; i < n; ++i)
    sum += x[i];
  return sum;
}

void noteBadToken(uint64_t* badToken, float id, int vocab) {
  *badToken = std::min(*badToken, badTokenKey(id, vocab));
}

}  // namespace

// ---- layer normalisation ---------------------------------------------------------

void layerNormForward(Shape4 shape, const float* x, const float* gain, const float* bias, float eps,
                      float* y) {
  const int64_t plane = shape.plane();
  for (int n = 0; n < shape.n; ++n)
    for (int64_t p = 0; p < plane; ++p) {
      const int64_t at = n * shape.perExample() + p;
      const element::PositionStats st = element::positionStats(x + at, shape.c, plane, eps);
      for (int c = 0; c < shape.c; ++c)
        y[at + c * plane] = element::layerNormOutput(st, gain[c], bias[c], x[at + c * plane]);
    }
}

void layerNormBackwardData(Shape4 shape, const float* x, const float* dy, const float* gain,
                           float eps, float* dx, float beta) {
  const int64_t plane = shape.plane();
  for (int n = 0; n < shape.n; ++n)
    for (int64_t p = 0; p < plane; ++p) {
      const int64_t at = n * shape.perExample() + p;
      const element::PositionStats st = element::positionStats(x + at, shape.c, plane, eps);
      const element::LayerNormMeans m =
          element::layerNormMeans(st, x + at, dy + at, gain, shape.c, plane);
      for (int c = 0; c < shape.c; ++c) {
        const int64_t i = at + c * plane;
        dx[i] = element::blend(dx + i, element::layerNormGrad(st, m, gain[c], x[i], dy[i]), beta);
      }
    }
}

// As CpuBackend: per example, each channel's float sums over its positions,
// then added onto the gradients.
void layerNormBackwardWeights(Shape4 shape, const float* x, const float* dy, float eps,
                              float* dgain, float* dbias) {
  const int64_t plane = shape.plane();
  std::vector<element::PositionStats> stats(static_cast<size_t>(plane));
  for (int n = 0; n < shape.n; ++n) {
    const int64_t base = n * shape.perExample();
    for (int64_t p = 0; p < plane; ++p)
      stats[static_cast<size_t>(p)] = element::positionStats(x + base + p, shape.c, plane, eps);
    for (int c = 0; c < shape.c; ++c) {
      float sumG = 0, sumGXhat = 0;
      for (int64_t p = 0; p < plane; ++p) {
        const int64_t i = base + c * plane + p;
        const element::PositionStats st = stats[static_cast<size_t>(p)];
        sumG += dy[i];
        sumGXhat += dy[i] * (x[i] - st.mean) * st.invStd;
      }
      dgain[c] += sumGXhat;
      dbias[c] += sumG;
    }
  }
}

// ---- GELU --------------------------------------------------------------------------

void geluForward(const float* x, float* y, int64_t count) {
  for (int64_t i = 0; i < count; ++i)
    y[i] = element::gelu(x[i]);
}

void geluBackward(const float* x, const float* dy, float* dx, int64_t count, float beta) {
  for (int64_t i = 0; i < count; ++i)
    dx[i] = element::blend(dx + i, element::geluGrad(x[i], dy[i]), beta);
}

// ---- attention softmax ----------------------------------------------------------------

void attnSoftmaxForward(const float* s, float* p, int64_t rows, int t, bool causal, float scale) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* in = s + r * t;
    float* out = p + r * t;
    const int keys = element::attnKeys(r, t, causal);
    float mx = in[0];
    for (int j = 1; j < keys; ++j)
      mx = std::max(mx, in[j]);
    mx *= scale;
    for (int j = 0; j < keys; ++j)
      out[j] = element::attnExp(in[j], scale, mx);
    const float inv = 1.0f / orderedSum(out, keys);
    for (int j = 0; j < keys; ++j)
      out[j] *= inv;
    std::fill(out + keys, out + t, 0.0f);
  }
}

void attnSoftmaxBackward(const float* p, const float* dp, float* ds, int64_t rows, int t,
                         float scale) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* pr = p + r * t;
    const float* g = dp + r * t;
    float* out = ds + r * t;
    float dot = 0;
    for (int j = 0; j < t; ++j)
      dot += g[j] * pr[j];
    for (int j = 0; j < t; ++j)
      out[j] = element::attnGrad(pr[j], g[j], dot, scale);
  }
}

// ---- embedding ---------------------------------------------------------------------------

void embeddingForward(const EmbeddingParams& p, const float* ids, const float* table, float* y,
                      uint64_t* badToken) {
  const int64_t t = p.positions;
  const float* pos =
      p.positionTable && p.addPositions ? table + int64_t{p.rows()} * p.features : nullptr;
  for (int n = 0; n < p.n; ++n) {
    float* out = y + n * p.features * t;
    for (int64_t q = 0; q < t; ++q) {
      const float id = ids[n * t + q];
      const int row = element::tokenRow(id, p.vocab);
      if (row < 0)
        noteBadToken(badToken, id, p.vocab);
      const int held = row < 0 || row - p.firstToken >= p.rows() ? -1 : row - p.firstToken;
      for (int c = 0; c < p.features; ++c) {
        const float v = held < 0 ? 0.0f : table[int64_t{held} * p.features + c];
        out[c * t + q] = pos ? v + pos[q * p.features + c] : v;
      }
    }
  }
}

void embeddingBackward(const EmbeddingParams& p, const float* ids, const float* dy, float* dtable,
                       uint64_t* badToken) {
  const int64_t t = p.positions;
  float* dpos = p.positionTable ? dtable + int64_t{p.rows()} * p.features : nullptr;
  for (int n = 0; n < p.n; ++n) {
    const float* g = dy + n * p.features * t;
    for (int64_t q = 0; q < t; ++q) {
      const float id = ids[n * t + q];
      const int row = element::tokenRow(id, p.vocab);
      if (row < 0)
        noteBadToken(badToken, id, p.vocab);
      const int held = row < 0 || row - p.firstToken >= p.rows() ? -1 : row - p.firstToken;
      for (int c = 0; c < p.features; ++c) {
        if (held >= 0)
          dtable[int64_t{held} * p.features + c] += g[c * t + q];
        if (dpos)
          dpos[q * p.features + c] += g[c * t + q];
      }
    }
  }
}

}  // namespace strata::kernels::twin

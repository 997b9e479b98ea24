// The transformer layers' kernels (layer normalisation, GELU, the softmax of
// attention scores, token embedding), as kernels.h's: a CPU twin (namespace
// twin, transformer_twins.cpp) and a CUDA kernel (namespace cuda,
// transformer.cu) with the same arguments plus a stream, both computing each
// element with the STRATA_HD functions of namespace element below.
//
// Semantics are CpuBackend's (executor/nn/src/cpu_norm.cpp, cpu_elementwise.cpp,
// cpu_transformer.cpp; the contracts in executor/nn/backend.h). What equals
// what:
//  - layer normalisation: forward and backward data keep CpuBackend's float
//    sums over a position's channels in channel order, one position per
//    thread on the GPU: twin, CUDA kernel and CpuBackend agree bit for bit.
//    Backward weights: the twin keeps CpuBackend's order (per example, float
//    sums over positions); the CUDA kernel sums a channel over every example
//    and position in double, in its own (fixed) order: within rounding.
//  - GELU and the attention softmax take tanh and exp: CpuBackend's are
//    Eigen's vectorised ones, the twin's the C library's, CUDA's its own,
//    each within an ulp or two; the softmax's sums also differ in order on
//    the GPU (a warp per row). Within rounding.
//  - embedding: the forward is a gather (exact everywhere); the backward adds
//    each token's gradients onto its row in the order of the positions, as
//    CpuBackend does. The CUDA kernel reaches that order without atomics: a
//    stable radix sort of (token, flat position) pairs (CUB), then one thread
//    per (token, feature) adds that token's positions in sorted order. Every
//    embedding result equals CpuBackend's bit for bit.
//
// A token id that is not an integer in [0, vocab) is not looked up (its
// output is 0, its gradient dropped) and is reported through a bad-token
// record: a uint64_t that starts at kNoBadToken and receives min(record,
// badTokenKey(id, vocab)) for every bad id (an integer atomicMin on the GPU).
// The caller reads the record back and names the value (decodeBadToken).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "strata/kernels/hd.h"
#include "strata/kernels/kernels.h"

namespace strata::kernels {

// An embedding over n examples of `positions` token ids each (nn::EmbeddingDesc):
// ids (n x positions) as floats, tables row-major (vocab x features, then,
// with positionTable, positions x features), y (n, features, positions).
// A vocabulary-parallel worker's share (nn::EmbeddingDesc): the token table
// holds rows [firstToken, firstToken + rows()) only; a token outside them gives
// zeros and no gradient; the position table follows those rows, and is added
// only with addPositions.
struct EmbeddingParams {
  int n = 0;
  int positions = 0;
  int vocab = 0;
  int features = 0;
  bool positionTable = false;
  int firstToken = 0;
  int tokens = -1;  // rows held; -1: vocab
  bool addPositions = true;
  STRATA_HD int rows() const { return tokens < 0 ? vocab : tokens; }
};

// The bad-token record's value while no bad id was seen.
inline constexpr uint64_t kNoBadToken = ~uint64_t{0};

// A bad id as the record holds it: the vocabulary above, the id's float bits
// below.
STRATA_HD inline uint64_t badTokenKey(float id, int vocab) {
  uint32_t bits = 0;
  memcpy(&bits, &id, sizeof bits);
  return (static_cast<uint64_t>(static_cast<uint32_t>(vocab)) << 32) | bits;
}

// What a record other than kNoBadToken names.
struct BadToken {
  float id = 0;
  int vocab = 0;
};
inline BadToken decodeBadToken(uint64_t key) {
  BadToken b;
  const auto bits = static_cast<uint32_t>(key & 0xffffffffu);
  std::memcpy(&b.id, &bits, sizeof bits);
  b.vocab = static_cast<int>(key >> 32);
  return b;
}

namespace element {

// ---- layer normalisation -------------------------------------------------------

// One position's statistics over its c channels (`plane` apart), as
// CpuBackend's positionStats: float sums in channel order, mean = sum * (1/c),
// invStd = 1 / sqrt(sum of squared deviations * (1/c) + eps).
struct PositionStats {
  float mean = 0;
  float invStd = 0;
};

STRATA_HD inline PositionStats positionStats(const float* x, int c, int64_t plane, float eps) {
  const float inv = 1.0f / static_cast<float>(c);
  float sum = 0;
  for (int ch = 0; ch < c; ++ch)
    sum += x[ch * plane];
  PositionStats st;
  st.mean = sum * inv;
  float squares = 0;
  for (int ch = 0; ch < c; ++ch) {
    const float d = x[ch * plane] - st.mean;
    squares += d * d;
  }
  st.invStd = 1.0f / std::sqrt(squares * inv + eps);
  return st;
}

// y = gain (x - mean) invStd + bias, grouped as CpuBackend does.
STRATA_HD inline float layerNormOutput(PositionStats st, float gain, float bias, float x) {
  return gain * (x - st.mean) * st.invStd + bias;
}

// xhat = (x - mean) invStd.
STRATA_HD inline float layerNormXhat(PositionStats st, float x) {
  return (x - st.mean) * st.invStd;
}

// The means over a position's channels of g = gain dy and of g xhat (float
// sums in channel order, times 1/c).
struct LayerNormMeans {
  float g = 0;
  float gXhat = 0;
};

STRATA_HD inline LayerNormMeans layerNormMeans(PositionStats st, const float* x, const float* dy,
                                               const float* gain, int c, int64_t plane) {
  LayerNormMeans m;
  for (int ch = 0; ch < c; ++ch) {
    const float gc = gain[ch] * dy[ch * plane];
    m.g += gc;
    m.gXhat += gc * (x[ch * plane] - st.mean) * st.invStd;
  }
  const float inv = 1.0f / static_cast<float>(c);
  m.g *= inv;
  m.gXhat *= inv;
  return m;
}

// dx = invStd (gain dy - mean(g) - xhat mean(g xhat)), before the blend.
STRATA_HD inline float layerNormGrad(PositionStats st, LayerNormMeans m, float gain, float x,
                                     float dy) {
  const float xhat = (x - st.mean) * st.invStd;
  return st.invStd * (gain * dy - m.g - xhat * m.gXhat);
}

// ---- GELU (tanh approximation) --------------------------------------------------

inline constexpr float kGeluK0 = 0.7978845608028654f;  // sqrt(2 / pi)
inline constexpr float kGeluK1 = 0.044715f;

// tanh(sqrt(2/pi) (x + 0.044715 x^3)).
STRATA_HD inline float geluTanh(float x) {
  return std::tanh(kGeluK0 * (x + kGeluK1 * (x * x * x)));
}

// 0.5 x (1 + tanh(...)).
STRATA_HD inline float gelu(float x) {
  return 0.5f * x * (1.0f + geluTanh(x));
}

// dy gelu'(x) = dy (0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 0.044715 x^2)).
STRATA_HD inline float geluGrad(float x, float dy) {
  const float t = geluTanh(x);
  const float slope =
      0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * kGeluK0 * (1.0f + 3.0f * kGeluK1 * (x * x));
  return dy * slope;
}

// ---- attention softmax ------------------------------------------------------------

// The keys row r of a (example, head) block of t x t scores sees: all t, or
// when causal those up to and including its own position (r mod t).
STRATA_HD inline int attnKeys(int64_t r, int t, bool causal) {
  return causal ? static_cast<int>(r % t) + 1 : t;
}

// exp(s scale - mx), mx = (the row's max score) * scale, as CpuBackend.
STRATA_HD inline float attnExp(float s, float scale, float mx) {
  return std::exp(s * scale - mx);
}

// scale p (dp - dot), dot = sum over the row of dp p.
STRATA_HD inline float attnGrad(float p, float dp, float dot, float scale) {
  return scale * p * (dp - dot);
}

// ---- embedding ---------------------------------------------------------------------

// The row of token id `id`, or -1 when it is not an integer in [0, vocab)
// (NaN and infinities included).
STRATA_HD inline int tokenRow(float id, int vocab) {
  if (!(id >= 0.0f && id < static_cast<float>(vocab)))
    return -1;
  const int row = static_cast<int>(id);
  return static_cast<float>(row) == id ? row : -1;
}

}  // namespace element

// ---- the CPU twins ----------------------------------------------------------------
namespace twin {

// Per position of x (shape.n x shape.h*w positions) over its shape.c channels.
void layerNormForward(Shape4 shape, const float* x, const float* gain, const float* bias, float eps,
                      float* y);
void layerNormBackwardData(Shape4 shape, const float* x, const float* dy, const float* gain,
                           float eps, float* dx, float beta);
// dgain += sum of dy xhat, dbias += sum of dy over every position.
void layerNormBackwardWeights(Shape4 shape, const float* x, const float* dy, float eps,
                              float* dgain, float* dbias);

void geluForward(const float* x, float* y, int64_t count);
// dx = dy gelu'(x) + beta dx.
void geluBackward(const float* x, const float* dy, float* dx, int64_t count, float beta);

// `rows` rows of t scores (whole t x t blocks of (example, head)): p =
// softmax(s scale) over the row's keys (attnKeys), 0 after them. May run in
// place (p == s).
void attnSoftmaxForward(const float* s, float* p, int64_t rows, int t, bool causal, float scale);
// ds = scale p (dp - sum(dp p)) per row; may run in place (ds == dp).
void attnSoftmaxBackward(const float* p, const float* dp, float* ds, int64_t rows, int t,
                         float scale);

// y[e][c][t] = table[id][c] (+ pos[t][c]); a bad id gives 0s and goes to
// *badToken.
void embeddingForward(const EmbeddingParams& p, const float* ids, const float* table, float* y,
                      uint64_t* badToken);
// dtable[id] += dy of the id's positions, in position order; dpos[t] += dy
// of position t over the examples in order.
void embeddingBackward(const EmbeddingParams& p, const float* ids, const float* dy, float* dtable,
                       uint64_t* badToken);

}  // namespace twin

// ---- the CUDA kernels (defined in CUDA builds only) -------------------------------
namespace cuda {

void layerNormForward(Shape4 shape, const float* x, const float* gain, const float* bias, float eps,
                      float* y, Stream stream);
void layerNormBackwardData(Shape4 shape, const float* x, const float* dy, const float* gain,
                           float eps, float* dx, float beta, Stream stream);
// Floats of device scratch layerNormBackwardWeights needs (the positions'
// statistics).
int64_t layerNormWeightsScratch(Shape4 shape);
void layerNormBackwardWeights(Shape4 shape, const float* x, const float* dy, float eps,
                              float* dgain, float* dbias, float* scratch, Stream stream);

void geluForward(const float* x, float* y, int64_t count, Stream stream);
void geluBackward(const float* x, const float* dy, float* dx, int64_t count, float beta,
                  Stream stream);

void attnSoftmaxForward(const float* s, float* p, int64_t rows, int t, bool causal, float scale,
                        Stream stream);
void attnSoftmaxBackward(const float* p, const float* dp, float* ds, int64_t rows, int t,
                         float scale, Stream stream);

// badToken: one uint64_t of device memory holding kNoBadToken or a key.
void embeddingForward(const EmbeddingParams& p, const float* ids, const float* table, float* y,
                      uint64_t* badToken, Stream stream);
// Bytes of device scratch embeddingBackward needs for n x positions ids.
size_t embeddingBackwardScratch(const EmbeddingParams& p);
void embeddingBackward(const EmbeddingParams& p, const float* ids, const float* dy, float* dtable,
                       uint64_t* badToken, void* scratch, size_t scratchBytes, Stream stream);

}  // namespace cuda

}  // namespace strata::kernels

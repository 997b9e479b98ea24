// The kernels of the layers that cuBLAS and cuDNN do not run, twice: a CPU
// twin (namespace strata::kernels::twin, plain loops, always built) and a CUDA
// kernel (namespace strata::kernels::cuda, built with STRATA_CUDA) with the
// same arguments plus a stream. Both call the same STRATA_HD element
// functions (elementwise.h), so they agree bit for bit wherever the order of
// a sum does not change and no exp, log or pow is taken. The rest agree
// within rounding: the reductions (bias gradients, batchnorm through its
// statistics, softmax statistics and loss) and the elements that take exp or
// pow (LRN outputs and gradients, softmax probabilities and gradients: the
// LRN scale itself is exact), because CUDA's exp, log and pow differ from
// the C library's by an ulp or two. The twins equal CpuBackend bit for bit,
// except biasGrad (a double sum where CpuBackend's is float).
//
// Semantics are those of the Backend interface (executor/nn/backend.h) and
// of CpuBackend, which the twins are tested against on the CPU
// (tests/kernels/): NCHW float arrays, `beta` 0 overwrites (never reading
// the destination, which may hold NaN) and 1 adds, weight gradients
// accumulate (+=). Every pointer of a cuda:: call is device (or managed)
// memory; the call only enqueues work on `stream` and returns, except where
// it says it waits.
//
// kernels/ depends on nothing of strata: the descriptors below are plain
// copies of executor/nn's, which converts.
#pragma once

#include <cstdint>

#include "strata/kernels/hd.h"

// cudaStream_t without the CUDA headers (it is CUstream_st*).
struct CUstream_st;

namespace strata::kernels {

using Stream = CUstream_st*;

// A synthetic batch's layout (nn::SyntheticBatch): n examples of c x h x w,
// class means on a gridH x gridW grid per channel.
struct SyntheticShape {
  int n = 0, c = 0, h = 0, w = 0;
  int gridH = 1, gridW = 1;
};

// A language model's synthetic batch (nn::SyntheticDataset's token
// sequences): n examples of `positions` token ids each, of examples
// firstIndex, firstIndex + 1, ... of the dataset with `seed` and `vocab`;
// each id is element::syntheticToken, written as a float.
struct SyntheticTokens {
  uint64_t seed = 0;
  int32_t vocab = 0;
  int64_t firstIndex = 0;
  int n = 0;
  int64_t positions = 0;
};
// The streams of the counter-based generator that token sequences draw
// from, and the fraction of positions that draw a uniform token instead of
// following the bigram map (nn::SyntheticDataset's other streams are 1..3).
inline constexpr uint64_t kTokenStream = 4;
inline constexpr uint64_t kBigramStream = 5;
inline constexpr float kTokenNoise = 0.1f;

// n examples of c channels of h x w, NCHW.
struct Shape4 {
  int n = 0, c = 0, h = 0, w = 0;
  STRATA_HD int64_t plane() const { return int64_t{h} * w; }
  STRATA_HD int64_t perExample() const { return int64_t{c} * h * w; }
  STRATA_HD int64_t elements() const { return int64_t{n} * c * h * w; }
};

// nn::DropoutDesc: element (row, channel, pos) of a view is kept when
// uniformFloat(mix64(hashOf(seed, step, layer, firstRow + row)) combined with
// its whole-layer index (channelOffset + channel) * h*w + pos) >= rate, as
// CpuBackend's DropoutMask computes it; kept elements are scaled by
// 1 / (1 - rate).
// With sequence parallelism the view holds positions [firstPosition,
// firstPosition + h*w) of the whole layer's totalPositions (0: h*w): pos is
// then firstPosition + the view's position, and the plane totalPositions.
struct DropoutParams {
  float rate = 0.5f;
  uint64_t seed = 0;
  uint64_t step = 0;
  int layer = 0;
  int firstRow = 0;
  int channelOffset = 0;
  int firstPosition = 0;
  int totalPositions = 0;
};

// nn::PoolDesc; mode max or average (padding never counts; ties of max pick
// the first input in row-major window order; argmax holds, per output, the
// index of the chosen input within its example's plane, or -1 for a window
// wholly in padding).
struct PoolParams {
  bool max = true;
  int c = 0, inH = 0, inW = 0;
  int kernelH = 0, kernelW = 0;
  int stride = 1, pad = 0;
  int outH = 0, outW = 0;
};

// nn::LrnDesc (alpha not divided by size; window [i - (size-1)/2, i + size/2]
// clipped to the channels).
struct LrnParams {
  int size = 5;
  float k = 2.0f;
  float alpha = 1e-4f;
  float beta = 0.75f;
};

// Loss terms of softmax cross-entropy, as nn::SoftmaxLossSum.
struct LossSum {
  double loss = 0;
  int64_t correct = 0;
};

// nn::AdamParams: Adam's hyper-parameters and the step t >= 1 whose bias
// corrections it applies; decoupled: AdamW's weight decay, else Adam's L2
// term in the gradient (the update is in elementwise.h's adam()).
struct AdamParams {
  float learningRate = 1e-3f;
  float beta1 = 0.9f, beta2 = 0.999f;
  float eps = 1e-8f;
  float weightDecay = 0;
  bool decoupled = false;
  int64_t step = 1;
};

// ---- the CPU twins ----------------------------------------------------------
namespace twin {

// x = value over count elements.
void fill(float* x, int64_t count, float value);
// The batch's n x positions token ids, as floats (nn::syntheticFill of a
// token batch). twins.cpp.
void syntheticTokens(const SyntheticTokens& batch, float* out);
// dst = src + beta * dst (beta 0: overwrite, never reading dst).
void accumulate(const float* src, float* dst, int64_t count, float beta);
// y = a + b.
void add(const float* a, const float* b, float* y, int64_t count);
// y += x: the executor's reduction of received gradients.
void reduceAdd(const float* x, float* y, int64_t count);

void reluForward(const float* x, float* y, int64_t count);
// dx = (y > 0 ? dy : 0) + beta * dx.
void reluBackward(const float* y, const float* dy, float* dx, int64_t count, float beta);

// `shape` is the view's (the slice's channels for a model-parallel layer).
void dropoutForward(const DropoutParams& p, Shape4 shape, const float* x, float* y);
void dropoutBackward(const DropoutParams& p, Shape4 shape, const float* dy, float* dx, float beta);

// y (n x channels x positions) += bias[channel].
void biasAdd(float* y, const float* bias, int n, int channels, int64_t positions);
// dbias[channel] += sum of dy over examples and positions.
void biasGrad(const float* dy, float* dbias, int n, int channels, int64_t positions);

// x: (n, p.c, inH, inW), y: (n, p.c, outH, outW); argmax may be null for
// average pooling.
void poolForward(const PoolParams& p, int n, const float* x, float* y, int32_t* argmax);
void poolBackward(const PoolParams& p, int n, const float* dy, const int32_t* argmax, float* dx,
                  float beta);

// scale receives s_i = k + alpha * sum of x_j^2 over the window.
void lrnForward(const LrnParams& p, Shape4 shape, const float* x, float* y, float* scale);
void lrnBackward(const LrnParams& p, Shape4 shape, const float* x, const float* y,
                 const float* scale, const float* dy, float* dx, float beta);

// Training-mode batch normalisation over the n*h*w values of each channel
// (statistics in double; biased variance).
void batchNormForward(Shape4 shape, const float* x, const float* gamma, const float* shift,
                      float eps, float* y);
void batchNormBackwardData(Shape4 shape, const float* x, const float* dy, const float* gamma,
                           float eps, float* dx, float beta);
void batchNormBackwardWeights(Shape4 shape, const float* x, const float* dy, float eps,
                              float* dgamma, float* dshift);

// Softmax over channels at each position (n x h x w positions); stats holds
// (max, sum of exp(z - max)) per position, interleaved.
void softmaxStats(Shape4 shape, const float* logits, float* stats);
void softmaxProbabilities(Shape4 shape, const float* logits, const float* stats, float* y);
// Positions whose label is in [classOffset, classOffset + shape.c).
LossSum softmaxLoss(Shape4 shape, const float* logits, const float* stats, const int32_t* labels,
                    int classOffset);
void softmaxBackward(Shape4 shape, const float* logits, const float* stats, const int32_t* labels,
                     int classOffset, float scale, float* dlogits, float beta);

// v = momentum * v - lr * (g + weightDecay * w); w = w + v.
void sgdMomentum(float* w, float* v, const float* g, int64_t count, float learningRate,
                 float momentum, float weightDecay);
// Adam or AdamW on count parameters w with moments m, v and gradient g
// (elementwise.h's adam, scalars from adamScalars(p)). optimizer_twin.cpp.
void adam(float* w, float* m, float* v, const float* g, int64_t count, const AdamParams& p);

}  // namespace twin

// ---- the CUDA kernels ---------------------------------------------------------
// Declared always, defined only in CUDA builds (STRATA_CUDA): calling one in
// a build without CUDA is a link error, not a run-time surprise.
namespace cuda {

void fill(float* x, int64_t count, float value, Stream stream);
void accumulate(const float* src, float* dst, int64_t count, float beta, Stream stream);
void add(const float* a, const float* b, float* y, int64_t count, Stream stream);
void reduceAdd(const float* x, float* y, int64_t count, Stream stream);
// nn::syntheticFill on the GPU: out[i][e] = means[classes[i]][c][cell(y, x)]
// + noise * normalFloat(hashOf(keys[i], e)); means, classes and keys in
// device memory.
void syntheticExamples(const float* means, const int32_t* classes, const uint64_t* keys,
                       SyntheticShape shape, float noise, float* out, Stream stream);
// twin::syntheticTokens on the GPU: nothing read but the batch's numbers.
void syntheticTokens(const SyntheticTokens& batch, float* out, Stream stream);
void reluForward(const float* x, float* y, int64_t count, Stream stream);
void reluBackward(const float* y, const float* dy, float* dx, int64_t count, float beta,
                  Stream stream);
void dropoutForward(const DropoutParams& p, Shape4 shape, const float* x, float* y, Stream stream);
void dropoutBackward(const DropoutParams& p, Shape4 shape, const float* dy, float* dx, float beta,
                     Stream stream);
void biasAdd(float* y, const float* bias, int n, int channels, int64_t positions, Stream stream);
void biasGrad(const float* dy, float* dbias, int n, int channels, int64_t positions, Stream stream);
void poolForward(const PoolParams& p, int n, const float* x, float* y, int32_t* argmax,
                 Stream stream);
void poolBackward(const PoolParams& p, int n, const float* dy, const int32_t* argmax, float* dx,
                  float beta, Stream stream);
void lrnForward(const LrnParams& p, Shape4 shape, const float* x, float* y, float* scale,
                Stream stream);
void lrnBackward(const LrnParams& p, Shape4 shape, const float* x, const float* y,
                 const float* scale, const float* dy, float* dx, float beta, Stream stream);
void batchNormForward(Shape4 shape, const float* x, const float* gamma, const float* shift,
                      float eps, float* y, Stream stream);
void batchNormBackwardData(Shape4 shape, const float* x, const float* dy, const float* gamma,
                           float eps, float* dx, float beta, Stream stream);
void batchNormBackwardWeights(Shape4 shape, const float* x, const float* dy, float eps,
                              float* dgamma, float* dshift, Stream stream);
void softmaxStats(Shape4 shape, const float* logits, float* stats, Stream stream);
void softmaxProbabilities(Shape4 shape, const float* logits, const float* stats, float* y,
                          Stream stream);
// Waits for the stream (the sums come back to the host).
LossSum softmaxLoss(Shape4 shape, const float* logits, const float* stats, const int32_t* labels,
                    int classOffset, Stream stream);
void softmaxBackward(Shape4 shape, const float* logits, const float* stats, const int32_t* labels,
                     int classOffset, float scale, float* dlogits, float beta, Stream stream);
void sgdMomentum(float* w, float* v, const float* g, int64_t count, float learningRate,
                 float momentum, float weightDecay, Stream stream);
// twin::adam on the GPU (optimizer.cu); the per-step scalars are computed on
// the host as the twin computes them, so the two agree bit for bit.
void adam(float* w, float* m, float* v, const float* g, int64_t count, const AdamParams& p,
          Stream stream);

}  // namespace cuda

}  // namespace strata::kernels

// The arithmetic of one element of every kernel in kernels.h, once, for both
// the CPU twins (twins.cpp) and the CUDA kernels (kernels.cu). A twin loops
// over elements and a CUDA thread takes some of them; both call these
// functions, so one element's value is computed by the same operations in
// the same order on either side. Each function mirrors, operation for
// operation, what CpuBackend (executor/nn/src/cpu_*.cpp, listed in
// cpu_kernels.cpp) does for that element: the order of a float sum, where a
// product is grouped, and whether a value goes through float or double all
// decide the last bit.
//
// Two forms of `beta` exist in CpuBackend and are kept apart here:
//  - blend(): dst = value (beta 0) or beta * dst + value, the kernels that
//    compute a value and then combine it with dst;
//  - startOfSum(): the kernels that first scale dst (0 or beta * dst) and
//    then add terms to it one by one (dropout and pooling backward).
// They differ only in the sign of a zero (0 + -0 is +0), but that is a bit.
//
// Device code: kernels.cu is compiled with --fmad=false, so `a * b + c` here
// rounds twice on the GPU as it does on the CPU. C++17 (nvcc compiles it).
#pragma once

#include <cmath>
#include <cstdint>

#include "strata/kernels/counter_rng.h"
#include "strata/kernels/hd.h"
#include "strata/kernels/kernels.h"

namespace strata::kernels::element {

// ---- beta ---------------------------------------------------------------------

// What a kernel stores over *dst: value (beta 0, which never reads *dst: it
// may hold NaN) or beta * *dst + value.
STRATA_HD inline float blend(const float* dst, float value, float beta) {
  return beta == 0.0f ? value : beta * *dst + value;
}

// What a kernel that scales dst before adding its terms starts from: 0 for
// beta 0 (never reading *dst), else beta * *dst (exactly *dst for beta 1).
STRATA_HD inline float startOfSum(const float* dst, float beta) {
  return beta == 0.0f ? 0.0f : beta * *dst;
}

// ---- activations ---------------------------------------------------------------

// std::max(x, 0.0f): NaN and -0 pass through unchanged.
STRATA_HD inline float relu(float x) {
  return x < 0.0f ? 0.0f : x;
}

// The gradient relu lets through, given its output y.
STRATA_HD inline float reluGrad(float y, float dy) {
  return y > 0.0f ? dy : 0.0f;
}

// Vision networks' activations (nn::Activation), value and gradient, as
// PyTorch's torch.nn.Sigmoid, SiLU, ReLU6, Hardsigmoid, Hardswish and Tanh compute
// them, the derivative at the kinks included. The gradients take dy and the
// value the derivative is a function of: sigmoid's, relu6's and tanh's their output
// y, the others' their input x.
STRATA_HD inline float sigmoid(float x) {
  return 1.0f / (1.0f + std::exp(-x));
}
STRATA_HD inline float sigmoidGrad(float y, float dy) {
  return dy * (y * (1.0f - y));
}
STRATA_HD inline float silu(float x) {
  return x * sigmoid(x);
}
// silu'(x) = s + x s (1 - s) = s (1 + x (1 - s)), s = sigmoid(x).
STRATA_HD inline float siluGrad(float x, float dy) {
  const float s = sigmoid(x);
  return dy * (s * (1.0f + x * (1.0f - s)));
}
STRATA_HD inline float relu6(float x) {
  const float r = x < 0.0f ? 0.0f : x;
  return r > 6.0f ? 6.0f : r;
}
// Through where 0 < y < 6 (PyTorch's hardtanh_backward: 0 at both kinks).
STRATA_HD inline float relu6Grad(float y, float dy) {
  return y > 0.0f && y < 6.0f ? dy : 0.0f;
}
STRATA_HD inline float hardSigmoid(float x) {
  return relu6(x + 3.0f) / 6.0f;
}
// dy / 6 where -3 < x < 3.
STRATA_HD inline float hardSigmoidGrad(float x, float dy) {
  return x > -3.0f && x < 3.0f ? dy / 6.0f : 0.0f;
}
STRATA_HD inline float hardSwish(float x) {
  return x * relu6(x + 3.0f) / 6.0f;
}
// 0 below -3, dy (x / 3 + 1/2) on [-3, 3], dy above (PyTorch's
// hardswish_backward).
STRATA_HD inline float hardSwishGrad(float x, float dy) {
  if (x < -3.0f)
    return 0.0f;
  return x <= 3.0f ? dy * (x / 3.0f + 0.5f) : dy;
}
STRATA_HD inline float tanhValue(float x) {
  return std::tanh(x);
}
// tanh'(x) = 1 - tanh(x)^2, from the output y.
STRATA_HD inline float tanhGrad(float y, float dy) {
  return dy * (1.0f - y * y);
}

// ---- dropout -------------------------------------------------------------------

// The factor of kept elements, 1 / (1 - rate).
STRATA_HD inline float dropoutScale(float rate) {
  return 1.0f / (1.0f - rate);
}

// The hash of example `row` of the view; each element mixes in its
// whole-layer index (dropoutIndex).
STRATA_HD inline uint64_t dropoutRowKey(const DropoutParams& p, int row) {
  return mix64(hashOf(p.seed, p.step, static_cast<uint64_t>(p.layer),
                      static_cast<uint64_t>(p.firstRow + row)));
}

// The index within the whole layer's example of the view's element `offset`
// (channel * plane + position within the example): a model-parallel slice
// starts channelOffset planes in.
STRATA_HD inline uint64_t dropoutIndex(const DropoutParams& p, int64_t plane, int64_t offset) {
  if (p.totalPositions == 0)
    return static_cast<uint64_t>(int64_t{p.channelOffset} * plane + offset);
  // A worker's positions of each channel (sequence parallelism).
  const int64_t channel = offset / plane, pos = offset % plane;
  return static_cast<uint64_t>((p.channelOffset + channel) * int64_t{p.totalPositions} +
                               p.firstPosition + pos);
}

// scale for a kept element, 0 for a dropped one.
STRATA_HD inline float dropoutFactor(uint64_t rowKey, uint64_t index, float rate, float scale) {
  return uniformFloat(mix64(rowKey ^ index)) >= rate ? scale : 0.0f;
}

// ---- optimiser -----------------------------------------------------------------

// v = momentum * v - lr * (g + weightDecay * w); w = w + v.
STRATA_HD inline void sgdMomentum(float* w, float* v, float g, float learningRate, float momentum,
                                  float weightDecay) {
  const float velocity = momentum * *v - learningRate * (g + weightDecay * *w);
  *v = velocity;
  *w = *w + velocity;
}

// Adam (Kingma and Ba, "Adam: A Method for Stochastic Optimization", ICLR
// 2015, Algorithm 1) and AdamW (Loshchilov and Hutter, "Decoupled Weight
// Decay Regularization", ICLR 2019, Algorithm 2) as PyTorch's single-tensor
// torch.optim.Adam / AdamW (2.x) order them: at step t,
//   AdamW: w = w (1 - lr wd);   Adam: g = g + wd w
//   m = b1 m + (1 - b1) g;   v = b2 v + ((1 - b2) g) g
//   w = w - (lr / (1 - b1^t)) (m / (sqrt(v) / sqrt(1 - b2^t) + eps))
// (m as the paper writes it; PyTorch's lerp of m may differ in the last bit).
// The bias corrections take pow once per step, on the host in double
// (adamScalars), so the per-element work is multiplies, adds, one sqrt and
// two divisions, all correctly rounded on the CPU and on the GPU (nvcc's
// default -prec-sqrt=true -prec-div=true; --fmad=false): the twin, the CPU
// backend and the CUDA kernel agree bit for bit.
struct AdamScalars {
  float beta1, oneMinusBeta1;
  float beta2, oneMinusBeta2;
  float stepSize;     // lr / (1 - b1^t)
  float correction2;  // sqrt(1 - b2^t)
  float eps;
  float l2;     // Adam's weight decay in the gradient (0 for AdamW)
  float decay;  // AdamW's factor 1 - lr wd (1 for Adam)
};

// The scalars of step p.step (>= 1; the caller checks it). Host only.
inline AdamScalars adamScalars(const AdamParams& p) {
  const double t = static_cast<double>(p.step);
  AdamScalars s{};
  s.beta1 = p.beta1;
  s.oneMinusBeta1 = 1.0f - p.beta1;
  s.beta2 = p.beta2;
  s.oneMinusBeta2 = 1.0f - p.beta2;
  s.stepSize = static_cast<float>(double(p.learningRate) / (1.0 - std::pow(double(p.beta1), t)));
  s.correction2 = static_cast<float>(std::sqrt(1.0 - std::pow(double(p.beta2), t)));
  s.eps = p.eps;
  s.l2 = p.decoupled ? 0.0f : p.weightDecay;
  s.decay = p.decoupled ? static_cast<float>(1.0 - double(p.learningRate) * p.weightDecay) : 1.0f;
  return s;
}

// One parameter's Adam / AdamW step (see AdamScalars).
STRATA_HD inline void adam(float* w, float* m, float* v, float g, const AdamScalars& s) {
  const float grad = s.l2 == 0.0f ? g : g + s.l2 * *w;
  const float weight = s.decay == 1.0f ? *w : *w * s.decay;
  const float first = s.beta1 * *m + s.oneMinusBeta1 * grad;
  const float second = s.beta2 * *v + s.oneMinusBeta2 * grad * grad;
  *m = first;
  *v = second;
  *w = weight - s.stepSize * (first / (std::sqrt(second) / s.correction2 + s.eps));
}

// ---- pooling --------------------------------------------------------------------

// The input rows [h0, h1) and columns [w0, w1) output (oh, ow) reads; empty
// (h1 <= h0 or w1 <= w0) for a window wholly in padding.
struct PoolWindow {
  int h0, h1, w0, w1;
  // Inputs inside the window (0 when it lies wholly in padding).
  STRATA_HD int count() const { return (h1 > h0 && w1 > w0) ? (h1 - h0) * (w1 - w0) : 0; }
};

STRATA_HD inline PoolWindow poolWindow(const PoolParams& p, int oh, int ow) {
  const int top = oh * p.stride - p.pad;
  const int left = ow * p.stride - p.pad;
  PoolWindow win;
  win.h0 = top > 0 ? top : 0;
  win.h1 = top + p.kernelH < p.inH ? top + p.kernelH : p.inH;
  win.w0 = left > 0 ? left : 0;
  win.w1 = left + p.kernelW < p.inW ? left + p.kernelW : p.inW;
  return win;
}

// Max pooling of output (oh, ow) over one input plane: the largest input
// (NaN never wins; ties keep the first in row-major window order), with its
// index in the plane stored in *where; a window without inputs (or of only
// -inf and NaN) gives 0 and -1.
STRATA_HD inline float poolMax(const PoolParams& p, const float* in, int oh, int ow,
                               int32_t* where) {
  const PoolWindow win = poolWindow(p, oh, ow);
  float best = -INFINITY;
  int32_t at = -1;
  for (int ih = win.h0; ih < win.h1; ++ih)
    for (int iw = win.w0; iw < win.w1; ++iw)
      if (in[ih * p.inW + iw] > best) {
        best = in[ih * p.inW + iw];
        at = ih * p.inW + iw;
      }
  *where = at;
  return at >= 0 ? best : 0.0f;
}

// Average pooling of output (oh, ow): the float sum in row-major window order
// over the inputs inside the window, divided by their count (0 for none).
STRATA_HD inline float poolAverage(const PoolParams& p, const float* in, int oh, int ow) {
  const PoolWindow win = poolWindow(p, oh, ow);
  float sum = 0;
  for (int ih = win.h0; ih < win.h1; ++ih)
    for (int iw = win.w0; iw < win.w1; ++iw)
      sum += in[ih * p.inW + iw];
  const int count = win.count();
  return count > 0 ? sum / static_cast<float>(count) : 0.0f;
}

// The outputs whose window contains an input coordinate along one axis:
// [first, last] (empty when first > last).
struct OutputRange {
  int first, last;
};

STRATA_HD inline OutputRange outputsReading(int in, int kernel, int stride, int pad, int outSize) {
  // Output o reads inputs [o * stride - pad, o * stride - pad + kernel).
  const int reach = in + pad - kernel;
  OutputRange r;
  r.first = reach < 0 ? 0 : reach / stride + 1;
  const int last = (in + pad) / stride;
  r.last = last < outSize - 1 ? last : outSize - 1;
  return r;
}

// The gradient of input (ih, iw) of one plane, gathered: CpuBackend scatters
// each output's gradient onto its inputs in increasing output order, so an
// input receives its terms in increasing output order, added one by one to
// `start` (startOfSum). Max pooling: the outputs whose argmax is this input
// (argmax comes from poolForward, so only outputs whose window holds it).
STRATA_HD inline float poolMaxGrad(const PoolParams& p, const float* dy, const int32_t* argmax,
                                   int ih, int iw, float start) {
  const OutputRange rows = outputsReading(ih, p.kernelH, p.stride, p.pad, p.outH);
  const OutputRange cols = outputsReading(iw, p.kernelW, p.stride, p.pad, p.outW);
  const int32_t self = ih * p.inW + iw;
  float sum = start;
  for (int oh = rows.first; oh <= rows.last; ++oh)
    for (int ow = cols.first; ow <= cols.last; ++ow)
      if (argmax[oh * p.outW + ow] == self)
        sum += dy[oh * p.outW + ow];
  return sum;
}

// Average pooling: every output whose window holds the input gives it an
// equal share of its gradient, dy / count.
STRATA_HD inline float poolAverageGrad(const PoolParams& p, const float* dy, int ih, int iw,
                                       float start) {
  const OutputRange rows = outputsReading(ih, p.kernelH, p.stride, p.pad, p.outH);
  const OutputRange cols = outputsReading(iw, p.kernelW, p.stride, p.pad, p.outW);
  float sum = start;
  for (int oh = rows.first; oh <= rows.last; ++oh)
    for (int ow = cols.first; ow <= cols.last; ++ow)
      sum += dy[oh * p.outW + ow] / static_cast<float>(poolWindow(p, oh, ow).count());
  return sum;
}

// ---- local response normalisation ----------------------------------------------

// The channels [first, last] of channel c's window (clipped to the channels).
struct ChannelRange {
  int first, last;
};

// The window of channel c: [c - (size-1)/2, c + size/2].
STRATA_HD inline ChannelRange lrnWindow(const LrnParams& p, int c, int channels) {
  const int first = c - (p.size - 1) / 2;
  const int last = c + p.size / 2;
  return {first > 0 ? first : 0, last < channels - 1 ? last : channels - 1};
}

// The channels whose window holds channel c: [c - size/2, c + (size-1)/2].
STRATA_HD inline ChannelRange lrnReaders(const LrnParams& p, int c, int channels) {
  const int first = c - p.size / 2;
  const int last = c + (p.size - 1) / 2;
  return {first > 0 ? first : 0, last < channels - 1 ? last : channels - 1};
}

// s = k + alpha * (the float sum, in channel order, of x_j^2 over the
// window); `at` points at channel 0 of the position, channels `plane` apart.
STRATA_HD inline float lrnScale(const LrnParams& p, const float* at, int64_t plane, int c,
                                int channels) {
  const ChannelRange win = lrnWindow(p, c, channels);
  float sum = 0;
  for (int j = win.first; j <= win.last; ++j) {
    const float xj = at[j * plane];
    sum += xj * xj;
  }
  return p.k + p.alpha * sum;
}

// y = x s^-beta.
STRATA_HD inline float lrnOutput(const LrnParams& p, float x, float scale) {
  return x * std::pow(scale, -p.beta);
}

// dx_c = dy_c s_c^-beta - 2 alpha beta x_c sum_{j : c in window(j)} dy_j y_j / s_j,
// blended with *dx by `beta`; the terms of the sum are subtracted one by one
// in channel order. x, y, scale and dy point at channel 0 of the position, dx
// at the element itself.
STRATA_HD inline float lrnGrad(const LrnParams& p, const float* x, const float* y,
                               const float* scale, const float* dy, int64_t plane, int c,
                               int channels, const float* dx, float beta) {
  const int64_t self = c * plane;
  float value = blend(dx, dy[self] * std::pow(scale[self], -p.beta), beta);
  const float coefficient = 2.0f * p.alpha * p.beta;
  const ChannelRange readers = lrnReaders(p, c, channels);
  for (int j = readers.first; j <= readers.last; ++j) {
    const int64_t at = j * plane;
    const float ratio = dy[at] * y[at] / scale[at];
    value -= coefficient * x[self] * ratio;
  }
  return value;
}

// ---- batch normalisation ----------------------------------------------------------

// The host's double sums over a channel (CpuBackend and the twins) run in
// kSumLanes independent lanes: value i of a row goes to lane i mod kSumLanes,
// the lanes persist across the channel's rows and are added 0, 1, ... at the
// end. One running double sum is a dependent add per value (bound by the
// add's latency, ~4 cycles); independent lanes let the compiler vectorise
// (8 doubles: one AVX-512 register). The CUDA kernels reduce in their own
// order (compared within tolerance).
inline constexpr int kSumLanes = 8;

// Calls visit(lane, i) for i in [0, count), lane = i mod kSumLanes.
template <class Visit>
inline void forEachInLanes(int64_t count, Visit&& visit) {
  int64_t i = 0;
  for (; i + kSumLanes <= count; i += kSumLanes)
    for (int j = 0; j < kSumLanes; ++j)
      visit(j, i + j);
  for (; i < count; ++i)
    visit(static_cast<int>(i % kSumLanes), i);
}

// lanes[0] + lanes[1] + ... in that order.
inline double addLanes(const double* lanes) {
  double sum = 0;
  for (int j = 0; j < kSumLanes; ++j)
    sum += lanes[j];
  return sum;
}

// One channel's statistics as the kernels use them (rounded to float).
struct ChannelStats {
  float mean = 0;
  float invStd = 0;
};

// From the double sums over the channel's `count` values: sum of x, and sum
// of (x - mean)^2 around the double mean (sum / count).
STRATA_HD inline ChannelStats channelStats(double sum, double squares, double count, float eps) {
  ChannelStats st;
  st.mean = static_cast<float>(sum / count);
  st.invStd = static_cast<float>(1.0 / std::sqrt(squares / count + eps));
  return st;
}

// One term of the second pass: (x - mean)^2 in double.
STRATA_HD inline double squaredDeviation(float x, double mean) {
  return (x - mean) * (x - mean);
}

// y = a x + b with a = gamma invStd and b = shift - a mean.
STRATA_HD inline float batchNormOutput(ChannelStats st, float gamma, float shift, float x) {
  const float a = gamma * st.invStd;
  const float b = shift - a * st.mean;
  return a * x + b;
}

// One term of sum(dy xhat), grouped as CpuBackend does: (dy (x - mean)) invStd.
STRATA_HD inline float dyXhat(ChannelStats st, float x, float dy) {
  return dy * (x - st.mean) * st.invStd;
}

// The means of dy and of dy xhat over the channel's m values, in float.
struct GradientMeans {
  float dy = 0;
  float dyXhat = 0;
};

STRATA_HD inline GradientMeans gradientMeans(double sumDy, double sumDyXhat, double m) {
  return {static_cast<float>(sumDy / m), static_cast<float>(sumDyXhat / m)};
}

// dx = gamma invStd (dy - mean(dy) - xhat mean(dy xhat)), xhat = (x - mean) invStd.
STRATA_HD inline float batchNormGrad(ChannelStats st, float gamma, GradientMeans means, float x,
                                     float dy) {
  const float a = gamma * st.invStd;
  const float xhat = (x - st.mean) * st.invStd;
  return a * (dy - means.dy - xhat * means.dyXhat);
}

// ---- softmax + cross-entropy --------------------------------------------------------

// The running max over a position's logits: std::max(max, z) (a NaN logit
// never becomes the max).
STRATA_HD inline float softmaxMax(float max, float z) {
  return max < z ? z : max;
}

// One term of the double sum: exp(z - max).
STRATA_HD inline double softmaxTerm(float z, float max) {
  return std::exp(double(z) - max);
}

// exp(z - max) / sum in float; stats points at the position's (max, sum).
STRATA_HD inline float softmaxProbability(float z, const float* stats) {
  return std::exp(z - stats[0]) / stats[1];
}

// The class of a position within the view, or -1 when its label is not held.
STRATA_HD inline int heldClass(int32_t label, int classOffset, int channels) {
  const int c = label - classOffset;
  return c >= 0 && c < channels ? c : -1;
}

// max + log(sum) - z of the label's logit z, in double.
STRATA_HD inline double softmaxLossTerm(const float* stats, float z) {
  return double(stats[0]) + std::log(double(stats[1])) - z;
}

// Whether the label's logit is the max (ties count as correct).
STRATA_HD inline bool softmaxCorrect(const float* stats, float z) {
  return z >= stats[0];
}

// scale (softmax(z) - onehot), before the blend with beta.
STRATA_HD inline float softmaxGrad(float z, const float* stats, bool isLabel, float scale) {
  return scale * (softmaxProbability(z, stats) - (isLabel ? 1.0f : 0.0f));
}

// Token `position` of example `index` of a token dataset (SyntheticTokens):
// walks back to the last position that draws a uniform token (position 0
// always does), then follows the bigram map forward. Integer arithmetic and
// one exact float compare: the same on host and device.
STRATA_HD inline int32_t syntheticToken(uint64_t seed, uint64_t vocab, uint64_t index,
                                        int64_t position) {
  int64_t p = position;
  while (p > 0 && uniformFloat(mix64(
                      hashOf(seed, kTokenStream, index, static_cast<uint64_t>(p)))) >= kTokenNoise)
    --p;
  uint64_t token = hashOf(seed, kTokenStream, index, static_cast<uint64_t>(p)) % vocab;
  for (; p < position; ++p)
    token = hashOf(seed, kBigramStream, token) % vocab;
  return static_cast<int32_t>(token);
}

}  // namespace strata::kernels::element

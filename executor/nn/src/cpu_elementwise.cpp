// The CPU kernels of one ISA (cpu_kernels.cpp): element-wise layers (relu,
// dropout, gelu, swiglu, vision networks' activations and mul), buffer
// operations (fill, add, accumulate, zero), concat's channel copies and the
// vision transformer's copies, table and sums over positions.
#include <Eigen/Core>
#include <algorithm>
#include <cmath>

#include "cpu_kernels.h"
#include "shape_checks.h"
#include "strata/kernels/counter_rng.h"
#include "strata/kernels/elementwise.h"

namespace strata::nn::STRATA_CPU_ISA {

namespace {

// The dropout decision of one element, see DropoutDesc. An element's index
// within the whole layer is (channelOffset + c) * plane + p, which is
// channelOffset * plane plus its offset within the example's slice: the
// kernels below walk that offset as one flat loop, so they vectorise whatever
// the shape (a loop per channel ran one element at a time for fc outputs,
// plane 1: 28x slower than the same elements with plane 32; cpu_bench's
// BM_Dropout_strata).
struct DropoutMask {
  DropoutDesc d;  // a copy: each thread reads its own (see dropoutForward)
  uint64_t firstIndex;
  float scale;

  DropoutMask(const DropoutDesc& desc, const Dims& dims)
      : d(desc),
        firstIndex(static_cast<uint64_t>(int64_t{desc.channelOffset} * dims.h * dims.w)),
        scale(1.0f / (1.0f - desc.rate)),
        plane(int64_t{dims.h} * dims.w) {}
  // Sequence parallelism: the view's plane is a worker's positions of each
  // channel, so offsets are not contiguous in the whole layer.
  bool splitPositions() const { return d.totalPositions > 0; }
  // Hash of the example's row; elements then mix in their whole-layer index.
  uint64_t rowKey(int row) const {
    return kernels::mix64(kernels::hashOf(d.seed, d.step, static_cast<uint64_t>(d.layer),
                                          static_cast<uint64_t>(d.firstRow + row)));
  }
  // `offset`: the element's offset within the example's slice.
  float factor(uint64_t rowKey, int64_t offset) const {
    return factorAt(rowKey, firstIndex + static_cast<uint64_t>(offset));
  }
  float factorAt(uint64_t rowKey, uint64_t index) const {
    return kernels::uniformFloat(kernels::mix64(rowKey ^ index)) >= d.rate ? scale : 0.0f;
  }
  // With split positions: the whole-layer index of the view's channel c at
  // position 0; its positions follow contiguously, so each channel is one
  // flat loop (an index per element by division ran 12x slower than the
  // whole layer's flat loop on tiny-gpt's dropouts).
  uint64_t channelBase(int64_t c) const {
    return static_cast<uint64_t>((d.channelOffset + c) * int64_t{d.totalPositions} +
                                 d.firstPosition);
  }
  int64_t plane;
};

// out = in * mask, or out += in * mask (kAccumulate), over one example:
// flat over the view, or channel by channel with split positions.
template <bool kAccumulate>
void applyMask(const DropoutMask m, uint64_t key, int64_t per, const float* __restrict in,
               float* __restrict out) {
  if (!m.splitPositions()) {
    for (int64_t i = 0; i < per; ++i) {
      const float v = in[i] * m.factor(key, i);
      out[i] = kAccumulate ? out[i] + v : v;
    }
    return;
  }
  const int64_t plane = m.plane;
  for (int64_t c = 0; c * plane < per; ++c) {
    const uint64_t base = m.channelBase(c);
    const float* __restrict x = in + c * plane;
    float* __restrict y = out + c * plane;
    for (int64_t p = 0; p < plane; ++p) {
      const float v = x[p] * m.factorAt(key, base + static_cast<uint64_t>(p));
      y[p] = kAccumulate ? y[p] + v : v;
    }
  }
}

}  // namespace

// ---- elementwise ----------------------------------------------------------

void CpuImpl::reluForward(ConstTensorView x, TensorView y) {
  checkSameDims(x.dims, y.dims);
  if (!runs(MemKernel::kReluFwd, double(x.elements())))
    return;
  parallelRanges(team_, x.elements(), kElementGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      y.data[i] = std::max(x.data[i], 0.0f);
  });
}

void CpuImpl::reluBackward(ConstTensorView y, ConstTensorView dy, TensorView dx, float beta) {
  checkSameDims(y.dims, dy.dims);
  checkSameDims(y.dims, dx.dims);
  const int64_t count = y.elements();
  if (!runs(MemKernel::kReluBwd, double(count)))
    return;
  // Restrict-qualified so the compiler may vectorise the select: written as
  // plain loops over the views it branches per element, and a branch on the
  // sign of activations mispredicts about half the time (~10x slower here).
  const float* __restrict out = y.data;
  const float* __restrict g = dy.data;
  float* __restrict d = dx.data;
  // Both operands are loaded unconditionally so the select needs no branch.
  parallelRanges(team_, count, kElementGrain, [&](int64_t begin, int64_t end) {
    if (beta == 0.0f) {
      for (int64_t i = begin; i < end; ++i) {
        const float gi = g[i];
        d[i] = out[i] > 0.0f ? gi : 0.0f;
      }
    } else {
      for (int64_t i = begin; i < end; ++i) {
        const float gi = g[i];
        d[i] = beta * d[i] + (out[i] > 0.0f ? gi : 0.0f);
      }
    }
  });
}

void CpuImpl::dropoutForward(const DropoutDesc& d, ConstTensorView x, TensorView y) {
  checkSameDims(x.dims, y.dims);
  if (!runs(MemKernel::kDropoutFwd, double(x.elements())))
    return;
  const DropoutMask mask(d, x.dims);
  const int64_t per = x.dims.perExample();
  parallelRanges(team_, x.dims.n, 1, [&](int64_t first, int64_t last) {
    const DropoutMask m = mask;
    for (int64_t n = first; n < last; ++n) {
      const uint64_t key = m.rowKey(int(n));
      applyMask<false>(m, key, per, x.data + n * per, y.data + n * per);
    }
  });
}

void CpuImpl::dropoutBackward(const DropoutDesc& d, ConstTensorView dy, TensorView dx, float beta) {
  checkSameDims(dy.dims, dx.dims);
  const DropoutMask mask(d, dy.dims);
  scaleForBeta(dx, beta);
  if (!runs(MemKernel::kDropoutBwd, double(dy.elements())))
    return;
  const int64_t per = dy.dims.perExample();
  parallelRanges(team_, dy.dims.n, 1, [&](int64_t first, int64_t last) {
    const DropoutMask m = mask;
    for (int64_t n = first; n < last; ++n) {
      const uint64_t key = m.rowKey(int(n));
      applyMask<true>(m, key, per, dy.data + n * per, dx.data + n * per);
    }
  });
}

// Priced as the zero kernel whatever the value (the Model fills only zeros).
void CpuImpl::fill(std::span<float> x, float value) {
  if (runs(MemKernel::kZero, double(x.size())))
    std::fill(x.begin(), x.end(), value);
}

void CpuImpl::add(ConstTensorView a, ConstTensorView b, TensorView y) {
  checkSameDims(a.dims, b.dims);
  checkSameDims(a.dims, y.dims);
  if (!runs(MemKernel::kAdd, double(a.elements())))
    return;
  parallelRanges(team_, a.elements(), kElementGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      y.data[i] = a.data[i] + b.data[i];
  });
}

void CpuImpl::accumulate(ConstTensorView src, TensorView dst, float beta) {
  checkSameDims(src.dims, dst.dims);
  if (!runs(beta == 0.0f ? MemKernel::kCopy : MemKernel::kAccumulate, double(src.elements())))
    return;
  parallelRanges(team_, src.elements(), kElementGrain, [&](int64_t begin, int64_t end) {
    if (beta == 0.0f) {
      std::copy(src.data + begin, src.data + end, dst.data + begin);
    } else {
      for (int64_t i = begin; i < end; ++i)
        dst.data[i] = beta * dst.data[i] + src.data[i];
    }
  });
}

// ---- gelu ------------------------------------------------------------------

namespace {
constexpr float kGeluK0 = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluK1 = 0.044715f;
constexpr int64_t kGeluBlock = 256;  // elements: the unit gelu's work is split in
}  // namespace

// Eigen's vectorised tanh: std::tanh is a scalar libm call, ~20x slower than
// relu per element here.
void CpuImpl::geluForward(ConstTensorView x, TensorView y) {
  checkSameDims(x.dims, y.dims);
  if (!runs(MemKernel::kGeluFwd, double(x.elements())))
    return;
  // Ranges of whole 256-element blocks: Eigen runs the elements of a range's
  // unaligned head and odd tail through the scalar tanh, so ranges cut
  // elsewhere would change which elements take which path (and their bits)
  // with the thread count.
  const int64_t count = x.elements();
  const int64_t blocks = (count + kGeluBlock - 1) / kGeluBlock;
  parallelRanges(team_, blocks, kElementGrain / kGeluBlock, [&](int64_t b0, int64_t b1) {
    const int64_t first = b0 * kGeluBlock, last = std::min(count, b1 * kGeluBlock);
    const auto in = Eigen::Map<const Eigen::ArrayXf>(x.data + first, last - first);
    Eigen::Map<Eigen::ArrayXf>(y.data + first, last - first) =
        0.5f * in * (1.0f + (kGeluK0 * (in + kGeluK1 * in.cube())).tanh());
  });
}

void CpuImpl::geluBackward(ConstTensorView x, ConstTensorView dy, TensorView dx, float beta) {
  checkSameDims(x.dims, dy.dims);
  checkSameDims(x.dims, dx.dims);
  const int64_t count = x.elements();
  if (!runs(MemKernel::kGeluBwd, double(count)))
    return;
  constexpr int64_t kChunk = kGeluBlock;
  const int64_t blocks = (count + kChunk - 1) / kChunk;
  parallelRanges(team_, blocks, kElementGrain / kChunk, [&](int64_t b0, int64_t b1) {
    Eigen::Array<float, kChunk, 1> th;
    for (int64_t i = b0 * kChunk; i < std::min(count, b1 * kChunk); i += kChunk) {
      const int64_t m = std::min(kChunk, count - i);
      const auto in = Eigen::Map<const Eigen::ArrayXf>(x.data + i, m);
      const auto g = Eigen::Map<const Eigen::ArrayXf>(dy.data + i, m);
      auto out = Eigen::Map<Eigen::ArrayXf>(dx.data + i, m);
      auto t = th.head(m);
      t = (kGeluK0 * (in + kGeluK1 * in.cube())).tanh();
      const auto slope = 0.5f * (1.0f + t) + 0.5f * in * (1.0f - t.square()) * kGeluK0 *
                                                 (1.0f + 3.0f * kGeluK1 * in.square());
      if (beta == 0.0f)
        out = g * slope;
      else
        out = beta * out + g * slope;
    }
  });
}

// ---- swiglu -----------------------------------------------------------------------

namespace {
// The gate's halves of x and the output of one example's (channel-major)
// block: a is channels [0, f), b is [f, 2f); y and dy have f channels.
void checkSwiglu(const Dims& x, const Dims& y) {
  STRATA_ENFORCE_OP(x.n, ==, y.n);
  STRATA_ENFORCE_OP(x.c, ==, 2 * y.c);
  STRATA_ENFORCE_OP(x.h, ==, y.h);
  STRATA_ENFORCE_OP(x.w, ==, y.w);
}
inline float sigmoid(float a) {
  return 1.0f / (1.0f + std::exp(-a));
}
}  // namespace

void CpuImpl::swigluForward(ConstTensorView x, TensorView y) {
  checkSwiglu(x.dims, y.dims);
  if (!runs(MemKernel::kSwigluFwd, double(y.elements())))
    return;
  const int64_t half = y.dims.perExample();
  // Elements are independent: the bits do not depend on the split.
  parallelRanges(team_, y.elements(), kElementGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t n = i / half, j = i % half;
      const float a = x.data[2 * n * half + j], b = x.data[(2 * n + 1) * half + j];
      y.data[i] = a * sigmoid(a) * b;
    }
  });
}

void CpuImpl::swigluBackward(ConstTensorView x, ConstTensorView dy, TensorView dx, float beta) {
  checkSwiglu(x.dims, dy.dims);
  checkSameDims(x.dims, dx.dims);
  if (!runs(MemKernel::kSwigluBwd, double(dy.elements())))
    return;
  const int64_t half = dy.dims.perExample();
  parallelRanges(team_, dy.elements(), kElementGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t n = i / half, j = i % half;
      const int64_t ia = 2 * n * half + j, ib = ia + half;
      const float a = x.data[ia], b = x.data[ib], g = dy.data[i];
      const float s = sigmoid(a);
      // silu'(a) = s + a s (1 - s) = s (1 + a (1 - s)).
      const float da = g * b * s * (1.0f + a * (1.0f - s));
      const float db = g * a * s;
      dx.data[ia] = beta == 0.0f ? da : beta * dx.data[ia] + da;
      dx.data[ib] = beta == 0.0f ? db : beta * dx.data[ib] + db;
    }
  });
}

// ---- vision networks: activations, concat, mul ----------------------------------

namespace {

// The kernels of model/kernels.h an activation runs as: sigmoid, silu and
// tanh (exp), the piecewise linear ones.
bool transcendental(Activation fn) {
  return fn == Activation::kSigmoid || fn == Activation::kSilu || fn == Activation::kTanh;
}
MemKernel forwardKernel(Activation fn) {
  return transcendental(fn) ? MemKernel::kSigmoidFwd : MemKernel::kHardActFwd;
}
MemKernel backwardKernel(Activation fn) {
  return transcendental(fn) ? MemKernel::kSigmoidBwd : MemKernel::kHardActBwd;
}

// Whether backward reads the output (else the input): Activation's contract.
bool gradientFromOutput(Activation fn) {
  return fn == Activation::kSigmoid || fn == Activation::kRelu6 || fn == Activation::kTanh;
}

// Calls f with the element function of fn (a lambda per activation, so each
// loop inlines its own).
template <class F>
void withActivation(Activation fn, F&& f) {
  namespace e = kernels::element;
  switch (fn) {
    case Activation::kSigmoid:
      return f([](float x) { return e::sigmoid(x); });
    case Activation::kSilu:
      return f([](float x) { return e::silu(x); });
    case Activation::kRelu6:
      return f([](float x) { return e::relu6(x); });
    case Activation::kHardSigmoid:
      return f([](float x) { return e::hardSigmoid(x); });
    case Activation::kHardSwish:
      return f([](float x) { return e::hardSwish(x); });
    case Activation::kTanh:
      return f([](float x) { return e::tanhValue(x); });
  }
}

// The same for the gradients: grad(v, dy), v the output or the input
// (gradientFromOutput).
template <class F>
void withActivationGrad(Activation fn, F&& f) {
  namespace e = kernels::element;
  switch (fn) {
    case Activation::kSigmoid:
      return f([](float y, float dy) { return e::sigmoidGrad(y, dy); });
    case Activation::kSilu:
      return f([](float x, float dy) { return e::siluGrad(x, dy); });
    case Activation::kRelu6:
      return f([](float y, float dy) { return e::relu6Grad(y, dy); });
    case Activation::kHardSigmoid:
      return f([](float x, float dy) { return e::hardSigmoidGrad(x, dy); });
    case Activation::kHardSwish:
      return f([](float x, float dy) { return e::hardSwishGrad(x, dy); });
    case Activation::kTanh:
      return f([](float y, float dy) { return e::tanhGrad(y, dy); });
  }
}

// sum of a[i] b[i] over n in an order fixed by n alone (orderedSum's lanes).
float orderedDot(const float* __restrict a, const float* __restrict b, int64_t n) {
  float lanes[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int j = 0; j < 16; ++j)
      lanes[j] += a[i + j] * b[i + j];
  float sum = 0;
  for (float lane : lanes)
    sum += lane;
  for (; i < n; ++i)
    sum += a[i] * b[i];
  return sum;
}

// Whether mul's gate g is one value per channel of x (n, c, 1, 1) broadcast
// over x's positions; else it has x's dims.
bool perChannelGate(const Dims& x, const Dims& g) {
  STRATA_ENFORCE_OP(g.n, ==, x.n);
  STRATA_ENFORCE_OP(g.c, ==, x.c);
  if (g.h == x.h && g.w == x.w)
    return false;
  STRATA_ENFORCE(g.h == 1 && g.w == 1);
  return true;
}

// concat's copies: one example's block of `per` floats from src to dst, for
// each of n examples, the examples split over the team.
void copyBlocks(ThreadTeam& team, int n, const float* src, int64_t srcStride, float* dst,
                int64_t dstStride, int64_t per, float beta) {
  parallelRanges(team, n, std::max<int64_t>(1, kElementGrain / std::max<int64_t>(per, 1)),
                 [&](int64_t first, int64_t last) {
                   for (int64_t e = first; e < last; ++e) {
                     const float* __restrict from = src + e * srcStride;
                     float* __restrict to = dst + e * dstStride;
                     if (beta == 0.0f) {
                       std::copy_n(from, per, to);
                     } else {
                       for (int64_t i = 0; i < per; ++i)
                         to[i] = beta * to[i] + from[i];
                     }
                   }
                 });
}

}  // namespace

void CpuImpl::activationForward(Activation fn, ConstTensorView x, TensorView y) {
  checkSameDims(x.dims, y.dims);
  if (!runs(forwardKernel(fn), double(x.elements())))
    return;
  // Elements are independent: the bits do not depend on the split.
  const float* __restrict in = x.data;
  float* __restrict out = y.data;
  withActivation(fn, [&](auto f) {
    parallelRanges(team_, x.elements(), kElementGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i)
        out[i] = f(in[i]);
    });
  });
}

void CpuImpl::activationBackward(Activation fn, ConstTensorView x, ConstTensorView y,
                                 ConstTensorView dy, TensorView dx, float beta) {
  const ConstTensorView from = gradientFromOutput(fn) ? y : x;
  checkSameDims(from.dims, dy.dims);
  checkSameDims(dy.dims, dx.dims);
  if (!runs(backwardKernel(fn), double(dy.elements())))
    return;
  const float* __restrict v = from.data;
  const float* __restrict g = dy.data;
  float* __restrict d = dx.data;
  withActivationGrad(fn, [&](auto grad) {
    parallelRanges(team_, dy.elements(), kElementGrain, [&](int64_t begin, int64_t end) {
      if (beta == 0.0f) {
        for (int64_t i = begin; i < end; ++i)
          d[i] = grad(v[i], g[i]);
      } else {
        for (int64_t i = begin; i < end; ++i)
          d[i] = beta * d[i] + grad(v[i], g[i]);
      }
    });
  });
}

void CpuImpl::copyIntoChannels(ConstTensorView src, TensorView dst, int channelOffset) {
  addIntoChannels(src, dst, channelOffset, 0.0f);  // beta 0: a copy
}

void CpuImpl::copyFromChannels(ConstTensorView src, int channelOffset, TensorView dst, float beta) {
  STRATA_ENFORCE_OP(src.dims.n, ==, dst.dims.n);
  STRATA_ENFORCE_OP(src.dims.h, ==, dst.dims.h);
  STRATA_ENFORCE_OP(src.dims.w, ==, dst.dims.w);
  STRATA_ENFORCE(channelOffset >= 0 && channelOffset + dst.dims.c <= src.dims.c);
  // As accumulate: an overwrite is a copy, else an accumulate.
  if (!runs(beta == 0.0f ? MemKernel::kCopy : MemKernel::kAccumulate, double(dst.elements())))
    return;
  const int64_t plane = int64_t{src.dims.h} * src.dims.w;
  copyBlocks(team_, src.dims.n, src.data + channelOffset * plane, src.dims.perExample(), dst.data,
             dst.dims.perExample(), dst.dims.perExample(), beta);
}

void CpuImpl::addIntoChannels(ConstTensorView src, TensorView dst, int channelOffset, float beta) {
  STRATA_ENFORCE_OP(src.dims.n, ==, dst.dims.n);
  STRATA_ENFORCE_OP(src.dims.h, ==, dst.dims.h);
  STRATA_ENFORCE_OP(src.dims.w, ==, dst.dims.w);
  STRATA_ENFORCE(channelOffset >= 0 && channelOffset + src.dims.c <= dst.dims.c);
  if (!runs(beta == 0.0f ? MemKernel::kCopy : MemKernel::kAccumulate, double(src.elements())))
    return;
  const int64_t plane = int64_t{src.dims.h} * src.dims.w;
  copyBlocks(team_, src.dims.n, src.data, src.dims.perExample(), dst.data + channelOffset * plane,
             dst.dims.perExample(), src.dims.perExample(), beta);
}

void CpuImpl::shuffleChannels(ConstTensorView x, int groups, TensorView y, float beta) {
  checkSameDims(x.dims, y.dims);
  const int c = x.dims.c;
  STRATA_ENFORCE(groups >= 1 && c % groups == 0);
  if (!runs(beta == 0.0f ? MemKernel::kCopy : MemKernel::kAccumulate, double(x.elements())))
    return;
  // One plane per (example, output channel): channel o = j * groups + i
  // reads channel i * (c / groups) + j.
  const int64_t plane = int64_t{x.dims.h} * x.dims.w;
  const int perGroup = c / groups;
  const float* in = x.data;
  float* out = y.data;
  parallelRanges(team_, int64_t{x.dims.n} * c, std::max<int64_t>(1, kElementGrain / plane),
                 [&](int64_t first, int64_t last) {
                   for (int64_t p = first; p < last; ++p) {
                     const int64_t e = p / c;
                     const int o = static_cast<int>(p % c);
                     const int from = (o % groups) * perGroup + o / groups;
                     const float* __restrict src = in + (e * c + from) * plane;
                     float* __restrict dst = out + p * plane;
                     if (beta == 0.0f) {
                       std::copy_n(src, plane, dst);
                     } else {
                       for (int64_t k = 0; k < plane; ++k)
                         dst[k] = beta * dst[k] + src[k];
                     }
                   }
                 });
}

void CpuImpl::scaleChannels(ConstTensorView x, const float* gamma, TensorView y, float beta) {
  checkSameDims(x.dims, y.dims);
  if (!runs(MemKernel::kScaleFwd, double(y.elements())))
    return;
  const int64_t plane = int64_t{x.dims.h} * x.dims.w;
  const int c = x.dims.c;
  const float* in = x.data;
  float* out = y.data;
  parallelRanges(team_, int64_t{x.dims.n} * c, std::max<int64_t>(1, kElementGrain / plane),
                 [&](int64_t first, int64_t last) {
                   for (int64_t pl = first; pl < last; ++pl) {
                     const float g = gamma[pl % c];
                     const float* __restrict src = in + pl * plane;
                     float* __restrict dst = out + pl * plane;
                     if (beta == 0.0f) {
                       for (int64_t k = 0; k < plane; ++k)
                         dst[k] = g * src[k];
                     } else {
                       for (int64_t k = 0; k < plane; ++k)
                         dst[k] = beta * dst[k] + g * src[k];
                     }
                   }
                 });
}

void CpuImpl::scaleBackwardWeights(ConstTensorView x, ConstTensorView dy, float* dgamma) {
  checkSameDims(x.dims, dy.dims);
  if (!runs(MemKernel::kScaleGrad, double(x.elements())))
    return;
  // Channels split over the team; each sums its planes over the examples in
  // order, so the bits do not depend on the split.
  const int64_t plane = int64_t{x.dims.h} * x.dims.w;
  const int c = x.dims.c;
  parallelRanges(team_, c, std::max<int64_t>(1, kElementGrain / (plane * x.dims.n)),
                 [&](int64_t first, int64_t last) {
                   for (int64_t ch = first; ch < last; ++ch) {
                     double sum = 0;
                     for (int n = 0; n < x.dims.n; ++n) {
                       const float* a = x.data + (int64_t{n} * c + ch) * plane;
                       const float* b = dy.data + (int64_t{n} * c + ch) * plane;
                       for (int64_t k = 0; k < plane; ++k)
                         sum += double(a[k]) * double(b[k]);
                     }
                     dgamma[ch] += static_cast<float>(sum);
                   }
                 });
}

// ---- vision transformers: positions of a sequence ---------------------------

void CpuImpl::copyPositions(ConstTensorView src, int srcFirst, TensorView dst, int dstFirst,
                            int count, float beta) {
  STRATA_ENFORCE_OP(src.dims.n, ==, dst.dims.n);
  STRATA_ENFORCE_OP(src.dims.c, ==, dst.dims.c);
  const int64_t srcPlane = int64_t{src.dims.h} * src.dims.w;
  const int64_t dstPlane = int64_t{dst.dims.h} * dst.dims.w;
  STRATA_ENFORCE_OP(count, >=, 0);
  STRATA_ENFORCE(srcFirst >= 0 && srcFirst + int64_t{count} <= srcPlane);
  STRATA_ENFORCE(dstFirst >= 0 && dstFirst + int64_t{count} <= dstPlane);
  const int64_t planes = int64_t{src.dims.n} * src.dims.c;
  // As accumulate: an overwrite is a copy, else an accumulate.
  if (!runs(beta == 0.0f ? MemKernel::kCopy : MemKernel::kAccumulate,
            double(planes) * double(count)))
    return;
  // One run of `count` positions per (example, channel), planes split over
  // the team: each element is computed alone, the bits do not depend on it.
  parallelRanges(team_, planes, std::max<int64_t>(1, kElementGrain / std::max(count, 1)),
                 [&](int64_t first, int64_t last) {
                   for (int64_t pl = first; pl < last; ++pl) {
                     const float* __restrict from = src.data + pl * srcPlane + srcFirst;
                     float* __restrict to = dst.data + pl * dstPlane + dstFirst;
                     if (beta == 0.0f) {
                       std::copy_n(from, count, to);
                     } else {
                       for (int k = 0; k < count; ++k)
                         to[k] = beta * to[k] + from[k];
                     }
                   }
                 });
}

void CpuImpl::broadcastPositions(const float* table, int count, TensorView dst, int dstFirst) {
  const int64_t plane = int64_t{dst.dims.h} * dst.dims.w;
  STRATA_ENFORCE_OP(count, >=, 0);
  STRATA_ENFORCE(dstFirst >= 0 && dstFirst + int64_t{count} <= plane);
  const int c = dst.dims.c;
  const int64_t planes = int64_t{dst.dims.n} * c;
  if (!runs(MemKernel::kCopy, double(planes) * double(count)))
    return;
  parallelRanges(team_, planes, std::max<int64_t>(1, kElementGrain / std::max(count, 1)),
                 [&](int64_t first, int64_t last) {
                   for (int64_t pl = first; pl < last; ++pl)
                     std::copy_n(table + (pl % c) * count, count, dst.data + pl * plane + dstFirst);
                 });
}

void CpuImpl::addTable(ConstTensorView x, const float* table, TensorView y) {
  checkSameDims(x.dims, y.dims);
  if (!runs(MemKernel::kAdd, double(y.elements())))
    return;
  const int64_t per = x.dims.perExample();
  const float* __restrict in = x.data;
  const float* __restrict p = table;
  float* __restrict out = y.data;
  // Elements are independent; each range walks its examples' runs so that
  // the inner loop is a plain vector add.
  parallelRanges(team_, y.elements(), kElementGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end;) {
      const int64_t e = i / per;
      const int64_t j = i - e * per, run = std::min(end, (e + 1) * per) - i;
      for (int64_t k = 0; k < run; ++k)
        out[i + k] = in[i + k] + p[j + k];
      i += run;
    }
  });
}

void CpuImpl::sumPositions(ConstTensorView src, int srcFirst, int count, float* table) {
  const int64_t plane = int64_t{src.dims.h} * src.dims.w;
  STRATA_ENFORCE_OP(count, >=, 0);
  STRATA_ENFORCE(srcFirst >= 0 && srcFirst + int64_t{count} <= plane);
  const int n = src.dims.n;
  const int64_t entries = int64_t{src.dims.c} * count;
  if (!runs(MemKernel::kReduce, double(n) * double(entries)))
    return;
  // Table entries split over the team; each sums its examples in order in
  // double (as scaleBackwardWeights), so the bits do not depend on the split.
  const int64_t per = src.dims.perExample();
  parallelRanges(team_, entries, std::max<int64_t>(1, kElementGrain / std::max(n, 1)),
                 [&](int64_t first, int64_t last) {
                   for (int64_t k = first; k < last; ++k) {
                     const float* at = src.data + (k / count) * plane + srcFirst + k % count;
                     double sum = 0;
                     for (int e = 0; e < n; ++e)
                       sum += double(at[e * per]);
                     table[k] += static_cast<float>(sum);
                   }
                 });
}

void CpuImpl::mulForward(ConstTensorView x, ConstTensorView g, TensorView y) {
  checkSameDims(x.dims, y.dims);
  const bool perChannel = perChannelGate(x.dims, g.dims);
  if (!runs(MemKernel::kMulFwd, double(y.elements())))
    return;
  const float* __restrict in = x.data;
  const float* __restrict gate = g.data;
  float* __restrict out = y.data;
  if (!perChannel) {
    parallelRanges(team_, y.elements(), kElementGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i)
        out[i] = in[i] * gate[i];
    });
    return;
  }
  const int64_t plane = int64_t{x.dims.h} * x.dims.w;
  const int64_t planes = int64_t{x.dims.n} * x.dims.c;
  parallelRanges(team_, planes, std::max<int64_t>(1, kElementGrain / plane),
                 [&](int64_t first, int64_t last) {
                   for (int64_t pl = first; pl < last; ++pl) {
                     const float gv = gate[pl];
                     for (int64_t p = pl * plane; p < (pl + 1) * plane; ++p)
                       out[p] = in[p] * gv;
                   }
                 });
}

void CpuImpl::mulBackward(ConstTensorView x, ConstTensorView g, ConstTensorView dy, TensorView dx,
                          float betaX, TensorView dg, float betaG) {
  checkSameDims(x.dims, dy.dims);
  checkSameDims(x.dims, dx.dims);
  checkSameDims(g.dims, dg.dims);
  const bool perChannel = perChannelGate(x.dims, g.dims);
  if (!runs(MemKernel::kMulBwd, double(dy.elements())))
    return;
  if (!perChannel) {
    // Not restrict: dx and dg may be one buffer (x * x), each element then
    // adding both terms, dx's first.
    const float* in = x.data;
    const float* gate = g.data;
    const float* grad = dy.data;
    float* dIn = dx.data;
    float* dGate = dg.data;
    parallelRanges(team_, dy.elements(), kElementGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const float a = grad[i] * gate[i], b = grad[i] * in[i];
        dIn[i] = betaX == 0.0f ? a : betaX * dIn[i] + a;
        dGate[i] = betaG == 0.0f ? b : betaG * dGate[i] + b;
      }
    });
    return;
  }
  // A per-channel gate: each plane's dx and its gate's dg (the plane's sum),
  // planes split over the team.
  const int64_t plane = int64_t{x.dims.h} * x.dims.w;
  const int64_t planes = int64_t{x.dims.n} * x.dims.c;
  parallelRanges(team_, planes, std::max<int64_t>(1, kElementGrain / plane),
                 [&](int64_t first, int64_t last) {
                   for (int64_t pl = first; pl < last; ++pl) {
                     const float* __restrict in = x.data + pl * plane;
                     const float* __restrict grad = dy.data + pl * plane;
                     float* __restrict dIn = dx.data + pl * plane;
                     const float gv = g.data[pl];
                     if (betaX == 0.0f) {
                       for (int64_t p = 0; p < plane; ++p)
                         dIn[p] = grad[p] * gv;
                     } else {
                       for (int64_t p = 0; p < plane; ++p)
                         dIn[p] = betaX * dIn[p] + grad[p] * gv;
                     }
                     const float sum = orderedDot(grad, in, plane);
                     dg.data[pl] = betaG == 0.0f ? sum : betaG * dg.data[pl] + sum;
                   }
                 });
}

void CpuImpl::zero(float* x, int64_t count) {
  scaleForAccumulate(x, count, 0.0f);
}

}  // namespace strata::nn::STRATA_CPU_ISA

// The CPU twins of kernels.h: plain loops over the element functions of
// elementwise.h, in the loop order of CpuBackend wherever that order decides
// a sum (the reductions below keep CpuBackend's order and precision, except
// biasGrad, which sums in double where CpuBackend's Eigen sums in float).
#include <algorithm>
#include <cmath>
#include <limits>

#include "strata/kernels/elementwise.h"
#include "strata/kernels/kernels.h"

namespace strata::kernels::twin {

void fill(float* x, int64_t count, float value) {
  std::fill_n(x, count, value);
}

void syntheticTokens(const SyntheticTokens& batch, float* out) {
  const auto vocab = static_cast<uint64_t>(batch.vocab);
  for (int i = 0; i < batch.n; ++i)
    for (int64_t p = 0; p < batch.positions; ++p)
      *out++ = static_cast<float>(element::syntheticToken(
          batch.seed, vocab, static_cast<uint64_t>(batch.firstIndex + i), p));
}

void accumulate(const float* src, float* dst, int64_t count, float beta) {
  for (int64_t i = 0; i < count; ++i)
    dst[i] = element::blend(dst + i, src[i], beta);
}

void add(const float* a, const float* b, float* y, int64_t count) {
  for (int64_t i = 0; i < count; ++i)
    y[i] = a[i] + b[i];
}

void reduceAdd(const float* x, float* y, int64_t count) {
  for (int64_t i = 0; i < count; ++i)
    y[i] = y[i] + x[i];
}

void reluForward(const float* x, float* y, int64_t count) {
  for (int64_t i = 0; i < count; ++i)
    y[i] = element::relu(x[i]);
}

void reluBackward(const float* y, const float* dy, float* dx, int64_t count, float beta) {
  for (int64_t i = 0; i < count; ++i)
    dx[i] = element::blend(dx + i, element::reluGrad(y[i], dy[i]), beta);
}

void dropoutForward(const DropoutParams& p, Shape4 shape, const float* x, float* y) {
  const int64_t plane = shape.plane();
  const int64_t perExample = shape.perExample();
  const float scale = element::dropoutScale(p.rate);
  for (int n = 0; n < shape.n; ++n) {
    const uint64_t key = element::dropoutRowKey(p, n);
    for (int64_t i = n * perExample, j = 0; j < perExample; ++i, ++j)
      y[i] = x[i] * element::dropoutFactor(key, element::dropoutIndex(p, plane, j), p.rate, scale);
  }
}

void dropoutBackward(const DropoutParams& p, Shape4 shape, const float* dy, float* dx, float beta) {
  const int64_t plane = shape.plane();
  const int64_t perExample = shape.perExample();
  const float scale = element::dropoutScale(p.rate);
  for (int n = 0; n < shape.n; ++n) {
    const uint64_t key = element::dropoutRowKey(p, n);
    for (int64_t i = n * perExample, j = 0; j < perExample; ++i, ++j)
      dx[i] =
          element::startOfSum(dx + i, beta) +
          dy[i] * element::dropoutFactor(key, element::dropoutIndex(p, plane, j), p.rate, scale);
  }
}

void biasAdd(float* y, const float* bias, int n, int channels, int64_t positions) {
  for (int e = 0; e < n; ++e)
    for (int c = 0; c < channels; ++c) {
      float* row = y + (int64_t{e} * channels + c) * positions;
      for (int64_t i = 0; i < positions; ++i)
        row[i] = row[i] + bias[c];
    }
}

void biasGrad(const float* dy, float* dbias, int n, int channels, int64_t positions) {
  for (int c = 0; c < channels; ++c) {
    double sum = 0;
    for (int e = 0; e < n; ++e) {
      const float* row = dy + (int64_t{e} * channels + c) * positions;
      for (int64_t i = 0; i < positions; ++i)
        sum += row[i];
    }
    dbias[c] += static_cast<float>(sum);
  }
}

void poolForward(const PoolParams& p, int n, const float* x, float* y, int32_t* argmax) {
  const int64_t planes = int64_t{n} * p.c;
  const int64_t inPlane = int64_t{p.inH} * p.inW;
  const int64_t outPlane = int64_t{p.outH} * p.outW;
  for (int64_t pl = 0; pl < planes; ++pl) {
    const float* in = x + pl * inPlane;
    for (int oh = 0; oh < p.outH; ++oh)
      for (int ow = 0; ow < p.outW; ++ow) {
        const int64_t o = pl * outPlane + int64_t{oh} * p.outW + ow;
        if (p.max)
          y[o] = element::poolMax(p, in, oh, ow, argmax + o);
        else
          y[o] = element::poolAverage(p, in, oh, ow);
      }
  }
}

void poolBackward(const PoolParams& p, int n, const float* dy, const int32_t* argmax, float* dx,
                  float beta) {
  const int64_t planes = int64_t{n} * p.c;
  const int64_t inPlane = int64_t{p.inH} * p.inW;
  const int64_t outPlane = int64_t{p.outH} * p.outW;
  for (int64_t pl = 0; pl < planes; ++pl) {
    const float* g = dy + pl * outPlane;
    for (int ih = 0; ih < p.inH; ++ih)
      for (int iw = 0; iw < p.inW; ++iw) {
        float* out = dx + pl * inPlane + int64_t{ih} * p.inW + iw;
        const float start = element::startOfSum(out, beta);
        *out = p.max ? element::poolMaxGrad(p, g, argmax + pl * outPlane, ih, iw, start)
                     : element::poolAverageGrad(p, g, ih, iw, start);
      }
  }
}

void lrnForward(const LrnParams& p, Shape4 shape, const float* x, float* y, float* scale) {
  const int64_t plane = shape.plane();
  for (int n = 0; n < shape.n; ++n) {
    const int64_t base = n * shape.perExample();
    for (int c = 0; c < shape.c; ++c)
      for (int64_t q = 0; q < plane; ++q) {
        const int64_t i = base + c * plane + q;
        scale[i] = element::lrnScale(p, x + base + q, plane, c, shape.c);
        y[i] = element::lrnOutput(p, x[i], scale[i]);
      }
  }
}

void lrnBackward(const LrnParams& p, Shape4 shape, const float* x, const float* y,
                 const float* scale, const float* dy, float* dx, float beta) {
  const int64_t plane = shape.plane();
  for (int n = 0; n < shape.n; ++n) {
    const int64_t base = n * shape.perExample();
    for (int c = 0; c < shape.c; ++c)
      for (int64_t q = 0; q < plane; ++q) {
        const int64_t at = base + q;
        const int64_t i = at + c * plane;
        dx[i] = element::lrnGrad(p, x + at, y + at, scale + at, dy + at, plane, c, shape.c, dx + i,
                                 beta);
      }
  }
}

namespace {

// The statistics of channel c, two passes in double lanes as CpuBackend
// takes them (element::forEachInLanes).
element::ChannelStats channelStats(Shape4 shape, const float* x, int c, float eps) {
  const int64_t plane = shape.plane();
  const double count = double(shape.n) * double(plane);
  double sums[element::kSumLanes] = {};
  for (int n = 0; n < shape.n; ++n) {
    const float* row = x + (int64_t{n} * shape.c + c) * plane;
    element::forEachInLanes(plane, [&](int j, int64_t i) { sums[j] += row[i]; });
  }
  const double sum = element::addLanes(sums);
  const double mean = sum / count;
  double squares[element::kSumLanes] = {};
  for (int n = 0; n < shape.n; ++n) {
    const float* row = x + (int64_t{n} * shape.c + c) * plane;
    element::forEachInLanes(
        plane, [&](int j, int64_t i) { squares[j] += element::squaredDeviation(row[i], mean); });
  }
  return element::channelStats(sum, element::addLanes(squares), count, eps);
}

// Sums over channel c of dy and of dy * xhat (double).
struct GradientSums {
  double dy = 0;
  double dyXhat = 0;
};

GradientSums gradientSums(Shape4 shape, const float* x, const float* dy, int c,
                          element::ChannelStats st) {
  const int64_t plane = shape.plane();
  double sumDy[element::kSumLanes] = {}, sumDyXhat[element::kSumLanes] = {};
  for (int n = 0; n < shape.n; ++n) {
    const int64_t off = (int64_t{n} * shape.c + c) * plane;
    element::forEachInLanes(plane, [&](int j, int64_t i) {
      sumDy[j] += dy[off + i];
      sumDyXhat[j] += element::dyXhat(st, x[off + i], dy[off + i]);
    });
  }
  return {element::addLanes(sumDy), element::addLanes(sumDyXhat)};
}

}  // namespace

void batchNormForward(Shape4 shape, const float* x, const float* gamma, const float* shift,
                      float eps, float* y) {
  const int64_t plane = shape.plane();
  for (int c = 0; c < shape.c; ++c) {
    const element::ChannelStats st = channelStats(shape, x, c, eps);
    for (int n = 0; n < shape.n; ++n) {
      const int64_t off = (int64_t{n} * shape.c + c) * plane;
      for (int64_t i = 0; i < plane; ++i)
        y[off + i] = element::batchNormOutput(st, gamma[c], shift[c], x[off + i]);
    }
  }
}

void batchNormBackwardData(Shape4 shape, const float* x, const float* dy, const float* gamma,
                           float eps, float* dx, float beta) {
  const int64_t plane = shape.plane();
  const double m = double(shape.n) * double(plane);
  for (int c = 0; c < shape.c; ++c) {
    const element::ChannelStats st = channelStats(shape, x, c, eps);
    const GradientSums sums = gradientSums(shape, x, dy, c, st);
    const element::GradientMeans means = element::gradientMeans(sums.dy, sums.dyXhat, m);
    for (int n = 0; n < shape.n; ++n) {
      const int64_t off = (int64_t{n} * shape.c + c) * plane;
      for (int64_t i = 0; i < plane; ++i) {
        const float g = element::batchNormGrad(st, gamma[c], means, x[off + i], dy[off + i]);
        dx[off + i] = element::blend(dx + off + i, g, beta);
      }
    }
  }
}

void batchNormBackwardWeights(Shape4 shape, const float* x, const float* dy, float eps,
                              float* dgamma, float* dshift) {
  for (int c = 0; c < shape.c; ++c) {
    const element::ChannelStats st = channelStats(shape, x, c, eps);
    const GradientSums sums = gradientSums(shape, x, dy, c, st);
    dgamma[c] += static_cast<float>(sums.dyXhat);
    dshift[c] += static_cast<float>(sums.dy);
  }
}

void softmaxStats(Shape4 shape, const float* logits, float* stats) {
  const int64_t plane = shape.plane();
  for (int n = 0; n < shape.n; ++n) {
    const float* z = logits + n * shape.perExample();
    for (int64_t q = 0; q < plane; ++q) {
      float max = -std::numeric_limits<float>::infinity();
      for (int c = 0; c < shape.c; ++c)
        max = element::softmaxMax(max, z[c * plane + q]);
      double sum = 0;
      for (int c = 0; c < shape.c; ++c)
        sum += element::softmaxTerm(z[c * plane + q], max);
      float* st = stats + 2 * (n * plane + q);
      st[0] = max;
      st[1] = static_cast<float>(sum);
    }
  }
}

void softmaxProbabilities(Shape4 shape, const float* logits, const float* stats, float* y) {
  const int64_t plane = shape.plane();
  for (int n = 0; n < shape.n; ++n) {
    const int64_t base = n * shape.perExample();
    for (int c = 0; c < shape.c; ++c)
      for (int64_t q = 0; q < plane; ++q) {
        const int64_t i = base + c * plane + q;
        y[i] = element::softmaxProbability(logits[i], stats + 2 * (n * plane + q));
      }
  }
}

LossSum softmaxLoss(Shape4 shape, const float* logits, const float* stats, const int32_t* labels,
                    int classOffset) {
  const int64_t plane = shape.plane();
  LossSum out;
  for (int n = 0; n < shape.n; ++n)
    for (int64_t q = 0; q < plane; ++q) {
      const int64_t position = n * plane + q;
      const int c = element::heldClass(labels[position], classOffset, shape.c);
      if (c < 0)
        continue;
      const float z = logits[n * shape.perExample() + c * plane + q];
      out.loss += element::softmaxLossTerm(stats + 2 * position, z);
      out.correct += element::softmaxCorrect(stats + 2 * position, z) ? 1 : 0;
    }
  return out;
}

void softmaxBackward(Shape4 shape, const float* logits, const float* stats, const int32_t* labels,
                     int classOffset, float scale, float* dlogits, float beta) {
  const int64_t plane = shape.plane();
  for (int n = 0; n < shape.n; ++n) {
    const int64_t base = n * shape.perExample();
    for (int c = 0; c < shape.c; ++c)
      for (int64_t q = 0; q < plane; ++q) {
        const int64_t position = n * plane + q;
        const int64_t i = base + c * plane + q;
        const bool isLabel = labels[position] - classOffset == c;
        const float g = element::softmaxGrad(logits[i], stats + 2 * position, isLabel, scale);
        dlogits[i] = element::blend(dlogits + i, g, beta);
      }
  }
}

void sgdMomentum(float* w, float* v, const float* g, int64_t count, float learningRate,
                 float momentum, float weightDecay) {
  for (int64_t i = 0; i < count; ++i)
    element::sgdMomentum(w + i, v + i, g[i], learningRate, momentum, weightDecay);
}

}  // namespace strata::kernels::twin

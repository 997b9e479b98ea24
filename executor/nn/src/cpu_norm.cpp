// The CPU kernels of one ISA (cpu_kernels.cpp): batch normalisation (its
// statistics in the CUDA twins' order), layer normalisation and RMS
// normalisation.
#include <algorithm>
#include <cmath>
#include <utility>

#include "cpu_kernels.h"
#include "shape_checks.h"
#include "strata/kernels/elementwise.h"

namespace strata::nn::STRATA_CPU_ISA {

namespace {

// Per-channel batch statistics of a view, accumulated in double lanes
// (kernels::element::forEachInLanes, the twins' order) so that the variance
// of large batches does not lose digits and the sums vectorise.
using ChannelStats = kernels::element::ChannelStats;
using kernels::element::addLanes;
using kernels::element::forEachInLanes;
using kernels::element::kSumLanes;

ChannelStats channelStats(ConstTensorView x, int c, float eps) {
  const int64_t plane = int64_t{x.dims.h} * x.dims.w;
  const double count = double(x.dims.n) * double(plane);
  double sums[kSumLanes] = {};
  for (int n = 0; n < x.dims.n; ++n) {
    const float* p = x.data + (int64_t{n} * x.dims.c + c) * plane;
    forEachInLanes(plane, [&](int j, int64_t i) { sums[j] += p[i]; });
  }
  const double sum = addLanes(sums);
  const double mean = sum / count;
  double squares[kSumLanes] = {};
  for (int n = 0; n < x.dims.n; ++n) {
    const float* p = x.data + (int64_t{n} * x.dims.c + c) * plane;
    forEachInLanes(plane, [&](int j, int64_t i) { squares[j] += (p[i] - mean) * (p[i] - mean); });
  }
  return kernels::element::channelStats(sum, addLanes(squares), count, eps);
}

// Sums over channel c of dy and of dy xhat, in double lanes (the twins').
std::pair<double, double> gradientSums(ConstTensorView x, ConstTensorView dy, int c,
                                       ChannelStats st) {
  const int64_t plane = int64_t{x.dims.h} * x.dims.w;
  double sumDy[kSumLanes] = {}, sumDyXhat[kSumLanes] = {};
  for (int n = 0; n < x.dims.n; ++n) {
    const int64_t off = (int64_t{n} * x.dims.c + c) * plane;
    forEachInLanes(plane, [&](int j, int64_t i) {
      sumDy[j] += dy.data[off + i];
      sumDyXhat[j] += dy.data[off + i] * (x.data[off + i] - st.mean) * st.invStd;
    });
  }
  return {addLanes(sumDy), addLanes(sumDyXhat)};
}

}  // namespace

// ---- batch normalisation --------------------------------------------------

void CpuImpl::batchNormForward(ConstTensorView x, const float* gamma, const float* shift, float eps,
                               TensorView y) {
  checkSameDims(x.dims, y.dims);
  if (!runs(MemKernel::kBatchNormFwd, double(x.elements())))
    return;
  const int64_t plane = int64_t{x.dims.h} * x.dims.w;
  // Channels are independent: each is computed as on one thread.
  parallelRanges(team_, x.dims.c, 1, [&](int64_t first, int64_t last) {
    for (int c = int(first); c < int(last); ++c) {
      const ChannelStats st = channelStats(x, c, eps);
      const float a = gamma[c] * st.invStd;
      const float b = shift[c] - a * st.mean;
      for (int n = 0; n < x.dims.n; ++n) {
        const int64_t off = (int64_t{n} * x.dims.c + c) * plane;
        for (int64_t i = 0; i < plane; ++i)
          y.data[off + i] = a * x.data[off + i] + b;
      }
    }
  });
}

// With xhat = (x - mean) invStd and m = n*h*w values per channel:
// dx = gamma invStd / m * (m dy - sum(dy) - xhat sum(dy xhat)).
void CpuImpl::batchNormBackwardData(ConstTensorView x, ConstTensorView dy, const float* gamma,
                                    float eps, TensorView dx, float beta) {
  checkSameDims(x.dims, dy.dims);
  checkSameDims(x.dims, dx.dims);
  if (!runs(MemKernel::kBatchNormBwdData, double(x.elements())))
    return;
  const int64_t plane = int64_t{x.dims.h} * x.dims.w;
  const double m = double(x.dims.n) * double(plane);
  // Channels are independent: each is computed as on one thread.
  parallelRanges(team_, x.dims.c, 1, [&](int64_t first, int64_t last) {
    for (int c = int(first); c < int(last); ++c) {
      const ChannelStats st = channelStats(x, c, eps);
      const auto [sumDy, sumDyXhat] = gradientSums(x, dy, c, st);
      const auto meanDy = static_cast<float>(sumDy / m);
      const auto meanDyXhat = static_cast<float>(sumDyXhat / m);
      const float a = gamma[c] * st.invStd;
      for (int n = 0; n < x.dims.n; ++n) {
        const int64_t off = (int64_t{n} * x.dims.c + c) * plane;
        for (int64_t i = 0; i < plane; ++i) {
          const float xhat = (x.data[off + i] - st.mean) * st.invStd;
          const float g = a * (dy.data[off + i] - meanDy - xhat * meanDyXhat);
          dx.data[off + i] = beta == 0.0f ? g : beta * dx.data[off + i] + g;
        }
      }
    }
  });
}

void CpuImpl::batchNormBackwardWeights(ConstTensorView x, ConstTensorView dy, float eps,
                                       float* dgamma, float* dshift) {
  checkSameDims(x.dims, dy.dims);
  if (!runs(MemKernel::kBatchNormBwdWeights, double(x.elements())))
    return;
  // Channels are independent: each is computed as on one thread.
  parallelRanges(team_, x.dims.c, 1, [&](int64_t first, int64_t last) {
    for (int c = int(first); c < int(last); ++c) {
      const ChannelStats st = channelStats(x, c, eps);
      const auto [sumDy, sumDyXhat] = gradientSums(x, dy, c, st);
      dgamma[c] += static_cast<float>(sumDyXhat);
      dshift[c] += static_cast<float>(sumDy);
    }
  });
}

// ---- layer normalisation ----------------------------------------------------
//
// Position p of example n normalises the c values x[n][*][p] (stride h*w).
// Channels are the outer index, so each loop runs over the positions of a
// plane for one channel, with per-position statistics in rowMean_/rowInvStd_.

namespace {
// Mean and 1 / sqrt(biased variance + eps) of every position of one example
// (c x plane values, channel-major).
void positionStats(const float* x, int c, int64_t plane, float eps, float* mean, float* invStd) {
  std::fill_n(mean, plane, 0.0f);
  std::fill_n(invStd, plane, 0.0f);
  for (int ch = 0; ch < c; ++ch) {
    const float* xc = x + ch * plane;
    for (int64_t p = 0; p < plane; ++p)
      mean[p] += xc[p];
  }
  const float inv = 1.0f / static_cast<float>(c);
  for (int64_t p = 0; p < plane; ++p)
    mean[p] *= inv;
  for (int ch = 0; ch < c; ++ch) {
    const float* xc = x + ch * plane;
    for (int64_t p = 0; p < plane; ++p)
      invStd[p] += (xc[p] - mean[p]) * (xc[p] - mean[p]);
  }
  for (int64_t p = 0; p < plane; ++p)
    invStd[p] = 1.0f / std::sqrt(invStd[p] * inv + eps);
}
}  // namespace

void CpuImpl::layerNormForward(ConstTensorView x, const float* gain, const float* bias, float eps,
                               TensorView y) {
  checkSameDims(x.dims, y.dims);
  if (!runs(MemKernel::kLayerNormFwd, double(x.elements())))
    return;
  const int64_t plane = int64_t{x.dims.h} * x.dims.w;
  // Examples are independent; each thread keeps its positions' statistics.
  const int parts = examplesParts(x.dims.n, x.dims.perExample());
  reserveScratch(parts, 2 * plane);
  team_.forEach(parts, [&](int t) {
    float* mean = scratch_[size_t(t)].data();
    float* invStd = mean + plane;
    const auto [first, last] = partOf(x.dims.n, parts, t);
    for (int64_t n = first; n < last; ++n) {
      const float* in = x.data + n * x.dims.perExample();
      float* out = y.data + n * y.dims.perExample();
      positionStats(in, x.dims.c, plane, eps, mean, invStd);
      for (int c = 0; c < x.dims.c; ++c)
        for (int64_t p = 0; p < plane; ++p)
          out[c * plane + p] = gain[c] * (in[c * plane + p] - mean[p]) * invStd[p] + bias[c];
    }
  });
}

// With g = gain * dy and xhat over the c channels of a position:
// dx = invStd * (g - mean(g) - xhat * mean(g * xhat)).
void CpuImpl::layerNormBackwardData(ConstTensorView x, ConstTensorView dy, const float* gain,
                                    float eps, TensorView dx, float beta) {
  checkSameDims(x.dims, dy.dims);
  checkSameDims(x.dims, dx.dims);
  if (!runs(MemKernel::kLayerNormBwdData, double(x.elements())))
    return;
  const int64_t plane = int64_t{x.dims.h} * x.dims.w;
  const float inv = 1.0f / static_cast<float>(x.dims.c);
  // Examples are independent; each thread keeps its positions' statistics
  // and means.
  const int parts = examplesParts(x.dims.n, x.dims.perExample());
  reserveScratch(parts, 4 * plane);
  team_.forEach(parts, [&](int t) {
    float* mean = scratch_[size_t(t)].data();
    float* invStd = mean + plane;
    float* meanG = invStd + plane;
    float* meanGXhat = meanG + plane;
    const auto [first, last] = partOf(x.dims.n, parts, t);
    for (int64_t n = first; n < last; ++n) {
      const float* in = x.data + n * x.dims.perExample();
      const float* g = dy.data + n * dy.dims.perExample();
      float* out = dx.data + n * dx.dims.perExample();
      positionStats(in, x.dims.c, plane, eps, mean, invStd);
      std::fill_n(meanG, 2 * plane, 0.0f);
      for (int c = 0; c < x.dims.c; ++c)
        for (int64_t p = 0; p < plane; ++p) {
          const float gc = gain[c] * g[c * plane + p];
          meanG[p] += gc;
          meanGXhat[p] += gc * (in[c * plane + p] - mean[p]) * invStd[p];
        }
      for (int64_t p = 0; p < plane; ++p) {
        meanG[p] *= inv;
        meanGXhat[p] *= inv;
      }
      for (int c = 0; c < x.dims.c; ++c)
        for (int64_t p = 0; p < plane; ++p) {
          const int64_t i = c * plane + p;
          const float xhat = (in[i] - mean[p]) * invStd[p];
          const float v = invStd[p] * (gain[c] * g[i] - meanG[p] - xhat * meanGXhat[p]);
          out[i] = beta == 0.0f ? v : beta * out[i] + v;
        }
    }
  });
}

void CpuImpl::layerNormBackwardWeights(ConstTensorView x, ConstTensorView dy, float eps,
                                       float* dgain, float* dbias) {
  checkSameDims(x.dims, dy.dims);
  if (!runs(MemKernel::kLayerNormBwdWeights, double(x.elements())))
    return;
  const int64_t plane = int64_t{x.dims.h} * x.dims.w;
  rowMean_.resize(static_cast<size_t>(plane));
  rowInvStd_.resize(static_cast<size_t>(plane));
  for (int n = 0; n < x.dims.n; ++n) {
    const float* in = x.data + n * x.dims.perExample();
    const float* g = dy.data + n * dy.dims.perExample();
    positionStats(in, x.dims.c, plane, eps, rowMean_.data(), rowInvStd_.data());
    for (int c = 0; c < x.dims.c; ++c) {
      float sumG = 0, sumGXhat = 0;
      for (int64_t p = 0; p < plane; ++p) {
        const int64_t i = c * plane + p;
        sumG += g[i];
        sumGXhat +=
            g[i] * (in[i] - rowMean_[static_cast<size_t>(p)]) * rowInvStd_[static_cast<size_t>(p)];
      }
      dgain[c] += sumGXhat;
      dbias[c] += sumG;
    }
  }
}

}  // namespace strata::nn::STRATA_CPU_ISA

// ---- RMS normalisation ------------------------------------------------------------

namespace strata::nn::STRATA_CPU_ISA {

namespace {
// 1 / sqrt(mean of x^2 + eps) over the c channels of each of `plane`
// positions of one example (channel-major, stride plane).
void positionInvRms(const float* x, int c, int64_t plane, float eps, float* invRms) {
  std::fill_n(invRms, plane, 0.0f);
  for (int ch = 0; ch < c; ++ch) {
    const float* xc = x + ch * plane;
    for (int64_t p = 0; p < plane; ++p)
      invRms[p] += xc[p] * xc[p];
  }
  const float inv = 1.0f / static_cast<float>(c);
  for (int64_t p = 0; p < plane; ++p)
    invRms[p] = 1.0f / std::sqrt(invRms[p] * inv + eps);
}
}  // namespace

void CpuImpl::rmsNormForward(ConstTensorView x, const float* gain, float eps, TensorView y) {
  checkSameDims(x.dims, y.dims);
  if (!runs(MemKernel::kRmsNormFwd, double(x.elements())))
    return;
  const int64_t plane = int64_t{x.dims.h} * x.dims.w;
  // Examples are independent; each thread keeps its positions' statistics.
  const int parts = examplesParts(x.dims.n, x.dims.perExample());
  reserveScratch(parts, plane);
  team_.forEach(parts, [&](int t) {
    float* invRms = scratch_[size_t(t)].data();
    const auto [first, last] = partOf(x.dims.n, parts, t);
    for (int64_t n = first; n < last; ++n) {
      const float* in = x.data + n * x.dims.perExample();
      float* out = y.data + n * y.dims.perExample();
      positionInvRms(in, x.dims.c, plane, eps, invRms);
      for (int c = 0; c < x.dims.c; ++c)
        for (int64_t p = 0; p < plane; ++p)
          out[c * plane + p] = gain[c] * in[c * plane + p] * invRms[p];
    }
  });
}

// With g = gain * dy and xhat = x / rms over the c channels of a position:
// d(xhat_i)/d(x_j) = (delta_ij - xhat_i xhat_j / c) / rms, so
// dx = (g - xhat mean(g * xhat)) / rms.
void CpuImpl::rmsNormBackwardData(ConstTensorView x, ConstTensorView dy, const float* gain,
                                  float eps, TensorView dx, float beta) {
  checkSameDims(x.dims, dy.dims);
  checkSameDims(x.dims, dx.dims);
  if (!runs(MemKernel::kRmsNormBwdData, double(x.elements())))
    return;
  const int64_t plane = int64_t{x.dims.h} * x.dims.w;
  const float inv = 1.0f / static_cast<float>(x.dims.c);
  const int parts = examplesParts(x.dims.n, x.dims.perExample());
  reserveScratch(parts, 2 * plane);
  team_.forEach(parts, [&](int t) {
    float* invRms = scratch_[size_t(t)].data();
    float* meanGXhat = invRms + plane;
    const auto [first, last] = partOf(x.dims.n, parts, t);
    for (int64_t n = first; n < last; ++n) {
      const float* in = x.data + n * x.dims.perExample();
      const float* g = dy.data + n * dy.dims.perExample();
      float* out = dx.data + n * dx.dims.perExample();
      positionInvRms(in, x.dims.c, plane, eps, invRms);
      std::fill_n(meanGXhat, plane, 0.0f);
      for (int c = 0; c < x.dims.c; ++c)
        for (int64_t p = 0; p < plane; ++p)
          meanGXhat[p] += gain[c] * g[c * plane + p] * in[c * plane + p] * invRms[p];
      for (int64_t p = 0; p < plane; ++p)
        meanGXhat[p] *= inv;
      for (int c = 0; c < x.dims.c; ++c)
        for (int64_t p = 0; p < plane; ++p) {
          const int64_t i = c * plane + p;
          const float xhat = in[i] * invRms[p];
          const float v = invRms[p] * (gain[c] * g[i] - xhat * meanGXhat[p]);
          out[i] = beta == 0.0f ? v : beta * out[i] + v;
        }
    }
  });
}

void CpuImpl::rmsNormBackwardWeights(ConstTensorView x, ConstTensorView dy, float eps,
                                     float* dgain) {
  checkSameDims(x.dims, dy.dims);
  if (!runs(MemKernel::kRmsNormBwdWeights, double(x.elements())))
    return;
  const int64_t plane = int64_t{x.dims.h} * x.dims.w;
  rowInvStd_.resize(static_cast<size_t>(plane));
  for (int n = 0; n < x.dims.n; ++n) {
    const float* in = x.data + n * x.dims.perExample();
    const float* g = dy.data + n * dy.dims.perExample();
    positionInvRms(in, x.dims.c, plane, eps, rowInvStd_.data());
    for (int c = 0; c < x.dims.c; ++c) {
      float sum = 0;
      for (int64_t p = 0; p < plane; ++p) {
        const int64_t i = c * plane + p;
        sum += g[i] * in[i] * rowInvStd_[static_cast<size_t>(p)];
      }
      dgain[c] += sum;
    }
  }
}

}  // namespace strata::nn::STRATA_CPU_ISA

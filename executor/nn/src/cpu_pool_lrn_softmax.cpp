// The CPU kernels of one ISA (cpu_kernels.cpp): pooling, local response
// normalisation, and softmax with cross-entropy.
#include <algorithm>
#include <cmath>
#include <limits>

#include "cpu_kernels.h"
#include "shape_checks.h"
#include "strata/model/error.h"

namespace strata::nn::STRATA_CPU_ISA {

// ---- pooling --------------------------------------------------------------

void CpuImpl::poolForward(const PoolDesc& d, ConstTensorView x, TensorView y, int32_t* argmax) {
  STRATA_ENFORCE_OP(x.dims.n, ==, y.dims.n);
  STRATA_ENFORCE_OP(x.dims.c, ==, d.c);
  STRATA_ENFORCE_OP(y.dims.c, ==, d.c);
  STRATA_ENFORCE(x.dims.h == d.inH && x.dims.w == d.inW && y.dims.h == d.outH &&
                 y.dims.w == d.outW);
  const bool isMax = d.mode == PoolMode::kMax;
  STRATA_ENFORCE(!isMax || argmax != nullptr);
  const int64_t planes = int64_t{x.dims.n} * d.c;
  // Units: window reads, padding included (the lowering's and calibration's).
  const double window = double(d.kernelH) * d.kernelW;
  if (!runs(isMax ? MemKernel::kPoolMaxFwd : MemKernel::kPoolAvgFwd, double(y.elements()) * window,
            window))
    return;
  const int64_t grain = std::max<int64_t>(1, kElementGrain / (int64_t{d.inH} * d.inW));
  parallelRanges(team_, planes, grain, [&](int64_t first, int64_t last) {
    for (int64_t pl = first; pl < last; ++pl) {
      const float* in = x.data + pl * d.inH * d.inW;
      float* out = y.data + pl * d.outH * d.outW;
      int32_t* arg = isMax ? argmax + pl * d.outH * d.outW : nullptr;
      for (int oh = 0; oh < d.outH; ++oh) {
        const int h0 = std::max(oh * d.stride - d.pad, 0);
        const int h1 = std::min(oh * d.stride - d.pad + d.kernelH, d.inH);
        for (int ow = 0; ow < d.outW; ++ow) {
          const int w0 = std::max(ow * d.stride - d.pad, 0);
          const int w1 = std::min(ow * d.stride - d.pad + d.kernelW, d.inW);
          const int o = oh * d.outW + ow;
          if (isMax) {
            // A window lying wholly in padding (pad >= kernel) has no input:
            // output 0 and no gradient (argmax -1).
            float best = -std::numeric_limits<float>::infinity();
            int32_t where = -1;
            for (int ih = h0; ih < h1; ++ih)
              for (int iw = w0; iw < w1; ++iw)
                if (in[ih * d.inW + iw] > best) {
                  best = in[ih * d.inW + iw];
                  where = ih * d.inW + iw;
                }
            out[o] = where >= 0 ? best : 0.0f;
            arg[o] = where;
          } else {
            float sum = 0;
            for (int ih = h0; ih < h1; ++ih)
              for (int iw = w0; iw < w1; ++iw)
                sum += in[ih * d.inW + iw];
            const int count = (h1 - h0) * (w1 - w0);
            out[o] = count > 0 ? sum / static_cast<float>(count) : 0.0f;
          }
        }
      }
    }
  });
}

void CpuImpl::poolBackward(const PoolDesc& d, ConstTensorView dy, const int32_t* argmax,
                           TensorView dx, float beta) {
  STRATA_ENFORCE_OP(dx.dims.n, ==, dy.dims.n);
  STRATA_ENFORCE(dx.dims.c == d.c && dy.dims.c == d.c);
  const bool isMax = d.mode == PoolMode::kMax;
  scaleForBeta(dx, beta);
  const int64_t planes = int64_t{dy.dims.n} * d.c;
  // Units: max scatters one gradient per output element; avg spreads each
  // over its window (window writes, padding included).
  const double window = double(d.kernelH) * d.kernelW;
  if (!(isMax ? runs(MemKernel::kPoolMaxBwd, double(dy.elements()))
              : runs(MemKernel::kPoolAvgBwd, double(dy.elements()) * window, window)))
    return;
  const int64_t grain = std::max<int64_t>(1, kElementGrain / (int64_t{d.inH} * d.inW));
  parallelRanges(team_, planes, grain, [&](int64_t first, int64_t last) {
    for (int64_t pl = first; pl < last; ++pl) {
      const float* g = dy.data + pl * d.outH * d.outW;
      float* out = dx.data + pl * d.inH * d.inW;
      if (isMax) {
        const int32_t* arg = argmax + pl * d.outH * d.outW;
        for (int o = 0; o < d.outH * d.outW; ++o)
          if (arg[o] >= 0)
            out[arg[o]] += g[o];
        continue;
      }
      for (int oh = 0; oh < d.outH; ++oh) {
        const int h0 = std::max(oh * d.stride - d.pad, 0);
        const int h1 = std::min(oh * d.stride - d.pad + d.kernelH, d.inH);
        for (int ow = 0; ow < d.outW; ++ow) {
          const int w0 = std::max(ow * d.stride - d.pad, 0);
          const int w1 = std::min(ow * d.stride - d.pad + d.kernelW, d.inW);
          const int count = (h1 - h0) * (w1 - w0);
          if (count == 0)
            continue;
          const float share = g[oh * d.outW + ow] / static_cast<float>(count);
          for (int ih = h0; ih < h1; ++ih)
            for (int iw = w0; iw < w1; ++iw)
              out[ih * d.inW + iw] += share;
        }
      }
    }
  });
}

// ---- local response normalisation ---------------------------------------
//
// Channels are the outer index of a plane, so each loop below runs over the
// positions of a plane (contiguous) for one pair of channels.

void CpuImpl::lrnForward(const LrnDesc& d, ConstTensorView x, TensorView y, TensorView scale) {
  checkSameDims(x.dims, y.dims);
  checkSameDims(x.dims, scale.dims);
  const int64_t plane = int64_t{x.dims.h} * x.dims.w;
  const int before = (d.size - 1) / 2;
  const int after = d.size / 2;
  const int64_t planes = int64_t{x.dims.n} * x.dims.c;
  if (!runs(MemKernel::kLrnFwd, double(x.elements())))
    return;
  parallelRanges(
      team_, planes, std::max<int64_t>(1, kElementGrain / plane), [&](int64_t first, int64_t last) {
        for (int64_t pl = first; pl < last; ++pl) {
          const int64_t n = pl / x.dims.c;
          const int c = static_cast<int>(pl % x.dims.c);
          const float* in = x.data + n * x.dims.perExample();
          float* out = y.data + n * y.dims.perExample();
          float* sc = scale.data + n * scale.dims.perExample() + c * plane;
          std::fill_n(sc, plane, 0.0f);
          for (int j = std::max(c - before, 0); j <= std::min(c + after, x.dims.c - 1); ++j) {
            const float* xj = in + j * plane;
            for (int64_t p = 0; p < plane; ++p)
              sc[p] += xj[p] * xj[p];
          }
          for (int64_t p = 0; p < plane; ++p) {
            sc[p] = d.k + d.alpha * sc[p];
            out[c * plane + p] = in[c * plane + p] * std::pow(sc[p], -d.beta);
          }
        }
      });
}

// dx_i = dy_i s_i^-beta - 2 alpha beta x_i sum_{j : i in window(j)} dy_j y_j / s_j
void CpuImpl::lrnBackward(const LrnDesc& d, ConstTensorView x, ConstTensorView y,
                          ConstTensorView scale, ConstTensorView dy, TensorView dx, float beta) {
  checkSameDims(x.dims, y.dims);
  checkSameDims(x.dims, scale.dims);
  checkSameDims(x.dims, dy.dims);
  checkSameDims(x.dims, dx.dims);
  const int64_t plane = int64_t{x.dims.h} * x.dims.w;
  const int before = (d.size - 1) / 2;
  const int after = d.size / 2;
  const int64_t perExample = x.dims.perExample();
  const int threads = team_.size();
  if (!runs(MemKernel::kLrnBwd, double(x.elements())))
    return;
  reserveScratch(threads, perExample);  // per thread: dy_j y_j / s_j of one example
  const int parts = std::min<int>(threads, x.dims.n);
  team_.forEach(parts, [&](int t) {
    float* ratio = scratch_[size_t(t)].data();
    const auto [first, last] = partOf(x.dims.n, parts, t);
    for (int64_t n = first; n < last; ++n) {
      const int64_t base = n * perExample;
      for (int64_t i = 0; i < perExample; ++i)
        ratio[i] = dy.data[base + i] * y.data[base + i] / scale.data[base + i];
      for (int c = 0; c < x.dims.c; ++c) {
        float* out = dx.data + base + c * plane;
        const float* xc = x.data + base + c * plane;
        const float* sc = scale.data + base + c * plane;
        const float* gc = dy.data + base + c * plane;
        for (int64_t p = 0; p < plane; ++p) {
          const float direct = gc[p] * std::pow(sc[p], -d.beta);
          out[p] = beta == 0.0f ? direct : beta * out[p] + direct;
        }
        // i is in window(j) when j - before <= i <= j + after.
        for (int j = std::max(c - after, 0); j <= std::min(c + before, x.dims.c - 1); ++j) {
          const float* rj = ratio + j * plane;
          for (int64_t p = 0; p < plane; ++p)
            out[p] -= 2.0f * d.alpha * d.beta * xc[p] * rj[p];
        }
      }
    }
  });
}

// ---- softmax + cross-entropy ---------------------------------------------
//
// Position q = n * h*w + p; class c of position q is at (n, c, p), stride h*w.

// softmax_fwd is the statistics and the probabilities together (as
// calibration times them): one call, reported here.
void CpuImpl::softmaxStats(ConstTensorView logits, float* stats) {
  if (!runs(MemKernel::kSoftmaxFwd, double(logits.elements())))
    return;
  const int64_t plane = int64_t{logits.dims.h} * logits.dims.w;
  for (int n = 0; n < logits.dims.n; ++n) {
    const float* z = logits.data + n * logits.dims.perExample();
    for (int64_t p = 0; p < plane; ++p) {
      float mx = -std::numeric_limits<float>::infinity();
      for (int c = 0; c < logits.dims.c; ++c)
        mx = std::max(mx, z[c * plane + p]);
      double sum = 0;
      for (int c = 0; c < logits.dims.c; ++c)
        sum += std::exp(double(z[c * plane + p]) - mx);
      float* st = stats + 2 * (n * plane + p);
      st[0] = mx;
      st[1] = static_cast<float>(sum);
    }
  }
}

// The second half of softmax_fwd (reported by softmaxStats).
void CpuImpl::softmaxProbabilities(ConstTensorView logits, const float* stats, TensorView y) {
  checkSameDims(logits.dims, y.dims);
  if (recordOnly())
    return;
  const int64_t plane = int64_t{logits.dims.h} * logits.dims.w;
  for (int n = 0; n < logits.dims.n; ++n) {
    const int64_t base = n * logits.dims.perExample();
    for (int64_t p = 0; p < plane; ++p) {
      const float* st = stats + 2 * (n * plane + p);
      for (int c = 0; c < logits.dims.c; ++c)
        y.data[base + c * plane + p] = std::exp(logits.data[base + c * plane + p] - st[0]) / st[1];
    }
  }
}

SoftmaxLossSum CpuImpl::softmaxLoss(ConstTensorView logits, const float* stats,
                                    const int32_t* labels, int classOffset) {
  const int64_t plane = int64_t{logits.dims.h} * logits.dims.w;
  SoftmaxLossSum out;
  // Part of no layer phase (the loss of a step); calibration's softmax_bwd
  // includes it.
  if (recordOnly())
    return out;
  for (int n = 0; n < logits.dims.n; ++n) {
    for (int64_t p = 0; p < plane; ++p) {
      const int64_t q = n * plane + p;
      const int c = labels[q] - classOffset;
      if (c < 0 || c >= logits.dims.c)
        continue;
      const float z = logits.data[n * logits.dims.perExample() + c * plane + p];
      out.loss += double(stats[2 * q]) + std::log(double(stats[2 * q + 1])) - z;
      if (z >= stats[2 * q])
        ++out.correct;
    }
  }
  return out;
}

void CpuImpl::softmaxBackward(ConstTensorView logits, const float* stats, const int32_t* labels,
                              int classOffset, float scale, TensorView dlogits, float beta) {
  checkSameDims(logits.dims, dlogits.dims);
  if (!runs(MemKernel::kSoftmaxBwd, double(logits.elements())))
    return;
  const int64_t plane = int64_t{logits.dims.h} * logits.dims.w;
  for (int n = 0; n < logits.dims.n; ++n) {
    const int64_t base = n * logits.dims.perExample();
    for (int64_t p = 0; p < plane; ++p) {
      const int64_t q = n * plane + p;
      const float* st = stats + 2 * q;
      const int label = labels[q] - classOffset;
      for (int c = 0; c < logits.dims.c; ++c) {
        const int64_t i = base + c * plane + p;
        const float prob = std::exp(logits.data[i] - st[0]) / st[1];
        const float g = scale * (prob - (c == label ? 1.0f : 0.0f));
        dlogits.data[i] = beta == 0.0f ? g : beta * dlogits.data[i] + g;
      }
    }
  }
}

}  // namespace strata::nn::STRATA_CPU_ISA

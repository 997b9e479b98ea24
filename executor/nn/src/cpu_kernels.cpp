// The CPU kernels, compiled once per instruction set (cpu_isa.h): GEMMs of
// conv (after im2col) and fc go through Eigen's blocked products; the rest
// are loops written so the innermost one runs over contiguous memory. The
// only translation unit that includes Eigen; CMake builds it as cpu_<isa>
// with STRATA_CPU_ISA naming the namespace and `Eigen` renamed per ISA, so
// no template instance of one ISA can stand in for another's (cpu_isa.h).
#include <fmt/format.h>

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <limits>

#include "cpu_isa.h"
#include "shape_checks.h"
#include "strata/kernels/counter_rng.h"
#include "strata/kernels/elementwise.h"
#include "strata/model/error.h"

namespace strata::nn::STRATA_CPU_ISA {

namespace {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MatrixMap = Eigen::Map<RowMatrix>;
using ConstMatrixMap = Eigen::Map<const RowMatrix>;
using ConstVectorMap = Eigen::Map<const Eigen::VectorXf>;
using VectorMap = Eigen::Map<Eigen::VectorXf>;
using StridedMap = Eigen::Map<RowMatrix, 0, Eigen::OuterStride<>>;
using ConstStridedMap = Eigen::Map<const RowMatrix, 0, Eigen::OuterStride<>>;

// C (m x n, row stride ldc) = op(A) op(B), or C += that; A and B as the op
// reads them (nn: A m x k, B k x n; nt: B n x k; tn: A k x m), with row
// strides lda and ldb: a block of a larger row-major matrix.
void gemmLd(GemmOp op, int m, int n, int k, const float* a, int64_t lda, const float* b,
            int64_t ldb, float* c, int64_t ldc, bool accumulate) {
  StridedMap out(c, m, n, Eigen::OuterStride<>(ldc));
  const bool ta = op == GemmOp::kTN;
  const bool tb = op == GemmOp::kNT;
  ConstStridedMap am(a, ta ? k : m, ta ? m : k, Eigen::OuterStride<>(lda));
  ConstStridedMap bm(b, tb ? n : k, tb ? k : n, Eigen::OuterStride<>(ldb));
  switch (op) {
    case GemmOp::kNN:
      if (accumulate)
        out.noalias() += am * bm;
      else
        out.noalias() = am * bm;
      break;
    case GemmOp::kNT:
      if (accumulate)
        out.noalias() += am * bm.transpose();
      else
        out.noalias() = am * bm.transpose();
      break;
    case GemmOp::kTN:
      if (accumulate)
        out.noalias() += am.transpose() * bm;
      else
        out.noalias() = am.transpose() * bm;
      break;
  }
}

// The sum of n floats in an order fixed by n alone: 16 running sums over
// i mod 16, added 0..15, then the tail. Eigen's vectorised sum starts where
// the memory is aligned to its vector width, so its order (and last bits)
// would follow the buffer's address, which on AVX paths varies run to run
// for a malloc'd buffer. The lanes are independent sums, which the compiler
// vectorises without reordering: the same bits on every path.
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

// Runs f(begin, end) over [0, count) cut into at most team.size() contiguous
// ranges of at least `grain` items each, on the team. For kernels whose items
// (elements, planes, channels, examples) are independent: every item is
// computed as on one thread, so the bits do not depend on the thread count.
template <class F>
void parallelRanges(ThreadTeam& team, int64_t count, int64_t grain, F&& f) {
  const int64_t most = count / std::max<int64_t>(grain, 1);
  const int parts = static_cast<int>(std::clamp<int64_t>(most, 1, team.size()));
  if (parts == 1) {
    f(int64_t{0}, count);
    return;
  }
  team.forEach(parts, [&](int t) {
    const auto [begin, end] = partOf(count, parts, t);
    f(begin, end);
  });
}
// Runs example(n, scratch, splitGemm) for each of `examples` examples: over
// the team by examples when there are at least as many as threads (thread t
// on scratch[t], its GEMMs whole), else one after the other on scratch[0],
// each GEMM split over the team.
template <class F>
void forEachExample(ThreadTeam& team, std::vector<std::vector<float>>& scratch, int examples,
                    F&& example) {
  const int threads = team.size();
  if (threads > 1 && examples >= threads) {
    team.forEach(threads, [&](int t) {
      const auto [first, last] = partOf(examples, threads, t);
      for (int64_t n = first; n < last; ++n)
        example(int(n), scratch[size_t(t)], false);
    });
  } else {
    for (int n = 0; n < examples; ++n)
      example(n, scratch[0], true);
  }
}

// Elementwise kernels split in ranges of at least this many elements (256
// KiB of floats, ~5 us of a memory-bound pass): less work than that does not
// pay for handing it to another core.
constexpr int64_t kElementGrain = 64 * 1024;

// Below this many multiply-adds a GEMM stays on one thread: waking the team
// costs a few microseconds.
constexpr int64_t kMinSplitMacs = int64_t{1} << 20;
// Blocks of a split GEMM are whole multiples of this many rows or columns
// (a 16-float AVX-512 register, two AVX2 ones), so each thread's kernel runs
// full vectors.
constexpr int kSplitAlign = 16;

// dst = beta * dst before a kernel adds its result: beta is 0 (overwrite,
// which must not read dst: it may hold NaN from an earlier batch) or 1.
void scaleForAccumulate(float* dst, int64_t count, float beta) {
  if (beta == 0.0f) {
    std::fill_n(dst, count, 0.0f);
  } else if (beta != 1.0f) {
    for (int64_t i = 0; i < count; ++i)
      dst[i] *= beta;
  }
}

bool isPointwise(const ConvDesc& d) {
  return d.kernelH == 1 && d.kernelW == 1 && d.stride == 1 && d.pad == 0;
}

// Unfolds `channels` input planes into col (K = channels * kh * kw rows, P =
// outH * outW columns): row (c, ki, kj) holds the input pixel each output
// position sees through kernel tap (ki, kj), zero where it falls in padding.
void im2col(const ConvDesc& d, const float* x, int channels, float* col) {
  const int64_t outPlane = int64_t{d.outH} * d.outW;
  for (int c = 0; c < channels; ++c) {
    const float* plane = x + int64_t{c} * d.inH * d.inW;
    for (int ki = 0; ki < d.kernelH; ++ki) {
      for (int kj = 0; kj < d.kernelW; ++kj) {
        float* row = col + ((int64_t{c} * d.kernelH + ki) * d.kernelW + kj) * outPlane;
        for (int oh = 0; oh < d.outH; ++oh) {
          float* out = row + int64_t{oh} * d.outW;
          const int ih = oh * d.stride - d.pad + ki;
          if (ih < 0 || ih >= d.inH) {
            std::fill_n(out, d.outW, 0.0f);
            continue;
          }
          const float* in = plane + int64_t{ih} * d.inW;
          for (int ow = 0; ow < d.outW; ++ow) {
            const int iw = ow * d.stride - d.pad + kj;
            out[ow] = (iw >= 0 && iw < d.inW) ? in[iw] : 0.0f;
          }
        }
      }
    }
  }
}

// The adjoint of im2col: adds every column entry back onto the input pixel it
// was read from (pixels seen by several taps sum their gradients).
void col2imAdd(const ConvDesc& d, const float* col, int channels, float* x) {
  const int64_t outPlane = int64_t{d.outH} * d.outW;
  for (int c = 0; c < channels; ++c) {
    float* plane = x + int64_t{c} * d.inH * d.inW;
    for (int ki = 0; ki < d.kernelH; ++ki) {
      for (int kj = 0; kj < d.kernelW; ++kj) {
        const float* row = col + ((int64_t{c} * d.kernelH + ki) * d.kernelW + kj) * outPlane;
        for (int oh = 0; oh < d.outH; ++oh) {
          const int ih = oh * d.stride - d.pad + ki;
          if (ih < 0 || ih >= d.inH)
            continue;
          const float* in = row + int64_t{oh} * d.outW;
          float* out = plane + int64_t{ih} * d.inW;
          for (int ow = 0; ow < d.outW; ++ow) {
            const int iw = ow * d.stride - d.pad + kj;
            if (iw >= 0 && iw < d.inW)
              out[iw] += in[ow];
          }
        }
      }
    }
  }
}

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

// The dropout decision of one element, see DropoutDesc.
struct DropoutMask {
  const DropoutDesc& d;
  int64_t plane;
  float scale;

  DropoutMask(const DropoutDesc& desc, const Dims& dims)
      : d(desc), plane(int64_t{dims.h} * dims.w), scale(1.0f / (1.0f - desc.rate)) {}
  // Hash of the example's row; elements then mix in their whole-layer index.
  uint64_t rowKey(int row) const {
    return kernels::mix64(kernels::hashOf(d.seed, d.step, static_cast<uint64_t>(d.layer),
                                          static_cast<uint64_t>(d.firstRow + row)));
  }
  float factor(uint64_t rowKey, int c, int64_t pos) const {
    const auto index = static_cast<uint64_t>((d.channelOffset + c) * plane + pos);
    return kernels::uniformFloat(kernels::mix64(rowKey ^ index)) >= d.rate ? scale : 0.0f;
  }
};

}  // namespace

// ---- convolution ----------------------------------------------------------

namespace {
// Sizes shared by the three passes of a (grouped) convolution as GEMMs:
// per group, weights fg x k, columns k x p.
struct ConvGeometry {
  explicit ConvGeometry(const ConvDesc& d)
      : cg(d.inC / d.groups),
        fg(d.filters / d.groups),
        k(int64_t{cg} * d.kernelH * d.kernelW),
        p(int64_t{d.outH} * d.outW),
        inPlane(int64_t{d.inH} * d.inW),
        pointwise(isPointwise(d)) {}
  int cg;           // input channels per group
  int fg;           // filters per group
  int64_t k;        // GEMM inner size: cg x kernel area
  int64_t p;        // output positions
  int64_t inPlane;  // input positions
  bool pointwise;   // 1x1 stride 1 without padding: im2col is the input itself
};

// The k x p column matrix of one example's group `xg`: the input itself for a
// pointwise convolution (no copy), else its im2col in `col` (sized k x p).
const float* columns(const ConvDesc& d, const ConvGeometry& geo, const float* xg,
                     std::vector<float>& col) {
  if (geo.pointwise)
    return xg;
  im2col(d, xg, geo.cg, col.data());
  return col.data();
}
}  // namespace

void CpuImpl::convForward(const ConvDesc& d, ConstTensorView x, const float* w, const float* bias,
                          TensorView y) {
  checkConv(d, x.dims, y.dims);
  const ConvGeometry geo(d);
  const int cg = geo.cg, fg = geo.fg;
  const int64_t k = geo.k, p = geo.p, inPlane = geo.inPlane;
  const int threads = team_.size();
  reserveScratch(threads, geo.pointwise ? 0 : k * p);
  // One example on scratch `col`; its GEMMs split over the team when the
  // examples do not (fewer examples than threads).
  auto example = [&](int n, std::vector<float>& col, bool splitGemm) {
    for (int g = 0; g < d.groups; ++g) {
      const float* cols =
          columns(d, geo, x.data + (int64_t{n} * d.inC + int64_t{g} * cg) * inPlane, col);
      float* yg = y.data + (int64_t{n} * d.filters + int64_t{g} * fg) * p;
      const float* wg = w + int64_t{g} * fg * k;
      gemmOn(splitGemm, GemmOp::kNN, fg, int(p), int(k), wg, cols, yg, false);
      if (bias)
        biasAdd(yg, bias + int64_t{g} * fg, fg, p);
    }
  };
  forEachExample(team_, scratch_, x.dims.n, example);
}

void CpuImpl::convBackwardData(const ConvDesc& d, ConstTensorView dy, const float* w, TensorView dx,
                               float beta) {
  checkConv(d, dx.dims, dy.dims);
  const ConvGeometry geo(d);
  const int cg = geo.cg, fg = geo.fg;
  const int64_t k = geo.k, p = geo.p, inPlane = geo.inPlane;
  const int threads = team_.size();
  reserveScratch(threads, geo.pointwise ? 0 : k * p);
  scaleForAccumulate(dx.data, dx.elements(), beta);
  // dx of one example = col2im(W^T dy): each example writes its own slice.
  auto example = [&](int n, std::vector<float>& col, bool splitGemm) {
    for (int g = 0; g < d.groups; ++g) {
      float* dxg = dx.data + (int64_t{n} * d.inC + int64_t{g} * cg) * inPlane;
      const float* wg = w + int64_t{g} * fg * k;
      const float* dyg = dy.data + (int64_t{n} * d.filters + int64_t{g} * fg) * p;
      float* out = geo.pointwise ? dxg : col.data();
      gemmOn(splitGemm, GemmOp::kTN, int(k), int(p), fg, wg, dyg, out, geo.pointwise);
      if (!geo.pointwise)
        col2imAdd(d, col.data(), cg, dxg);
    }
  };
  forEachExample(team_, scratch_, dy.dims.n, example);
}

void CpuImpl::convBackwardWeights(const ConvDesc& d, ConstTensorView x, ConstTensorView dy,
                                  float* dw, float* dbias) {
  checkConv(d, x.dims, dy.dims);
  const ConvGeometry geo(d);
  const int cg = geo.cg, fg = geo.fg;
  const int64_t k = geo.k, p = geo.p, inPlane = geo.inPlane;
  const int threads = team_.size();
  const bool byExample = threads > 1 && x.dims.n >= threads;
  reserveScratch(threads, geo.pointwise ? 0 : k * p);
  // Adds examples [first, last)'s gradients to gw and gbias.
  auto examples = [&](int64_t first, int64_t last, std::vector<float>& col, float* gw, float* gbias,
                      bool splitGemm) {
    for (int64_t n = first; n < last; ++n) {
      for (int g = 0; g < d.groups; ++g) {
        const float* cols = columns(d, geo, x.data + (n * d.inC + int64_t{g} * cg) * inPlane, col);
        const float* dyg = dy.data + (n * d.filters + int64_t{g} * fg) * p;
        gemmOn(splitGemm, GemmOp::kNT, fg, int(k), int(p), dyg, cols, gw + int64_t{g} * fg * k,
               true);
        if (gbias)
          biasGrad(dyg, gbias + int64_t{g} * fg, fg, p);
      }
    }
  };
  if (!byExample) {
    examples(0, x.dims.n, scratch_[0], dw, dbias, true);
    return;
  }
  // Each thread sums its examples into its own partial gradient; the
  // partials then add onto dw in thread order (deterministic for a given
  // thread count).
  const int64_t weights = int64_t{d.filters} * k;
  const int64_t partial = weights + (dbias ? d.filters : 0);
  if (partials_.size() < size_t(threads))
    partials_.resize(size_t(threads));
  team_.forEach(threads, [&](int t) {
    std::vector<float>& mine = partials_[size_t(t)];
    mine.assign(size_t(partial), 0.0f);
    const auto [first, last] = partOf(x.dims.n, threads, t);
    examples(first, last, scratch_[size_t(t)], mine.data(), dbias ? mine.data() + weights : nullptr,
             false);
  });
  for (int t = 0; t < threads; ++t) {
    const std::vector<float>& mine = partials_[size_t(t)];
    VectorMap(dw, weights) += ConstVectorMap(mine.data(), weights);
    if (dbias)
      VectorMap(dbias, d.filters) += ConstVectorMap(mine.data() + weights, d.filters);
  }
}

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
  scaleForAccumulate(dx.data, dx.elements(), beta);
  const int64_t planes = int64_t{dy.dims.n} * d.c;
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

// ---- fully connected --------------------------------------------------------
//
// flatten: X (n x D) * W^T (D x O) = Y (n x O), one GEMM for the batch.
// per position: for each example Y_e (O x P) = W (O x C) * X_e (C x P).

void CpuImpl::fcForward(const FcDesc& d, ConstTensorView x, const float* w, const float* bias,
                        TensorView y) {
  STRATA_ENFORCE_OP(x.dims.n, ==, y.dims.n);
  STRATA_ENFORCE_OP(y.dims.c, ==, d.outputs);
  if (d.flatten) {
    STRATA_ENFORCE_OP(x.dims.perExample(), ==, d.inFeatures);
    teamGemm(GemmOp::kNT, y.dims.n, d.outputs, d.inFeatures, x.data, w, y.data, false);
    if (bias)
      MatrixMap(y.data, y.dims.n, d.outputs).rowwise() +=
          ConstVectorMap(bias, d.outputs).transpose();
    return;
  }
  STRATA_ENFORCE_OP(x.dims.c, ==, d.inFeatures);
  const int p = x.dims.h * x.dims.w;
  for (int n = 0; n < x.dims.n; ++n) {
    float* out = y.data + n * y.dims.perExample();
    teamGemm(GemmOp::kNN, d.outputs, p, d.inFeatures, w, x.data + n * x.dims.perExample(), out,
             false);
    if (bias)
      biasAdd(out, bias, d.outputs, p);
  }
}

void CpuImpl::fcBackwardData(const FcDesc& d, ConstTensorView dy, const float* w, TensorView dx,
                             float beta) {
  STRATA_ENFORCE_OP(dx.dims.n, ==, dy.dims.n);
  STRATA_ENFORCE_OP(dy.dims.c, ==, d.outputs);
  scaleForAccumulate(dx.data, dx.elements(), beta);
  if (d.flatten) {
    STRATA_ENFORCE_OP(dx.dims.perExample(), ==, d.inFeatures);
    teamGemm(GemmOp::kNN, dx.dims.n, d.inFeatures, d.outputs, dy.data, w, dx.data, true);
    return;
  }
  STRATA_ENFORCE_OP(dx.dims.c, ==, d.inFeatures);
  const int p = dx.dims.h * dx.dims.w;
  for (int n = 0; n < dy.dims.n; ++n)
    teamGemm(GemmOp::kTN, d.inFeatures, p, d.outputs, w, dy.data + n * dy.dims.perExample(),
             dx.data + n * dx.dims.perExample(), true);
}

void CpuImpl::fcBackwardWeights(const FcDesc& d, ConstTensorView x, ConstTensorView dy, float* dw,
                                float* dbias) {
  STRATA_ENFORCE_OP(x.dims.n, ==, dy.dims.n);
  STRATA_ENFORCE_OP(dy.dims.c, ==, d.outputs);
  if (d.flatten) {
    STRATA_ENFORCE_OP(x.dims.perExample(), ==, d.inFeatures);
    teamGemm(GemmOp::kTN, d.outputs, d.inFeatures, dy.dims.n, dy.data, x.data, dw, true);
    if (dbias)  // row by row: the order is the examples', whatever the alignment
      for (int n = 0; n < dy.dims.n; ++n)
        VectorMap(dbias, d.outputs) += ConstVectorMap(dy.data + int64_t{n} * d.outputs, d.outputs);
    return;
  }
  STRATA_ENFORCE_OP(x.dims.c, ==, d.inFeatures);
  const int p = x.dims.h * x.dims.w;
  for (int n = 0; n < x.dims.n; ++n) {
    const float* g = dy.data + n * dy.dims.perExample();
    teamGemm(GemmOp::kNT, d.outputs, d.inFeatures, p, g, x.data + n * x.dims.perExample(), dw,
             true);
    if (dbias)
      biasGrad(g, dbias, d.outputs, p);
  }
}

// ---- elementwise ----------------------------------------------------------

void CpuImpl::reluForward(ConstTensorView x, TensorView y) {
  checkSameDims(x.dims, y.dims);
  parallelRanges(team_, x.elements(), kElementGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      y.data[i] = std::max(x.data[i], 0.0f);
  });
}

void CpuImpl::reluBackward(ConstTensorView y, ConstTensorView dy, TensorView dx, float beta) {
  checkSameDims(y.dims, dy.dims);
  checkSameDims(y.dims, dx.dims);
  const int64_t count = y.elements();
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
  const DropoutMask mask(d, x.dims);
  const int64_t plane = mask.plane;
  parallelRanges(team_, x.dims.n, 1, [&](int64_t first, int64_t last) {
    for (int64_t n = first; n < last; ++n) {
      const uint64_t key = mask.rowKey(int(n));
      const float* in = x.data + n * x.dims.perExample();
      float* out = y.data + n * y.dims.perExample();
      for (int c = 0; c < x.dims.c; ++c)
        for (int64_t p = 0; p < plane; ++p)
          out[c * plane + p] = in[c * plane + p] * mask.factor(key, c, p);
    }
  });
}

void CpuImpl::dropoutBackward(const DropoutDesc& d, ConstTensorView dy, TensorView dx, float beta) {
  checkSameDims(dy.dims, dx.dims);
  const DropoutMask mask(d, dy.dims);
  const int64_t plane = mask.plane;
  scaleForAccumulate(dx.data, dx.elements(), beta);
  parallelRanges(team_, dy.dims.n, 1, [&](int64_t first, int64_t last) {
    for (int64_t n = first; n < last; ++n) {
      const uint64_t key = mask.rowKey(int(n));
      const float* in = dy.data + n * dy.dims.perExample();
      float* out = dx.data + n * dx.dims.perExample();
      for (int c = 0; c < dy.dims.c; ++c)
        for (int64_t p = 0; p < plane; ++p)
          out[c * plane + p] += in[c * plane + p] * mask.factor(key, c, p);
    }
  });
}

void CpuImpl::fill(std::span<float> x, float value) {
  std::fill(x.begin(), x.end(), value);
}

void CpuImpl::add(ConstTensorView a, ConstTensorView b, TensorView y) {
  checkSameDims(a.dims, b.dims);
  checkSameDims(a.dims, y.dims);
  parallelRanges(team_, a.elements(), kElementGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      y.data[i] = a.data[i] + b.data[i];
  });
}

void CpuImpl::accumulate(ConstTensorView src, TensorView dst, float beta) {
  checkSameDims(src.dims, dst.dims);
  parallelRanges(team_, src.elements(), kElementGrain, [&](int64_t begin, int64_t end) {
    if (beta == 0.0f) {
      std::copy(src.data + begin, src.data + end, dst.data + begin);
    } else {
      for (int64_t i = begin; i < end; ++i)
        dst.data[i] = beta * dst.data[i] + src.data[i];
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

// ---- batch normalisation --------------------------------------------------

void CpuImpl::batchNormForward(ConstTensorView x, const float* gamma, const float* shift, float eps,
                               TensorView y) {
  checkSameDims(x.dims, y.dims);
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

// ---- softmax + cross-entropy ---------------------------------------------
//
// Position q = n * h*w + p; class c of position q is at (n, c, p), stride h*w.

void CpuImpl::softmaxStats(ConstTensorView logits, float* stats) {
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

void CpuImpl::softmaxProbabilities(ConstTensorView logits, const float* stats, TensorView y) {
  checkSameDims(logits.dims, y.dims);
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

// ---- attention -----------------------------------------------------------------
//
// One kernel call per line of model/src/kernels.cpp's lowering (kAttention):
// per example the projections, per example and head the score and context
// GEMMs, and one softmax over the scores of the whole batch, so the GEMMs
// before it run over every example first.

namespace {
void checkAttention(const AttentionDesc& d, const Dims& x, const AttentionSaved& saved) {
  STRATA_ENFORCE(d.heads > 0 && d.features % d.heads == 0);
  STRATA_ENFORCE_OP(x.c, ==, d.features);
  STRATA_ENFORCE_OP(int64_t{x.h} * x.w, ==, d.positions);
  STRATA_ENFORCE_OP(saved.qkv.dims.n, ==, x.n);
  STRATA_ENFORCE_OP(saved.qkv.dims.perExample(), ==, 3 * int64_t{d.features} * d.positions);
  STRATA_ENFORCE_OP(saved.context.dims.n, ==, x.n);
  STRATA_ENFORCE_OP(saved.context.dims.perExample(), ==, int64_t{d.features} * d.positions);
  STRATA_ENFORCE(saved.probs != nullptr);
}
}  // namespace

void CpuImpl::attentionForward(const AttentionDesc& d, ConstTensorView x, const float* w,
                               const float* bias, const AttentionSaved& saved, TensorView y) {
  checkAttention(d, x.dims, saved);
  checkSameDims(x.dims, y.dims);
  const int f = d.features, t = d.positions, dh = d.headFeatures();
  const int64_t ft = int64_t{f} * t, tt = int64_t{t} * t, head = int64_t{dh} * t;
  const float* wqkv = w;
  const float* wo = w + 3 * int64_t{f} * f;
  for (int n = 0; n < x.dims.n; ++n) {
    const float* xn = x.data + n * ft;
    float* qkv = saved.qkv.data + n * 3 * ft;
    teamGemm(GemmOp::kNN, 3 * f, t, f, wqkv, xn, qkv, false);
    if (bias)
      biasAdd(qkv, bias, 3 * f, t);
    for (int h = 0; h < d.heads; ++h)
      teamGemm(GemmOp::kTN, t, t, dh, qkv + h * head, qkv + ft + h * head,
               saved.probs + (int64_t{n} * d.heads + h) * tt, false);
  }
  // Whole (example, head) score blocks of t rows per thread: a row's mask
  // depends on its index mod t.
  const float scale = 1.0f / std::sqrt(static_cast<float>(dh));
  parallelRanges(team_, int64_t{x.dims.n} * d.heads, std::max<int64_t>(1, kElementGrain / tt),
                 [&](int64_t first, int64_t last) {
                   attnSoftmaxForward(saved.probs + first * tt, saved.probs + first * tt,
                                      (last - first) * t, t, d.causal, scale);
                 });
  for (int n = 0; n < x.dims.n; ++n) {
    const float* qkv = saved.qkv.data + n * 3 * ft;
    float* context = saved.context.data + n * ft;
    for (int h = 0; h < d.heads; ++h)
      teamGemm(GemmOp::kNT, dh, t, t, qkv + 2 * ft + h * head,
               saved.probs + (int64_t{n} * d.heads + h) * tt, context + h * head, false);
    float* yn = y.data + n * ft;
    teamGemm(GemmOp::kNN, f, t, f, wo, context, yn, false);
    if (bias)
      biasAdd(yn, bias + 3 * int64_t{f}, f, t);
  }
}

void CpuImpl::attentionBackwardWeights(const AttentionDesc& d, ConstTensorView x,
                                       ConstTensorView dy, const float* w,
                                       const AttentionSaved& saved, float* dw, float* dbias) {
  checkAttention(d, x.dims, saved);
  checkSameDims(x.dims, dy.dims);
  STRATA_ENFORCE_OP(saved.dqkv.dims.n, ==, x.dims.n);
  STRATA_ENFORCE_OP(saved.dqkv.dims.perExample(), ==, 3 * x.dims.perExample());
  const int f = d.features, t = d.positions, dh = d.headFeatures();
  const int64_t ft = int64_t{f} * t, tt = int64_t{t} * t, head = int64_t{dh} * t;
  const float* wo = w + 3 * int64_t{f} * f;
  float* dwqkv = dw;
  float* dwo = dw + 3 * int64_t{f} * f;
  dcontext_.resize(static_cast<size_t>(ft));
  dprobs_.resize(static_cast<size_t>(int64_t{x.dims.n} * d.heads * tt));
  float* dc = dcontext_.data();
  for (int n = 0; n < x.dims.n; ++n) {
    const float* dyn = dy.data + n * ft;
    const float* qkv = saved.qkv.data + n * 3 * ft;
    float* dqkv = saved.dqkv.data + n * 3 * ft;
    teamGemm(GemmOp::kNT, f, f, t, dyn, saved.context.data + n * ft, dwo, true);
    if (dbias)
      biasGrad(dyn, dbias + 3 * int64_t{f}, f, t);
    teamGemm(GemmOp::kTN, f, t, f, wo, dyn, dc, false);
    for (int h = 0; h < d.heads; ++h) {
      const int64_t at = (int64_t{n} * d.heads + h) * tt;
      teamGemm(GemmOp::kTN, t, t, dh, dc + h * head, qkv + 2 * ft + h * head, dprobs_.data() + at,
               false);
      teamGemm(GemmOp::kNN, dh, t, t, dc + h * head, saved.probs + at, dqkv + 2 * ft + h * head,
               false);
    }
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(dh));
  parallelRanges(team_, int64_t{x.dims.n} * d.heads, std::max<int64_t>(1, kElementGrain / tt),
                 [&](int64_t first, int64_t last) {
                   attnSoftmaxBackward(saved.probs + first * tt, dprobs_.data() + first * tt,
                                       dprobs_.data() + first * tt, (last - first) * t, t, scale);
                 });
  for (int n = 0; n < x.dims.n; ++n) {
    const float* qkv = saved.qkv.data + n * 3 * ft;
    float* dqkv = saved.dqkv.data + n * 3 * ft;
    for (int h = 0; h < d.heads; ++h) {
      const float* ds = dprobs_.data() + (int64_t{n} * d.heads + h) * tt;
      teamGemm(GemmOp::kNT, dh, t, t, qkv + ft + h * head, ds, dqkv + h * head, false);
      teamGemm(GemmOp::kNN, dh, t, t, qkv + h * head, ds, dqkv + ft + h * head, false);
    }
    teamGemm(GemmOp::kNT, 3 * f, f, t, dqkv, x.data + n * ft, dwqkv, true);
    if (dbias)
      biasGrad(dqkv, dbias, 3 * f, t);
  }
}

void CpuImpl::attentionBackwardData(const AttentionDesc& d, ConstTensorView dqkv, const float* w,
                                    TensorView dx, float beta) {
  STRATA_ENFORCE_OP(dqkv.dims.n, ==, dx.dims.n);
  STRATA_ENFORCE_OP(dx.dims.c, ==, d.features);
  STRATA_ENFORCE_OP(int64_t{dx.dims.h} * dx.dims.w, ==, d.positions);
  STRATA_ENFORCE_OP(dqkv.dims.perExample(), ==, 3 * dx.dims.perExample());
  const int f = d.features, t = d.positions;
  const int64_t ft = int64_t{f} * t;
  scaleForAccumulate(dx.data, dx.elements(), beta);
  for (int n = 0; n < dx.dims.n; ++n)
    teamGemm(GemmOp::kTN, f, t, 3 * f, w, dqkv.data + n * 3 * ft, dx.data + n * ft, true);
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
  const float* pos = d.positions ? table + int64_t{d.vocab} * d.features : nullptr;
  for (int n = 0; n < ids.dims.n; ++n) {
    float* out = y.data + n * y.dims.perExample();
    for (int64_t p = 0; p < t; ++p) {
      const float* row = table + int64_t{tokenOf(d, ids.data[n * t + p])} * d.features;
      const float* at = pos ? pos + p * d.features : nullptr;
      for (int c = 0; c < d.features; ++c)
        out[c * t + p] = at ? row[c] + at[c] : row[c];
    }
  }
}

void CpuImpl::embeddingBackwardWeights(const EmbeddingDesc& d, ConstTensorView ids,
                                       ConstTensorView dy, float* dtable) {
  STRATA_ENFORCE_OP(ids.dims.n, ==, dy.dims.n);
  STRATA_ENFORCE_OP(dy.dims.c, ==, d.features);
  const int64_t t = int64_t{ids.dims.h} * ids.dims.w;
  STRATA_ENFORCE_OP(int64_t{dy.dims.h} * dy.dims.w, ==, t);
  float* dpos = d.positions ? dtable + int64_t{d.vocab} * d.features : nullptr;
  for (int n = 0; n < ids.dims.n; ++n) {
    const float* g = dy.data + n * dy.dims.perExample();
    for (int64_t p = 0; p < t; ++p) {
      float* row = dtable + int64_t{tokenOf(d, ids.data[n * t + p])} * d.features;
      float* at = dpos ? dpos + p * d.features : nullptr;
      for (int c = 0; c < d.features; ++c) {
        row[c] += g[c * t + p];
        if (at)
          at[c] += g[c * t + p];
      }
    }
  }
}

// ---- optimiser ------------------------------------------------------------

void CpuImpl::sgdMomentum(std::span<float> w, std::span<float> v, std::span<const float> g,
                          float learningRate, float momentum, float weightDecay) {
  STRATA_ENFORCE_OP(w.size(), ==, v.size());
  STRATA_ENFORCE_OP(w.size(), ==, g.size());
  for (size_t i = 0; i < w.size(); ++i) {
    v[i] = momentum * v[i] - learningRate * (g[i] + weightDecay * w[i]);
    w[i] += v[i];
  }
}

// ---- kernels for calibration -------------------------------------------------

void CpuImpl::gemm(GemmOp op, int m, int n, int k, const float* a, const float* b, float* c,
                   bool accumulate) {
  const int64_t lda = op == GemmOp::kTN ? m : k;
  const int64_t ldb = op == GemmOp::kNT ? k : n;
  gemmLd(op, m, n, k, a, lda, b, ldb, c, n, accumulate);
}

void CpuImpl::teamGemm(GemmOp op, int m, int n, int k, const float* a, const float* b, float* c,
                       bool accumulate) {
  const int threads = team_.size();
  const int wide = std::max(m, n);
  const int blocks = (wide + kSplitAlign - 1) / kSplitAlign;
  const int parts = std::min(threads, blocks);
  if (parts <= 1 || int64_t{m} * n * k < kMinSplitMacs) {
    gemm(op, m, n, k, a, b, c, accumulate);
    return;
  }
  const int64_t lda = op == GemmOp::kTN ? m : k;
  const int64_t ldb = op == GemmOp::kNT ? k : n;
  const bool byColumns = n >= m;
  team_.forEach(parts, [&](int t) {
    const auto [b0, b1] = partOf(blocks, parts, t);
    const int first = int(b0) * kSplitAlign;
    const int last = std::min(wide, int(b1) * kSplitAlign);
    if (byColumns) {  // C[:, first:last] = op(A) op(B)[:, first:last]
      const float* bp = op == GemmOp::kNT ? b + int64_t{first} * k : b + first;
      gemmLd(op, m, last - first, k, a, lda, bp, ldb, c + first, n, accumulate);
    } else {  // C[first:last, :] = op(A)[first:last, :] op(B)
      const float* ap = op == GemmOp::kTN ? a + first : a + int64_t{first} * k;
      gemmLd(op, last - first, n, k, ap, lda, b, ldb, c + int64_t{first} * n, n, accumulate);
    }
  });
}

int CpuImpl::examplesParts(int examples, int64_t perExample) const {
  const int64_t most = int64_t{examples} * perExample / kElementGrain;
  return static_cast<int>(std::clamp<int64_t>(std::min<int64_t>(most, examples), 1, team_.size()));
}

void CpuImpl::reserveScratch(int parts, int64_t elements) {
  if (scratch_.size() < size_t(parts))
    scratch_.resize(size_t(parts));
  for (int t = 0; t < parts; ++t)
    if (scratch_[size_t(t)].size() < size_t(elements))
      scratch_[size_t(t)].resize(size_t(elements));
}

void CpuImpl::adam(std::span<float> w, std::span<float> m, std::span<float> v,
                   std::span<const float> g, float learningRate, float beta1, float beta2,
                   float eps, int step) {
  STRATA_ENFORCE_OP(w.size(), ==, m.size());
  STRATA_ENFORCE_OP(w.size(), ==, v.size());
  STRATA_ENFORCE_OP(w.size(), ==, g.size());
  STRATA_ENFORCE_OP(step, >=, 1);
  const float c1 = 1.0f / (1.0f - std::pow(beta1, static_cast<float>(step)));
  const float c2 = 1.0f / (1.0f - std::pow(beta2, static_cast<float>(step)));
  for (size_t i = 0; i < w.size(); ++i) {
    m[i] = beta1 * m[i] + (1.0f - beta1) * g[i];
    v[i] = beta2 * v[i] + (1.0f - beta2) * g[i] * g[i];
    w[i] -= learningRate * (m[i] * c1) / (std::sqrt(v[i] * c2) + eps);
  }
}

void CpuImpl::im2colKernel(const ConvDesc& d, const float* x, float* col) {
  im2col(d, x, d.inC, col);
}

void CpuImpl::col2imKernel(const ConvDesc& d, const float* col, float* x) {
  col2imAdd(d, col, d.inC, x);
}

void CpuImpl::biasAdd(float* y, const float* bias, int channels, int64_t positions) {
  MatrixMap(y, channels, positions).colwise() += ConstVectorMap(bias, channels);
}

void CpuImpl::biasGrad(const float* dy, float* dbias, int channels, int64_t positions) {
  for (int c = 0; c < channels; ++c)
    dbias[c] += orderedSum(dy + int64_t{c} * positions, positions);
}

void CpuImpl::zero(float* x, int64_t count) {
  scaleForAccumulate(x, count, 0.0f);
}

const CpuIsaTable& table() {
  static const CpuIsaTable kTable{
      [](ThreadTeam& team) -> std::unique_ptr<Backend> { return std::make_unique<CpuImpl>(team); },
      &CpuImpl::gemm,
      &CpuImpl::im2colKernel,
      &CpuImpl::col2imKernel,
      &CpuImpl::biasAdd,
      &CpuImpl::biasGrad,
      &CpuImpl::zero,
      &CpuImpl::attnSoftmaxForward,
      &CpuImpl::attnSoftmaxBackward,
      &CpuImpl::adam,
  };
  return kTable;
}

}  // namespace strata::nn::STRATA_CPU_ISA

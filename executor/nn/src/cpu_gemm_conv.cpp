// The CPU kernels of one ISA (cpu_kernels.cpp): GEMM (Eigen's blocked
// products, split over the team), convolution as im2col + GEMM, fully
// connected layers, and the bias kernels they share.
#include <Eigen/Core>
#include <algorithm>

#include "cpu_kernels.h"
#include "shape_checks.h"
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

// Below this many multiply-adds a GEMM stays on one thread: waking the team
// costs a few microseconds.
constexpr int64_t kMinSplitMacs = int64_t{1} << 20;
// Blocks of a split GEMM are whole multiples of this many rows or columns
// (a 16-float AVX-512 register, two AVX2 ones), so each thread's kernel runs
// full vectors.
constexpr int kSplitAlign = 16;

bool isPointwise(const ConvDesc& d) {
  return d.kernelH == 1 && d.kernelW == 1 && d.stride == 1 && d.pad == 0 && d.widthPad() == 0 &&
         d.dilation == 1;
}

// Unfolds `channels` input planes into col (K = channels * kh * kw rows, P =
// outH * outW columns): row (c, ki, kj) holds the input pixel each output
// position sees through kernel tap (ki, kj), zero where it falls in padding.
// Tap (ki, kj) of output (oh, ow) reads input (oh stride - pad + ki
// dilation, ow stride - padW + kj dilation).
void im2col(const ConvDesc& d, const float* x, int channels, float* col) {
  const int64_t outPlane = int64_t{d.outH} * d.outW;
  const int padW = d.widthPad();
  for (int c = 0; c < channels; ++c) {
    const float* plane = x + int64_t{c} * d.inH * d.inW;
    for (int ki = 0; ki < d.kernelH; ++ki) {
      for (int kj = 0; kj < d.kernelW; ++kj) {
        float* row = col + ((int64_t{c} * d.kernelH + ki) * d.kernelW + kj) * outPlane;
        for (int oh = 0; oh < d.outH; ++oh) {
          float* out = row + int64_t{oh} * d.outW;
          const int ih = oh * d.stride - d.pad + ki * d.dilation;
          if (ih < 0 || ih >= d.inH) {
            std::fill_n(out, d.outW, 0.0f);
            continue;
          }
          const float* in = plane + int64_t{ih} * d.inW;
          for (int ow = 0; ow < d.outW; ++ow) {
            const int iw = ow * d.stride - padW + kj * d.dilation;
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
  const int padW = d.widthPad();
  for (int c = 0; c < channels; ++c) {
    float* plane = x + int64_t{c} * d.inH * d.inW;
    for (int ki = 0; ki < d.kernelH; ++ki) {
      for (int kj = 0; kj < d.kernelW; ++kj) {
        const float* row = col + ((int64_t{c} * d.kernelH + ki) * d.kernelW + kj) * outPlane;
        for (int oh = 0; oh < d.outH; ++oh) {
          const int ih = oh * d.stride - d.pad + ki * d.dilation;
          if (ih < 0 || ih >= d.inH)
            continue;
          const float* in = row + int64_t{oh} * d.outW;
          float* out = plane + int64_t{ih} * d.inW;
          for (int ow = 0; ow < d.outW; ++ow) {
            const int iw = ow * d.stride - padW + kj * d.dilation;
            if (iw >= 0 && iw < d.inW)
              out[iw] += in[ow];
          }
        }
      }
    }
  }
}

}  // namespace

// ---- GEMM -------------------------------------------------------------------

void CpuImpl::gemm(GemmOp op, int m, int n, int k, const float* a, const float* b, float* c,
                   bool accumulate) {
  const int64_t lda = op == GemmOp::kTN ? m : k;
  const int64_t ldb = op == GemmOp::kNT ? k : n;
  gemmLd(op, m, n, k, a, lda, b, ldb, c, n, accumulate);
}

void CpuImpl::teamGemm(GemmOp op, int m, int n, int k, const float* a, const float* b, float* c,
                       bool accumulate) {
  // One call, however many threads share it.
  if (!runsGemm(op, m, n, k, accumulate))
    return;
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
// pointwise convolution (no copy), else its im2col in `col` (sized k x p),
// run when `run` (false in a record-only run).
const float* columns(const ConvDesc& d, const ConvGeometry& geo, const float* xg,
                     std::vector<float>& col, bool run) {
  if (geo.pointwise)
    return xg;
  if (run)
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
          columns(d, geo, x.data + (int64_t{n} * d.inC + int64_t{g} * cg) * inPlane, col,
                  geo.pointwise || runsColumns(MemKernel::kIm2col, double(k * p), d));
      float* yg = y.data + (int64_t{n} * d.filters + int64_t{g} * fg) * p;
      const float* wg = w + int64_t{g} * fg * k;
      gemmOn(splitGemm, GemmOp::kNN, fg, int(p), int(k), wg, cols, yg, false);
      if (bias && runs(MemKernel::kBias, double(fg) * double(p)))
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
  scaleForBeta(dx, beta);
  // dx of one example = col2im(W^T dy): each example writes its own slice.
  auto example = [&](int n, std::vector<float>& col, bool splitGemm) {
    for (int g = 0; g < d.groups; ++g) {
      float* dxg = dx.data + (int64_t{n} * d.inC + int64_t{g} * cg) * inPlane;
      const float* wg = w + int64_t{g} * fg * k;
      const float* dyg = dy.data + (int64_t{n} * d.filters + int64_t{g} * fg) * p;
      float* out = geo.pointwise ? dxg : col.data();
      gemmOn(splitGemm, GemmOp::kTN, int(k), int(p), fg, wg, dyg, out, geo.pointwise);
      if (!geo.pointwise && runsColumns(MemKernel::kCol2im, double(k * p), d))
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
        const float* cols =
            columns(d, geo, x.data + (n * d.inC + int64_t{g} * cg) * inPlane, col,
                    geo.pointwise || runsColumns(MemKernel::kIm2col, double(k * p), d));
        const float* dyg = dy.data + (n * d.filters + int64_t{g} * fg) * p;
        gemmOn(splitGemm, GemmOp::kNT, fg, int(k), int(p), dyg, cols, gw + int64_t{g} * fg * k,
               true);
        if (gbias && runs(MemKernel::kBiasGrad, double(fg) * double(p)))
          biasGrad(dyg, gbias + int64_t{g} * fg, fg, p);
      }
    }
  };
  if (!byExample) {
    examples(0, x.dims.n, scratch_[0], dw, dbias, true);
    return;
  }
  // Each thread sums its examples into its own partial gradient (zeroed
  // first); the partials then add onto dw in thread order (deterministic for
  // a given thread count): per thread a zero fill and the reduce of its
  // weight and bias partials, calls the lowering counts at this thread count.
  const int64_t weights = int64_t{d.filters} * k;
  const int64_t partial = weights + (dbias ? d.filters : 0);
  if (partials_.size() < size_t(threads))
    partials_.resize(size_t(threads));
  team_.forEach(threads, [&](int t) {
    std::vector<float>& mine = partials_[size_t(t)];
    // Record only: no partials; dw stands in for them (never written).
    float* gw = dw;
    if (runs(MemKernel::kZero, double(partial))) {
      mine.assign(size_t(partial), 0.0f);
      gw = mine.data();
    }
    const auto [first, last] = partOf(x.dims.n, threads, t);
    examples(first, last, scratch_[size_t(t)], gw, dbias ? gw + weights : nullptr, false);
  });
  for (int t = 0; t < threads; ++t) {
    const std::vector<float>& mine = partials_[size_t(t)];
    if (runs(MemKernel::kReduce, double(weights)))
      VectorMap(dw, weights) += ConstVectorMap(mine.data(), weights);
    if (dbias && runs(MemKernel::kReduce, double(d.filters)))
      VectorMap(dbias, d.filters) += ConstVectorMap(mine.data() + weights, d.filters);
  }
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
    if (bias && runs(MemKernel::kBias, double(y.elements())))
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
    if (bias && runs(MemKernel::kBias, double(d.outputs) * p))
      biasAdd(out, bias, d.outputs, p);
  }
}

void CpuImpl::fcBackwardData(const FcDesc& d, ConstTensorView dy, const float* w, TensorView dx,
                             float beta) {
  STRATA_ENFORCE_OP(dx.dims.n, ==, dy.dims.n);
  STRATA_ENFORCE_OP(dy.dims.c, ==, d.outputs);
  scaleForBeta(dx, beta);
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
    // Row by row: the order is the examples', whatever the alignment.
    if (dbias && runs(MemKernel::kBiasGrad, double(dy.elements())))
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
    if (dbias && runs(MemKernel::kBiasGrad, double(d.outputs) * p))
      biasGrad(g, dbias, d.outputs, p);
  }
}

// ---- kernels for calibration -------------------------------------------------

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

}  // namespace strata::nn::STRATA_CPU_ISA

// The CPU kernels against direct loops written from the definitions: conv
// (im2col + GEMM) against a naive direct convolution, and the closed forms
// of pooling, lrn and softmax.
#include <catch2/catch.hpp>
#include <cmath>

#include "helpers.h"
#include "strata/exec/nn/cpu_backend.h"

namespace strata::nn {
namespace {

// y[n][f][oh][ow] = b[f] + sum over the group's channels and the kernel of
// w[f][c][ki][kj] * x[n][g*cg + c][oh*s - p + ki][ow*s - p + kj].
Tensor naiveConv(const ConvDesc& d, const Tensor& x, std::span<const float> w,
                 std::span<const float> bias) {
  Tensor y(Dims{x.n(), d.filters, d.outH, d.outW});
  const int cg = d.inC / d.groups, fg = d.filters / d.groups;
  for (int n = 0; n < x.n(); ++n)
    for (int f = 0; f < d.filters; ++f)
      for (int oh = 0; oh < d.outH; ++oh)
        for (int ow = 0; ow < d.outW; ++ow) {
          double sum = bias.empty() ? 0.0 : bias[static_cast<size_t>(f)];
          const int g = f / fg;
          for (int c = 0; c < cg; ++c)
            for (int ki = 0; ki < d.kernelH; ++ki)
              for (int kj = 0; kj < d.kernelW; ++kj) {
                const int ih = oh * d.stride - d.pad + ki, iw = ow * d.stride - d.pad + kj;
                if (ih < 0 || ih >= d.inH || iw < 0 || iw >= d.inW)
                  continue;
                sum +=
                    double(
                        w[static_cast<size_t>(((f * cg + c) * d.kernelH + ki) * d.kernelW + kj)]) *
                    x.at(n, g * cg + c, ih, iw);
              }
          y.at(n, f, oh, ow) = static_cast<float>(sum);
        }
  return y;
}

// The adjoints of the same loops: dx and dw of <y, dy>.
void naiveConvBackward(const ConvDesc& d, const Tensor& x, std::span<const float> w,
                       const Tensor& dy, Tensor& dx, std::vector<double>& dw,
                       std::vector<double>& db) {
  dx = Tensor(x.dims());
  dw.assign(w.size(), 0.0);
  db.assign(static_cast<size_t>(d.filters), 0.0);
  const int cg = d.inC / d.groups, fg = d.filters / d.groups;
  for (int n = 0; n < x.n(); ++n)
    for (int f = 0; f < d.filters; ++f)
      for (int oh = 0; oh < d.outH; ++oh)
        for (int ow = 0; ow < d.outW; ++ow) {
          const double g = dy.at(n, f, oh, ow);
          db[static_cast<size_t>(f)] += g;
          for (int c = 0; c < cg; ++c)
            for (int ki = 0; ki < d.kernelH; ++ki)
              for (int kj = 0; kj < d.kernelW; ++kj) {
                const int ih = oh * d.stride - d.pad + ki, iw = ow * d.stride - d.pad + kj;
                if (ih < 0 || ih >= d.inH || iw < 0 || iw >= d.inW)
                  continue;
                const size_t wi =
                    static_cast<size_t>(((f * cg + c) * d.kernelH + ki) * d.kernelW + kj);
                const int ci = (f / fg) * cg + c;
                dw[wi] += g * x.at(n, ci, ih, iw);
                dx.at(n, ci, ih, iw) += static_cast<float>(g * w[wi]);
              }
        }
}

ConvDesc makeDesc(int inC, int inH, int inW, int filters, int kh, int kw, int stride, int pad,
                  int groups) {
  ConvDesc d{inC, inH, inW, filters, kh, kw, stride, pad, groups, 0, 0};
  d.outH = (inH + 2 * pad - kh) / stride + 1;
  d.outW = (inW + 2 * pad - kw) / stride + 1;
  return d;
}

TEST_CASE("conv (im2col + GEMM) equals a naive direct convolution", "[conv]") {
  const ConvDesc cases[] = {
      makeDesc(3, 9, 8, 5, 3, 3, 1, 1, 1),      // "same" 3x3
      makeDesc(3, 11, 11, 4, 5, 3, 2, 2, 1),    // rectangular kernel, stride 2
      makeDesc(4, 7, 6, 6, 3, 2, 3, 0, 2),      // groups 2, stride 3, no pad
      makeDesc(6, 5, 5, 6, 1, 1, 1, 0, 3),      // 1x1 grouped (no im2col)
      makeDesc(2, 12, 12, 3, 11, 11, 4, 2, 1),  // conv1 of AlexNet, scaled down
      makeDesc(4, 4, 4, 4, 3, 3, 1, 1, 4),      // depthwise
  };
  CpuBackend backend;
  for (const ConvDesc& d : cases) {
    CAPTURE(d.inC, d.inH, d.inW, d.filters, d.kernelH, d.kernelW, d.stride, d.pad, d.groups);
    Tensor x(Dims{2, d.inC, d.inH, d.inW});
    test::fillUniform(x.span(), 1);
    std::vector<float> w(
        static_cast<size_t>(d.filters * (d.inC / d.groups) * d.kernelH * d.kernelW));
    std::vector<float> bias(static_cast<size_t>(d.filters));
    test::fillUniform(w, 2);
    test::fillUniform(bias, 3);

    Tensor y(Dims{2, d.filters, d.outH, d.outW});
    backend.convForward(d, x.view(), w.data(), bias.data(), y.view());
    const Tensor expected = naiveConv(d, x, w, bias);
    for (int64_t i = 0; i < y.elements(); ++i)
      REQUIRE(y.data()[i] == Approx(expected.data()[i]).margin(1e-5));

    Tensor dy(y.dims());
    test::fillUniform(dy.span(), 4);
    Tensor dx(x.dims());
    dx.fill(7.0f);  // beta = 0 must overwrite, not add
    backend.convBackwardData(d, dy.view(), w.data(), dx.view(), 0.0f);
    std::vector<float> dw(w.size(), 0.0f), db(bias.size(), 0.0f);
    backend.convBackwardWeights(d, x.view(), dy.view(), dw.data(), db.data());

    Tensor dxRef;
    std::vector<double> dwRef, dbRef;
    naiveConvBackward(d, x, w, dy, dxRef, dwRef, dbRef);
    for (int64_t i = 0; i < dx.elements(); ++i)
      REQUIRE(dx.data()[i] == Approx(dxRef.data()[i]).margin(1e-5));
    for (size_t i = 0; i < dw.size(); ++i)
      REQUIRE(dw[i] == Approx(dwRef[i]).margin(1e-4));
    for (size_t i = 0; i < db.size(); ++i)
      REQUIRE(db[i] == Approx(dbRef[i]).margin(1e-4));

    // beta = 1 adds onto what is there; weight gradients accumulate.
    backend.convBackwardData(d, dy.view(), w.data(), dx.view(), 1.0f);
    backend.convBackwardWeights(d, x.view(), dy.view(), dw.data(), db.data());
    for (int64_t i = 0; i < dx.elements(); ++i)
      REQUIRE(dx.data()[i] == Approx(2 * dxRef.data()[i]).margin(2e-5));
    for (size_t i = 0; i < dw.size(); ++i)
      REQUIRE(dw[i] == Approx(2 * dwRef[i]).margin(2e-4));
  }
}

TEST_CASE("avg pool divides by the inputs inside the window, max pool ignores padding", "[pool]") {
  CpuBackend backend;
  // One 3x3 plane 1..9, window 2, stride 2, pad 1 -> 2x2 output; the top-left
  // window holds only x[0][0] (three of its cells are padding).
  Tensor x(Dims{1, 1, 3, 3});
  for (int i = 0; i < 9; ++i)
    x.data()[i] = static_cast<float>(i + 1) * (i % 2 == 0 ? -1.0f : 1.0f);
  const PoolDesc avg{PoolMode::kAvg, 1, 3, 3, 2, 2, 2, 1, 2, 2};
  Tensor y(Dims{1, 1, 2, 2});
  backend.poolForward(avg, x.view(), y.view(), nullptr);
  CHECK(y.data()[0] == Approx(-1.0));                    // x00 alone
  CHECK(y.data()[1] == Approx((2.0 - 3.0) / 2));         // x01, x02
  CHECK(y.data()[3] == Approx((-5.0 + 6 + 8 - 9) / 4));  // x11, x12, x21, x22
  PoolDesc max = avg;
  max.mode = PoolMode::kMax;
  std::vector<int32_t> argmax(4);
  backend.poolForward(max, x.view(), y.view(), argmax.data());
  CHECK(y.data()[0] == -1.0f);  // padding (no value) does not win over a negative input
  CHECK(argmax[0] == 0);
  CHECK(y.data()[3] == 8.0f);
  CHECK(argmax[3] == 7);
}

TEST_CASE("lrn follows the paper's formula", "[lrn]") {
  CpuBackend backend;
  Tensor x(Dims{1, 6, 1, 2});
  test::fillUniform(x.span(), 8, -3, 3);
  const LrnDesc d;  // size 5, k 2, alpha 1e-4, beta 0.75
  Tensor y(x.dims()), scale(x.dims());
  backend.lrnForward(d, x.view(), y.view(), scale.view());
  for (int c = 0; c < 6; ++c)
    for (int p = 0; p < 2; ++p) {
      double sum = 0;
      for (int j = std::max(0, c - 2); j <= std::min(5, c + 2); ++j)
        sum += double(x.at(0, j, 0, p)) * x.at(0, j, 0, p);
      const double expected = x.at(0, c, 0, p) / std::pow(2.0 + 1e-4 * sum, 0.75);
      CHECK(y.at(0, c, 0, p) == Approx(expected).epsilon(1e-6));
    }
}

TEST_CASE("softmax cross-entropy of known logits", "[softmax]") {
  CpuBackend backend;
  Tensor logits(Dims{2, 3, 1, 1});
  const float z[] = {1, 2, 3, 0, 0, 0};
  std::copy(std::begin(z), std::end(z), logits.data());
  const std::vector<int32_t> labels = {2, 1};
  Tensor grad(logits.dims());
  TensorView gradView = grad.view();
  const double loss = softmaxCrossEntropy(backend, logits.view(), labels, 0, &gradView);
  const double lse = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0));
  CHECK(loss == Approx(((lse - 3) + std::log(3.0)) / 2));
  CHECK(grad.data()[2] == Approx((std::exp(3.0 - lse) - 1) / 2));
  CHECK(grad.data()[3] == Approx((1.0 / 3) / 2));
  CHECK(grad.data()[4] == Approx((1.0 / 3 - 1) / 2));
}

}  // namespace
}  // namespace strata::nn

// Every layer's bwd_data and bwd_weights against central differences.
//
// The checks run in float, the type the kernels compute in, on small shapes.
// Why these numbers: a forward value carries a relative rounding error of
// ~1e-7, and only the outputs that depend on the perturbed element change
// between the two evaluations (the rest are bit-identical), so the difference
// quotient (L(x + eps) - L(x - eps)) / 2 eps with eps = 1e-2 carries an error
// of ~1e-7 * |L terms| / 2e-2 ~ 1e-5 of the gradient's scale. Truncation
// error is zero for the layers linear in what is perturbed (conv, fc, pool,
// add, dropout; relu and max pool away from their kinks, which the inputs
// avoid) and ~eps^2 |f'''| / 6 ~ 1e-5 for lrn, batchnorm and softmax. The
// tolerance, 1% of the larger of the two values plus 0.2% of the largest
// analytic gradient of the tensor, is 10x above both, while an indexing bug
// or a missing term is an error of the order of the gradient itself.
#include <fmt/format.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <functional>
#include <numeric>
#include <tuple>

#include "helpers.h"
#include "strata/exec/nn/cpu_backend.h"

namespace strata::nn {
namespace {

using test::NetworkBuilder;

using InputFill = std::function<void(std::span<float>)>;

void uniformInput(std::span<float> x) {
  test::fillUniform(x, 7);
}

// Values at least 0.1 away from zero, so relu's kink is never crossed.
void awayFromZero(std::span<float> x) {
  test::fillUniform(x, 11, 0.1f, 1.0f);
  for (size_t i = 0; i < x.size(); i += 2)
    x[i] = -x[i];
}

// Distinct values 0.05 apart in a shuffled order, so a max-pool window's
// winner does not change under a perturbation of 1e-2.
void distinctValues(std::span<float> x) {
  std::vector<int> order(x.size());
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937(5));
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = 0.05f * static_cast<float>(order[i]) - 0.025f * static_cast<float>(x.size());
}

struct Mismatch {
  int count = 0;
  std::string first;
};

// Compares analytic against numeric values of one tensor (see file comment).
void compare(const std::string& what, std::span<const float> analytic,
             const std::vector<double>& numeric, Mismatch& out) {
  const double scale = test::maxAbs(analytic);
  for (size_t i = 0; i < analytic.size(); ++i) {
    const double a = analytic[i];
    const double n = numeric[i];
    const double tolerance = 1e-2 * std::max(std::abs(a), std::abs(n)) + 2e-3 * scale + 1e-6;
    if (std::abs(a - n) > tolerance) {
      if (out.count++ == 0)
        out.first = fmt::format("{}[{}]: analytic {:.6g} numeric {:.6g} (tolerance {:.3g})", what,
                                i, a, n, tolerance);
    }
  }
}

// Checks d(objective)/d(input) and d(objective)/d(every parameter) of `net`.
// The objective is the softmax loss when the network ends in a softmax, else
// sum(output * r) for a fixed random r, whose gradient is r.
// `prepare`, when given, sets the model's parameters first (e.g. gains other
// than their initial 1).
void checkGradients(const Network& net, int batch, ModelOptions options = {},
                    const InputFill& fill = uniformInput, double eps = 1e-2,
                    const std::function<void(Model&)>& prepare = {}) {
  Model model(net, options);
  if (prepare)
    prepare(model);
  fill(model.input(batch).span());
  const int last = model.layerCount() - 1;
  const bool softmax = net.layers.back().kind == LayerKind::kSoftmax;
  std::vector<float> r;
  if (softmax) {
    const Shape in = net.layers.back().inShape;
    std::vector<int32_t> labels(static_cast<size_t>(batch * in.h * in.w));
    for (size_t i = 0; i < labels.size(); ++i)
      labels[i] = static_cast<int32_t>((i * 7 + 3) % static_cast<size_t>(in.c));
    model.setLabels(labels);
  }
  model.forwardAll();
  if (!softmax) {
    r.resize(static_cast<size_t>(model.output(last).elements()));
    test::fillUniform(r, 3);
    std::copy(r.begin(), r.end(), model.outputGrad(last).data());
  }
  model.zeroGradients();
  model.backwardAll(/*inputGradient=*/true);
  const std::vector<float> inputGrad(model.inputGrad().span().begin(),
                                     model.inputGrad().span().end());
  const std::vector<float> paramGrad(model.allGradients().begin(), model.allGradients().end());
  REQUIRE(inputGrad.size() == model.input().span().size());

  const auto objective = [&] {
    model.forwardAll();
    if (softmax)
      return model.loss();
    double sum = 0;
    const auto out = model.output(last).span();
    for (size_t i = 0; i < out.size(); ++i)
      sum += double(out[i]) * r[i];
    return sum;
  };
  const auto differentiate = [&](std::span<float> values) {
    std::vector<double> numeric(values.size());
    for (size_t i = 0; i < values.size(); ++i) {
      const float saved = values[i];
      values[i] = saved + static_cast<float>(eps);
      const double plus = objective();
      values[i] = saved - static_cast<float>(eps);
      const double minus = objective();
      values[i] = saved;
      numeric[i] = (plus - minus) / (2 * eps);
    }
    return numeric;
  };

  Mismatch mismatch;
  // An embedding's input holds token ids, which take no gradient.
  if (net.layers.front().kind != LayerKind::kEmbedding)
    compare("input", inputGrad, differentiate(model.input(batch).span()), mismatch);
  for (int l = 0; l <= last; ++l) {
    const ParamBlock b = model.paramBlock(l);
    if (b.size() == 0)
      continue;
    const std::span<const float> analytic(paramGrad.data() + b.offset,
                                          static_cast<size_t>(b.size()));
    compare(net.layers[static_cast<size_t>(l)].name + ".params", analytic,
            differentiate(model.parameters(l)), mismatch);
  }
  INFO(mismatch.first);
  CHECK(mismatch.count == 0);
}

// Token ids in [0, vocab): each id several times over a batch, so the
// embedding's scatter-add sums rows.
InputFill tokenIds(int vocab) {
  return [vocab](std::span<float> x) {
    for (size_t i = 0; i < x.size(); ++i)
      x[i] = static_cast<float>((i * 5 + 2) % static_cast<size_t>(vocab));
  };
}

TEST_CASE("conv gradients match central differences", "[gradient][conv]") {
  SECTION("3x2 kernel, stride 2, pad 1, bias") {
    NetworkBuilder b({3, 7, 6});
    b.add(LayerKind::kConv, test::convSpec(4, 3, 2, 2, 1));
    checkGradients(b.network(), 2);
  }
  SECTION("groups 2, 3x3, pad 1, no bias") {
    NetworkBuilder b({4, 5, 5});
    b.add(LayerKind::kConv, test::convSpec(6, 3, 3, 1, 1, 2, false));
    checkGradients(b.network(), 2);
  }
  SECTION("1x1 (the im2col-free path), groups 3") {
    NetworkBuilder b({6, 3, 4});
    b.add(LayerKind::kConv, test::convSpec(3, 1, 1, 1, 0, 3));
    checkGradients(b.network(), 3);
  }
}

TEST_CASE("pool gradients match central differences", "[gradient][pool]") {
  SECTION("max 3/2 pad 1") {
    NetworkBuilder b({2, 6, 7});
    b.add(LayerKind::kPool, test::poolSpec(PoolMode::kMax, 3, 2, 1));
    checkGradients(b.network(), 2, {}, distinctValues);
  }
  SECTION("max 2/2") {
    NetworkBuilder b({3, 4, 4});
    b.add(LayerKind::kPool, test::poolSpec(PoolMode::kMax, 2, 2));
    checkGradients(b.network(), 2, {}, distinctValues);
  }
  SECTION("avg 3/2 pad 1 (padding not counted)") {
    NetworkBuilder b({2, 6, 7});
    b.add(LayerKind::kPool, test::poolSpec(PoolMode::kAvg, 3, 2, 1));
    checkGradients(b.network(), 2);
  }
  SECTION("global avg") {
    NetworkBuilder b({3, 3, 5});
    b.add(LayerKind::kPool, test::poolSpec(PoolMode::kAvg, 0, 1, 0, true));
    checkGradients(b.network(), 2);
  }
  SECTION("global max") {
    NetworkBuilder b({3, 3, 5});
    b.add(LayerKind::kPool, test::poolSpec(PoolMode::kMax, 0, 1, 0, true));
    checkGradients(b.network(), 2, {}, distinctValues);
  }
}

TEST_CASE("fc gradients match central differences", "[gradient][fc]") {
  SECTION("flatten, bias") {
    NetworkBuilder b({3, 2, 2});
    b.add(LayerKind::kFc, test::fcSpec(5));
    checkGradients(b.network(), 3);
  }
  SECTION("per position (flatten: false), no bias") {
    NetworkBuilder b({3, 2, 3});
    b.add(LayerKind::kFc, test::fcSpec(4, false, false));
    checkGradients(b.network(), 2);
  }
  SECTION("per position, bias") {
    NetworkBuilder b({5, 3, 1});
    b.add(LayerKind::kFc, test::fcSpec(2, false, true));
    checkGradients(b.network(), 2);
  }
}

TEST_CASE("relu gradients match central differences", "[gradient][relu]") {
  NetworkBuilder b({3, 4, 2});
  b.add(LayerKind::kRelu);
  checkGradients(b.network(), 2, {}, awayFromZero);
}

TEST_CASE("lrn gradients match central differences", "[gradient][lrn]") {
  // The paper's alpha = 1e-4 makes the cross-channel term ~1e-4 of the
  // gradient, below what a difference quotient resolves in float, so the
  // formula is checked with a strong alpha, and the defaults separately.
  ModelOptions strong;
  strong.lrn = LrnDesc{5, 1.0f, 0.5f, 0.75f};
  SECTION("size 5, strong alpha") {
    NetworkBuilder b({7, 2, 3});
    b.add(LayerKind::kLrn, test::lrnSpec(5));
    checkGradients(b.network(), 2, strong);
  }
  SECTION("size 4 (window [i-1, i+2]), strong alpha") {
    NetworkBuilder b({6, 2, 2});
    b.add(LayerKind::kLrn, test::lrnSpec(4));
    checkGradients(b.network(), 2, strong);
  }
  SECTION("size 5, the paper's constants") {
    NetworkBuilder b({7, 2, 3});
    b.add(LayerKind::kLrn, test::lrnSpec(5));
    checkGradients(b.network(), 2);
  }
}

TEST_CASE("dropout gradients match central differences", "[gradient][dropout]") {
  // The mask is a pure function of (seed, step, layer, row, neuron): repeated
  // forward passes see the same mask, so the layer is linear in its input.
  NetworkBuilder b({4, 3, 2});
  b.add(LayerKind::kDropout, test::dropoutSpec(0.5));
  checkGradients(b.network(), 3);
}

TEST_CASE("batchnorm gradients match central differences", "[gradient][batchnorm]") {
  NetworkBuilder b({3, 2, 2});
  b.add(LayerKind::kConv, test::convSpec(3, 1, 1));  // so gamma and shift are not 1 and 0 only
  b.add(LayerKind::kBatchNorm);
  checkGradients(b.network(), 4);
}

TEST_CASE("add gradients match central differences, with shared readers", "[gradient][add]") {
  // input -> conv a; add(a, input); conv c reads the sum; add(c, sum): the
  // input and the first sum each have two readers whose gradients must sum.
  NetworkBuilder b({3, 4, 4});
  const int a = b.add(LayerKind::kConv, test::convSpec(3, 1, 1), {-1});
  const int sum = b.add(LayerKind::kAdd, {}, {a, -1});
  const int c = b.add(LayerKind::kConv, test::convSpec(3, 3, 3, 1, 1), {sum});
  b.add(LayerKind::kAdd, {}, {c, sum});
  checkGradients(b.network(), 2);
}

TEST_CASE("softmax cross-entropy gradients match central differences", "[gradient][softmax]") {
  SECTION("classifier") {
    NetworkBuilder b({5, 1, 1});
    b.add(LayerKind::kSoftmax);
    checkGradients(b.network(), 3, {}, [](std::span<float> x) { test::fillUniform(x, 9, -3, 3); });
  }
  SECTION("per position") {
    NetworkBuilder b({4, 2, 3});
    b.add(LayerKind::kSoftmax);
    checkGradients(b.network(), 2, {}, [](std::span<float> x) { test::fillUniform(x, 9, -3, 3); });
  }
}

TEST_CASE("a small network with every kind of layer matches central differences", "[gradient]") {
  NetworkBuilder b({3, 8, 8});
  b.add(LayerKind::kConv, test::convSpec(4, 3, 3, 1, 1));
  b.add(LayerKind::kRelu);
  b.add(LayerKind::kLrn, test::lrnSpec(3));
  b.add(LayerKind::kPool, test::poolSpec(PoolMode::kMax, 2, 2));
  b.add(LayerKind::kBatchNorm);
  const int conv = b.add(LayerKind::kConv, test::convSpec(4, 3, 3, 1, 1, 2));
  b.add(LayerKind::kAdd, {}, {conv, conv - 1});
  b.add(LayerKind::kPool, test::poolSpec(PoolMode::kAvg, 2, 2));
  b.add(LayerKind::kFc, test::fcSpec(6));
  b.add(LayerKind::kRelu);
  b.add(LayerKind::kDropout, test::dropoutSpec(0.3));
  b.add(LayerKind::kFc, test::fcSpec(4));
  b.add(LayerKind::kSoftmax);
  ModelOptions options;
  options.lrn = LrnDesc{3, 1.0f, 0.5f, 0.75f};
  // eps 1e-3: relu and max pool sit deep in the network, where a larger step
  // could cross a kink.
  checkGradients(b.network(), 3, options, uniformInput, 1e-3);
}

// ---- vision networks' layers -----------------------------------------------

// Values in [-5, 8) at least 0.1 away from every kink of relu6 (0, 6),
// hardsigmoid and hardswish (-3, 3), so a perturbation of 1e-2 crosses none.
void awayFromKinks(std::span<float> x) {
  test::fillUniform(x, 19, -5.0f, 8.0f);
  for (float& v : x)
    for (float kink : {-3.0f, 0.0f, 3.0f, 6.0f})
      if (std::abs(v - kink) < 0.1f)
        v = kink + (v < kink ? -0.1f : 0.1f) * 1.5f;
}

LayerSpec convWith(int filters, int kernelH, int kernelW, int stride, int pad, int padW,
                   int dilation) {
  LayerSpec s = test::convSpec(filters, kernelH, kernelW, stride, pad);
  s.padW = padW;
  s.dilation = dilation;
  return s;
}

TEST_CASE("conv gradients with a column pad and dilation match central differences",
          "[gradient][conv][vision]") {
  SECTION("1x7 kernel, pad 0 x 3 (Inception-v3's)") {
    NetworkBuilder b({2, 4, 6});
    b.add(LayerKind::kConv, convWith(3, 1, 7, 1, 0, 3, 1));
    CHECK(b.network().layers[0].outShape == Shape{3, 4, 6});
    checkGradients(b.network(), 2);
  }
  SECTION("3x2 kernel, stride 2, pad 2 x 1") {
    NetworkBuilder b({3, 7, 6});
    b.add(LayerKind::kConv, convWith(4, 3, 2, 2, 2, 1, 1));
    checkGradients(b.network(), 2);
  }
  SECTION("3x3 kernel, dilation 2, pad 2") {
    NetworkBuilder b({3, 7, 6});
    b.add(LayerKind::kConv, convWith(4, 3, 3, 1, 2, -1, 2));
    CHECK(b.network().layers[0].outShape == Shape{4, 7, 6});
    checkGradients(b.network(), 2);
  }
  SECTION("3x3 kernel, dilation 2, stride 2, pad 1 x 3, groups 2") {
    NetworkBuilder b({4, 8, 7});
    LayerSpec s = convWith(6, 3, 3, 2, 1, 3, 2);
    s.groups = 2;
    b.add(LayerKind::kConv, s);
    checkGradients(b.network(), 2);
  }
  SECTION("1x1 kernel, pad 0 x 1 (not the im2col-free path)") {
    NetworkBuilder b({3, 3, 4});
    b.add(LayerKind::kConv, convWith(2, 1, 1, 1, 0, 1, 1));
    CHECK(b.network().layers[0].outShape == Shape{2, 3, 6});
    checkGradients(b.network(), 2);
  }
}

TEST_CASE("max pool with ceil_mode: gradients match central differences",
          "[gradient][pool][vision]") {
  SECTION("3/2 over 6 x 8: the last window hangs over both edges") {
    NetworkBuilder b({2, 6, 8});
    LayerSpec s = test::poolSpec(PoolMode::kMax, 3, 2);
    s.ceilMode = true;
    b.add(LayerKind::kPool, s);
    CHECK(b.network().layers[0].outShape == Shape{2, 3, 4});
    checkGradients(b.network(), 2, {}, distinctValues);
  }
  SECTION("2/2 pad 1 over 5 x 5") {
    NetworkBuilder b({2, 5, 5});
    LayerSpec s = test::poolSpec(PoolMode::kMax, 2, 2, 1);
    s.ceilMode = true;
    b.add(LayerKind::kPool, s);
    CHECK(b.network().layers[0].outShape == Shape{2, 3, 3});
    checkGradients(b.network(), 2, {}, distinctValues);
  }
}

TEST_CASE("activation gradients match central differences", "[gradient][vision]") {
  for (LayerKind kind : {LayerKind::kSigmoid, LayerKind::kSilu, LayerKind::kRelu6,
                         LayerKind::kHardSigmoid, LayerKind::kHardSwish, LayerKind::kTanh}) {
    INFO(toString(kind));
    NetworkBuilder b({3, 4, 5});
    b.add(kind);
    checkGradients(b.network(), 2, {}, awayFromKinks);
    // Read twice (summed gradients) and after a layer that changes scale.
    NetworkBuilder twice({3, 4, 5});
    const int act = twice.add(kind, {}, {-1});
    twice.add(LayerKind::kAdd, {}, {act, -1});
    checkGradients(twice.network(), 2, {}, awayFromKinks);
  }
}

TEST_CASE("concat gradients match central differences", "[gradient][concat][vision]") {
  SECTION("two inputs of 2 and 5 channels") {
    NetworkBuilder b({3, 4, 4});
    const int a = b.add(LayerKind::kConv, test::convSpec(2, 3, 3, 1, 1), {-1});
    const int c = b.add(LayerKind::kConv, test::convSpec(5, 1, 1), {-1});
    b.add(LayerKind::kConcat, {}, {a, c});
    CHECK(b.network().layers.back().outShape == Shape{7, 4, 4});
    checkGradients(b.network(), 2);
  }
  SECTION("three inputs of 3, 1 and 2 channels, the network input and a shared one") {
    NetworkBuilder b({1, 3, 5});
    const int a = b.add(LayerKind::kConv, test::convSpec(3, 3, 3, 1, 1), {-1});
    const int c = b.add(LayerKind::kConv, test::convSpec(2, 1, 1), {a});
    const int cat = b.add(LayerKind::kConcat, {}, {a, -1, c});
    CHECK(b.network().layers.back().outShape == Shape{6, 3, 5});
    b.add(LayerKind::kConv, test::convSpec(2, 3, 3, 1, 1), {cat});
    checkGradients(b.network(), 3);
  }
  SECTION("one input twice") {
    NetworkBuilder b({2, 3, 3});
    b.add(LayerKind::kConcat, {}, {-1, -1});
    checkGradients(b.network(), 2);
  }
}

TEST_CASE("slice and shuffle gradients match central differences",
          "[gradient][slice][shuffle][vision]") {
  SECTION("a ShuffleNetV2 unit: half kept, half convolved, joined and shuffled") {
    NetworkBuilder b({4, 3, 3});
    LayerSpec keep, take;
    keep.channels = 2;
    take.offset = 2;
    take.channels = 2;
    const int k = b.add(LayerKind::kSlice, keep, {-1});
    const int t = b.add(LayerKind::kSlice, take, {-1});
    const int conv = b.add(LayerKind::kConv, test::convSpec(2, 3, 3, 1, 1), {t});
    b.add(LayerKind::kConcat, {}, {k, conv});
    LayerSpec shuffle;
    shuffle.groups = 2;
    b.add(LayerKind::kShuffle, shuffle);
    b.add(LayerKind::kConv, test::convSpec(3, 1, 1));
    checkGradients(b.network(), 2);
  }
  SECTION("one slice alone of its input, in the middle of the channels") {
    NetworkBuilder b({5, 2, 3});
    b.add(LayerKind::kConv, test::convSpec(6, 3, 3, 1, 1), {-1});
    LayerSpec middle;
    middle.offset = 2;
    middle.channels = 3;
    b.add(LayerKind::kSlice, middle);
    LayerSpec shuffle;
    shuffle.groups = 3;
    b.add(LayerKind::kShuffle, shuffle);
    checkGradients(b.network(), 3);
  }
}

TEST_CASE("layer scale gradients match central differences", "[gradient][scale][vision]") {
  // A ConvNeXt-like residual: depthwise conv, scale, add to the input; and
  // a scale of the network input itself.
  NetworkBuilder b({3, 4, 3});
  LayerSpec depthwise = test::convSpec(3, 3, 3, 1, 1);
  depthwise.groups = 3;
  const int dw = b.add(LayerKind::kConv, depthwise, {-1});
  const int gamma = b.add(LayerKind::kScale, {}, {dw});
  const int direct = b.add(LayerKind::kScale, {}, {-1});
  b.add(LayerKind::kAdd, {}, {gamma, direct, -1});
  b.add(LayerKind::kConv, test::convSpec(2, 1, 1));
  // Gammas in [0.5, 1.5), so that one left out of a gradient shows.
  const auto gammas = [](Model& model) {
    for (int l = 0; l < model.layerCount(); ++l)
      if (model.network().layers[static_cast<size_t>(l)].kind == LayerKind::kScale)
        test::fillUniform(model.parameters(l), static_cast<uint32_t>(23 + l), 0.5f, 1.5f);
  };
  checkGradients(b.network(), 3, {}, uniformInput, 1e-2, gammas);
}

TEST_CASE("mul gradients match central differences", "[gradient][mul][vision]") {
  SECTION("a per-channel gate (squeeze-excitation)") {
    // x -> global avg pool -> 1x1 conv -> sigmoid -> gate; y = x * gate: x
    // takes gradients through both.
    NetworkBuilder b({4, 3, 5});
    b.add(LayerKind::kPool, test::poolSpec(PoolMode::kAvg, 0, 1, 0, true), {-1});
    b.add(LayerKind::kConv, test::convSpec(4, 1, 1));
    const int gate = b.add(LayerKind::kSigmoid);
    b.add(LayerKind::kMul, {}, {-1, gate});
    CHECK(b.network().layers.back().outShape == Shape{4, 3, 5});
    checkGradients(b.network(), 3);
  }
  SECTION("a gate of x's shape") {
    NetworkBuilder b({3, 4, 2});
    const int g = b.add(LayerKind::kConv, test::convSpec(3, 3, 3, 1, 1), {-1});
    b.add(LayerKind::kMul, {}, {g, -1});
    checkGradients(b.network(), 2);
  }
  SECTION("x * x") {
    NetworkBuilder b({3, 2, 3});
    b.add(LayerKind::kMul, {}, {-1, -1});
    checkGradients(b.network(), 2);
  }
  SECTION("per-channel gate over one position (the same-shape path)") {
    NetworkBuilder b({5, 1, 1});
    b.add(LayerKind::kFc, test::fcSpec(5, false));
    const int gate = b.add(LayerKind::kHardSigmoid);
    b.add(LayerKind::kMul, {}, {-1, gate});
    checkGradients(b.network(), 3);
  }
}

TEST_CASE("a small vision network matches central differences", "[gradient][vision]") {
  // A MobileNetV3-like block: an expanding 1x1 conv, hardswish, a depthwise
  // dilated conv, a squeeze-excitation gate (relu6, hardsigmoid), a
  // projection concatenated with the block's input, a ceil-mode max pool,
  // and a classifier with silu.
  NetworkBuilder b({3, 6, 6});
  b.add(LayerKind::kConv, test::convSpec(6, 1, 1), {-1});
  b.add(LayerKind::kBatchNorm);
  b.add(LayerKind::kHardSwish);
  LayerSpec depthwise = convWith(6, 3, 3, 1, 2, -1, 2);
  depthwise.groups = 6;
  const int dw = b.add(LayerKind::kConv, depthwise);
  b.add(LayerKind::kPool, test::poolSpec(PoolMode::kAvg, 0, 1, 0, true));
  b.add(LayerKind::kConv, test::convSpec(3, 1, 1));
  b.add(LayerKind::kRelu6);
  b.add(LayerKind::kConv, test::convSpec(6, 1, 1));
  const int gate = b.add(LayerKind::kHardSigmoid);
  const int se = b.add(LayerKind::kMul, {}, {dw, gate});
  const int project = b.add(LayerKind::kConv, test::convSpec(3, 1, 1), {se});
  b.add(LayerKind::kConcat, {}, {project, -1});
  LayerSpec ceil = test::poolSpec(PoolMode::kMax, 2, 2);
  ceil.ceilMode = true;
  b.add(LayerKind::kPool, ceil);
  b.add(LayerKind::kFc, test::fcSpec(5));
  b.add(LayerKind::kSilu);
  b.add(LayerKind::kFc, test::fcSpec(4));
  b.add(LayerKind::kSoftmax);
  // eps 1e-3: max pool, relu6, hardswish and hardsigmoid sit deep in the
  // network, where a larger step could cross a kink.
  checkGradients(b.network(), 3, {}, uniformInput, 1e-3);
}

// ---- transformer layers ----------------------------------------------------

LayerSpec attentionSpec(int heads, bool causal, bool bias = true) {
  LayerSpec s;
  s.heads = heads;
  s.causal = causal;
  s.bias = bias;
  return s;
}

LayerSpec embeddingSpec(int vocab, int features, int positions) {
  LayerSpec s;
  s.vocab = vocab;
  s.outputs = features;
  s.positions = positions;
  return s;
}

LayerSpec tiedSpec(int vocab, int embedding, bool bias = false) {
  LayerSpec s = test::fcSpec(vocab, false, bias);
  s.tiedTo = embedding;
  return s;
}

TEST_CASE("layernorm gradients match central differences", "[gradient][layernorm]") {
  SECTION("positions along h and w") {
    NetworkBuilder b({5, 3, 2});
    b.add(LayerKind::kLayerNorm);
    checkGradients(b.network(), 2);
  }
  SECTION("after a per-position fc, so gain and bias are not 1 and 0 only") {
    NetworkBuilder b({4, 7, 1});
    b.add(LayerKind::kLayerNorm);
    b.add(LayerKind::kFc, test::fcSpec(3, false));
    b.add(LayerKind::kLayerNorm);
    checkGradients(b.network(), 3);
  }
}

TEST_CASE("gelu gradients match central differences", "[gradient][gelu]") {
  NetworkBuilder b({3, 4, 2});
  b.add(LayerKind::kGelu);
  checkGradients(b.network(), 2, {}, [](std::span<float> x) { test::fillUniform(x, 13, -3, 3); });
}

// ---- Llama's layers --------------------------------------------------------

// Gains drawn in [0.5, 1.5) for every rmsnorm of the model, so that a gain
// left out of a gradient shows.
void randomGains(Model& model) {
  for (int l = 0; l < model.layerCount(); ++l)
    if (model.network().layers[static_cast<size_t>(l)].kind == LayerKind::kRmsNorm)
      test::fillUniform(model.parameters(l), static_cast<uint32_t>(17 + l), 0.5f, 1.5f);
}

LayerSpec rmsNormSpec(double eps = 1e-5) {
  LayerSpec s;
  s.eps = eps;
  return s;
}

LayerSpec gqaSpec(int heads, int kvHeads, bool rotary, bool bias, double base = 10000,
                  int rotaryDims = 0) {
  LayerSpec s = attentionSpec(heads, true, bias);
  s.kvHeads = kvHeads;
  s.rotary = rotary;
  s.rotaryBase = base;
  s.rotaryDims = rotaryDims;
  return s;
}

TEST_CASE("rmsnorm gradients match central differences", "[gradient][rmsnorm][llama]") {
  SECTION("positions along h and w, gains not 1") {
    NetworkBuilder b({5, 3, 2});
    b.add(LayerKind::kRmsNorm, rmsNormSpec());
    checkGradients(b.network(), 2, {}, uniformInput, 1e-2, randomGains);
  }
  SECTION("after a per-position fc, a large eps") {
    NetworkBuilder b({4, 7, 1});
    b.add(LayerKind::kRmsNorm, rmsNormSpec(0.1));
    b.add(LayerKind::kFc, test::fcSpec(3, false));
    b.add(LayerKind::kRmsNorm, rmsNormSpec());
    checkGradients(b.network(), 3, {}, uniformInput, 1e-2, randomGains);
  }
}

TEST_CASE("swiglu gradients match central differences", "[gradient][swiglu][llama]") {
  // 6 channels: a = channels 0..2, b = 3..5; values over silu's curve.
  NetworkBuilder b({6, 4, 2});
  b.add(LayerKind::kSwiglu);
  checkGradients(b.network(), 2, {}, [](std::span<float> x) { test::fillUniform(x, 13, -3, 3); });
}

TEST_CASE("grouped-query and rotary attention gradients match central differences",
          "[gradient][attention][llama]") {
  // d = 8: 4 query heads of 2 features over 2 or 1 key/value heads, and 2
  // query heads of 4 features over 1; rotary with base 10 (angles of several
  // radians within T = 7) and Llama's 10000; biases on one case.
  struct Case {
    int heads, kvHeads;
    bool rotary, bias;
    double base;
  };
  for (const Case c :
       {Case{4, 2, false, false, 10000}, Case{4, 1, true, false, 10}, Case{2, 1, true, true, 10},
        Case{4, 2, true, false, 10000}, Case{4, 4, true, false, 10}}) {
    for (const int t : {7, 5}) {
      INFO("heads " << c.heads << " kv_heads " << c.kvHeads << " rotary " << c.rotary << " bias "
                    << c.bias << " base " << c.base << " T " << t);
      NetworkBuilder b({8, t, 1});
      b.add(LayerKind::kAttention, gqaSpec(c.heads, c.kvHeads, c.rotary, c.bias, c.base));
      checkGradients(b.network(), 2);
    }
  }
  SECTION("partial rotary (GPT-NeoX): 2 of each head's 4 features turned, biases") {
    // d = 8, 2 heads of 4 features, the first 2 turned; base 10.
    NetworkBuilder b({8, 5, 1});
    b.add(LayerKind::kAttention, gqaSpec(2, 2, true, true, 10, 2));
    REQUIRE(b.network().layers[0].rotaryFeatures() == 2);
    checkGradients(b.network(), 2);
  }
}

TEST_CASE("rotary positions turn each feature pair by p theta_i, and back", "[rotary][llama]") {
  // One head of dh = 4 over T = 3: pairs (0, 2) with theta_0 = 1 and (1, 3)
  // with theta_1 = base^(-1/2) = 0.1 for base 100 (Su et al. 2021, eq. 15).
  std::vector<float> table;
  CpuBackend::rotaryTable(4, 3, 100.0f, table);
  // Features 0 and 1 are 1 and features 2 and 3 are 0 at every position:
  // after the turn, feature i is cos(p theta_i) and i + 2 is sin(p theta_i).
  std::vector<float> x = {1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0};
  CpuBackend::rotaryKernel(x.data(), 1, 4, 4, 3, table.data(), false);
  for (int p = 0; p < 3; ++p) {
    INFO("position " << p);
    CHECK(x[size_t(p)] == Approx(std::cos(p * 1.0)).margin(1e-6));
    CHECK(x[size_t(6 + p)] == Approx(std::sin(p * 1.0)).margin(1e-6));
    CHECK(x[size_t(3 + p)] == Approx(std::cos(p * 0.1)).margin(1e-6));
    CHECK(x[size_t(9 + p)] == Approx(std::sin(p * 0.1)).margin(1e-6));
  }
  // The inverse (R^T) turns it back.
  CpuBackend::rotaryKernel(x.data(), 1, 4, 4, 3, table.data(), true);
  const std::vector<float> start = {1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0};
  for (size_t i = 0; i < x.size(); ++i)
    CHECK(x[i] == Approx(start[i]).margin(1e-6));
}

TEST_CASE("partial rotary positions turn the first r features of each head alone",
          "[rotary][llama]") {
  // Two heads of dh = 6 over T = 2, r = 2 (GPT-NeoX's rotary_pct 1/3): the
  // pair (0, 1) of each head turns by p theta_0 = p (theta_0 = base^0);
  // features 2..5 stay.
  std::vector<float> table;
  CpuBackend::rotaryTable(2, 2, 10000.0f, table);
  REQUIRE(table.size() == 4);
  std::vector<float> x(24);
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = static_cast<float>(i + 1);
  const std::vector<float> start = x;
  CpuBackend::rotaryKernel(x.data(), 2, 6, 2, 2, table.data(), false);
  for (int h = 0; h < 2; ++h)
    for (int p = 0; p < 2; ++p) {
      INFO("head " << h << " position " << p);
      const size_t lo = size_t(h * 12 + p), hi = lo + 2;  // features 0 and 1
      const double c = std::cos(p), s = std::sin(p);
      CHECK(x[lo] == Approx(start[lo] * c - start[hi] * s).margin(1e-5));
      CHECK(x[hi] == Approx(start[hi] * c + start[lo] * s).margin(1e-5));
      for (int f = 2; f < 6; ++f)
        CHECK(x[size_t(h * 12 + f * 2 + p)] == start[size_t(h * 12 + f * 2 + p)]);
    }
  CpuBackend::rotaryKernel(x.data(), 2, 6, 2, 2, table.data(), true);
  for (size_t i = 0; i < x.size(); ++i)
    CHECK(x[i] == Approx(start[i]).margin(1e-5));
}

TEST_CASE("grouped-query attention equals multi-head attention with each K and V head repeated",
          "[attention][llama]") {
  // d = 8, 4 query heads of 2 features, T = 5. Grouped: 2 key/value heads
  // (Wqkv rows: Q 0..7, K 8..11, V 12..15, then Wo). Its multi-head twin
  // repeats K and V head g for query heads 2g and 2g + 1 (rows: Q 0..7, K
  // 8..15, V 16..23, then Wo): the same outputs, with or without rotary.
  for (const bool rotary : {false, true}) {
    INFO("rotary " << rotary);
    NetworkBuilder g({8, 5, 1}), m({8, 5, 1});
    g.add(LayerKind::kAttention, gqaSpec(4, 2, rotary, false, 10));
    m.add(LayerKind::kAttention, gqaSpec(4, 4, rotary, false, 10));
    Model grouped(g.network()), multi(m.network());
    const auto wg = grouped.parameters(0);
    const auto wm = multi.parameters(0);
    REQUIRE(wg.size() == 16 * 8 + 64);
    REQUIRE(wm.size() == 24 * 8 + 64);
    const auto row = [](std::span<float> w, int r) { return w.subspan(size_t(r) * 8, 8); };
    for (int r = 0; r < 8; ++r)  // Q
      std::ranges::copy(row(wg, r), row(wm, r).begin());
    for (int h = 0; h < 4; ++h)  // K and V: query head h reads group h / 2
      for (int f = 0; f < 2; ++f) {
        std::ranges::copy(row(wg, 8 + 2 * (h / 2) + f), row(wm, 8 + 2 * h + f).begin());
        std::ranges::copy(row(wg, 12 + 2 * (h / 2) + f), row(wm, 16 + 2 * h + f).begin());
      }
    std::ranges::copy(wg.subspan(128, 64), wm.subspan(192, 64).begin());  // Wo
    test::fillUniform(grouped.input(2).span(), 5);
    std::ranges::copy(grouped.input().span(), multi.input(2).span().begin());
    grouped.forwardAll();
    multi.forwardAll();
    const auto yg = grouped.output(0).span(), ym = multi.output(0).span();
    REQUIRE(yg.size() == ym.size());
    CHECK(test::maxAbs(yg) > 0.01);
    for (size_t i = 0; i < yg.size(); ++i)
      CHECK(yg[i] == Approx(ym[i]).margin(1e-6));
  }
}

TEST_CASE("attention with Q, K and V biases alone (Qwen2) matches central differences",
          "[gradient][attention][llama]") {
  // qkv_bias: the biases are Q's, K's and V's rows, none for the output
  // projection: multi-head without rotary (the GPT path) and grouped-query
  // with rotary (Qwen2's).
  for (const auto& [heads, kvHeads, rotary] :
       {std::tuple{2, 2, false}, std::tuple{4, 2, true}, std::tuple{4, 1, true}}) {
    for (const int t : {7, 5}) {
      INFO("heads " << heads << " kv_heads " << kvHeads << " rotary " << rotary << " T " << t);
      NetworkBuilder b({8, t, 1});
      LayerSpec s = gqaSpec(heads, kvHeads, rotary, false, 10);
      s.qkvBias = true;
      b.add(LayerKind::kAttention, s);
      const Network net = b.network();
      // d = 8, dh = 8 / heads: Wqkv (8 + 2 kv) x 8, Wo 8 x 8, then the
      // 8 + 2 kv biases alone.
      const int64_t rows = 8 + 2 * (8 / heads) * kvHeads;
      CHECK(net.layers[0].params == (rows + 8) * 8 + rows);
      checkGradients(net, 2);
    }
  }
}

TEST_CASE("a small Llama matches central differences", "[gradient][llama]") {
  // One Llama block (as the loader expands `llama`) and an untied head.
  NetworkBuilder b({1, 6, 1});
  const int embed = b.add(LayerKind::kEmbedding, embeddingSpec(11, 8, 0));
  b.add(LayerKind::kRmsNorm, rmsNormSpec());
  const int attn = b.add(LayerKind::kAttention, gqaSpec(4, 2, true, false, 10));
  const int add1 = b.add(LayerKind::kAdd, {}, {embed, attn});
  b.add(LayerKind::kRmsNorm, rmsNormSpec());
  b.add(LayerKind::kFc, test::fcSpec(12, false, false));
  b.add(LayerKind::kSwiglu);
  const int down = b.add(LayerKind::kFc, test::fcSpec(8, false, false));
  b.add(LayerKind::kAdd, {}, {add1, down});
  b.add(LayerKind::kRmsNorm, rmsNormSpec());
  b.add(LayerKind::kFc, test::fcSpec(11, false, false));
  b.add(LayerKind::kSoftmax);
  checkGradients(b.network(), 2, {}, tokenIds(11), 1e-3, randomGains);
}

TEST_CASE("attention gradients match central differences", "[gradient][attention]") {
  // T = 7 and 5: sequence lengths that divide nothing; d = 6 with 1 and 3
  // heads (dh = 6 and 2).
  for (const bool causal : {true, false}) {
    for (const int heads : {1, 3}) {
      for (const int t : {7, 5}) {
        INFO("causal " << causal << " heads " << heads << " T " << t);
        NetworkBuilder b({6, t, 1});
        b.add(LayerKind::kAttention, attentionSpec(heads, causal, t == 7));
        checkGradients(b.network(), 2);
      }
    }
  }
  SECTION("positions along w, read by two layers (summed input gradient)") {
    NetworkBuilder b({4, 1, 5});
    const int a = b.add(LayerKind::kAttention, attentionSpec(2, true), {-1});
    b.add(LayerKind::kAdd, {}, {a, -1});
    checkGradients(b.network(), 3);
  }
}

TEST_CASE("embedding weight gradients match central differences", "[gradient][embedding]") {
  SECTION("with a position table longer than the sequence") {
    NetworkBuilder b({1, 5, 1});
    b.add(LayerKind::kEmbedding, embeddingSpec(7, 4, 6));
    checkGradients(b.network(), 3, {}, tokenIds(7));
  }
  SECTION("without positions") {
    NetworkBuilder b({1, 4, 1});
    b.add(LayerKind::kEmbedding, embeddingSpec(5, 3, 0));
    checkGradients(b.network(), 2, {}, tokenIds(5));
  }
}

TEST_CASE("a tied fc's gradient lands in its embedding's table", "[gradient][tied]") {
  for (const bool bias : {false, true}) {
    INFO("bias " << bias);
    NetworkBuilder b({1, 5, 1});
    const int wte = b.add(LayerKind::kEmbedding, embeddingSpec(9, 6, 5));
    b.add(LayerKind::kLayerNorm);
    const int lm = b.add(LayerKind::kFc, tiedSpec(9, wte, bias));
    b.add(LayerKind::kSoftmax);
    Model model(b.network());
    CHECK(model.paramBlock(lm).weights == 0);
    CHECK(model.paramBlock(lm).bias == (bias ? 9 : 0));
    // The only perturbation that reaches the fc's weights is of the
    // embedding's table: its gradient must hold both uses.
    checkGradients(b.network(), 2, {}, tokenIds(9));
  }
}

TEST_CASE("a small GPT matches central differences", "[gradient][transformer]") {
  // One pre-LN block (as the loader expands `transformer`) with a tied head.
  NetworkBuilder b({1, 6, 1});
  const int wte = b.add(LayerKind::kEmbedding, embeddingSpec(11, 6, 8));
  b.add(LayerKind::kLayerNorm);
  const int attn = b.add(LayerKind::kAttention, attentionSpec(2, true));
  const int add1 = b.add(LayerKind::kAdd, {}, {wte, attn});
  b.add(LayerKind::kLayerNorm);
  b.add(LayerKind::kFc, test::fcSpec(12, false));
  b.add(LayerKind::kGelu);
  const int fc2 = b.add(LayerKind::kFc, test::fcSpec(6, false));
  b.add(LayerKind::kAdd, {}, {add1, fc2});
  b.add(LayerKind::kLayerNorm);
  b.add(LayerKind::kFc, tiedSpec(11, wte));
  b.add(LayerKind::kSoftmax);
  checkGradients(b.network(), 2, {}, tokenIds(11), 1e-3);
}

TEST_CASE("a small GPT-NeoX block matches central differences", "[gradient][transformer]") {
  // The parallel residual (the MLP's layernorm reads the block input; one add
  // of three) with partial rotary positions (2 of each head's 4 features)
  // and an untied head.
  NetworkBuilder b({1, 6, 1});
  const int embed = b.add(LayerKind::kEmbedding, embeddingSpec(11, 8, 0));
  b.add(LayerKind::kLayerNorm, {}, {embed});
  LayerSpec attention = gqaSpec(2, 2, true, true, 10, 2);
  const int attn = b.add(LayerKind::kAttention, attention);
  b.add(LayerKind::kLayerNorm, {}, {embed});
  b.add(LayerKind::kFc, test::fcSpec(12, false));
  b.add(LayerKind::kGelu);
  const int fc2 = b.add(LayerKind::kFc, test::fcSpec(8, false));
  b.add(LayerKind::kAdd, {}, {embed, attn, fc2});
  b.add(LayerKind::kLayerNorm);
  b.add(LayerKind::kFc, test::fcSpec(11, false, false));
  b.add(LayerKind::kSoftmax);
  checkGradients(b.network(), 2, {}, tokenIds(11), 1e-3);
}

// ---- vision transformers -----------------------------------------------------

// Class tokens and position tables drawn in [-1, 1) (their initial values
// are zeros and N(0, 0.02^2): a gradient left out would hardly show).
void randomTokensAndPositions(Model& model) {
  for (int l = 0; l < model.layerCount(); ++l) {
    const LayerKind kind = model.network().layers[static_cast<size_t>(l)].kind;
    if (kind == LayerKind::kClassToken || kind == LayerKind::kPosEmbedding)
      test::fillUniform(model.parameters(l), static_cast<uint32_t>(31 + l));
  }
}

LayerSpec classTokenSpec(int tokens) {
  LayerSpec s;
  s.tokens = tokens;
  return s;
}

LayerSpec tokenSpec(int index) {
  LayerSpec s;
  s.index = index;
  return s;
}

TEST_CASE("class token, position table and token gradients match central differences",
          "[gradient][vit][vision]") {
  SECTION("on the network input, a token's input read twice (summed gradient)") {
    // 3 channels x 2 x 2 positions, 2 tokens before them: 3 x 6 x 1.
    NetworkBuilder b({3, 2, 2});
    b.add(LayerKind::kClassToken, classTokenSpec(2), {-1});
    const int pos = b.add(LayerKind::kPosEmbedding);
    const int cls = b.add(LayerKind::kToken, tokenSpec(0), {pos});
    const int last = b.add(LayerKind::kToken, tokenSpec(5), {pos});
    const int mid = b.add(LayerKind::kToken, tokenSpec(3), {pos});
    b.add(LayerKind::kConcat, {}, {cls, last, mid});
    b.add(LayerKind::kFc, test::fcSpec(4));
    CHECK(b.network().layers[1].params == 3 * 6);
    checkGradients(b.network(), 3, {}, uniformInput, 1e-2, randomTokensAndPositions);
  }
  SECTION("the network input read by two class tokens, one token reading it directly") {
    NetworkBuilder b({2, 1, 3});
    const int one = b.add(LayerKind::kClassToken, classTokenSpec(1), {-1});
    const int three = b.add(LayerKind::kClassToken, classTokenSpec(3), {-1});
    const int a = b.add(LayerKind::kToken, tokenSpec(2), {one});
    const int c = b.add(LayerKind::kToken, tokenSpec(1), {three});
    const int d = b.add(LayerKind::kToken, tokenSpec(4), {three});
    const int e = b.add(LayerKind::kToken, tokenSpec(1), {-1});
    b.add(LayerKind::kAdd, {}, {a, c, d, e});
    checkGradients(b.network(), 2, {}, uniformInput, 1e-2, randomTokensAndPositions);
  }
}

TEST_CASE("a small vision transformer matches central differences", "[gradient][vit][vision]") {
  // torchvision's ViT at toy size: 2x2 patches of a 3 x 4 x 6 image (a conv
  // of stride 2: 6 channels x 2 x 3 positions), a class token, the position
  // table, one pre-LN encoder block (bidirectional attention, an MLP), the
  // final layernorm, the class token's position to the head.
  NetworkBuilder b({3, 4, 6});
  b.add(LayerKind::kConv, test::convSpec(6, 2, 2, 2), {-1});
  b.add(LayerKind::kClassToken, classTokenSpec(1));
  const int pos = b.add(LayerKind::kPosEmbedding);
  CHECK(b.network().layers[static_cast<size_t>(pos)].outShape == Shape{6, 7, 1});
  b.add(LayerKind::kLayerNorm);
  const int attn = b.add(LayerKind::kAttention, attentionSpec(2, false));
  const int add1 = b.add(LayerKind::kAdd, {}, {pos, attn});
  b.add(LayerKind::kLayerNorm);
  b.add(LayerKind::kFc, test::fcSpec(12, false));
  b.add(LayerKind::kGelu);
  const int fc2 = b.add(LayerKind::kFc, test::fcSpec(6, false));
  b.add(LayerKind::kAdd, {}, {add1, fc2});
  b.add(LayerKind::kLayerNorm);
  b.add(LayerKind::kToken, tokenSpec(0));
  b.add(LayerKind::kFc, test::fcSpec(5));
  b.add(LayerKind::kSoftmax);
  checkGradients(b.network(), 2, {}, uniformInput, 1e-3, randomTokensAndPositions);
}

}  // namespace
}  // namespace strata::nn

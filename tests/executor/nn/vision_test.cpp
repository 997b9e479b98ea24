// Vision networks' kernels on the CPU backend against values worked by hand:
// the activations (forward and gradient, at and beside their kinks), concat's
// channel copies, slice and shuffle (ShuffleNetV2), mul by a per-channel
// gate and by a same-shape one, a vision transformer's class token,
// position table and token (copies, a table added, sums over positions), a
// ceil-mode max pool, a column-padded and a dilated convolution; and their
// results on 2..8 threads against one thread's bits. (Their gradients against
// central differences: gradient_test.cpp; the calls against lowerCpu:
// lowering_test.cpp.)
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "helpers.h"
#include "strata/exec/nn/cpu_backend.h"
#include "strata/model/error.h"

namespace strata::nn {
namespace {

using test::NetworkBuilder;

// fn over the values, each a 1 x n x 1 x 1 tensor.
std::vector<float> forward(Activation fn, const std::vector<float>& x) {
  CpuBackend be;
  const Dims d{1, static_cast<int>(x.size()), 1, 1};
  std::vector<float> y(x.size());
  be.activationForward(fn, {x.data(), d}, {y.data(), d});
  return y;
}

// dx for dy = 1 at x, from a forward at x (beta 0).
std::vector<float> gradient(Activation fn, const std::vector<float>& x) {
  CpuBackend be;
  const Dims d{1, static_cast<int>(x.size()), 1, 1};
  const std::vector<float> y = forward(fn, x), dy(x.size(), 1.0f);
  std::vector<float> dx(x.size());
  be.activationBackward(fn, {x.data(), d}, {y.data(), d}, {dy.data(), d}, {dx.data(), d}, 0.0f);
  return dx;
}

void checkValues(const std::vector<float>& got, const std::vector<float>& expected) {
  REQUIRE(got.size() == expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i);
    CHECK(got[i] == Approx(expected[i]).margin(1e-6));
  }
}

TEST_CASE("activations: values worked by hand", "[vision]") {
  const float e1 = 1.0f / (1.0f + std::exp(-1.0f));  // sigmoid(1) = 0.731059
  SECTION("sigmoid") {
    checkValues(forward(Activation::kSigmoid, {0, 1, -1}), {0.5f, e1, 1 - e1});
    // s (1 - s): 1/4 at 0.
    checkValues(gradient(Activation::kSigmoid, {0, 1}), {0.25f, e1 * (1 - e1)});
  }
  SECTION("silu") {
    checkValues(forward(Activation::kSilu, {0, 1, -1}), {0, e1, -(1 - e1)});
    // s (1 + x (1 - s)): 1/2 at 0.
    checkValues(gradient(Activation::kSilu, {0, 1}), {0.5f, e1 * (1 + (1 - e1))});
  }
  SECTION("relu6") {
    checkValues(forward(Activation::kRelu6, {-1, 0, 2.5f, 6, 7}), {0, 0, 2.5f, 6, 6});
    // PyTorch's: 0 at both kinks.
    checkValues(gradient(Activation::kRelu6, {-1, 0, 2.5f, 6, 7}), {0, 0, 1, 0, 0});
  }
  SECTION("hardsigmoid") {
    checkValues(forward(Activation::kHardSigmoid, {-4, -3, 0, 1.5f, 3, 4}),
                {0, 0, 0.5f, 0.75f, 1, 1});
    checkValues(gradient(Activation::kHardSigmoid, {-4, -3, 0, 1.5f, 3, 4}),
                {0, 0, 1 / 6.0f, 1 / 6.0f, 0, 0});
  }
  SECTION("hardswish") {
    checkValues(forward(Activation::kHardSwish, {-4, -3, -1, 0, 1, 3, 4}),
                {0, 0, -1 * 2 / 6.0f, 0, 4 / 6.0f, 3, 4});
    // x / 3 + 1/2 on [-3, 3] (PyTorch's: -1/2 at -3, 3/2 at 3), 0 below, 1 above.
    checkValues(gradient(Activation::kHardSwish, {-4, -3, -1, 0, 1, 3, 4}),
                {0, -0.5f, 1 / 6.0f, 0.5f, 5 / 6.0f, 1.5f, 1});
  }
  SECTION("tanh") {
    const float t1 = std::tanh(1.0f);  // 0.761594
    checkValues(forward(Activation::kTanh, {0, 1, -1}), {0, t1, -t1});
    // 1 - tanh^2: 1 at 0, 0.419974 at 1.
    checkValues(gradient(Activation::kTanh, {0, 1}), {1, 1 - t1 * t1});
  }
  SECTION("beta 1 adds onto dx") {
    CpuBackend be;
    const Dims d{1, 2, 1, 1};
    const std::vector<float> x = {1, 7}, y = {1, 6}, dy = {2, 2};
    std::vector<float> dx = {10, 20};
    be.activationBackward(Activation::kRelu6, {x.data(), d}, {y.data(), d}, {dy.data(), d},
                          {dx.data(), d}, 1.0f);
    checkValues(dx, {12, 20});
  }
}

TEST_CASE("concat's copies: channels side by side, gradients back out", "[vision][concat]") {
  CpuBackend be;
  // a: 2 examples of 1 channel x 2 positions; b: 2 channels.
  const std::vector<float> a = {1, 2, 3, 4}, b = {5, 6, 7, 8, 9, 10, 11, 12};
  const Dims da{2, 1, 1, 2}, db{2, 2, 1, 2}, dyDims{2, 3, 1, 2};
  std::vector<float> y(12, -1.0f);
  be.copyIntoChannels({a.data(), da}, {y.data(), dyDims}, 0);
  be.copyIntoChannels({b.data(), db}, {y.data(), dyDims}, 1);
  CHECK(y == std::vector<float>{1, 2, 5, 6, 7, 8, 3, 4, 9, 10, 11, 12});
  // Backward: b's gradient overwritten (beta 0), a's added onto (beta 1).
  std::vector<float> ga = {100, 100, 100, 100}, gb(8, -1.0f);
  be.copyFromChannels({y.data(), dyDims}, 0, {ga.data(), da}, 1.0f);
  be.copyFromChannels({y.data(), dyDims}, 1, {gb.data(), db}, 0.0f);
  CHECK(ga == std::vector<float>{101, 102, 103, 104});
  CHECK(gb == b);
}

TEST_CASE("a Model's concat joins its inputs in the order it lists them", "[vision][concat]") {
  NetworkBuilder builder({2, 1, 2});
  const int relu = builder.add(LayerKind::kRelu, {}, {-1});
  builder.add(LayerKind::kConcat, {}, {-1, relu, -1});
  Model model(builder.network());
  const std::vector<float> x = {-1, 2, 3, -4};  // one example: channels [-1, 2], [3, -4]
  std::copy(x.begin(), x.end(), model.input(1).span().begin());
  model.forwardAll();
  const auto y = model.output(1).span();
  CHECK(std::vector<float>(y.begin(), y.end()) ==
        std::vector<float>{-1, 2, 3, -4, 0, 2, 3, 0, -1, 2, 3, -4});
  // dy = 1: the input takes 1 from each of its two copies and 1 through relu
  // where it is positive.
  std::fill(model.outputGrad(1).span().begin(), model.outputGrad(1).span().end(), 1.0f);
  model.backwardData(1);
  model.backwardData(0);
  const auto dx = model.inputGrad().span();
  CHECK(std::vector<float>(dx.begin(), dx.end()) == std::vector<float>{2, 3, 3, 2});
}

TEST_CASE("shuffle: channel j of group i to j groups + i, and back", "[vision][shuffle]") {
  CpuBackend be;
  // 2 examples of 6 channels x 1 position: channel k holds 10 e + k.
  const Dims d{2, 6, 1, 1};
  std::vector<float> x(12);
  for (int k = 0; k < 12; ++k)
    x[static_cast<size_t>(k)] = static_cast<float>(10 * (k / 6) + k % 6);
  std::vector<float> y(12, -1.0f), back(12, 100.0f);
  // 2 groups [0 1 2] [3 4 5] -> 0 3 1 4 2 5; 3 groups [0 1] [2 3] [4 5] -> 0 2 4 1 3 5.
  be.shuffleChannels({x.data(), d}, 2, {y.data(), d}, 0.0f);
  CHECK(y == std::vector<float>{0, 3, 1, 4, 2, 5, 10, 13, 11, 14, 12, 15});
  // The shuffle of 6 / 2 = 3 groups undoes it, added onto back (beta 1).
  be.shuffleChannels({y.data(), d}, 3, {back.data(), d}, 1.0f);
  for (size_t k = 0; k < 12; ++k)
    CHECK(back[k] == 100.0f + x[k]);
  be.shuffleChannels({x.data(), d}, 3, {y.data(), d}, 0.0f);
  CHECK(y == std::vector<float>{0, 2, 4, 1, 3, 5, 10, 12, 14, 11, 13, 15});
  // One group and one channel per group leave the order as it is.
  be.shuffleChannels({x.data(), d}, 1, {y.data(), d}, 0.0f);
  CHECK(y == x);
  be.shuffleChannels({x.data(), d}, 6, {y.data(), d}, 0.0f);
  CHECK(y == x);
}

TEST_CASE("a Model's slices split the channels, their gradients land back in place",
          "[vision][slice]") {
  // One example of 3 channels x 2 positions: keep = channels [0, 1), take =
  // [1, 3) through relu, joined and shuffled in 3 groups of 1 (no change).
  NetworkBuilder builder({3, 1, 2});
  LayerSpec first, rest;
  first.channels = 1;
  rest.offset = 1;
  rest.channels = 2;
  const int keep = builder.add(LayerKind::kSlice, first, {-1});
  const int take = builder.add(LayerKind::kSlice, rest, {-1});
  const int relu = builder.add(LayerKind::kRelu, {}, {take});
  builder.add(LayerKind::kConcat, {}, {relu, keep});
  Model model(builder.network());
  const std::vector<float> x = {1, -2, -3, 4, 5, -6};
  std::copy(x.begin(), x.end(), model.input(1).span().begin());
  model.forwardAll();
  const auto sliced = model.output(keep).span();
  CHECK(std::vector<float>(sliced.begin(), sliced.end()) == std::vector<float>{1, -2});
  const auto y = model.output(3).span();
  CHECK(std::vector<float>(y.begin(), y.end()) == std::vector<float>{0, 4, 5, 0, 1, -2});
  // dy = 1, 2, ..., 6: relu passes 2 and 3 into channels 1 and 2; keep's 5
  // and 6 land in channel 0.
  const auto dy = model.outputGrad(3).span();
  for (size_t k = 0; k < dy.size(); ++k)
    dy[k] = static_cast<float>(k + 1);
  for (int l = 3; l >= 0; --l)
    model.backwardData(l);
  const auto dx = model.inputGrad().span();
  CHECK(std::vector<float>(dx.begin(), dx.end()) == std::vector<float>{5, 6, 0, 2, 3, 0});
}

TEST_CASE("layer scale: gamma per channel, backward and its gradient", "[vision][scale]") {
  CpuBackend be;
  // 2 examples of 2 channels x 2 positions.
  const Dims d{2, 2, 1, 2};
  const std::vector<float> x = {1, 2, 3, 4, 5, 6, 7, 8}, gamma = {10, -1};
  std::vector<float> y(8, 100.0f);
  be.scaleChannels({x.data(), d}, gamma.data(), {y.data(), d}, 0.0f);
  CHECK(y == std::vector<float>{10, 20, -3, -4, 50, 60, -7, -8});
  // dx = gamma dy added onto dx (beta 1).
  std::vector<float> dx(8, 1.0f);
  be.scaleChannels({x.data(), d}, gamma.data(), {dx.data(), d}, 1.0f);
  CHECK(dx == std::vector<float>{11, 21, -2, -3, 51, 61, -6, -7});
  // dgamma += sums over examples and positions of dy x: dy = x gives the
  // squares, channel 0: 1 + 4 + 25 + 36, channel 1: 9 + 16 + 49 + 64.
  std::vector<float> dgamma = {0.5f, 0.0f};
  be.scaleBackwardWeights({x.data(), d}, {x.data(), d}, dgamma.data());
  CHECK(dgamma == std::vector<float>{66.5f, 138});
}

TEST_CASE("a vision transformer's positions: tokens before them, a table added, sums back",
          "[vision][vit]") {
  CpuBackend be;
  // 2 examples of 3 channels x 2 positions: position p of channel c of
  // example e holds 100 e + 10 c + p.
  const Dims in{2, 3, 2, 1}, seq{2, 3, 3, 1}, one{2, 3, 1, 1};
  std::vector<float> x(12);
  for (size_t k = 0; k < x.size(); ++k)
    x[k] = static_cast<float>(100 * (k / 6) + 10 * (k / 2 % 3) + k % 2);
  // A class token (C x 1) at position 0, the positions after it.
  const std::vector<float> token = {-1, -2, -3};
  std::vector<float> y(18, 7.0f);
  be.broadcastPositions(token.data(), 1, {y.data(), seq}, 0);
  be.copyPositions({x.data(), in}, 0, {y.data(), seq}, 1, 2, 0.0f);
  CHECK(y == std::vector<float>{-1, 0, 1, -2, 10, 11, -3, 20, 21, -1, 100, 101, -2, 110, 111, -3,
                                120, 121});
  // Backward: dy's positions after the token onto dx (beta 1).
  std::vector<float> dx(12, 1000.0f);
  be.copyPositions({y.data(), seq}, 1, {dx.data(), in}, 0, 2, 1.0f);
  for (size_t k = 0; k < x.size(); ++k)
    CHECK(dx[k] == 1000.0f + x[k]);
  // One position out (a token layer's forward), and its gradient into that
  // position alone of a summed gradient.
  std::vector<float> picked(6, -5.0f), into(18, 0.5f);
  be.copyPositions({y.data(), seq}, 2, {picked.data(), one}, 0, 1, 0.0f);
  CHECK(picked == std::vector<float>{1, 11, 21, 101, 111, 121});
  be.copyPositions({picked.data(), one}, 0, {into.data(), seq}, 1, 1, 1.0f);
  CHECK(into == std::vector<float>{0.5f, 1.5f, 0.5f, 0.5f, 11.5f, 0.5f, 0.5f, 21.5f, 0.5f, 0.5f,
                                   101.5f, 0.5f, 0.5f, 111.5f, 0.5f, 0.5f, 121.5f, 0.5f});
  // A table of one example's shape (3 x 2) added to every example.
  const std::vector<float> table = {1, 2, 3, 4, 5, 6};
  std::vector<float> added(12);
  be.addTable({x.data(), in}, table.data(), {added.data(), in});
  CHECK(added == std::vector<float>{1, 3, 13, 15, 25, 27, 101, 103, 113, 115, 125, 127});
  // table[c][j] += the sum over examples of y's position 1 + j: (10 c + j)
  // + (100 + 10 c + j) onto 0.5.
  std::vector<float> sums(6, 0.5f);
  be.sumPositions({y.data(), seq}, 1, 2, sums.data());
  CHECK(sums == std::vector<float>{100.5f, 102.5f, 120.5f, 122.5f, 140.5f, 142.5f});
  // The class token's gradient: the sum of position 0, -2 c - 2.
  std::vector<float> dtoken(3, 0.0f);
  be.sumPositions({y.data(), seq}, 0, 1, dtoken.data());
  CHECK(dtoken == std::vector<float>{-2, -4, -6});
}

TEST_CASE("a Model's class token, position table and token: ViT's wiring and initial values",
          "[vision][vit]") {
  // 16 channels x 8 x 8 positions; 2 class tokens before them.
  NetworkBuilder builder({16, 8, 8});
  LayerSpec two, first;
  two.tokens = 2;
  first.index = 1;
  builder.add(LayerKind::kClassToken, two);
  builder.add(LayerKind::kPosEmbedding);
  builder.add(LayerKind::kToken, first);
  REQUIRE(builder.network().layers[0].outShape == Shape{16, 66, 1});
  REQUIRE(builder.network().layers[2].outShape == Shape{16, 1, 1});
  Model model(builder.network());
  CHECK(model.paramBlock(0).size() == 16 * 2);
  CHECK(model.paramBlock(1).size() == 16 * 66);
  CHECK(model.paramBlock(2).size() == 0);
  // torchvision's: the class token zero, the position table N(0, 0.02^2).
  const auto tokens = model.parameters(0);
  CHECK(std::all_of(tokens.begin(), tokens.end(), [](float v) { return v == 0.0f; }));
  const auto pos = model.parameters(1);
  double sum = 0, squares = 0;
  for (float v : pos) {
    sum += v;
    squares += double(v) * v;
  }
  const double mean = sum / double(pos.size());
  CHECK(std::abs(mean) < 2e-3);
  CHECK(std::sqrt(squares / double(pos.size()) - mean * mean) == Approx(0.02).epsilon(0.1));
  // Token 1 of channel c is tokens[c][1], then + pos[c][1]: the token
  // layer reads it for every example.
  for (size_t k = 0; k < tokens.size(); ++k)
    tokens[k] = static_cast<float>(k);
  test::fillUniform(model.input(2).span(), 5);
  model.forwardAll();
  const auto y = model.output(2).span();
  for (int e = 0; e < 2; ++e)
    for (size_t c = 0; c < 16; ++c)
      CHECK(y[size_t(e) * 16 + c] == tokens[2 * c + 1] + pos[c * 66 + 1]);
  // dy = 1 at the token: the token's gradient 2 (two examples) in dtokens[c][1],
  // the table's in its column 1, and the input none (its positions 2.. only).
  std::fill(model.outputGrad(2).span().begin(), model.outputGrad(2).span().end(), 1.0f);
  model.zeroGradients();
  model.backwardAll(/*inputGradient=*/true);
  const auto dtokens = model.gradients(0), dpos = model.gradients(1);
  for (size_t c = 0; c < 16; ++c) {
    CHECK(dtokens[2 * c] == 0.0f);
    CHECK(dtokens[2 * c + 1] == 2.0f);
    for (size_t p = 0; p < 66; ++p)
      CHECK(dpos[c * 66 + p] == (p == 1 ? 2.0f : 0.0f));
  }
  const auto dx = model.inputGrad().span();
  CHECK(std::all_of(dx.begin(), dx.end(), [](float v) { return v == 0.0f; }));
}

TEST_CASE("mul: by a per-channel gate and by a tensor of x's shape", "[vision][mul]") {
  CpuBackend be;
  const std::vector<float> x = {1, 2, 3, 4, 5, 6};  // 1 example, 2 channels x 3 positions
  const Dims dx{1, 2, 1, 3};
  SECTION("per-channel gate") {
    const std::vector<float> g = {2, -1};
    const Dims dg{1, 2, 1, 1};
    std::vector<float> y(6);
    be.mulForward({x.data(), dx}, {g.data(), dg}, {y.data(), dx});
    CHECK(y == std::vector<float>{2, 4, 6, -4, -5, -6});
    const std::vector<float> dy = {1, 1, 1, 1, 0, 2};
    std::vector<float> gx(6, 7.0f), gg = {10, 20};
    be.mulBackward({x.data(), dx}, {g.data(), dg}, {dy.data(), dx}, {gx.data(), dx}, 0.0f,
                   {gg.data(), dg}, 1.0f);
    CHECK(gx == std::vector<float>{2, 2, 2, -1, 0, -2});
    // dg = sum over positions of dy x: 1 + 2 + 3 = 6; 4 + 0 + 12 = 16; plus
    // what was there (beta 1).
    CHECK(gg == std::vector<float>{16, 36});
  }
  SECTION("a gate of x's shape, and x * x into one gradient") {
    const std::vector<float> g = {-1, 0, 1, 2, 3, 4};
    std::vector<float> y(6);
    be.mulForward({x.data(), dx}, {g.data(), dx}, {y.data(), dx});
    CHECK(y == std::vector<float>{-1, 0, 3, 8, 15, 24});
    const std::vector<float> dy(6, 1.0f);
    std::vector<float> gx(6), gg(6);
    be.mulBackward({x.data(), dx}, {g.data(), dx}, {dy.data(), dx}, {gx.data(), dx}, 0.0f,
                   {gg.data(), dx}, 0.0f);
    CHECK(gx == g);
    CHECK(gg == x);
    // d(x^2)/dx = 2 x, both terms summed into the one buffer.
    std::vector<float> both(6, 0.0f);
    be.mulBackward({x.data(), dx}, {x.data(), dx}, {dy.data(), dx}, {both.data(), dx}, 1.0f,
                   {both.data(), dx}, 1.0f);
    CHECK(both == std::vector<float>{2, 4, 6, 8, 10, 12});
  }
}

TEST_CASE("ceil-mode max pooling keeps the last window, clamped to the input", "[vision][pool]") {
  // 2 x 5, window 2, stride 2: floor mode gives 2 columns, ceil mode 3, the
  // last reading columns 4 (and 5, outside).
  NetworkBuilder builder({1, 2, 5});
  LayerSpec s = test::poolSpec(PoolMode::kMax, 2, 2);
  s.ceilMode = true;
  builder.add(LayerKind::kPool, s);
  REQUIRE(builder.network().layers[0].outShape == Shape{1, 1, 3});
  Model model(builder.network());
  const std::vector<float> x = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  std::copy(x.begin(), x.end(), model.input(1).span().begin());
  model.forwardAll();
  const auto y = model.output(0).span();
  CHECK(std::vector<float>(y.begin(), y.end()) == std::vector<float>{7, 9, 10});
  std::fill(model.outputGrad(0).span().begin(), model.outputGrad(0).span().end(), 1.0f);
  model.backwardData(0);
  const auto dx = model.inputGrad().span();
  CHECK(std::vector<float>(dx.begin(), dx.end()) ==
        std::vector<float>{0, 0, 0, 0, 0, 0, 1, 0, 1, 1});
}

TEST_CASE("convolutions with a column pad and with dilation: values worked by hand",
          "[vision][conv]") {
  // One 1 x 4 plane x = [1, 2, 3, 4] and a 1 x 3 kernel of ones.
  const std::vector<float> x = {1, 2, 3, 4};
  const auto run = [&](LayerSpec spec, Shape expected) {
    NetworkBuilder builder({1, 1, 4});
    spec.bias = false;
    builder.add(LayerKind::kConv, spec);
    REQUIRE(builder.network().layers[0].outShape == expected);
    Model model(builder.network());
    std::fill(model.parameters(0).begin(), model.parameters(0).end(), 1.0f);
    std::copy(x.begin(), x.end(), model.input(1).span().begin());
    model.forwardAll();
    const auto y = model.output(0).span();
    return std::vector<float>(y.begin(), y.end());
  };
  LayerSpec columns = test::convSpec(1, 1, 3);
  columns.padW = 1;  // rows unpadded: a 1-row kernel over 1 row
  CHECK(run(columns, {1, 1, 4}) == std::vector<float>{3, 6, 9, 7});
  LayerSpec dilated = test::convSpec(1, 1, 3);
  dilated.dilation = 2;  // taps 0, 2, 4: with column pad 2, 4 outputs
  dilated.padW = 2;
  CHECK(run(dilated, {1, 1, 4}) == std::vector<float>{4, 6, 4, 6});
}

// Every vision kernel over tensors that split at every thread count.
std::vector<std::vector<float>> visionResults(int threads) {
  CpuOptions o;
  o.threads = threads;
  CpuBackend be(o);
  const Dims d{3, 40, 67, 59}, gate{3, 40, 1, 1}, half{3, 20, 67, 59};
  const auto elements = static_cast<size_t>(d.elements());
  std::vector<float> x(elements), dy(elements), g(static_cast<size_t>(gate.elements()));
  test::fillUniform(x, 40, -8, 8);
  test::fillUniform(dy, 41);
  test::fillUniform(g, 42);
  std::vector<std::vector<float>> out;
  for (Activation fn : {Activation::kSigmoid, Activation::kSilu, Activation::kRelu6,
                        Activation::kHardSigmoid, Activation::kHardSwish, Activation::kTanh}) {
    std::vector<float> y(elements), dx(elements, 0.5f);
    be.activationForward(fn, {x.data(), d}, {y.data(), d});
    be.activationBackward(fn, {x.data(), d}, {y.data(), d}, {dy.data(), d}, {dx.data(), d}, 1.0f);
    out.push_back(y);
    out.push_back(dx);
  }
  std::vector<float> y(elements), dx(elements), dg(g.size(), 0.25f);
  be.mulForward({x.data(), d}, {g.data(), gate}, {y.data(), d});
  be.mulBackward({x.data(), d}, {g.data(), gate}, {dy.data(), d}, {dx.data(), d}, 0.0f,
                 {dg.data(), gate}, 1.0f);
  out.push_back(y);
  out.push_back(dx);
  out.push_back(dg);
  std::vector<float> same(elements), dsame(elements);
  be.mulForward({x.data(), d}, {dy.data(), d}, {y.data(), d});
  be.mulBackward({x.data(), d}, {dy.data(), d}, {x.data(), d}, {same.data(), d}, 0.0f,
                 {dsame.data(), d}, 0.0f);
  out.push_back(y);
  out.push_back(same);
  out.push_back(dsame);
  std::vector<float> joined(elements), back(static_cast<size_t>(half.elements()), 1.0f);
  be.copyIntoChannels({dy.data(), half}, {joined.data(), d}, 20);
  be.copyIntoChannels({x.data(), half}, {joined.data(), d}, 0);
  be.copyFromChannels({joined.data(), d}, 10, {back.data(), half}, 1.0f);
  out.push_back(joined);
  out.push_back(back);
  std::vector<float> shuffled(elements), unshuffled(elements, 0.5f), scattered(elements, 0.5f);
  be.shuffleChannels({x.data(), d}, 8, {shuffled.data(), d}, 0.0f);
  be.shuffleChannels({shuffled.data(), d}, 5, {unshuffled.data(), d}, 1.0f);
  be.addIntoChannels({dy.data(), half}, {scattered.data(), d}, 7, 1.0f);
  out.push_back(shuffled);
  out.push_back(unshuffled);
  out.push_back(scattered);
  std::vector<float> scaled(elements), dgamma(static_cast<size_t>(d.c), 0.25f);
  be.scaleChannels({x.data(), d}, g.data(), {scaled.data(), d}, 0.0f);
  be.scaleBackwardWeights({x.data(), d}, {dy.data(), d}, dgamma.data());
  out.push_back(scaled);
  out.push_back(dgamma);
  // A vision transformer's positions: 3 class tokens before x's, x's back
  // out (added onto 0.5), one position out, a table of one example's shape
  // added, and the sums over the examples of every position and of a few.
  const int plane = d.h * d.w;
  const Dims seq{d.n, d.c, plane + 3, 1}, one{d.n, d.c, 1, 1};
  std::vector<float> tokens(static_cast<size_t>(3 * d.c)), table(elements / 3);
  test::fillUniform(tokens, 43);
  test::fillUniform(table, 44);
  std::vector<float> joinedSeq(static_cast<size_t>(seq.elements())), out2(elements, 0.5f);
  std::vector<float> picked(static_cast<size_t>(one.elements())), added(elements);
  std::vector<float> dtable(table.size(), 0.25f), few(static_cast<size_t>(7 * d.c), 0.25f);
  be.broadcastPositions(tokens.data(), 3, {joinedSeq.data(), seq}, 0);
  be.copyPositions({x.data(), d}, 0, {joinedSeq.data(), seq}, 3, plane, 0.0f);
  be.copyPositions({joinedSeq.data(), seq}, 3, {out2.data(), d}, 0, plane, 1.0f);
  be.copyPositions({x.data(), d}, 17, {picked.data(), one}, 0, 1, 0.0f);
  be.addTable({x.data(), d}, table.data(), {added.data(), d});
  be.sumPositions({dy.data(), d}, 0, plane, dtable.data());
  be.sumPositions({joinedSeq.data(), seq}, 100, 7, few.data());
  out.push_back(joinedSeq);
  out.push_back(out2);
  out.push_back(picked);
  out.push_back(added);
  out.push_back(dtable);
  out.push_back(few);
  return out;
}

TEST_CASE("vision kernels on 2..8 threads: one thread's bits", "[vision][cpu][threads]") {
  const auto reference = visionResults(1);
  for (int threads = 2; threads <= 8; ++threads) {
    INFO(threads << " threads");
    CHECK(visionResults(threads) == reference);
  }
}

}  // namespace
}  // namespace strata::nn

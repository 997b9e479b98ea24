// Model: shapes against the cost model's, batch slicing, parameter layout,
// errors, and the property data parallelism rests on.
#include <catch2/catch.hpp>
#include <limits>
#include <thread>

#include "helpers.h"
#include "strata/exec/nn/cpu_backend.h"
#include "strata/exec/nn/dataset.h"
#include "strata/model/error.h"

namespace strata::nn {
namespace {

void checkForwardShapes(const std::string& name, int batch) {
  const Network net = test::presetNetwork(name);
  ModelOptions options;
  Model model(net, options);
  test::fillUniform(model.input(batch).span(), 1);
  for (int l = 0; l < model.layerCount(); ++l) {
    const Layer& layer = net.layers[static_cast<size_t>(l)];
    model.forward(l);
    const Dims d = model.output(l).dims();
    INFO(name << " layer " << layer.name);
    CHECK(d == Dims{batch, layer.outShape.c, layer.outShape.h, layer.outShape.w});
    CHECK(model.paramBlock(l).size() == layer.params);
  }
  CHECK(static_cast<int64_t>(model.allParameters().size()) == net.totalParams());
}

TEST_CASE("forward shapes equal Layer::outShape for tiny-cnn, alexnet-owt and resnet50",
          "[model][shapes]") {
  checkForwardShapes("tiny-cnn", 2);
  checkForwardShapes("alexnet-owt", 1);
  checkForwardShapes("resnet50", 1);  // batchnorm, add, 1x1 convs, global avg pool
}

TEST_CASE("rnn layers are refused with an error naming the layer", "[model][errors]") {
  const Network net = test::presetNetwork("lm-300m");
  try {
    Model model(net);
    FAIL("no error");
  } catch (const ConfigError& e) {
    CHECK_THAT(e.what(), Catch::Contains("rnn1") && Catch::Contains("rnn") &&
                             Catch::Contains("lm-300m.yaml"));
    CHECK(e.key() == "layers[0]");
  }
}

TEST_CASE("parameters are one array, per layer weights then bias, in layer order",
          "[model][params]") {
  const Network net = test::presetNetwork("tiny-cnn");
  Model model(net);
  int64_t offset = 0;
  for (int l = 0; l < model.layerCount(); ++l) {
    const ParamBlock b = model.paramBlock(l);
    CHECK(b.offset == offset);
    offset += b.size();
  }
  const ParamBlock conv1 = model.paramBlock(0);
  CHECK(conv1.weights == 16 * 3 * 3 * 3);
  CHECK(conv1.bias == 16);
  // Biases start at zero; weights of fc4 (read by softmax) have variance
  // 1/fanIn, those of conv1 (read by relu) 2/fanIn.
  const auto p = model.parameters(0);
  for (int64_t i = conv1.weights; i < conv1.size(); ++i)
    CHECK(p[static_cast<size_t>(i)] == 0.0f);
  const auto variance = [](std::span<const float> w) {
    double s = 0;
    for (float v : w)
      s += double(v) * v;
    return s / double(w.size());
  };
  CHECK(variance(p.first(static_cast<size_t>(conv1.weights))) == Approx(2.0 / 27).epsilon(0.15));
  const int fc4 = net.find("fc4");
  const ParamBlock b4 = model.paramBlock(fc4);
  CHECK(variance(model.parameters(fc4).first(static_cast<size_t>(b4.weights))) ==
        Approx(1.0 / 128).epsilon(0.15));
  // The span over a range of layers is the concatenation of theirs.
  const auto span = model.gradients(0, 3);
  CHECK(span.data() == model.gradients(0).data());
  CHECK(span.size() == model.gradients(0).size() + model.gradients(3).size());
  // Same seed, same weights; another seed, other weights.
  Model same(net);
  Model other(net, ModelOptions{.seed = 2});
  CHECK(std::equal(p.begin(), p.end(), same.parameters(0).begin()));
  CHECK_FALSE(std::equal(p.begin(), p.end(), other.parameters(0).begin()));
}

// One training step's gradients of `model` on examples [first, first + n).
std::vector<float> gradientsOn(Model& model, const SyntheticDataset& data, int64_t first, int n) {
  std::vector<int32_t> labels(static_cast<size_t>(n));
  data.fill(first, model.input(n).view(), labels);
  model.setLabels(labels);
  model.zeroGradients();
  model.forwardAll();
  model.backwardAll();
  return {model.allGradients().begin(), model.allGradients().end()};
}

// Gradients are sums over examples whose order of summation differs between
// the runs compared (GEMM blocking, per-half partial sums): each element may
// differ by a few float ulps of the sum of |terms|. 1e-4 of the layer's
// largest gradient allows for cancellation 100x over; a wrong normaliser or a
// lost example changes gradients by O(1) of their scale.
void checkSameGradients(Model& model, std::span<const float> a, std::span<const float> b) {
  REQUIRE(a.size() == b.size());
  for (int l = 0; l < model.layerCount(); ++l) {
    const ParamBlock block = model.paramBlock(l);
    if (block.size() == 0)
      continue;
    const auto la = a.subspan(static_cast<size_t>(block.offset), static_cast<size_t>(block.size()));
    const auto lb = b.subspan(static_cast<size_t>(block.offset), static_cast<size_t>(block.size()));
    const double tolerance = 1e-4 * test::maxAbs(la);
    double worst = 0;
    for (size_t i = 0; i < la.size(); ++i)
      worst = std::max(worst, std::abs(double(la[i]) - lb[i]));
    INFO("layer " << model.network().layers[static_cast<size_t>(l)].name << ": worst " << worst
                  << " tolerance " << tolerance);
    CHECK(worst <= tolerance);
  }
}

TEST_CASE("the gradient of a batch of 2b is the mean of the gradients of its halves",
          "[model][data-parallel]") {
  const Network net = test::presetNetwork("tiny-cnn");
  // Dropout off: its masks depend on an example's row in the batch, which
  // differs between the halves and the whole.
  ModelOptions options;
  options.dropout = false;
  const auto data = SyntheticDataset::forNetwork(net, 5);
  const int b = 4;
  Model whole(net, options);
  const auto g = gradientsOn(whole, data, 0, 2 * b);
  Model half(net, options);
  const auto g1 = gradientsOn(half, data, 0, b);
  const auto g2 = gradientsOn(half, data, b, b);
  std::vector<float> mean(g.size());
  for (size_t i = 0; i < g.size(); ++i)
    mean[i] = 0.5f * (g1[i] + g2[i]);
  checkSameGradients(whole, g, mean);
  CHECK(whole.loss() > 0);

  SECTION("and K workers with normaliser K*b sum to the one-worker gradient") {
    for (int k : {3, 5}) {
      CAPTURE(k);
      Model single(net, options);
      const auto expected = gradientsOn(single, data, 0, k * b);
      std::vector<float> sum(expected.size(), 0.0f);
      double lossSum = 0;
      for (int w = 0; w < k; ++w) {
        Model worker(net, options);
        worker.setLossNormalizer(k * b);
        const auto gw = gradientsOn(worker, data, int64_t{w} * b, b);
        for (size_t i = 0; i < sum.size(); ++i)
          sum[i] += gw[i];
        lossSum += worker.loss();
      }
      checkSameGradients(single, expected, sum);
      CHECK(lossSum == Approx(single.loss()).epsilon(1e-5));
    }
  }
}

TEST_CASE("a batch processed in example ranges equals the batch at once", "[model][ranges]") {
  const Network net = test::presetNetwork("tiny-cnn");
  ModelOptions options;  // dropout on: masks are per row of the batch, not per call
  const auto data = SyntheticDataset::forNetwork(net, 9);
  const int n = 6;
  std::vector<int32_t> labels(n);
  Model once(net, options), pieces(net, options);
  data.fill(0, once.input(n).view(), labels);
  data.fill(0, pieces.input(n).view(), labels);
  once.setLabels(labels);
  pieces.setLabels(labels);
  once.forwardAll();
  once.backwardAll();
  const std::vector<ExampleRange> ranges = {{0, 1}, {1, 4}, {4, 6}};
  for (int l = 0; l < pieces.layerCount(); ++l)
    for (const ExampleRange r : ranges)
      pieces.forward(l, r);
  for (int l = pieces.layerCount() - 1; l >= 0; --l)
    for (const ExampleRange r : ranges) {
      pieces.backwardWeights(l, r);
      if (l > 0)
        pieces.backwardData(l, r);
    }
  const int last = once.layerCount() - 1;
  const auto a = once.output(last).span(), b = pieces.output(last).span();
  for (size_t i = 0; i < a.size(); ++i)
    REQUIRE(a[i] == Approx(b[i]).margin(1e-6));
  CHECK(once.loss() == Approx(pieces.loss()).epsilon(1e-6));
  checkSameGradients(once, once.allGradients(), pieces.allGradients());
}

TEST_CASE(
    "recompute rewrites a block's dropped outputs: the gradients of no recompute, bit "
    "for bit",
    "[model][recompute]") {
  // --recompute full as the executor runs it: forward, then before each
  // block's backward its layers' forward again (Model::recompute), here
  // after their outputs were poisoned with NaN as if they had been freed.
  // Dropout is on: its masks must come out the same the second time.
  const Network net = test::presetNetwork("tiny-gpt");
  ModelOptions options;
  const auto data = SyntheticDataset::forNetwork(net, 5);
  const int n = 3;
  const int positions = net.layers.back().outShape.h * net.layers.back().outShape.w;
  std::vector<int32_t> labels(static_cast<size_t>(n * positions));
  Model plain(net, options), again(net, options);
  for (Model* m : {&plain, &again}) {
    data.fill(0, m->input(n).view(), labels, positions);
    m->setLabels(labels);
    m->forwardAll();
  }
  plain.backwardAll();
  int poisoned = 0;
  for (int l = again.layerCount() - 1; l >= 0; --l) {
    const int block = net.layers[static_cast<size_t>(l)].block;
    if (block >= 0 &&
        (l + 1 == again.layerCount() || net.layers[static_cast<size_t>(l) + 1].block != block)) {
      int first = l;
      while (first > 0 && net.layers[static_cast<size_t>(first) - 1].block == block)
        --first;
      for (int j = first; j <= l; ++j) {
        const_cast<Tensor&>(again.output(j)).fill(std::numeric_limits<float>::quiet_NaN());
        ++poisoned;
      }
      for (int j = first; j <= l; ++j)
        again.recompute(j);
    }
    again.backwardWeights(l);
    if (l > 0)
      again.backwardData(l);
  }
  CHECK(poisoned ==
        20);  // tiny-gpt: 2 blocks of 10 layers (ln1 attn drop1 add1 ln2 fc1 gelu fc2 drop2 add2)
  const auto a = plain.allGradients(), b = again.allGradients();
  REQUIRE(a.size() == b.size());
  int64_t differ = 0;
  for (size_t i = 0; i < a.size(); ++i)
    differ += a[i] == b[i] ? 0 : 1;  // NaN differs from everything
  CHECK(differ == 0);
}

TEST_CASE(
    "the attention core again gives attentionForward's probabilities and context, bit for "
    "bit",
    "[model][recompute]") {
  // Backend::attentionCoreForward (--recompute selective) from the saved Q,
  // K and V after the saved probabilities and context were poisoned: causal
  // multi-head, and grouped-query with rotary positions (Q and K saved as
  // rotated), on odd sizes.
  struct Case {
    int features, positions, heads, kvHeads;
    bool causal, rotary;
  };
  for (const Case c : {Case{12, 7, 3, 0, true, false}, Case{16, 5, 4, 2, false, true}}) {
    INFO("features " << c.features << " heads " << c.heads << " kv heads " << c.kvHeads);
    AttentionDesc d;
    d.features = c.features;
    d.positions = c.positions;
    d.heads = c.heads;
    d.kvHeads = c.kvHeads;
    d.causal = c.causal;
    d.rotary = c.rotary;
    const int n = 3, f = c.features, t = c.positions, rows = d.qkvFeatures();
    const Dims xd{n, f, t, 1}, qkvd{n, rows, t, 1};
    std::vector<float> x(size_t(xd.elements())), w(size_t(int64_t{rows + f} * f)), y(x.size());
    test::fillUniform(x, 1);
    test::fillUniform(w, 2, -0.5f, 0.5f);
    std::vector<float> qkv(size_t(qkvd.elements())), dqkv(qkv.size()), context(x.size());
    std::vector<float> probs(size_t(int64_t{n} * c.heads * t * t));
    const AttentionSaved saved{
        {qkv.data(), qkvd}, probs.data(), {context.data(), xd}, {dqkv.data(), qkvd}};
    CpuBackend cpu;
    REQUIRE(cpu.runsAttentionCore());
    cpu.attentionForward(d, {x.data(), xd}, w.data(), nullptr, saved, {y.data(), xd});
    const auto probsBefore = probs, contextBefore = context;
    std::fill(probs.begin(), probs.end(), std::numeric_limits<float>::quiet_NaN());
    std::fill(context.begin(), context.end(), std::numeric_limits<float>::quiet_NaN());
    cpu.attentionCoreForward(d, saved);
    CHECK(probs == probsBefore);
    CHECK(context == contextBefore);
  }
}

TEST_CASE("models on concurrent threads compute what they compute alone", "[model][threads]") {
  // The local-thread executor runs one Model (with its own CpuBackend) per
  // worker thread: no state may be shared between them.
  const Network net = test::presetNetwork("tiny-cnn");
  const auto data = SyntheticDataset::forNetwork(net, 13);
  const int workers = 3, b = 4;
  std::vector<std::vector<float>> alone, together(workers);
  for (int w = 0; w < workers; ++w) {
    Model model(net);
    alone.push_back(gradientsOn(model, data, int64_t{w} * b, b));
  }
  std::vector<std::thread> threads;
  for (int w = 0; w < workers; ++w)
    threads.emplace_back([&, w] {
      Model model(net);
      for (int repeat = 0; repeat < 3; ++repeat)
        together[static_cast<size_t>(w)] = gradientsOn(model, data, int64_t{w} * b, b);
    });
  for (auto& t : threads)
    t.join();
  for (int w = 0; w < workers; ++w)
    CHECK(alone[static_cast<size_t>(w)] == together[static_cast<size_t>(w)]);
}

TEST_CASE("sgd with momentum: v = mu v - lr g, w += v", "[model][update]") {
  const Network net = test::presetNetwork("tiny-cnn");
  Model model(net);
  const int fc4 = net.find("fc4");
  const std::vector<float> w0(model.parameters(fc4).begin(), model.parameters(fc4).end());
  auto g = model.gradients(fc4);
  std::fill(g.begin(), g.end(), 1.0f);
  model.update(fc4, 0.1f, 0.9f);  // v = -0.1, w = w0 - 0.1
  model.update(fc4, 0.1f, 0.9f);  // v = -0.09 - 0.1 = -0.19, w = w0 - 0.29
  const auto w = model.parameters(fc4);
  for (size_t i = 0; i < w.size(); ++i)
    REQUIRE(w[i] == Approx(w0[i] - 0.29f).margin(1e-6));
  CHECK(model.momentum(fc4)[0] == Approx(-0.19f));
  // Other layers are untouched by a per-layer update.
  CHECK(model.momentum(0)[0] == 0.0f);
  model.zeroGradients(fc4);
  CHECK(test::maxAbs(model.gradients(fc4)) == 0.0);
}

}  // namespace
}  // namespace strata::nn

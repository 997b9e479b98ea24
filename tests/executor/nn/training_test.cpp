// End to end: tiny-cnn learns the synthetic task, and tiny-gpt the synthetic
// token sequences, on one CPU worker.
#include <fmt/format.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <string>
#include <vector>

#include "helpers.h"
#include "strata/exec/nn/cpu_backend.h"
#include "strata/exec/nn/dataset.h"

namespace strata::nn {
namespace {

// The losses as text, 3 decimals each.
std::string curveOf(const std::vector<double>& losses) {
  std::string curve;
  for (size_t i = 0; i < losses.size(); ++i)
    curve += fmt::format("{}{:.3f}", i ? " " : "", losses[i]);
  return curve;
}

// Trains `net` on one worker for `steps` fresh batches of `batch` examples
// (labels per position: `positions` of them per example) with `rule`;
// prints and returns the loss of every step.
std::vector<double> train(const Network& net, int batch, int steps, const UpdateRule& rule,
                          int positions) {
  const auto start = std::chrono::steady_clock::now();
  const auto data = SyntheticDataset::forNetwork(net, 42);
  Model model(net, ModelOptions{.seed = 42});
  std::vector<int32_t> labels(static_cast<size_t>(batch * positions));
  std::vector<double> losses;
  for (int step = 0; step < steps; ++step) {
    // Step s takes examples [s * batch, (s + 1) * batch): never the same twice.
    data.fill(int64_t{step} * batch, model.input(batch).view(), labels, positions);
    model.setLabels(labels);
    model.setStep(static_cast<uint64_t>(step));
    model.zeroGradients();
    model.forwardAll();
    losses.push_back(model.loss());
    model.backwardAll();
    model.updateAll(rule);
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  fmt::print("{}, batch {}, {}, lr {}: loss per step: {} ({:.2f} s)\n", net.name, batch,
             toString(rule.optimizer), rule.learningRate, curveOf(losses), seconds);
  return losses;
}

// Mean of the last `n` losses.
double lastMean(const std::vector<double>& losses, int n) {
  double last = 0;
  for (size_t i = losses.size() - static_cast<size_t>(n); i < losses.size(); ++i)
    last += losses[i] / n;
  return last;
}

TEST_CASE("training tiny-cnn on synthetic data lowers the loss", "[training]") {
  const auto losses = train(test::presetNetwork("tiny-cnn"), 32, 30,
                            UpdateRule{Optimizer::kMomentum, 0.01f, 0.9f}, 1);
  INFO("loss curve: " << curveOf(losses));
  // Mean of the last five steps against the first step: each is a fresh batch,
  // so a fall means generalisation, not memorisation.
  const double last = lastMean(losses, 5);
  CHECK(last < 0.7 * losses[0]);
  CHECK(last < 0.5 * std::log(10.0));  // and well below chance (uniform over 10 classes)
}

TEST_CASE("training tiny-gpt on synthetic token sequences lowers the loss",
          "[training][transformer]") {
  const Network net = test::presetNetwork("tiny-gpt");
  // The ids the dataset writes are whole token numbers of the vocabulary.
  {
    const auto data = SyntheticDataset::forNetwork(net, 42);
    Model model(net, ModelOptions{.seed = 42});
    std::vector<int32_t> labels(8 * 32);
    data.fill(0, model.input(8).view(), labels, 32);
    for (float id : model.input().span())
      REQUIRE((id >= 0 && id < 512 && id == std::floor(id)));
    for (int32_t label : labels)
      REQUIRE((label >= 0 && label < 512));
  }
  const auto losses =
      train(net, 8, 12, UpdateRule{Optimizer::kMomentum, 0.05f, 0.9f}, net.input.h * net.input.w);
  INFO("loss curve: " << curveOf(losses));
  // Fresh sequences every step: a fall is learning the bigram map.
  CHECK(losses[0] == Approx(std::log(512.0)).epsilon(0.2));  // near chance at the start
  CHECK(lastMean(losses, 3) < 0.9 * losses[0]);
}

TEST_CASE("training with Adam and AdamW lowers the loss", "[training][adam]") {
  // PyTorch's defaults (lr 1e-3; adamw weight decay 0.01), tiny-cnn and
  // tiny-gpt on fresh batches, as above.
  for (Optimizer o : {Optimizer::kAdam, Optimizer::kAdamW}) {
    UpdateRule rule{o, 1e-3f};
    rule.weightDecay = o == Optimizer::kAdamW ? kAdamWWeightDecay : 0.0f;
    const auto cnn = train(test::presetNetwork("tiny-cnn"), 32, 30, rule, 1);
    INFO(toString(o) << " tiny-cnn loss curve: " << curveOf(cnn));
    CHECK(lastMean(cnn, 5) < 0.7 * cnn[0]);
    const Network gpt = test::presetNetwork("tiny-gpt");
    const auto lm = train(gpt, 8, 12, rule, gpt.input.h * gpt.input.w);
    INFO(toString(o) << " tiny-gpt loss curve: " << curveOf(lm));
    CHECK(lastMean(lm, 3) < 0.9 * lm[0]);
  }
}

TEST_CASE("a Model's Adam update is Backend::adam at each layer's own step count",
          "[training][adam]") {
  const Network net = test::presetNetwork("tiny-cnn");
  Model model(net, ModelOptions{.seed = 3, .dropout = false});
  const auto data = SyntheticDataset::forNetwork(net, 3);
  std::vector<int32_t> labels(4);
  data.fill(0, model.input(4).view(), labels);
  model.setLabels(labels);
  model.zeroGradients();
  model.forwardAll();
  model.backwardAll();
  UpdateRule rule{Optimizer::kAdamW, 1e-2f};
  rule.weightDecay = 0.1f;
  // By hand: layer 0 at steps 1 and 2, layer 3 (conv2) at step 1.
  const auto copy = [](std::span<const float> s) { return std::vector<float>(s.begin(), s.end()); };
  std::vector<float> w0 = copy(model.parameters(0)), g0 = copy(model.gradients(0));
  std::vector<float> w3 = copy(model.parameters(3)), g3 = copy(model.gradients(3));
  std::vector<float> m0(w0.size()), v0(w0.size()), m3(w3.size()), v3(w3.size());
  for (int64_t t : {1, 2})
    CpuBackend::adamKernel(w0, m0, v0, g0, rule.adam(t));
  CpuBackend::adamKernel(w3, m3, v3, g3, rule.adam(1));
  model.update(0, rule);
  model.update(0, rule);
  model.update(3, rule);
  CHECK(model.updateCount(0) == 2);
  CHECK(model.updateCount(3) == 1);
  CHECK(model.updateCount(6) == 0);
  CHECK(copy(model.parameters(0)) == w0);
  CHECK(copy(model.parameters(3)) == w3);
  // updateAll: one step for every layer, after the most-updated (3).
  model.updateAll(rule);
  CHECK(model.updateCount(6) == 3);
  CpuBackend::adamKernel(w3, m3, v3, g3, rule.adam(3));
  CHECK(copy(model.parameters(3)) == w3);
}

}  // namespace
}  // namespace strata::nn

// End to end: tiny-cnn learns the synthetic task on one CPU worker.
#include <fmt/format.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>

#include "helpers.h"
#include "strata/exec/nn/dataset.h"

namespace strata::nn {
namespace {

TEST_CASE("training tiny-cnn on synthetic data lowers the loss", "[training]") {
  const auto start = std::chrono::steady_clock::now();
  const Network net = test::presetNetwork("tiny-cnn");
  const auto data = SyntheticDataset::forNetwork(net, 42);
  Model model(net, ModelOptions{.seed = 42});
  const int batch = 32, steps = 30;
  const float learningRate = 0.01f, momentum = 0.9f;
  std::vector<int32_t> labels(batch);
  std::vector<double> losses;
  for (int step = 0; step < steps; ++step) {
    // Step s takes examples [s * batch, (s + 1) * batch): never the same twice.
    data.fill(int64_t{step} * batch, model.input(batch).view(), labels);
    model.setLabels(labels);
    model.setStep(static_cast<uint64_t>(step));
    model.zeroGradients();
    model.forwardAll();
    losses.push_back(model.loss());
    model.backwardAll();
    model.updateAll(learningRate, momentum);
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::string curve;
  for (size_t i = 0; i < losses.size(); ++i)
    curve += fmt::format("{}{:.3f}", i ? " " : "", losses[i]);
  fmt::print("tiny-cnn, batch {}, lr {}, momentum {}: loss per step: {} ({:.2f} s)\n", batch,
             learningRate, momentum, curve, seconds);

  // Mean of the last five steps against the first step: each is a fresh batch,
  // so a fall means generalisation, not memorisation.
  double last = 0;
  for (int i = steps - 5; i < steps; ++i)
    last += losses[static_cast<size_t>(i)] / 5;
  INFO("loss curve: " << curve);
  CHECK(last < 0.7 * losses[0]);
  CHECK(last < 0.5 * std::log(10.0));  // and well below chance (uniform over 10 classes)
  // Speed is a claim about optimised builds; a sanitizer build
  // (STRATA_SANITIZE, cmake/sanitizers.cmake) runs several times slower.
#ifndef STRATA_SANITIZED
  CHECK(seconds < 10);
#endif
}

}  // namespace
}  // namespace strata::nn

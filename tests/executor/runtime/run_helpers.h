// What the executor's tests share: the scenario and run options of the
// equivalence tests (with each update rule), and how two weight vectors are
// compared.
#pragma once

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "strata/exec/nn/model.h"
#include "strata/exec/runtime.h"
#include "strata/model/strategy.h"

namespace strata::test {

// K workers of b examples, overlap on, several buckets and segments.
inline Scenario runScenario(Strategy s, int k, int b, Optimizer optimizer = Optimizer::kMomentum) {
  Scenario sc;
  sc.strategy = s;
  sc.options.optimizer = optimizer;
  sc.workers = k;
  sc.batchPerWorker = b;
  sc.options.overlap = true;
  sc.options.bucket = Bytes(64 * 1024);  // several buckets
  sc.options.segment = Bytes(8 * 1024);  // several segments
  return sc;
}

// No dropout: masks depend on the row in a worker's batch.
inline exec::RunOptions runOptions(int steps, exec::Device device = exec::Device::kCpu) {
  exec::RunOptions o;
  o.steps = steps;
  o.dropout = false;
  o.learningRate = 0.005f;
  o.seed = 3;
  o.device = device;
  return o;
}

// The same for a scenario trained with `optimizer`: adam and adamw with eps
// 1e-5 (see sameWeights) and, for adamw, weight decay 0.1, so that a decay
// left out (lr * 0.1 of every weight per step) shows.
inline exec::RunOptions runOptions(int steps, Optimizer optimizer,
                                   exec::Device device = exec::Device::kCpu) {
  exec::RunOptions o = runOptions(steps, device);
  if (isAdam(optimizer))
    o.eps = 1e-5f;
  if (optimizer == Optimizer::kAdamW)
    o.weightDecay = 0.1f;
  return o;
}

// The update rules every equivalence test trains with.
inline constexpr Optimizer kOptimizers[] = {Optimizer::kMomentum, Optimizer::kAdam,
                                            Optimizer::kAdamW};

// Largest |a - b| relative to the largest |b|.
inline double maxRelativeDifference(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, double(std::fabs(a[i] - b[i])));
    scale = std::max(scale, double(std::fabs(b[i])));
  }
  return diff / scale;
}

// Whether K workers' weights `a` equal one worker's `b` after a run of
// `optimizer` at learning rate `lr`. SGD with momentum: every element within
// 1e-5 of the largest weight (float sums in another order), unless that
// rounding flipped something discrete after the first update: on an AVX2
// machine, owt-a and owt-c at K = 6, b = 5 on tiny-cnn agree within 6e-8
// after step 1, then 483 of 268,650 weights (one unit's relu or pool
// decision and what it feeds) jump to 3e-5 apart at step 2, 535 at step 3
// (5.9e-5). So: all but 1 in 400 within 1e-5, and every element within lr,
// as below for Adam. Adam divides
// each element's step by that element's own gradient magnitude, so where
// rounding decides something discrete or near zero, one element moves by a
// share of lr that the rounding chose: a relu at 0 that one run passes and
// the other not on a unit almost never active, or a gradient that cancels to
// ~eps (tiny-gpt at PyTorch's eps 1e-8: ~120 of 134,912 weights up to 8e-4
// apart after 3 steps at lr 0.005; at eps 1e-5 none; tiny-cnn at eps 1e-5:
// up to 15 of 268,650 on some K, 1.5e-4 apart). So for Adam: all but 1 in
// 2,000 elements within 1e-5 of the largest weight, and every element
// within lr (one step's reach). A wrong step count, state or decay moves
// every element; a wrong shard or slice thousands.
// `tolerance`: 1e-5, or another (the GPU against the CPU: 1e-4).
inline void checkSameWeights(const std::vector<float>& a, const std::vector<float>& b,
                             Optimizer optimizer, float lr, double tolerance = 1e-5) {
  const bool adam = isAdam(optimizer);
  if (!adam && maxRelativeDifference(a, b) < tolerance)
    return;
  REQUIRE(a.size() == b.size());
  double scale = 0, worst = 0;
  for (float x : b)
    scale = std::max(scale, double(std::fabs(x)));
  size_t off = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::fabs(double(a[i]) - double(b[i]));
    worst = std::max(worst, d);
    off += d > tolerance * scale ? 1 : 0;
  }
  INFO(off << " of " << a.size() << " weights further than " << tolerance << " of the largest ("
           << scale << ") apart; the furthest " << worst << " (lr " << lr << ")");
  CHECK(off <= a.size() / (adam ? 2000 : 400));
  CHECK(worst < lr);
}

// Each of K = dp x tp workers' weights put where one worker holds them
// (Model::wholeParameterIndex of its share) and compared with that one
// worker's `ref` (checkSameWeights); every element of the whole is some
// worker's.
inline void checkSharesAgainstOneWorker(const Network& net, int tp,
                                        const std::vector<std::vector<float>>& params,
                                        const std::vector<float>& ref, Optimizer optimizer,
                                        float lr, double tolerance = 1e-5) {
  std::vector<char> held(ref.size(), 0);
  for (size_t w = 0; w < params.size(); ++w) {
    INFO("worker " << w << ", rank " << w % size_t(tp) << " of its tensor-parallel group");
    nn::ModelOptions o;
    o.tensorParallel = {tp, static_cast<int>(w % size_t(tp))};
    o.initializeParameters = false;
    const nn::Model share(net, o);
    REQUIRE(params[w].size() == static_cast<size_t>(share.parameterCount()));
    std::vector<float> whole = ref;
    for (int64_t i = 0; i < share.parameterCount(); ++i) {
      const int64_t j = share.wholeParameterIndex(i);
      REQUIRE(j >= 0);
      REQUIRE(j < static_cast<int64_t>(ref.size()));
      whole[static_cast<size_t>(j)] = params[w][static_cast<size_t>(i)];
      held[static_cast<size_t>(j)] = 1;
    }
    checkSameWeights(whole, ref, optimizer, lr, tolerance);
  }
  CHECK(std::count(held.begin(), held.end(), 0) == 0);
}

}  // namespace strata::test

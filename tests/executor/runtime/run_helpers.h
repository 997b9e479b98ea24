// What the executor's tests share: the scenario and run options of the
// equivalence tests, and how two weight vectors are compared.
#pragma once

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "strata/exec/runtime.h"
#include "strata/model/strategy.h"

namespace strata::test {

// K workers of b examples, overlap on, several buckets and segments.
inline Scenario runScenario(Strategy s, int k, int b) {
  Scenario sc;
  sc.strategy = s;
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

}  // namespace strata::test

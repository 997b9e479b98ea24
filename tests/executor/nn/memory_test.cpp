// The Memory interface (memory.h): its copies, Buffer and Tensor over them,
// the guards of the host-span accessors, and Model's host copies, on host
// memory and on memory the host may not address (device_like_memory.h).
#include "strata/exec/nn/memory.h"

#include <catch2/catch.hpp>
#include <cstdint>
#include <numeric>
#include <vector>

#include "../device_like_memory.h"
#include "helpers.h"
#include "strata/exec/nn/cpu_backend.h"
#include "strata/exec/nn/dataset.h"
#include "strata/exec/nn/model.h"
#include "strata/exec/nn/tensor.h"
#include "strata/model/error.h"

namespace strata::nn {
namespace {

TEST_CASE("host memory's copies are memcpy and memset, in place when they return", "[memory]") {
  Memory& host = hostMemory();
  CHECK(host.hostAccessible());
  std::vector<int32_t> a{1, 2, 3, 4}, b(4, -1);
  host.upload(b.data(), a.data(), 3 * sizeof(int32_t));
  CHECK(b == std::vector<int32_t>{1, 2, 3, -1});
  host.zero(b.data() + 1, 2 * sizeof(int32_t));
  CHECK(b == std::vector<int32_t>{1, 0, 0, -1});
  host.copy(b.data() + 1, a.data() + 3, sizeof(int32_t));
  CHECK(b == std::vector<int32_t>{1, 4, 0, -1});
  std::vector<int32_t> c(4, 9);
  host.download(c.data(), b.data(), 4 * sizeof(int32_t));
  CHECK(c == b);
  host.upload(c.data(), a.data(), 0);  // nothing, and no read of the pointers' bytes
  CHECK(c == b);
}

TEST_CASE("a Buffer moves and zero-fills through its Memory's copies", "[memory]") {
  strata::test::DeviceLikeMemory memory;
  Buffer<float> buffer(memory);
  buffer.assign(std::vector<float>{1, 2, 3});
  CHECK(memory.uploads == 1);
  CHECK(buffer.toHost() == std::vector<float>{1, 2, 3});
  // Growing keeps the contents (Memory::copy), and the new elements are zero.
  buffer.resize(5);
  CHECK(buffer.toHost() == std::vector<float>{1, 2, 3, 0, 0});
  // Shrinking keeps the storage; growing back within it zeroes again
  // (Memory::zero), however the elements were written.
  buffer.assign(std::vector<float>{7, 8, 9, 10, 11});
  buffer.resize(2);
  buffer.resize(4);
  CHECK(buffer.toHost() == std::vector<float>{7, 8, 0, 0});
  CHECK(memory.downloads == 3);
}

TEST_CASE("host spans of memory the host cannot address are refused", "[memory]") {
  strata::test::DeviceLikeMemory memory;
  Buffer<float> buffer(memory, 4);
  CHECK_THROWS_AS(buffer.hostSpan("a test"), InvariantError);
  CHECK_THROWS_WITH(buffer.hostSpan("a test"),
                    Catch::Contains("a test") && Catch::Contains("device-like"));
  Tensor t(Dims{1, 2, 1, 2}, memory);
  CHECK_THROWS_AS(t.at(0, 1, 0, 1), InvariantError);
  CHECK_THROWS_AS(t.fill(1.0f), InvariantError);
  t.upload(std::vector<float>{1, 2, 3, 4});
  CHECK(t.toHost() == std::vector<float>{1, 2, 3, 4});
  // On host memory the same calls are plain accesses.
  Buffer<float> onHost(hostMemory(), 2);
  onHost.hostSpan("a test")[1] = 5;
  CHECK(onHost.toHost() == std::vector<float>{0, 5});
}

// A step of tiny-cnn and of tiny-gpt on a CpuBackend over `memory`; returns
// the Model (its backend in `backend`).
Model step(const Network& net, Memory* memory, std::unique_ptr<Backend>& backend) {
  CpuOptions o;
  o.memory = memory;
  backend = std::make_unique<CpuBackend>(o);
  ModelOptions mo;
  mo.backend = backend.get();
  mo.dropout = false;
  Model model(net, mo);
  const auto data = SyntheticDataset::forNetwork(net, 5);
  const int b = 3;
  const auto& last = net.layers.back().outShape;
  model.writeInput(data.batch(0, b));
  model.setLabels(data.labels(0, b, last.h * last.w));
  model.forwardAll();
  model.backwardAll();
  return model;
}

TEST_CASE(
    "a Model on memory the host cannot address: host copies equal the host spans of a "
    "host-memory Model, and its host spans are refused",
    "[memory][model]") {
  for (const char* name : {"tiny-cnn", "tiny-gpt"}) {
    INFO(name);
    const Network net = test::presetNetwork(name);
    std::unique_ptr<Backend> hostBackend, deviceBackend;
    strata::test::DeviceLikeMemory memory;
    Model onHost = step(net, nullptr, hostBackend);
    Model onDevice = step(net, &memory, deviceBackend);
    const auto params = onHost.allParameters();
    const auto grads = onHost.allGradients();
    CHECK(onDevice.parametersToHost() == std::vector<float>(params.begin(), params.end()));
    CHECK(onDevice.gradientsToHost() == std::vector<float>(grads.begin(), grads.end()));
    CHECK(onHost.parametersToHost() == onDevice.parametersToHost());
    CHECK(onDevice.loss() == onHost.loss());
    const int last = onHost.layerCount() - 1;
    CHECK(onDevice.output(last).toHost() == onHost.output(last).toHost());
    const auto stats = onHost.softmaxStats();
    CHECK(onDevice.softmaxStatsToHost() == std::vector<float>(stats.begin(), stats.end()));
    // Layer ranges as parametersNoWait lays them out.
    const auto first = onHost.parametersNoWait(0, last);
    CHECK(onDevice.parametersToHost(0, last) == std::vector<float>(first.begin(), first.end()));
    CHECK_THROWS_AS(onDevice.allParameters(), InvariantError);
    CHECK_THROWS_AS(onDevice.allGradients(), InvariantError);
    CHECK_THROWS_AS(onDevice.softmaxStats(), InvariantError);
    CHECK_THROWS_AS(onDevice.parameters(0), InvariantError);
    CHECK_THROWS_AS(onDevice.gradients(0), InvariantError);
    CHECK_THROWS_AS(onDevice.output(last).at(0, 0, 0, 0), InvariantError);
    // Uploads land where the host copies read them back.
    std::vector<float> values(static_cast<size_t>(onDevice.parameterCount()));
    std::iota(values.begin(), values.end(), 0.0f);
    onDevice.uploadParameters(values);
    CHECK(onDevice.parametersToHost() == values);
    std::vector<float> merged = onDevice.softmaxStatsToHost();
    merged[0] += 1;
    onDevice.uploadSoftmaxStats(merged);
    CHECK(onDevice.softmaxStatsToHost() == merged);
  }
}

}  // namespace
}  // namespace strata::nn

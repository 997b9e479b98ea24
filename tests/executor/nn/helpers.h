// Small hand-made networks and random fills for the nn tests.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "strata/exec/nn/model.h"
#include "strata/model/network.h"
#include "strata/model/network_loader.h"
#include "strata/model/presets.h"

namespace strata::nn::test {

// `n` elements of a backend's buffer at `data`, copied to the host (a
// download: waits for the kernels before it): how a test reads a result
// that may be in device memory.
template <class T>
std::vector<T> hostCopy(Memory& memory, const T* data, size_t n) {
  std::vector<T> out(n);
  download(memory, std::span<T>(out), data);
  return out;
}
inline std::vector<float> hostCopy(Memory& memory, ConstTensorView v) {
  return hostCopy(memory, v.data, static_cast<size_t>(v.elements()));
}
// Host values into a backend's buffer at `data` (an upload).
template <class T>
void deviceCopy(Memory& memory, T* data, std::span<const T> values) {
  upload(memory, data, values);
}

// Builds a Network layer by layer with the model's own shape rules
// (deriveLayer), so shapes and parameter counts are those a config gives.
class NetworkBuilder {
 public:
  explicit NetworkBuilder(Shape input) {
    net_.name = "test";
    net_.sourceFile = "test.yaml";
    net_.input = input;
  }

  // Adds a layer reading `inputs` (default: the previous layer, or the network
  // input for the first); returns its index.
  int add(LayerKind kind, LayerSpec spec = {}, std::vector<int> inputs = {}) {
    const int index = static_cast<int>(net_.layers.size());
    Layer layer;
    layer.name = std::string(toString(kind)) + std::to_string(index);
    layer.kind = kind;
    layer.spec = spec;
    layer.configLine = index + 1;
    layer.inputs = inputs.empty() ? std::vector<int>{index - 1} : inputs;
    std::vector<Shape> shapes;
    for (int p : layer.inputs)
      shapes.push_back(p < 0 ? net_.input : net_.layers[static_cast<size_t>(p)].outShape);
    deriveLayer(layer, shapes, net_.sourceFile, index);
    net_.layers.push_back(layer);
    if (kind == LayerKind::kFc && net_.modelParallelFrom < 0)
      net_.modelParallelFrom = index;
    return index;
  }

  const Network& network() const { return net_; }

 private:
  Network net_;
};

inline LayerSpec convSpec(int filters, int kernelH, int kernelW, int stride = 1, int pad = 0,
                          int groups = 1, bool bias = true) {
  LayerSpec s;
  s.filters = filters;
  s.kernelH = kernelH;
  s.kernelW = kernelW;
  s.stride = stride;
  s.pad = pad;
  s.groups = groups;
  s.bias = bias;
  return s;
}

inline LayerSpec poolSpec(PoolMode mode, int kernel, int stride, int pad = 0, bool global = false) {
  LayerSpec s;
  s.poolMode = mode;
  s.kernelH = s.kernelW = kernel;
  s.stride = stride;
  s.pad = pad;
  s.global = global;
  return s;
}

inline LayerSpec fcSpec(int outputs, bool flatten = true, bool bias = true) {
  LayerSpec s;
  s.outputs = outputs;
  s.flatten = flatten;
  s.bias = bias;
  return s;
}

inline LayerSpec lrnSpec(int size) {
  LayerSpec s;
  s.lrnSize = size;
  return s;
}

inline LayerSpec dropoutSpec(double rate) {
  LayerSpec s;
  s.dropoutRate = rate;
  return s;
}

// Uniform values in [lo, hi) from a fixed seed.
inline void fillUniform(std::span<float> out, uint32_t seed, float lo = -1, float hi = 1) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  for (float& v : out)
    v = dist(gen);
}

inline Network presetNetwork(const std::string& name) {
  return loadNetwork(resolveConfig(ConfigKind::kNetwork, name, "test"));
}

// The largest |x| of a span (for tolerances relative to a gradient's scale).
inline double maxAbs(std::span<const float> v) {
  double m = 0;
  for (float x : v)
    m = std::max(m, static_cast<double>(std::abs(x)));
  return m;
}

}  // namespace strata::nn::test

#include "strata/model/network.h"

#include <fmt/format.h>

#include <limits>

#include "strata/model/checked.h"
#include "strata/model/error.h"

namespace strata {

std::string_view toString(LayerKind kind) {
  switch (kind) {
    case LayerKind::kConv:
      return "conv";
    case LayerKind::kPool:
      return "pool";
    case LayerKind::kFc:
      return "fc";
    case LayerKind::kRnn:
      return "rnn";
    case LayerKind::kRelu:
      return "relu";
    case LayerKind::kLrn:
      return "lrn";
    case LayerKind::kDropout:
      return "dropout";
    case LayerKind::kBatchNorm:
      return "batchnorm";
    case LayerKind::kAdd:
      return "add";
    case LayerKind::kSoftmax:
      return "softmax";
  }
  return "?";
}

std::string_view toString(Phase phase) {
  switch (phase) {
    case Phase::kFwd:
      return "fwd";
    case Phase::kBwdData:
      return "bwd_data";
    case Phase::kBwdWeights:
      return "bwd_weights";
    case Phase::kUpdate:
      return "update";
  }
  return "?";
}

bool Layer::readsNetworkInput() const {
  for (int i : inputs)
    if (i < 0)
      return true;
  return false;
}

int64_t Network::totalParams() const {
  int64_t n = 0;
  for (const auto& l : layers)
    n += l.params;
  return n;
}

double Network::totalFwdFlops() const {
  double f = 0;
  for (const auto& l : layers)
    f += l.fwdFlops;
  return f;
}

double Network::totalTrainFlops() const {
  double f = 0;
  for (const auto& l : layers)
    f += l.fwdFlops + l.bwdDataFlops + l.bwdWeightsFlops;
  return f;
}

int64_t Network::paramsOfKind(LayerKind kind) const {
  int64_t n = 0;
  for (const auto& l : layers)
    if (l.kind == kind)
      n += l.params;
  return n;
}

double Network::fwdFlopsOfKind(LayerKind kind) const {
  double f = 0;
  for (const auto& l : layers)
    if (l.kind == kind)
      f += l.fwdFlops;
  return f;
}

int Network::find(std::string_view layerName) const {
  for (size_t i = 0; i < layers.size(); ++i)
    if (layers[i].name == layerName)
      return static_cast<int>(i);
  return -1;
}

namespace {

// floor((in + 2 pad - kernel) / stride) + 1, or an error when it does not fit.
// In 64 bits: an input and a pad of up to 1e9 each do not fit an int.
int windowOutput(int in, int kernel, int stride, int pad, const std::string& what,
                 const std::string& file, const Layer& layer, const std::string& key) {
  const int64_t padded = int64_t{in} + 2 * int64_t{pad};
  if (kernel > padded)
    throw ConfigError(file, layer.configLine, key,
                      fmt::format("{} {} is larger than the padded input {} (input {}, pad {})",
                                  what, kernel, padded, in, pad));
  const int64_t out = (padded - kernel) / stride + 1;
  if (out > std::numeric_limits<int>::max())
    throw ConfigError(file, layer.configLine, key,
                      fmt::format("output size {} (input {}, pad {}) is larger than {}", out, in,
                                  pad, std::numeric_limits<int>::max()));
  return static_cast<int>(out);
}

// The product of `factors`, checked: a ConfigError naming the layer when it
// exceeds 2^53, the largest count the cost model computes with exactly.
int64_t countOf(std::initializer_list<int64_t> factors, const char* what, const std::string& file,
                const Layer& layer, const std::string& key) {
  int64_t r = 1;
  for (auto f : factors) {
    if (!checkedMul(r, f, r, kMaxExactCount)) {
      std::string product;
      double value = 1;
      for (auto g : factors) {
        product += (product.empty() ? "" : " x ") + std::to_string(g);
        value *= double(g);
      }
      throw ConfigError(file, layer.configLine, key,
                        fmt::format("{} of layer '{}' overflow: {} = {:.3g}, over 2^53 = {:.3g} "
                                    "(the largest count strata computes with exactly)",
                                    what, layer.name, product, value, double(kMaxExactCount)));
    }
  }
  return r;
}

int rnnGates(RnnCell cell) {
  switch (cell) {
    case RnnCell::kVanilla:
      return 1;
    case RnnCell::kGru:
      return 3;
    case RnnCell::kLstm:
      return 4;
  }
  return 1;
}

}  // namespace

void deriveLayer(Layer& layer, const std::vector<Shape>& inputShapes, const std::string& file,
                 int index) {
  const std::string key = fmt::format("layers[{}]", index);
  const Shape in = inputShapes.at(0);
  const auto& s = layer.spec;
  layer.inShape = in;
  auto count = [&](std::initializer_list<int64_t> factors, const char* what) {
    return countOf(factors, what, file, layer, key);
  };
  // The loader checks the network input; earlier layers checked their outputs.
  const double nIn = static_cast<double>(count({in.c, in.h, in.w}, "input elements"));
  Shape out = in;
  int64_t macs = 0;  // multiply-accumulates per example of the fwd pass
  switch (layer.kind) {
    case LayerKind::kConv: {
      if (in.c % s.groups != 0 || s.filters % s.groups != 0)
        throw ConfigError(file, layer.configLine, key + ".groups",
                          fmt::format("groups {} must divide both input channels {} and filters {}",
                                      s.groups, in.c, s.filters));
      out.c = s.filters;
      out.h = windowOutput(in.h, s.kernelH, s.stride, s.pad, "kernel height", file, layer,
                           key + ".kernel");
      out.w = windowOutput(in.w, s.kernelW, s.stride, s.pad, "kernel width", file, layer,
                           key + ".kernel");
      count({out.c, out.h, out.w}, "output elements");
      const int64_t weights =
          count({s.filters, in.c / s.groups, s.kernelH, s.kernelW}, "parameters");
      layer.params = count({weights + (s.bias ? s.filters : 0)}, "parameters");
      macs = count({out.c, out.h, out.w, in.c / s.groups, s.kernelH, s.kernelW},
                   "multiply-accumulates");
      break;
    }
    case LayerKind::kPool: {
      int kh = s.kernelH, kw = s.kernelW, stride = s.stride;
      if (s.global) {
        kh = in.h;
        kw = in.w;
        stride = 1;
      }
      out.h = windowOutput(in.h, kh, stride, s.global ? 0 : s.pad, "pool window", file, layer,
                           key + ".kernel");
      out.w = windowOutput(in.w, kw, stride, s.global ? 0 : s.pad, "pool window", file, layer,
                           key + ".kernel");
      layer.fwdFlops = static_cast<double>(count({out.c, out.h, out.w, kh, kw}, "FLOPs"));
      layer.bwdDataFlops = layer.fwdFlops;
      break;
    }
    case LayerKind::kFc: {
      const int64_t bias = s.bias ? s.outputs : 0;
      if (s.flatten) {
        out = Shape{s.outputs, 1, 1};
        const int64_t weights = count({in.c, in.h, in.w, s.outputs}, "parameters");
        layer.params = count({weights + bias}, "parameters");
        macs = weights;
      } else {
        out = Shape{s.outputs, in.h, in.w};
        count({out.c, out.h, out.w}, "output elements");
        layer.params = count({count({in.c, s.outputs}, "parameters") + bias}, "parameters");
        macs = count({in.c, s.outputs, in.h, in.w}, "multiply-accumulates");
      }
      break;
    }
    case LayerKind::kRnn: {
      const int gates = rnnGates(s.cell);
      out = Shape{s.hidden, in.h, in.w};
      count({out.c, out.h, out.w}, "output elements");
      const int64_t width = int64_t{in.c} + s.hidden;  // input and recurrent state
      const int64_t perGate =
          count({count({s.hidden, width}, "parameters") + (s.bias ? s.hidden : 0)}, "parameters");
      layer.params = count({gates, perGate}, "parameters");
      macs = count({in.h, in.w, gates, s.hidden, width}, "multiply-accumulates");
      break;
    }
    case LayerKind::kRelu:
    case LayerKind::kDropout:
      layer.fwdFlops = nIn;
      layer.bwdDataFlops = nIn;
      break;
    case LayerKind::kLrn:
      // Sum of squares over a window of `size` channels (2 size), then scale
      // and power (3) per element; backward costs about twice the forward.
      layer.fwdFlops = nIn * (2.0 * s.lrnSize + 3);
      layer.bwdDataFlops = 2 * layer.fwdFlops;
      break;
    case LayerKind::kBatchNorm:
      layer.params = 2 * int64_t{in.c};  // scale and shift per channel
      layer.fwdFlops = 4 * nIn;          // mean, variance, normalise, scale-shift
      layer.bwdDataFlops = 6 * nIn;
      layer.bwdWeightsFlops = 2 * nIn;
      break;
    case LayerKind::kAdd: {
      for (size_t i = 1; i < inputShapes.size(); ++i)
        if (!(inputShapes[i] == in))
          throw ConfigError(
              file, layer.configLine, key + ".inputs",
              fmt::format("add of different shapes {}x{}x{} and {}x{}x{}", in.c, in.h, in.w,
                          inputShapes[i].c, inputShapes[i].h, inputShapes[i].w));
      layer.fwdFlops = nIn * double(inputShapes.size() - 1);
      break;
    }
    case LayerKind::kSoftmax:
      layer.fwdFlops = 4 * nIn;  // exp, sum, divide, log-loss
      layer.bwdDataFlops = nIn;
      break;
  }
  if (macs > 0) {
    // 2 FLOPs per multiply-accumulate; the three passes of a GEMM-shaped layer
    // are GEMMs of the same size (bias terms are not counted).
    layer.fwdFlops = 2 * double(macs);
    layer.bwdDataFlops = 2 * double(macs);
    layer.bwdWeightsFlops = 2 * double(macs);
  }
  layer.outShape = out;
  const double nOut = static_cast<double>(out.elements());
  double nInAll = 0;
  for (const auto& shape : inputShapes)
    nInAll += static_cast<double>(shape.elements());
  layer.fwdElems = nInAll + nOut;                               // read inputs, write output
  layer.bwdDataElems = nOut + nInAll + nIn;                     // read dy and saved x, write dx
  layer.bwdWeightsElems = layer.hasWeights() ? nIn + nOut : 0;  // read x and dy
}

}  // namespace strata

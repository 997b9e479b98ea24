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
    case LayerKind::kEmbedding:
      return "embedding";
    case LayerKind::kAttention:
      return "attention";
    case LayerKind::kLayerNorm:
      return "layernorm";
    case LayerKind::kGelu:
      return "gelu";
  }
  return "?";
}

std::string layerKindNames() {
  std::string names;
  for (auto kind : kAllLayerKinds)
    names += (names.empty() ? "" : ", ") + std::string(toString(kind));
  return names;
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
        // Tied: the weights are the embedding's (counted there).
        layer.params = s.tiedTo >= 0
                           ? bias
                           : count({count({in.c, s.outputs}, "parameters") + bias}, "parameters");
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
    case LayerKind::kEmbedding: {
      // One token id per position in: the network input, 1 x T x W.
      if (layer.inputs.size() != 1 || layer.inputs[0] != -1 || in.c != 1)
        throw ConfigError(file, layer.configLine, key + ".input",
                          fmt::format("an embedding reads the network input of token ids "
                                      "(channels: 1, one id per position), got {}x{}x{}",
                                      in.c, in.h, in.w));
      const int64_t positionsUsed = int64_t{in.h} * in.w;
      if (s.positions > 0 && positionsUsed > s.positions)
        throw ConfigError(
            file, layer.configLine, key + ".positions",
            fmt::format("{} positions per example, over the {} the position table holds",
                        positionsUsed, s.positions));
      out = Shape{s.outputs, in.h, in.w};
      const double nOut = static_cast<double>(count({out.c, out.h, out.w}, "output elements"));
      layer.params = count({count({s.vocab, s.outputs}, "parameters") +
                            count({s.positions, s.outputs}, "parameters")},
                           "parameters");
      // A gather moves no arithmetic; adding the position vector is one
      // FLOP per output, and so is each scatter-add of the backward pass.
      layer.fwdFlops = s.positions > 0 ? nOut : 0;
      layer.bwdWeightsFlops = nOut * (s.positions > 0 ? 2 : 1);
      break;
    }
    case LayerKind::kAttention: {
      if (s.heads <= 0 || in.c % s.heads != 0)
        throw ConfigError(file, layer.configLine, key + ".heads",
                          fmt::format("heads {} must divide the {} channels", s.heads, in.c));
      // Per example, with T = h w positions of d = c features: the Q, K, V
      // projections 3 T d^2, scores Q K^T T^2 d, context P V T^2 d and the
      // output projection T d^2 multiply-accumulates (Narayanan et al.,
      // "Efficient Large-Scale Language Model Training on GPU Clusters Using
      // Megatron-LM", SC 2021, section 5.1: 8 b s h^2 + 4 b s^2 h FLOPs).
      const int64_t t = count({in.h, in.w}, "positions");
      const int64_t projection = count({4, t, in.c, in.c}, "multiply-accumulates");
      const int64_t mixing = count({2, t, t, in.c}, "multiply-accumulates");
      const int64_t scores = count({s.heads, t, t}, "attention scores");
      layer.params =
          count({count({4, in.c, in.c}, "parameters") + (s.bias ? 4 * in.c : 0)}, "parameters");
      // Backward is twice forward: both operands of the scores and of the
      // context GEMMs take a gradient, and so do the projections' inputs and
      // weights. The executor runs bwd_weights first and it carries the
      // gradient through the heads that both phases need (dQKV): the weight
      // gradients 4 T d^2, dC = Wo^T dy T d^2 and the heads 4 T^2 d; bwd_data
      // is dx = Wqkv^T dQKV, 3 T d^2 (model/cost/src/lowering.cpp, lowerCpu).
      layer.fwdFlops = 2 * double(projection + mixing);
      layer.bwdDataFlops = 2 * 3 * double(t) * in.c * in.c;
      layer.bwdWeightsFlops = 2 * double(projection + 2 * mixing) + 2 * double(t) * in.c * in.c;
      // Memory: x, Q K V, the context and the output per position (6 T d),
      // and the scores written, read by the softmax and written again (3 H T^2).
      const double td = double(t) * in.c;
      layer.fwdElems = 6 * td + 3 * double(scores);
      layer.bwdDataElems = 5 * td;  // read dQKV, write dx (with its zero fill)
      layer.bwdWeightsElems = 2 * layer.fwdElems;
      layer.savedElems = 4 * td + double(scores);
      layer.outShape = out;
      return;
    }
    case LayerKind::kLayerNorm:
      layer.params = 2 * int64_t{in.c};  // gain and bias per feature
      layer.fwdFlops = 4 * nIn;          // as batchnorm, over the features of each position
      layer.bwdDataFlops = 6 * nIn;
      layer.bwdWeightsFlops = 2 * nIn;
      break;
    case LayerKind::kGelu:
      // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))): 8 operations, and
      // about 12 for its derivative.
      layer.fwdFlops = 8 * nIn;
      layer.bwdDataFlops = 12 * nIn;
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
  layer.fwdElems = nInAll + nOut;            // read inputs, write output
  layer.bwdDataElems = nOut + nInAll + nIn;  // read dy and saved x, write dx
  layer.bwdWeightsElems = layer.computesWeightGradient() ? nIn + nOut : 0;  // read x and dy
  if (layer.kind == LayerKind::kEmbedding) {
    layer.bwdDataElems = 0;  // token ids take no gradient
    layer.bwdWeightsElems = 2 * nOut;
  }
}

}  // namespace strata

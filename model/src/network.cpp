#include "strata/model/network.h"

#include <fmt/format.h>

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
int windowOutput(int in, int kernel, int stride, int pad, const std::string& what,
                 const std::string& file, const Layer& layer, const std::string& key) {
  const int padded = in + 2 * pad;
  if (kernel > padded)
    throw ConfigError(file, layer.configLine, key,
                      fmt::format("{} {} is larger than the padded input {} (input {}, pad {})",
                                  what, kernel, padded, in, pad));
  return (padded - kernel) / stride + 1;
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
  const double nIn = static_cast<double>(in.elements());
  Shape out = in;
  double macs = 0;  // multiply-accumulates per example of the fwd pass
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
      const int64_t weights = int64_t{s.filters} * (in.c / s.groups) * s.kernelH * s.kernelW;
      layer.params = weights + (s.bias ? s.filters : 0);
      macs = static_cast<double>(out.elements()) * (in.c / s.groups) * s.kernelH * s.kernelW;
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
      layer.fwdFlops = static_cast<double>(out.elements()) * kh * kw;
      layer.bwdDataFlops = layer.fwdFlops;
      break;
    }
    case LayerKind::kFc: {
      if (s.flatten) {
        out = Shape{s.outputs, 1, 1};
        layer.params = static_cast<int64_t>(nIn) * s.outputs + (s.bias ? s.outputs : 0);
        macs = nIn * s.outputs;
      } else {
        out = Shape{s.outputs, in.h, in.w};
        layer.params = int64_t{in.c} * s.outputs + (s.bias ? s.outputs : 0);
        macs = double(in.c) * s.outputs * in.h * in.w;
      }
      break;
    }
    case LayerKind::kRnn: {
      const int gates = rnnGates(s.cell);
      out = Shape{s.hidden, in.h, in.w};
      const int64_t perGate = int64_t{s.hidden} * (in.c + s.hidden) + (s.bias ? s.hidden : 0);
      layer.params = gates * perGate;
      const double steps = double(in.h) * in.w;
      macs = steps * gates * double(s.hidden) * (in.c + s.hidden);
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
    layer.fwdFlops = 2 * macs;
    layer.bwdDataFlops = 2 * macs;
    layer.bwdWeightsFlops = 2 * macs;
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

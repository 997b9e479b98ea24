// The default transformer and vision kernels of Backend: a backend without
// them says so.
#include "strata/exec/nn/backend.h"

#include <fmt/format.h>

#include "strata/model/error.h"

namespace strata::nn {

void Backend::lacks(std::string_view kind) const {
  throw UserError(
      fmt::format("the {} backend does not run {} layers yet (transformer layers run "
                  "on the cpu backend)",
                  name(), kind));
}

void Backend::lacksVision(std::string_view kind) const {
  throw UserError(fmt::format(
      "the {} backend does not run {} layers yet (vision networks' concat, mul, slice, shuffle, "
      "scale, class_token, pos_embedding, token, sigmoid, silu, relu6, hardsigmoid, "
      "hardswish and tanh layers run on the cpu backend)",
      name(), kind));
}

std::string_view toString(Activation fn) {
  switch (fn) {
    case Activation::kSigmoid:
      return "sigmoid";
    case Activation::kSilu:
      return "silu";
    case Activation::kRelu6:
      return "relu6";
    case Activation::kHardSigmoid:
      return "hardsigmoid";
    case Activation::kHardSwish:
      return "hardswish";
    case Activation::kTanh:
      return "tanh";
  }
  return "?";
}

void Backend::activationForward(Activation fn, ConstTensorView, TensorView) {
  lacksVision(toString(fn));
}
void Backend::activationBackward(Activation fn, ConstTensorView, ConstTensorView, ConstTensorView,
                                 TensorView, float) {
  lacksVision(toString(fn));
}
void Backend::copyFromChannels(ConstTensorView, int, TensorView, float) {
  lacksVision("concat");
}
void Backend::addIntoChannels(ConstTensorView, TensorView, int, float) {
  lacksVision("slice");
}
void Backend::shuffleChannels(ConstTensorView, int, TensorView, float) {
  lacksVision("shuffle");
}
void Backend::scaleChannels(ConstTensorView, const float*, TensorView, float) {
  lacksVision("scale");
}
void Backend::scaleBackwardWeights(ConstTensorView, ConstTensorView, float*) {
  lacksVision("scale");
}
void Backend::copyPositions(ConstTensorView, int, TensorView, int, int, float) {
  lacksVision("class_token and token");
}
void Backend::broadcastPositions(const float*, int, TensorView, int) {
  lacksVision("class_token");
}
void Backend::addTable(ConstTensorView, const float*, TensorView) {
  lacksVision("pos_embedding");
}
void Backend::sumPositions(ConstTensorView, int, int, float*) {
  lacksVision("class_token and pos_embedding");
}
void Backend::mulForward(ConstTensorView, ConstTensorView, TensorView) {
  lacksVision("mul");
}
void Backend::mulBackward(ConstTensorView, ConstTensorView, ConstTensorView, TensorView, float,
                          TensorView, float) {
  lacksVision("mul");
}

void Backend::layerNormForward(ConstTensorView, const float*, const float*, float, TensorView) {
  lacks("layernorm");
}
void Backend::layerNormBackwardData(ConstTensorView, ConstTensorView, const float*, float,
                                    TensorView, float) {
  lacks("layernorm");
}
void Backend::layerNormBackwardWeights(ConstTensorView, ConstTensorView, float, float*, float*) {
  lacks("layernorm");
}
void Backend::geluForward(ConstTensorView, TensorView) {
  lacks("gelu");
}
void Backend::geluBackward(ConstTensorView, ConstTensorView, TensorView, float) {
  lacks("gelu");
}
void Backend::rmsNormForward(ConstTensorView, const float*, float, TensorView) {
  lacks("rmsnorm");
}
void Backend::rmsNormBackwardData(ConstTensorView, ConstTensorView, const float*, float, TensorView,
                                  float) {
  lacks("rmsnorm");
}
void Backend::rmsNormBackwardWeights(ConstTensorView, ConstTensorView, float, float*) {
  lacks("rmsnorm");
}
void Backend::swigluForward(ConstTensorView, TensorView) {
  lacks("swiglu");
}
void Backend::swigluBackward(ConstTensorView, ConstTensorView, TensorView, float) {
  lacks("swiglu");
}
void Backend::attentionForward(const AttentionDesc&, ConstTensorView, const float*, const float*,
                               const AttentionSaved&, TensorView) {
  lacks("attention");
}
void Backend::attentionBackwardWeights(const AttentionDesc&, ConstTensorView, ConstTensorView,
                                       const float*, const AttentionSaved&, float*, float*) {
  lacks("attention");
}
void Backend::attentionBackwardData(const AttentionDesc&, ConstTensorView, const float*, TensorView,
                                    float) {
  lacks("attention");
}
void Backend::attentionCoreForward(const AttentionDesc&, const AttentionSaved&) {
  lacks("attention core (selective recomputation)");
}
void Backend::embeddingForward(const EmbeddingDesc&, ConstTensorView, const float*, TensorView) {
  lacks("embedding");
}
void Backend::embeddingBackwardWeights(const EmbeddingDesc&, ConstTensorView, ConstTensorView,
                                       float*) {
  lacks("embedding");
}

}  // namespace strata::nn

#include "strata/model/network.h"

#include "strata/model/layer_kinds.h"

namespace strata {

std::string_view toString(LayerKind kind) {
  const auto table = layerKindTable();
  const auto k = static_cast<size_t>(kind);
  return k < table.size() ? table[k].name : "?";
}

std::string layerKindNames() {
  std::string names;
  for (const auto& row : layerKindTable())
    names += (names.empty() ? "" : ", ") + std::string(row.name);
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

std::string_view toString(PositionBias bias) {
  switch (bias) {
    case PositionBias::kNone:
      return "none";
    case PositionBias::kTable:
      return "table";
    case PositionBias::kMlp:
      return "mlp";
  }
  return "?";
}

namespace {
// A dimension of n positions padded to whole windows of w.
int64_t paddedTo(int64_t n, int64_t w) {
  return (n + w - 1) / w * w;
}
}  // namespace

int64_t Layer::attentionPositions() const {
  const int w = spec.window;
  if (w <= 0)
    return int64_t{inShape.h} * inShape.w;  // a grid tiles H x W whole (checkWindows)
  return paddedTo(inShape.h, w) * paddedTo(inShape.w, w);
}

int64_t Layer::attentionSpan() const {
  const int side = partitionSide();
  return side <= 0 ? int64_t{inShape.h} * inShape.w : int64_t{side} * side;
}

// torchvision's shifted_window_attention: no shift along a dimension whose
// padded size one window covers.
int Layer::shiftH() const {
  return spec.window > 0 && paddedTo(inShape.h, spec.window) > spec.window ? spec.shift : 0;
}

int Layer::shiftW() const {
  return spec.window > 0 && paddedTo(inShape.w, spec.window) > spec.window ? spec.shift : 0;
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

}  // namespace strata

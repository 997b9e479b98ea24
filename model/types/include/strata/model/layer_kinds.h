// The layer kinds, one row each: a kind's config name, the YAML keys its
// layers take besides `name` and `kind`, and its rule for the shape,
// parameters and FLOPs (deriveLayer dispatches on it).
//
// Adding a kind: its LayerKind value (network.h), its row and derive rule
// (layer_kinds.cpp), its YAML parsing (config/src/network_loader.cpp), its
// lowering (cost/src/lowering.cpp) and the executor's implementation.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "strata/model/network.h"

namespace strata {

// One deriveLayer call as a kind's rule sees it. The rule sets the output
// shape (`out`, the input's by default) and the layer's parameters and
// FLOPs, or the multiply-accumulates (`macs`) of a GEMM-shaped layer, from
// which deriveLayer sets the FLOPs of all three passes. deriveLayer then sets
// the elements each phase reads and writes, unless the rule did (`done`).
struct LayerDerivation {
  Layer& layer;
  const std::vector<Shape>& inputShapes;
  const Shape in;      // the (first) input's shape
  const LayerSpec& s;  // layer.spec
  const std::string& file;
  const std::string& key;  // "layers[i]"
  double nIn = 0;          // elements of the (first) input
  Shape out;
  int64_t macs = 0;  // multiply-accumulates per example of the fwd pass
  bool done = false;

  // The product of `factors`, checked: a ConfigError naming the layer when
  // it exceeds 2^53, the largest count the cost model computes with exactly.
  int64_t count(std::initializer_list<int64_t> factors, const char* what) const;
  // Sets the FLOPs of `macs`, the output shape and the elements of each
  // phase (what deriveLayer does after a rule that leaves `done` false).
  void finish();
};

// What a layer's backward reads of its forward besides Layer::savedElems,
// so what training keeps (activation memory): its input (a weight
// gradient's operand, or the argument of its derivative), its output (relu,
// softmax: the derivative from the result), both (lrn), nothing (add), or a
// 1-byte mask per element (dropout). As PyTorch's autograd saves them, and
// as Korthikanti et al. 2023 (section 4.1) count a transformer layer's
// 34 s b h + 5 a s^2 b bytes.
enum class BackwardReads : uint8_t { kNothing, kInput, kOutput, kInputAndOutput, kMask };

struct LayerKindRow {
  LayerKind kind;
  std::string_view name;  // the config name ("conv", "batchnorm")
  // The YAML keys a layer of this kind takes besides `name` and `kind`, in
  // the order an unknown-key message lists them.
  std::span<const std::string_view> keys;
  void (*derive)(LayerDerivation&);
  BackwardReads reads;
};

// The kinds of vision networks (torchvision's zoo): concat, mul, slice,
// shuffle, scale, the vision transformer's class_token, pos_embedding and
// token, and the pointwise activations sigmoid, silu, relu6,
// hardsigmoid and hardswish,
// which a compute backend runs when it says so (exec::Backend::
// runsVisionLayers).
bool isVisionKind(LayerKind kind);
// The five activations among them, which act on any slice of channels.
bool isVisionActivation(LayerKind kind);

// One row per kind, in LayerKind order (row k is kind k).
std::span<const LayerKindRow> layerKindTable();
const LayerKindRow& layerKindRow(LayerKind kind);
// The kind of a config name; nullopt when no kind has it.
std::optional<LayerKind> parseLayerKind(std::string_view name);

// Per example, what a network's forward leaves for its backward
// (BackwardReads): the input's elements when a first layer's backward reads
// it; per layer, the elements of its output when its own backward or a
// consumer's reads it, plus its savedElems, and the bytes of its masks
// (dropout, whatever the element type).
struct ActivationsKept {
  double input = 0;
  std::vector<double> elems;
  std::vector<double> maskBytes;
};
ActivationsKept activationsKept(const Network& network);

}  // namespace strata

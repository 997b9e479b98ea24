// Networks: layers, shapes, and per-example costs derived from the shapes.
//
// Every cost here is per example and independent of hardware: parameters,
// FLOPs of fwd / bwd_data / bwd_weights, and the elements each phase reads and
// writes. The formulas are in docs/cost-model.md; the cost model turns them
// into time on a device.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace strata {

enum class LayerKind { kConv, kPool, kFc, kRnn, kRelu, kLrn, kDropout, kBatchNorm, kAdd, kSoftmax };

// Lower-case config name of a kind ("conv", "batchnorm").
std::string_view toString(LayerKind kind);

// The phases of one layer in one training step (DESIGN.md vocabulary).
enum class Phase { kFwd, kBwdData, kBwdWeights, kUpdate };
std::string_view toString(Phase phase);

enum class PoolMode { kMax, kAvg };
enum class RnnCell { kVanilla, kGru, kLstm };

// Channels x height x width of one example's tensor.
struct Shape {
  int c = 0;
  int h = 0;
  int w = 0;
  int64_t elements() const { return int64_t{c} * h * w; }
  bool operator==(const Shape&) const = default;
};

// The kind-specific settings of a layer; only the fields of its kind are used.
struct LayerSpec {
  // conv / pool
  int filters = 0;
  int kernelH = 0;
  int kernelW = 0;
  int stride = 1;
  int pad = 0;
  int groups = 1;
  PoolMode poolMode = PoolMode::kMax;
  bool global = false;
  // conv / fc / rnn
  bool bias = true;
  // fc
  int outputs = 0;
  bool flatten = true;
  // rnn
  int hidden = 0;
  RnnCell cell = RnnCell::kVanilla;
  // lrn / dropout
  int lrnSize = 5;
  double dropoutRate = 0.5;
};

// One layer with its derived per-example costs.
struct Layer {
  std::string name;
  LayerKind kind = LayerKind::kRelu;
  LayerSpec spec;
  std::vector<int> inputs;  // indices of the layers read; -1 is the network input
  int configLine = 0;       // line of the layer in its config file

  Shape inShape;   // shape of the (first) input
  Shape outShape;  // shape of the output

  int64_t params = 0;          // weights + biases (trainable)
  double fwdFlops = 0;         // per example
  double bwdDataFlops = 0;     // per example
  double bwdWeightsFlops = 0;  // per example
  // Elements read + written per example by each phase, weights excluded.
  double fwdElems = 0;
  double bwdDataElems = 0;
  double bwdWeightsElems = 0;

  bool readsNetworkInput() const;
  bool hasWeights() const { return params > 0; }
};

// A network: input shape, layers in execution order, and the split point of
// the owt-* strategies (layers from `modelParallelFrom` on run model-parallel).
struct Network {
  std::string name;
  std::string description;
  std::string sourceFile;
  Shape input;
  std::vector<Layer> layers;
  int modelParallelFrom = -1;  // -1: no model-parallel part (no fc layer)

  int64_t totalParams() const;
  double totalFwdFlops() const;
  // Forward + backward (both parts) FLOPs per example.
  double totalTrainFlops() const;
  // Sums over layers of one kind (for the conv/FC split).
  int64_t paramsOfKind(LayerKind kind) const;
  double fwdFlopsOfKind(LayerKind kind) const;
  // Index of a layer by name, -1 if absent.
  int find(std::string_view layerName) const;
};

// Computes shapes and costs of `layer` given its input shapes; throws
// ConfigError (file, layer's line, "layers[i].key") when the shape does not fit.
void deriveLayer(Layer& layer, const std::vector<Shape>& inputShapes, const std::string& file,
                 int index);

// Loads a network YAML file (schema in docs/configs.md).
Network loadNetwork(const std::string& path);

}  // namespace strata

// Inside Model (strata/exec/nn/model.h): what its two files share, the state
// of one layer and the fc input width. model.cpp builds a Model (shapes,
// readers, slices, parameters) and serves its buffers, parameters and loss;
// model_phases.cpp runs its layers' phases (forward, backward, update).
// Internal to executor/nn.
#pragma once

#include <vector>

#include "strata/exec/nn/model.h"
#include "strata/model/tensor_parallel.h"

namespace strata::nn {

// What a layer is on this worker: its part, and who reads its output. The
// same in every activation slot.
struct LayerLayout {
  NeuronRange slice;    // output channels held: the slice, or [0, channels)
  bool sliced = false;  // model-parallel fc: reads exchangeIn
  // Tensor parallelism: the layer's part, whether this worker adds its bias
  // (a row layer's, or the position table: worker 0 only), and the share of
  // an attention or embedding layer it runs.
  TpRole tpRole = TpRole::kReplicated;
  bool addsBias = true;
  AttentionDesc attention;
  EmbeddingDesc embedding;
  int firstHead = 0, firstKvHead = 0;  // attention: the first held
  bool gated = false;                  // a column fc before swiglu: a share of each half
  // Sequence parallelism (Model::gathersInput): `out` holds positions
  // [firstPosition, firstPosition + localPositions) of each example's
  // (localPositions 0: every position); the layer reads `gathered` and
  // writes `gatheredGrad`, or writes `full` and reads `fullGrad`.
  int firstPosition = 0, localPositions = 0;
  bool gathersInput = false, scattersOutput = false;
  int readers = 0;  // layers reading `out` locally (not through an exchange)
  int exchangeReaders = 0;
  int firstReader = -1;
};

// A layer's layout and the tensors of one micro-batch: what its forward
// writes and its backward reads.
struct Model::LayerState : LayerLayout {
  Tensor out;
  Tensor outGrad;
  Tensor exchangeIn;
  Tensor exchangeInGrad;
  Tensor lrnScale;
  Buffer<int32_t> argmax;  // max pooling: chosen input per output
  // attention: kept from forward (QKV, probabilities, context) and the
  // gradient its bwd_weights leaves for its bwd_data (dQKV)
  Tensor qkv;
  Tensor context;
  Tensor dqkv;
  Buffer<float> probs;
  Tensor gathered, gatheredGrad, full, fullGrad;

  // No tensor allocated: each in `memory`, empty.
  LayerState(const LayerLayout& layout, Memory& memory)
      : LayerLayout(layout),
        out(memory),
        outGrad(memory),
        exchangeIn(memory),
        exchangeInGrad(memory),
        lrnScale(memory),
        argmax(memory),
        qkv(memory),
        context(memory),
        dqkv(memory),
        probs(memory),
        gathered(memory),
        gatheredGrad(memory),
        full(memory),
        fullGrad(memory) {}
};

// One activation slot (Model::setActivationSlots): every layer's state and
// the network's input, its gradient, the labels and the softmax statistics.
struct Model::Activations {
  std::vector<LayerState> layers;
  Tensor input, inputGrad;
  Buffer<int32_t> labels;
  Buffer<float> softmaxStats;

  // Layers laid out as `like`'s (default layouts when null), `count` of them.
  Activations(const Activations* like, size_t count, Memory& memory)
      : input(memory), inputGrad(memory), labels(memory), softmaxStats(memory) {
    layers.reserve(count);
    for (size_t l = 0; l < count; ++l)
      layers.emplace_back(like ? static_cast<const LayerLayout&>(like->layers[l]) : LayerLayout{},
                          memory);
  }
};

// The inputs of an fc layer: its input flattened, or its channels per position.
inline int fcInFeatures(const Layer& l) {
  return l.spec.flatten ? static_cast<int>(l.inShape.elements()) : l.inShape.c;
}

}  // namespace strata::nn

// Model (strata/exec/nn/model.h): building one (shapes, who reads what,
// model-parallel slices, parameters and their initial values), its buffers,
// parameters and loss. The layers' phases are model_phases.cpp.
#include "strata/exec/nn/model.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "model_state.h"
#include "strata/exec/nn/cpu_backend.h"
#include "strata/kernels/counter_rng.h"
#include "strata/model/error.h"
#include "strata/model/layer_kinds.h"

namespace strata::nn {

namespace {

[[noreturn]] void unsupported(const Network& net, int index, const std::string& message) {
  const Layer& layer = net.layers[static_cast<size_t>(index)];
  throw ConfigError(net.sourceFile, layer.configLine, fmt::format("layers[{}]", index),
                    fmt::format("layer '{}' ({}): {}", layer.name, toString(layer.kind), message));
}

// Layers that act on whatever slice of channels they read: a model-parallel
// part may hold them after its fc layers.
bool isElementwise(LayerKind kind) {
  return kind == LayerKind::kRelu || kind == LayerKind::kDropout || kind == LayerKind::kSoftmax ||
         isVisionActivation(kind);
}

bool isTransformerKind(const Layer& l) {
  return l.kind == LayerKind::kEmbedding || l.kind == LayerKind::kAttention ||
         l.kind == LayerKind::kLayerNorm || l.kind == LayerKind::kGelu || l.spec.tiedTo >= 0 ||
         l.kind == LayerKind::kRmsNorm || l.kind == LayerKind::kSwiglu;
}

// Llama's layers (Backend::runsLlamaLayers): rmsnorm, swiglu, and attention
// with grouped keys and values or rotary positions.
bool isLlamaKind(const Layer& l) {
  return l.kind == LayerKind::kRmsNorm || l.kind == LayerKind::kSwiglu ||
         (l.kind == LayerKind::kAttention && (l.kvHeads() != l.spec.heads || l.spec.rotary));
}

}  // namespace

NeuronRange evenSlice(int n, int parts, int index) {
  STRATA_ENFORCE_OP(parts, >, 0);
  STRATA_ENFORCE(index >= 0 && index < parts);
  const auto at = [&](int i) { return static_cast<int>(int64_t{i} * n / parts); };
  return {at(index), at(index + 1)};
}

std::vector<NeuronRange> modelParallelSlices(const Network& network, int workers, int rank) {
  if (network.modelParallelFrom < 0)
    throw UserError(fmt::format(
        "network '{}' has no model-parallel part ({})", network.name,
        network.noModelParallelWhy.empty() ? "no fc layer" : network.noModelParallelWhy));
  STRATA_ENFORCE(workers > 0 && rank >= 0 && rank < workers);
  std::vector<NeuronRange> slices(network.layers.size());
  for (size_t l = static_cast<size_t>(network.modelParallelFrom); l < network.layers.size(); ++l) {
    const Layer& layer = network.layers[l];
    if (layer.kind == LayerKind::kFc) {
      if (layer.outShape.c < workers)
        unsupported(
            network, static_cast<int>(l),
            fmt::format("{} outputs cannot be split over {} workers", layer.outShape.c, workers));
      slices[l] = evenSlice(layer.outShape.c, workers, rank);
    } else if (!isElementwise(layer.kind)) {
      unsupported(network, static_cast<int>(l),
                  "the model-parallel part may hold only fc, dropout, softmax and pointwise "
                  "activation (relu, sigmoid, silu, relu6, hardsigmoid, hardswish, tanh) layers");
    }
  }
  return slices;
}

Model::Model(const Network& network, ModelOptions options)
    : network_(network), options_(std::move(options)) {
  if (options_.backend) {
    backend_ = options_.backend;
  } else {
    ownedBackend_ = std::make_unique<CpuBackend>();
    backend_ = ownedBackend_.get();
  }
  // Every buffer a kernel touches lives in the backend's memory.
  Memory& memory = backend_->memory();
  params_ = Buffer<float>(memory);
  grads_ = Buffer<float>(memory);
  momentum_ = Buffer<float>(memory);
  adamM_ = Buffer<float>(memory);
  adamV_ = Buffer<float>(memory);
  const int count = layerCount();
  if (!options_.slices.empty() && static_cast<int>(options_.slices.size()) != count)
    throw OptionError("slices", fmt::format("{} entries for a network of {} layers",
                                            options_.slices.size(), count));
  slots_.push_back(std::make_unique<Activations>(nullptr, static_cast<size_t>(count), memory));
  act_ = slots_.front().get();
  blocks_.resize(static_cast<size_t>(count));
  updates_.assign(static_cast<size_t>(count), 0);

  // Tensor parallelism: each layer's part in the group's split.
  const TensorParallelRank tp = options_.tensorParallel;
  if (tp.size < 1 || tp.rank < 0 || tp.rank >= tp.size)
    throw OptionError("tensorParallel",
                      fmt::format("rank {} of a group of {} workers", tp.rank, tp.size));
  TpLayout layout;
  if (tp.size > 1) {
    if (!options_.slices.empty())
      throw OptionError("tensorParallel",
                        "a Model is model-parallel (slices) or tensor-parallel, not both");
    if (!backend_->runsTensorParallelLayers())
      throw UserError(fmt::format(
          "the {} backend does not run a tensor-parallel worker's share of layers yet (the cpu "
          "backend does)",
          backend_->name()));
    if (const auto why = tensorParallelObstacle(network_, tp.size, tp.sequenceParallel);
        !why.empty())
      throw UserError(why);
    layout = tensorParallelLayout(network_, tp.size, tp.sequenceParallel);
  }

  // Shapes of what each layer holds, and who reads what.
  for (int l = 0; l < count; ++l) {
    const Layer& layer = network_.layers[static_cast<size_t>(l)];
    LayerState& st = act_->layers[static_cast<size_t>(l)];
    if (layer.kind == LayerKind::kRnn)
      unsupported(network_, l, "rnn layers are not supported by the executor's nn layer");
    if (isTransformerKind(layer) && !backend_->runsTransformerLayers())
      unsupported(network_, l,
                  fmt::format("the {} backend does not run transformer layers yet (the cpu "
                              "backend does)",
                              backend_->name()));
    if (isLlamaKind(layer) && !backend_->runsLlamaLayers())
      unsupported(network_, l,
                  fmt::format("the {} backend does not run Llama's layers yet (rmsnorm, swiglu, "
                              "grouped-query or rotary attention); the cpu backend does",
                              backend_->name()));
    if (isVisionKind(layer.kind) && !backend_->runsVisionLayers())
      unsupported(
          network_, l,
          fmt::format("the {} backend does not run vision networks' concat, mul, slice, "
                      "shuffle, scale, class_token, pos_embedding, token, sigmoid, silu, "
                      "relu6, hardsigmoid, hardswish or tanh layers yet; the cpu backend does",
                      backend_->name()));
    // Swin's layers (docs/networks.md): priced by the model and the
    // simulator, not run yet.
    if (layer.kind == LayerKind::kSpaceToDepth)
      unsupported(network_, l,
                  "the executor does not run space_to_depth (Swin's patch merging) yet; the "
                  "model and the simulator price it");
    if (layer.kind == LayerKind::kAttention && (layer.partitionSide() > 0 || layer.spec.cosine ||
                                                layer.spec.positionBias != PositionBias::kNone))
      unsupported(network_, l,
                  "the executor's attention is global: it runs no windows, grids, relative "
                  "position bias or cosine attention (Swin, MaxViT) yet; the model and the "
                  "simulator price them");
    if (layer.kind == LayerKind::kAttention && layer.spec.attentionDropout > 0)
      unsupported(network_, l,
                  "the executor's attention runs no attention dropout yet (leave "
                  "attention_dropout out to run it)");
    if (layer.spec.tiedTo >= 0 &&
        (layer.kind != LayerKind::kFc || layer.spec.flatten ||
         network_.layers[static_cast<size_t>(layer.spec.tiedTo)].kind != LayerKind::kEmbedding ||
         layer.spec.tiedTo >= l))
      unsupported(network_, l, "only a per-position fc can share an earlier embedding's table");
    if (layer.kind == LayerKind::kDropout &&
        !(layer.spec.dropoutRate >= 0 && layer.spec.dropoutRate < 1))
      unsupported(network_, l,
                  fmt::format("dropout rate {} is not in [0, 1)", layer.spec.dropoutRate));
    const NeuronRange requested =
        options_.slices.empty() ? NeuronRange{} : options_.slices[static_cast<size_t>(l)];
    const NeuronRange whole{0, layer.outShape.c};
    const auto inputSlice = [&](int p) { return act_->layers[static_cast<size_t>(p)].slice; };
    const auto inputWhole = [&](int p) {
      return inputSlice(p) == NeuronRange{0, network_.layers[static_cast<size_t>(p)].outShape.c};
    };
    shareOf(l, tp, tp.size > 1 ? layout.layers[static_cast<size_t>(l)].role : TpRole::kReplicated);
    if (st.tpRole == TpRole::kColumn) {
      st.slice = evenSlice(layer.outShape.c, tp.size, tp.rank);
    } else if (st.tpRole == TpRole::kOutput) {
      const VocabRows v = vocabRows(layer.outShape.c, tp.size, tp.rank);
      st.slice = {v.begin, v.end};
    } else if (st.tpRole == TpRole::kBetween || st.tpRole == TpRole::kLoss) {
      if (layer.kind == LayerKind::kSwiglu) {
        // A gated MLP: the fc before holds its share of each half, gate
        // and value ([gate share | value share], as swiglu reads them), and
        // swiglu's output is that share of the whole's.
        act_->layers[static_cast<size_t>(layer.inputs[0])].gated = true;
        st.slice = evenSlice(layer.outShape.c, tp.size, tp.rank);
      } else {
        st.slice = inputSlice(layer.inputs[0]);
      }
    } else if (st.tpRole == TpRole::kRow) {
      st.slice = whole;  // reads the column fc's share of its inputs
    } else if (!requested.empty()) {
      if (layer.kind != LayerKind::kFc || layer.spec.tiedTo >= 0)
        unsupported(network_, l,
                    "only fc layers that do not share an embedding's table can hold a slice of "
                    "their outputs");
      if (requested.begin < 0 || requested.end > layer.outShape.c)
        unsupported(network_, l,
                    fmt::format("slice [{}, {}) is outside its {} outputs", requested.begin,
                                requested.end, layer.outShape.c));
      st.sliced = true;
      st.slice = requested;
    } else if (isElementwise(layer.kind) && layer.inputs[0] >= 0) {
      // Activations, dropout and softmax act on whatever slice they read.
      st.slice = inputSlice(layer.inputs[0]);
    } else {
      st.slice = whole;
      for (int p : layer.inputs)
        if (p >= 0 && !inputWhole(p))
          unsupported(network_, l,
                      fmt::format("reads a model-parallel slice of layer '{}'; only a sliced fc, "
                                  "dropout, softmax or pointwise activation can",
                                  network_.layers[static_cast<size_t>(p)].name));
    }
    for (int p : layer.inputs) {
      if (st.sliced) {
        if (p >= 0)
          ++act_->layers[static_cast<size_t>(p)].exchangeReaders;
        continue;
      }
      int& readers = p < 0 ? inputReaders_ : act_->layers[static_cast<size_t>(p)].readers;
      int& first = p < 0 ? inputFirstReader_ : act_->layers[static_cast<size_t>(p)].firstReader;
      ++readers;
      if (first < 0)
        first = l;
    }
  }
  // The caller writes the output gradient of a layer read through an exchange;
  // a second, local reader would need the two to be summed, which no strategy
  // asks for.
  for (int l = 0; l < count; ++l) {
    const LayerState& st = act_->layers[static_cast<size_t>(l)];
    if (st.exchangeReaders > 0 && st.readers > 0)
      unsupported(network_, l, "is read both by a model-parallel fc and by another layer");
  }
  // The group sums a split layer's partial input gradient where it lands:
  // another reader's gradient there would be summed t times.
  for (int l = 0; l < count && tp.size > 1; ++l) {
    const LayerState& st = act_->layers[static_cast<size_t>(l)];
    const int p = network_.layers[static_cast<size_t>(l)].inputs[0];
    const bool sumsInputGradient = st.tpRole == TpRole::kAttention ||
                                   st.tpRole == TpRole::kColumn || st.tpRole == TpRole::kOutput;
    if (sumsInputGradient && p >= 0 && act_->layers[static_cast<size_t>(p)].readers != 1)
      unsupported(network_, l,
                  fmt::format("splits over a tensor-parallel group, and its input '{}' is read "
                              "by other layers too (the group's sum of its input gradient would "
                              "count theirs {} times)",
                              network_.layers[static_cast<size_t>(p)].name, tp.size));
  }

  if (tp.size > 1 && tp.sequenceParallel)
    splitPositions(tp);

  // Parameters: one array, per layer weights then bias.
  int64_t offset = 0;
  for (int l = 0; l < count; ++l) {
    const Layer& layer = network_.layers[static_cast<size_t>(l)];
    const LayerState& st = act_->layers[static_cast<size_t>(l)];
    ParamBlock& b = blocks_[static_cast<size_t>(l)];
    b.offset = offset;
    switch (layer.kind) {
      case LayerKind::kConv:
        b.weights = int64_t{layer.spec.filters} * (layer.inShape.c / layer.spec.groups) *
                    layer.spec.kernelH * layer.spec.kernelW;
        b.bias = layer.spec.bias ? layer.spec.filters : 0;
        break;
      case LayerKind::kFc:
        // A tied fc's weights are its embedding's token table.
        b.weights = layer.spec.tiedTo >= 0 ? 0 : int64_t{st.slice.size()} * fcInputs(l);
        b.bias = layer.spec.bias ? st.slice.size() : 0;
        break;
      case LayerKind::kBatchNorm:
      case LayerKind::kLayerNorm:
        b.weights = layer.inShape.c;  // gamma / gain
        b.bias = layer.inShape.c;     // shift / bias
        break;
      case LayerKind::kEmbedding:
        // The token table, then the position table.
        b.weights = (int64_t{st.embedding.rows()} + layer.spec.positions) * layer.spec.outputs;
        break;
      case LayerKind::kAttention: {
        // Wqkv (rows x d: 3d, or d + 2 kv with grouped keys and values), Wo
        // (d x d); biases bqkv (rows), bo (d). A tensor-parallel share: its
        // heads' rows of Wqkv, a + 2 kv, and Wo's d x a.
        const AttentionDesc& a = st.attention;
        b.weights = (int64_t{a.qkvFeatures()} + a.inner()) * layer.inShape.c;
        b.bias = layer.spec.bias      ? a.qkvFeatures() + layer.inShape.c
                 : layer.spec.qkvBias ? a.qkvFeatures()
                                      : 0;
        break;
      }
      case LayerKind::kRmsNorm:
      case LayerKind::kScale:
        b.weights = layer.inShape.c;  // gain; gamma
        break;
      case LayerKind::kClassToken:
        // The tokens, C x tokens (channel-major: each channel's tokens in a
        // row, as the output's planes hold them).
        b.weights = int64_t{layer.inShape.c} * layer.spec.tokens;
        break;
      case LayerKind::kPosEmbedding:
        b.weights = layer.inShape.elements();  // one example's shape, C x H x W
        break;
      default:
        break;
    }
    if (tp.size > 1) {
      // The share tensor_parallel.h prices (the vocabulary's last rows may
      // be fewer than the ceil(V / t) it prices).
      const double priced = layout.layers[static_cast<size_t>(l)].params;
      if (st.tpRole == TpRole::kEmbedding || st.tpRole == TpRole::kOutput)
        STRATA_ENFORCE(double(b.size()) <= priced + 0.5);
      else
        STRATA_ENFORCE_OP(b.size(), ==, std::llround(priced));
    } else if (!st.sliced) {
      STRATA_ENFORCE_OP(b.size(), ==, layer.params);
    }
    offset += b.size();
  }
  firstGradientWriter_.resize(static_cast<size_t>(count));
  for (int l = 0; l < count; ++l)
    firstGradientWriter_[static_cast<size_t>(l)] = l;
  for (int l = 0; l < count; ++l) {
    int& first = firstGradientWriter_[static_cast<size_t>(gradientOwner(network_, l))];
    first = std::max(first, l);
  }
  params_.resize(static_cast<size_t>(offset));  // zero-filled
  grads_.resize(static_cast<size_t>(offset));

  // Made on the host layer by layer and uploaded (the parameters may be
  // device memory).
  std::vector<float> w;
  for (int l = 0; l < count && options_.initializeParameters; ++l) {
    const Layer& layer = network_.layers[static_cast<size_t>(l)];
    const LayerState& st = act_->layers[static_cast<size_t>(l)];
    const ParamBlock& b = blocks_[static_cast<size_t>(l)];
    w.assign(static_cast<size_t>(b.weights), 0.0f);
    const auto store = [&] {
      upload(memory, params_.data() + b.offset, std::span<const float>(w));
    };
    if (layer.kind == LayerKind::kBatchNorm || layer.kind == LayerKind::kLayerNorm ||
        layer.kind == LayerKind::kRmsNorm || layer.kind == LayerKind::kScale) {
      std::fill(w.begin(), w.end(), 1.0f);
      store();
      continue;
    }
    // torchvision's ViT: the class token starts at zero (the block's zero
    // fill), the position table normal with std 0.02.
    if (layer.kind == LayerKind::kPosEmbedding) {
      for (int64_t e = 0; e < b.weights; ++e)
        w[static_cast<size_t>(e)] =
            0.02f * kernels::normalFloat(kernels::hashOf(options_.seed, static_cast<uint64_t>(l),
                                                         static_cast<uint64_t>(e)));
      store();
      continue;
    }
    if (layer.kind != LayerKind::kConv && layer.kind != LayerKind::kFc &&
        layer.kind != LayerKind::kAttention && layer.kind != LayerKind::kEmbedding)
      continue;
    // Attention: every projection reads d features. Embedding: variance 1/d,
    // so that a tied fc's logits over a normalised input have variance ~1.
    const int64_t fanIn =
        layer.kind == LayerKind::kConv
            ? int64_t{layer.inShape.c / layer.spec.groups} * layer.spec.kernelH * layer.spec.kernelW
        : layer.kind == LayerKind::kAttention ? int64_t{layer.inShape.c}
        : layer.kind == LayerKind::kEmbedding ? int64_t{layer.spec.outputs}
                                              : fcInFeatures(layer);
    const bool feedsRelu =
        st.readers == 1 &&
        network_.layers[static_cast<size_t>(st.firstReader)].kind == LayerKind::kRelu;
    // Uniform on [-a, a] has variance a^2 / 3.
    const double variance = (feedsRelu ? 2.0 : 1.0) / double(fanIn);
    const auto a = static_cast<float>(std::sqrt(3.0 * variance));
    // Element e of a slice or share is element wholeElement(l, e) of the
    // whole layer, so they draw the whole layer's values.
    for (int64_t e = 0; e < b.weights; ++e) {
      const uint64_t bits = kernels::hashOf(options_.seed, static_cast<uint64_t>(l),
                                            static_cast<uint64_t>(wholeElement(l, e)));
      w[static_cast<size_t>(e)] = (2.0f * kernels::uniformFloat(bits) - 1.0f) * a;
    }
    store();
  }
}

void Model::shareOf(int l, TensorParallelRank tp, TpRole role) {
  const Layer& layer = network_.layers[static_cast<size_t>(l)];
  LayerState& st = act_->layers[static_cast<size_t>(l)];
  st.tpRole = role;
  st.addsBias = tp.rank == 0 || (role != TpRole::kAttention && role != TpRole::kRow);
  if (layer.kind == LayerKind::kAttention) {
    AttentionDesc& a = st.attention;
    a = AttentionDesc{layer.inShape.c,
                      layer.inShape.h * layer.inShape.w,
                      layer.spec.heads,
                      layer.spec.causal,
                      layer.kvHeads(),
                      layer.spec.rotary,
                      static_cast<float>(layer.spec.rotaryBase)};
    a.hasOutputBias = !layer.spec.qkvBias;
    a.rotaryDims = layer.spec.rotaryDims;
    if (role == TpRole::kAttention) {
      // Heads [r H/t, (r+1) H/t) and their key/value heads (whole groups:
      // tensorParallelObstacle checked both divide).
      const int dh = a.headFeatures();
      a.heads = layer.spec.heads / tp.size;
      a.kvHeads = layer.kvHeads() / tp.size;
      a.innerFeatures = a.heads * dh;
      a.outputBias = st.addsBias;
      st.firstHead = tp.rank * a.heads;
      st.firstKvHead = tp.rank * a.kvHeads;
    }
  }
  if (layer.kind == LayerKind::kEmbedding) {
    EmbeddingDesc& e = st.embedding;
    e = EmbeddingDesc{layer.spec.vocab, layer.spec.outputs, layer.spec.positions > 0};
    if (role == TpRole::kEmbedding) {
      const VocabRows v = vocabRows(layer.spec.vocab, tp.size, tp.rank);
      e.firstToken = v.begin;
      e.tokens = v.end - v.begin;
      e.addPositions = tp.rank == 0;
    }
  }
  // A tied output fc reads its embedding's rows: the same ones.
  if (role == TpRole::kOutput && layer.spec.tiedTo >= 0) {
    const EmbeddingDesc& e = act_->layers[static_cast<size_t>(layer.spec.tiedTo)].embedding;
    const VocabRows v = vocabRows(layer.outShape.c, tp.size, tp.rank);
    STRATA_ENFORCE(e.firstToken == v.begin && e.rows() == v.end - v.begin);
  }
}

void Model::splitPositions(TensorParallelRank tp) {
  const int count = layerCount();
  for (int l = 0; l < count; ++l) {
    const Layer& layer = network_.layers[static_cast<size_t>(l)];
    LayerState& st = act_->layers[static_cast<size_t>(l)];
    const TpRole role = st.tpRole;
    st.gathersInput =
        role == TpRole::kAttention || role == TpRole::kColumn || role == TpRole::kOutput;
    st.scattersOutput =
        role == TpRole::kAttention || role == TpRole::kRow || role == TpRole::kEmbedding;
    if (role == TpRole::kReplicated || st.scattersOutput) {
      // tensorParallelObstacle checked that t divides the positions.
      const int positions = layer.outShape.h * layer.outShape.w;
      st.localPositions = positions / tp.size;
      st.firstPosition = tp.rank * st.localPositions;
    }
  }
  // Each layer reads what its part expects: a replicated layer, or one that
  // all-gathers its input, this worker's positions; the other split layers
  // (an MLP's activation and second fc, the loss) every position of a share.
  for (int l = 0; l < count; ++l) {
    const LayerState& st = act_->layers[static_cast<size_t>(l)];
    const bool readsLocal = st.tpRole == TpRole::kReplicated || st.gathersInput;
    for (int p : network_.layers[static_cast<size_t>(l)].inputs) {
      if (st.tpRole == TpRole::kEmbedding)
        continue;  // token ids, whole
      const bool local = p >= 0 && act_->layers[static_cast<size_t>(p)].localPositions > 0;
      if (local != readsLocal)
        unsupported(network_, l,
                    fmt::format("sequence parallelism: reads {} ({}), and its part of the split "
                                "needs {}",
                                p < 0 ? std::string("the network input")
                                      : fmt::format("layer '{}'",
                                                    network_.layers[static_cast<size_t>(p)].name),
                                local ? "a worker's positions" : "every position",
                                readsLocal ? "a worker's positions" : "every position"));
    }
  }
}

int Model::fcInputs(int layer) const {
  const Layer& spec = network_.layers[static_cast<size_t>(layer)];
  if (act_->layers[static_cast<size_t>(layer)].tpRole == TpRole::kRow)
    return act_->layers[static_cast<size_t>(spec.inputs[0])].slice.size();
  return fcInFeatures(spec);
}

int64_t Model::wholeElement(int layer, int64_t e) const {
  const Layer& spec = network_.layers[static_cast<size_t>(layer)];
  const LayerState& st = act_->layers[static_cast<size_t>(layer)];
  const ParamBlock& b = blocks_[static_cast<size_t>(layer)];
  const bool bias = e >= b.weights;
  const int64_t j = e - b.weights;  // the bias element, when `bias`
  switch (spec.kind) {
    case LayerKind::kFc: {
      // Rows of the weight matrix are outputs, a slice of them contiguous; a
      // row fc holds columns [begin, end) of every row, and the whole bias.
      // (A tied fc's weights are its embedding's: its block is its bias.)
      const int64_t whole =
          spec.spec.tiedTo >= 0 ? 0 : int64_t{spec.outShape.c} * fcInFeatures(spec);
      if (st.tpRole == TpRole::kRow) {
        if (bias)
          return whole + j;
        const int in = fcInputs(layer);
        const int begin = act_->layers[static_cast<size_t>(spec.inputs[0])].slice.begin;
        return (e / in) * fcInFeatures(spec) + begin + e % in;
      }
      // Row (output) r of the slice; before swiglu the first half of the
      // slice is the gate's share, the second the value's.
      const auto wholeRow = [&](int64_t r) -> int64_t {
        if (!st.gated)
          return st.slice.begin + r;
        const int64_t share = st.slice.size() / 2, first = st.slice.begin / 2;
        return r < share ? first + r : spec.outShape.c / 2 + first + (r - share);
      };
      const int64_t in = fcInFeatures(spec);
      return bias ? whole + wholeRow(j) : wholeRow(e / in) * in + e % in;
    }
    case LayerKind::kEmbedding: {
      const int64_t features = spec.spec.outputs;
      const int64_t table = int64_t{st.embedding.rows()} * features;
      return e < table ? int64_t{st.embedding.firstToken} * features + e
                       : int64_t{spec.spec.vocab} * features + (e - table);
    }
    case LayerKind::kAttention: {
      const AttentionDesc& a = st.attention;
      const int d = a.features, dh = a.headFeatures(), q = a.inner(), kv = a.keyValueFeatures();
      const int64_t kvWhole = int64_t{spec.kvHeads()} * dh, rowsWhole = d + 2 * kvWhole;
      // Row r of this worker's Wqkv (or bqkv): its heads' Q rows, then their
      // K rows, then V's.
      const auto wholeRow = [&](int64_t r) {
        return r < q        ? int64_t{st.firstHead} * dh + r
               : r < q + kv ? d + int64_t{st.firstKvHead} * dh + (r - q)
                            : d + kvWhole + int64_t{st.firstKvHead} * dh + (r - q - kv);
      };
      const int64_t held = int64_t{a.qkvFeatures()} * d;
      const int64_t weightsWhole = (rowsWhole + d) * d;
      if (bias)  // bqkv's rows, then the whole bo
        return j < a.qkvFeatures() ? weightsWhole + wholeRow(j)
                                   : weightsWhole + rowsWhole + (j - a.qkvFeatures());
      if (e < held)
        return wholeRow(e / d) * d + e % d;
      // Wo (d rows of d), columns [firstHead dh, + a) of each row.
      const int64_t rest = e - held;
      return rowsWhole * d + (rest / q) * d + int64_t{st.firstHead} * dh + rest % q;
    }
    default:
      return e;
  }
}

int64_t Model::wholeParameterIndex(int64_t i) const {
  STRATA_ENFORCE(i >= 0 && i < parameterCount());
  // The block holding i: the last one starting at or before it (empty
  // blocks share their offset with the next).
  int l = 0;
  for (int k = 0; k < layerCount(); ++k)
    if (blocks_[static_cast<size_t>(k)].size() > 0 && blocks_[static_cast<size_t>(k)].offset <= i)
      l = k;
  int64_t wholeOffset = 0;
  for (int k = 0; k < l; ++k)
    wholeOffset += network_.layers[static_cast<size_t>(k)].params;
  return wholeOffset + wholeElement(l, i - blocks_[static_cast<size_t>(l)].offset);
}

Model::~Model() = default;
Model::Model(Model&&) noexcept = default;
Model& Model::operator=(Model&&) noexcept = default;

// ---- buffers --------------------------------------------------------------

Tensor& Model::input(int batch) {
  STRATA_ENFORCE_OP(batch, >=, 0);
  // A resize's copy or zero fill is ordered with the kernels; the wait after
  // it also lets a copy on another stream (a communicator's) write the input.
  act_->input.resize(Dims{batch, network_.input.c, network_.input.h, network_.input.w});
  backend_->synchronize();
  return act_->input;
}

void Model::writeInput(const SyntheticBatch& batch) {
  const Dims dims{static_cast<int>(batch.classes.size()), network_.input.c, network_.input.h,
                  network_.input.w};
  if (!(act_->input.dims() == dims))
    act_->input.resize(dims);  // stream-ordered: storage the last step read is freed after it
  backend_->writeSynthetic(batch, act_->input.view());
}

void Model::setLabels(std::span<const int32_t> labels) {
  const int sl = softmaxLayer();
  const int classes = network_.layers[static_cast<size_t>(sl)].inShape.c;
  for (int32_t label : labels)
    STRATA_ENFORCE(label >= 0 && label < classes);
  // An upload ordered after the kernels that read the last labels: no wait
  // for them (the host's labels are consumed when it returns).
  act_->labels.assign(labels);
}

const Tensor& Model::inputGrad() const {
  backend_->synchronize();
  return act_->inputGrad;
}

std::span<float> Model::allParameters() {
  backend_->synchronize();
  return params_.hostSpan("Model::allParameters");
}

std::span<float> Model::allGradients() {
  backend_->synchronize();
  return grads_.hostSpan("Model::allGradients");
}

std::span<float> Model::softmaxStats() {
  backend_->synchronize();
  return act_->softmaxStats.hostSpan("Model::softmaxStats");
}

std::span<float> Model::softmaxStatsNoWait() {
  return act_->softmaxStats;
}

std::vector<float> Model::parametersToHost() {
  return params_.toHost();
}

std::vector<float> Model::gradientsToHost() {
  return grads_.toHost();
}

std::vector<float> Model::parametersToHost(int firstLayer, int lastLayer) {
  const std::span<float> at = layersOf(params_, firstLayer, lastLayer);
  std::vector<float> out(at.size());
  download(params_.memory(), std::span<float>(out), at.data());
  return out;
}

std::vector<float> Model::gradientsToHost(int firstLayer, int lastLayer) {
  const std::span<float> at = layersOf(grads_, firstLayer, lastLayer);
  std::vector<float> out(at.size());
  download(grads_.memory(), std::span<float>(out), at.data());
  return out;
}

void Model::uploadParameters(int firstLayer, int lastLayer, std::span<const float> values) {
  const std::span<float> at = layersOf(params_, firstLayer, lastLayer);
  STRATA_ENFORCE_OP(values.size(), ==, at.size());
  upload(params_.memory(), at.data(), values);
}

void Model::uploadParameters(std::span<const float> values) {
  STRATA_ENFORCE_OP(values.size(), ==, params_.size());
  upload(params_.memory(), params_.data(), values);
}

void Model::uploadGradients(int firstLayer, int lastLayer, std::span<const float> values) {
  const std::span<float> at = layersOf(grads_, firstLayer, lastLayer);
  STRATA_ENFORCE_OP(values.size(), ==, at.size());
  upload(grads_.memory(), at.data(), values);
}

std::vector<float> Model::softmaxStatsToHost() {
  return act_->softmaxStats.toHost();
}

void Model::uploadSoftmaxStats(std::span<const float> values) {
  STRATA_ENFORCE_OP(values.size(), ==, act_->softmaxStats.size());
  upload(act_->softmaxStats.memory(), act_->softmaxStats.data(), values);
}

const Tensor& Model::output(int layer) const {
  STRATA_ENFORCE(layer >= 0 && layer < layerCount());
  backend_->synchronize();
  return act_->layers[static_cast<size_t>(layer)].out;
}

Tensor& Model::outputGrad(int layer) {
  STRATA_ENFORCE(layer >= 0 && layer < layerCount());
  backend_->synchronize();
  return act_->layers[static_cast<size_t>(layer)].outGrad;
}

const Tensor& Model::input() const {
  return act_->input;
}

int64_t Model::tokenTableElements(int layer) const {
  STRATA_ENFORCE(layer >= 0 && layer < layerCount());
  const Layer& l = network_.layers[static_cast<size_t>(layer)];
  STRATA_ENFORCE(l.kind == LayerKind::kEmbedding);
  return int64_t{slots_.front()->layers[static_cast<size_t>(layer)].embedding.rows()} *
         l.spec.outputs;
}

void Model::setActivationSlots(int slots) {
  STRATA_ENFORCE_OP(slots, >=, 1);
  const Activations* like = slots_.front().get();
  while (static_cast<int>(slots_.size()) < slots)
    slots_.push_back(std::make_unique<Activations>(like, like->layers.size(), backend_->memory()));
  slots_.resize(static_cast<size_t>(slots));
  if (activationSlot() < 0)
    act_ = slots_.front().get();
}

void Model::useActivationSlot(int slot) {
  STRATA_ENFORCE(slot >= 0 && slot < activationSlots());
  act_ = slots_[static_cast<size_t>(slot)].get();
}

int Model::activationSlot() const {
  for (size_t i = 0; i < slots_.size(); ++i)
    if (slots_[i].get() == act_)
      return static_cast<int>(i);
  return -1;
}

Model::LayerState& Model::slotLayer(int layer, int slot, int batch) {
  STRATA_ENFORCE(layer >= 0 && layer < layerCount() && slot >= 0 && slot < activationSlots());
  LayerState& st = slots_[static_cast<size_t>(slot)]->layers[static_cast<size_t>(layer)];
  // Both, as the layer's forward sizes them: the stage that receives an
  // output runs its readers, whose backward writes its gradient.
  st.out.resize(outDims(layer, batch));
  st.outGrad.resize(outDims(layer, batch));
  return st;
}

Tensor& Model::slotOutput(int layer, int slot, int batch) {
  return slotLayer(layer, slot, batch).out;
}

Tensor& Model::slotOutputGrad(int layer, int slot, int batch) {
  return slotLayer(layer, slot, batch).outGrad;
}

bool Model::modelParallel(int layer) const {
  STRATA_ENFORCE(layer >= 0 && layer < layerCount());
  return act_->layers[static_cast<size_t>(layer)].sliced;
}

NeuronRange Model::slice(int layer) const {
  STRATA_ENFORCE(layer >= 0 && layer < layerCount());
  return act_->layers[static_cast<size_t>(layer)].slice;
}

Tensor& Model::exchangeInput(int layer, int batch) {
  STRATA_ENFORCE(modelParallel(layer));
  STRATA_ENFORCE_OP(batch, >=, 0);
  const Shape in = network_.layers[static_cast<size_t>(layer)].inShape;
  Tensor& t = act_->layers[static_cast<size_t>(layer)].exchangeIn;
  // Resized first: its zero fill or copy runs on the backend's stream, and
  // the caller's copies into it may run on another (a communicator's).
  t.resize(Dims{batch, in.c, in.h, in.w});
  backend_->synchronize();
  return t;
}

const Tensor& Model::exchangeInputGrad(int layer) const {
  STRATA_ENFORCE(modelParallel(layer));
  backend_->synchronize();
  return act_->layers[static_cast<size_t>(layer)].exchangeInGrad;
}

bool Model::gathersInput(int layer) const {
  STRATA_ENFORCE(layer >= 0 && layer < layerCount());
  return act_->layers[static_cast<size_t>(layer)].gathersInput;
}

bool Model::scattersOutput(int layer) const {
  STRATA_ENFORCE(layer >= 0 && layer < layerCount());
  return act_->layers[static_cast<size_t>(layer)].scattersOutput;
}

Tensor& Model::gatheredInput(int layer, int batch) {
  STRATA_ENFORCE(gathersInput(layer));
  STRATA_ENFORCE_OP(batch, >=, 0);
  const Shape in = network_.layers[static_cast<size_t>(layer)].inShape;
  Tensor& t = act_->layers[static_cast<size_t>(layer)].gathered;
  // Resized first (its copy or fill runs on the backend's stream), then
  // waited for: the caller's copies may run on a communicator's.
  t.resize(Dims{batch, in.c, in.h, in.w});
  backend_->synchronize();
  return t;
}

const Tensor& Model::gatheredInputGrad(int layer) const {
  STRATA_ENFORCE(gathersInput(layer));
  backend_->synchronize();
  return act_->layers[static_cast<size_t>(layer)].gatheredGrad;
}

const Tensor& Model::fullOutput(int layer) const {
  STRATA_ENFORCE(scattersOutput(layer));
  backend_->synchronize();
  return act_->layers[static_cast<size_t>(layer)].full;
}

Tensor& Model::fullOutputGrad(int layer, int batch) {
  STRATA_ENFORCE(scattersOutput(layer));
  STRATA_ENFORCE_OP(batch, >=, 0);
  const Shape out = network_.layers[static_cast<size_t>(layer)].outShape;
  Tensor& t = act_->layers[static_cast<size_t>(layer)].fullGrad;
  t.resize(Dims{batch, out.c, out.h, out.w});
  backend_->synchronize();
  return t;
}

ConstTensorView Model::inputOf(int layer, int which) const {
  const LayerState& st = act_->layers[static_cast<size_t>(layer)];
  if (st.sliced)
    return st.exchangeIn.view();
  if (st.gathersInput)
    return st.gathered.view();
  const int p = network_.layers[static_cast<size_t>(layer)].inputs[static_cast<size_t>(which)];
  return p < 0 ? act_->input.view() : act_->layers[static_cast<size_t>(p)].out.view();
}

const Tensor& Model::outputGradOf(int layer) const {
  const LayerState& st = act_->layers[static_cast<size_t>(layer)];
  return st.scattersOutput ? st.fullGrad : st.outGrad;
}

Tensor& Model::gradTargetOf(int layer, int which) {
  LayerState& st = act_->layers[static_cast<size_t>(layer)];
  if (st.sliced)
    return st.exchangeInGrad;
  if (st.gathersInput)
    return st.gatheredGrad;
  const int p = network_.layers[static_cast<size_t>(layer)].inputs[static_cast<size_t>(which)];
  return p < 0 ? act_->inputGrad : act_->layers[static_cast<size_t>(p)].outGrad;
}

float Model::betaOf(int layer, int which) const {
  const LayerState& st = act_->layers[static_cast<size_t>(layer)];
  if (st.sliced || st.gathersInput)
    return 0.0f;
  const int p = network_.layers[static_cast<size_t>(layer)].inputs[static_cast<size_t>(which)];
  const int readers = p < 0 ? inputReaders_ : act_->layers[static_cast<size_t>(p)].readers;
  return readers > 1 ? 1.0f : 0.0f;
}

void Model::checkRange(int layer, ExampleRange r) const {
  const ConstTensorView in = inputOf(layer, 0);
  STRATA_ENFORCE_OP(r.begin, >=, 0);
  STRATA_ENFORCE_OP(r.begin, <=, r.end);
  STRATA_ENFORCE_OP(r.end, <=, in.dims.n);
}

int Model::softmaxLayer() const {
  for (int l = layerCount() - 1; l >= 0; --l)
    if (network_.layers[static_cast<size_t>(l)].kind == LayerKind::kSoftmax)
      return l;
  throw UserError(fmt::format("network '{}' has no softmax layer", network_.name));
}

int64_t Model::softmaxPositions() const {
  return inputOf(softmaxLayer(), 0).dims.n *
         int64_t{network_.layers[static_cast<size_t>(softmaxLayer())].inShape.h} *
         network_.layers[static_cast<size_t>(softmaxLayer())].inShape.w;
}

// ---- parameters -------------------------------------------------------------

ParamBlock Model::paramBlock(int layer) const {
  STRATA_ENFORCE(layer >= 0 && layer < layerCount());
  return blocks_[static_cast<size_t>(layer)];
}

std::span<float> Model::parameters(int layer) {
  const ParamBlock b = paramBlock(layer);
  backend_->synchronize();
  return params_.hostSpan("Model::parameters")
      .subspan(static_cast<size_t>(b.offset), static_cast<size_t>(b.size()));
}

std::span<float> Model::gradients(int layer) {
  const ParamBlock b = paramBlock(layer);
  backend_->synchronize();
  return grads_.hostSpan("Model::gradients")
      .subspan(static_cast<size_t>(b.offset), static_cast<size_t>(b.size()));
}

std::span<float> Model::gradients(int firstLayer, int lastLayer) {
  backend_->synchronize();
  requireHostAccess(grads_.memory(), "Model::gradients");
  return gradientsNoWait(firstLayer, lastLayer);
}

std::span<float> Model::layersOf(Buffer<float>& buffer, int firstLayer, int lastLayer) const {
  STRATA_ENFORCE_OP(firstLayer, <=, lastLayer);
  const ParamBlock first = paramBlock(firstLayer);
  const ParamBlock last = paramBlock(lastLayer);
  return {buffer.data() + first.offset,
          static_cast<size_t>(last.offset + last.size() - first.offset)};
}

std::span<float> Model::gradientsNoWait(int firstLayer, int lastLayer) {
  return layersOf(grads_, firstLayer, lastLayer);
}

std::span<float> Model::parametersNoWait(int firstLayer, int lastLayer) {
  return layersOf(params_, firstLayer, lastLayer);
}

std::span<float> Model::momentum(int layer) {
  if (momentum_.empty())
    momentum_.resize(params_.size());  // zero-filled
  const ParamBlock b = paramBlock(layer);
  backend_->synchronize();
  return momentum_.hostSpan("Model::momentum")
      .subspan(static_cast<size_t>(b.offset), static_cast<size_t>(b.size()));
}

// ---- loss -------------------------------------------------------------------

SoftmaxLossSum Model::softmaxSums() {
  const int sl = softmaxLayer();
  STRATA_ENFORCE_OP(static_cast<int64_t>(act_->labels.size()), ==, softmaxPositions());
  STRATA_ENFORCE_OP(static_cast<int64_t>(act_->softmaxStats.size()), ==, 2 * softmaxPositions());
  return backend_->softmaxLoss(inputOf(sl, 0), act_->softmaxStats.data(), act_->labels.data(),
                               act_->layers[static_cast<size_t>(sl)].slice.begin);
}

double Model::loss() {
  const double normalizer =
      lossNormalizer_ > 0 ? lossNormalizer_ : static_cast<double>(softmaxPositions());
  return softmaxSums().loss / normalizer;
}

int64_t Model::correctCount() {
  return softmaxSums().correct;
}

double Model::accuracy() {
  return static_cast<double>(correctCount()) / static_cast<double>(softmaxPositions());
}

// ---- free functions -----------------------------------------------------------

void mergeSoftmaxStats(std::span<float> into, std::span<const float> other) {
  STRATA_ENFORCE_OP(into.size(), ==, other.size());
  for (size_t q = 0; q + 1 < into.size(); q += 2) {
    const float m = std::max(into[q], other[q]);
    into[q + 1] = into[q + 1] * std::exp(into[q] - m) + other[q + 1] * std::exp(other[q] - m);
    into[q] = m;
  }
}

double softmaxCrossEntropy(Backend& backend, ConstTensorView logits,
                           std::span<const int32_t> labels, double normalizer,
                           TensorView* dlogits) {
  const int64_t positions = int64_t{logits.dims.n} * logits.dims.h * logits.dims.w;
  STRATA_ENFORCE_OP(static_cast<int64_t>(labels.size()), ==, positions);
  for (int32_t label : labels)
    STRATA_ENFORCE(label >= 0 && label < logits.dims.c);
  if (normalizer <= 0)
    normalizer = static_cast<double>(positions);
  // The kernels read stats and labels: both in the backend's memory.
  Buffer<float> stats(backend.memory(), static_cast<size_t>(2 * positions));
  Buffer<int32_t> deviceLabels(backend.memory());
  deviceLabels.assign(labels);
  backend.softmaxStats(logits, stats.data());
  if (dlogits)
    backend.softmaxBackward(logits, stats.data(), deviceLabels.data(), 0,
                            static_cast<float>(1.0 / normalizer), *dlogits, 0.0f);
  return backend.softmaxLoss(logits, stats.data(), deviceLabels.data(), 0).loss / normalizer;
}

}  // namespace strata::nn

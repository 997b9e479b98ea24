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

// Appended kinds keep the earlier ones' indices (per-kind tables index by kind).
// Each kind has one row in layer_kinds.h: its name, YAML keys and derive rule.
enum class LayerKind {
  kConv,
  kPool,
  kFc,
  kRnn,
  kRelu,
  kLrn,
  kDropout,
  kBatchNorm,
  kAdd,
  kSoftmax,
  kEmbedding,  // token ids -> vectors (plus learned positions), GPT-2 wte + wpe
  kAttention,  // multi-head self-attention: QKV projection, scores, softmax, context, output
  kLayerNorm,  // normalisation over the channels of each position (Ba et al. 2016)
  kGelu,       // GELU, tanh approximation (Hendrycks & Gimpel 2016; GPT-2)
  kRmsNorm,    // RMS normalisation over the channels of each position (Zhang & Sennrich 2019)
  kSwiglu,     // gated activation silu(a) * b over the two channel halves (Shazeer 2020; Llama)
  // Vision networks (torchvision's zoo, docs/networks.md):
  kConcat,       // its inputs side by side along the channels (GoogLeNet, DenseNet)
  kSigmoid,      // 1 / (1 + exp(-x)) (squeeze-excitation's gate, Hu et al. 2018)
  kSilu,         // x sigmoid(x) (Elfwing et al. 2018; EfficientNet's swish)
  kRelu6,        // min(max(x, 0), 6) (MobileNetV2, Sandler et al. 2018)
  kHardSigmoid,  // relu6(x + 3) / 6 (MobileNetV3, Howard et al. 2019)
  kHardSwish,    // x relu6(x + 3) / 6 (MobileNetV3)
  kMul,          // x * g, g of x's shape or one value per channel (C x 1 x 1, an SE gate)
  kSlice,        // channels [offset, offset + channels) of its input (ShuffleNetV2's split)
  kShuffle,      // channel shuffle: groups of channels interleaved (Zhang et al. 2018)
  kScale,        // layer scale: x times a learned value per channel (Touvron et al. 2021)
  // Vision transformers (Dosovitskiy et al. 2021, torchvision's ViT):
  kClassToken,    // learned tokens put before the input's positions (ViT's class token)
  kPosEmbedding,  // a learned table of the input's shape added to it (ViT's positions)
  kToken,         // one position of the input, as a vector (ViT's x[:, 0] to the head)
  // Hierarchical vision transformers (Swin, Liu et al. 2021):
  kSpaceToDepth,  // each 2 x 2 block of positions as one of 4 C channels (patch merging)
  kTanh,          // tanh(x) (MaxViT's and BERT's pooler heads)
};
inline constexpr int kLayerKindCount = 31;
inline constexpr LayerKind kAllLayerKinds[] = {
    LayerKind::kConv,         LayerKind::kPool,      LayerKind::kFc,
    LayerKind::kRnn,          LayerKind::kRelu,      LayerKind::kLrn,
    LayerKind::kDropout,      LayerKind::kBatchNorm, LayerKind::kAdd,
    LayerKind::kSoftmax,      LayerKind::kEmbedding, LayerKind::kAttention,
    LayerKind::kLayerNorm,    LayerKind::kGelu,      LayerKind::kRmsNorm,
    LayerKind::kSwiglu,       LayerKind::kConcat,    LayerKind::kSigmoid,
    LayerKind::kSilu,         LayerKind::kRelu6,     LayerKind::kHardSigmoid,
    LayerKind::kHardSwish,    LayerKind::kMul,       LayerKind::kSlice,
    LayerKind::kShuffle,      LayerKind::kScale,     LayerKind::kClassToken,
    LayerKind::kPosEmbedding, LayerKind::kToken,     LayerKind::kSpaceToDepth,
    LayerKind::kTanh};

// Lower-case config name of a kind ("conv", "batchnorm").
std::string_view toString(LayerKind kind);
// Every kind's config name in kAllLayerKinds order, comma-separated (for
// messages that list them).
std::string layerKindNames();

// The phases of one layer in one training step (DESIGN.md vocabulary).
enum class Phase { kFwd, kBwdData, kBwdWeights, kUpdate };
std::string_view toString(Phase phase);

enum class PoolMode { kMax, kAvg };
// attention: a learned bias of the scores by the relative position of query
// and key (LayerSpec::positionBias).
enum class PositionBias { kNone, kTable, kMlp };
std::string_view toString(PositionBias bias);
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
  int pad = 0;  // rows of zeros above and below (and, padW < 0, columns left and right)
  // conv: columns of zeros left and right when they differ from pad's rows
  // (Inception-v3's 1x7 kernels pad 0 x 3); -1: pad.
  int padW = -1;
  // conv: the kernel's taps `dilation` apart in both dimensions (Yu & Koltun
  // 2016): a k-tap kernel spans dilation (k - 1) + 1 inputs.
  int dilation = 1;
  // conv: groups of channels each filter reads; shuffle: the groups whose
  // channels it interleaves (channel j of group i goes to j * groups + i).
  int groups = 1;
  PoolMode poolMode = PoolMode::kMax;
  bool global = false;
  // pool: the output size rounded up, as PyTorch's ceil_mode (a last window
  // that starts inside the input or its left padding is kept, partly
  // outside); max pooling only.
  bool ceilMode = false;
  // conv / fc / rnn / attention (attention: the Q, K, V and output
  // projections' biases)
  bool bias = true;
  // attention: biases on the Q, K and V projections alone, none on the
  // output projection (Qwen2); only with bias false.
  bool qkvBias = false;
  // slice: the first channel taken and how many (channels 0: none given).
  int offset = 0;
  int channels = 0;
  // class_token: the learned tokens put before the input's positions;
  // token: the position taken (0: the first, where a class token sits).
  int tokens = 1;
  int index = 0;
  // fc
  int outputs = 0;
  bool flatten = true;
  // rnn
  int hidden = 0;
  RnnCell cell = RnnCell::kVanilla;
  // lrn / dropout
  int lrnSize = 5;
  double dropoutRate = 0.5;
  // embedding: a table of `vocab` vectors of `outputs` features, plus (when
  // positions > 0) a learned table of `positions` position vectors added to
  // them; the input is one token id per position (1 x T x 1).
  int vocab = 0;
  int positions = 0;
  // attention: heads (dividing the channels); causal masks future positions.
  int heads = 0;
  bool causal = true;
  // attention: grouped-query attention (Ainslie et al. 2023) with kvHeads
  // key/value heads, each shared by heads / kvHeads query heads (0: kvHeads
  // = heads, multi-head attention); rotary: rotary position embedding of Q
  // and K (Su et al. 2021) with base rotaryBase (theta_i = base^(-2i/dh)).
  int kvHeads = 0;
  bool rotary = false;
  double rotaryBase = 10000;
  // attention, rotary: the features of each head that turn, the first
  // rotaryDims (GPT-NeoX's rotary_pct of them, Black et al. 2022; theta_i
  // = base^(-2i/rotaryDims)), the others left as they are; 0: all of them.
  int rotaryDims = 0;
  // attention: fusedCore, the core (QK^T, softmax, PV) runs as one kernel
  // whose scores never reach memory (FlashAttention, Dao et al. 2022);
  // otherwise the scores are written, and softmax (and attention dropout)
  // run as kernels of their own between the core's GEMMs. attentionDropout:
  // the dropout rate on the probabilities (Megatron-LM's
  // --attention-dropout), 0 for none.
  bool fusedCore = false;
  double attentionDropout = 0;
  // attention over an H x W grid (Swin, Liu et al. 2021, section 3.2):
  // window, the side of the square windows of positions each query attends
  // within (0: every position, global attention); the grid is padded below
  // and right to whole windows (torchvision's F.pad). shift, the windows
  // moved by (shift, shift) positions (a cyclic roll and a mask of the
  // wrapped positions), dropped along a dimension that one window covers,
  // as torchvision's shifted_window_attention does. positionBias, a learned
  // bias per head added to the scores by the relative offset of query and
  // key: a table of (2 window - 1)^2 x heads (Swin) or a two-layer MLP of
  // the offsets, 2 -> 512 -> heads, its output 16 sigmoid(.) (Swin V2's
  // continuous position bias, Liu et al. 2022, section 3.3). cosine: the
  // scores are the cosines of Q and K times a learned scale per head (Swin
  // V2's scaled cosine attention, section 3.2). grid, the side of the G x G
  // grid of positions each query attends within, H / G rows and W / G
  // columns apart: the positions that share their offset in each block of
  // (H / G) x (W / G) (MaxViT's grid attention, Tu et al. 2022, section 3.1;
  // H and W multiples of G, no shift); a position bias is then an offset in
  // that grid. window and grid exclude each other (0: not used).
  int window = 0;
  int grid = 0;
  int shift = 0;
  PositionBias positionBias = PositionBias::kNone;
  bool cosine = false;
  // space_to_depth: each block_size x block_size block of positions as one
  // position of block_size^2 times the channels (Swin's patch merging).
  int blockSize = 2;
  // rmsnorm: the epsilon added to the mean square.
  double eps = 1e-5;
  // fc (flatten: false) tied to an embedding: its weights are that layer's
  // token table (vocab x features), shared, so the fc holds no parameters
  // of its own (GPT-2's output layer). -1: not tied.
  int tiedTo = -1;

  int padWidth() const { return padW < 0 ? pad : padW; }
};

// One layer with its derived per-example costs.
struct Layer {
  std::string name;
  LayerKind kind = LayerKind::kRelu;
  LayerSpec spec;
  std::vector<int> inputs;  // indices of the layers read; -1 is the network input
  int configLine = 0;       // line of the layer in its config file
  // The repeated block (transformer, bottleneck) the layer was expanded
  // from, numbered from 0 in network order; -1: a layer of its own. Full
  // recomputation keeps each block's input and reruns the block.
  int block = -1;

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
  // Elements per example kept for the backward pass besides the output
  // (attention: Q, K, V, the probabilities and the context).
  double savedElems = 0;
  // attention: the core's (QK^T and PV) share of fwdFlops and
  // bwdWeightsFlops, priced at the device's attention_core efficiency
  // (bwd_data holds none of it).
  double fwdCoreFlops = 0;
  double bwdWeightsCoreFlops = 0;
  // attention with an unfused core: elements per example of the score-sized
  // traffic of the kernels between the core's GEMMs (softmax, attention
  // dropout), per phase, and the bytes of the dropout mask written (fwd) and
  // read (bwd_weights); kernels of their own, so their time adds to the
  // layer's (layerTime). Not in fwdElems and bwdWeightsElems.
  double fwdScoreElems = 0;
  double bwdWeightsScoreElems = 0;
  double scoreMaskBytes = 0;
  // attention: the part of savedElems that is score-sized (probabilities,
  // dropped-out probabilities), which selective recomputation drops.
  double savedScoreElems = 0;

  // attention: its key/value heads (spec.kvHeads, or heads when 0) and the
  // rows of its Q, K and V projections (d + 2 d kvHeads / heads).
  int kvHeads() const { return spec.kvHeads > 0 ? spec.kvHeads : spec.heads; }
  // attention: the features of each head that rotary positions turn.
  int rotaryFeatures() const {
    if (!spec.rotary || spec.heads <= 0)
      return 0;
    return spec.rotaryDims > 0 ? spec.rotaryDims : inShape.c / spec.heads;
  }
  // attention: the positions its projections run over (the H x W grid
  // padded to whole windows; H W without windows), the keys each query
  // scores (window^2, grid^2, or every position), and the windows (or
  // grids) per example.
  int64_t attentionPositions() const;
  int64_t attentionSpan() const;
  int64_t attentionWindows() const { return attentionPositions() / attentionSpan(); }
  // attention: the window shift along H and along W (0 where one window
  // covers that dimension of the padded grid).
  int shiftH() const;
  int shiftW() const;
  // attention: the side of its windows or grids (0: global attention).
  int partitionSide() const { return spec.window > 0 ? spec.window : spec.grid; }
  int64_t qkvRows() const {
    return spec.heads > 0 ? int64_t{inShape.c} + 2 * int64_t{inShape.c} / spec.heads * kvHeads()
                          : 0;
  }

  bool readsNetworkInput() const;
  bool hasWeights() const { return params > 0; }
  // Whether bwd_weights computes a gradient: a layer's own weights, or a
  // tied fc's gradient of the embedding it shares weights with.
  bool computesWeightGradient() const { return params > 0 || spec.tiedTo >= 0; }
};

// A network: input shape, layers in execution order, and the split point of
// the owt-* strategies (layers from `modelParallelFrom` on run model-parallel).
struct Network {
  std::string name;
  std::string description;
  std::string sourceFile;
  Shape input;
  std::vector<Layer> layers;
  int modelParallelFrom = -1;  // -1: no model-parallel part
  // Why there is no model-parallel part (when modelParallelFrom is -1), for
  // the message of an owt-* strategy: "no fc layer", "...".
  std::string noModelParallelWhy;

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

// Computes shapes and costs of `layer` given its input shapes, by its kind's
// rule (layer_kinds.cpp); throws
// ConfigError (file, layer's line, "layers[i].key") when the shape does not fit.
void deriveLayer(Layer& layer, const std::vector<Shape>& inputShapes, const std::string& file,
                 int index);

// The layer whose parameters receive layer `index`'s weight gradient: the
// embedding a tied fc shares its table with, else the layer itself.
inline int gradientOwner(const Network& network, int index) {
  const int tied = network.layers[static_cast<size_t>(index)].spec.tiedTo;
  return tied >= 0 ? tied : index;
}

// Why layers [from, end) cannot run model-parallel under owt-* (the first
// must be an fc, the rest a chain, each layer reading the one before, and
// no fc tied to an embedding); "" when they can.
std::string modelParallelObstacle(const Network& network, int from);
// Sets modelParallelFrom to the first fc from which the rest can run
// model-parallel, or to -1 with noModelParallelWhy saying why none can.
void findModelParallelPart(Network& network);

}  // namespace strata

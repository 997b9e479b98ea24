// The ONNX importer's private parts (docs/onnx.md), shared by its two
// sources: onnx_loader.cpp reads the protobuf graph (the file, its
// initializers, input, value shapes and outputs) and builds the network;
// onnx_ops.cpp maps each ONNX op onto strata layers.
#pragma once

#include <fmt/format.h>
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "strata/model/error.h"
#include "strata/model/network.h"

namespace strata::onnx_import {

using Dims = std::vector<int64_t>;

// What a named ONNX value is to the importer.
enum class ValueKind {
  kActivation,  // a per-example tensor some layer (or the network input) produces
  kTokens,      // the network input of token ids (read only by an embedding Gather)
  kConstant,    // an initializer or a Constant node's tensor: weights, shapes, ratios
  kPositions,   // rows of a position table gathered at constant ids (GPT-2's wpe)
  kPointwise,   // an element-wise function of one activation and constants, not yet a layer
  kShape,       // int64s computed from shapes (x.size(), view targets); the batch is kBatchDim
  kDerived,     // computed from constants and shapes alone (position ids, a causal mask)
  kAttention,   // a tensor inside a decomposed attention (onnx_attention.cpp)
  // An activation's C x H x W viewed as [groups, C / groups, H, W] (swapped:
  // transposed to [C / groups, groups, H, W]), the first steps of a channel
  // shuffle (torchvision's ShuffleNetV2).
  kChannelGroups,
  // A step of a normalisation written out over the features of `layer`'s
  // activation x: an RMSNorm (Zhang & Sennrich 2019; Hugging Face's
  // LlamaRMSNorm: x.pow(2).mean(-1, keepdim=True), + eps, sqrt, its
  // reciprocal, x times that, times the weight) or a LayerNorm as
  // torch.onnx.export writes it below opset 17 (x - mean(x), its squares'
  // mean, + eps, sqrt, the centred x divided by it, times the weight, plus
  // the bias). The weight's Mul (RMSNorm) or the bias's Add (LayerNorm)
  // makes the layer.
  kNormStat,
  // A step of attention in windows over a channels-last grid (Swin,
  // onnx_windows.cpp): the grid padded and rolled, cut into windows, their
  // Q, K and V, scores, context and output, and the grid put back; `layer`
  // is the activation x the attention reads. `win` says which step.
  kWindow,
};

// The batch dim of a kShape value: symbolic, whatever the batch. A multiple
// N m of it (nn.MultiheadAttention's view(T, N heads, dh), its rows T N) is
// batchTimes(m), m in [1, kMaxBatchFactor]: values no real dim takes.
inline constexpr int64_t kBatchDim = std::numeric_limits<int64_t>::min() + 1;
inline constexpr int64_t kMaxBatchFactor = int64_t{1} << 40;
inline constexpr int64_t batchTimes(int64_t m) {
  return kBatchDim - 1 + m;
}
inline constexpr bool isBatchMultiple(int64_t v) {
  return v >= kBatchDim && v < kBatchDim + kMaxBatchFactor;
}
inline constexpr int64_t batchFactor(int64_t v) {
  return v - kBatchDim + 1;
}

// How a sequence activation's per-example [T, F] sits in its ONNX tensor,
// besides [N, T, F] (kBatchFirst):
// - kFeaturesFirst: a C x H x W layer's output reshaped to [N, C, H W];
// - kGridSequence: that transposed to [N, H W, C], a sequence of H W
//   positions (ViT's patches), read by a class token's Concat;
// - kTimeMajor: [T, N, F], a sequence transposed by perm [1, 0, 2]
//   (nn.MultiheadAttention's batch_first input);
// - kMergedRows: [T N, F], the rows of kTimeMajor (its output projection's
//   Gemm), until a Reshape to [T, N, F].
enum class SeqLayout { kBatchFirst, kFeaturesFirst, kGridSequence, kTimeMajor, kMergedRows };

// One element-wise node of a kPointwise value: its op and its constant
// operand (none when both operands derive from the activation).
struct PointwiseTerm {
  std::string op;
  std::optional<double> constant;
};

struct Value {
  ValueKind kind = ValueKind::kActivation;
  int layer = -1;                             // producing layer; -1: the network input
  int rank = 0;                               // per-example rank: 1 [F], 2 [T, F] or 3 [C, H, W]
  bool flat = false;                          // the layer's C x H x W read as one vector (Flatten)
  const onnx::TensorProto* tensor = nullptr;  // kConstant
  bool transposed = false;                    // kConstant: a 2-D tensor's Transpose
  int64_t rows = 0;                           // kPositions: rows of the table
  int64_t width = 0;                          // kPositions: features per row
  // Rows (above and below alike) and columns (left and right alike) of
  // zeros a Pad put around the activation, folded into the Conv or pool
  // that reads it (no other op may).
  int padH = 0;
  int padW = 0;
  // kPointwise: the nodes computing it from `layer`'s activation (by node
  // index, so that a node two branches share counts once), the last of them
  // `node`. Materialised as the strata activation it is (gelu, erf or tanh
  // form) when a node that is not element-wise reads it.
  std::map<int, PointwiseTerm> terms;
  int node = -1;
  // kShape: the values (a rank-0 one when `scalar`), and their dims when
  // they are viewed as [rows, columns] (F.pad's pads); empty: one axis.
  std::vector<int64_t> ints;
  bool scalar = false;
  Dims intsDims;
  // kAttention: which tensor of the attention whose Q, K and V the fc layer
  // `layer` computes (part q, k, v: its thirds; x: the output of an fc of
  // its own with the heads split out, Q, K or V as the MatMuls reading it
  // say, `layer` that fc until Q Kᵀ joins it to Q's; s: the scores; p: the
  // probabilities; c: the context), and its per-example axes in order: t
  // positions, h heads, d features of a head, s key positions; "t" alone:
  // [T, features] before the heads are split out or after they are joined.
  // With seq kTimeMajor (nn.MultiheadAttention's layout) the axes name every
  // axis of the tensor, the batch's too: n the batch, f all features, b the
  // batch and the heads in one (view(T, N H, dh)), r the positions and the
  // batch in one (the context's [T N, D]).
  char part = 0;
  std::string axes;
  int heads = 0;
  // kAttention, part x: the heads of its own projection when repeat_kv
  // (Unsqueeze, Expand, Reshape) shared them among `heads` query heads
  // (grouped-query attention); 0: not repeated.
  int kvHeads = 0;
  // kAttention: rotary positions turned this projection's heads (Su et al.
  // 2021, as Hugging Face's apply_rotary_pos_emb writes them: x cos +
  // rotate_half(x) sin), and the base read from the frequencies (0: not
  // found in the file). `rope` is the step of that sum x is at: 0 none,
  // 'c' x times a table (cos), 'a' and 'b' x's first and second halves
  // along the features, 'n' the second half negated, 'r' rotate_half(x)
  // (Concat of 'n' and 'a'), 's' rotate_half(x) times a table (sin).
  bool rotary = false;
  char rope = 0;
  double ropeBase = 0;
  // Partial rotary (GPT-NeoX's rotary_pct): rope 'h' is a Slice [sliceStart,
  // sliceStop) of ropeWidth features (the head's, or of its turning part);
  // ropePart, the first features that turn (0: all of the head's), through
  // the steps of x cos + rotate_half(x) sin; 'd' that part turned, before the
  // Concat with the rest; rotaryDims, the features a rotated projection
  // turned (0: all).
  int64_t ropeWidth = 0;
  int64_t ropePart = 0;
  int64_t rotaryDims = 0;
  // kDerived: the base of the rotary frequencies it is computed from
  // (inv_freq = base^(-2i/d), a constant of the file), 0 if none.
  double freqBase = 0;
  // kNormStat: the step and the eps added. RMSNorm: 'm' the mean of x's
  // squares, 'e' plus eps, 's' its square root, 'r' the reciprocal, 'n' x
  // normalised. LayerNorm: 'M' the mean of x, 'D' x minus it, 'Q' its
  // squares, 'V' their mean, 'E' plus eps, 'S' the square root, 'R' the
  // reciprocal, 'N' the centred x normalised, 'W' times the weight.
  char norm = 0;
  double eps = 0;
  bool masked = false;          // a mask met the scores (causal)
  double attentionDropout = 0;  // a Dropout of the probabilities
  // kChannelGroups: the groups, and whether the two group axes swapped.
  int groups = 0;
  bool swapped = false;
  // kActivation of rank 3: its per-example dims read H x W x C, a Transpose
  // of C x H x W by perm [0, 2, 3, 1] (ConvNeXt's channels-last blocks),
  // until a Transpose by [0, 3, 1, 2] puts the channels back. The layers
  // made on it are strata's C x H x W layers that act on the channels of
  // each position (layernorm, a per-position fc, element-wise ones).
  bool channelsLast = false;
  // A channels-last activation cut into windows, [N, (H / p) (W / p), p^2,
  // C] per example (MaxViT's window_partition of p x p blocks: a Reshape,
  // a Transpose and a Reshape of [N, C, H, W], onnx_partitions.cpp), and
  // that with its two middle axes swapped, [N, p^2, (H / p) (W / p), C]
  // (MaxViT's grid: each sequence the positions p apart). The layers made
  // on it act on each position's channels, as on channelsLast alone.
  int partition = 0;
  bool partitionSwap = false;
  SeqLayout seq = SeqLayout::kBatchFirst;
  // kDerived: the initializer it expands over the batch (ViT's class token,
  // Expand([1, k, C], [N, -1, -1])), or none.
  const onnx::TensorProto* expanded = nullptr;
  // kWindow (onnx_windows.cpp): the step, one of 'g' the grid [N, H', W', C]
  // (x padded, rolled), 'a' a Slice of it along H or W, 'm' a strided
  // Slice of one along both (patch merging's x[i::2, j::2]), 'v' the
  // windows' view [N, H'/M, M, W'/M, M, C], 'u' that transposed, 'w' the
  // windows [N nW, M^2, C], 'f' their QKV fc, 'r' its heads [N nW, M^2, 3,
  // h, dh], 'R' transposed to [3, N nW, h, M^2, dh], 'q', 'k', 'x' Q, K and
  // V, 'K' K transposed, 's' the scores, 'p' the probabilities, 'c' the
  // context, 'C' it transposed, 'j' the heads joined, 'o' the output
  // projection, 'V' and 'U' the windows' view back, 'G' the grid again and
  // 'A' a Slice of it. window M, the padding below and right, the roll of
  // the grid (up and left) and the shift the windows were cut at.
  char win = 0;
  int window = 0;
  int padB = 0;
  int padR = 0;
  int rollH = 0;
  int rollW = 0;
  int shiftH = 0;
  int shiftW = 0;
  // 'a', 'A', 'm': the axis sliced (1 H, 2 W), its range and step, and the
  // value sliced; 'm' the offsets along H and W.
  int sliceAxis = 0;
  int64_t sliceStart = 0;
  int64_t sliceStop = 0;
  int64_t sliceStep = 1;
  std::string sliced;
  int mergeRow = -1;
  int mergeCol = -1;
  // From 'f' on: the QKV fc's rows, the biases seen, the position bias and
  // the shift's mask added to the scores, the scores viewed per window
  // ([N, nW, h, M^2, M^2]: `split`).
  int64_t fcRows = 0;
  bool qkvBiasSeen = false;
  bool projBiasSeen = false;
  bool positionBiasSeen = false;
  bool maskSeen = false;
  bool split = false;
  // kDerived: a learned table gathered at constant offsets (Swin's
  // relative position bias), and what is computed from it.
  const onnx::TensorProto* positionTable = nullptr;
  // kDerived: Swin V2's continuous position bias, an MLP of a constant table
  // of offsets (positionTable, [1, 2M - 1, 2M - 1, 2]): the step reached (1
  // its first MatMul, 2 plus its bias, 3 its ReLU, 4 its second MatMul and
  // what is computed from that), its hidden width and its heads.
  int cpbStage = 0;
  int64_t cpbHidden = 0;
  int64_t cpbHeads = 0;
  // kDerived: the learned initializer it is computed from by Clip, Exp or
  // ScatterND (Swin V2's logit scale clamped and exponentiated; its qkv
  // bias with the K third zeroed).
  const onnx::TensorProto* learned = nullptr;
  // kWindow: Q (bit 1) and K (bit 2) normalised (Swin V2's F.normalize:
  // ReduceL2, Clip, Expand, Div), and the scores times the logit scale
  // (cosine attention); the scores plus an MLP's position bias.
  int normalised = 0;
  bool logitScaleSeen = false;
  bool positionMlpSeen = false;
  // kDerived: an int64 initializer viewed flat (Reshape to [-1], MaxViT's
  // relative_position_index.view(-1)): its elements.
  int64_t flatElements = 0;
  // kWindow steps of a partitioned activation (MaxViT, onnx_partitions.cpp):
  // the batch and the windows are two axes, [N, windows, ...]; the QKV fc
  // (absorbed into the attention) and the output projection's node.
  bool grouped = false;
  int qkvFc = -1;
  // kDerived: computed from what a causal mask is made of (a square table
  // of positions: GPT-2's `bias` buffer; a Trilu; positions compared, i <
  // j), not only from ones and shapes (BERT's padding mask of an absent
  // attention_mask), which strata cannot read as causal.
  bool causalMask = false;
  // kDerived: zeros (ConstantOfShape of 0, times anything): baddbmm's input
  // scaled by beta (GPT-NeoX's scores), added to nothing.
  bool zeros = false;
};

// A Reshape target matches the dims a step expects: each value equal, or
// one -1 (inferred).
inline bool reshapeMatches(const std::vector<int64_t>& target, const Dims& want) {
  if (target.size() != want.size())
    return false;
  int inferred = 0;
  for (size_t k = 0; k < want.size(); ++k) {
    if (target[k] == -1 && ++inferred == 1)
      continue;
    if (target[k] != want[k])
      return false;
  }
  return true;
}

// The layout of activation `from` (channels-last, partitioned) given to `to`,
// a layer that acts on each position's channels.
inline void copyLayout(Value& to, const Value& from) {
  to.channelsLast = from.channelsLast;
  to.partition = from.partition;
  to.partitionSwap = from.partitionSwap;
}
inline bool sameLayout(const Value& a, const Value& b) {
  return a.channelsLast == b.channelsLast && a.partition == b.partition &&
         a.partitionSwap == b.partitionSwap;
}

// What a com.microsoft Attention still needs from the nodes after it:
// strata's attention layer includes the output projection, which the op
// leaves to a following MatMul (and bias Add).
struct AttentionState {
  bool projection = false;  // the MatMul by a [D, D] weight was folded in
  bool outputBias = false;  // and its bias Add
  // Q, K and V taken as three Slices of the fc's output (bits 1, 2, 4), and
  // that output's name.
  int slices = 0;
  std::string sliced;
  // Separate Q, K and V projections (Hugging Face BERT, OPT, Llama): the fc
  // layers of K and V (the attention is the Q fc's layer), absorbed into the
  // attention and dropped from the network when it folds; -1: none.
  int keys = -1;
  int values = -1;
  int kvHeads = 0;  // the K projection's heads (grouped-query attention)
};

std::string dimsText(const Dims& d);
Dims tensorDims(const onnx::TensorProto& t);
int64_t elementsOf(const Dims& d);
// The int64 values of a tensor stored in the file itself; nullopt for
// external data (never read) or another element type.
std::optional<std::vector<int64_t>> inlineInt64s(const onnx::TensorProto& t);
// The values of a float or double tensor stored in the file; nullopt for
// external data or another element type.
std::optional<std::vector<double>> inlineFloats(const onnx::TensorProto& t);
// The one float value of a scalar tensor stored in the file; nullopt otherwise.
std::optional<double> inlineScalar(const onnx::TensorProto& t);

class Importer {
 public:
  explicit Importer(std::string path) : path_(std::move(path)) {}

  Network run();

 private:
  // ---- errors --------------------------------------------------------------
  [[noreturn]] void fail(const std::string& key, const std::string& message) const {
    throw ConfigError(path_, 0, key, message);
  }
  std::string nodeKey(int i) const {
    const auto& n = model_.graph().node(i);
    return fmt::format("nodes[{}] ({})", i, n.name().empty() ? defaultName(i) : n.name());
  }
  [[noreturn]] void failAt(int i, const std::string& message) const { fail(nodeKey(i), message); }
  std::string defaultName(int i) const {
    return fmt::format("{}_{}", model_.graph().node(i).op_type(), i);
  }
  int toInt(int i, int64_t v, const char* what) const {
    if (v <= 0 || v > std::numeric_limits<int>::max())
      failAt(i, fmt::format("{} {} is not a positive int", what, v));
    return static_cast<int>(v);
  }

  // ---- reading the file (onnx_loader.cpp) ------------------------------------
  void parse();
  // A tensor's dims bound every count computed from them: each in
  // [0, 2^31), their product at most 2^53 (what strata counts exactly).
  void checkTensor(const onnx::TensorProto& t, const std::string& key) const;
  void indexGraph();
  // The one graph input that is no initializer: its dims after the batch.
  void readInput();
  // strata's C x H x W of ONNX per-example dims: [F] -> F x 1 x 1, [T, F] ->
  // F x T x 1 (a sequence of T vectors), [C, H, W] as they are.
  static Shape shapeOfDims(const Dims& d);

  // ---- values --------------------------------------------------------------
  const Shape& shapeOf(const Value& v) const {
    return v.layer < 0 ? net_.input : net_.layers[static_cast<size_t>(v.layer)].outShape;
  }
  // The ONNX per-example dims of an activation, as strata derives them.
  Dims dimsOf(const Value& v) const {
    const Shape& s = shapeOf(v);
    if (v.flat)
      return {s.elements()};
    if (v.seq == SeqLayout::kFeaturesFirst)
      return {s.c, int64_t{s.h} * s.w};
    if (v.seq == SeqLayout::kGridSequence)
      return {int64_t{s.h} * s.w, s.c};
    if (v.partition > 0) {
      const int64_t p = v.partition, windows = (s.h / p) * (s.w / p);
      return v.partitionSwap ? Dims{p * p, windows, s.c} : Dims{windows, p * p, s.c};
    }
    if (v.channelsLast)
      return {s.h, s.w, s.c};
    if (v.rank == 1)
      return {s.c};
    if (v.rank == 2)
      return {s.h, s.c};
    return {s.c, s.h, s.w};
  }

  bool hasInput(int i, int k) const {
    const auto& n = model_.graph().node(i);
    return n.input_size() > k && !n.input(k).empty();
  }
  // Input k of node i when it is given and an earlier node produced it;
  // nullptr otherwise.
  const Value* knownInput(int i, int k) const {
    if (!hasInput(i, k))
      return nullptr;
    auto it = values_.find(model_.graph().node(i).input(k));
    return it == values_.end() ? nullptr : &it->second;
  }
  const Value& input(int i, int k) const {
    const auto& n = model_.graph().node(i);
    if (!hasInput(i, k))
      failAt(i, fmt::format("op '{}' needs input {}", n.op_type(), k));
    auto it = values_.find(n.input(k));
    if (it == values_.end())
      failAt(i, fmt::format("input '{}' is not produced by an earlier node (or is an output "
                            "strata does not map)",
                            n.input(k)));
    return it->second;
  }
  // anyLayout: a channels-last activation may be read (the ops that act on
  // each position's channels).
  // timeMajor: a [T, N, F] sequence may be read (an fc's MatMul).
  const Value& activation(int i, int k, bool padded = false, bool anyLayout = false,
                          bool timeMajor = false) const {
    const Value& v = input(i, k);
    if (!padded && (v.padH > 0 || v.padW > 0))
      failAt(i, fmt::format("op '{}' reads '{}', the output of a Pad: a Pad maps only into the "
                            "Conv, MaxPool or AveragePool that reads it",
                            model_.graph().node(i).op_type(), model_.graph().node(i).input(k)));
    if (v.kind != ValueKind::kActivation)
      failAt(i, fmt::format("op '{}' reads '{}' as an activation; it is {}",
                            model_.graph().node(i).op_type(), model_.graph().node(i).input(k),
                            v.kind == ValueKind::kTokens
                                ? "the token ids (only an embedding Gather reads them)"
                            : v.kind == ValueKind::kChannelGroups
                                ? "channels viewed as groups (of a channel shuffle, whose "
                                  "Transpose and Reshape back strata maps)"
                            : v.kind == ValueKind::kNormStat
                                ? "a step of an RMSNorm written out (its weight's Mul makes "
                                  "the rmsnorm)"
                                : "a constant"));
    if (!anyLayout && v.channelsLast)
      failAt(i, fmt::format("op '{}' reads '{}', a channels-last view of an activation (a "
                            "Transpose of [N, C, H, W] by perm [0, 2, 3, 1]): strata maps "
                            "LayerNormalization over its last axis, MatMul by a weight, "
                            "element-wise ops and the Transpose back by [0, 3, 1, 2] on it",
                            model_.graph().node(i).op_type(), model_.graph().node(i).input(k)));
    if (v.seq != SeqLayout::kBatchFirst && !(timeMajor && v.seq == SeqLayout::kTimeMajor))
      failAt(i, fmt::format("op '{}' reads '{}', {}", model_.graph().node(i).op_type(),
                            model_.graph().node(i).input(k), seqLayoutText(v.seq)));
    return v;
  }
  // What a sequence layout is and which ops strata maps on it.
  static std::string seqLayoutText(SeqLayout seq);
  Dims constant(int i, int k, const char* what) const {
    const Value& v = input(i, k);
    if (v.kind != ValueKind::kConstant)
      failAt(i, fmt::format("the {} '{}' must be an initializer (a weight), not computed by the "
                            "graph",
                            what, model_.graph().node(i).input(k)));
    Dims dims = tensorDims(*v.tensor);
    if (v.transposed)
      std::reverse(dims.begin(), dims.end());
    return dims;
  }

  // Records output 0 of node i and checks it against the graph's shape.
  void produce(int i, Value v);
  void checkShape(int i, const std::string& name, const Value& v) const;

  // ---- layers --------------------------------------------------------------
  std::string layerName(int i);
  std::vector<Shape> inputShapes(const Layer& l) const;
  // deriveLayer, its errors re-keyed to the ONNX node.
  void derive(size_t index);
  // Appends a layer of node i reading `inputs`; returns its activation value.
  Value addLayer(int i, LayerKind kind, const LayerSpec& spec, std::vector<int> inputs, int rank);

  Layer& layerOf(const Value& v) { return net_.layers[static_cast<size_t>(v.layer)]; }

  // ---- attributes ------------------------------------------------------------
  const onnx::AttributeProto* attr(int i, const char* name) const {
    for (const auto& a : model_.graph().node(i).attribute())
      if (a.name() == name)
        return &a;
    return nullptr;
  }
  int64_t intAttr(int i, const char* name, int64_t fallback) const {
    const auto* a = attr(i, name);
    return a ? a->i() : fallback;
  }
  std::vector<int64_t> intsAttr(int i, const char* name) const {
    const auto* a = attr(i, name);
    return a ? std::vector<int64_t>(a->ints().begin(), a->ints().end()) : std::vector<int64_t>{};
  }
  std::string stringAttr(int i, const char* name, const std::string& fallback) const {
    const auto* a = attr(i, name);
    return a ? a->s() : fallback;
  }

  // kernel / strides / pads / dilations of a 2-D window, as strata's one
  // stride and one dilation for both dims, and pads the same above and below
  // (pad) and left and right (padW).
  struct Window {
    int kernelH = 0, kernelW = 0, stride = 1, pad = 0, padW = 0, dilation = 1;
  };
  Window window(int i, const Dims& kernel) const;

  // ---- the mapping (onnx_ops.cpp) --------------------------------------------
  void mapNode(int i);
  // finish: the layers absorbed by folds (the K and V fcs of attentions,
  // the up fcs of SwiGLUs) leave the network.
  void dropAbsorbedLayers();
  void mapConv(int i);
  void mapPool(int i, PoolMode mode);
  void mapDropout(int i);
  void mapAdd(int i);
  void mapReshape(int i);
  void mapGemm(int i);
  void mapMatMul(int i);
  void mapGather(int i);
  void mapAttention(int i);
  void mapConcat(int i);
  void mapClip(int i);
  void mapMul(int i);
  void mapLayerScale(int i, int at);
  void mapReduceMean(int i);
  void mapPad(int i);
  // Slice and Split of an activation along its channels: slice layers.
  void mapSlice(int i);
  void mapSplit(int i);
  // Transpose of the two group axes of a kChannelGroups value.
  void mapGroupTranspose(int i);
  // Transpose of a C x H x W activation to channels-last and back: no
  // layer; false for any other permutation.
  bool mapLayoutTranspose(int i);
  // Transpose of a sequence between its layouts (SeqLayout): no layer;
  // false for any other permutation.
  bool mapSequenceTranspose(int i);
  // Concat of a class token (an Expand of a [1, k, C] initializer) before a
  // sequence: a class_token layer.
  void mapClassToken(int i, int at);
  // Gather of one position of a sequence along axis 1: a token layer.
  void mapTokenGather(int i);
  // Node i's Reshape of a C x H x W activation into channel groups, or of
  // channel groups back to C x H x W (a shuffle layer when they swapped):
  // maps it; false when it is no such reshape.
  bool mapChannelGroups(int i, const Value& x, const Dims& to);
  // An element-wise node (Add, Sub, Mul, Div, Pow, Erf, Tanh) of one
  // activation (or a kPointwise of it) and scalar constants: extends the
  // kPointwise value; false when node i is no such node.
  bool mapPointwiseChain(int i);
  // ---- shapes, derived constants and decomposed attention (onnx_attention.cpp)
  // The int64s of a kShape value or of an int64 constant stored in the
  // file; nullopt otherwise.
  std::optional<std::vector<int64_t>> shapeInts(const Value& v) const;
  // Node i computes shapes or constants only (Shape, Gather of a shape,
  // Unsqueeze, Concat, Cast, arithmetic, Range, Slice, Equal, Where of
  // those): maps it; false otherwise.
  bool mapShapeOrDerived(int i);
  // Node i reads a kAttention value, or splits an fc's output into Q, K and
  // V: maps it; false otherwise.
  bool startsProjectionHeads(int i);
  // The nodes reading value `name` (each input counted) that are no Shape.
  int readersBesidesShapes(const std::string& name) const;
  bool mapAttentionPart(int i);
  // The features of one head of kAttention value v, and the sizes of its
  // per-example axes (the batch's as kShape ints).
  int64_t headDim(const Value& v) const;
  Dims attentionDims(const Value& v) const;
  // The error of node i reading input `at`, a kAttention value, in a way
  // the attention fold does not follow.
  [[noreturn]] void cannotFollow(int i, int at, const std::string& why) const;
  // Node i is a step of rotary positions on a projection's heads, or of
  // repeat_kv: maps it; false otherwise. `a` is node i's kAttention input.
  bool mapRotaryOrRepeat(int i, int at);
  // Node i is a step of an RMSNorm or a LayerNorm written out (kNormStat),
  // or a Cast of an activation: maps it; false otherwise.
  bool mapNormPart(int i);
  // Mul of silu(gate(x)) by up(x), two fcs of one input: the SwiGLU MLP
  // (Shazeer 2020; Llama) as strata's one fc of both and a swiglu; false
  // when node i is no such Mul.
  bool mapSwiglu(int i);
  // Node i is a step of attention in windows (kWindow), the Pad or Slice
  // of a channels-last grid that starts one, or patch merging's Concat:
  // maps it; false otherwise (onnx_windows.cpp).
  bool mapWindowPart(int i);
  // Node i is a step of Swin V2's continuous position bias MLP on its
  // constant table of offsets (MatMul, bias Add, Relu, MatMul): maps it;
  // false otherwise (onnx_windows.cpp).
  bool mapPositionMlp(int i);
  // The dims of kWindow value v, the batch's included (kShape ints).
  Dims windowDims(const Value& v) const;
  // Node i is a step of MaxViT's partitions (onnx_partitions.cpp): an
  // activation cut into windows or put back, the two axes of a grid
  // swapped, or a step of the attention over its windows: maps it; false
  // otherwise (after replacing a finished attention's output read by node
  // i with its layer, which the other mappings then read).
  bool mapPartitionPart(int i);
  Dims groupedDims(const Value& v) const;
  Value partitionAttention(const Value& v);
  // The attention in windows that grid v (step 'G', unrolled, uncropped)
  // ends: its layer, as a channels-last activation.
  Value windowAttention(int i, const Value& v);
  // The spec of an attention in windows (Swin's or MaxViT's) whose QKV fc,
  // biases and position bias kWindow value v saw; fails naming node i when
  // strata's attention cannot hold them.
  LayerSpec windowSpec(int i, const Value& v) const;
  // The per-example dims a Reshape of x to `target` (kShape ints with the
  // batch) gives; fails naming node i when they do not follow.
  Dims reshapeTarget(int i, const Dims& from, const std::vector<int64_t>& target) const;
  // Makes the kPointwise value named `name` the layer it computes (gelu),
  // or fails at node `reader` naming what it is made of.
  void materialize(const std::string& name, int reader);
  // A pointwise activation of node i's input 0 (relu, gelu, sigmoid, ...).
  void mapPointwise(int i, LayerKind kind);
  // The one float of a constant input (Clip's min and max); nullopt when
  // the input is absent, computed or stored as external data.
  std::optional<double> scalarInput(int i, int k) const;

  // ---- the whole network (onnx_loader.cpp) -------------------------------------
  void finish();

  std::string path_;
  onnx::ModelProto model_;
  Network net_;
  std::unordered_map<std::string, Value> values_;
  std::unordered_map<std::string, const onnx::TensorShapeProto*> graphShapes_;
  std::unordered_map<std::string, int> consumers_;  // readers of each value (nodes, outputs)
  std::map<int, AttentionState> attention_;         // by layer
  std::set<int> absorbed_;                          // layers folded into another, dropped by finish
  std::vector<std::pair<int, int>> swiglus_;        // (gate fc, the swiglu reading it)
  std::vector<int> nodeOf_;                         // the node each layer came from
  std::set<std::string> usedNames_;
  std::map<std::string, int> embeddingTables_;  // initializer -> the embedding layer reading it
};

}  // namespace strata::onnx_import

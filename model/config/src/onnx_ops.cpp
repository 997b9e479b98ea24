// Maps each ONNX op onto strata layers (docs/onnx.md lists the supported
// ones): a node becomes one layer, folds into the layer before it (a bias
// Add, an attention's output projection), maps onto none (Identity, a
// flattening Flatten/Reshape), or is one clear error naming the node.
// onnx_loader.cpp reads the graph these nodes come from.
#include <algorithm>
#include <cmath>
#include <numbers>

#include "onnx_importer.h"

namespace strata::onnx_import {

namespace {

constexpr const char* kSupported =
    "Conv, MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool, ReduceMean (over H and W), "
    "Relu, Clip (ReLU6), Sigmoid, HardSigmoid, HardSwish, Gelu, element-wise GELU, Mul (of two "
    "activations; by a layer scale), Transpose to channels-last and back, BatchNormalization, "
    "LayerNormalization, Softmax (last), Dropout, Add (of two activations; a bias; a position "
    "table), Concat (channels; a class token before a sequence), Slice and Split (channels), a "
    "channel shuffle (Reshape, Transpose, Reshape), Pad (into a Conv or pool), Flatten, Reshape "
    "(flattening; patches to a sequence), Identity, Constant, Gemm, MatMul (by a weight), Gather "
    "(embedding; one position of a sequence), com.microsoft Attention, a decomposed attention "
    "(Split or separate Q, K and V fcs, Reshape, Transpose, MatMul, Softmax; rotary positions; "
    "repeat_kv; nn.MultiheadAttention's), an RMSNorm written out, the SwiGLU MLP (Mul of "
    "silu(gate(x)) by up(x)), Cast (between float types), shape computations "
    "(Shape, Gather, Unsqueeze, Concat, Range, ...)";

// What an op strata does not map usually is in an exported network, and the
// nearest pattern that maps; "" when there is nothing to add.
std::string nearestPattern(const std::string& op) {
  if (op == "Shape" || op == "Unsqueeze" || op == "Squeeze" || op == "Cast" ||
      op == "ConstantOfShape" || op == "Expand" || op == "Equal" || op == "Where")
    return "; it is part of a shape computation (torch.onnx.export writes x.size() and view() "
           "as Shape, Gather, Unsqueeze, Concat and Reshape): strata maps a Reshape only as a "
           "flattening, from an inline target shape";
  if (op == "Transpose")
    return "; a permutation of axes has no strata layer: strata's layers keep C x H x W, and "
           "map a channel shuffle's Transpose and the channels-last view [0, 2, 3, 1] and back "
           "[0, 3, 1, 2]";
  if (op == "Erf")
    return "; the exact GELU decomposed (Div, Erf, Add, Mul, Mul): export the Gelu op (opset "
           "20) or com.microsoft Gelu";
  if (op == "Div" || op == "Sub" || op == "Pow" || op == "Sqrt")
    return "; a normalisation written out: strata folds an RMSNorm (Pow 2, ReduceMean, Add eps, "
           "Sqrt, Div or Reciprocal, Mul by x, Mul by a weight) and a LayerNorm (ReduceMean, "
           "Sub, Pow 2, ReduceMean, Add eps, Sqrt, Div, Mul by a weight, Add of a bias) over the "
           "last axis of vectors and sequences, or LayerNormalization (opset 17)";
  return "";
}

// The per-example axis (with the batch, axis 0) that strata's channels are:
// 1 of [N, C, H, W] and [N, F], 2 of [N, T, F].
int64_t channelAxis(const Value& x) {
  return x.rank == 2 ? 2 : 1;
}

// Per-example dims with the batch in front: "[N, C, H, W]".
std::string withBatch(const Dims& dims) {
  return "[N, " + dimsText(dims).substr(1);
}

}  // namespace

void Importer::mapNode(int i) {
  const auto& n = model_.graph().node(i);
  const std::string& op = n.op_type();
  const std::string& domain = n.domain();
  const bool standard = domain.empty() || domain == "ai.onnx";
  const bool microsoft = domain == "com.microsoft";
  auto unsupported = [&](const std::string& why) {
    failAt(i, fmt::format("op '{}'{} cannot be mapped to a strata layer{} (supported: {})", op,
                          standard ? "" : " (domain " + domain + ")",
                          why.empty() && standard ? nearestPattern(op) : why, kSupported));
  };
  // Shapes and constants, an attention's parts, element-wise chains
  // (onnx_attention.cpp and below) come before the ops' own mappings.
  if (standard &&
      (mapPositionMlp(i) || mapShapeOrDerived(i) || mapPartitionPart(i) || mapWindowPart(i) ||
       mapAttentionPart(i) || mapPointwiseChain(i) || mapNormPart(i)))
    return;
  // A kPointwise input ends its element-wise chain here.
  for (const auto& name : n.input())
    if (auto it = values_.find(name);
        it != values_.end() && it->second.kind == ValueKind::kPointwise)
      materialize(name, i);
  if (standard && op == "Transpose" && input(i, 0).kind == ValueKind::kChannelGroups) {
    mapGroupTranspose(i);
  } else if (standard && op == "Transpose" && input(i, 0).kind == ValueKind::kActivation) {
    if (!mapLayoutTranspose(i) && !mapSequenceTranspose(i))
      unsupported("");
  } else if (standard && op == "Transpose" && input(i, 0).kind == ValueKind::kConstant) {
    // A weight transposed for a MatMul (torch.onnx.export's nn.Linear on
    // sequences): the same initializer, its dims the other way round.
    Value v = input(i, 0);
    const Dims dims = constant(i, 0, "weight");
    const auto perm = intsAttr(i, "perm");
    if (dims.size() != 2 || !(perm.empty() || perm == Dims{1, 0}))
      failAt(i, fmt::format("Transpose of the constant '{}' {} by perm {}: strata maps the "
                            "transpose of a matrix (a weight)",
                            n.input(0), dimsText(dims), dimsText(perm)));
    v.transposed = !v.transposed;
    produce(i, v);
  } else if (standard && op == "Identity") {
    produce(i, input(i, 0));
  } else if (standard && op == "Constant") {
    const auto* a = attr(i, "value");
    if (!a || !a->has_t())
      unsupported(": only a Constant with a tensor `value` is read");
    checkTensor(a->t(), nodeKey(i));
    Value v;
    v.kind = ValueKind::kConstant;
    v.tensor = &a->t();
    produce(i, v);
  } else if (standard && op == "Conv") {
    mapConv(i);
  } else if (standard && (op == "MaxPool" || op == "AveragePool")) {
    mapPool(i, op == "MaxPool" ? PoolMode::kMax : PoolMode::kAvg);
  } else if (standard && (op == "GlobalAveragePool" || op == "GlobalMaxPool")) {
    const Value& x = activation(i, 0);
    if (x.rank != 3 || x.flat)
      failAt(i, "a global pool reads C x H x W");
    LayerSpec s;
    s.global = true;
    s.poolMode = op == "GlobalMaxPool" ? PoolMode::kMax : PoolMode::kAvg;
    produce(i, addLayer(i, LayerKind::kPool, s, {x.layer}, 3));
  } else if (standard && op == "Relu") {
    mapPointwise(i, LayerKind::kRelu);
  } else if ((standard || microsoft) && op == "Gelu") {
    mapPointwise(i, LayerKind::kGelu);
  } else if (standard && op == "Sigmoid") {
    mapPointwise(i, LayerKind::kSigmoid);
  } else if (standard && op == "HardSwish") {
    mapPointwise(i, LayerKind::kHardSwish);
  } else if (standard && op == "HardSigmoid") {
    // strata's hardsigmoid is PyTorch's, relu6(x + 3) / 6: ONNX's max(0,
    // min(1, alpha x + beta)) with alpha 1/6 and beta 1/2 (ONNX's defaults,
    // 0.2 and 0.5, are Keras's).
    const auto* alpha = attr(i, "alpha");
    const auto* beta = attr(i, "beta");
    const double a = alpha ? alpha->f() : 0.2, b = beta ? beta->f() : 0.5;
    if (std::fabs(a - 1.0 / 6) > 1e-6 || std::fabs(b - 0.5) > 1e-6)
      failAt(i, fmt::format("HardSigmoid with alpha {} and beta {}: strata's hardsigmoid is "
                            "relu6(x + 3) / 6 (alpha 1/6, beta 0.5, as PyTorch exports it)",
                            a, b));
    mapPointwise(i, LayerKind::kHardSigmoid);
  } else if (standard && op == "Clip") {
    mapClip(i);
  } else if (standard && op == "Mul") {
    mapMul(i);
  } else if (standard && op == "Concat") {
    mapConcat(i);
  } else if (standard && op == "ReduceMean") {
    mapReduceMean(i);
  } else if (standard && op == "Slice") {
    mapSlice(i);
  } else if (standard && op == "Split") {
    mapSplit(i);
  } else if (standard && op == "Pad") {
    mapPad(i);
  } else if (standard && op == "Dropout") {
    mapDropout(i);
  } else if (standard && op == "BatchNormalization") {
    const Value x = activation(i, 0);
    if (x.flat || x.rank == 2)
      failAt(i,
             "BatchNormalization normalises dim 1: strata maps it on C x H x W or on "
             "vectors [F]");
    const Dims scale = constant(i, 1, "scale");
    if (scale.size() != 1 || scale[0] != shapeOf(x).c)
      failAt(i,
             fmt::format("scale {} does not match the {} channels", dimsText(scale), shapeOf(x).c));
    produce(i, addLayer(i, LayerKind::kBatchNorm, {}, {x.layer}, x.rank));
  } else if (standard && op == "LayerNormalization") {
    const Value x = activation(i, 0, false, true);
    const int64_t axis = intAttr(i, "axis", -1);
    const int64_t rank = x.flat ? 2 : x.rank + 1;
    // A C x 1 x 1 map flattened (a pooled head's vector, MaxViT's) is one
    // position: its layernorm is over the C features.
    const bool vector = x.flat && shapeOf(x).h == 1 && shapeOf(x).w == 1;
    if ((x.flat && !vector) || (x.rank == 3 && !x.channelsLast && !vector) ||
        (axis != -1 && axis != rank - 1))
      failAt(i, fmt::format("LayerNormalization over axis {} of a rank-{} tensor: strata "
                            "normalises the features (last axis) of vectors, sequences and "
                            "channels-last maps [N, H, W, C]",
                            axis, rank));
    const Dims scale = constant(i, 1, "scale");
    if (scale.size() != 1 || scale[0] != shapeOf(x).c)
      failAt(i,
             fmt::format("scale {} does not match the {} features", dimsText(scale), shapeOf(x).c));
    Value v = addLayer(i, LayerKind::kLayerNorm, {}, {x.layer}, x.rank);
    copyLayout(v, x);
    v.flat = x.flat;
    produce(i, v);
  } else if (standard && op == "Softmax") {
    const Value x = activation(i, 0);
    Value v = addLayer(i, LayerKind::kSoftmax, {}, {x.layer}, x.rank);
    v.flat = x.flat;
    produce(i, v);
  } else if (standard && op == "Add") {
    mapAdd(i);
  } else if (standard && op == "Flatten") {
    const Value x = activation(i, 0);
    if (intAttr(i, "axis", 1) != 1)
      failAt(i, "Flatten maps only with axis 1 (one vector per example)");
    Value v = x;
    v.flat = x.flat || x.rank > 1;
    v.rank = 1;
    produce(i, v);
  } else if (standard && op == "Reshape") {
    mapReshape(i);
  } else if (standard && op == "Gemm") {
    mapGemm(i);
  } else if (standard && op == "MatMul") {
    mapMatMul(i);
  } else if (standard && op == "Gather") {
    mapGather(i);
  } else if (microsoft && op == "Attention") {
    mapAttention(i);
  } else {
    unsupported("");
  }
}

void Importer::mapConv(int i) {
  const Value x = activation(i, 0, true);
  if (x.rank != 3 || x.flat)
    failAt(i, "Conv maps on C x H x W activations only");
  const Dims w = constant(i, 1, "weight");
  if (w.size() != 4)
    failAt(i, fmt::format("weight {}: strata maps 2-D convolutions [M, C/group, kH, kW]",
                          dimsText(w)));
  auto kernel = intsAttr(i, "kernel_shape");
  if (kernel.empty())
    kernel = {w[2], w[3]};
  if (kernel != Dims{w[2], w[3]})
    failAt(i, fmt::format("kernel_shape {} differs from the weight's {}", dimsText(kernel),
                          dimsText(w)));
  Window win = window(i, kernel);
  win.pad += x.padH;
  win.padW += x.padW;
  LayerSpec s;
  s.filters = toInt(i, w[0], "filters");
  s.kernelH = win.kernelH;
  s.kernelW = win.kernelW;
  s.stride = win.stride;
  s.pad = win.pad;
  if (win.padW != win.pad)
    s.padW = win.padW;
  s.dilation = win.dilation;
  const int64_t group = intAttr(i, "group", 1);
  s.groups = toInt(i, group, "group");
  s.bias = hasInput(i, 2);
  if (w[1] * group != shapeOf(x).c)
    failAt(i, fmt::format("weight {} with group {} does not read the {} input channels",
                          dimsText(w), group, shapeOf(x).c));
  produce(i, addLayer(i, LayerKind::kConv, s, {x.layer}, 3));
}

void Importer::mapPool(int i, PoolMode mode) {
  const Value x = activation(i, 0, true);
  if (x.rank != 3 || x.flat)
    failAt(i, "a pool maps on C x H x W activations only");
  Window win = window(i, intsAttr(i, "kernel_shape"));
  // A Pad's zeros before an average pool are counted in its windows, as
  // PyTorch's count_include_pad (strata's pool prices every window alike).
  win.pad += x.padH;
  win.padW += x.padW;
  if (win.padW != win.pad || win.dilation != 1)
    failAt(i, fmt::format("a pool with pads {} x {} and dilation {}: strata's pool pads every "
                          "side alike and has no dilation",
                          win.pad, win.padW, win.dilation));
  LayerSpec s;
  if (intAttr(i, "ceil_mode", 0) != 0) {
    // Max pooling rounds up as PyTorch does (ceilMode); an average is
    // accepted where rounding up gives the same size as rounding down.
    const Shape& in = shapeOf(x);
    for (auto [size, k] : {std::pair{in.h, win.kernelH}, std::pair{in.w, win.kernelW}}) {
      const int64_t span = int64_t{size} + 2 * win.pad - k;
      if (span >= 0 && span % win.stride != 0)
        s.ceilMode = true;
    }
    if (s.ceilMode && mode != PoolMode::kMax)
      failAt(i,
             "ceil_mode 1 rounds this average pool's output up; strata rounds an average "
             "pool's down (max pools round either way)");
  }
  s.poolMode = mode;
  s.kernelH = win.kernelH;
  s.kernelW = win.kernelW;
  s.stride = win.stride;
  s.pad = win.pad;
  produce(i, addLayer(i, LayerKind::kPool, s, {x.layer}, 3));
}

void Importer::mapDropout(int i) {
  const Value x = activation(i, 0, false, true);
  LayerSpec s;
  s.dropoutRate = 0.5;                     // the ONNX default
  if (const auto* a = attr(i, "ratio")) {  // before opset 12
    s.dropoutRate = a->f();
  } else if (hasInput(i, 1)) {
    const Value& r = input(i, 1);
    if (r.kind != ValueKind::kConstant)
      failAt(i, "the ratio must be a constant");
    // A ratio stored as external data is not read: the default stands (the
    // rate changes no cost).
    if (auto value = inlineScalar(*r.tensor))
      s.dropoutRate = *value;
  }
  if (!(s.dropoutRate >= 0 && s.dropoutRate < 1))
    failAt(i, fmt::format("ratio {} is not in [0, 1)", s.dropoutRate));
  Value v = addLayer(i, LayerKind::kDropout, s, {x.layer}, x.rank);
  v.flat = x.flat;
  copyLayout(v, x);
  produce(i, v);
}

void Importer::mapAdd(int i) {
  const Value a = input(i, 0);
  const Value b = input(i, 1);
  const auto& n = model_.graph().node(i);
  if (a.kind == ValueKind::kActivation && b.kind == ValueKind::kActivation) {
    activation(i, 0, false, true);  // a sequence in another layout is refused
    activation(i, 1, false, true);
    const Dims da = dimsOf(a), db = dimsOf(b);
    if (da != db || !sameLayout(a, b))
      failAt(i, fmt::format("Add of {} and {}: strata adds tensors of one shape (no "
                            "broadcasting)",
                            dimsText(da), dimsText(db)));
    Value v = addLayer(i, LayerKind::kAdd, {}, {a.layer, b.layer}, a.rank);
    v.flat = a.flat;
    copyLayout(v, a);
    produce(i, v);
    return;
  }
  const bool aAct = a.kind == ValueKind::kActivation;
  const Value& x = aAct ? a : b;
  const Value& other = aAct ? b : a;
  const std::string& xName = n.input(aAct ? 0 : 1);
  // A learned table of the activation's shape ([1, T, F] or [T, F] of a
  // sequence, [1, C, H, W] of C x H x W): a pos_embedding layer (ViT's
  // positions, added to its class token and patches).
  if (x.kind == ValueKind::kActivation && other.kind == ValueKind::kConstant && x.rank >= 2 &&
      !x.flat && !x.channelsLast && x.seq == SeqLayout::kBatchFirst) {
    Dims table = tensorDims(*other.tensor);
    if (table.size() == dimsOf(x).size() + 1 && table.front() == 1)
      table.erase(table.begin());
    if (table == dimsOf(x)) {
      produce(i, addLayer(i, LayerKind::kPosEmbedding, {}, {x.layer}, x.rank));
      return;
    }
  }
  if (x.kind != ValueKind::kActivation ||
      (other.kind != ValueKind::kConstant && other.kind != ValueKind::kPositions))
    failAt(i,
           "Add maps for two activations, a bias after an fc, or a position table after "
           "an embedding");
  if (x.layer < 0)
    failAt(i, "Add of the network input and a constant has no strata layer");
  if (consumers_[xName] != 1)
    failAt(i, fmt::format("'{}' folds into layer '{}' only when this Add is its one reader", xName,
                          layerOf(x).name));
  Layer& l = layerOf(x);
  if (other.kind == ValueKind::kPositions) {
    // GPT-2's wte(tokens) + wpe(positions): one strata embedding.
    if (l.kind != LayerKind::kEmbedding || l.spec.positions != 0 || other.width != l.spec.outputs)
      failAt(i, fmt::format("a position table of {} x {} adds only to an embedding of {} "
                            "features without positions; '{}' is {}",
                            other.rows, other.width, other.width, l.name, toString(l.kind)));
    l.spec.positions = toInt(i, other.rows, "positions");
    derive(static_cast<size_t>(x.layer));
    produce(i, x);
    return;
  }
  // A bias: [out], or [1, ..., out].
  const Dims bias = tensorDims(*other.tensor);
  const int64_t count = elementsOf(bias);
  auto attention = attention_.find(x.layer);
  if (l.kind == LayerKind::kFc && !l.spec.bias && (x.rank <= 2 || x.channelsLast) && !x.flat &&
      count == l.spec.outputs && !bias.empty() && bias.back() == count) {
    l.spec.bias = true;
    derive(static_cast<size_t>(x.layer));
  } else if (attention != attention_.end() && attention->second.projection &&
             !attention->second.outputBias && count == shapeOf(x).c && !bias.empty() &&
             bias.back() == count) {
    attention->second.outputBias = true;
  } else {
    failAt(i, fmt::format("Add of '{}' and the constant {}: a constant adds only as the bias "
                          "of an fc without one (layer '{}' is {}{})",
                          xName, dimsText(bias), l.name, toString(l.kind),
                          l.kind == LayerKind::kFc && l.spec.bias ? " with a bias" : ""));
  }
  produce(i, x);
}

void Importer::mapReshape(int i) {
  const Value& target = input(i, 1);
  if (input(i, 0).kind == ValueKind::kChannelGroups) {
    // The last step of a channel shuffle (or the groups put back).
    const Value x = input(i, 0);
    const Shape s = shapeOf(x);
    const int64_t g = x.groups, c = s.c / g;
    const Dims from = x.swapped ? Dims{c, g, s.h, s.w} : Dims{g, c, s.h, s.w};
    const auto ints = shapeInts(target);
    if (!ints || !mapChannelGroups(i, x, reshapeTarget(i, from, *ints)))
      failAt(i, fmt::format("Reshape of channels viewed as groups {}: strata maps the reshape "
                            "back to [N, {}, {}, {}] that ends a channel shuffle",
                            withBatch(from), s.c, s.h, s.w));
    return;
  }
  if (const Value& rows = input(i, 0);
      rows.kind == ValueKind::kActivation && rows.seq == SeqLayout::kMergedRows) {
    // An attention's [T N, D] output rows back to [T, N, D].
    const Shape& s = shapeOf(rows);
    const auto ints = shapeInts(target);
    if (!ints || *ints != std::vector<int64_t>{s.h, kBatchDim, s.c})
      failAt(i, fmt::format("Reshape of '{}', an attention's output as [T N, D] rows (T {}, D "
                            "{}): strata maps the Reshape back to [T, N, D] only",
                            model_.graph().node(i).input(0), s.h, s.c));
    Value v = rows;
    v.seq = SeqLayout::kTimeMajor;
    produce(i, v);
    return;
  }
  const Value x = activation(i, 0);
  const int64_t elements = shapeOf(x).elements();
  std::optional<bool> flattens;
  if (target.kind == ValueKind::kShape) {
    const Dims to = reshapeTarget(i, dimsOf(x), target.ints);
    flattens = to == Dims{elements};
    // C x H x W as [C, H W]: the first step of a sequence of its positions
    // (ViT's patches: x.reshape(n, d, h w).permute(0, 2, 1)).
    if (const Shape& s = shapeOf(x); x.rank == 3 && !x.flat && !x.channelsLast && s.w > 1 &&
                                     to == Dims{s.c, int64_t{s.h} * s.w}) {
      Value v = x;
      v.rank = 2;
      v.seq = SeqLayout::kFeaturesFirst;
      produce(i, v);
      return;
    }
    if (!*flattens && mapChannelGroups(i, x, to))
      return;
    if (!*flattens)
      failAt(i, fmt::format("Reshape to {} is not a flattening of {} into one vector per "
                            "example; no other reshape maps",
                            dimsText(to), dimsText(dimsOf(x))));
  } else if (target.kind == ValueKind::kConstant) {
    if (auto t = inlineInt64s(*target.tensor)) {
      // [N or 0 or -1, elements or -1]: one vector per example.
      const auto& d = *t;
      flattens = d.size() == 2 && (d[1] == elements || (d[1] == -1 && d[0] != -1));
      if (!*flattens && d.size() == 5 && (d[0] == -1 || d[0] == 0) &&
          mapChannelGroups(i, x, reshapeTarget(i, dimsOf(x), d)))
        return;
      if (!*flattens)
        failAt(i, fmt::format("Reshape to {} is not a flattening of {} into one vector per "
                              "example; no other reshape maps",
                              dimsText(d), dimsText(dimsOf(x))));
    }
  }
  if (!flattens) {
    // The target shape is computed or external: the graph's shape decides.
    const auto& n = model_.graph().node(i);
    auto it = graphShapes_.find(n.output(0));
    if (it == graphShapes_.end() || it->second->dim_size() != 2 ||
        !it->second->dim(1).has_dim_value() || it->second->dim(1).dim_value() != elements)
      failAt(i,
             "Reshape maps only as a flattening into one vector per example, and neither "
             "its target shape nor the graph's shape of its output says it is one");
  }
  Value v = x;
  v.flat = x.flat || x.rank > 1;
  v.rank = 1;
  produce(i, v);
}

void Importer::mapGemm(int i) {
  const Value x = activation(i, 0);
  if (intAttr(i, "transA", 0) != 0)
    failAt(i,
           "Gemm with transA 1 cannot be mapped (the activation is A, one row per "
           "example)");
  if (x.rank != 1)
    failAt(i, "Gemm reads one vector per example");
  const Dims w = constant(i, 1, "weight B");
  if (w.size() != 2)
    failAt(i, fmt::format("weight {} must be a matrix", dimsText(w)));
  const bool transB = intAttr(i, "transB", 0) != 0;
  const int64_t in = transB ? w[1] : w[0];
  const int64_t out = transB ? w[0] : w[1];
  if (in != shapeOf(x).elements())
    failAt(i, fmt::format("weight {} (transB {}) reads {} inputs, the activation has {}",
                          dimsText(w), transB ? 1 : 0, in, shapeOf(x).elements()));
  LayerSpec s;
  s.outputs = toInt(i, out, "outputs");
  s.flatten = true;
  s.bias = hasInput(i, 2);
  produce(i, addLayer(i, LayerKind::kFc, s, {x.layer}, 1));
}

void Importer::mapMatMul(int i) {
  const auto& n = model_.graph().node(i);
  const Value& a = input(i, 0);
  const Value& b = input(i, 1);
  if (a.kind == ValueKind::kActivation && b.kind == ValueKind::kActivation)
    failAt(i, fmt::format("op 'MatMul' of two activations ('{}' and '{}') cannot be mapped to a "
                          "strata layer: an attention strata folds has Q and K split from one "
                          "fc's output [T, 3 D] (Split) or computed by fcs of their own, the "
                          "heads split out by Reshape and Transpose (docs/onnx.md); else only a "
                          "MatMul by a weight initializer "
                          "maps, to an fc (supported: {})",
                          n.input(0), n.input(1), kSupported));
  const Value x = activation(i, 0, false, true, true);
  const Dims w = constant(i, 1, "weight");
  if (w.size() != 2)
    failAt(i, fmt::format("weight {} must be a matrix [in, out]", dimsText(w)));
  const Shape& in = shapeOf(x);
  // The output projection a com.microsoft Attention leaves to the next MatMul.
  if (auto at = attention_.find(x.layer); at != attention_.end() && !at->second.projection &&
                                          consumers_[n.input(0)] == 1 && w == Dims{in.c, in.c}) {
    at->second.projection = true;
    produce(i, x);
    return;
  }
  LayerSpec s;
  s.outputs = toInt(i, w[1], "outputs");
  s.bias = false;  // a following Add of a constant folds in as the bias
  // x times an embedding's token table transposed: the output layer tied to
  // it (GPT-2's lm_head, F.linear(x, wte.weight)).
  if (const Value& wv = input(i, 1); wv.transposed && wv.tensor && x.rank == 2)
    if (auto e = embeddingTables_.find(wv.tensor->name()); e != embeddingTables_.end())
      s.tiedTo = e->second;
  if (x.seq == SeqLayout::kTimeMajor && x.rank != 2)
    failAt(i, "MatMul of a time-major tensor maps on sequences [T, N, F] only");
  if (x.rank == 1) {
    if (w[0] != in.elements())
      failAt(i, fmt::format("weight {} reads {} inputs, the activation has {}", dimsText(w), w[0],
                            in.elements()));
    s.flatten = true;
    produce(i, addLayer(i, LayerKind::kFc, s, {x.layer}, 1));
  } else if (x.rank == 2) {
    if (w[0] != in.c)
      failAt(i, fmt::format("weight {} reads {} features, the activation has {}", dimsText(w), w[0],
                            in.c));
    s.flatten = false;  // the same weights at every position
    Value v = addLayer(i, LayerKind::kFc, s, {x.layer}, 2);
    v.seq = x.seq;  // [T, N, F] stays time-major
    produce(i, v);
  } else if (x.channelsLast && !x.flat) {
    // [H, W, C] by [C, F]: the same weights at every position of C x H x W.
    if (w[0] != in.c)
      failAt(i, fmt::format("weight {} reads {} channels, the activation has {}", dimsText(w), w[0],
                            in.c));
    s.flatten = false;
    Value v = addLayer(i, LayerKind::kFc, s, {x.layer}, 3);
    copyLayout(v, x);
    produce(i, v);
  } else {
    failAt(i,
           "MatMul maps on vectors [F], sequences [T, F] and channels-last maps [H, W, C] "
           "only");
  }
}

void Importer::mapGather(int i) {
  if (input(i, 0).kind == ValueKind::kActivation)
    return mapTokenGather(i);
  const Dims table = constant(i, 0, "table (data)");
  if (table.size() != 2)
    failAt(i, fmt::format("Gather maps as an embedding of a [rows, features] table, got {}",
                          dimsText(table)));
  if (intAttr(i, "axis", 0) != 0)
    failAt(i, "Gather maps as an embedding only along axis 0");
  const Value& ids = input(i, 1);
  if (ids.kind == ValueKind::kTokens) {
    LayerSpec s;
    s.vocab = toInt(i, table[0], "vocabulary");
    s.outputs = toInt(i, table[1], "features");
    const Value v = addLayer(i, LayerKind::kEmbedding, s, {-1}, 2);
    embeddingTables_[model_.graph().node(i).input(0)] = v.layer;
    if (const Value& t = input(i, 0); t.tensor)
      embeddingTables_[t.tensor->name()] = v.layer;
    produce(i, v);
  } else if (ids.kind == ValueKind::kConstant || ids.kind == ValueKind::kDerived) {
    Value v;
    v.kind = ValueKind::kPositions;
    v.rows = table[0];
    v.width = table[1];
    produce(i, v);
  } else {
    failAt(i,
           "Gather maps as an embedding of the network's token ids, or as a position "
           "table at ids computed from constants and shapes");
  }
}

void Importer::mapAttention(int i) {
  const Value x = activation(i, 0);
  if (x.rank != 2)
    failAt(i, "Attention reads sequences [T, D]");
  const int d = shapeOf(x).c;
  const Dims w = constant(i, 1, "weights");
  if (w != Dims{d, 3 * int64_t{d}})
    failAt(i, fmt::format("weights {}: strata maps Q, K and V of the width {} ([{}, {}])",
                          dimsText(w), d, d, 3 * int64_t{d}));
  const auto& n = model_.graph().node(i);
  for (int k = 3; k < n.input_size(); ++k)
    if (!n.input(k).empty())
      failAt(i, fmt::format("input {} ('{}': mask, past or bias of the scores) cannot be "
                            "mapped",
                            k, n.input(k)));
  if (auto sizes = intsAttr(i, "qkv_hidden_sizes"); !sizes.empty() && sizes != Dims{d, d, d})
    failAt(i, fmt::format("qkv_hidden_sizes {}: strata's Q, K and V have the width {}",
                          dimsText(sizes), d));
  LayerSpec s;
  if (!attr(i, "num_heads"))
    failAt(i, "Attention needs num_heads");
  s.heads = toInt(i, intAttr(i, "num_heads", 0), "num_heads");
  s.causal = intAttr(i, "unidirectional", 0) != 0;
  s.bias = hasInput(i, 2);
  if (s.bias && elementsOf(constant(i, 2, "bias")) != 3 * int64_t{d})
    failAt(i, fmt::format("bias {} is not [{}]", dimsText(constant(i, 2, "bias")), 3 * d));
  const Value v = addLayer(i, LayerKind::kAttention, s, {x.layer}, 2);
  attention_[v.layer] = {};
  produce(i, v);
}

namespace {

bool near(const std::optional<double>& v, double want) {
  return v && std::fabs(*v - want) <= 1e-4 * std::fabs(want);
}

// How many terms have `op` and a constant near `value` (nullopt: none).
int countTerms(const std::map<int, PointwiseTerm>& terms, const std::string& op,
               std::optional<double> value) {
  int n = 0;
  for (const auto& [node, t] : terms)
    if (t.op == op && (value ? near(t.constant, *value) : !t.constant))
      ++n;
  return n;
}

// Whether `terms` are the exact GELU, x/√2 -> Erf -> +1 -> ·x -> ·½ (or x·(1/√2)),
// or its tanh form ½·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))), as torch.onnx.export
// writes them (x³ as x·x·x or Pow(x, 3)).
bool isGelu(const std::map<int, PointwiseTerm>& t) {
  const size_t n = t.size();
  const int half = countTerms(t, "Mul", 0.5), one = countTerms(t, "Add", 1.0);
  const int xTimes = countTerms(t, "Mul", std::nullopt);
  const bool erf =
      n == 5 && countTerms(t, "Erf", std::nullopt) == 1 && one == 1 && half == 1 && xTimes == 1 &&
      (countTerms(t, "Div", std::sqrt(2.0)) == 1 || countTerms(t, "Mul", 1 / std::sqrt(2.0)) == 1);
  const bool cube =
      (n == 9 && xTimes == 3) || (n == 8 && xTimes == 1 && countTerms(t, "Pow", 3.0) == 1);
  const bool tanh = cube && countTerms(t, "Tanh", std::nullopt) == 1 && one == 1 && half == 1 &&
                    countTerms(t, "Add", std::nullopt) == 1 &&
                    countTerms(t, "Mul", 0.044715) == 1 &&
                    countTerms(t, "Mul", std::sqrt(2.0 / std::numbers::pi)) == 1;
  return erf || tanh;
}

}  // namespace

bool Importer::mapPointwiseChain(int i) {
  const auto& n = model_.graph().node(i);
  const std::string& op = n.op_type();
  const bool unary = op == "Erf" || op == "Tanh";
  const bool binary = op == "Add" || op == "Sub" || op == "Mul" || op == "Div" || op == "Pow";
  if ((!unary && !binary) || n.input_size() != (unary ? 1 : 2))
    return false;
  // The operands: x (an activation or a kPointwise of it) or a scalar constant.
  const Value* source = nullptr;
  bool chained = false, twice = false, rank0 = false;
  std::optional<double> constant;
  std::map<int, PointwiseTerm> terms;
  for (int k = 0; k < n.input_size(); ++k) {
    auto it = values_.find(n.input(k));
    if (it == values_.end())
      return false;
    const Value& v = it->second;
    if (v.kind == ValueKind::kConstant) {
      constant = inlineScalar(*v.tensor);
      if (!constant)
        return false;  // a tensor of constants: a bias, a gate, a scale (the other mappings)
      rank0 = v.tensor->dims_size() == 0;
      continue;
    }
    if (v.kind != ValueKind::kActivation && v.kind != ValueKind::kPointwise)
      return false;
    if (v.padH > 0 || v.padW > 0)
      return false;
    if (source) {
      if (source->layer != v.layer)
        return false;  // two activations: add, mul (the other mappings)
      twice = true;
    }
    if (v.kind == ValueKind::kPointwise)
      chained = true;
    source = &v;
    terms.insert(v.terms.begin(), v.terms.end());
  }
  if (!source)
    return false;
  // Whether this node starts a chain: Erf, Tanh, Pow and Div of x always do
  // (no other mapping has them); Add, Sub and Mul of x by a scalar (a rank-0
  // constant, as torch.onnx.export writes them) or of x by x (x·x of GELU's
  // tanh form) too, while Add of a bias (even of one output) and Mul of a
  // gate or of a sigmoid keep their own mappings.
  if (!chained && !twice && !unary && op != "Pow" && op != "Div" && !(constant && rank0))
    return false;
  Value v = *source;
  v.kind = ValueKind::kPointwise;
  v.terms = std::move(terms);
  v.terms[i] = PointwiseTerm{op, twice ? std::nullopt : constant};
  v.node = i;
  values_[n.output(0)] = v;
  return true;
}

void Importer::materialize(const std::string& name, int reader) {
  const Value p = values_.at(name);
  std::string ops;
  for (const auto& [node, t] : p.terms)
    ops += (ops.empty() ? "" : ", ") + t.op + (t.constant ? fmt::format(" {:g}", *t.constant) : "");
  // x · x alone is a mul of the activation by itself.
  const bool square = p.terms.size() == 1 && countTerms(p.terms, "Mul", std::nullopt) == 1;
  // tanh(x) alone (MaxViT's and BERT's pooler heads) is a tanh layer.
  const bool tanh = p.terms.size() == 1 && countTerms(p.terms, "Tanh", std::nullopt) == 1;
  if (!square && !tanh && !isGelu(p.terms))
    failAt(reader, fmt::format("'{}' is an element-wise function of '{}' made of [{}], which is "
                               "no strata layer: strata folds the exact GELU (Div by √2, Erf, Add "
                               "1, Mul by x, Mul by 0.5) and its tanh form into gelu, and a Tanh "
                               "alone into tanh",
                               name, p.layer < 0 ? std::string("input") : layerOf(p).name, ops));
  const LayerKind kind = square ? LayerKind::kMul : tanh ? LayerKind::kTanh : LayerKind::kGelu;
  Value v =
      addLayer(p.node, kind, {},
               square ? std::vector<int>{p.layer, p.layer} : std::vector<int>{p.layer}, p.rank);
  v.flat = p.flat;
  copyLayout(v, p);
  // Every name of the chain that reads as this value now reads the layer.
  for (auto& [other, value] : values_)
    if (value.kind == ValueKind::kPointwise && value.node == p.node)
      value = v;
}

void Importer::mapPointwise(int i, LayerKind kind) {
  const Value x = activation(i, 0, false, true);
  Value v = addLayer(i, kind, {}, {x.layer}, x.rank);
  v.flat = x.flat;
  copyLayout(v, x);
  produce(i, v);
}

std::optional<double> Importer::scalarInput(int i, int k) const {
  if (!hasInput(i, k))
    return std::nullopt;
  const Value& v = input(i, k);
  if (v.kind != ValueKind::kConstant)
    failAt(i,
           fmt::format("input {} ('{}') must be a constant", k, model_.graph().node(i).input(k)));
  const auto value = inlineScalar(*v.tensor);
  if (!value)
    failAt(i, fmt::format("input {} ('{}') must be one float stored in the file", k,
                          model_.graph().node(i).input(k)));
  return value;
}

// Clip(x, 0, 6) is ReLU6 (MobileNetV2), Clip(x, 0) a ReLU; min and max are
// inputs 1 and 2 since opset 11, attributes before.
void Importer::mapClip(int i) {
  std::optional<double> lo = scalarInput(i, 1), hi = scalarInput(i, 2);
  if (const auto* a = attr(i, "min"))
    lo = a->f();
  if (const auto* a = attr(i, "max"))
    hi = a->f();
  const bool unbounded = !hi || *hi >= 3.4e38;  // absent, or float's largest
  if (lo && *lo == 0 && unbounded)
    return mapPointwise(i, LayerKind::kRelu);
  if (lo && *lo == 0 && hi && *hi == 6)
    return mapPointwise(i, LayerKind::kRelu6);
  const auto text = [](const std::optional<double>& v) {
    return v ? fmt::format("{}", *v) : std::string("none");
  };
  failAt(i, fmt::format("Clip to [{}, {}]: strata maps Clip to [0, 6] (relu6) and to [0, none] "
                        "(relu)",
                        text(lo), text(hi)));
}

// Concatenation along the channels of C x H x W, or the features of
// vectors and sequences.
void Importer::mapConcat(int i) {
  const auto& n = model_.graph().node(i);
  for (int k = 0; k < n.input_size(); ++k)
    if (hasInput(i, k) && input(i, k).kind == ValueKind::kDerived && input(i, k).expanded)
      return mapClassToken(i, k);
  const Value first = activation(i, 0);
  if (n.input_size() == 1)
    return produce(i, first);           // torch.cat of a list of one (DenseNet's first layer)
  const int64_t rank = first.rank + 1;  // with the batch
  int64_t axis = intAttr(i, "axis", 1);
  if (axis < 0)
    axis += rank;
  if (first.flat || axis != channelAxis(first))
    failAt(i, fmt::format("Concat along axis {} of a rank-{} tensor: strata concatenates "
                          "channels (axis 1 of [N, C, H, W] and [N, F], 2 of [N, T, F])",
                          intAttr(i, "axis", 1), rank));
  std::vector<int> inputs;
  for (int k = 0; k < n.input_size(); ++k) {
    const Value& x = input(i, k);
    if (x.kind != ValueKind::kActivation)
      failAt(i, fmt::format("input {} ('{}') is {}: strata concatenates activations only (a "
                            "learned token such as ViT's class token has no layer)",
                            k, n.input(k),
                            x.kind == ValueKind::kTokens ? "the token ids" : "a constant"));
    if (x.rank != first.rank || x.flat)
      failAt(i, fmt::format("input {} ('{}') is {}, input 0 {}", k, n.input(k), dimsText(dimsOf(x)),
                            dimsText(dimsOf(first))));
    inputs.push_back(x.layer);
  }
  produce(i, addLayer(i, LayerKind::kConcat, {}, std::move(inputs), first.rank));
}

// Mul of two activations: x * sigmoid(x) (SiLU as PyTorch exports it) folds
// the Sigmoid into a silu; x times a gate of x's shape or of one value per
// channel (squeeze-excitation) is a mul.
void Importer::mapMul(int i) {
  const auto& n = model_.graph().node(i);
  const Value& a = input(i, 0);
  const Value& b = input(i, 1);
  if (a.kind == ValueKind::kActivation && b.kind == ValueKind::kConstant)
    return mapLayerScale(i, 0);
  if (a.kind == ValueKind::kConstant && b.kind == ValueKind::kActivation)
    return mapLayerScale(i, 1);
  if (a.kind != ValueKind::kActivation || b.kind != ValueKind::kActivation)
    failAt(i, fmt::format("Mul of '{}' and '{}': strata maps a Mul of two activations (x * "
                          "sigmoid(x), a squeeze-excitation gate) and of an activation by a "
                          "constant of one value per channel (a layer scale)",
                          n.input(0), n.input(1)));
  if (!sameLayout(a, b))
    failAt(i,
           "Mul of a channels-last view and a C x H x W activation (or of two views cut into "
           "windows differently)");
  // SiLU: one operand is a sigmoid of the other, read by this Mul alone.
  for (int k = 0; k < 2; ++k) {
    const Value& s = k == 0 ? a : b;
    const Value& x = k == 0 ? b : a;
    if (s.layer >= 0 && layerOf(s).kind == LayerKind::kSigmoid &&
        layerOf(s).inputs == std::vector<int>{x.layer} && consumers_[n.input(k)] == 1) {
      Layer& l = layerOf(s);
      l.kind = LayerKind::kSilu;
      l.name = layerName(i);
      nodeOf_[static_cast<size_t>(s.layer)] = i;
      derive(static_cast<size_t>(s.layer));
      produce(i, s);
      return;
    }
  }
  if (mapSwiglu(i))
    return;
  const Dims da = dimsOf(a), db = dimsOf(b);
  if (da == db) {
    Value v = addLayer(i, LayerKind::kMul, {}, {a.layer, b.layer}, a.rank);
    v.flat = a.flat;
    copyLayout(v, a);
    produce(i, v);
    return;
  }
  if (a.channelsLast)
    failAt(i, fmt::format("Mul of the channels-last {} and {}: strata multiplies them when "
                          "they have one shape",
                          dimsText(da), dimsText(db)));
  // A per-channel gate [C, 1, 1] of a [C, H, W] activation, on either side.
  const bool aGate = a.rank == 3 && !a.flat && da.size() == 3 && da[1] == 1 && da[2] == 1;
  const Value& x = aGate ? b : a;
  const Value& g = aGate ? a : b;
  const Dims dx = dimsOf(x), dg = dimsOf(g);
  if (x.rank != 3 || x.flat || g.rank != 3 || g.flat || dg != Dims{dx[0], 1, 1})
    failAt(i, fmt::format("Mul of {} and {}: strata multiplies tensors of one shape, or a "
                          "[C, H, W] activation by a gate of one value per channel [C, 1, 1]",
                          dimsText(da), dimsText(db)));
  produce(i, addLayer(i, LayerKind::kMul, {}, {x.layer, g.layer}, 3));
}

// An activation times a constant of one value per channel: a scale layer
// (the layer scale of CaiT and ConvNeXt, Touvron et al. 2021). The constant
// is [C, 1, 1] (or [1, C, 1, 1]) for C x H x W, [C] (with leading 1s) for
// vectors, sequences and channels-last maps; x is input `at`.
void Importer::mapLayerScale(int i, int at) {
  const auto& n = model_.graph().node(i);
  const Value x = activation(i, at, false, true);
  const Dims gamma = constant(i, 1 - at, "scale");
  const int64_t c = shapeOf(x).c;
  Dims squeezed = gamma;  // leading 1s dropped
  while (squeezed.size() > 1 && squeezed.front() == 1)
    squeezed.erase(squeezed.begin());
  const bool channelsFirst = x.rank == 3 && !x.channelsLast;
  const bool perChannel =
      !x.flat && (channelsFirst ? squeezed == Dims{c, 1, 1}
                                : squeezed == Dims{c} && gamma.size() <= dimsOf(x).size());
  if (!perChannel)
    failAt(i, fmt::format("Mul of '{}' {} by the constant '{}' {}: strata maps a Mul by a "
                          "constant of one value per channel ({}), a layer scale",
                          n.input(at), dimsText(dimsOf(x)), n.input(1 - at), dimsText(gamma),
                          channelsFirst ? fmt::format("[{}, 1, 1]", c) : fmt::format("[{}]", c)));
  Value v = addLayer(i, LayerKind::kScale, {}, {x.layer}, x.rank);
  copyLayout(v, x);
  produce(i, v);
}

std::string Importer::seqLayoutText(SeqLayout seq) {
  switch (seq) {
    case SeqLayout::kFeaturesFirst:
      return "a C x H x W activation reshaped to [N, C, H W]: strata maps the Transpose to "
             "[N, H W, C] by perm [0, 2, 1] on it (a sequence of its positions)";
    case SeqLayout::kGridSequence:
      return "the positions of a C x H x W activation as a sequence [N, H W, C]: strata maps a "
             "Concat of a class token before it (an Expand of a [1, k, C] parameter, ViT's) on "
             "it";
    case SeqLayout::kTimeMajor:
      return "a sequence transposed to [T, N, F] (perm [1, 0, 2]): strata maps a MatMul by a "
             "weight (nn.MultiheadAttention's in-projection), three Slices of its Q, K and V, and "
             "the Transpose back on it";
    case SeqLayout::kMergedRows:
      return "an attention's output as [T N, D] rows: strata maps the Reshape to [T, N, D] on it";
    case SeqLayout::kBatchFirst:
      break;
  }
  return "a sequence [N, T, F]";
}

bool Importer::mapSequenceTranspose(int i) {
  const Value& x = input(i, 0);
  const auto perm = intsAttr(i, "perm");
  if (x.rank != 2 || x.flat || x.channelsLast)
    return false;
  Value v = x;
  if (x.seq == SeqLayout::kFeaturesFirst && perm == Dims{0, 2, 1})
    v.seq = SeqLayout::kGridSequence;
  else if (x.seq == SeqLayout::kBatchFirst && perm == Dims{1, 0, 2})
    v.seq = SeqLayout::kTimeMajor;
  else if (x.seq == SeqLayout::kTimeMajor && perm == Dims{1, 0, 2})
    v.seq = SeqLayout::kBatchFirst;
  else
    return false;
  produce(i, v);
  return true;
}

void Importer::mapClassToken(int i, int at) {
  const auto& n = model_.graph().node(i);
  const Value& token = input(i, at);
  const Dims dims = tensorDims(*token.expanded);
  if (n.input_size() != 2 || at != 0)
    failAt(i, fmt::format("Concat of the expanded parameter '{}' {}: strata maps a class token "
                          "as the first of two inputs, before a sequence",
                          token.expanded->name(), dimsText(dims)));
  const Value& x = input(i, 1);
  if (x.kind != ValueKind::kActivation || x.flat || x.channelsLast || x.rank != 2 ||
      (x.seq != SeqLayout::kGridSequence && x.seq != SeqLayout::kBatchFirst))
    failAt(i, fmt::format("Concat of a class token and '{}': strata puts class tokens before a "
                          "sequence [N, T, C] (or the positions of C x H x W)",
                          n.input(1)));
  int64_t axis = intAttr(i, "axis", 1);
  if (axis < 0)
    axis += 3;
  const int64_t c = shapeOf(x).c;
  if (axis != 1 || dims.size() != 3 || dims[0] != 1 || dims[2] != c || dims[1] < 1)
    failAt(i, fmt::format("Concat along axis {} of the parameter '{}' {} and '{}' {}: strata "
                          "maps class tokens [1, k, {}] put before the positions (axis 1)",
                          intAttr(i, "axis", 1), token.expanded->name(), dimsText(dims), n.input(1),
                          dimsText(dimsOf(x)), c));
  LayerSpec s;
  s.tokens = toInt(i, dims[1], "class tokens");
  produce(i, addLayer(i, LayerKind::kClassToken, s, {x.layer}, 2));
}

void Importer::mapTokenGather(int i) {
  const auto& n = model_.graph().node(i);
  const Value x = activation(i, 0);
  int64_t axis = intAttr(i, "axis", 0);
  if (axis < 0)
    axis += x.rank + 1;
  const Value& at = input(i, 1);
  const auto index = at.kind == ValueKind::kConstant && at.tensor && at.tensor->dims_size() == 0
                         ? inlineInt64s(*at.tensor)
                         : std::nullopt;
  if (x.rank != 2 || x.flat || axis != 1 || !index || index->size() != 1)
    failAt(i, fmt::format("Gather of the activation '{}' {}: strata maps a Gather of one "
                          "position of a sequence [N, T, F] (axis 1, a scalar index stored in the "
                          "file: ViT's x[:, 0]) and of an embedding's table",
                          n.input(0), dimsText(dimsOf(x))));
  const int64_t t = dimsOf(x)[0];
  const int64_t k = (*index)[0] < 0 ? (*index)[0] + t : (*index)[0];
  if (k < 0 || k >= t)
    failAt(i, fmt::format("Gather of position {} of a sequence of {}", (*index)[0], t));
  LayerSpec s;
  s.index = static_cast<int>(k);
  produce(i, addLayer(i, LayerKind::kToken, s, {x.layer}, 1));
}

bool Importer::mapLayoutTranspose(int i) {
  const Value& x = input(i, 0);
  const auto perm = intsAttr(i, "perm");
  if (x.rank != 3 || x.flat || x.padH > 0 || x.padW > 0 || x.partition > 0)
    return false;
  Value v = x;
  if (!x.channelsLast && perm == Dims{0, 2, 3, 1})
    v.channelsLast = true;
  else if (x.channelsLast && perm == Dims{0, 3, 1, 2})
    v.channelsLast = false;
  else
    return false;
  produce(i, v);
  return true;
}

// ReduceMean over the positions (H and W) of C x H x W: a global average
// pool (MNASNet's x.mean([2, 3])).
void Importer::mapReduceMean(int i) {
  const Value x = activation(i, 0);
  Dims axes = intsAttr(i, "axes");
  if (axes.empty() && hasInput(i, 1)) {  // an input since opset 18
    const Value& t = input(i, 1);
    if (t.kind != ValueKind::kConstant || !inlineInt64s(*t.tensor))
      failAt(i, "ReduceMean's axes must be int64s stored in the file");
    axes = *inlineInt64s(*t.tensor);
  }
  for (auto& a : axes)
    if (a < 0)
      a += 4;
  std::sort(axes.begin(), axes.end());
  if (x.rank != 3 || x.flat || axes != Dims{2, 3})
    failAt(i, fmt::format("ReduceMean over axes {} of {}: strata maps the mean over H and W "
                          "(axes 2 and 3) of [N, C, H, W], a global average pool",
                          dimsText(intsAttr(i, "axes")), dimsText(dimsOf(x))));
  LayerSpec s;
  s.global = true;
  s.poolMode = PoolMode::kAvg;
  Value v = addLayer(i, LayerKind::kPool, s, {x.layer}, 3);
  if (intAttr(i, "keepdims", 1) == 0)
    v.rank = 1;  // [N, C]: the pool's C x 1 x 1 as a vector
  produce(i, v);
}

bool Importer::mapSwiglu(int i) {
  const auto& n = model_.graph().node(i);
  for (int k = 0; k < 2; ++k) {
    const Value& s = input(i, k);
    const Value& u = input(i, 1 - k);
    if (s.layer < 0 || u.layer < 0 || layerOf(s).kind != LayerKind::kSilu ||
        layerOf(s).inputs.size() != 1 || layerOf(s).inputs[0] < 0 || s.rank != 2 || u.rank != 2)
      continue;
    const int g = layerOf(s).inputs[0];
    Layer& gate = net_.layers[static_cast<size_t>(g)];
    const Layer& up = layerOf(u);
    auto plainFc = [](const Layer& l) {
      return l.kind == LayerKind::kFc && !l.spec.flatten && l.spec.tiedTo < 0;
    };
    if (!plainFc(gate) || !plainFc(up) || g == u.layer || gate.inputs != up.inputs ||
        gate.spec.outputs != up.spec.outputs || absorbed_.count(u.layer) > 0 ||
        consumers_[n.input(0)] != 1 || consumers_[n.input(1)] != 1)
      continue;
    if (gate.spec.bias != up.spec.bias)
      failAt(i, fmt::format("the SwiGLU of gate '{}' and up '{}' has a bias on {} alone: strata's "
                            "one fc of both has biases on both or on neither",
                            gate.name, up.name, gate.spec.bias ? "the gate" : "the up projection"));
    if (gate.spec.outputs > std::numeric_limits<int>::max() / 2)
      failAt(i, fmt::format("2 x {} gate and up rows are over {}", gate.spec.outputs,
                            std::numeric_limits<int>::max()));
    // The gate's rows, then the up projection's: strata's swiglu is silu of
    // the first half times the second.
    gate.spec.outputs *= 2;
    derive(static_cast<size_t>(g));
    Layer& l = layerOf(s);
    l.kind = LayerKind::kSwiglu;
    l.name = layerName(i);
    nodeOf_[static_cast<size_t>(s.layer)] = i;
    derive(static_cast<size_t>(s.layer));
    absorbed_.insert(u.layer);
    swiglus_.emplace_back(g, s.layer);
    produce(i, s);
    return true;
  }
  return false;
}

bool Importer::mapNormPart(int i) {
  const auto& n = model_.graph().node(i);
  const std::string& op = n.op_type();
  // A Cast of an activation (or of a step of an element-wise chain or a
  // normalisation) to a float type is the same tensor: strata prices one
  // precision (Hugging Face's RMSNorm casts to float32 and back).
  if (op == "Cast" && n.input_size() == 1) {
    auto it = values_.find(n.input(0));
    if (it == values_.end() ||
        (it->second.kind != ValueKind::kActivation && it->second.kind != ValueKind::kPointwise &&
         it->second.kind != ValueKind::kNormStat))
      return false;
    const int64_t to = intAttr(i, "to", 0);
    if (to != onnx::TensorProto::FLOAT && to != onnx::TensorProto::FLOAT16 &&
        to != onnx::TensorProto::DOUBLE && to != onnx::TensorProto::BFLOAT16)
      failAt(i, fmt::format("Cast of the activation '{}' to element type {}: strata reads a Cast "
                            "between float types as the same tensor, and no other",
                            n.input(0), to));
    const Value v = it->second;
    if (v.kind == ValueKind::kActivation)
      produce(i, v);
    else
      values_[n.output(0)] = v;
    return true;
  }
  // The mean over the features, kept: of x (a LayerNorm's), of x's squares
  // (an RMSNorm's), of the centred x's squares (a LayerNorm's variance).
  if (op == "ReduceMean" && n.input_size() >= 1) {
    auto it = values_.find(n.input(0));
    if (it == values_.end())
      return false;
    const Value& x = it->second;
    const bool squares = x.kind == ValueKind::kPointwise && x.terms.size() == 1 &&
                         x.terms.begin()->second.op == "Pow" &&
                         x.terms.begin()->second.constant == 2.0;
    const bool sequence = x.kind == ValueKind::kActivation && x.layer >= 0 && x.rank <= 2 &&
                          !x.flat && !x.channelsLast && x.seq == SeqLayout::kBatchFirst &&
                          x.padH == 0 && x.padW == 0;
    const bool variance = x.kind == ValueKind::kNormStat && x.norm == 'Q';
    if (!squares && !sequence && !variance)
      return false;  // (a pool over H and W, or materialized: its error names it)
    Dims axes = intsAttr(i, "axes");
    if (axes.empty() && hasInput(i, 1))
      axes = shapeInts(input(i, 1)).value_or(Dims{});
    const int64_t last = x.rank;  // with the batch, axis 0
    if ((squares || variance) &&
        (x.flat || x.channelsLast || x.seq != SeqLayout::kBatchFirst || x.rank > 2))
      failAt(i, fmt::format("ReduceMean of the squares of {}: strata folds a normalisation over "
                            "the features of sequences [N, T, F] and vectors [N, F]",
                            withBatch(dimsOf(x))));
    if (axes.size() != 1 || (axes[0] != -1 && axes[0] != last) || intAttr(i, "keepdims", 1) != 1)
      failAt(i, fmt::format("ReduceMean over axes {} (keepdims {}) of {}: strata folds the mean "
                            "over the last axis, kept, of sequences [N, T, F] and vectors "
                            "[N, F] as a normalisation's (RMSNorm, LayerNorm written out)",
                            dimsText(axes), intAttr(i, "keepdims", 1), withBatch(dimsOf(x))));
    Value v = x;
    v.kind = ValueKind::kNormStat;
    v.terms.clear();
    v.norm = squares ? 'm' : sequence ? 'M' : 'V';
    values_[n.output(0)] = v;
    return true;
  }
  int at = -1;
  for (int k = 0; k < n.input_size() && at < 0; ++k)
    if (auto it = values_.find(n.input(k));
        hasInput(i, k) && it != values_.end() && it->second.kind == ValueKind::kNormStat)
      at = k;
  if (at < 0)
    return false;
  const Value s = input(i, at);
  const Value* other = n.input_size() == 2 && hasInput(i, 1 - at) ? &input(i, 1 - at) : nullptr;
  auto scalar = [&]() -> std::optional<double> {
    return other && other->kind == ValueKind::kConstant && other->tensor
               ? inlineScalar(*other->tensor)
               : std::nullopt;
  };
  // x itself, or (stage) a step of the same normalisation.
  auto isX = [&]() {
    return other && other->kind == ValueKind::kActivation && other->layer == s.layer &&
           other->rank == s.rank && !other->flat && !other->channelsLast &&
           other->seq == SeqLayout::kBatchFirst && other->padH == 0 && other->padW == 0;
  };
  auto isStep = [&](char stage) {
    return other && other->kind == ValueKind::kNormStat && other->layer == s.layer &&
           other->norm == stage;
  };
  // A weight [F] (or a bias), leading 1s aside.
  auto perFeature = [&](const char* what) {
    Dims w = constant(i, 1 - at, what);
    while (w.size() > 1 && w.front() == 1)
      w.erase(w.begin());
    const int64_t f = shapeOf(s).c;
    if (w != Dims{f})
      failAt(i, fmt::format("a normalisation's {} {} is not one value per feature [{}]", what,
                            dimsText(w), f));
  };
  const bool constantOther = other && other->kind == ValueKind::kConstant;
  Value v = s;
  if (op == "Sub" && at == 1 && s.norm == 'M' && isX()) {
    v.norm = 'D';
  } else if (op == "Pow" && at == 0 && s.norm == 'D' && scalar() == 2.0) {
    v.norm = 'Q';
  } else if (op == "Add" && (s.norm == 'm' || s.norm == 'V') && scalar()) {
    v.norm = s.norm == 'm' ? 'e' : 'E';
    v.eps = *scalar();
    if (!(v.eps >= 0 && v.eps < 1))
      failAt(i, fmt::format("a normalisation's eps of {}: it must be in [0, 1)", v.eps));
  } else if (op == "Sqrt" && (s.norm == 'e' || s.norm == 'E')) {
    v.norm = s.norm == 'e' ? 's' : 'S';
  } else if ((op == "Reciprocal" && (s.norm == 's' || s.norm == 'S')) ||
             (op == "Div" && at == 1 && (s.norm == 's' || s.norm == 'S') && scalar() == 1.0)) {
    v.norm = s.norm == 's' ? 'r' : 'R';
  } else if ((op == "Mul" && s.norm == 'r' && isX()) ||
             (op == "Div" && at == 1 && s.norm == 's' && isX())) {
    v.norm = 'n';
  } else if ((op == "Mul" && ((s.norm == 'D' && isStep('R')) || (s.norm == 'R' && isStep('D')))) ||
             (op == "Div" && at == 0 && s.norm == 'D' && isStep('S'))) {
    v.norm = 'N';
  } else if (op == "Mul" && s.norm == 'n' && constantOther) {
    perFeature("weight");
    LayerSpec spec;
    spec.eps = s.eps;
    produce(i, addLayer(i, LayerKind::kRmsNorm, spec, {s.layer}, s.rank));
    return true;
  } else if (op == "Mul" && s.norm == 'N' && constantOther) {
    perFeature("weight");
    v.norm = 'W';
  } else if (op == "Add" && s.norm == 'W' && constantOther) {
    perFeature("bias");
    produce(i, addLayer(i, LayerKind::kLayerNorm, {}, {s.layer}, s.rank));
    return true;
  } else {
    const char* step = s.norm == 'm'   ? "the mean of the squares of an RMSNorm"
                       : s.norm == 'e' ? "the mean of the squares plus eps of an RMSNorm"
                       : s.norm == 's' ? "the root mean square of an RMSNorm"
                       : s.norm == 'r' ? "the reciprocal root mean square of an RMSNorm"
                       : s.norm == 'n' ? "the normalised x, before its weight, of an RMSNorm"
                       : s.norm == 'M' ? "the mean of a LayerNorm"
                       : s.norm == 'D' ? "the centred x of a LayerNorm"
                       : s.norm == 'Q' ? "the centred x's squares of a LayerNorm"
                       : s.norm == 'V' ? "the variance of a LayerNorm"
                       : s.norm == 'E' ? "the variance plus eps of a LayerNorm"
                       : s.norm == 'S' ? "the standard deviation of a LayerNorm"
                       : s.norm == 'R' ? "the reciprocal standard deviation of a LayerNorm"
                       : s.norm == 'N' ? "the normalised x, before its weight, of a LayerNorm"
                                       : "the normalised x times its weight, before its bias, of a "
                                         "LayerNorm";
    failAt(i, fmt::format("op '{}' reads '{}', {} of '{}' written out, in a way strata does not "
                          "follow: strata folds an RMSNorm (x.pow(2).mean(-1, keepdim=True), Add "
                          "of a scalar eps, Sqrt, Reciprocal or Div of 1, Mul by x or Div of x, "
                          "Mul by a weight [F]) and a LayerNorm (ReduceMean, Sub from x, Pow 2, "
                          "ReduceMean, Add eps, Sqrt, Div, Mul by a weight [F], Add of a bias "
                          "[F]) over the last axis",
                          op, n.input(at), step,
                          s.layer < 0 ? std::string("input") : layerOf(s).name));
  }
  values_[n.output(0)] = v;
  return true;
}

// Pad with zeros around H and W (rows above and below alike, columns left
// and right alike), read by a Conv or pool that folds it into its pads (as
// PyTorch exports avg_pool2d's padding); a Pad of nothing is an Identity.
void Importer::mapPad(int i) {
  const Value x = activation(i, 0);
  if (stringAttr(i, "mode", "constant") != "constant")
    failAt(i, fmt::format("Pad mode '{}': strata pads with zeros (mode constant)",
                          stringAttr(i, "mode", "constant")));
  std::optional<std::vector<int64_t>> pads;
  if (hasInput(i, 1)) {  // an input since opset 11
    const Value& t = input(i, 1);
    if (t.kind == ValueKind::kConstant)
      pads = inlineInt64s(*t.tensor);
  } else if (attr(i, "pads")) {
    pads = intsAttr(i, "pads");
  }
  if (!pads)
    failAt(i, "Pad's pads must be int64s stored in the file");
  if (const auto value = scalarInput(i, 2); value && *value != 0)
    failAt(i, fmt::format("Pad with the value {}: strata pads with zeros", *value));
  for (int k = 3; k < model_.graph().node(i).input_size(); ++k)
    if (hasInput(i, k))
      failAt(i, "Pad's axes input cannot be mapped (pads for every axis are read)");
  const auto& p = *pads;
  // [x1_begin, x2_begin, ..., x1_end, x2_end, ...] over N, C, H, W.
  const bool planar = x.rank == 3 && !x.flat && p.size() == 8 && p[0] == 0 && p[1] == 0 &&
                      p[4] == 0 && p[5] == 0 && p[2] == p[6] && p[3] == p[7] && p[2] >= 0 &&
                      p[3] >= 0 && p[2] <= 1 << 20 && p[3] <= 1 << 20;
  const bool nothing = std::all_of(p.begin(), p.end(), [](int64_t v) { return v == 0; });
  if (!nothing && !planar)
    failAt(i, fmt::format("Pad {} of {}: strata folds zeros around H and W of [N, C, H, W], "
                          "the same above and below and left and right, into the Conv or "
                          "pool that reads them",
                          dimsText(p), dimsText(dimsOf(x))));
  Value v = x;
  if (!nothing) {
    v.padH = static_cast<int>(p[2]);
    v.padW = static_cast<int>(p[3]);
  }
  values_[model_.graph().node(i).output(0)] = v;  // no layer: nothing to check the shape of
}

// Slice of an activation along its channels with step 1 (ShuffleNetV2's
// x[:, :c] and x[:, c:], Ma et al. 2018): a slice layer; the other axes
// whole. Starts and ends may be computed from shapes (torch.onnx.export's
// x.size(1) // 2).
void Importer::mapSlice(int i) {
  const auto& n = model_.graph().node(i);
  const Value x = activation(i, 0);
  const Dims dims = dimsOf(x);
  const int64_t rank = static_cast<int64_t>(dims.size()) + 1;
  std::vector<int64_t> starts, ends, axes, steps;
  if (hasInput(i, 1)) {  // inputs since opset 10
    auto ints = [&](int k, const char* what) {
      if (!hasInput(i, k))
        return std::vector<int64_t>{};
      const auto v = shapeInts(input(i, k));
      if (!v)
        failAt(i, fmt::format("Slice's {} '{}' must be int64s stored in the file or computed "
                              "from shapes",
                              what, n.input(k)));
      return *v;
    };
    starts = ints(1, "starts");
    ends = ints(2, "ends");
    axes = ints(3, "axes");
    steps = ints(4, "steps");
  } else {
    starts = intsAttr(i, "starts");
    ends = intsAttr(i, "ends");
    axes = intsAttr(i, "axes");
  }
  if (axes.empty())
    for (size_t k = 0; k < starts.size(); ++k)
      axes.push_back(static_cast<int64_t>(k));
  if (starts.empty() || ends.size() != starts.size() || axes.size() != starts.size() ||
      (!steps.empty() && steps.size() != starts.size()))
    failAt(i, fmt::format("Slice with {} starts, {} ends, {} axes and {} steps", starts.size(),
                          ends.size(), axes.size(), steps.size()));
  const int64_t channel = channelAxis(x);
  int64_t offset = 0, end = shapeOf(x).c;
  for (size_t k = 0; k < axes.size(); ++k) {
    const int64_t axis = axes[k] < 0 ? axes[k] + rank : axes[k];
    const int64_t step = steps.empty() ? 1 : steps[k];
    if (axis <= 0 || axis >= rank || x.flat || step != 1 || isBatchMultiple(starts[k]) ||
        isBatchMultiple(ends[k]))
      failAt(i, fmt::format("Slice of axis {} with step {} of {}: strata takes a part of the "
                            "channels (axis {}) with step 1",
                            axes[k], step, withBatch(dims), channel));
    const int64_t size = dims[static_cast<size_t>(axis - 1)];
    auto clamp = [&](int64_t v) { return std::clamp(v < 0 ? v + size : v, int64_t{0}, size); };
    const int64_t from = clamp(starts[k]), to = clamp(ends[k]);
    if (axis != channel) {
      if (from != 0 || to != size)
        failAt(i, fmt::format("Slice of [{}, {}) along axis {} of {}: strata takes a part of "
                              "the channels (axis {}) only",
                              from, to, axes[k], withBatch(dims), channel));
      continue;
    }
    if (to <= from)
      failAt(i, fmt::format("Slice of channels [{}, {}) of {}: nothing left", from, to, size));
    offset = from;
    end = to;
  }
  if (offset == 0 && end == shapeOf(x).c)
    return produce(i, x);  // everything: an Identity
  LayerSpec s;
  s.offset = static_cast<int>(offset);
  s.channels = static_cast<int>(end - offset);
  produce(i, addLayer(i, LayerKind::kSlice, s, {x.layer}, x.rank));
}

// Split of an activation along its channels: one slice layer per output.
void Importer::mapSplit(int i) {
  const auto& n = model_.graph().node(i);
  const Value x = activation(i, 0);
  const int64_t rank = static_cast<int64_t>(dimsOf(x).size()) + 1;
  int64_t axis = intAttr(i, "axis", 0);
  if (axis < 0)
    axis += rank;
  if (x.flat || axis != channelAxis(x))
    failAt(i, fmt::format("Split along axis {} of {}: strata splits the channels (axis {})",
                          intAttr(i, "axis", 0), withBatch(dimsOf(x)), channelAxis(x)));
  const int64_t c = shapeOf(x).c;
  std::vector<int64_t> sizes = intsAttr(i, "split");
  if (sizes.empty() && hasInput(i, 1)) {
    const auto given = shapeInts(input(i, 1));
    if (!given)
      failAt(i, fmt::format("Split's sizes '{}' must be int64s stored in the file or computed "
                            "from shapes",
                            n.input(1)));
    sizes = *given;
  }
  const int64_t parts = n.output_size();
  if (sizes.empty()) {
    if (parts <= 0 || c % parts != 0)
      failAt(i, fmt::format("Split of {} channels into {} equal parts", c, parts));
    sizes.assign(static_cast<size_t>(parts), c / parts);
  }
  int64_t total = 0;
  for (int64_t size : sizes) {
    if (size <= 0 || size > c)
      failAt(i, fmt::format("Split into parts of {} channels of {}", dimsText(sizes), c));
    total += size;
  }
  if (static_cast<int64_t>(sizes.size()) != parts || total != c)
    failAt(i, fmt::format("Split of {} channels into {} parts of {}", c, parts, dimsText(sizes)));
  int64_t offset = 0;
  for (int k = 0; k < n.output_size(); ++k) {
    const int64_t size = sizes[static_cast<size_t>(k)];
    if (!n.output(k).empty()) {
      LayerSpec s;
      s.offset = static_cast<int>(offset);
      s.channels = static_cast<int>(size);
      const Value v = size == c ? x : addLayer(i, LayerKind::kSlice, s, {x.layer}, x.rank);
      checkShape(i, n.output(k), v);
      values_[n.output(k)] = v;
    }
    offset += size;
  }
}

// [N, G, C / G, H, W] -> [N, C / G, G, H, W]: the transpose in a channel
// shuffle.
void Importer::mapGroupTranspose(int i) {
  Value v = input(i, 0);
  const auto perm = intsAttr(i, "perm");
  if (perm != Dims{0, 2, 1, 3, 4})
    failAt(i, fmt::format("Transpose by perm {} of channels viewed as groups: strata maps the "
                          "swap of the two group axes (perm [0, 2, 1, 3, 4], a channel "
                          "shuffle)",
                          dimsText(perm)));
  v.swapped = !v.swapped;
  produce(i, v);
}

bool Importer::mapChannelGroups(int i, const Value& x, const Dims& to) {
  const auto& n = model_.graph().node(i);
  const Shape s = shapeOf(x);
  if (x.kind == ValueKind::kActivation) {
    if (x.rank != 3 || x.flat || to.size() != 4 || to[2] != s.h || to[3] != s.w ||
        to[0] * to[1] != s.c)
      return false;
    Value v = x;
    v.kind = ValueKind::kChannelGroups;
    v.groups = static_cast<int>(to[0]);
    v.swapped = false;
    values_[n.output(0)] = v;
    return true;
  }
  if (x.kind != ValueKind::kChannelGroups || to != Dims{s.c, s.h, s.w})
    return false;
  if (!x.swapped) {  // the groups put back as they were
    Value v = x;
    v.kind = ValueKind::kActivation;
    v.groups = 0;
    produce(i, v);
    return true;
  }
  LayerSpec spec;
  spec.groups = x.groups;
  produce(i, addLayer(i, LayerKind::kShuffle, spec, {x.layer}, 3));
  return true;
}

}  // namespace strata::onnx_import

// Maps each ONNX op onto strata layers (docs/onnx.md lists the supported
// ones): a node becomes one layer, folds into the layer before it (a bias
// Add, an attention's output projection), maps onto none (Identity, a
// flattening Flatten/Reshape), or is one clear error naming the node.
// onnx_loader.cpp reads the graph these nodes come from.
#include "onnx_importer.h"

namespace strata::onnx_import {

namespace {

constexpr const char* kSupported =
    "Conv, MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool, Relu, Gelu, "
    "BatchNormalization, LayerNormalization, Softmax (last), Dropout, Add, Flatten, Reshape "
    "(flattening), Identity, Constant, Gemm, MatMul (by a weight), Gather (embedding), "
    "com.microsoft Attention";

}  // namespace

void Importer::mapNode(int i) {
  const auto& n = model_.graph().node(i);
  const std::string& op = n.op_type();
  const std::string& domain = n.domain();
  const bool standard = domain.empty() || domain == "ai.onnx";
  const bool microsoft = domain == "com.microsoft";
  auto unsupported = [&](const std::string& why) {
    failAt(i, fmt::format("op '{}'{} cannot be mapped to a strata layer{} (supported: {})", op,
                          standard ? "" : " (domain " + domain + ")", why, kSupported));
  };
  if (standard && op == "Identity") {
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
  } else if ((standard && op == "Relu") || ((standard || microsoft) && op == "Gelu")) {
    const Value x = activation(i, 0);
    Value v =
        addLayer(i, op == "Relu" ? LayerKind::kRelu : LayerKind::kGelu, {}, {x.layer}, x.rank);
    v.flat = x.flat;
    produce(i, v);
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
    const Value x = activation(i, 0);
    const int64_t axis = intAttr(i, "axis", -1);
    const int64_t rank = x.rank + 1;
    if (x.flat || x.rank == 3 || (axis != -1 && axis != rank - 1))
      failAt(i, fmt::format("LayerNormalization over axis {} of a rank-{} tensor: strata "
                            "normalises the features (last axis) of vectors or sequences",
                            axis, rank));
    const Dims scale = constant(i, 1, "scale");
    if (scale.size() != 1 || scale[0] != shapeOf(x).c)
      failAt(i,
             fmt::format("scale {} does not match the {} features", dimsText(scale), shapeOf(x).c));
    produce(i, addLayer(i, LayerKind::kLayerNorm, {}, {x.layer}, x.rank));
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
  const Value x = activation(i, 0);
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
  const Window win = window(i, kernel);
  LayerSpec s;
  s.filters = toInt(i, w[0], "filters");
  s.kernelH = win.kernelH;
  s.kernelW = win.kernelW;
  s.stride = win.stride;
  s.pad = win.pad;
  const int64_t group = intAttr(i, "group", 1);
  s.groups = toInt(i, group, "group");
  s.bias = hasInput(i, 2);
  if (w[1] * group != shapeOf(x).c)
    failAt(i, fmt::format("weight {} with group {} does not read the {} input channels",
                          dimsText(w), group, shapeOf(x).c));
  produce(i, addLayer(i, LayerKind::kConv, s, {x.layer}, 3));
}

void Importer::mapPool(int i, PoolMode mode) {
  const Value x = activation(i, 0);
  if (x.rank != 3 || x.flat)
    failAt(i, "a pool maps on C x H x W activations only");
  const Window win = window(i, intsAttr(i, "kernel_shape"));
  if (intAttr(i, "ceil_mode", 0) != 0) {
    // Accepted where rounding up gives the same size as strata's floor.
    const Shape& in = shapeOf(x);
    for (auto [size, k] : {std::pair{in.h, win.kernelH}, std::pair{in.w, win.kernelW}}) {
      const int64_t span = int64_t{size} + 2 * win.pad - k;
      if (span >= 0 && span % win.stride != 0)
        failAt(i, "ceil_mode 1 rounds this pool's output up; strata rounds down");
    }
  }
  LayerSpec s;
  s.poolMode = mode;
  s.kernelH = win.kernelH;
  s.kernelW = win.kernelW;
  s.stride = win.stride;
  s.pad = win.pad;
  produce(i, addLayer(i, LayerKind::kPool, s, {x.layer}, 3));
}

void Importer::mapDropout(int i) {
  const Value x = activation(i, 0);
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
  produce(i, v);
}

void Importer::mapAdd(int i) {
  const Value a = input(i, 0);
  const Value b = input(i, 1);
  const auto& n = model_.graph().node(i);
  if (a.kind == ValueKind::kActivation && b.kind == ValueKind::kActivation) {
    const Dims da = dimsOf(a), db = dimsOf(b);
    if (da != db)
      failAt(i, fmt::format("Add of {} and {}: strata adds tensors of one shape (no "
                            "broadcasting)",
                            dimsText(da), dimsText(db)));
    Value v = addLayer(i, LayerKind::kAdd, {}, {a.layer, b.layer}, a.rank);
    v.flat = a.flat;
    produce(i, v);
    return;
  }
  const bool aAct = a.kind == ValueKind::kActivation;
  const Value& x = aAct ? a : b;
  const Value& other = aAct ? b : a;
  const std::string& xName = n.input(aAct ? 0 : 1);
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
  if (l.kind == LayerKind::kFc && !l.spec.bias && x.rank <= 2 && !x.flat &&
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
  const Value x = activation(i, 0);
  const Value& target = input(i, 1);
  const int64_t elements = shapeOf(x).elements();
  std::optional<bool> flattens;
  if (target.kind == ValueKind::kConstant) {
    if (auto t = inlineInt64s(*target.tensor)) {
      // [N or 0 or -1, elements or -1]: one vector per example.
      const auto& d = *t;
      flattens = d.size() == 2 && (d[1] == elements || (d[1] == -1 && d[0] != -1));
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
                          "strata layer (a decomposed attention: export the fused "
                          "com.microsoft Attention instead); only a MatMul by a weight "
                          "initializer maps, to an fc (supported: {})",
                          n.input(0), n.input(1), kSupported));
  const Value x = activation(i, 0);
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
    produce(i, addLayer(i, LayerKind::kFc, s, {x.layer}, 2));
  } else {
    failAt(i, "MatMul maps on vectors [F] or sequences [T, F] only");
  }
}

void Importer::mapGather(int i) {
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
    produce(i, addLayer(i, LayerKind::kEmbedding, s, {-1}, 2));
  } else if (ids.kind == ValueKind::kConstant) {
    Value v;
    v.kind = ValueKind::kPositions;
    v.rows = table[0];
    v.width = table[1];
    produce(i, v);
  } else {
    failAt(i,
           "Gather maps as an embedding of the network's token ids, or as a position "
           "table at constant ids");
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
}  // namespace strata::onnx_import

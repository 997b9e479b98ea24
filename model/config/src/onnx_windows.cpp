// Attention in windows as torch.onnx.export writes torchvision's Swin
// (shifted_window_attention, docs/onnx.md): the channels-last grid padded to
// whole windows (Pad), rolled by the shift (a Slice and Concat per axis),
// viewed as windows (Reshape, Transpose, Reshape), their QKV fc, heads, the
// scaled scores plus the relative position bias (a Gather of a table at
// constant offsets) and the shift's mask, softmax, the context, the output
// projection, and the windows put back, rolled back and cropped. The whole
// subgraph is one strata attention layer with window, shift and
// position_bias. Patch merging (x[i::2, j::2] for the four offsets,
// concatenated) is a space_to_depth layer.
#include <fmt/format.h>

#include "onnx_importer.h"

namespace strata::onnx_import {

Dims Importer::windowDims(const Value& v) const {
  if (v.grouped)
    return groupedDims(v);
  const Shape& s = shapeOf(v);
  const int64_t c = s.c, hp = int64_t{s.h} + v.padB, wp = int64_t{s.w} + v.padR;
  const int64_t m = v.window > 0 ? v.window : 1;
  const int64_t windows = (hp / m) * (wp / m), t = m * m;
  const int64_t b = batchTimes(windows);
  const int64_t h = v.heads > 0 ? v.heads : 1, dh = c / h;
  switch (v.win) {
    case 'g':
    case 'G':
      return {kBatchDim, hp, wp, c};
    case 'a':
    case 'A': {
      Dims d{kBatchDim, hp, wp, c};
      const int64_t size = d[static_cast<size_t>(v.sliceAxis)];
      const int64_t stop = std::min(v.sliceStop, size);
      d[static_cast<size_t>(v.sliceAxis)] =
          stop > v.sliceStart ? (stop - v.sliceStart + v.sliceStep - 1) / v.sliceStep : 0;
      return d;
    }
    case 'm':
      return {kBatchDim, (hp - v.mergeRow + 1) / 2, (wp - v.mergeCol + 1) / 2, c};
    case 'v':
    case 'U':
      return {kBatchDim, hp / m, m, wp / m, m, c};
    case 'u':
    case 'V':
      return {kBatchDim, hp / m, wp / m, m, m, c};
    case 'w':
    case 'j':
    case 'o':
      return {b, t, c};
    case 'f':
      return {b, t, v.fcRows};
    case 'r':
      return {b, t, 3, h, dh};
    case 'R':
      return {3, b, h, t, dh};
    case 'q':
    case 'k':
    case 'x':
    case 'c':
      return {b, h, t, dh};
    case 'K':
      return {b, h, dh, t};
    case 's':
    case 'p':
      return v.split ? Dims{kBatchDim, windows, h, t, t} : Dims{b, h, t, t};
    case 'C':
      return {b, t, h, dh};
    default:
      return {};
  }
}

LayerSpec Importer::windowSpec(int i, const Value& v) const {
  const Shape& x = shapeOf(v);
  if (v.fcRows != 3 * int64_t{x.c})
    failAt(i, fmt::format("attention in windows with a QKV fc of {} rows: strata maps Q, K and V "
                          "of the width {} ({} rows)",
                          v.fcRows, x.c, 3 * x.c));
  if (v.projBiasSeen && !v.qkvBiasSeen)
    failAt(i,
           "attention in windows with a bias on the output projection alone: strata's "
           "attention has biases on all four projections, or on Q, K and V alone");
  LayerSpec s;
  s.heads = v.heads;
  s.causal = false;
  s.bias = v.qkvBiasSeen && v.projBiasSeen;
  s.qkvBias = v.qkvBiasSeen && !v.projBiasSeen;
  if (v.normalised != 0 && !v.logitScaleSeen)
    failAt(i,
           "Q and K are normalised but the scores are not scaled by a learned logit scale "
           "(Swin V2's cosine attention has both)");
  s.cosine = v.logitScaleSeen;
  s.positionBias = v.positionMlpSeen    ? PositionBias::kMlp
                   : v.positionBiasSeen ? PositionBias::kTable
                                        : PositionBias::kNone;
  return s;
}

Value Importer::windowAttention(int i, const Value& v) {
  const Shape x = shapeOf(v);  // a copy: addLayer may move the layers
  LayerSpec s = windowSpec(i, v);
  s.window = v.window;
  s.shift = std::max(v.shiftH, v.shiftW);
  Value out = addLayer(i, LayerKind::kAttention, s, {v.layer}, 3);
  const Layer& l = layerOf(out);
  if (l.shiftH() != v.shiftH || l.shiftW() != v.shiftW)
    failAt(i,
           fmt::format("the windows of {} are rolled by ({}, {}) positions; strata's "
                       "shifted windows of {} on a {}x{} grid roll by ({}, {}) (torchvision's "
                       "rule: no shift along a dimension one window covers)",
                       v.window, v.shiftH, v.shiftW, v.window, x.h, x.w, l.shiftH(), l.shiftW()));
  if (v.maskSeen != (v.shiftH > 0 || v.shiftW > 0))
    failAt(i, v.maskSeen ? "a mask is added to the scores of windows that are not shifted"
                         : "the windows are shifted but no mask is added to their scores");
  out.channelsLast = true;
  return out;
}

bool Importer::mapPositionMlp(int i) {
  const auto& n = model_.graph().node(i);
  const std::string& op = n.op_type();
  const Value* first = knownInput(i, 0);
  const Value* second = knownInput(i, 1);
  auto stage = [](const Value* v, int s) {
    return v && v->kind == ValueKind::kDerived && v->cpbStage == s;
  };
  auto weight = [&](const Value* v) -> std::optional<Dims> {
    if (!v || v->kind != ValueKind::kConstant || !v->tensor || shapeInts(*v))
      return std::nullopt;
    Dims d = tensorDims(*v->tensor);
    if (v->transposed)
      std::reverse(d.begin(), d.end());
    return d;
  };
  Value v;
  if (op == "MatMul" && first && first->kind == ValueKind::kConstant && first->tensor &&
      !first->transposed) {
    // The MLP's first layer on the [1, 2M - 1, 2M - 1, 2] table of offsets.
    const Dims table = tensorDims(*first->tensor);
    const auto w = weight(second);
    if (table.size() != 4 || table[0] != 1 || table[1] != table[2] || table[3] != 2 || !w ||
        w->size() != 2 || (*w)[0] != 2)
      return false;
    v.kind = ValueKind::kDerived;
    v.positionTable = first->tensor;
    v.cpbStage = 1;
    v.cpbHidden = (*w)[1];
  } else if (op == "Add" && (stage(first, 1) || stage(second, 1))) {
    const Value& mlp = stage(first, 1) ? *first : *second;
    const auto b = weight(stage(first, 1) ? second : first);
    if (!b || *b != Dims{mlp.cpbHidden})
      failAt(i, fmt::format("the position bias MLP's first layer takes a bias of [{}]",
                            mlp.cpbHidden));
    v = mlp;
    v.cpbStage = 2;
  } else if (op == "Relu" && stage(first, 2)) {
    v = *first;
    v.cpbStage = 3;
  } else if (op == "MatMul" && stage(first, 3)) {
    const auto w = weight(second);
    if (!w || w->size() != 2 || (*w)[0] != first->cpbHidden)
      failAt(i, fmt::format("the position bias MLP's second layer is a MatMul by a [{}, heads] "
                            "weight",
                            first->cpbHidden));
    v = *first;
    v.cpbStage = 4;
    v.cpbHeads = (*w)[1];
  } else {
    for (const Value* in : {first, second})
      if (in && in->kind == ValueKind::kDerived && in->cpbStage > 0 && in->cpbStage < 4)
        failAt(i, fmt::format("op '{}' inside the position bias MLP (Swin V2's cpb_mlp): strata "
                              "follows Linear(2, 512) with its bias, ReLU and Linear(512, heads)",
                              op));
    return false;
  }
  for (const auto& name : n.output())
    if (!name.empty())
      values_[name] = v;
  return true;
}

bool Importer::mapWindowPart(int i) {
  const auto& n = model_.graph().node(i);
  const std::string& op = n.op_type();
  if (n.input_size() == 0 || !hasInput(i, 0))
    return false;
  const Value* first = knownInput(i, 0);
  const Value* second = knownInput(i, 1);
  const bool windowIn = (first && first->kind == ValueKind::kWindow) ||
                        (second && second->kind == ValueKind::kWindow);
  const bool gridIn = first && first->kind == ValueKind::kActivation && first->channelsLast &&
                      first->partition == 0 && first->padH == 0 && first->padW == 0;
  // Swin's relative position bias: a (2M - 1)^2 x heads table gathered at
  // the M^2 x M^2 offsets of a window's positions (an initializer, or one
  // viewed flat: MaxViT's, its values read when stored in the file), then
  // viewed, transposed and unsqueezed (kDerived, carrying the table).
  if (op == "Gather" && first && first->kind == ValueKind::kConstant && first->tensor &&
      !first->transposed && !shapeInts(*first) && second &&
      ((second->kind == ValueKind::kConstant && second->tensor) ||
       (second->kind == ValueKind::kDerived && second->flatElements > 0) ||
       (second->kind == ValueKind::kShape && !second->ints.empty()))) {
    const Dims table = tensorDims(*first->tensor);
    const int64_t at = second->kind == ValueKind::kDerived ? second->flatElements
                       : second->kind == ValueKind::kShape
                           ? static_cast<int64_t>(second->ints.size())
                           : elementsOf(tensorDims(*second->tensor));
    // Any 2-D table at M^4 offsets (its rows checked against (2M - 1)^2
    // where the scores add it).
    for (int64_t m = 2; table.size() == 2 && m * m * m * m <= at; ++m)
      if (m * m * m * m == at) {
        Value v;
        v.kind = ValueKind::kDerived;
        v.positionTable = first->tensor;
        for (const auto& name : n.output())
          values_[name] = v;
        return true;
      }
    return false;
  }
  if (!windowIn && !((op == "Pad" || op == "Slice") && gridIn))
    return false;

  auto sliceArgs = [&](int64_t& start, int64_t& stop, int64_t& axis, int64_t& step,
                       const Dims& dims) {
    auto one = [&](int k, int64_t fallback) {
      if (!hasInput(i, k))
        return fallback;
      const auto v = shapeInts(input(i, k));
      if (!v || v->size() != 1)
        failAt(i, "a Slice of a grid along one axis, its starts, ends, axes and steps known");
      return (*v)[0];
    };
    start = one(1, 0);
    stop = one(2, 0);
    axis = one(3, 0);
    step = one(4, 1);
    if (axis < 0)
      axis += 4;
    if (axis != 1 && axis != 2)
      failAt(i, fmt::format("a Slice of a channels-last grid along axis {}: strata follows "
                            "Slices along H (1) and W (2)",
                            axis));
    // x[-s:] and x[:-s] (torch.roll back): from the end.
    const int64_t size = dims[static_cast<size_t>(axis)];
    start = start < 0 ? std::max<int64_t>(start + size, 0) : start;
    stop = stop < 0 ? std::max<int64_t>(stop + size, 0) : stop;
    if (step != 1 && step != 2)
      failAt(i, "a Slice of a channels-last grid from a start to an end, with step 1 or 2");
  };

  // A Slice of the grid along `axis`: step 'a' (or 'A' of the grid put back).
  auto produceSlice = [&](Value v, char win, int64_t axis, int64_t start, int64_t stop,
                          int64_t step) {
    v.win = win;
    v.sliceAxis = static_cast<int>(axis);
    v.sliceStart = start;
    v.sliceStop = stop;
    v.sliceStep = step;
    v.sliced = n.input(0);
    produce(i, v);
  };

  // ---- the grid: padded, sliced, rolled ----------------------------------
  if (op == "Pad" && gridIn) {
    const auto pads = hasInput(i, 1) ? shapeInts(input(i, 1)) : std::nullopt;
    if (!pads || pads->size() != 8)
      failAt(i,
             "a Pad of a channels-last grid needs its 8 pads (N, H, W, C begins and ends) "
             "computed from shapes and constants");
    const auto& p = *pads;
    if (p[0] || p[1] || p[2] || p[3] || p[4] || p[7] || p[5] < 0 || p[6] < 0 || p[5] > 4096 ||
        p[6] > 4096)
      failAt(i, fmt::format("Pad of a channels-last grid by {}: strata maps zeros below and "
                            "right (to whole windows, or an even grid to merge)",
                            dimsText(p)));
    if (stringAttr(i, "mode", "constant") != "constant")
      failAt(i, "a Pad of a grid with zeros (mode constant)");
    Value v;
    v.kind = ValueKind::kWindow;
    v.win = 'g';
    v.layer = first->layer;
    v.padB = static_cast<int>(p[5]);
    v.padR = static_cast<int>(p[6]);
    produce(i, v);
    return true;
  }
  if (op == "Slice" && gridIn) {
    int64_t start = 0, stop = 0, axis = 0, step = 1;
    const Shape& s = shapeOf(*first);
    sliceArgs(start, stop, axis, step, {kBatchDim, s.h, s.w, s.c});
    const int64_t size = axis == 1 ? s.h : s.w;
    if (start == 0 && stop >= size && step == 1) {
      produce(i, *first);  // x[:, :H, :W] of an unpadded grid: itself
      return true;
    }
    Value v;
    v.kind = ValueKind::kWindow;
    v.layer = first->layer;
    produceSlice(v, 'a', axis, start, stop, step);
    return true;
  }
  const Value a = windowIn && first && first->kind == ValueKind::kWindow ? *first : *second;
  auto next = [&](char step) {
    Value v = a;
    v.win = step;
    return v;
  };
  auto cannot = [&](const std::string& why) {
    failAt(i, fmt::format("op '{}' in attention in windows (Swin): {}", op, why));
  };
  auto reshapeTo = [&]() {
    const auto target = hasInput(i, 1) ? shapeInts(input(i, 1)) : std::nullopt;
    if (!target)
      cannot("the Reshape's target must be computed from shapes and constants");
    return *target;
  };

  if (op == "Slice" && (a.win == 'g' || a.win == 'a' || a.win == 'G')) {
    int64_t start = 0, stop = 0, axis = 0, step = 1;
    const Dims d = windowDims(a);
    sliceArgs(start, stop, axis, step, d);
    const int64_t size = d[static_cast<size_t>(axis)];
    Value v = a;
    if (a.win == 'a') {
      // x[i::2] along H, then [j::2] along W: a part of patch merging.
      if (a.sliceStep != 2 || step != 2 || a.sliceAxis != 1 || axis != 2 || a.sliceStart > 1 ||
          start > 1 || stop < size || a.sliceStop < windowDims(next('g'))[1])
        cannot("a Slice of a Slice is patch merging's x[i::2, j::2] (i, j in {0, 1})");
      v.win = 'm';
      v.mergeRow = static_cast<int>(a.sliceStart);
      v.mergeCol = static_cast<int>(start);
      produce(i, v);
      return true;
    }
    const Shape& s = shapeOf(a);
    const int64_t real = axis == 1 ? s.h : s.w;
    if (a.win == 'G' && a.rollH == 0 && a.rollW == 0 && start == 0 && step == 1 && stop == real &&
        stop < size) {
      // x[:, :H] or x[:, :, :W]: the padding cropped.
      (axis == 1 ? v.padB : v.padR) = 0;
      if (v.padB == 0 && v.padR == 0)
        produce(i, windowAttention(i, v));
      else
        produce(i, v);
      return true;
    }
    if (a.win == 'G' && start == 0 && step == 1 && stop >= size) {
      produce(i, a);  // the whole axis
      return true;
    }
    produceSlice(v, a.win == 'G' ? 'A' : 'a', axis, start, stop, step);
    return true;
  }
  if (op == "Concat" && (a.win == 'a' || a.win == 'A') && n.input_size() == 2) {
    // torch.roll along one axis: cat(x[s:], x[:s]) rolls up (left) by s.
    const Value& lo = input(i, 0);
    const Value& hi = input(i, 1);
    int64_t axis = intAttr(i, "axis", 0);
    axis = axis < 0 ? axis + 4 : axis;
    const int64_t size = windowDims(next(a.win == 'a' ? 'g' : 'G'))[static_cast<size_t>(axis)];
    if (lo.kind != ValueKind::kWindow || hi.kind != ValueKind::kWindow || lo.win != hi.win ||
        lo.sliced != hi.sliced || lo.sliceAxis != axis || hi.sliceAxis != axis ||
        lo.sliceStep != 1 || hi.sliceStep != 1 || hi.sliceStart != 0 ||
        lo.sliceStart != hi.sliceStop || lo.sliceStop < size || lo.sliceStart <= 0 ||
        lo.sliceStart >= size)
      cannot("a Concat of two Slices of one grid along their axis is a roll, x[s:] then x[:s]");
    Value v = values_.at(lo.sliced);
    if (v.kind == ValueKind::kActivation) {  // a grid rolled without a Pad
      const int source = v.layer;
      v = Value{};
      v.kind = ValueKind::kWindow;
      v.win = 'g';
      v.layer = source;
    }
    const int by = static_cast<int>(lo.sliceStart);
    int& roll = axis == 1 ? v.rollH : v.rollW;
    roll = static_cast<int>((roll + by) % size);
    if (v.win == 'G' && v.rollH == 0 && v.rollW == 0 && v.padB == 0 && v.padR == 0)
      produce(i, windowAttention(i, v));
    else
      produce(i, v);
    return true;
  }
  if (op == "Concat" && a.win == 'm') {
    // Patch merging: x[0::2, 0::2], x[1::2, 0::2], x[0::2, 1::2], x[1::2,
    // 1::2] along the channels.
    const int64_t axis = intAttr(i, "axis", 0);
    static const int kRows[] = {0, 1, 0, 1}, kCols[] = {0, 0, 1, 1};
    bool merge = n.input_size() == 4 && (axis == -1 || axis == 3);
    for (int k = 0; merge && k < 4; ++k) {
      const Value& part = input(i, k);
      merge = part.kind == ValueKind::kWindow && part.win == 'm' && part.layer == a.layer &&
              part.padB == a.padB && part.padR == a.padR && part.rollH == 0 && part.rollW == 0 &&
              part.mergeRow == kRows[k] && part.mergeCol == kCols[k];
    }
    const Shape& s = shapeOf(a);
    if (!merge || a.padB != s.h % 2 || a.padR != s.w % 2)
      cannot(
          "a Concat of strided Slices is patch merging: x[0::2, 0::2], x[1::2, 0::2], "
          "x[0::2, 1::2] and x[1::2, 1::2] of the grid (padded to even) along the channels");
    LayerSpec spec;
    spec.blockSize = 2;
    Value v = addLayer(i, LayerKind::kSpaceToDepth, spec, {a.layer}, 3);
    v.channelsLast = true;
    produce(i, v);
    return true;
  }

  // ---- the windows ------------------------------------------------------------
  if (op == "Reshape") {
    const auto target = reshapeTo();
    Value v = a;
    if (a.win == 'g' && target.size() == 6 && target[2] > 0 && target[2] == target[4]) {
      const int64_t m = target[2];
      const Dims d = windowDims(a);
      const Shape& s = shapeOf(a);
      if (d[1] % m != 0 || d[2] % m != 0 || a.padB != (m - s.h % m) % m ||
          a.padR != (m - s.w % m) % m)
        cannot(
            fmt::format("windows of {} on a {}x{} grid padded to {}x{}: strata pads to whole "
                        "windows, below and right",
                        m, s.h, s.w, d[1], d[2]));
      v.win = 'v';
      v.window = static_cast<int>(m);
      v.shiftH = a.rollH;
      v.shiftW = a.rollW;
      if (!reshapeMatches(target, windowDims(v)))
        cannot(fmt::format("Reshape to {}: the windows' view is {}", dimsText(target),
                           dimsText(windowDims(v))));
      produce(i, v);
      return true;
    }
    if (a.win == 'f' && target.size() == 5 && target[2] == 3 && target[3] > 0 &&
        shapeOf(a).c % target[3] == 0) {
      v.heads = static_cast<int>(target[3]);
    }
    if (a.win == 's' && target.size() == 5)
      v.split = true;
    else if (a.win == 's' && target.size() == 4)
      v.split = false;
    static const std::map<char, char> kAfter = {{'u', 'w'}, {'f', 'r'}, {'s', 's'},
                                                {'C', 'j'}, {'o', 'V'}, {'U', 'G'}};
    const auto to = kAfter.find(a.win);
    if (to == kAfter.end())
      cannot(fmt::format("a Reshape of step '{}' is not one the windows take", a.win));
    v.win = to->second;
    if (v.win == 'G') {
      v.rollH = a.shiftH;  // the roll to undo
      v.rollW = a.shiftW;
    }
    if (!reshapeMatches(target, windowDims(v)))
      cannot(fmt::format("Reshape to {}: strata expects {}", dimsText(target),
                         dimsText(windowDims(v))));
    if (v.win == 'G' && v.rollH == 0 && v.rollW == 0 && v.padB == 0 && v.padR == 0)
      produce(i, windowAttention(i, v));
    else
      produce(i, v);
    return true;
  }
  if (op == "Transpose") {
    const auto perm = intsAttr(i, "perm");
    static const std::map<char, std::pair<Dims, char>> kPerms = {{'v', {{0, 1, 3, 2, 4, 5}, 'u'}},
                                                                 {'V', {{0, 1, 3, 2, 4, 5}, 'U'}},
                                                                 {'r', {{2, 0, 3, 1, 4}, 'R'}},
                                                                 {'k', {{0, 1, 3, 2}, 'K'}},
                                                                 {'c', {{0, 2, 1, 3}, 'C'}}};
    const auto to = kPerms.find(a.win);
    if (to == kPerms.end() || perm != to->second.first)
      cannot(fmt::format("a Transpose by {} of step '{}' is not one the windows take",
                         dimsText(perm), a.win));
    produce(i, next(to->second.second));
    return true;
  }
  if (op == "Gather" && a.win == 'R' && intAttr(i, "axis", 0) == 0) {
    const auto index = hasInput(i, 1) ? shapeInts(input(i, 1)) : std::nullopt;
    if (!index || index->size() != 1 || (*index)[0] < 0 || (*index)[0] > 2)
      cannot("Q, K and V are Gathers of index 0, 1 and 2 of the heads");
    produce(i, next("qkx"[(*index)[0]]));
    return true;
  }
  if (op == "MatMul") {
    const Value* w = second;
    if (a.win == 'w' || a.win == 'j') {
      if (!w || w->kind != ValueKind::kConstant || first->kind != ValueKind::kWindow)
        cannot("the windows' projection is a MatMul by a weight");
      const Dims dims = constant(i, 1, "weight");
      const int64_t c = shapeOf(a).c;
      if (dims.size() != 2 || dims[0] != c || (a.win == 'j' && dims[1] != c))
        cannot(fmt::format("a weight {} on windows of {} features", dimsText(dims), c));
      Value v = next(a.win == 'w' ? 'f' : 'o');
      if (a.win == 'w')
        v.fcRows = dims[1];
      produce(i, v);
      return true;
    }
    if (first && second && first->kind == ValueKind::kWindow &&
        second->kind == ValueKind::kWindow &&
        ((first->win == 'q' && second->win == 'K') || (first->win == 'p' && second->win == 'x')) &&
        first->layer == second->layer) {
      Value v = next(first->win == 'q' ? 's' : 'c');
      v.maskSeen = first->maskSeen || second->maskSeen;
      v.positionBiasSeen = first->positionBiasSeen || second->positionBiasSeen;
      v.positionMlpSeen = first->positionMlpSeen || second->positionMlpSeen;
      v.logitScaleSeen = first->logitScaleSeen || second->logitScaleSeen;
      v.normalised = first->normalised | second->normalised;
      if (first->win == 'q' && v.normalised != 0 && v.normalised != 3)
        cannot(
            fmt::format("{} is normalised and {} is not: cosine attention (Swin V2) "
                        "normalises both Q and K",
                        v.normalised == 1 ? "Q" : "K", v.normalised == 1 ? "K" : "Q"));
      produce(i, v);
      return true;
    }
    cannot("MatMuls of windows are Q Kᵀ, P V and the projections by weights");
  }
  if (op == "Add") {
    const Value& other = first->kind == ValueKind::kWindow ? *second : *first;
    Value v = a;
    // The projections' biases (Swin V2's qkv bias with its K third zeroed
    // by ScatterND: still torchvision's parameters).
    const onnx::TensorProto* biasTensor = other.kind == ValueKind::kConstant ? other.tensor
                                          : other.kind == ValueKind::kDerived && a.win == 'f'
                                              ? other.learned
                                              : nullptr;
    if ((a.win == 'f' || a.win == 'o') && biasTensor) {
      const Dims bias = tensorDims(*biasTensor);
      if (bias != Dims{a.win == 'f' ? a.fcRows : int64_t{shapeOf(a).c}})
        cannot(fmt::format("a bias {} of the projection", dimsText(bias)));
      (a.win == 'f' ? v.qkvBiasSeen : v.projBiasSeen) = true;
      produce(i, v);
      return true;
    }
    if (a.win == 's' && other.kind == ValueKind::kDerived && other.positionTable &&
        other.cpbStage > 0 && !a.split) {
      // Swin V2's continuous position bias: an MLP of the (2M - 1)^2
      // offsets, 2 -> 512 (with its bias) -> ReLU -> heads (without).
      const Dims table = tensorDims(*other.positionTable);
      const int64_t side = 2 * int64_t{a.window} - 1;
      if (other.cpbStage != 4 || table != Dims{1, side, side, 2} || other.cpbHidden != 512 ||
          other.cpbHeads != a.heads)
        cannot(
            fmt::format("a continuous position bias of {} offsets through an MLP of {} "
                        "hidden and {} outputs{} for windows of {} and {} heads: strata's is "
                        "the [1, {}, {}, 2] table through Linear(2, 512) with its bias, ReLU "
                        "and Linear(512, {}) without",
                        dimsText(table), other.cpbHidden, other.cpbHeads,
                        other.cpbStage != 4 ? " (not all of its steps)" : "", a.window, a.heads,
                        side, side, a.heads));
      v.positionMlpSeen = true;
      produce(i, v);
      return true;
    }
    if (a.win == 's' && other.kind == ValueKind::kDerived && other.positionTable && !a.split) {
      const Dims table = tensorDims(*other.positionTable);
      const int64_t m = a.window;
      if (table != Dims{(2 * m - 1) * (2 * m - 1), a.heads})
        cannot(
            fmt::format("a relative position bias table {} for windows of {} and {} heads "
                        "(strata's is [(2M - 1)^2, heads] = [{}, {}])",
                        dimsText(table), m, a.heads, (2 * m - 1) * (2 * m - 1), a.heads));
      v.positionBiasSeen = true;
      produce(i, v);
      return true;
    }
    if (a.win == 's' && a.split && other.kind == ValueKind::kDerived && !other.positionTable) {
      v.maskSeen = true;  // the shift's mask, per window
      produce(i, v);
      return true;
    }
    cannot(
        "Adds in windows are the projections' biases, the position bias and the shift's "
        "mask on the scores");
  }
  if (op == "Mul" && a.win == 's' && !a.split && first && second) {
    // Cosine attention's learned logit scale per head, clamped and
    // exponentiated (Swin V2: exp(min(scale, log 100))).
    const Value& other = first->kind == ValueKind::kWindow ? *second : *first;
    if (other.kind != ValueKind::kDerived || !other.learned || a.normalised != 3 ||
        a.logitScaleSeen || tensorDims(*other.learned) != Dims{a.heads, 1, 1})
      cannot(
          fmt::format("the scores of normalised Q and K times a learned logit scale of [{}, "
                      "1, 1] (Swin V2's cosine attention) is the one Mul of the scores",
                      a.heads));
    Value v = a;
    v.logitScaleSeen = true;
    produce(i, v);
    return true;
  }
  if (op == "ReduceL2" && (a.win == 'q' || a.win == 'k')) {
    // F.normalize(x, dim=-1): x / max(|x|, eps), the norm over a head's
    // features kept as an axis.
    const auto axes = intsAttr(i, "axes");
    if ((axes != Dims{-1} && axes != Dims{3}) || intAttr(i, "keepdims", 1) != 1)
      cannot("the norm of Q or K runs over a head's features (axes [-1], keepdims 1)");
    Value v = next('l');
    v.part = a.win;
    produce(i, v);
    return true;
  }
  if ((op == "Clip" || op == "Expand") && a.win == 'l' && first &&
      first->kind == ValueKind::kWindow) {
    produce(i, a);  // max(|x|, eps), broadcast over the features
    return true;
  }
  if (op == "Div" && first && second && first->kind == ValueKind::kWindow &&
      second->kind == ValueKind::kWindow && (first->win == 'q' || first->win == 'k') &&
      second->win == 'l' && second->part == first->win && second->layer == first->layer) {
    Value v = *first;
    v.normalised |= first->win == 'q' ? 1 : 2;
    produce(i, v);
    return true;
  }
  if (op == "Mul" && a.win == 'q' && first && second) {
    const Value& other = first->kind == ValueKind::kWindow ? *second : *first;
    if (other.kind == ValueKind::kDerived || other.kind == ValueKind::kShape ||
        (other.kind == ValueKind::kConstant && other.tensor && other.tensor->dims_size() == 0)) {
      produce(i, a);  // Q scaled by dh^-1/2
      return true;
    }
    cannot("Q is scaled by a number");
  }
  if (op == "Softmax" && a.win == 's' && !a.split) {
    const int64_t axis = intAttr(i, "axis", -1);
    if (axis != -1 && axis != 3)
      cannot("the softmax runs over the keys (the last axis)");
    produce(i, next('p'));
    return true;
  }
  if (op == "Dropout") {
    // An eval-mode export's rate is 0: the identity (attention dropout in
    // windows is not priced).
    const auto rate = attr(i, "ratio") ? std::optional<double>(attr(i, "ratio")->f())
                      : hasInput(i, 1) ? scalarInput(i, 1)
                                       : std::optional<double>(0.5);
    if (!rate || *rate != 0)
      cannot("dropout in windows must be of rate 0 (an eval-mode export)");
    const auto& outs = n.output();
    for (const auto& name : outs)
      if (!name.empty())
        values_[name] = a;
    return true;
  }
  failAt(i, fmt::format("op '{}' in attention in windows (Swin): step '{}' does not continue "
                        "with it (the steps strata follows: docs/onnx.md, Swin)",
                        op, a.win));
}

}  // namespace strata::onnx_import

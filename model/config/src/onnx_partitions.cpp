// MaxViT's block and grid attention as torch.onnx.export writes torchvision's
// (PartitionAttentionLayer, docs/onnx.md): the C x H x W map cut into p x p
// blocks (window_partition: Reshape to [N, C, H / p, p, W / p, p], Transpose,
// Reshape to [N, windows, p^2, C]), for the grid the two middle axes swapped
// (each sequence then holds the positions p apart); a layernorm, the QKV fc
// cut into thirds (torch.chunk), heads split out, a scaled K, the scores as
// an Einsum, plus the relative position bias, softmax, the context as an
// Einsum and the output projection; the residual adds and the MLP on the
// windows as they are; the axes swapped back and the windows put back
// (window_departition). The attention is one strata attention layer with
// window p (block attention) or grid H / p (grid attention) and a position
// bias table; the cutting and putting back are its copies.
#include <fmt/format.h>

#include <cctype>

#include "onnx_importer.h"

namespace strata::onnx_import {

namespace {

// A batched matrix product in an Einsum equation: kScores, A Bᵀ over the
// last axis of both ("...id,...jd->...ij", Q Kᵀ), or kContext, A B
// ("...ij,...jd->...id", P V), each operand of `rank` axes whose leading
// rank - 2 axes are the same in the operands and the output.
enum class Product { kNone, kScores, kContext };

Product einsumProduct(const std::string& equation, size_t rank) {
  std::string eq;
  for (char ch : equation)
    if (ch != ' ')
      eq += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  const size_t arrow = eq.find("->"), comma = eq.find(',');
  if (arrow == std::string::npos || comma == std::string::npos || comma > arrow || rank < 2)
    return Product::kNone;
  const std::string a = eq.substr(0, comma), b = eq.substr(comma + 1, arrow - comma - 1),
                    out = eq.substr(arrow + 2);
  if (a.size() != rank || b.size() != rank || out.size() != rank)
    return Product::kNone;
  for (const std::string* term : {&a, &b, &out})
    for (size_t k = 0; k < rank; ++k)
      if (!std::isalpha(static_cast<unsigned char>((*term)[k])) ||
          term->find((*term)[k], k + 1) != std::string::npos)
        return Product::kNone;
  const size_t lead = rank - 2;
  if (a.substr(0, lead) != b.substr(0, lead) || a.substr(0, lead) != out.substr(0, lead))
    return Product::kNone;
  const std::string batch = a.substr(0, lead);
  const char i = a[lead], x = a[lead + 1], j = b[lead], y = b[lead + 1];
  for (char ch : {i, x, j, y})
    if (batch.find(ch) != std::string::npos)
      return Product::kNone;
  if (x == y && i != j && out[lead] == i && out[lead + 1] == j)
    return Product::kScores;
  if (x == j && i != y && out[lead] == i && out[lead + 1] == y)
    return Product::kContext;
  return Product::kNone;
}

}  // namespace

Dims Importer::groupedDims(const Value& v) const {
  const Shape& s = shapeOf(v);
  const int64_t p = v.window > 0 ? v.window : 1, c = s.c;
  const int64_t rows = s.h / p, cols = s.w / p, windows = rows * cols, area = p * p;
  // The windows of p x p positions; swapped, the grids of the positions p
  // apart, one at each offset in a block.
  const int64_t groups = v.partitionSwap ? area : windows, seq = v.partitionSwap ? windows : area;
  const int64_t h = v.heads > 0 ? v.heads : 1, dh = c / h;
  switch (v.win) {
    case 'P':
    case 'D':
      return {kBatchDim, c, rows, p, cols, p};
    case 'T':
    case 'B':
      return {kBatchDim, rows, cols, p, p, c};
    case 'y':
    case 'j':
    case 'o':
      return {kBatchDim, groups, seq, c};
    case 'z':
    case 'C':
      return {kBatchDim, groups, seq, h, dh};
    case 'q':
    case 'k':
    case 'x':
    case 'c':
      return {kBatchDim, groups, h, seq, dh};
    case 's':
    case 'p':
      return {kBatchDim, groups, h, seq, seq};
    default:
      return {};
  }
}

Value Importer::partitionAttention(const Value& v) {
  const Shape x = shapeOf(v);  // a copy: addLayer may move the layers
  const int at = v.node;
  LayerSpec s = windowSpec(at, v);
  if (v.partitionSwap)
    s.grid = x.h / v.window;  // square: checked where the axes swapped
  else
    s.window = v.window;
  Value out = addLayer(at, LayerKind::kAttention, s, {v.layer}, 3);
  out.channelsLast = true;
  out.partition = v.window;
  out.partitionSwap = v.partitionSwap;
  return out;
}

bool Importer::mapPartitionPart(int i) {
  const auto& n = model_.graph().node(i);
  const std::string& op = n.op_type();
  if (n.input_size() == 0 || !hasInput(i, 0))
    return false;
  // A finished attention (its output projection and that's bias) read by
  // any node but its bias's Add: its layer, for every reader of the name.
  for (int k = 0; k < n.input_size(); ++k) {
    auto it = hasInput(i, k) ? values_.find(n.input(k)) : values_.end();
    if (it == values_.end() || it->second.kind != ValueKind::kWindow || !it->second.grouped ||
        it->second.win != 'o')
      continue;
    const auto at =
        n.input_size() == 2 && hasInput(i, 1 - k) ? values_.find(n.input(1 - k)) : values_.end();
    const Value* other = at == values_.end() ? nullptr : &at->second;
    const bool bias = op == "Add" && other && other->kind == ValueKind::kConstant &&
                      other->tensor && !it->second.projBiasSeen;
    if (!bias)
      it->second = partitionAttention(it->second);
  }
  const Value* first = knownInput(i, 0);
  const Value* second = knownInput(i, 1);
  auto targetOf = [&]() -> std::optional<std::vector<int64_t>> {
    return hasInput(i, 1) ? shapeInts(input(i, 1)) : std::nullopt;
  };

  // ---- a C x H x W activation cut into p x p blocks -----------------------
  if (op == "Reshape" && first && first->kind == ValueKind::kActivation && first->rank == 3 &&
      !first->flat && !first->channelsLast && first->partition == 0 && first->padH == 0 &&
      first->padW == 0 && first->seq == SeqLayout::kBatchFirst) {
    const auto target = targetOf();
    if (!target || target->size() != 6)
      return false;
    const Shape& s = shapeOf(*first);
    const auto& t = *target;
    Value v;
    v.kind = ValueKind::kWindow;
    v.grouped = true;
    v.win = 'P';
    v.layer = first->layer;
    v.window = t[3] > 0 && t[3] <= 4096 ? static_cast<int>(t[3]) : 0;
    if (v.window == 0 || s.h % v.window != 0 || s.w % v.window != 0 ||
        !reshapeMatches(t, groupedDims(v)))
      failAt(i, fmt::format("Reshape of {} to {}: strata maps the cut into p x p blocks, [N, C, "
                            "H / p, p, W / p, p] (MaxViT's window_partition; H and W multiples "
                            "of p)",
                            dimsText(dimsOf(*first)), dimsText(t)));
    produce(i, v);
    return true;
  }

  // ---- an activation cut into windows: its axes swapped, put back, or the
  // thirds of its QKV fc ------------------------------------------------------
  if (first && first->kind == ValueKind::kActivation && first->partition > 0) {
    const Value x = *first;
    if (op == "Transpose") {
      const auto perm = intsAttr(i, "perm");
      if (perm != Dims{0, 2, 1, 3})
        failAt(i, fmt::format("Transpose by {} of windows {}: strata maps the swap of their two "
                              "middle axes, perm [0, 2, 1, 3] (MaxViT's grid)",
                              dimsText(perm), dimsText(dimsOf(x))));
      const Shape& s = shapeOf(x);
      if (!x.partitionSwap && s.h != s.w)
        failAt(i, fmt::format("the grids of a {}x{} map cut into blocks of {}: strata's grid "
                              "attention is square (MaxViT's, on square images)",
                              s.h, s.w, x.partition));
      Value v = x;
      v.partitionSwap = !x.partitionSwap;
      produce(i, v);
      return true;
    }
    if (op == "Reshape") {
      const auto target = targetOf();
      if (x.partitionSwap || !target)
        failAt(i, fmt::format(
                      "Reshape of {}, windows{}: strata maps their Reshape back to [N, "
                      "H / p, W / p, p, p, C] (MaxViT's window_departition)",
                      dimsText(dimsOf(x)),
                      x.partitionSwap ? " whose middle axes are swapped (swap them back)" : ""));
      Value v;
      v.kind = ValueKind::kWindow;
      v.grouped = true;
      v.win = 'B';
      v.layer = x.layer;
      v.window = x.partition;
      if (!reshapeMatches(*target, groupedDims(v)))
        failAt(i, fmt::format("Reshape of windows {} to {}: strata maps their Reshape back to {} "
                              "(MaxViT's window_departition)",
                              dimsText(dimsOf(x)), dimsText(*target), dimsText(groupedDims(v))));
      produce(i, v);
      return true;
    }
    if (op == "Slice" && x.layer >= 0) {
      // Q, K and V: thirds of the QKV fc's features (torch.chunk(qkv, 3, -1)).
      const Layer& fc = layerOf(x);
      const int64_t c = fc.inShape.c;
      if (fc.kind != LayerKind::kFc || fc.inputs.size() != 1 || fc.spec.outputs != 3 * c)
        return false;
      auto one = [&](int k, int64_t fallback) {
        if (!hasInput(i, k))
          return fallback;
        const auto v = shapeInts(input(i, k));
        if (!v || v->size() != 1)
          failAt(i,
                 "the thirds of a QKV fc are Slices of one axis, their starts, ends, axes "
                 "and steps computed from shapes and constants");
        return (*v)[0];
      };
      const int64_t start = one(1, 0), stop = one(2, 0), axis = one(3, 0), step = one(4, 1);
      if ((axis != -1 && axis != 3) || step != 1 || start < 0 || start % c != 0 || start / c > 2 ||
          stop != start + c)
        failAt(i, fmt::format("Slice [{}, {}) step {} along axis {} of a QKV fc of {} features "
                              "on windows: strata maps its thirds along the features (Q, K, V)",
                              start, stop, step, axis, 3 * c));
      if (readersBesidesShapes(n.input(0)) != 3)
        failAt(i, fmt::format("the QKV fc '{}' is read by {} nodes besides its three thirds' "
                              "Slices (and Shapes)",
                              fc.name, readersBesidesShapes(n.input(0)) - 3));
      Value v;
      v.kind = ValueKind::kWindow;
      v.grouped = true;
      v.win = 'y';
      v.part = "qkx"[start / c];
      v.layer = fc.inputs[0];
      v.window = x.partition;
      v.partitionSwap = x.partitionSwap;
      v.fcRows = fc.spec.outputs;
      v.qkvBiasSeen = fc.spec.bias;
      v.qkvFc = x.layer;
      absorbed_.insert(x.layer);
      produce(i, v);
      return true;
    }
    return false;
  }

  // ---- the steps of the windows ------------------------------------------------
  const Value* w = first && first->kind == ValueKind::kWindow && first->grouped      ? first
                   : second && second->kind == ValueKind::kWindow && second->grouped ? second
                                                                                     : nullptr;
  if (!w)
    return false;
  const Value a = *w;
  auto cannot = [&](const std::string& why) {
    failAt(i, fmt::format("op '{}' in attention over windows (MaxViT), at step '{}': {}", op, a.win,
                          why));
  };
  auto next = [&](char step) {
    Value v = a;
    v.win = step;
    return v;
  };
  const Shape& s = shapeOf(a);
  if (op == "Reshape") {
    const auto target = targetOf();
    if (!target)
      cannot("the Reshape's target must be computed from shapes and constants");
    const auto& t = *target;
    Value v = a;
    if (a.win == 'T' || a.win == 'D') {
      // The windows [N, windows, p^2, C], or the map put back [N, C, H, W].
      v = Value{};
      v.layer = a.layer;
      v.rank = 3;
      if (a.win == 'T') {
        v.channelsLast = true;
        v.partition = a.window;
      }
      const Dims want = a.win == 'T' ? dimsOf(v) : Dims{s.c, s.h, s.w};
      Dims withBatch{kBatchDim};
      withBatch.insert(withBatch.end(), want.begin(), want.end());
      if (!reshapeMatches(t, withBatch))
        cannot(fmt::format("Reshape to {}: strata expects {}", dimsText(t), dimsText(withBatch)));
      produce(i, v);
      return true;
    }
    if (a.win == 'y' && t.size() == 5 && t[3] > 0 && t[3] <= s.c && s.c % t[3] == 0)
      v.heads = static_cast<int>(t[3]);
    static const std::map<char, char> kAfter = {{'y', 'z'}, {'C', 'j'}};
    const auto to = kAfter.find(a.win);
    if (to == kAfter.end())
      cannot("no Reshape follows this step");
    v.win = to->second;
    if (!reshapeMatches(t, groupedDims(v)))
      cannot(
          fmt::format("Reshape to {}: strata expects {}", dimsText(t), dimsText(groupedDims(v))));
    produce(i, v);
    return true;
  }
  if (op == "Transpose") {
    const auto perm = intsAttr(i, "perm");
    static const std::map<char, std::pair<Dims, char>> kPerms = {{'P', {{0, 2, 4, 3, 5, 1}, 'T'}},
                                                                 {'B', {{0, 5, 1, 3, 2, 4}, 'D'}},
                                                                 {'z', {{0, 1, 3, 2, 4}, 0}},
                                                                 {'c', {{0, 1, 3, 2, 4}, 'C'}}};
    const auto to = kPerms.find(a.win);
    if (to == kPerms.end() || perm != to->second.first)
      cannot(fmt::format("a Transpose by {} is not one the windows take", dimsText(perm)));
    produce(i, next(a.win == 'z' ? a.part : to->second.second));  // 'z': Q, K or V's heads
    return true;
  }
  if (op == "Mul" && (a.win == 'q' || a.win == 'k') && first && second) {
    const Value& other = first->kind == ValueKind::kWindow ? *second : *first;
    if (other.kind == ValueKind::kDerived || other.kind == ValueKind::kShape ||
        (other.kind == ValueKind::kConstant && other.tensor &&
         elementsOf(tensorDims(*other.tensor)) == 1)) {
      produce(i, a);  // scaled (MaxViT scales K by C^-1/2, not dh^-1/2: no cost of its own)
      return true;
    }
    cannot("Q or K is scaled by a number");
  }
  if (op == "Einsum" && first && second && first->kind == ValueKind::kWindow &&
      second->kind == ValueKind::kWindow && first->grouped && second->grouped) {
    const Product product = einsumProduct(stringAttr(i, "equation", ""), 5);
    const bool scores = product == Product::kScores && first->win == 'q' && second->win == 'k';
    const bool context = product == Product::kContext && first->win == 'p' && second->win == 'x';
    if ((!scores && !context) || first->qkvFc != second->qkvFc || first->heads != second->heads)
      cannot(
          fmt::format("Einsum '{}' of steps '{}' and '{}': strata maps Q Kᵀ "
                      "('bghid,bghjd->bghij') and P V ('bghij,bghjd->bghid') of one QKV fc",
                      stringAttr(i, "equation", ""), first->win, second->win));
    Value v = next(scores ? 's' : 'c');
    v.positionBiasSeen = first->positionBiasSeen || second->positionBiasSeen;
    produce(i, v);
    return true;
  }
  if (op == "Add" && first && second) {
    const Value& other = first->kind == ValueKind::kWindow ? *second : *first;
    Value v = a;
    if (a.win == 's' && other.kind == ValueKind::kDerived && other.positionTable &&
        !a.positionBiasSeen) {
      const Dims table = tensorDims(*other.positionTable);
      const int64_t side = a.partitionSwap ? s.h / a.window : a.window;
      if (table != Dims{(2 * side - 1) * (2 * side - 1), a.heads})
        cannot(
            fmt::format("a relative position bias table {} for {} of {} x {} positions and {} "
                        "heads (strata's is [(2 side - 1)^2, heads] = [{}, {}])",
                        dimsText(table), a.partitionSwap ? "grids" : "windows", side, side, a.heads,
                        (2 * side - 1) * (2 * side - 1), a.heads));
      v.positionBiasSeen = true;
      produce(i, v);
      return true;
    }
    if (a.win == 'o' && other.kind == ValueKind::kConstant && other.tensor) {
      const Dims bias = tensorDims(*other.tensor);
      if (bias != Dims{s.c})
        cannot(
            fmt::format("a bias {} of the output projection of {} features", dimsText(bias), s.c));
      v.projBiasSeen = true;
      produce(i, v);
      return true;
    }
    cannot(
        "Adds in the windows' attention are the position bias on the scores and the output "
        "projection's bias");
  }
  if (op == "Softmax" && a.win == 's') {
    const int64_t axis = intAttr(i, "axis", -1);
    if (axis != -1 && axis != 4)
      cannot("the softmax runs over the keys (the last axis)");
    produce(i, next('p'));
    return true;
  }
  if (op == "MatMul" && a.win == 'j' && first && first->kind == ValueKind::kWindow && second &&
      second->kind == ValueKind::kConstant) {
    const Dims dims = constant(i, 1, "weight");
    if (dims != Dims{s.c, s.c})
      cannot(fmt::format("the output projection's weight {} on windows of {} features",
                         dimsText(dims), s.c));
    Value v = next('o');
    v.node = i;
    produce(i, v);
    return true;
  }
  failAt(i, fmt::format("op '{}' in attention over windows (MaxViT): step '{}' does not continue "
                        "with it (the steps strata follows: docs/onnx.md, MaxViT)",
                        op, a.win));
}

}  // namespace strata::onnx_import

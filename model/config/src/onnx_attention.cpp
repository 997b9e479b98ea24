// Shapes, derived constants and decomposed attention (docs/onnx.md): what
// torch.onnx.export writes for x.size() and view(), and for a multi-head
// attention written out as a PyTorch user writes GPT-2 (one Linear computing
// Q, K and V, split; the heads split out by view and transpose; Q Kᵀ,
// scaled, masked, softmax, dropout; times V; the heads joined; the output
// projection). The shape computations are evaluated (the batch kept
// symbolic); masks and position ids are followed as values computed from
// constants alone; the tensors inside an attention are followed by which
// part of which attention they are and the order of their axes, and the
// whole folds into one strata attention layer at its output projection.
#include <algorithm>
#include <cmath>

#include "onnx_importer.h"
#include "strata/model/checked.h"

namespace strata::onnx_import {

namespace {

// Ops that compute shapes, or values from constants alone.
bool staticOp(const std::string& op) {
  static const std::set<std::string> ops = {
      "Gather",  "Unsqueeze", "Squeeze", "Concat",      "Cast",           "Add",
      "Sub",     "Mul",       "Div",     "Slice",       "Range",          "Equal",
      "Where",   "Expand",    "Not",     "Less",        "Greater",        "ConstantOfShape",
      "Reshape", "Transpose", "Trilu",   "LessOrEqual", "GreaterOrEqual", "MatMul",
      "Cos",     "Sin",       "Mod",     "Pow",         "ScatterND",      "Clip",
      "Exp",     "Sigmoid"};
  return ops.count(op) > 0;
}

// The base of rotary frequencies inv_freq_i = base^(-2i/d), i < d/2, as
// Hugging Face's rotary embeddings store them (a constant of the file);
// 0 when t holds no such progression.
double rotaryFrequencyBase(const onnx::TensorProto& t) {
  // A head has a few hundred features at most: a bigger tensor (a mask
  // table) is not read.
  if (elementsOf(tensorDims(t)) > 4096)
    return 0;
  const auto f = inlineFloats(t);
  if (!f || f->size() < 2 || std::fabs((*f)[0] - 1) > 1e-6 || !((*f)[1] > 0 && (*f)[1] < 1))
    return 0;
  const double ratio = (*f)[1];
  for (size_t k = 2; k < f->size(); ++k)
    if (std::fabs((*f)[k] - std::pow(ratio, static_cast<double>(k))) >
        1e-4 * std::pow(ratio, static_cast<double>(k)))
      return 0;
  // ratio = base^(-2/d) = base^(-1/n), n = d/2 frequencies.
  return std::pow(ratio, -static_cast<double>(f->size()));
}

// The ints of a shape or Reshape target, the batch and its multiples as
// "N" and "N x m".
std::string shapeText(const std::vector<int64_t>& ints) {
  std::string out = "[";
  for (size_t k = 0; k < ints.size(); ++k) {
    const int64_t v = ints[k];
    out += k ? ", " : "";
    out += !isBatchMultiple(v)   ? std::to_string(v)
           : batchFactor(v) == 1 ? std::string("N")
                                 : fmt::format("N x {}", batchFactor(v));
  }
  return out + "]";
}

const char* partName(char part) {
  switch (part) {
    case 'q':
      return "Q";
    case 'k':
      return "K";
    case 'v':
      return "V";
    case 's':
      return "scores";
    case 'p':
      return "probabilities";
    case 'x':
      return "heads of a projection (Q, K or V)";
    case 'r':
      return "rotary positions on the heads of a projection";
    default:
      return "context";
  }
}

}  // namespace

std::optional<std::vector<int64_t>> Importer::shapeInts(const Value& v) const {
  if (v.kind == ValueKind::kShape)
    return v.ints;
  if (v.kind == ValueKind::kConstant && v.tensor && !v.transposed)
    return inlineInt64s(*v.tensor);
  return std::nullopt;
}

Dims Importer::reshapeTarget(int i, const Dims& from, const std::vector<int64_t>& target) const {
  const bool allowZero = intAttr(i, "allowzero", 0) != 0;
  if (target.empty() || !(target[0] == kBatchDim || target[0] == -1 || target[0] == 0))
    failAt(i, "a Reshape must keep the batch (dim 0)");
  Dims dims;
  int infer = -1;
  for (size_t k = 1; k < target.size(); ++k) {
    int64_t v = target[k];
    if (v == 0 && !allowZero) {
      if (k - 1 >= from.size())
        failAt(i, fmt::format("Reshape copies dim {} of a tensor of {} per-example dims", k,
                              from.size()));
      v = from[k - 1];
    } else if (v == -1) {
      if (infer >= 0)
        failAt(i, "a Reshape infers one dim at most");
      infer = static_cast<int>(dims.size());
      v = 1;
    } else if (v <= 0 || v > std::numeric_limits<int>::max()) {
      failAt(i, fmt::format("Reshape to a dim of {}",
                            v == kBatchDim       ? std::string("the batch")
                            : isBatchMultiple(v) ? fmt::format("the batch x {}", batchFactor(v))
                                                 : std::to_string(v)));
    }
    dims.push_back(v);
  }
  // Counted exactly (at most 2^53) or refused.
  auto count = [&](const Dims& d) {
    int64_t c = 1;
    for (int64_t x : d)
      if (!checkedMul(c, x, c, kMaxExactCount))
        failAt(i, fmt::format("Reshape to {}: over 2^53 elements per example", dimsText(d)));
    return c;
  };
  const int64_t elements = count(from);
  const int64_t known = count(dims);
  if (infer >= 0) {
    if (known <= 0 || elements % known != 0)
      failAt(i, fmt::format("Reshape of {} cannot infer a dim", dimsText(from)));
    dims[static_cast<size_t>(infer)] = elements / known;
  }
  if (count(dims) != elements)
    failAt(i,
           fmt::format("Reshape of {} to {}: the elements differ", dimsText(from), dimsText(dims)));
  return dims;
}

bool Importer::mapShapeOrDerived(int i) {
  const auto& n = model_.graph().node(i);
  const std::string& op = n.op_type();
  Value out;
  if (op == "Shape") {
    const Value& x = input(i, 0);
    Dims dims;
    bool batchInside = false;  // the batch is one of dims (a time-major layout)
    if (x.kind == ValueKind::kTokens) {
      dims = {net_.input.h};
    } else if (x.kind == ValueKind::kActivation && x.padH == 0 && x.padW == 0) {
      dims = dimsOf(x);
      batchInside = x.seq == SeqLayout::kTimeMajor || x.seq == SeqLayout::kMergedRows;
      if (x.seq == SeqLayout::kTimeMajor)
        dims.insert(dims.begin() + 1, kBatchDim);
      else if (x.seq == SeqLayout::kMergedRows)
        dims[0] = batchTimes(dims[0]);
    } else if (x.kind == ValueKind::kChannelGroups) {
      const Shape s = shapeOf(x);
      const int64_t g = x.groups, c = s.c / g;
      dims = x.swapped ? Dims{c, g, s.h, s.w} : Dims{g, c, s.h, s.w};
    } else if (x.kind == ValueKind::kShape || (x.kind == ValueKind::kConstant && shapeInts(x))) {
      // The shape of int64s computed from shapes (F.pad's pads, as
      // torch.onnx.export computes them): their count, or their dims.
      out.kind = ValueKind::kShape;
      if (x.kind == ValueKind::kShape)
        out.ints = x.scalar             ? Dims{}
                   : x.intsDims.empty() ? Dims{static_cast<int64_t>(x.ints.size())}
                                        : x.intsDims;
      else
        out.ints = tensorDims(*x.tensor);
      produce(i, out);
      return true;
    } else if (x.kind == ValueKind::kDerived || x.kind == ValueKind::kConstant) {
      // The shape of a derived value or of a weight (ViT's expand of its
      // class token to [N, -1, -1]): a value computed from shapes, not
      // followed.
      Value derived;
      derived.kind = ValueKind::kDerived;
      produce(i, derived);
      return true;
    } else if (x.kind == ValueKind::kWindow) {
      batchInside = true;
      dims = windowDims(x);
      if (dims.empty())
        return false;
    } else if (x.kind == ValueKind::kAttention && x.axes.find('g') == std::string::npos) {
      // Time-major axes, and GPT-NeoX's [N H, T, dh] views, name the batch's.
      batchInside = x.seq == SeqLayout::kTimeMajor || x.axes.find('b') != std::string::npos;
      dims = attentionDims(x);
    } else {
      return false;
    }
    out.kind = ValueKind::kShape;
    if (!batchInside)
      out.ints = {kBatchDim};
    out.ints.insert(out.ints.end(), dims.begin(), dims.end());
    // start and end (opset 15): a part of the shape.
    const int64_t size = static_cast<int64_t>(out.ints.size());
    auto clamp = [&](int64_t v) { return std::clamp(v < 0 ? v + size : v, int64_t{0}, size); };
    const int64_t start = clamp(intAttr(i, "start", 0)), end = clamp(intAttr(i, "end", size));
    out.ints =
        std::vector<int64_t>(out.ints.begin() + start, out.ints.begin() + std::max(start, end));
    produce(i, out);
    return true;
  }
  if (!staticOp(op) || n.input_size() == 0)
    return false;
  // A float scalar cast to a float type (torch.onnx.export's scales, alpha
  // and beta): the same number.
  if (op == "Cast" && hasInput(i, 0) && input(i, 0).kind == ValueKind::kConstant &&
      input(i, 0).tensor && !shapeInts(input(i, 0)) && inlineScalar(*input(i, 0).tensor) &&
      (intAttr(i, "to", 0) == onnx::TensorProto::FLOAT ||
       intAttr(i, "to", 0) == onnx::TensorProto::DOUBLE)) {
    produce(i, input(i, 0));
    return true;
  }
  // Every input computed from shapes and constants alone.
  for (int k = 0; k < n.input_size(); ++k) {
    if (!hasInput(i, k))
      continue;
    auto it = values_.find(n.input(k));
    if (it == values_.end())
      return false;
    const auto kind = it->second.kind;
    if (kind != ValueKind::kShape && kind != ValueKind::kConstant && kind != ValueKind::kDerived)
      return false;
    // A MatMul of constants by values computed from them (rotary
    // frequencies times positions); a MatMul by a weight is an fc.
    if (op == "MatMul" && kind == ValueKind::kConstant)
      return false;
  }
  // A table gathered at position ids is an embedding's positions (mapGather),
  // and a weight's Transpose a weight (mapNode).
  const Value& first = input(i, 0);
  if ((op == "Gather" || op == "Transpose") && first.kind == ValueKind::kConstant &&
      !shapeInts(first))
    return false;
  std::vector<std::optional<std::vector<int64_t>>> ints;
  bool allInts = true;
  for (int k = 0; k < n.input_size(); ++k) {
    ints.push_back(hasInput(i, k) ? shapeInts(input(i, k)) : std::nullopt);
    allInts = allInts && (!hasInput(i, k) || ints.back());
  }
  auto isScalar = [&](int k) {
    const Value& v = input(i, k);
    return v.kind == ValueKind::kShape ? v.scalar : v.tensor && v.tensor->dims_size() == 0;
  };
  out.kind = ValueKind::kDerived;
  if (allInts) {
    const auto& a = *ints[0];
    out.kind = ValueKind::kShape;
    if (op == "Cast") {
      out.ints = a;
      out.scalar = isScalar(0);
      if (input(i, 0).kind == ValueKind::kShape)
        out.intsDims = input(i, 0).intsDims;
    } else if (op == "Gather" && n.input_size() == 2 && intAttr(i, "axis", 0) == 0) {
      for (int64_t index : *ints[1]) {
        const int64_t at = index < 0 ? index + static_cast<int64_t>(a.size()) : index;
        if (at < 0 || at >= static_cast<int64_t>(a.size()))
          failAt(i, fmt::format("Gather of index {} from a shape of {} values", index, a.size()));
        out.ints.push_back(a[static_cast<size_t>(at)]);
      }
      out.scalar = isScalar(1);
    } else if (op == "Unsqueeze" && isScalar(0)) {
      out.ints = a;
    } else if (op == "Squeeze" && a.size() == 1) {
      out.ints = a;
      out.scalar = true;
    } else if (op == "Concat") {
      for (const auto& part : ints)
        out.ints.insert(out.ints.end(), part->begin(), part->end());
    } else if ((op == "Add" || op == "Sub" || op == "Mul" || op == "Div") && n.input_size() == 2) {
      const auto& b = *ints[1];
      const size_t size = std::max(a.size(), b.size());
      if ((a.size() != 1 && b.size() != 1 && a.size() != b.size()) || size == 0)
        failAt(i, fmt::format("{} of shapes {} and {}", op, dimsText(a), dimsText(b)));
      for (size_t k = 0; k < size; ++k) {
        const int64_t x = a[a.size() == 1 ? 0 : k], y = b[b.size() == 1 ? 0 : k];
        if (isBatchMultiple(x) || isBatchMultiple(y)) {
          // N m times a number, or divided by one of m's divisors, stays a
          // multiple of the batch; any other arithmetic on it is not followed.
          const bool both = isBatchMultiple(x) && isBatchMultiple(y);
          const int64_t m = batchFactor(isBatchMultiple(x) ? x : y);
          const int64_t other = isBatchMultiple(x) ? y : x;
          int64_t r = 0;
          if (!both && op == "Mul" && other > 0 && !__builtin_mul_overflow(m, other, &r) &&
              r <= kMaxBatchFactor) {
            out.ints.push_back(batchTimes(r));
            continue;
          }
          if (!both && op == "Div" && isBatchMultiple(x) && y > 0 && m % y == 0) {
            out.ints.push_back(batchTimes(m / y));
            continue;
          }
          out.kind = ValueKind::kDerived;
          break;
        }
        if (op == "Div" && y == 0)
          failAt(i, "Div of a shape by 0");
        int64_t r = 0;
        const bool overflow = op == "Add"   ? __builtin_add_overflow(x, y, &r)
                              : op == "Sub" ? __builtin_sub_overflow(x, y, &r)
                              : op == "Mul" ? __builtin_mul_overflow(x, y, &r)
                                            : (x == std::numeric_limits<int64_t>::min() && y == -1);
        if (overflow)
          failAt(i, fmt::format("{} of the shape values {} and {} overflows", op, x, y));
        out.ints.push_back(op == "Div" ? x / y : r);
      }
      out.scalar = isScalar(0) && isScalar(1);
    } else if (op == "Slice" && n.input_size() >= 3) {
      // Along axis 0, step 1 or -1 (F.pad's pads reversed pair by pair); of
      // an [r, c] value (intsDims) whole rows.
      const Dims& dims = input(i, 0).kind == ValueKind::kShape ? input(i, 0).intsDims : Dims{};
      const int64_t width = dims.size() == 2 ? dims[1] : 1;
      const int64_t size = static_cast<int64_t>(a.size()) / width;
      const int64_t step = n.input_size() > 4 && ints[4] ? (*ints[4])[0] : 1;
      if ((n.input_size() > 3 && ints[3] && (*ints[3])[0] != 0) || (step != 1 && step != -1))
        failAt(i, "Slice of a shape along its first axis with step 1 or -1");
      int64_t from = (*ints[1])[0], until = (*ints[2])[0];
      from = from < 0 ? from + size : from;
      until = until < 0 ? until + size : until;
      if (step == 1) {
        from = std::clamp(from, int64_t{0}, size);
        until = std::clamp(until, int64_t{0}, size);
      } else {
        from = std::clamp(from, int64_t{-1}, size - 1);
        until = std::clamp(until, int64_t{-1}, size - 1);
      }
      for (int64_t r = from; step == 1 ? r < until : r > until; r += step)
        out.ints.insert(out.ints.end(), a.begin() + r * width, a.begin() + (r + 1) * width);
      if (dims.size() == 2)
        out.intsDims = {static_cast<int64_t>(out.ints.size()) / width, width};
    } else if (op == "Reshape" && ints[1]) {
      // Int64s viewed as [r, c] or flat again (F.pad's pads).
      const auto& to = *ints[1];
      const int64_t count = static_cast<int64_t>(a.size());
      out.ints = a;
      if (to.size() == 2 && count > 0 && (to[0] == -1 || to[1] == -1) &&
          count % std::max(to[0], to[1]) == 0 && std::max(to[0], to[1]) > 0) {
        const int64_t known = std::max(to[0], to[1]);
        out.intsDims = to[0] == -1 ? Dims{count / known, known} : Dims{known, count / known};
      } else if (!(to.size() == 1 && (to[0] == -1 || to[0] == count))) {
        out.kind = ValueKind::kDerived;
        out.ints.clear();
      }
    } else if (op == "Transpose" && input(i, 0).kind == ValueKind::kShape &&
               input(i, 0).intsDims.size() == 2) {
      const Dims& dims = input(i, 0).intsDims;
      for (int64_t c = 0; c < dims[1]; ++c)
        for (int64_t r = 0; r < dims[0]; ++r)
          out.ints.push_back(a[static_cast<size_t>(r * dims[1] + c)]);
      out.intsDims = {dims[1], dims[0]};
    } else if (op == "ConstantOfShape" && a.size() == 1 && a[0] >= 0 && a[0] <= 64) {
      // A few int64s of one value (F.pad's zero pads of the leading dims).
      const auto* value = attr(i, "value");
      const auto fill = value && value->has_t() ? inlineInt64s(value->t()) : std::nullopt;
      if (fill && fill->size() == 1) {
        out.ints.assign(static_cast<size_t>(a[0]), (*fill)[0]);
      } else {
        out.kind = ValueKind::kDerived;
        out.ints.clear();
      }
    } else if (op == "Mod" && n.input_size() == 2 && a.size() == 1 && ints[1]->size() == 1 &&
               (*ints[1])[0] > 0 && !isBatchMultiple(a[0]) && intAttr(i, "fmod", 0) == 0) {
      // Python's %, the sign of the divisor's: window padding (W % M).
      const int64_t y = (*ints[1])[0];
      out.ints = {((a[0] % y) + y) % y};
      out.scalar = isScalar(0) && isScalar(1);
    } else {
      out.kind = ValueKind::kDerived;
      out.ints.clear();
    }
  }
  // What a causal mask is made of: a square table (its last two dims equal),
  // a Trilu, a comparison of positions, or a value computed from them.
  if (out.kind == ValueKind::kDerived) {
    out.causalMask = op == "Trilu" || op == "Less" || op == "Greater" || op == "LessOrEqual" ||
                     op == "GreaterOrEqual";
    for (int k = 0; k < n.input_size() && !out.causalMask; ++k) {
      if (!hasInput(i, k))
        continue;
      const Value& x = input(i, k);
      const Dims d = x.tensor ? tensorDims(*x.tensor) : Dims{};
      out.causalMask = (x.kind == ValueKind::kDerived && x.causalMask) ||
                       (x.kind == ValueKind::kConstant && d.size() >= 2 && d.back() > 1 &&
                        d[d.size() - 2] == d.back());
    }
  }
  // Zeros: ConstantOfShape of 0 (its value attribute absent or 0), and any
  // product of them.
  if (out.kind == ValueKind::kDerived) {
    if (op == "ConstantOfShape") {
      const auto* value = attr(i, "value");
      const auto fill = value && value->has_t() ? inlineScalar(value->t()) : std::optional(0.0);
      out.zeros = fill && *fill == 0;
    } else if (op == "Mul") {
      for (int k = 0; k < n.input_size(); ++k)
        out.zeros = out.zeros || (hasInput(i, k) && input(i, k).kind == ValueKind::kDerived &&
                                  input(i, k).zeros);
    }
  }
  // Rotary frequencies (a constant inv_freq) and what is computed from them
  // (cos and sin of positions times them): their base.
  if (out.kind == ValueKind::kDerived)
    for (int k = 0; k < n.input_size() && out.freqBase == 0; ++k)
      if (hasInput(i, k)) {
        const Value& x = input(i, k);
        out.freqBase = x.kind == ValueKind::kDerived                ? x.freqBase
                       : x.kind == ValueKind::kConstant && x.tensor ? rotaryFrequencyBase(*x.tensor)
                                                                    : 0;
      }
  // An int64 initializer viewed flat (its values, stored as external data,
  // are not read): the offsets a position bias table is gathered at.
  if (out.kind == ValueKind::kDerived && op == "Reshape" && first.kind == ValueKind::kConstant &&
      first.tensor && first.tensor->data_type() == onnx::TensorProto::INT64 && ints.size() > 1 &&
      ints[1] && *ints[1] == std::vector<int64_t>{-1})
    out.flatElements = elementsOf(tensorDims(*first.tensor));
  // Swin's relative position bias table (and V2's MLP of its offsets),
  // through its view, transpose and unsqueeze (V2: its sigmoid and scale).
  if (out.kind == ValueKind::kDerived && first.kind == ValueKind::kDerived) {
    out.positionTable = first.positionTable;
    out.cpbStage = first.cpbStage;
    out.cpbHidden = first.cpbHidden;
    out.cpbHeads = first.cpbHeads;
  }
  // A learned tensor clamped, exponentiated, or with entries overwritten
  // (Swin V2's logit scale; its qkv bias, the K third zeroed): the tensor.
  if (out.kind == ValueKind::kDerived && (op == "Clip" || op == "Exp" || op == "ScatterND"))
    out.learned = first.kind == ValueKind::kDerived                         ? first.learned
                  : first.kind == ValueKind::kConstant && !shapeInts(first) ? first.tensor
                                                                            : nullptr;
  // A learned tensor expanded over the batch (ViT's class token): its
  // initializer, for the Concat that reads it.
  if (op == "Expand" && first.kind == ValueKind::kConstant && first.tensor && !shapeInts(first))
    out.expanded = first.tensor;
  // Each output: the shape, or a value computed from constants (its
  // contents are not followed: a causal mask, position ids).
  for (const auto& name : n.output())
    if (!name.empty())
      values_[name] = out;
  return true;
}

int64_t Importer::headDim(const Value& v) const {
  const Layer& l = net_.layers[static_cast<size_t>(v.layer)];
  // A projection's own heads split its outputs; Q, K and V sliced from one
  // fc (or an attention folded) have heads of its input's width.
  const int64_t features = v.part == 'x' && l.kind == LayerKind::kFc ? l.spec.outputs : l.inShape.c;
  const int own = v.kvHeads > 0 ? v.kvHeads : v.heads;
  return own > 0 ? features / own : features;
}

Dims Importer::attentionDims(const Value& v) const {
  const Layer& l = net_.layers[static_cast<size_t>(v.layer)];
  const int64_t t = l.inShape.h;
  if (v.axes == "t")
    return {t, l.inShape.c};
  Dims dims;
  for (char axis : v.axes) {
    switch (axis) {
      case 't':
      case 's':
        dims.push_back(t);
        break;
      case 'h':
      case 'g':  // repeat_kv's copies, known only once reshaped (mapRotaryOrRepeat)
        dims.push_back(v.heads);
        break;
      case 'u':
        dims.push_back(1);
        break;
      case 'f':
        dims.push_back(l.inShape.c);
        break;
      case 'n':
        dims.push_back(kBatchDim);
        break;
      case 'b':
        dims.push_back(batchTimes(v.heads));
        break;
      case 'r':
        dims.push_back(batchTimes(t));
        break;
      default: {
        // A head's features, or the slice of them rotary positions are at
        // (rotate_half's halves, partial rotary's turning part).
        const int64_t dh = headDim(v);
        const int64_t part = v.ropePart > 0 ? v.ropePart : dh;
        dims.push_back(v.rope == 'h'   ? v.sliceStop - v.sliceStart
                       : v.rope == 'n' ? part / 2
                       : v.rope != 0   ? part
                                       : dh);
      }
    }
  }
  return dims;
}

void Importer::cannotFollow(int i, int at, const std::string& why) const {
  const auto& n = model_.graph().node(i);
  const Value& a = input(i, at);
  failAt(i, fmt::format("op '{}' reads '{}', the {} of the attention whose Q, K and V layer "
                        "'{}' computes, {}: strata folds Split (or separate Q, K and V fcs), "
                        "Reshape to heads, rotary positions (x cos + rotate_half(x) sin), "
                        "repeat_kv (Unsqueeze, Expand, Reshape), Transpose, "
                        "MatMul of Q by Kᵀ, a scale, a mask, Softmax, Dropout, MatMul by V, "
                        "Transpose, Reshape and the output projection's MatMul into one "
                        "attention",
                        n.op_type(), n.input(at), partName(a.rope != 0 ? 'r' : a.part),
                        net_.layers[static_cast<size_t>(a.layer)].name, why));
}

// Rotary positions as Hugging Face's Llama writes them, on a projection's
// heads [H, T, dh] (or [T, H, dh]): x * cos + rotate_half(x) * sin, where
// rotate_half(x) = cat(-x[..., dh/2:], x[..., :dh/2]) and cos and sin are
// computed from positions and constants alone; and repeat_kv, K's and V's
// heads shared among the query heads: x[:, :, None].expand(N, kv, rep, T,
// dh).reshape(N, kv rep, T, dh).
bool Importer::mapRotaryOrRepeat(int i, int at) {
  const auto& n = model_.graph().node(i);
  const std::string& op = n.op_type();
  const Value a = input(i, at);
  // Separate projections' heads (x), and Q and K sliced from GPT-NeoX's
  // fused projection per head.
  if (a.kind != ValueKind::kAttention || (a.part != 'x' && !(a.part == 'q' || a.part == 'k')) ||
      a.seq != SeqLayout::kBatchFirst)
    return false;
  auto cannot = [&](const std::string& why) { cannotFollow(i, at, why); };
  const int64_t dh = headDim(a);
  const bool heads = a.axes == "htd" || a.axes == "thd";
  // The last axis, of a tensor of 4 axes with the batch.
  auto lastAxis = [&](int64_t axis) { return axis == -1 || axis == 3; };
  Value v = a;
  if (op == "Mul" && n.input_size() == 2) {
    // cos or sin: computed from positions and constants, or (positions
    // known when exported) a constant table; a scalar is a scale.
    const Value& table = input(i, 1 - at);
    const bool constantTable = table.kind == ValueKind::kConstant && table.tensor &&
                               elementsOf(tensorDims(*table.tensor)) > 1;
    if (table.kind != ValueKind::kDerived && !constantTable)
      return false;  // (the scale's and the other mappings' errors)
    if (!heads)
      cannot(fmt::format("multiplied by a table with its axes {}", a.axes));
    if (a.rope == 0 && !a.rotary) {
      v.rope = 'c';
    } else if (a.rope == 'h' && a.sliceStart == 0 && a.ropeWidth == dh && a.sliceStop < dh &&
               a.sliceStop % 2 == 0) {
      v.rope = 'c';  // the first features of each head turn (partial rotary)
      v.ropePart = a.sliceStop;
    } else if (a.rope == 'r') {
      v.rope = 's';
    } else if (a.rope == 'h') {
      cannot(
          fmt::format("features [{}, {}) of its {} multiplied by a table: rotary positions "
                      "turn all of a head's features or its first ones (an even number)",
                      a.sliceStart, a.sliceStop, a.ropeWidth));
    } else {
      cannot("multiplied by a second table: rotary positions are x cos + rotate_half(x) sin");
    }
    v.ropeBase = std::max(a.ropeBase, table.freqBase);
  } else if (op == "Slice" && n.input_size() >= 4 && at == 0) {
    // Features [begin, end) of the heads (rope 'h'): rotate_half's halves,
    // or partial rotary's turning part and the rest; of a turning part (an
    // 'h' from 0), its halves.
    const auto starts = shapeInts(input(i, 1)), ends = shapeInts(input(i, 2)),
               axes = shapeInts(input(i, 3));
    const auto steps = n.input_size() > 4 && hasInput(i, 4) ? shapeInts(input(i, 4))
                                                            : std::optional<Dims>(Dims{1});
    const bool part = a.rope == 'h' && a.sliceStart == 0 && a.ropeWidth == dh;
    // GPT-NeoX's fused query_key_value viewed per head as [N, T, H, 3 dh]:
    // Q, K and V are slices of each head.
    const Layer& fc = net_.layers[static_cast<size_t>(a.layer)];
    if (a.part == 'x' && a.rope == 0 && fc.kind == LayerKind::kFc &&
        fc.spec.outputs == 3 * fc.inShape.c && a.heads > 0 && dh * a.heads == fc.spec.outputs &&
        dh % 3 == 0) {
      // GPT-NeoX's fused query_key_value viewed as [N, T, H, 3 dh]: each
      // head's Q, K and V are its thirds (the same fc as GPT-2's thirds of
      // all features, its rows in another order).
      const int64_t third = dh / 3;
      const int64_t begin = starts && starts->size() == 1 ? (*starts)[0] : -1;
      const int64_t end = ends && ends->size() == 1 ? std::min((*ends)[0], dh) : -1;
      if (!axes || axes->size() != 1 || !lastAxis((*axes)[0]) || !steps || steps->size() != 1 ||
          (*steps)[0] != 1 || begin < 0 || begin % third != 0 || end != begin + third ||
          a.axes != "thd")
        cannot(
            fmt::format("sliced per head otherwise than into thirds of its 3 x {} features "
                        "(GPT-NeoX's Q, K and V of each head)",
                        third));
      AttentionState& state = attention_[a.layer];
      const int bit = 1 << (begin / third);
      if ((state.slices & bit) != 0)
        cannot(fmt::format("sliced to features [{}, {}) of each head a second time", begin, end));
      state.slices |= bit;
      state.sliced = n.input(0);
      v.part = "qkv"[begin / third];
      values_[n.output(0)] = v;
      return true;
    }
    if (!starts || !ends || !axes || !steps || starts->size() != 1 || ends->size() != 1 ||
        axes->size() != 1 || steps->size() != 1 || (*steps)[0] != 1 || !lastAxis((*axes)[0]) ||
        !heads || (a.rope != 0 && !part) || a.rotary)
      cannot("sliced otherwise than into the two halves of its features that rotate_half takes");
    const int64_t width = part ? a.sliceStop : dh;
    const int64_t begin = (*starts)[0], end = std::min((*ends)[0], width);
    if (begin < 0 || end <= begin)
      cannot(fmt::format("sliced along its {} features to [{}, {})", width, begin, end));
    v.rope = 'h';
    v.sliceStart = begin;
    v.sliceStop = end;
    v.ropeWidth = width;
  } else if (op == "Neg" && a.rope == 'h' && a.ropeWidth % 2 == 0 &&
             a.sliceStart == a.ropeWidth / 2 && a.sliceStop == a.ropeWidth) {
    v.rope = 'n';  // -x2, the second half
    v.ropePart = a.ropeWidth < dh ? a.ropeWidth : 0;
  } else if (op == "Concat" && n.input_size() == 2 && at == 0 && a.rope == 'n') {
    const Value& first = input(i, 1);
    if (!lastAxis(intAttr(i, "axis", 0)) || first.kind != ValueKind::kAttention ||
        first.layer != a.layer || first.part != a.part || first.rope != 'h' ||
        first.sliceStart != 0 || first.ropeWidth != (a.ropePart > 0 ? a.ropePart : dh) ||
        first.sliceStop != first.ropeWidth / 2 || first.axes != a.axes)
      cannot(
          "concatenated with something other than the first half of the same heads along "
          "the features (rotate_half's cat(-x2, x1))");
    v.rope = 'r';
  } else if (op == "Concat" && n.input_size() == 2 && at == 0 && a.rope == 'd') {
    // Partial rotary: the turned features, then the rest as they are.
    const Value& rest = input(i, 1);
    if (!lastAxis(intAttr(i, "axis", 0)) || rest.kind != ValueKind::kAttention ||
        rest.layer != a.layer || rest.part != a.part || rest.rope != 'h' || rest.ropeWidth != dh ||
        rest.sliceStart != a.ropePart || rest.sliceStop != dh || rest.axes != a.axes)
      cannot(
          fmt::format("its first {} features turned and concatenated with something other "
                      "than its features [{}, {}) (partial rotary's cat(x_rot, x_pass))",
                      a.ropePart, a.ropePart, dh));
    v.rope = 0;
    v.rotary = true;
    v.rotaryDims = a.ropePart;
    v.ropePart = 0;
  } else if (op == "Add" && n.input_size() == 2 && (a.rope == 'c' || a.rope == 's')) {
    const Value& b = input(i, 1 - at);
    if (b.kind != ValueKind::kAttention || b.layer != a.layer || b.part != a.part ||
        b.axes != a.axes || b.rope != (a.rope == 'c' ? 's' : 'c') || b.ropePart != a.ropePart)
      cannot(
          "added to something other than the other term of x cos + rotate_half(x) sin of the "
          "same heads");
    // The whole head turned, or its first ropePart features (then their
    // Concat with the rest).
    v.rope = a.ropePart > 0 ? 'd' : 0;
    v.rotary = a.ropePart == 0;
    v.ropeBase = std::max(a.ropeBase, b.ropeBase);
  } else if (op == "Unsqueeze" && a.part == 'x' && a.rope == 0 && a.axes == "htd" &&
             a.kvHeads == 0) {
    Dims axes = intsAttr(i, "axes");
    if (axes.empty() && hasInput(i, 1))
      axes = shapeInts(input(i, 1)).value_or(Dims{});
    if (axes != Dims{2})
      cannot(fmt::format("unsqueezed at axes {} (repeat_kv's is 2)", dimsText(axes)));
    v.axes = "hutd";
  } else if (op == "Expand" && a.axes == "hutd") {
    v.axes = "hgtd";
  } else if (op == "Reshape" && a.axes == "hgtd" && hasInput(i, 1)) {
    const auto target = shapeInts(input(i, 1));
    const int64_t t = net_.layers[static_cast<size_t>(a.layer)].inShape.h;
    if (!target || target->size() != 4 || (*target)[0] != kBatchDim || (*target)[2] != t ||
        (*target)[3] != dh || (*target)[1] <= a.heads || (*target)[1] % a.heads != 0 ||
        (*target)[1] > std::numeric_limits<int>::max())
      cannot(fmt::format(
          "expanded and reshaped to {}, not to [N, a multiple of its {} heads, {}, "
          "{}] (repeat_kv)",
          target ? dimsText(*target) : std::string("a computed shape"), a.heads, t, dh));
    v.axes = "htd";
    v.kvHeads = a.heads;
    v.heads = static_cast<int>((*target)[1]);
  } else {
    if (a.rope != 0)
      cannot("in the middle of rotary positions, x cos + rotate_half(x) sin");
    if (a.axes == "hutd" || a.axes == "hgtd")
      cannot("in the middle of repeat_kv (Unsqueeze at axis 2, Expand, Reshape)");
    return false;
  }
  values_[n.output(0)] = v;
  return true;
}

// A Reshape of a sequence fc's [T, F] output to heads [T, H, F / H], its
// one reader but Shapes: one of separate Q, K and V projections (Hugging
// Face BERT, OPT, Llama); the MatMuls after it say which.
int Importer::readersBesidesShapes(const std::string& name) const {
  int readers = 0;
  for (const auto& node : model_.graph().node())
    if (node.op_type() != "Shape")
      readers += static_cast<int>(std::count(node.input().begin(), node.input().end(), name));
  return readers;
}

bool Importer::startsProjectionHeads(int i) {
  const auto& n = model_.graph().node(i);
  const Value& x = input(i, 0);
  if (x.kind != ValueKind::kActivation || x.layer < 0 || x.rank != 2 || x.flat || x.channelsLast ||
      x.seq != SeqLayout::kBatchFirst || x.padH > 0 || x.padW > 0)
    return false;
  const Layer& fc = layerOf(x);
  const auto target = shapeInts(input(i, 1));
  if (fc.kind != LayerKind::kFc || fc.spec.flatten || fc.spec.tiedTo >= 0 || !target ||
      target->size() != 4 || attention_.count(x.layer) > 0)
    return false;
  const int64_t t = fc.outShape.h, f = fc.outShape.c;
  const Dims to = reshapeTarget(i, {t, f}, *target);
  if (to.size() != 3 || to[0] != t || to[1] <= 1 || to[1] > std::numeric_limits<int>::max() ||
      readersBesidesShapes(n.input(0)) != 1)
    return false;
  Value v;
  v.kind = ValueKind::kAttention;
  v.layer = x.layer;
  v.rank = 2;
  v.part = 'x';
  v.axes = "thd";
  v.heads = static_cast<int>(to[1]);
  values_[n.output(0)] = v;
  return true;
}

bool Importer::mapAttentionPart(int i) {
  const auto& n = model_.graph().node(i);
  const std::string& op = n.op_type();
  // A Split of an fc's [T, 3 D] output into Q, K and V starts an attention.
  if (op == "Split") {
    const Value& x = input(i, 0);
    if (x.kind != ValueKind::kActivation || x.layer < 0 || x.rank != 2 || x.flat)
      return false;
    const Layer& fc = layerOf(x);
    const int64_t d = fc.inShape.c;
    std::vector<int64_t> sizes = intsAttr(i, "split");
    if (sizes.empty() && hasInput(i, 1)) {
      const auto given = shapeInts(input(i, 1));
      if (!given)
        return false;
      sizes = *given;
    }
    int64_t axis = intAttr(i, "axis", 0);
    if (axis < 0)
      axis += 3;
    if (fc.kind != LayerKind::kFc || fc.spec.flatten || fc.spec.tiedTo >= 0 ||
        fc.spec.outputs != 3 * d || axis != 2 || n.output_size() != 3 ||
        !(sizes.empty() || sizes == std::vector<int64_t>{d, d, d}) || consumers_[n.input(0)] != 1)
      return false;
    const char parts[] = {'q', 'k', 'v'};
    for (int k = 0; k < 3; ++k) {
      Value v;
      v.kind = ValueKind::kAttention;
      v.layer = x.layer;
      v.rank = 2;
      v.part = parts[k];
      v.axes.assign(1, 't');  // not = "t": GCC 12 -Wrestrict false positive
      values_[n.output(k)] = v;
    }
    return true;
  }
  // Three Slices of a time-major fc's [T, N, 3 D] output along the features,
  // D each (nn.MultiheadAttention's in-projection, chunk(3) as
  // torch.onnx.export writes it): Q, K and V.
  if (op == "Slice" && n.input_size() >= 4 && input(i, 0).kind == ValueKind::kActivation) {
    const Value& x = input(i, 0);
    if (x.layer < 0 || x.seq != SeqLayout::kTimeMajor)
      return false;
    const Layer& fc = layerOf(x);
    const int64_t d = fc.inShape.c;
    const auto starts = shapeInts(input(i, 1)), ends = shapeInts(input(i, 2)),
               axes = shapeInts(input(i, 3));
    const auto steps = n.input_size() > 4 && hasInput(i, 4) ? shapeInts(input(i, 4))
                                                            : std::optional<Dims>(Dims{1});
    if (fc.kind != LayerKind::kFc || fc.spec.flatten || fc.spec.tiedTo >= 0 ||
        fc.spec.outputs != 3 * d || !starts || !ends || !axes || !steps || starts->size() != 1 ||
        ends->size() != 1 || axes->size() != 1 || steps->size() != 1 || (*steps)[0] != 1 ||
        ((*axes)[0] != 2 && (*axes)[0] != -1))
      return false;
    const int64_t begin = (*starts)[0], end = std::min((*ends)[0], 3 * d);
    if (begin < 0 || begin % d != 0 || end - begin != d)
      return false;
    AttentionState& state = attention_[x.layer];
    const int bit = 1 << (begin / d);
    if ((state.slices & bit) != 0)
      failAt(i, fmt::format("a second Slice of features [{}, {}) of '{}', the Q, K and V of an "
                            "attention: strata folds one Slice of each",
                            begin, end, n.input(0)));
    state.slices |= bit;
    state.sliced = n.input(0);
    Value v;
    v.kind = ValueKind::kAttention;
    v.layer = x.layer;
    v.rank = 2;
    v.part = "qkv"[begin / d];
    v.axes = "tnf";
    v.seq = SeqLayout::kTimeMajor;
    values_[n.output(0)] = v;
    return true;
  }
  // One of separate Q, K and V projections split into heads.
  if (op == "Reshape" && hasInput(i, 1) && startsProjectionHeads(i))
    return true;
  // Otherwise node i must read an attention's tensor.
  int at = -1;
  for (int k = 0; k < n.input_size(); ++k)
    if (hasInput(i, k))
      if (auto it = values_.find(n.input(k));
          it != values_.end() && it->second.kind == ValueKind::kAttention) {
        at = k;
        break;
      }
  if (at < 0 || op == "Shape")
    return false;
  const Value a = input(i, at);
  Layer& qkv = net_.layers[static_cast<size_t>(a.layer)];
  const int64_t t = qkv.inShape.h, d = qkv.inShape.c;
  auto cannot = [&](const std::string& why) { cannotFollow(i, at, why); };
  if (mapRotaryOrRepeat(i, at))
    return true;
  auto sameAttention = [&](const Value& other) {
    return other.kind == ValueKind::kAttention && other.layer == a.layer;
  };
  // A mask strata prices is causal: made of a square table, a Trilu or
  // positions compared. A mask of ones and shapes alone (BERT's of an absent
  // attention_mask) would be priced as causal, half the scores: refused.
  auto isCausalMask = [&](const Value& m) {
    if (m.kind == ValueKind::kDerived)
      return m.causalMask;
    const Dims table = m.kind == ValueKind::kConstant && m.tensor ? tensorDims(*m.tensor) : Dims{};
    return table.size() >= 2 && table.back() > 1 && table[table.size() - 2] == table.back();
  };
  static const std::string kNotCausal =
      "masked by a value not made of a square table, a Trilu or a comparison of positions, so not "
      "a causal mask (a padding mask, BERT's attention_mask?): strata's attention is causal or "
      "unmasked; export without the mask, or as a causal model";
  // Separate projections: the fc of K (keys) or V joins the attention of
  // Q's fc (a's layer), if it reads the same input with the same outputs and
  // biases; it is dropped from the network when the attention folds.
  auto joinProjection = [&](const Value& b, bool keys) {
    const Layer& q = net_.layers[static_cast<size_t>(a.layer)];
    const Layer& other = net_.layers[static_cast<size_t>(b.layer)];
    const char* what = keys ? "K" : "V";
    if (attention_.count(b.layer) > 0 || other.inputs != q.inputs)
      cannot(fmt::format("whose {} layer '{}' reads another input than Q's '{}'", what, other.name,
                         q.name));
    // K's and V's own heads: fewer than Q's when repeat_kv shares them
    // (grouped-query attention), dh features each.
    const int kv = b.kvHeads > 0 ? b.kvHeads : b.heads;
    const int64_t dh = q.inShape.c / a.heads;
    if (q.kind != LayerKind::kFc || q.spec.outputs != q.inShape.c ||
        other.spec.outputs != int64_t{kv} * dh)
      cannot(
          fmt::format("with Q of {} features and {} of {} from {} inputs: strata folds "
                      "separate projections from D inputs, Q of D features and K and V of "
                      "dh = D / heads for each of their heads",
                      q.spec.outputs, what, other.spec.outputs, q.inShape.c));
    if (other.spec.bias != q.spec.bias)
      cannot(fmt::format(
          "whose Q projection has {} bias and {} projection '{}' {}: strata's "
          "attention has biases on every projection or on none",
          q.spec.bias ? "a" : "no", what, other.name, other.spec.bias ? "has one" : "none"));
    AttentionState& state = attention_[a.layer];
    if (keys ? state.keys >= 0 : (state.keys < 0 || state.values >= 0 || b.layer == state.keys))
      cannot(fmt::format("whose {} would be '{}' a second time", what, other.name));
    if (!keys && kv != state.kvHeads)
      cannot(
          fmt::format("with {} key heads and {} value heads: strata's grouped-query attention "
                      "shares each of its key/value heads between K and V",
                      state.kvHeads, kv));
    (keys ? state.keys : state.values) = b.layer;
    state.kvHeads = kv;
    absorbed_.insert(b.layer);
  };
  Value v = a;
  if (op == "Identity" || op == "Cast") {
    // the same tensor
  } else if (op == "Reshape") {
    const auto target = shapeInts(input(i, 1));
    if (!target)
      cannot("its target shape not computed from shapes and constants");
    const Dims from = attentionDims(a);
    if (a.seq == SeqLayout::kTimeMajor) {
      // [T, N, D] to [T, N H, D / H] (the heads split out), and [T, N H,
      // D / H] to [T N, D] (joined, the context's rows).
      const auto& to = *target;
      const int64_t h = to.size() == 3 && isBatchMultiple(to[1]) ? batchFactor(to[1]) : 0;
      if (a.axes == "tnf" && to.size() == 3 && to[0] == t && h > 0 &&
          h <= std::numeric_limits<int>::max() && d % h == 0 && to[2] == d / h) {
        v.axes = "tbd";
        v.heads = static_cast<int>(h);
      } else if (a.axes == "tbd" && to == std::vector<int64_t>{batchTimes(t), d}) {
        v.axes = "rf";
      } else {
        cannot(fmt::format("reshaping {} to {}", shapeText(from), shapeText(to)));
      }
      values_[n.output(0)] = v;
      return true;
    }
    // GPT-NeoX's baddbmm: Q and K viewed as [N H, T, dh] (the batch and the
    // heads in one, axes naming the batch's), and its scores viewed back as
    // [N, H, T, T].
    const auto& raw = *target;
    const int64_t dh = a.heads > 0 ? d / a.heads : 0;
    if ((a.part == 'q' || a.part == 'k') && a.axes == "htd" && raw.size() == 3 &&
        raw[0] == batchTimes(a.heads) && raw[1] == t && raw[2] == dh) {
      v.axes = "btd";
      values_[n.output(0)] = v;
      return true;
    }
    if (a.part == 's' && a.axes == "bts" &&
        (raw == std::vector<int64_t>{kBatchDim, a.heads, t, t} ||
         raw == std::vector<int64_t>{-1, a.heads, t, t})) {
      v.axes = "hts";
      values_[n.output(0)] = v;
      return true;
    }
    const Dims to = reshapeTarget(i, from, *target);
    if (a.axes == "t" && to.size() == 3 && to[0] == t && to[1] * to[2] == d &&
        to[1] <= std::numeric_limits<int>::max() && (a.heads == 0 || a.heads == to[1])) {
      v.axes = "thd";
      v.heads = static_cast<int>(to[1]);
    } else if (a.axes == "thd" && to == Dims{t, d}) {
      v.axes.assign(1, 't');  // not = "t": GCC 12 -Wrestrict false positive
    } else {
      cannot(fmt::format("reshaping {} to {}", dimsText(from), dimsText(to)));
    }
  } else if (op == "Transpose" &&
             (a.seq == SeqLayout::kTimeMajor || a.axes.find('b') != std::string::npos)) {
    const auto perm = intsAttr(i, "perm");
    std::string axes;
    for (int64_t p : perm) {
      if (p < 0 || p >= static_cast<int64_t>(a.axes.size()) || perm.size() != a.axes.size())
        cannot(fmt::format("transposing its axes by {}", dimsText(perm)));
      axes += a.axes[static_cast<size_t>(p)];
    }
    v.axes = axes;
  } else if (op == "Transpose") {
    const auto perm = intsAttr(i, "perm");
    if (a.axes.size() != 3 || perm.size() != 4 || perm[0] != 0)
      cannot(fmt::format("transposing its axes by {}", dimsText(perm)));
    std::string axes;
    for (size_t k = 1; k < 4; ++k) {
      if (perm[k] < 1 || perm[k] > 3)
        cannot(fmt::format("transposing its axes by {}", dimsText(perm)));
      axes += a.axes[static_cast<size_t>(perm[k] - 1)];
    }
    v.axes = axes;
  } else if (op == "MatMul" && at == 0 && hasInput(i, 1) &&
             input(i, 1).kind == ValueKind::kAttention &&
             (a.part == 'x' || input(i, 1).part == 'x')) {
    // Separate projections: Q Kᵀ joins K's fc to Q's, P V adds V's.
    const Value& b = input(i, 1);
    if (b.rope != 0 || b.axes == "hutd" || b.axes == "hgtd")
      cannot(fmt::format("multiplied by the {} in the middle of {}", partName(b.part),
                         b.rope != 0 ? "rotary positions" : "repeat_kv"));
    if (a.part == 'x' && a.axes == "htd" && b.part == 'x' && b.axes == "hdt" &&
        a.heads == b.heads && b.layer != a.layer) {
      if (a.kvHeads > 0)
        cannot("whose Q heads are repeated (repeat_kv repeats K and V)");
      if (a.rotary != b.rotary)
        cannot(
            fmt::format("with rotary positions on {} alone: strata's rotary attention turns Q "
                        "and K",
                        a.rotary ? "Q" : "K"));
      if (a.rotaryDims != b.rotaryDims)
        cannot(
            fmt::format("whose Q turns {} features of each head and K {} (0: all): strata's "
                        "rotary attention turns the same of both",
                        a.rotaryDims, b.rotaryDims));
      joinProjection(b, true);
      v.part = 's';
      v.axes = "hts";
      v.ropeBase = std::max(a.ropeBase, b.ropeBase);
    } else if (a.part == 'p' && a.axes == "hts" && b.part == 'x' && b.axes == "htd" &&
               a.heads == b.heads && b.layer != a.layer) {
      if (b.rotary)
        cannot("multiplied by V with rotary positions: strata's rotary attention turns Q and K");
      joinProjection(b, false);
      v.part = 'c';
      v.axes = "htd";
    } else {
      cannot(fmt::format("multiplied by the {} (axes {} by {})", partName(b.part), a.axes, b.axes));
    }
  } else if (op == "MatMul" && at == 0 && hasInput(i, 1) && sameAttention(input(i, 1))) {
    const Value& b = input(i, 1);
    // The heads' axis: h, or b (the batch and the heads: time-major, and
    // GPT-NeoX's baddbmm).
    const std::string x =
        a.seq == SeqLayout::kTimeMajor || a.axes.find('b') != std::string::npos ? "b" : "h";
    if (a.part == 'q' && a.axes == x + "td" && b.part == 'k' && b.axes == x + "dt" &&
        a.heads == b.heads) {
      if (a.rotary != b.rotary || a.rotaryDims != b.rotaryDims)
        cannot(
            fmt::format("whose Q turns {} of its features by rotary positions and K {}: "
                        "strata's rotary attention turns the same of both",
                        a.rotary ? std::to_string(a.rotaryDims) : "none",
                        b.rotary ? std::to_string(b.rotaryDims) : "none"));
      v.part = 's';
      v.axes = x + "ts";
      v.masked = a.masked || b.masked;
    } else if (a.part == 'p' && a.axes == x + "ts" && b.part == 'v' && b.axes == x + "td" &&
               a.heads == b.heads) {
      v.part = 'c';
      v.axes = x + "td";
    } else {
      cannot(fmt::format("multiplied by the {} (axes {} by {})", partName(b.part), a.axes, b.axes));
    }
  } else if ((op == "MatMul" && at == 0 && a.part == 'c' && a.axes == "t") ||
             (op == "Gemm" && at == 0 && a.part == 'c' && a.axes == "rf")) {
    // The output projection: the fc of Q, K and V becomes the attention.
    // nn.MultiheadAttention's is a Gemm of the context's [T N, D] rows by
    // out_proj (transB 1), its bias the Gemm's C.
    const Dims w = constant(i, 1, "weight");
    if (w != Dims{d, d})
      cannot(fmt::format("projected by a weight {}, not [{}, {}]", dimsText(w), d, d));
    if (qkv.kind != LayerKind::kFc)
      cannot("a second time");
    AttentionState& state = attention_[a.layer];
    if (state.keys >= 0 && state.values < 0)
      cannot("with no V projection joined");
    if (op == "Gemm") {
      if (intAttr(i, "transA", 0) != 0)
        cannot("in a Gemm with transA 1");
      if (hasInput(i, 2)) {
        const Dims c = constant(i, 2, "bias C");
        if (elementsOf(c) != d || c.empty() || c.back() != d)
          cannot(fmt::format("projected with a bias {}, not [{}]", dimsText(c), d));
        state.outputBias = true;
      }
    }
    if (a.seq == SeqLayout::kTimeMajor || !state.sliced.empty()) {
      // Every reader of the fc's output (GPT-NeoX: of its heads' view), but
      // its Shapes, one of the Slices.
      if (state.slices != 7 || readersBesidesShapes(state.sliced) != 3)
        cannot(fmt::format("whose Q, K and V are not three Slices of '{}' and its only readers",
                           state.sliced));
    }
    LayerSpec s;
    s.heads = a.heads;
    if (state.kvHeads > 0 && state.kvHeads != a.heads)
      s.kvHeads = state.kvHeads;
    s.rotary = a.rotary;
    if (a.rotary && a.ropeBase > 0)
      s.rotaryBase = a.ropeBase;
    if (a.rotary)
      s.rotaryDims = static_cast<int>(a.rotaryDims);
    s.causal = a.masked;
    s.bias = qkv.spec.bias;  // the output projection's bias Add must follow (finish)
    s.attentionDropout = a.attentionDropout;
    qkv.kind = LayerKind::kAttention;
    qkv.spec = s;
    derive(static_cast<size_t>(a.layer));
    state.projection = true;
    Value out;
    out.layer = a.layer;
    out.rank = 2;
    if (a.seq == SeqLayout::kTimeMajor)
      out.seq = SeqLayout::kMergedRows;
    produce(i, out);
    return true;
  } else if ((op == "Mul" || op == "Div") && (a.part == 's' || a.part == 'q' || a.part == 'k')) {
    // The scale, on the scores or (nn.MultiheadAttention) on Q first.
    const Value& other = input(i, 1 - at);
    if (other.kind != ValueKind::kConstant || !inlineScalar(*other.tensor) ||
        (op == "Div" && at != 0))
      cannot("scaled by something other than a constant");
  } else if (op == "Where" && a.part == 's' && at > 0) {
    const Value& cond = input(i, 0);
    const Value& other = input(i, at == 1 ? 2 : 1);
    const auto staticValue = [](const Value& x) {
      return x.kind == ValueKind::kConstant || x.kind == ValueKind::kDerived;
    };
    if (!staticValue(cond) || !staticValue(other))
      cannot("in a Where whose condition or other value is computed from activations");
    if (!isCausalMask(cond) && !isCausalMask(other))
      cannot(kNotCausal);
    v.masked = true;  // strata's one mask: causal
  } else if (op == "Add" && a.part == 's' && input(i, 1 - at).kind == ValueKind::kDerived &&
             input(i, 1 - at).zeros) {
    // baddbmm's input, zeros times beta: the scores as they are.
  } else if (op == "Add" && a.part == 's') {
    const Value& other = input(i, 1 - at);
    if (other.kind != ValueKind::kConstant && other.kind != ValueKind::kDerived)
      cannot("added to an activation");
    if (!isCausalMask(other))
      cannot(kNotCausal);
    v.masked = true;
  } else if (op == "Softmax" && a.part == 's' && (a.axes == "hts" || a.axes == "bts")) {
    const int64_t axis = intAttr(i, "axis", -1);
    const int64_t keys = a.seq == SeqLayout::kTimeMajor ? 2 : 3;
    if (axis != -1 && axis != keys)
      cannot(fmt::format("in a Softmax over axis {} (the keys are axis {})", axis, keys));
    v.part = 'p';
  } else if (op == "Dropout" && a.part == 'p') {
    double rate = 0.5;
    if (const auto* r = attr(i, "ratio"))
      rate = r->f();
    else if (hasInput(i, 1) && input(i, 1).kind == ValueKind::kConstant)
      rate = inlineScalar(*input(i, 1).tensor).value_or(0.5);
    if (!(rate >= 0 && rate < 1))
      cannot(fmt::format("with a Dropout ratio {}", rate));
    v.attentionDropout = rate;
  } else {
    cannot("in a way strata does not follow");
  }
  values_[n.output(0)] = v;
  return true;
}

}  // namespace strata::onnx_import

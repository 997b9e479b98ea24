#include "strata/model/tensor_parallel.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace strata {

namespace {

// The layers reading layer i's output.
std::vector<std::vector<int>> consumersOf(const Network& net) {
  std::vector<std::vector<int>> out(net.layers.size());
  for (size_t i = 0; i < net.layers.size(); ++i)
    for (int in : net.layers[i].inputs)
      if (in >= 0)
        out[static_cast<size_t>(in)].push_back(static_cast<int>(i));
  return out;
}

bool positionFc(const Layer& l) {
  return l.kind == LayerKind::kFc && !l.spec.flatten;
}

// The one layer reading layer i, or -1.
int soleConsumer(const std::vector<std::vector<int>>& consumers, int i) {
  const auto& c = consumers[static_cast<size_t>(i)];
  return c.size() == 1 ? c.front() : -1;
}

// The MLP pairs (first fc, activation, second fc) and the output fc feeding
// the loss: the split structure apart from the attention layers.
struct Regions {
  std::vector<int> role;  // per layer: 0 none, 1 attention, 2 column fc, 3 mlp activation,
                          // 4 row fc, 5 embedding, 6 output fc, 7 loss
};

Regions findRegions(const Network& net) {
  const auto consumers = consumersOf(net);
  const int n = static_cast<int>(net.layers.size());
  Regions r;
  r.role.assign(static_cast<size_t>(n), 0);
  for (int i = 0; i < n; ++i) {
    const auto& l = net.layers[static_cast<size_t>(i)];
    if (l.kind == LayerKind::kAttention)
      r.role[static_cast<size_t>(i)] = 1;
    if (l.kind == LayerKind::kEmbedding)
      r.role[static_cast<size_t>(i)] = 5;
  }
  for (int i = 0; i < n; ++i) {
    const auto& l = net.layers[static_cast<size_t>(i)];
    if (!positionFc(l) || r.role[static_cast<size_t>(i)] != 0)
      continue;
    const int next = soleConsumer(consumers, i);
    // The output layer: an fc whose only reader is the loss, the last layer.
    if (next == n - 1 && net.layers[static_cast<size_t>(next)].kind == LayerKind::kSoftmax) {
      r.role[static_cast<size_t>(i)] = 6;
      r.role[static_cast<size_t>(next)] = 7;
      continue;
    }
    if (l.spec.tiedTo >= 0 || next < 0)
      continue;
    const auto& act = net.layers[static_cast<size_t>(next)];
    if (act.kind != LayerKind::kGelu && act.kind != LayerKind::kRelu &&
        act.kind != LayerKind::kSwiglu)
      continue;
    const int second = soleConsumer(consumers, next);
    if (second < 0 || r.role[static_cast<size_t>(second)] != 0)
      continue;
    const auto& fc2 = net.layers[static_cast<size_t>(second)];
    if (!positionFc(fc2) || fc2.spec.tiedTo >= 0)
      continue;
    r.role[static_cast<size_t>(i)] = 2;
    r.role[static_cast<size_t>(next)] = 3;
    r.role[static_cast<size_t>(second)] = 4;
  }
  return r;
}

bool positionWise(LayerKind kind) {
  switch (kind) {
    case LayerKind::kLayerNorm:
    case LayerKind::kRmsNorm:
    case LayerKind::kDropout:
    case LayerKind::kAdd:
    case LayerKind::kGelu:
    case LayerKind::kRelu:
      return true;
    default:
      return false;
  }
}

// A split layer: `work` of its FLOPs and activations, `params` of its weights.
TpLayer splitLayer(double work, double params) {
  TpLayer x;
  x.split = true;
  x.work = work;
  x.params = params;
  return x;
}

}  // namespace

std::string tensorParallelObstacle(const Network& net, int t, bool sequenceParallel) {
  if (t <= 1)
    return "";
  const auto r = findRegions(net);
  int regions = 0;
  for (size_t i = 0; i < net.layers.size(); ++i) {
    const auto& l = net.layers[i];
    const int role = r.role[i];
    if (role == 1) {
      ++regions;
      if (l.spec.heads % t != 0)
        return fmt::format(
            "attention layer '{}' has {} heads, which {} workers cannot share "
            "evenly",
            l.name, l.spec.heads, t);
      // Grouped-query attention: each worker holds whole key/value groups.
      if (l.kvHeads() % t != 0)
        return fmt::format(
            "attention layer '{}' has {} key/value heads, which {} workers "
            "cannot share evenly",
            l.name, l.kvHeads(), t);
    }
    if (role == 2) {
      ++regions;
      // Before a gated activation (swiglu) each worker takes its share of
      // both halves, the gate's and the value's.
      size_t act = i + 1;
      while (act < net.layers.size() && r.role[act] != 3)
        ++act;
      const bool gated = act < net.layers.size() && net.layers[act].kind == LayerKind::kSwiglu;
      if (l.outShape.c % ((gated ? 2 : 1) * t) != 0)
        return fmt::format("MLP layer '{}' has {} outputs, which {} workers cannot share evenly{}",
                           l.name, l.outShape.c, t,
                           gated ? " in each of its two halves (gate and value)" : "");
    }
    if (role == 5 || role == 6) {
      const int vocab = role == 5 ? l.spec.vocab : l.outShape.c;
      if (vocabRows(vocab, t, t - 1).begin >= vocab)
        return fmt::format(
            "layer '{}' splits a vocabulary of {} over {} workers by {} rows each, which leaves "
            "the last worker none",
            l.name, vocab, t, (vocab + t - 1) / t);
    }
    // A parallel residual (GPT-J, GPT-NeoX: x + attn(ln1 x) + mlp(ln2 x))
    // sums two split layers' partial outputs in one add, which Megatron-style
    // code all-reduces once per block; strata's split all-reduces each.
    if (l.kind == LayerKind::kAdd) {
      int partial = 0;
      for (int in : l.inputs) {
        int from = in;
        if (from >= 0 && net.layers[static_cast<size_t>(from)].kind == LayerKind::kDropout)
          from = net.layers[static_cast<size_t>(from)].inputs[0];
        partial += from >= 0 && (r.role[static_cast<size_t>(from)] == 1 ||
                                 r.role[static_cast<size_t>(from)] == 4)
                       ? 1
                       : 0;
      }
      if (partial > 1)
        return fmt::format(
            "layer '{}' adds an attention's and an MLP's outputs side by side (a parallel "
            "residual), which a tensor-parallel group would sum once per block; strata's "
            "split sums each of them, and does not price that block yet",
            l.name);
    }
    const bool replicated = role == 0;
    if (sequenceParallel && replicated) {
      if (!positionWise(l.kind))
        return fmt::format(
            "sequence parallelism splits positions, and layer '{}' ({}) does "
            "not work position by position",
            l.name, toString(l.kind));
      const int64_t positions = int64_t{l.outShape.h} * l.outShape.w;
      if (positions % t != 0)
        return fmt::format(
            "sequence parallelism splits the {} positions of layer '{}' over {} "
            "workers, which does not divide them",
            positions, l.name, t);
    }
  }
  if (regions == 0)
    return fmt::format(
        "network '{}' has no layer that splits over a tensor-parallel group (an "
        "attention layer, or an fc -> gelu|relu -> fc pair applied per position)",
        net.name);
  return "";
}

TpLayout tensorParallelLayout(const Network& net, int t, bool sequenceParallel) {
  TpLayout out;
  out.t = std::max(1, t);
  out.sequenceParallel = sequenceParallel && out.t > 1;
  out.layers.resize(net.layers.size());
  const auto r = t > 1 ? findRegions(net) : Regions{std::vector<int>(net.layers.size(), 0)};
  const double inv = 1.0 / out.t;
  const bool sp = out.sequenceParallel;
  // The sum of a row layer's (or the embedding's) partial outputs, and of a
  // column layer's partial input gradients.
  const TpCollective sum = sp ? TpCollective::kReduceScatter : TpCollective::kAllReduce;
  for (size_t i = 0; i < net.layers.size(); ++i) {
    const auto& l = net.layers[i];
    auto& x = out.layers[i];
    const double in = double(l.inShape.elements()), outElems = double(l.outShape.elements());
    x.params = double(l.params);
    x.work = sp ? inv : 1.0;
    if (out.t <= 1)
      continue;
    x.sumsGradient = sp && r.role[i] == 0 && l.params > 0;
    // The rows of a vocabulary split: ceil(V / t) of V.
    auto vocabShare = [&](int vocab) {
      return vocab > 0 ? std::ceil(double(vocab) / out.t) / vocab : inv;
    };
    switch (r.role[i]) {
      case 1: {  // attention: column Q K V, row output projection
        const double rowBias = l.spec.bias ? l.inShape.c : 0;
        x = splitLayer(inv, (double(l.params) - rowBias) * inv + rowBias);
        x.role = TpRole::kAttention;
        if (sp)
          x.fwdBefore = {TpCollective::kAllGather, in};
        x.fwdAfter = {sum, outElems};
        if (sp)
          x.bwdBefore = {TpCollective::kAllGather, outElems};
        x.bwdAfter = {sum, in};
        ++out.splitRegions;
        break;
      }
      case 2:  // the MLP's column fc
        x = splitLayer(inv, double(l.params) * inv);
        x.role = TpRole::kColumn;
        if (sp)
          x.fwdBefore = {TpCollective::kAllGather, in};
        x.bwdAfter = {sum, in};
        ++out.splitRegions;
        break;
      case 3:  // the activation between the MLP's fcs
        x = splitLayer(inv, 0);
        x.role = TpRole::kBetween;
        break;
      case 4: {  // the MLP's row fc
        const double rowBias = l.spec.bias ? l.outShape.c : 0;
        x = splitLayer(inv, (double(l.params) - rowBias) * inv + rowBias);
        x.role = TpRole::kRow;
        x.fwdAfter = {sum, outElems};
        if (sp)
          x.bwdBefore = {TpCollective::kAllGather, outElems};
        break;
      }
      case 5: {  // vocabulary-parallel embedding: token rows split, positions replicated
        const double share = vocabShare(l.spec.vocab);
        const double table = double(l.spec.vocab) * l.outShape.c;
        x = splitLayer(1.0, table * share + (double(l.params) - table));
        x.role = TpRole::kEmbedding;
        x.fwdAfter = {sum, outElems};
        if (sp)
          x.bwdBefore = {TpCollective::kAllGather, outElems};
        break;
      }
      case 6: {  // the output fc by its outputs (the vocabulary)
        const double share = vocabShare(l.outShape.c);
        x = splitLayer(share, double(l.params) * share);
        x.role = TpRole::kOutput;
        if (sp)
          x.fwdBefore = {TpCollective::kAllGather, in};
        x.bwdAfter = {sum, in};
        break;
      }
      case 7: {  // the loss over its share of the vocabulary
        const double share = vocabShare(l.outShape.c);
        x = splitLayer(share, 0);
        x.role = TpRole::kLoss;
        x.fwdAfter = {TpCollective::kAllReduce, 3.0 * l.outShape.h * l.outShape.w};
        break;
      }
      default:
        break;
    }
  }
  return out;
}

VocabRows vocabRows(int vocab, int t, int rank) {
  const int each = (vocab + t - 1) / t;
  const auto at = [&](int r) {
    return static_cast<int>(std::min<int64_t>(vocab, int64_t{r} * each));
  };
  return {at(rank), at(rank + 1)};
}

GatherUnits zeroGatherUnits(const Network& net, const TpLayout& layout) {
  GatherUnits g;
  g.unitOf.assign(net.layers.size(), -1);
  int lastBlock = -1;
  for (size_t i = 0; i < net.layers.size(); ++i) {
    const auto& l = net.layers[i];
    const double p = layout.layers[i].params;
    const bool sameBlock = l.block >= 0 && l.block == lastBlock;
    lastBlock = l.block;
    if (l.block < 0 && p <= 0)
      continue;
    if (!sameBlock)
      g.params.push_back(0);
    g.unitOf[i] = static_cast<int>(g.params.size()) - 1;
    g.params.back() += p;
  }
  return g;
}

double attentionCoreShare(const Layer& l) {
  // T positions each scoring T keys, or in windows (Swin) the padded grid's
  // positions each scoring its window's M^2.
  const double t = double(l.attentionPositions()), d = l.inShape.c;
  const double core = 4 * t * double(l.attentionSpan()) * d, projections = 8 * t * d * d;
  return core + projections > 0 ? core / (core + projections) : 0;
}

}  // namespace strata

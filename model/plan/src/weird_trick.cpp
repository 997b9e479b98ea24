// Krizhevsky's "one weird trick" (owt-a, owt-b, owt-c) as a Plan.
#include "builder.h"

namespace strata::planning {

void lowerWeirdTrick(Builder& b, const Network& net, const Scenario& sc, int /*iterations*/) {
  const int k = sc.workers;
  const int mp = net.modelParallelFrom;
  const int layers = static_cast<int>(net.layers.size());
  const double bw = sc.batchPerWorker;
  const double e = elementBytes(sc.options.element);
  const double frac = 1.0 / k;
  const auto strategy = sc.strategy;
  const int rounds = strategy == Strategy::kOwtA ? 1 : k;
  const double batch = strategy == Strategy::kOwtA ? k * bw : bw;
  const double boundary = double(net.layers[static_cast<size_t>(mp)].inShape.elements()) * e;
  const bool perRoundUpdate =
      strategy != Strategy::kOwtA && sc.options.fcUpdate == FcUpdate::kRound;
  const double fcParams = paramsIn(net, mp, layers);
  std::vector<int> prev(static_cast<size_t>(k), -1);

  // Conv forward on b examples.
  for (int w = 0; w < k; ++w)
    for (int l = 0; l < mp; ++l)
      prev[static_cast<size_t>(w)] =
          b.compute(w, l, Phase::kFwd, bw, 1.0, {prev[static_cast<size_t>(w)]});
  const std::vector<int> convForwardDone = prev;

  // The FC phase: a flow shop of rounds (activations in, FC compute with its
  // inner exchanges, gradients back), as in cost/src/weird_trick.cpp. Round r+1's
  // activations are issued when round r starts (one round ahead: an in-order
  // communication stream then moves them while round r computes, and a
  // receiver needs two round buffers).
  std::vector<int> in(static_cast<size_t>(rounds), -1);
  auto issueIn = [&](int r) {
    if (k == 1 || r >= rounds)
      return;
    b.setRound(r);
    const Deps start = r > 0 ? Deps{in[static_cast<size_t>(r - 1)]} : convForwardDone;
    if (strategy == Strategy::kOwtB) {
      in[static_cast<size_t>(r)] =
          b.broadcast(r, Bytes(bw * boundary), BufferKind::kActivations, mp, start);
    } else {
      const double perRound = strategy == Strategy::kOwtA ? bw : bw / k;
      in[static_cast<size_t>(r)] =
          b.allGatherDirect(Bytes(perRound * boundary), BufferKind::kActivations, mp, start);
    }
  };
  issueIn(0);
  int lastBack = -1;
  for (int r = 0; r < rounds; ++r) {
    issueIn(r + 1);
    b.setRound(r);
    const int lastIn = in[static_cast<size_t>(r)];
    for (int w = 0; w < k; ++w)
      prev[static_cast<size_t>(w)] =
          b.compute(w, mp, Phase::kFwd, batch, frac, {prev[static_cast<size_t>(w)], lastIn});
    // Forward through the model-parallel layers.
    for (int l = mp + 1; l < layers; ++l) {
      const auto& layer = net.layers[static_cast<size_t>(l)];
      int exchange = -1;
      if (k > 1 && layer.hasWeights())
        exchange = b.allGatherDirect(Bytes(batch * double(layer.inShape.elements()) * frac * e),
                                     BufferKind::kActivations, l - 1, prev);
      for (int w = 0; w < k; ++w)
        prev[static_cast<size_t>(w)] =
            b.compute(w, l, Phase::kFwd, batch, frac, {prev[static_cast<size_t>(w)], exchange});
      if (k > 1 && layer.kind == LayerKind::kSoftmax) {
        const int stats = b.allReduce(AllreduceAlgorithm::kDirect, Bytes(2 * batch * e),
                                      BufferKind::kLossStatistics, l, l, prev);
        for (auto& p : prev)
          p = stats;
      }
    }
    // Backward through them.
    for (int l = layers - 1; l >= mp; --l) {
      const auto& layer = net.layers[static_cast<size_t>(l)];
      for (int w = 0; w < k; ++w) {
        auto& p = prev[static_cast<size_t>(w)];
        if (layer.hasWeights())
          p = b.compute(w, l, Phase::kBwdWeights, batch, frac, {p});
        p = b.compute(w, l, Phase::kBwdData, batch, frac, {p});
      }
      if (k > 1 && l > mp && layer.hasWeights()) {
        const int scattered =
            b.reduceScatterDirect(Bytes(batch * double(layer.inShape.elements()) * e),
                                  BufferKind::kActivationGradients, l - 1, prev);
        for (auto& p : prev)
          p = scattered;
      }
    }
    if (perRoundUpdate)
      for (int w = 0; w < k; ++w)
        prev[static_cast<size_t>(w)] =
            b.update(w, mp, layers - 1, fcParams * frac, {prev[static_cast<size_t>(w)]});
    if (k > 1) {
      Deps backStart = prev;
      backStart.push_back(lastBack);
      if (strategy == Strategy::kOwtB) {
        lastBack = b.reduceToRoot(r, Bytes(bw * boundary), BufferKind::kActivationGradients, mp - 1,
                                  backStart);
      } else {
        const double perRound = strategy == Strategy::kOwtA ? bw : bw / k;
        lastBack = b.reduceScatterDirect(Bytes(k * perRound * boundary),
                                         BufferKind::kActivationGradients, mp - 1, backStart);
      }
    }
  }
  b.setRound(-1);
  // Conv backprop starts when every round's gradients are back.
  if (lastBack >= 0)
    for (auto& p : prev)
      p = lastBack;
  const int synced = backpropWithSync(b, net, sc, 0, mp, sc.options.convSync, prev);
  for (int w = 0; w < k; ++w) {
    int p = b.update(w, 0, mp - 1, paramsIn(net, 0, mp), {prev[static_cast<size_t>(w)], synced});
    if (!perRoundUpdate)
      p = b.update(w, mp, layers - 1, fcParams * frac, {p});
    prev[static_cast<size_t>(w)] = p;
  }
}

}  // namespace strata::planning

// Model FLOPs, tokens and utilisation (model_flops.h).
#include "strata/model/model_flops.h"

namespace strata {

double matmulFwdFlops(const Layer& l) {
  switch (l.kind) {
    case LayerKind::kFc:
    case LayerKind::kConv:
      return l.fwdFlops;
    case LayerKind::kAttention: {
      // The GEMMs of deriveAttention's fwdFlops, 2 (projection + mixing):
      // rotary turns, score adds and cosine's normalisation are elementwise.
      const double t = double(l.attentionPositions());
      const double d = l.inShape.c;
      return 2 * t * d * double(l.qkvRows() + l.inShape.c) + 4 * t * double(l.attentionSpan()) * d;
    }
    default:
      return 0;
  }
}

TrainFlops trainFlopsPerExample(const Network& net, Recompute recompute) {
  TrainFlops f;
  for (const auto& l : net.layers) {
    const double fwd = matmulFwdFlops(l);
    f.model += 3 * fwd;
    if (recompute == Recompute::kFull && l.block >= 0)
      f.hardware += fwd;
    if (recompute == Recompute::kSelective && l.kind == LayerKind::kAttention) {
      // The scores and the context: 2 x 2 T^2 d multiply-accumulates (T
      // positions each scoring M^2 keys in windows).
      f.hardware += 4 * double(l.attentionPositions()) * double(l.attentionSpan()) * l.inShape.c;
    }
  }
  f.hardware += f.model;
  return f;
}

int64_t tokensPerExample(const Network& net) {
  for (const auto& l : net.layers)
    if (l.kind == LayerKind::kEmbedding && l.readsNetworkInput())
      return int64_t{net.input.h} * net.input.w;
  return 0;
}

void setUtilisation(StepEstimate& e, const Network& net, const Cluster* cluster) {
  e.tokensPerSecond = e.throughput * double(tokensPerExample(net));
  e.modelFlopsUtilisation = e.hardwareFlopsUtilisation = 0;
  if (!cluster)
    return;
  const double peak = cluster->device.peak[static_cast<size_t>(e.scenario.options.element)].value();
  if (peak <= 0 || e.scenario.workers <= 0)
    return;
  const TrainFlops f = trainFlopsPerExample(net, e.scenario.options.recompute);
  const double all = peak * e.scenario.workers;
  e.modelFlopsUtilisation = f.model * e.throughput / all;
  e.hardwareFlopsUtilisation = f.hardware * e.throughput / all;
}

}  // namespace strata

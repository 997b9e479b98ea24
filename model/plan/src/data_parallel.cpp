// Data parallelism (naive reducer, ring and the other allreduces) as a Plan:
// every layer on every worker, gradients synchronised bucket by bucket.
#include "builder.h"

namespace strata::planning {

double paramsIn(const Network& net, int first, int last) {
  double p = 0;
  for (int i = first; i < last; ++i)
    p += double(net.layers[static_cast<size_t>(i)].params);
  return p;
}

// Backprop of data-parallel layers [first, last) on every worker, then their
// gradient synchronisation, one bucket (strategy.h) after another: each
// bucket's allreduce starts when every worker has the bucket's last gradient
// (overlap) or has finished backprop (no overlap). `prev[w]` is each worker's
// last task so far; on return it is the worker's last backprop task. Returns
// the task that completes the synchronisation (-1 when none).
int backpropWithSync(Builder& b, const Network& net, const Scenario& sc, int first, int last,
                     AllreduceAlgorithm algorithm, std::vector<int>& prev) {
  const int k = sc.workers;
  const double e = elementBytes(sc.options.element);
  // ready[l - first][w]: worker w's bwd_weights task of layer l.
  std::vector<std::vector<int>> ready(static_cast<size_t>(last - first));
  for (int w = 0; w < b.computeWorkers(); ++w) {
    auto& p = prev[static_cast<size_t>(w)];
    for (int l = last - 1; l >= first; --l) {
      const auto& layer = net.layers[static_cast<size_t>(l)];
      if (layer.computesWeightGradient()) {
        p = b.compute(w, l, Phase::kBwdWeights, sc.batchPerWorker, 1.0, {p});
        ready[static_cast<size_t>(l - first)].push_back(p);
      }
      if (!layer.readsNetworkInput())
        p = b.compute(w, l, Phase::kBwdData, sc.batchPerWorker, 1.0, {p});
    }
  }
  if (k == 1)
    return -1;
  int done = -1;
  for (const auto& bucket : gradientBuckets(net, first, last, sc.options)) {
    Deps start = sc.options.overlap ? ready[static_cast<size_t>(bucket.firstLayer - first)] : prev;
    start.push_back(done);
    done = b.allReduce(algorithm, Bytes(bucket.params * e), BufferKind::kWeightGradients,
                       bucket.firstLayer, bucket.lastLayer, start);
  }
  return done;
}

void lowerDataParallel(Builder& b, const Network& net, const Scenario& sc, int /*iterations*/) {
  if (usesShardedStep(sc.options))
    return lowerSharded(b, net, sc);
  const int k = sc.workers;
  const int layers = static_cast<int>(net.layers.size());
  std::vector<int> prev(static_cast<size_t>(k), -1);
  for (int w = 0; w < b.computeWorkers(); ++w)
    for (int l = 0; l < layers; ++l)
      prev[static_cast<size_t>(w)] =
          b.compute(w, l, Phase::kFwd, sc.batchPerWorker, 1.0, {prev[static_cast<size_t>(w)]});
  const int synced = backpropWithSync(b, net, sc, 0, layers, gradientAllreduce(sc), prev);
  const double params = paramsIn(net, 0, layers);
  for (int w = 0; w < b.computeWorkers(); ++w)
    b.update(w, 0, layers - 1, params, {prev[static_cast<size_t>(w)], synced});
}

}  // namespace strata::planning

// Data parallelism (naive reducer, ring and the other allreduces): every
// layer on every worker, gradients synchronised during backprop.
#include "step_context.h"

namespace strata::cost {

// naive / ring, and ps on one worker (nothing to push): every layer
// data-parallel.
Seconds dataParallelStep(const Context& ctx, Tally& t, RoundInfo& info, Seconds& firstStep,
                         int& steps) {
  if (usesShardedStep(ctx.sc.options))
    return shardedStep(ctx, t, info, firstStep, steps);
  steps = 1;
  const int layers = static_cast<int>(ctx.net.layers.size());
  const Seconds fwd = forward(ctx, 0, layers, ctx.b, 1.0, t);
  const Seconds bwd = backpropWithSync(ctx, 0, layers, gradientAllreduce(ctx.sc), t);
  const Seconds upd = ctx.update(paramsIn(ctx.net, 0, layers));
  t.compute.update += upd;
  firstStep = fwd + bwd + upd;
  return firstStep;
}

}  // namespace strata::cost

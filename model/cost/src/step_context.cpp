#include "step_context.h"

#include <algorithm>

namespace strata::cost {

Seconds forward(const Context& ctx, int first, int last, double examples, double fraction,
                Tally& t) {
  Seconds sum;
  for (int i = first; i < last; ++i)
    sum += ctx.time(ctx.net.layers[static_cast<size_t>(i)], Phase::kFwd, examples, fraction);
  t.compute.fwd += sum;
  return sum;
}

LaneTimes sharedLanes(Seconds compute, const std::vector<Seconds>& ready,
                      const std::vector<Seconds>& work, double computeSpeed, double commSpeed,
                      const LaneSpeeds* duty) {
  const bool curve = duty != nullptr && !duty->commByDuty.empty();
  double windowSpeed = 1;    // with a curve: the running job's speed
  double now = 0, done = 0;  // wall clock; compute work done
  const double total = compute.value();
  LaneTimes out;
  size_t j = 0;
  double remaining = work.empty() ? 0 : work[0].value(), jobStart = -1;
  bool computeOver = total <= 0;
  if (computeOver)
    out.computeEnd = Seconds(0);
  while (j < work.size()) {
    const bool jobReady = done >= ready[j].value() - 1e-15 || computeOver;
    if (jobReady && jobStart < 0) {
      jobStart = now;
      if (curve)
        windowSpeed =
            computeOver ? 1.0 : duty->commAtDuty(duty->windowDuty(total - done, remaining));
    }
    const bool both = jobReady && !computeOver;
    const double cs = both ? computeSpeed : 1.0;
    const double ms = curve ? (jobReady ? windowSpeed : 1.0) : both ? commSpeed : 1.0;
    // Next event: compute reaches the job's ready point or its end; the job ends.
    double dt = 1e300;
    if (!computeOver) {
      const double target = jobReady ? total : std::min(total, ready[j].value());
      dt = (target - done) / cs;
    }
    if (jobReady)
      dt = std::min(dt, remaining / ms);
    dt = std::max(dt, 0.0);
    now += dt;
    if (!computeOver) {
      done = std::min(total, done + cs * dt);
      if (done >= total - 1e-15) {
        computeOver = true;
        out.computeEnd = Seconds(now);
      }
    }
    if (jobReady) {
      remaining -= ms * dt;
      if (remaining <= 1e-15) {
        out.communication += Seconds(now - jobStart);
        jobStart = -1;
        if (++j < work.size())
          remaining = work[j].value();
      }
    }
  }
  if (!computeOver)
    out.computeEnd = Seconds(now + (total - done));
  out.end = max(out.computeEnd, Seconds(now));
  return out;
}

Seconds backpropWithSync(const Context& ctx, int first, int last, AllreduceAlgorithm algorithm,
                         Tally& t) {
  const Seconds bwStart = t.compute.bwdWeights, bdStart = t.compute.bwdData;
  Seconds clock;
  std::vector<Seconds> readyAt(static_cast<size_t>(last - first));
  for (int i = last - 1; i >= first; --i) {
    const auto& l = ctx.net.layers[static_cast<size_t>(i)];
    const Seconds bw = ctx.time(l, Phase::kBwdWeights, ctx.b, 1.0);
    clock += bw;
    t.compute.bwdWeights += bw;
    readyAt[static_cast<size_t>(i - first)] = clock;
    // The first layer's input is data: no gradient w.r.t. it is needed.
    if (!l.readsNetworkInput()) {
      const Seconds bd = ctx.time(l, Phase::kBwdData, ctx.b, 1.0);
      clock += bd;
      t.compute.bwdData += bd;
    }
  }
  if (ctx.k <= 1)
    return clock;
  std::vector<Seconds> ready, work;  // per bucket: compute done when ready, alone time
  for (const auto& bucket : gradientBuckets(ctx.net, first, last, ctx.sc.options)) {
    ready.push_back(ctx.sc.options.overlap ? readyAt[static_cast<size_t>(bucket.firstLayer - first)]
                                           : clock);
    auto c = allReduce(ctx.topo, algorithm, Bytes(bucket.params * ctx.e), ctx.comm);
    t.picks.emplace_back(c.algorithm, bucket.params * ctx.e);
    // Its lane wakes up when the bucket is ready, and the update's when it is synced.
    c.time += ctx.handoff * 2;
    work.push_back(c.time);
    t.add(c);
  }
  const auto lanes = sharedLanes(clock, ready, work, ctx.lanes.compute, ctx.lanes.comm, &ctx.lanes);
  // Backprop stretched by communication sharing its cores, spread over its phases.
  const double stretch = clock.value() > 0 ? lanes.computeEnd / clock : 1.0;
  t.compute.bwdWeights += (t.compute.bwdWeights - bwStart) * (stretch - 1);
  t.compute.bwdData += (t.compute.bwdData - bdStart) * (stretch - 1);
  Seconds alone;
  for (const auto& w : work)
    alone += w;
  // A lane's wake-up delays the bucket but is not communication: the executor
  // times a transfer from when its lane runs it.
  t.communication += lanes.communication - alone - ctx.handoff * 2 * double(work.size());
  t.exposed += lanes.end - lanes.computeEnd;
  return lanes.end;
}

double paramsIn(const Network& net, int first, int last) {
  double p = 0;
  for (int i = first; i < last; ++i)
    p += double(net.layers[static_cast<size_t>(i)].params);
  return p;
}

}  // namespace strata::cost

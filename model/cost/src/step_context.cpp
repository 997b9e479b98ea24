#include "step_context.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <queue>
#include <set>

#include "strata/model/error.h"

namespace strata::cost {

Seconds forward(const Context& ctx, int first, int last, double examples, double fraction,
                Tally& t) {
  Seconds sum;
  for (int i = first; i < last; ++i)
    sum += ctx.time(ctx.net.layers[static_cast<size_t>(i)], Phase::kFwd, examples, fraction);
  t.compute.fwd += sum;
  return sum;
}

LaneSchedule playLanes(const std::vector<LaneTask>& tasks, double computeSpeed, double commSpeed,
                       Seconds handoff, const LaneSpeeds* duty) {
  const bool curve = duty != nullptr && !duty->commByDuty.empty();
  const size_t n = tasks.size();
  LaneSchedule out;
  out.start.assign(n, -1);
  out.end.assign(n, -1);
  std::vector<std::vector<size_t>> dependents(n);
  std::vector<size_t> depsLeft(n, 0);
  std::vector<double> lastDep(n, -1), left(n, 0);
  std::vector<char> crossLast(n, 0);
  // Per communication task with a duty curve (LaneTask::byDuty): the one
  // speed of its whole window, decided when it starts; -1: fluid.
  std::vector<double> fixed(n, -1.0);
  // Tasks whose dependencies are over, by the time they are ready (then index).
  using Pending = std::pair<double, size_t>;
  std::priority_queue<Pending, std::vector<Pending>, std::greater<>> pending;
  for (size_t i = 0; i < n; ++i) {
    for (int d : tasks[i].deps) {
      if (d < 0)
        continue;
      STRATA_ENFORCE(static_cast<size_t>(d) < i);
      dependents[static_cast<size_t>(d)].push_back(i);
      ++depsLeft[i];
    }
    if (depsLeft[i] == 0)
      pending.emplace(tasks[i].notBefore, i);
    left[i] = std::max(0.0, tasks[i].work.value());
  }
  std::set<size_t> readyCompute;  // ready compute tasks, the first listed runs next
  std::vector<size_t> comms;      // running communication tasks
  size_t computeAt = n;           // the running compute task (n: none)
  size_t done = 0;
  double now = 0;
  auto finish = [&](size_t i) {
    out.end[i] = now;
    ++done;
    for (size_t d : dependents[i]) {
      const bool cross = tasks[d].comm != tasks[i].comm;
      // The dep that ends last releases it (ties: a cross-lane one).
      if (now > lastDep[d]) {
        lastDep[d] = now;
        crossLast[d] = cross;
      } else {
        crossLast[d] = crossLast[d] || cross;
      }
      if (--depsLeft[d] == 0)
        pending.emplace(
            std::max(tasks[d].notBefore, lastDep[d] + (crossLast[d] ? handoff.value() : 0.0)), d);
    }
  };
  auto start = [&](size_t i) {
    out.start[i] = now;
    if (curve && tasks[i].comm && tasks[i].byDuty) {
      // The compute still to run (alone) on this worker: the running task's
      // rest and every compute task not started.
      double computeLeft = 0;
      for (size_t k = 0; k < n; ++k)
        if (!tasks[k].comm && out.end[k] < 0)
          computeLeft += left[k];
      fixed[i] = computeLeft <= 0 ? 1.0 : duty->commAtDuty(duty->windowDuty(computeLeft, left[i]));
    }
    if (left[i] <= 0)
      finish(i);  // a task without work ends at once
    else if (tasks[i].comm)
      comms.push_back(i);
    else
      computeAt = i;
  };
  while (done < n) {
    // Start what can start now (a task ending at once may release more).
    for (;;) {
      if (!pending.empty() && pending.top().first <= now) {
        const size_t i = pending.top().second;
        pending.pop();
        if (tasks[i].comm)
          start(i);
        else
          readyCompute.insert(i);
        continue;
      }
      if (computeAt == n && !readyCompute.empty()) {
        const size_t i = *readyCompute.begin();
        readyCompute.erase(readyCompute.begin());
        start(i);
        continue;
      }
      break;
    }
    if (done == n)
      break;
    const double cs = comms.empty() ? 1.0 : computeSpeed;
    const double ms = computeAt == n ? 1.0 : commSpeed;
    double dt = std::numeric_limits<double>::infinity();
    if (computeAt != n)
      dt = std::min(dt, left[computeAt] / cs);
    auto speedOf = [&](size_t c) { return fixed[c] >= 0 ? fixed[c] : ms; };
    for (size_t c : comms)
      dt = std::min(dt, left[c] / speedOf(c));
    if (!pending.empty())
      dt = std::min(dt, pending.top().first - now);
    STRATA_ENFORCE(std::isfinite(dt));  // deps are earlier tasks: something can progress
    now += dt;
    // Tasks whose end is this event end exactly now (no drift from rounding).
    const double tol = dt * (1 + 1e-12);
    std::vector<size_t> ended;
    if (computeAt != n) {
      if (left[computeAt] / cs <= tol) {
        left[computeAt] = 0;
        ended.push_back(computeAt);
        computeAt = n;
      } else {
        left[computeAt] -= cs * dt;
      }
    }
    for (size_t x = 0; x < comms.size();) {
      const size_t c = comms[x];
      if (left[c] / speedOf(c) <= tol) {
        left[c] = 0;
        ended.push_back(c);
        comms.erase(comms.begin() + static_cast<std::ptrdiff_t>(x));
      } else {
        left[c] -= speedOf(c) * dt;
        ++x;
      }
    }
    std::sort(ended.begin(), ended.end());
    for (size_t i : ended)
      finish(i);
  }
  return out;
}

LaneTimes sharedLanes(Seconds compute, const std::vector<Seconds>& ready,
                      const std::vector<Seconds>& work, double computeSpeed, double commSpeed,
                      const LaneSpeeds* duty) {
  // Compute cut into pieces at the jobs' ready points; job j waits for the
  // piece that ends at its ready point and for job j-1. The buckets' lane
  // wake-ups are in their work (backpropWithSync), so no hand-off here.
  const double total = std::max(0.0, compute.value());
  std::vector<double> cuts{total};
  for (const auto& r : ready)
    cuts.push_back(std::clamp(r.value(), 0.0, total));
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  std::vector<LaneTask> tasks;
  double at = 0;
  for (double c : cuts) {
    tasks.push_back({false, Seconds(c - at),
                     tasks.empty() ? std::vector<int>{} : std::vector<int>{int(tasks.size()) - 1}});
    at = c;
  }
  const size_t pieces = tasks.size();
  for (size_t j = 0; j < work.size(); ++j) {
    const double r = std::clamp(ready[j].value(), 0.0, total);
    const auto piece = std::lower_bound(cuts.begin(), cuts.end(), r) - cuts.begin();
    LaneTask job{true, work[j], {static_cast<int>(piece)}, true};
    if (j > 0)
      job.deps.push_back(static_cast<int>(tasks.size()) - 1);
    tasks.push_back(job);
  }
  const auto s = playLanes(tasks, computeSpeed, commSpeed, Seconds(0), duty);
  LaneTimes out;
  out.computeEnd = Seconds(s.end[pieces - 1]);
  out.end = out.computeEnd;
  for (size_t i = pieces; i < tasks.size(); ++i) {
    out.communication += Seconds(s.end[i] - s.start[i]);
    out.end = max(out.end, Seconds(s.end[i]));
  }
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

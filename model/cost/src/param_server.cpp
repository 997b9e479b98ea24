// The mshadow-ps style asynchronous parameter server: steps back to back.
#include "strata/model/param_server.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "step_context.h"
#include "strata/model/error.h"

namespace strata::cost {

namespace {

// ---- ps: steps back to back --------------------------------------------------
// One worker's compute lane and its server's communication thread over
// consecutive steps (every worker is alike), as lowerParamServer (plan/src/param_server.cpp)
// builds them and the simulator plays them: a fluid schedule in wall time.
// Compute items run in order, an item gated by a job once that job is over
// (and its lane woke up: `handoff`); a job becomes eligible when the item
// that releases it is over (plus the communication lane's wake-up) and the
// thread runs one job at a time, the eligible one with the biggest priority,
// ties by eligibility (the earliest; the latest for last-ready). Where the
// lanes share cores both slow down while both run (sharedLanes).
struct PsItem {
  Seconds work;               // alone
  int gate = -1;              // job that must be over before it starts
  std::vector<int> releases;  // jobs eligible once it is over
  int step = 0;
  Phase phase = Phase::kFwd;
  bool update = false;
};
struct PsJobSpec {
  Seconds work;  // push + server update + pull, alone
  int priority = 0;
  int step = 0;
  // The server update's part of `work` (alone): from cpuBegin to cpuEnd the
  // thread runs CPU work whatever the link (LaneSpeeds::busy*).
  Seconds cpuBegin, cpuEnd;
};
struct PsSchedule {
  std::vector<double> itemStart, itemEnd, jobStart, jobEnd;
};
PsSchedule schedulePs(const std::vector<PsItem>& items, const std::vector<PsJobSpec>& jobs,
                      bool lastReadyFirst, double handoff, const LaneSpeeds& speeds) {
  PsSchedule out;
  out.itemStart.assign(items.size(), -1);
  out.itemEnd.assign(items.size(), -1);
  out.jobStart.assign(jobs.size(), -1);
  out.jobEnd.assign(jobs.size(), -1);
  std::vector<double> eligible(jobs.size(), -1);  // time it may start
  std::vector<int> waiting;                       // released, not started
  double now = 0;
  size_t item = 0;
  double itemLeft = items.empty() ? 0 : items[0].work.value();
  bool itemRunning = false;
  int job = -1;
  // The running job's parts: 0 transfers before the update, 1 the update
  // (CPU work whatever the link), 2 transfers after; the work left of part
  // `jobPart` (alone).
  int jobPart = 0;
  double partLeft = 0;
  auto partWork = [&](int j, int part) {
    const auto& spec = jobs[static_cast<size_t>(j)];
    const double begin = std::clamp(spec.cpuBegin.value(), 0.0, spec.work.value());
    const double end = std::clamp(spec.cpuEnd.value(), begin, spec.work.value());
    return part == 0 ? begin : part == 1 ? end - begin : spec.work.value() - end;
  };
  auto gateTime = [&](size_t i) {
    const int g = items[i].gate;
    if (g < 0)
      return 0.0;
    return out.jobEnd[static_cast<size_t>(g)] < 0 ? -1.0
                                                  : out.jobEnd[static_cast<size_t>(g)] + handoff;
  };
  size_t jobsDone = 0;
  while (item < items.size() || jobsDone < jobs.size()) {
    // Start what can start now.
    if (!itemRunning && item < items.size()) {
      const double g = gateTime(item);
      if (g >= 0 && g <= now + 1e-15) {
        itemRunning = true;
        out.itemStart[item] = now;
      }
    }
    if (job < 0) {
      int best = -1;
      for (int j : waiting) {
        const auto ju = static_cast<size_t>(j);
        if (eligible[ju] > now + 1e-15)
          continue;
        if (best < 0)
          best = j;
        const auto bu = static_cast<size_t>(best);
        const bool higher = jobs[ju].priority > jobs[bu].priority;
        const bool tie = jobs[ju].priority == jobs[bu].priority;
        const bool earlier =
            eligible[ju] < eligible[bu] || (eligible[ju] == eligible[bu] && j < best);
        if (higher || (tie && (lastReadyFirst ? !earlier && j != best : earlier)))
          best = j;
      }
      if (best >= 0) {
        job = best;
        jobPart = 0;
        partLeft = partWork(best, 0);
        out.jobStart[static_cast<size_t>(best)] = now;
        waiting.erase(std::find(waiting.begin(), waiting.end(), best));
      }
    }
    // Parts with no work left pass at once; a job without any ends now.
    if (job >= 0) {
      while (jobPart < 2 && partLeft <= 0)
        partLeft = partWork(job, ++jobPart);
      if (partLeft <= 0) {
        out.jobEnd[static_cast<size_t>(job)] = now;
        job = -1;
        ++jobsDone;
        continue;
      }
    }
    const bool both = itemRunning && job >= 0;
    const bool cpu = job >= 0 && jobPart == 1;
    const double cs = both ? (cpu ? speeds.busyCompute : speeds.compute) : 1.0;
    const double ms = both ? (cpu ? speeds.busyComm : speeds.comm) : 1.0;
    double next = std::numeric_limits<double>::infinity();
    if (itemRunning)
      next = std::min(next, now + itemLeft / cs);
    if (job >= 0)
      next = std::min(next, now + partLeft / ms);
    for (int j : waiting)
      if (eligible[static_cast<size_t>(j)] > now)
        next = std::min(next, eligible[static_cast<size_t>(j)]);
    if (!itemRunning && item < items.size() && gateTime(item) > now)
      next = std::min(next, gateTime(item));
    STRATA_ENFORCE(std::isfinite(next));  // a job or an item can always progress
    const double dt = next - now;
    now = next;
    if (itemRunning) {
      itemLeft -= cs * dt;
      if (itemLeft <= 1e-15 * std::max(1.0, now)) {
        out.itemEnd[item] = now;
        for (int j : items[item].releases) {
          eligible[static_cast<size_t>(j)] = now + handoff;
          waiting.push_back(j);
        }
        itemRunning = false;
        if (++item < items.size())
          itemLeft = items[item].work.value();
      }
    }
    if (job >= 0) {
      partLeft -= ms * dt;
      if (partLeft <= 1e-15 * std::max(1.0, now))
        partLeft = 0;  // the next round moves on to the next part, or ends the job
    }
  }
  return out;
}

}  // namespace

// ps: PullWait over consecutive steps (lowerParamServer in plan/src/param_server.cpp). Prices
// push (direct reduce-scatter), the server's update of its 1/K shard and
// pull (direct allgather of the updated weights) per key; plays the steps
// the simulator's plan holds (defaultPlanIterations) and takes the period as
// psPeriod does. Returns the period; sets the first step's time (until its
// last pull lands) and the steps played.
Seconds paramServerStep(const Context& ctx, Tally& t, RoundInfo& info, Seconds& firstStep,
                        int& steps) {
  if (ctx.k <= 1)  // one worker has nothing to push: a data-parallel step
    return dataParallelStep(ctx, t, info, firstStep, steps);
  const auto& net = ctx.net;
  const int layers = static_cast<int>(net.layers.size());
  const int k = ctx.k;
  const int stale = ctx.sc.options.staleness;
  const auto buckets = psKeys(net, ctx.sc.options);
  const int nb = static_cast<int>(buckets.size());
  std::vector<int> bucketOf(static_cast<size_t>(layers), -1);
  std::vector<PsJobSpec> jobWork;  // per bucket: work and the update's part
  // Dedicated servers: ranks K..K+N-1 on the devices after the workers'.
  // Push: every worker sends chunk j of N to server j (one step); the server
  // sums the K chunks, updates its chunk and sends it to every worker.
  const int servers = ctx.sc.options.psServers;
  std::optional<Topology> placed;
  PatternCost up, down;
  if (servers > 0 && k > 1) {
    placed.emplace(ctx.cluster, k + servers);
    std::vector<Flow> in, out;
    for (int w = 0; w < k; ++w)
      for (int j = 0; j < servers; ++j) {
        in.push_back({w, k + j});
        out.push_back({k + j, w});
      }
    up = placed->cost(in);
    down = placed->cost(out);
  }
  // Two levels (nodes of G workers): into the node's leader, across the
  // leaders (a reduce-scatter, the leaders being the servers), back across,
  // back into the node; each stage one step of explicit flows.
  const int perNode = std::min(k, std::max(1, ctx.sc.options.psNode));
  const int nodes = (k + perNode - 1) / perNode;
  std::vector<Flow> into, outOf, across, back;
  if (ctx.sc.options.psNode > 0 && k > 1) {
    for (int w = 0; w < k; ++w)
      if (w % perNode != 0) {
        into.push_back({w, w / perNode * perNode});
        outOf.push_back({w / perNode * perNode, w});
      }
    for (int a = 0; a < nodes; ++a)
      for (int c = 0; c < nodes; ++c)
        if (a != c) {
          across.push_back({a * perNode, c * perNode});
          back.push_back({c * perNode, a * perNode});
        }
  }
  // One stage: its time, its bytes per worker and its bottleneck.
  auto stage = [&](const std::vector<Flow>& flows, Bytes perFlow) {
    if (flows.empty())
      return Seconds(0);
    const auto pattern = ctx.topo.cost(flows);
    const Seconds time = pattern.time(perFlow);
    t.addTime(time, pattern);
    for (const auto& f : flows) {
      t.sent[static_cast<size_t>(f.src)] += perFlow.value();
      t.received[static_cast<size_t>(f.dst)] += perFlow.value();
    }
    return time;
  };
  for (int j = 0; j < nb; ++j) {
    const auto& bk = buckets[static_cast<size_t>(j)];
    for (int l = bk.firstLayer; l <= bk.lastLayer; ++l)
      bucketOf[static_cast<size_t>(l)] = j;
    if (k > 1 && ctx.sc.options.psNode > 0) {
      const Bytes n(bk.params * ctx.e);
      const double gamma = ctx.comm.gamma;
      // Into the node's server and across the nodes' (summed), the update,
      // back and out.
      Seconds in = stage(into, n) + stage(across, n / nodes);
      const Seconds out = stage(back, n / nodes) + stage(outOf, n);
      const Seconds update = ctx.update(bk.params / nodes);
      if (!into.empty())
        in += Seconds(n.value() * (perNode - 1) * gamma);
      if (!across.empty())
        in += Seconds(n.value() / nodes * (nodes - 1) * gamma);
      jobWork.push_back({in + update + out, 0, 0, in, in + update});
    } else if (k > 1 && servers > 0) {
      const Bytes chunk(bk.params * ctx.e / servers);
      const Seconds push = up.time(chunk), pull = down.time(chunk);
      t.addTime(push, up);
      t.addTime(pull, down);
      t.addSymmetricBytes(bk.params * ctx.e, bk.params * ctx.e);
      // The update runs on the server's cores, not the worker's.
      jobWork.push_back({push + Seconds(chunk.value() * k * ctx.comm.gamma) +
                             ctx.update(bk.params / servers) + pull,
                         0, 0, Seconds(0), Seconds(0)});
    } else if (k > 1) {
      const Bytes n(bk.params * ctx.e);
      const auto push = reduceScatter(ctx.topo, n, ctx.comm, false);
      const auto pull = allGather(ctx.topo, n / k, false);
      t.add(push);
      t.add(pull);
      const Seconds update = ctx.update(bk.params / k);
      jobWork.push_back({push.time + update + pull.time, 0, 0, push.time, push.time + update});
    }
  }
  // The bytes and bottleneck of the collectives, not their time: a job's
  // wall time is what the schedule says.
  t.communication = Seconds(0);
  const double params = paramsIn(net, 0, layers);
  std::vector<PsItem> items;
  std::vector<PsJobSpec> jobs;
  std::vector<std::vector<int>> jobOf;  // [step][bucket]
  auto build = [&](int s) {
    jobOf.emplace_back(static_cast<size_t>(nb), -1);
    auto newJob = [&](int j) {
      const int id = static_cast<int>(jobs.size());
      const auto& bk = buckets[static_cast<size_t>(j)];
      PsJobSpec spec = jobWork[static_cast<size_t>(j)];
      spec.priority =
          ctx.sc.options.psPriority == PsPriority::kFirstNeeded ? layers - bk.firstLayer : 0;
      spec.step = s;
      jobs.push_back(spec);
      jobOf[static_cast<size_t>(s)][static_cast<size_t>(j)] = id;
      return id;
    };
    const int waitFor = s - 1 - stale;
    for (int l = 0; l < layers; ++l) {
      PsItem it;
      it.work = ctx.time(net.layers[static_cast<size_t>(l)], Phase::kFwd, ctx.b, 1.0);
      const int j = bucketOf[static_cast<size_t>(l)];
      if (k > 1 && waitFor >= 0 && j >= 0)
        it.gate = jobOf[static_cast<size_t>(waitFor)][static_cast<size_t>(j)];
      it.step = s;
      items.push_back(it);
    }
    for (int l = layers - 1; l >= 0; --l) {
      const auto& layer = net.layers[static_cast<size_t>(l)];
      const int j = bucketOf[static_cast<size_t>(l)];
      // With staleness: the gradients wait for the step before's job of the
      // key (a tied fc's: its embedding's key, whose gradient it writes).
      const int jg = bucketOf[static_cast<size_t>(gradientOwner(net, l))];
      const int previous = k > 1 && stale > 0 && s > 0 && jg >= 0
                               ? jobOf[static_cast<size_t>(s - 1)][static_cast<size_t>(jg)]
                               : -1;
      if (layer.computesWeightGradient())
        items.push_back({ctx.time(layer, Phase::kBwdWeights, ctx.b, 1.0),
                         previous,
                         {},
                         s,
                         Phase::kBwdWeights,
                         false});
      if (!layer.readsNetworkInput())
        items.push_back(
            {ctx.time(layer, Phase::kBwdData, ctx.b, 1.0), -1, {}, s, Phase::kBwdData, false});
      if (k > 1 && ctx.sc.options.overlap && j >= 0 &&
          buckets[static_cast<size_t>(j)].firstLayer == l)
        items.back().releases.push_back(newJob(j));
    }
    if (k == 1)
      items.push_back({ctx.update(params), -1, {}, s, Phase::kUpdate, true});
    else if (!ctx.sc.options.overlap)
      for (int j = 0; j < nb; ++j)
        items.back().releases.push_back(newJob(j));
  };
  // Per step, the end of its compute (the period is measured on it: the
  // compute lane runs the steps in order, where with staleness a pull of an
  // older step may land after a newer one's) and of all its work.
  const bool lastReady = ctx.sc.options.psPriority == PsPriority::kLastReady;
  PsSchedule sch;
  std::vector<double> computeEnd, allEnd;
  auto play = [&](int n) {
    sch = schedulePs(items, jobs, lastReady, ctx.handoff.value(), ctx.lanes);
    computeEnd.assign(static_cast<size_t>(n), 0);
    allEnd.assign(static_cast<size_t>(n), 0);
    for (size_t i = 0; i < items.size(); ++i) {
      const auto s = static_cast<size_t>(items[i].step);
      computeEnd[s] = std::max(computeEnd[s], sch.itemEnd[i]);
      allEnd[s] = std::max(allEnd[s], sch.itemEnd[i]);
    }
    for (size_t j = 0; j < jobs.size(); ++j) {
      const auto s = static_cast<size_t>(jobs[j].step);
      allEnd[s] = std::max(allEnd[s], sch.jobEnd[j]);
    }
    return psPeriod(computeEnd);
  };
  int n = 0;
  int target = defaultPlanIterations(ctx.sc);
  while (n < target)
    build(n++);
  double period = play(n);
  steps = n;
  firstStep = Seconds(allEnd[0]);
  // The last step's compute (stretched where the lanes share cores) and
  // communication; the compute lane waits for pulls the rest of the period.
  Seconds computeWall;
  for (size_t i = 0; i < items.size(); ++i) {
    if (items[i].step != n - 1)
      continue;
    // Alone unless the lanes share cores (exact, not a difference of clocks).
    const bool shared = ctx.lanes.shared();
    const Seconds wall = shared ? Seconds(sch.itemEnd[i] - sch.itemStart[i]) : items[i].work;
    computeWall += wall;
    if (items[i].update)
      t.compute.update += wall;
    else if (items[i].phase == Phase::kFwd)
      t.compute.fwd += wall;
    else if (items[i].phase == Phase::kBwdData)
      t.compute.bwdData += wall;
    else
      t.compute.bwdWeights += wall;
  }
  for (size_t j = 0; j < jobs.size(); ++j)
    if (jobs[j].step == n - 1)
      t.communication += Seconds(sch.jobEnd[j] - sch.jobStart[j]);
  t.exposed += max(Seconds(0), Seconds(period) - computeWall);
  return Seconds(period);
}

}  // namespace strata::cost

namespace strata {

double psPeriod(const std::vector<double>& computeEnd) {
  const int n = static_cast<int>(computeEnd.size());
  if (n < 2)
    return n == 1 ? computeEnd[0] : 0.0;
  const int h = (n - 1) / 2;
  return (computeEnd[static_cast<size_t>(n - 1)] - computeEnd[static_cast<size_t>(h)]) /
         (n - 1 - h);
}

int defaultPlanIterations(const Scenario& sc) {
  return sc.strategy == Strategy::kPs && sc.workers > 1 ? kPsSteadySteps + 2 * sc.options.staleness
                                                        : 1;
}

}  // namespace strata

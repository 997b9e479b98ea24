// The analytic cost model. Formulas and their sources: docs/cost-model.md.
#include "strata/model/estimate.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "strata/model/checked.h"
#include "strata/model/collectives.h"
#include "strata/model/compute_cost.h"
#include "strata/model/error.h"
#include "strata/model/limits.h"
#include "strata/model/plan.h"
#include "strata/model/quantity_text.h"
#include "strata/model/topology.h"

namespace strata {

Seconds layerTime(const Layer& layer, Phase phase, double examples, double fraction,
                  const DeviceSpec& device, FlopsPerSecond peak, ElementType element,
                  Optimizer optimizer) {
  double flops = 0, elems = 0;
  switch (phase) {
    case Phase::kFwd:
      flops = layer.fwdFlops;
      elems = layer.fwdElems;
      break;
    case Phase::kBwdData:
      flops = layer.bwdDataFlops;
      elems = layer.bwdDataElems;
      break;
    case Phase::kBwdWeights:
      flops = layer.bwdWeightsFlops;
      elems = layer.bwdWeightsElems;
      break;
    case Phase::kUpdate:
      return updateTime(double(layer.params) * fraction, device, element, optimizer);
  }
  if (phase == Phase::kBwdWeights && !layer.computesWeightGradient())
    return Seconds(0);
  const Flops work(flops * examples * fraction);
  // Weights are read once per pass (fwd, bwd_data) or written once (bwd_weights).
  const Bytes traffic((elems * examples + double(layer.params)) * fraction * elementBytes(element));
  const Seconds computeBound = work / (peak * device.efficiencyFor(layer.kind, element));
  const Seconds memoryBound = traffic / (device.memoryBandwidth * device.memoryEfficiency);
  return max(computeBound, memoryBound);
}

int workersPerNode(const Cluster& cluster, int workers) {
  const int group = cluster.levels.front().group;
  return group == 0 ? workers : std::min(workers, group);
}

LaneSpeeds overlapSpeeds(const Cluster& cluster, const Topology& topo, int workers) {
  const int perNode = workersPerNode(cluster, workers);
  const double compute = cluster.device.overlapComputeSpeed(perNode);
  const double comm = cluster.device.overlapCommSpeed(perNode);
  LaneSpeeds s{compute, comm, compute, comm};
  const double measured = cluster.device.overlapCommRateFor(perNode);
  const double perByte = topo.workers() > 1 ? topo.ringStep().secondsPerByte : 0.0;
  if (measured <= 0 || perByte <= 0)
    return s;
  const double busy = std::min(1.0, 1.0 / perByte / measured);
  s.compute = 1 - (1 - s.compute) * busy;
  s.comm = std::min(1.0, s.comm / busy);
  return s;
}

UpdateCost updateCostPerParam(Optimizer optimizer, ElementType element) {
  // Master weights and optimizer states are fp32 (4 bytes) in every case:
  // the element's own size for fp32 and tf32, and kept in fp32 beside the
  // 2-byte working copy in mixed precision (Micikevicius et al. 2018).
  constexpr double kState = 4.0;
  const double e = elementBytes(element);
  const double states = optimizerStatesPerParam(optimizer);
  UpdateCost c;
  // Read g; read and write w (the fp32 master in mixed precision, which then
  // also writes the 2-byte working copy); read and write each state.
  c.bytes = e + 2 * kState + 2 * kState * states + (isMixedPrecision(element) ? e : 0.0);
  switch (optimizer) {
    case Optimizer::kSgd:
      c.flops = 2;  // w -= lr g
      break;
    case Optimizer::kMomentum:
      c.flops = 4;  // v = mu v + g; w -= lr v
      break;
    case Optimizer::kAdam:
      // m = b1 m + (1 - b1) g: 3; v = b2 v + (1 - b2) g^2: 4; w -= s m /
      // (sqrt(v) / c + eps), bias corrections s, c folded into per-step
      // scalars (PyTorch's Adam): sqrt, div, add, div, mul-sub = 5.
      c.flops = 12;
      break;
  }
  return c;
}

Seconds updateTime(double params, const DeviceSpec& device, ElementType element,
                   Optimizer optimizer) {
  const UpdateCost c = updateCostPerParam(optimizer, element);
  const Seconds memoryBound =
      Bytes(c.bytes * params) / (device.memoryBandwidth * device.memoryEfficiency);
  // Element-wise fp32 arithmetic on the fp32 (non-tensor) peak.
  const Seconds computeBound = Flops(c.flops * params) / device.peak[0];
  return max(memoryBound, computeBound);
}

namespace {

// Everything one evaluation needs, computed once.
struct Context {
  const Network& net;
  const Cluster& cluster;
  const Scenario& sc;
  Topology topo;
  double e;             // bytes per element
  FlopsPerSecond peak;  // for the element type
  CommParams comm;
  int k;
  int b;
  ComputeCosts costs;  // compute pricing (profile, kernel tables or roofline)
  // Speeds of compute and communication while both run on a worker.
  LaneSpeeds lanes;
  Seconds handoff;  // a lane's wake-up when the other lane releases it

  Context(const Network& n, const Cluster& c, const Scenario& s)
      : net(n),
        cluster(c),
        sc(s),
        topo(c, s.workers),
        e(elementBytes(s.options.element)),
        peak(c.device.peakFor(s.options.element, c.sourceFile)),
        k(s.workers),
        b(s.batchPerWorker),
        costs(n, c, s.options.element, workersPerNode(c, s.workers), s.options.optimizer,
              s.options.threadsPerWorker),
        lanes(overlapSpeeds(c, topo, s.workers)),
        handoff(c.device.handoffFor(workersPerNode(c, s.workers))) {
    comm.segment = s.options.segment;
    comm.gamma = 1.0 / c.device.reduceBandwidth.value();
  }

  Seconds time(const Layer& l, Phase p, double examples, double fraction) const {
    return costs.layer(static_cast<int>(&l - net.layers.data()), p, examples, fraction);
  }
  Seconds update(double params) const { return costs.update(params); }
};

// Per-worker accumulators shared by all strategies.
struct Tally {
  PhaseTimes compute;
  std::vector<double> sent, received;
  Seconds communication;  // sum of collective durations
  Seconds exposed;
  Seconds worstCollective;
  int bottleneckLink = -1;
  bool bottleneckUp = true;
  // Each gradient allreduce's algorithm and bytes (describeAllreduce).
  std::vector<std::pair<std::string, double>> picks;

  explicit Tally(int k)
      : sent(static_cast<size_t>(k), 0.0), received(static_cast<size_t>(k), 0.0) {}

  // Communication with the same bytes for every worker, added in bulk.
  void addSymmetricBytes(double sentEach, double receivedEach) {
    for (auto& x : sent)
      x += sentEach;
    for (auto& x : received)
      x += receivedEach;
  }
  void addTime(Seconds time, const PatternCost& pattern) {
    communication += time;
    if (time > worstCollective && pattern.bottleneckLink >= 0) {
      worstCollective = time;
      bottleneckLink = pattern.bottleneckLink;
      bottleneckUp = pattern.bottleneckUp;
    }
  }

  void add(const CollectiveCost& c, double times = 1.0) {
    for (size_t i = 0; i < sent.size(); ++i) {
      sent[i] += c.sent[i] * times;
      received[i] += c.received[i] * times;
    }
    communication += c.time * times;
    if (c.time > worstCollective && c.bottleneckLink >= 0) {
      worstCollective = c.time;
      bottleneckLink = c.bottleneckLink;
      bottleneckUp = c.bottleneckUp;
    }
  }
};

// Forward of layers [first, last) on `examples` examples.
Seconds forward(const Context& ctx, int first, int last, double examples, double fraction,
                Tally& t) {
  Seconds sum;
  for (int i = first; i < last; ++i)
    sum += ctx.time(ctx.net.layers[static_cast<size_t>(i)], Phase::kFwd, examples, fraction);
  t.compute.fwd += sum;
  return sum;
}

// Where a worker's communication and compute share its cores (CPU workers),
// both slow down while both run: compute at `computeSpeed`, communication at
// `commSpeed` of their speeds alone. A fluid schedule of one compute lane
// (`compute` seconds of work alone) and one communication lane running jobs
// in order, job j once compute has done ready[j] of its work and job j-1 is
// over, each needing work[j] seconds alone. With both speeds 1 it is the
// plain overlap max(compute, ready + work chained).
struct LaneTimes {
  Seconds computeEnd;     // wall time when compute finishes
  Seconds end;            // wall time when the last job finishes (>= computeEnd)
  Seconds communication;  // sum of the jobs' wall durations
};
LaneTimes sharedLanes(Seconds compute, const std::vector<Seconds>& ready,
                      const std::vector<Seconds>& work, double computeSpeed, double commSpeed) {
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
    if (jobReady && jobStart < 0)
      jobStart = now;
    const bool both = jobReady && !computeOver;
    const double cs = both ? computeSpeed : 1.0, ms = both ? commSpeed : 1.0;
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

// Backprop of data-parallel layers [first, last) with their gradient
// synchronisation. Gradients become ready layer by layer (bwd_weights runs
// before bwd_data so the gradient leaves early). With overlap a communication
// stream allreduces each bucket (strategy.h) as soon as its last gradient is
// ready, one bucket after another, last layers first; without overlap one
// allreduce of every gradient follows backprop. Returns the time from the
// start of backprop until gradients are synced.
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
  const auto lanes = sharedLanes(clock, ready, work, ctx.lanes.compute, ctx.lanes.comm);
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

// naive / ring, and ps on one worker (nothing to push): every layer
// data-parallel.
Seconds dataParallelStep(const Context& ctx, Tally& t) {
  const int layers = static_cast<int>(ctx.net.layers.size());
  const Seconds fwd = forward(ctx, 0, layers, ctx.b, 1.0, t);
  const Seconds bwd = backpropWithSync(ctx, 0, layers, gradientAllreduce(ctx.sc), t);
  const Seconds upd = ctx.update(paramsIn(ctx.net, 0, layers));
  t.compute.update += upd;
  return fwd + bwd + upd;
}

// ---- ps: steps back to back --------------------------------------------------
// One worker's compute lane and its server's communication thread over
// consecutive steps (every worker is alike), as lowerParamServer (plan.cpp)
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

// ps: PullWait over consecutive steps (lowerParamServer in plan.cpp). Prices
// push (direct reduce-scatter), the server's update of its 1/K shard and
// pull (direct allgather of the updated weights) per key; plays the steps
// the simulator's plan holds (defaultPlanIterations) and takes the period as
// psPeriod does. Returns the period; sets the first step's time (until its
// last pull lands) and the steps played.
Seconds paramServerStep(const Context& ctx, Tally& t, Seconds& firstStep, int& steps) {
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

// owt-a / owt-b / owt-c: conv part data-parallel, FC part model-parallel.
Seconds weirdTrickStep(const Context& ctx, Tally& t, RoundInfo& info) {
  const auto& net = ctx.net;
  const int mp = net.modelParallelFrom;
  const int layers = static_cast<int>(net.layers.size());
  const int k = ctx.k;
  const double b = ctx.b;
  const double frac = 1.0 / k;
  const auto strategy = ctx.sc.strategy;

  // Conv forward on b examples.
  const Seconds convFwd = forward(ctx, 0, mp, b, 1.0, t);

  // Rounds of the FC phase.
  const int rounds = strategy == Strategy::kOwtA ? 1 : k;
  const double batch = strategy == Strategy::kOwtA ? k * b : b;
  const double boundary = double(net.layers[static_cast<size_t>(mp)].inShape.elements()) * ctx.e;
  const bool perRoundUpdate =
      strategy != Strategy::kOwtA && ctx.sc.options.fcUpdate == FcUpdate::kRound;
  const double fcParams = paramsIn(net, mp, layers);

  // FC compute of one round (fwd + bwd of every model-parallel layer on its 1/K).
  Seconds fcFwd, fcBwdW, fcBwdD;
  for (int i = mp; i < layers; ++i) {
    const auto& l = net.layers[static_cast<size_t>(i)];
    fcFwd += ctx.time(l, Phase::kFwd, batch, frac);
    fcBwdW += ctx.time(l, Phase::kBwdWeights, batch, frac);
    fcBwdD += ctx.time(l, Phase::kBwdData, batch, frac);
  }
  const Seconds roundUpdate = perRoundUpdate ? ctx.update(fcParams * frac) : Seconds(0);
  const Seconds roundCompute = fcFwd + fcBwdW + fcBwdD + roundUpdate;

  // Exchanges inside the model-parallel part, per round: a layer with weights
  // after the first needs the whole output of the layer before it (allgather
  // of slices) and returns partial input gradients to their owners
  // (reduce-scatter); the softmax needs a max and a sum per example across the
  // slices (allreduce of 2 values per example).
  Seconds inner;
  Tally innerTally(k);
  for (int i = mp + 1; i < layers; ++i) {
    const auto& l = net.layers[static_cast<size_t>(i)];
    if (l.hasWeights()) {
      const Bytes slice(batch * double(l.inShape.elements()) * frac * ctx.e);
      const auto gatherIn = allGather(ctx.topo, slice, false);
      const auto scatterGrad = reduceScatter(ctx.topo, slice * k, ctx.comm, false);
      // Each exchange: the communication lane wakes for it, the compute lane for its result.
      inner += gatherIn.time + scatterGrad.time + ctx.handoff * 4;
      innerTally.add(gatherIn);
      innerTally.add(scatterGrad);
    } else if (l.kind == LayerKind::kSoftmax && k > 1) {
      const auto c =
          allReduce(ctx.topo, AllreduceAlgorithm::kDirect, Bytes(2 * batch * ctx.e), ctx.comm);
      inner += c.time + ctx.handoff * 2;
      innerTally.add(c);
    }
  }

  // Activations in and activation gradients back, per round.
  std::vector<Seconds> in(static_cast<size_t>(rounds)), back(static_cast<size_t>(rounds));
  double egress = 0;
  if (strategy == Strategy::kOwtB) {
    // Round r: worker r broadcasts its b examples; all return their partial
    // gradients to worker r, which sums them. Over the K rounds every worker
    // is the root once: it sends (K-1) b A e as root and b A e in each of the
    // K-1 other rounds, and receives as much.
    const Bytes n(b * boundary);
    for (int r = 0; r < rounds; ++r) {
      in[static_cast<size_t>(r)] = broadcastTime(ctx.topo, r, n) + ctx.handoff;
      back[static_cast<size_t>(r)] = reduceTime(ctx.topo, r, n, ctx.comm) + ctx.handoff;
      t.addTime(in[static_cast<size_t>(r)] + back[static_cast<size_t>(r)] - ctx.handoff * 2,
                ctx.topo.scatter(r));
    }
    t.addSymmetricBytes(2.0 * (k - 1) * n.value(), 2.0 * (k - 1) * n.value());
    egress = (k - 1) * n.value();
  } else {
    // owt-a: every worker sends its b examples to every other worker; the
    // owners sum the K-1 partial gradients of their examples.
    // owt-c: the same with b/K examples, in each of K rounds.
    const double perRound = strategy == Strategy::kOwtA ? b : b / k;
    const auto x = allToAll(ctx.topo, Bytes(perRound * boundary));
    const auto g = reduceScatter(ctx.topo, Bytes(k * perRound * boundary), ctx.comm, false);
    for (int r = 0; r < rounds; ++r) {
      in[static_cast<size_t>(r)] = x.time + ctx.handoff;
      back[static_cast<size_t>(r)] = g.time + ctx.handoff;
    }
    t.add(x, rounds);
    t.add(g, rounds);
    egress = (k - 1) * perRound * boundary;
  }
  for (size_t i = 0; i < t.sent.size(); ++i) {
    t.sent[i] += innerTally.sent[i] * rounds;
    t.received[i] += innerTally.received[i] * rounds;
  }
  t.communication += innerTally.communication * rounds;

  // Three-stage flow shop over the rounds: transfer in (network), FC compute
  // with its inner exchanges (device), gradients back (network). Transfer r+1
  // runs while round r computes, so with compute >= transfer K-1 of the K
  // transfers hide (Krizhevsky 2014, scheme b).
  const Seconds roundBusy = roundCompute + inner;
  Seconds inEnd, computeEnd, backEnd;
  int hidden = 0;
  for (int r = 0; r < rounds; ++r) {
    inEnd += in[static_cast<size_t>(r)];
    if (r > 0 && inEnd <= computeEnd)
      ++hidden;
    computeEnd = max(computeEnd, inEnd) + roundBusy;
    backEnd = max(backEnd, computeEnd) + back[static_cast<size_t>(r)];
  }
  const Seconds fcPhase = backEnd;
  t.compute.fwd += fcFwd * rounds;
  t.compute.bwdWeights += fcBwdW * rounds;
  t.compute.bwdData += fcBwdD * rounds;
  t.compute.update += roundUpdate * rounds;
  t.exposed += fcPhase - roundCompute * rounds;

  Seconds meanIn, meanBack;
  for (int r = 0; r < rounds; ++r) {
    meanIn += in[static_cast<size_t>(r)];
    meanBack += back[static_cast<size_t>(r)];
  }
  info.rounds = rounds;
  info.batchPerRound = static_cast<int>(std::lround(batch));
  info.transfer = meanIn / rounds;
  info.gradientReturn = meanBack / rounds;
  info.compute = roundCompute;
  info.innerComm = inner;
  info.hiddenTransfers = hidden;
  info.egressPerRound = Bytes(egress);

  // Conv backprop with the conv-gradient sync, then the updates.
  const Seconds convBwd = backpropWithSync(ctx, 0, mp, ctx.sc.options.convSync, t);
  Seconds upd = ctx.update(paramsIn(net, 0, mp));
  if (!perRoundUpdate)
    upd += ctx.update(fcParams * frac);
  t.compute.update += upd;
  return convFwd + fcPhase + convBwd + upd;
}

// Memory of worker `rank`. Every worker holds the same, except that only the
// naive reducer (rank 0) stages the K-1 incoming gradients.
MemoryUse memoryOf(const Context& ctx, int rank) {
  const auto& net = ctx.net;
  const int layers = static_cast<int>(net.layers.size());
  const double e = ctx.e;
  const double b = ctx.b;
  const int k = ctx.k;
  MemoryUse m;
  const bool owt = isModelParallel(ctx.sc.strategy);
  const int mp = owt ? net.modelParallelFrom : layers;
  const double local = paramsIn(net, 0, mp) + paramsIn(net, mp, layers) / k;
  m.weights = Bytes(local * e);
  m.gradients = Bytes(local * e);
  // The optimizer's states (0 sgd, 1 momentum, 2 adam moments per parameter)
  // and, in mixed precision, the fp32 master weights: 4 bytes each
  // (Micikevicius et al., "Mixed Precision Training", ICLR 2018; Adam in
  // fp16: 2 + 2 + 4 + 8 = 16 bytes per parameter with weights and gradients,
  // Rajbhandari et al., "ZeRO", SC 2020, section 3.1).
  const double optimizerPerParam = 4.0 * optimizerStatesPerParam(ctx.sc.options.optimizer) +
                                   (isMixedPrecision(ctx.sc.options.element) ? 4.0 : 0.0);
  // ps: a worker's server holds its 1/K of the optimizer state (none with
  // dedicated servers).
  // Two levels: a node's leader serves 1/M of it, its other workers nothing.
  const bool ps = ctx.sc.strategy == Strategy::kPs && k > 1;
  const int perNode = std::min(k, std::max(1, ctx.sc.options.psNode));
  const int nodes = (k + perNode - 1) / perNode;
  const double psShare = !ps                            ? 1.0
                         : ctx.sc.options.psNode > 0    ? (rank % perNode == 0 ? 1.0 / nodes : 0.0)
                         : ctx.sc.options.psServers > 0 ? 0.0
                                                        : 1.0 / k;
  const bool psServers = ps && ctx.sc.options.psServers > 0;
  m.optimizer = Bytes(local * optimizerPerParam * psShare);
  // Saved activations: every layer's output (and the network input) for b
  // examples; model-parallel layers hold their 1/K slice of a round's batch
  // plus the whole input they gathered.
  double act = double(net.input.elements()) * b;
  for (int i = 0; i < mp; ++i)
    act += (double(net.layers[static_cast<size_t>(i)].outShape.elements()) +
            net.layers[static_cast<size_t>(i)].savedElems) *
           b;
  if (owt) {
    const double batch = ctx.sc.strategy == Strategy::kOwtA ? k * b : b;
    for (int i = mp; i < layers; ++i) {
      const auto& l = net.layers[static_cast<size_t>(i)];
      act += double(l.outShape.elements()) / k * batch;
      if (l.hasWeights())
        act += double(l.inShape.elements()) * batch;
    }
  }
  m.activations = Bytes(act * e);
  // Communication staging.
  const double seg = ctx.sc.options.segment.value();
  const double grads = paramsIn(net, 0, mp) * e;
  auto staged = [&](double bytes) { return seg > 0 ? std::min(seg, bytes) : bytes; };
  double buffers = 0;
  if (k > 1) {
    switch (ctx.sc.strategy) {
      case Strategy::kNaive:
        buffers = rank == 0 ? (k - 1) * staged(grads) : 0;
        break;  // on the reducer
      case Strategy::kRing:
        buffers = 2 * staged(grads / k);
        break;
      case Strategy::kPs:
        buffers = psServers ? 0.0 : grads * psShare;
        break;  // server shard accumulator
      case Strategy::kOwtA:
      case Strategy::kOwtB:
      case Strategy::kOwtC: {
        const double boundary = double(net.layers[static_cast<size_t>(mp)].inShape.elements()) * e;
        // Next round's activations prefetched (b, c) and the conv-gradient
        // chunks of the direct sync.
        buffers = (ctx.sc.strategy == Strategy::kOwtA ? 0 : b * boundary) + 2 * grads / k;
        break;
      }
    }
  }
  m.buffers = Bytes(buffers);
  return m;
}

Seconds run(const Context& ctx, Tally& t, RoundInfo& info, Seconds& firstStep, int& steps) {
  steps = 1;
  Seconds step;
  if (ctx.sc.strategy == Strategy::kPs && ctx.k > 1)
    return paramServerStep(ctx, t, firstStep, steps);
  step = isModelParallel(ctx.sc.strategy) ? weirdTrickStep(ctx, t, info) : dataParallelStep(ctx, t);
  firstStep = step;
  return step;
}

}  // namespace

namespace {
// A size option of a scenario: exactly 0 (off) or a whole, finite size in the
// byte range of quantity_text.h. A size between 0 and 1 B would round to 0,
// which means off: the request would silently change meaning.
void checkSizeOption(Bytes size, const char* option) {
  const double v = size.value();
  const auto range = quantityRange(QuantityKind::kBytes);
  if (!std::isfinite(v) || v < 0)
    throw OptionError(option, fmt::format("must be a size of at least 1 B, or 0 for off; got {}",
                                          formatBytes(size)));
  if (v > 0 && v < range.min)
    throw OptionError(option, fmt::format("{:g} B is less than one byte (it would round to 0, "
                                          "which means off); write 0 for off or at least 1 B",
                                          v));
  if (v > range.max)
    throw OptionError(option, fmt::format("{} is over 2^53 B, the largest size strata counts "
                                          "exactly",
                                          formatBytes(size)));
}
}  // namespace

void checkScenario(const Network& network, const Scenario& sc) {
  if (sc.workers < 1)
    throw OptionError("--workers", fmt::format("must be at least 1, got {}", sc.workers));
  if (sc.batchPerWorker < 1)
    throw OptionError("--batch", fmt::format("must be at least 1, got {}", sc.batchPerWorker));
  if (sc.options.psServers < 0 || sc.options.psServers > kMaxPsServers)
    throw OptionError("--ps-servers", fmt::format("must be a whole number of server nodes in [0, "
                                                  "{}], got {}",
                                                  kMaxPsServers, sc.options.psServers));
  if (sc.options.psNode < 0 || sc.options.psNode > kMaxPsServers)
    throw OptionError("--ps-node", fmt::format("must be a whole number of workers per node in [0, "
                                               "{}], got {}",
                                               kMaxPsServers, sc.options.psNode));
  checkThreadsPerWorker(sc.options.threadsPerWorker);
  if (sc.options.psNode > 0 && sc.options.psServers > 0)
    throw OptionError("--ps-node",
                      "two levels make the node leaders the servers: use --ps-node or "
                      "--ps-servers, not both");
  if (sc.options.staleness < 0 || sc.options.staleness > kMaxStaleness)
    throw OptionError("--staleness",
                      fmt::format("must be a whole number of steps in [0, {}], got {}",
                                  kMaxStaleness, sc.options.staleness));
  globalBatch(sc.workers, sc.batchPerWorker);
  checkSizeOption(sc.options.segment, "--segment");
  checkSizeOption(sc.options.bucket, "--bucket");
  if (isModelParallel(sc.strategy) && network.modelParallelFrom < 0)
    throw UserError(
        fmt::format("{}: network '{}' has no part that can run model-parallel ({}); {} needs "
                    "one (or set model_parallel_from); naive, ring and ps run any network",
                    network.sourceFile, network.name,
                    network.noModelParallelWhy.empty() ? "model_parallel_from is not set"
                                                       : network.noModelParallelWhy,
                    toString(sc.strategy)));
  if (isModelParallel(sc.strategy) && network.modelParallelFrom == 0)
    throw UserError(fmt::format("{}: network '{}' has no data-parallel part before '{}'",
                                network.sourceFile, network.name, network.layers[0].name));
}

MemoryUse estimateMemory(const Network& network, const Cluster& cluster, const Scenario& scenario,
                         int rank) {
  const Context ctx(network, cluster, scenario);
  return memoryOf(ctx, rank);
}

TrainingRun trainingRunOfSteps(double steps, const std::string& option) {
  if (!std::isfinite(steps) || steps < 1 || steps != std::floor(steps) || steps > kMaxTrainingSteps)
    throw OptionError(option, fmt::format("must be a whole number of steps in [1, {:.0e}], got {}",
                                          kMaxTrainingSteps, steps));
  TrainingRun run;
  run.steps = steps;
  return run;
}

TrainingRun trainingRunOfEpochs(double epochs, double dataset, int globalBatch) {
  if (!std::isfinite(epochs) || epochs <= 0 || epochs > kMaxEpochs)
    throw OptionError("--epochs", fmt::format("must be a number of epochs in (0, {:.0e}], got {}",
                                              kMaxEpochs, epochs));
  if (!std::isfinite(dataset) || dataset < 1 || dataset != std::floor(dataset) ||
      dataset > kMaxDatasetExamples)
    throw OptionError(
        "--dataset",
        fmt::format("must be a whole number of examples in [1, 2^53], got {}", dataset));
  STRATA_ENFORCE(globalBatch >= 1);
  TrainingRun run;
  run.epochs = epochs;
  run.dataset = dataset;
  // In integers: the dataset is at most 2^53, exact in an int64_t.
  const auto examples = static_cast<int64_t>(dataset);
  run.stepsPerEpoch = double((examples + globalBatch - 1) / globalBatch);
  // A fractional epoch count rounds up to a whole step; a product that is a
  // whole number but for the rounding of E in binary (1.1 x 100 =
  // 110.00000000000001) is that whole number.
  const double exact = epochs * run.stepsPerEpoch;
  const double nearest = std::round(exact);
  run.steps = std::abs(exact - nearest) <= 1e-9 * std::max(1.0, exact) ? nearest : std::ceil(exact);
  if (run.steps > kMaxTrainingSteps)
    throw OptionError("--epochs",
                      fmt::format("{} epochs x {:.0f} steps per epoch is {:.0f} steps, over the "
                                  "{:.0e} a run may have",
                                  epochs, run.stepsPerEpoch, run.steps, kMaxTrainingSteps));
  return run;
}

TrainingRun priceTrainingRun(TrainingRun run, const StepEstimate& estimate) {
  // An engine that leaves firstStep unset synchronises every step.
  const Seconds first = estimate.firstStep.value() > 0 ? estimate.firstStep : estimate.step;
  run.time = run.steps > 0 ? first + estimate.step * (run.steps - 1) : Seconds(0);
  return run;
}

int globalBatch(int workers, int batchPerWorker) {
  int64_t examples = 0;
  if (!checkedMul(workers, batchPerWorker, examples, std::numeric_limits<int>::max()))
    throw OptionError("--batch",
                      fmt::format("{} examples per worker x {} workers is a global batch over {} "
                                  "examples; lower --batch or --workers",
                                  batchPerWorker, workers, std::numeric_limits<int>::max()));
  return static_cast<int>(examples);
}

void checkPsPlacement(const Cluster& cluster, const Scenario& sc) {
  const int servers = sc.options.psServers;
  const auto cap = cluster.capacity();
  if (sc.strategy == Strategy::kPs && servers > 0 && sc.workers > 1 && cap >= 0 &&
      int64_t(sc.workers) + servers > cap)
    throw OptionError("--ps-servers",
                      fmt::format("cluster '{}' ({}) has {} devices: {} workers and {} dedicated "
                                  "servers need {}; use fewer servers or workers, or --ps-servers "
                                  "0 (servers sharded over the workers)",
                                  cluster.name, cluster.sourceFile, cap, sc.workers, servers,
                                  int64_t(sc.workers) + servers));
}

StepEstimate estimate(const Network& network, const Cluster& cluster, const Scenario& scenario) {
  checkModelWorkers(scenario.workers, limits());
  checkScenario(network, scenario);
  checkPsPlacement(cluster, scenario);
  const Context ctx(network, cluster, scenario);
  Tally t(scenario.workers);
  StepEstimate est;
  est.network = network.name;
  est.cluster = cluster.name;
  est.scenario = scenario;
  est.step = run(ctx, t, est.rounds, est.firstStep, est.steadySteps);

  // One worker, b examples, no communication: the speedup's reference.
  Scenario single = scenario;
  single.workers = 1;
  single.strategy = Strategy::kRing;
  const Context one(network, cluster, single);
  Tally t1(1);
  RoundInfo unused;
  Seconds unusedFirst;
  int unusedSteps = 0;
  est.singleWorkerStep = run(one, t1, unused, unusedFirst, unusedSteps);

  const int k = scenario.workers;
  const double examples = double(k) * scenario.batchPerWorker;
  est.throughput = examples / est.step.value();
  est.speedup = est.throughput / (scenario.batchPerWorker / est.singleWorkerStep.value());
  est.efficiency = est.speedup / k;
  est.bottleneck = ctx.topo.describeLink(t.bottleneckLink, t.bottleneckUp);
  if (const auto sync = syncAllreduce(scenario))
    est.allreduce = describeAllreduce(*sync, t.picks);
  est.computeSource = ctx.costs.describe();

  // Worker 0 and the others, each assigned whole: GCC 12.2 at -O3
  // (-ftree-loop-distribution) split this loop and ran a field store
  // `w.memory.buffers = 0` before the copy `w.memory = mem` it was meant to
  // amend, so the naive reducer's staging showed on every worker. One
  // aggregate store per worker leaves nothing to reorder; the model test
  // "every worker's memory is estimateMemory's" guards it (docs/testing.md).
  const MemoryUse memRoot = memoryOf(ctx, 0);
  const MemoryUse memOther = memoryOf(ctx, 1);
  est.workers.resize(static_cast<size_t>(k));
  for (int r = 0; r < k; ++r) {
    auto& w = est.workers[static_cast<size_t>(r)];
    w.rank = r;
    w.compute = t.compute;
    w.communication = t.communication;
    w.exposedCommunication = t.exposed;
    w.idle = max(Seconds(0), est.step - t.compute.total() - t.exposed);
    w.sent = Bytes(t.sent[static_cast<size_t>(r)]);
    w.received = Bytes(t.received[static_cast<size_t>(r)]);
    w.memory = r == 0 ? memRoot : memOther;
  }
  est.fitsInMemory = max(memRoot.total(), memOther.total()) <= cluster.device.memoryCapacity;
  return est;
}

}  // namespace strata

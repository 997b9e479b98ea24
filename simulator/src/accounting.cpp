// The simulator's accounting: bytes on the wire and communication time per
// worker, the trace's slices, and the Result of a run (engine.h).
#include <fmt/format.h>

#include <algorithm>

#include "engine.h"
#include "strata/model/error.h"
#include "strata/model/estimate.h"
#include "strata/model/model_flops.h"

namespace strata::sim::detail {

namespace {

// Appends [a, b], merged into the last interval when they overlap: a
// worker's communication tasks mostly follow one another, so its list
// stays short at 10^5 workers (merged() still sorts and merges it all).
void addInterval(Intervals& v, std::pair<double, double> span) {
  if (!v.empty() && span.first <= v.back().second && span.second >= v.back().first) {
    v.back().first = std::min(v.back().first, span.first);
    v.back().second = std::max(v.back().second, span.second);
    return;
  }
  v.push_back(span);
}

Intervals merged(Intervals v) {
  std::sort(v.begin(), v.end());
  Intervals out;
  for (const auto& iv : v) {
    if (!out.empty() && iv.first <= out.back().second) {
      out.back().second = std::max(out.back().second, iv.second);
    } else {
      out.push_back(iv);
    }
  }
  return out;
}

double length(const Intervals& v) {
  double s = 0;
  for (const auto& iv : v)
    s += iv.second - iv.first;
  return s;
}

// The parts of sorted intervals inside [from, to].
Intervals clipped(const Intervals& v, double from, double to) {
  Intervals out;
  for (const auto& [a, b] : v)
    if (std::min(b, to) > std::max(a, from))
      out.push_back({std::max(a, from), std::min(b, to)});
  return out;
}

}  // namespace

// As the closed form's (StepEstimate::pipelineBubble): from the start to
// the last forward or backward's end, less the busiest worker's forwards and
// backwards, their tensor-parallel collectives included (the collectives in
// their path: activations and their gradients, but the stage-to-stage "p2p").
double Engine::pipelineBubble() const {
  std::vector<double> busy(static_cast<size_t>(k_), 0.0);
  double span = 0;
  std::vector<std::pair<double, double>> inPath(plan_.collectives.size(), {-1, -1});
  for (size_t t = 0; t < plan_.tasks.size(); ++t) {
    const Task& task = plan_.tasks[t];
    if (task.kind == TaskKind::kCompute) {
      busy[static_cast<size_t>(task.worker)] += end_[t] - start_[t];
      span = std::max(span, end_[t]);
    } else if (task.collective >= 0) {
      const auto& c = plan_.collectives[static_cast<size_t>(task.collective)];
      if (c.algorithm == "p2p" ||
          (c.buffer != BufferKind::kActivations && c.buffer != BufferKind::kActivationGradients))
        continue;
      auto& [from, to] = inPath[static_cast<size_t>(task.collective)];
      from = from < 0 ? start_[t] : std::min(from, start_[t]);
      to = std::max(to, end_[t]);
    }
  }
  for (size_t c = 0; c < inPath.size(); ++c) {
    const auto [from, to] = inPath[c];
    if (from < 0)
      continue;
    const Task& first = plan_.tasks[plan_.collectives[c].firstTask];
    if (first.pattern == PatternKind::kPairs) {
      for (const auto& f : plan_.storedFlows(first))
        busy[static_cast<size_t>(f.src)] += to - from;
    } else {
      for (auto& b : busy)
        b += to - from;
    }
  }
  return std::max(0.0, span - *std::max_element(busy.begin(), busy.end()));
}

void Engine::countBytes(const Task& task) {
  const double b = task.bytes.value();
  const double k = k_;
  switch (task.pattern) {
    case PatternKind::kRing:
      allSent_ += b;
      allReceived_ += b;
      break;
    case PatternKind::kAllToAll:
      allSent_ += (k - 1) * b;
      allReceived_ += (k - 1) * b;
      break;
    case PatternKind::kGather:
      allSent_ += b;
      sent_[static_cast<size_t>(task.root)] -= b;
      received_[static_cast<size_t>(task.root)] += (k - 1) * b;
      break;
    case PatternKind::kScatter:
      allReceived_ += b;
      received_[static_cast<size_t>(task.root)] -= b;
      sent_[static_cast<size_t>(task.root)] += (k - 1) * b;
      break;
    case PatternKind::kPairs:
      for (const auto& f : plan_.storedFlows(task)) {
        sent_[static_cast<size_t>(f.src)] += b;
        received_[static_cast<size_t>(f.dst)] += b;
      }
      break;
  }
}

// Records the task's interval as communication time of the workers taking
// part (every worker for patterned steps, except a reduce into one root),
// and the trace slices.
void Engine::noteCommunication(const Task& task, uint32_t t, bool transfer) {
  const std::pair<double, double> span{start_[t], end_[t]};
  const bool rootOnly = !transfer && (task.pattern == PatternKind::kGather);
  if (rootOnly) {
    addInterval(ownComm_[static_cast<size_t>(task.root)], span);
  } else if (task.pattern != PatternKind::kPairs) {
    allComm_.push_back(span);
  } else {
    ++workerStampNow_;
    for (const auto& f : plan_.storedFlows(task))
      for (int w : {f.src, f.dst})
        if ((transfer || w == f.dst) && workerStamp_[static_cast<size_t>(w)] != workerStampNow_) {
          workerStamp_[static_cast<size_t>(w)] = workerStampNow_;
          addInterval(ownComm_[static_cast<size_t>(w)], span);
        }
  }
  if (!opt_.timeline)
    return;
  auto recorded = [&](int w) { return recordWorker_[static_cast<size_t>(w)] != 0; };
  if (transfer) {
    for (const auto& f : plan_.flowsOf(task)) {
      if (recorded(f.src))
        slices_.push_back({t, f.src, Track::kSend, f.dst, start_[t], end_[t]});
      if (recorded(f.dst))
        slices_.push_back({t, f.dst, Track::kReceive, f.src, start_[t], end_[t]});
    }
  } else if (rootOnly) {
    if (recorded(task.root))
      slices_.push_back({t, task.root, Track::kReduce, -1, start_[t], end_[t]});
  } else {
    ++workerStampNow_;
    for (const auto& f : plan_.flowsOf(task))
      if (workerStamp_[static_cast<size_t>(f.dst)] != workerStampNow_) {
        workerStamp_[static_cast<size_t>(f.dst)] = workerStampNow_;
        if (recorded(f.dst))
          slices_.push_back({t, f.dst, Track::kReduce, -1, start_[t], end_[t]});
      }
  }
}

// Which workers and channels the timeline records; reserves the slices of
// a full timeline (tens of millions at K = 1024: growing the vector would
// copy them several times over).
void Engine::selectTimeline(int channels) {
  // Workers only: a ps plan's dedicated servers are not traced (their
  // links are).
  recordWorker_.assign(static_cast<size_t>(ranks_), 0);
  for (int w = 0; w < k_; ++w)
    recordWorker_[static_cast<size_t>(w)] = opt_.timelineRanks.empty() ? 1 : 0;
  for (int r : opt_.timelineRanks) {
    if (r < 0 || r >= k_)
      throw OptionError("--trace-ranks",
                        fmt::format("rank {} is out of range: the step has {} workers (ranks "
                                    "0-{})",
                                    r, k_, k_ - 1));
    recordWorker_[static_cast<size_t>(r)] = 1;
  }
  recordChannel_.assign(static_cast<size_t>(channels), opt_.timelineRanks.empty() ? 1 : 0);
  if (!opt_.timelineRanks.empty()) {
    for (int c = 0; c < channels; ++c) {
      const LinkUsers u = topo_.linkUsers(c / 2);
      for (int w = u.first + u.lane; w <= u.last; w += std::max(1, u.lanes))
        if (recordWorker_[static_cast<size_t>(w)]) {
          recordChannel_[static_cast<size_t>(c)] = 1;
          break;
        }
    }
    return;
  }
  size_t slices = 0;
  for (const auto& task : plan_.tasks)
    slices += task.kind == TaskKind::kTransfer ? 2 * plan_.flowCountOf(task)
              : task.kind == TaskKind::kReduce ? plan_.flowCountOf(task) + 1
                                               : 1;
  slices_.reserve(slices);
}

Result Engine::assemble() {
  Result r;
  r.events = q_.popped();
  r.taskStart = start_;
  r.taskEnd = end_;
  double makespan = 0;
  for (double e : end_)
    makespan = std::max(makespan, e);
  // A ps plan's steps run back to back: the step is their steady period
  // (psPeriod, on the ends of each step's compute), the figures per worker
  // those of the period that ends with the last step's compute.
  const int n = plan_.iterations;
  std::vector<double> computeEnd(static_cast<size_t>(n), 0), allEnd(static_cast<size_t>(n), 0);
  for (size_t t = 0; t < plan_.tasks.size(); ++t) {
    const auto i = static_cast<size_t>(plan_.tasks[t].iteration);
    allEnd[i] = std::max(allEnd[i], end_[t]);
    if (onComputeLane(plan_.tasks[t]))
      computeEnd[i] = std::max(computeEnd[i], end_[t]);
  }
  const double step = n > 1 ? psPeriod(computeEnd) : makespan;
  const double from = n > 1 ? computeEnd[static_cast<size_t>(n - 1)] - step : 0.0;
  const auto& sc = plan_.scenario;
  StepEstimate& est = r.estimate;
  est.engine = "sim";
  est.network = net_.name;
  est.cluster = cluster_.name;
  est.scenario = sc;
  est.step = Seconds(step);
  est.firstStep = Seconds(n > 1 ? allEnd[0] : makespan);
  est.steadySteps = n;
  est.singleWorkerStep = estimate(net_, cluster_, singleWorkerScenario(sc)).step;
  if (usesShardedStep(sc.options))
    est.placement = describePlacement(topo_, sc);
  // dp x microbatches x b per step (strategy.h, examplesPerStep).
  const double examples = examplesPerStep(sc);
  est.throughput = step > 0 ? examples / step : 0;
  est.speedup = est.throughput / (sc.batchPerWorker / est.singleWorkerStep.value());
  est.efficiency = est.speedup / k_;
  setUtilisation(est, net_, &cluster_);

  // The last step's compute phases per worker.
  std::vector<PhaseTimes> lastPhase;
  if (n > 1) {
    lastPhase.resize(static_cast<size_t>(k_));
    for (size_t t = 0; t < plan_.tasks.size(); ++t) {
      const Task& task = plan_.tasks[t];
      if (task.iteration != n - 1 || !onComputeLane(task))
        continue;
      auto& p = lastPhase[static_cast<size_t>(task.worker)];
      const Seconds d(end_[t] - start_[t]);
      (task.kind == TaskKind::kUpdate  ? p.update
       : task.phase == Phase::kFwd     ? p.fwd
       : task.phase == Phase::kBwdData ? p.bwdData
                                       : p.bwdWeights) += d;
    }
  }
  const double perStep = 1.0 / n;
  const Intervals all = merged(allComm_);
  const MemoryUse memRoot = estimateMemory(net_, cluster_, sc, 0);
  const MemoryUse memOther = k_ > 1 ? estimateMemory(net_, cluster_, sc, 1) : memRoot;
  // A pipeline's stages hold different layers: worker w is on stage
  // RankLayout::stage(w).
  const bool piped = usesPipeline(sc.options);
  std::vector<MemoryUse> memStage;
  if (piped)
    for (int s = 0; s < sc.options.pp; ++s)
      memStage.push_back(estimateMemory(net_, cluster_, sc, rankLayoutOf(sc).rank(0, s, 0)));
  est.workers.resize(static_cast<size_t>(k_));
  bool haveShared = false;
  double sharedC = 0, sharedHidden = 0;
  for (int w = 0; w < k_; ++w) {
    const auto wi = static_cast<size_t>(w);
    auto& we = est.workers[wi];
    we.rank = w;
    // A representative plan's worker 0 computes for every worker (a
    // pipeline's: each stage's first rank for the stage's).
    const auto ci = static_cast<size_t>(plan_.computesFor(w));
    we.compute = n > 1 ? lastPhase[ci] : phase_[ci];
    // Workers with no communication of their own and worker 0's compute
    // (a representative plan) share one answer, computed once.
    const bool shared = plan_.representative && ci == 0 && ownComm_[wi].empty();
    double c = sharedC, hidden = sharedHidden;
    if (!shared || !haveShared) {
      Intervals comm = ownComm_[wi].empty() ? all : merged([&] {
        Intervals v = all;
        v.insert(v.end(), ownComm_[wi].begin(), ownComm_[wi].end());
        return v;
      }());
      Intervals compute = computeIntervals_[ci];  // sorted: one stream
      if (n > 1) {
        comm = clipped(comm, from, from + step);
        compute = clipped(compute, from, from + step);
      }
      c = length(comm);
      hidden = overlapSeconds(comm, compute);
      if (shared) {
        haveShared = true;
        sharedC = c;
        sharedHidden = hidden;
      }
    }
    we.communication = Seconds(c);
    we.exposedCommunication = Seconds(c - hidden);
    we.idle = max(Seconds(0), est.step - we.compute.total() - we.exposedCommunication);
    we.sent = Bytes((allSent_ + sent_[wi]) * perStep);
    we.received = Bytes((allReceived_ + received_[wi]) * perStep);
    we.memory = piped    ? memStage[static_cast<size_t>(rankLayoutOf(sc).stage(w))]
                : w == 0 ? memRoot
                         : memOther;
    if (we.memory.total() > cluster_.device.memoryCapacity)
      est.fitsInMemory = false;
  }

  if (piped) {
    est.pipeline = estimate(net_, cluster_, sc).pipeline;
    est.pipelineBubble = Seconds(pipelineBubble());
  }

  // Transfers that ran alone: their channels' bytes and busy time.
  for (const auto& [load, use] : soloUse_)
    for (const auto& [c, flows] : load->channels) {
      bytesOn_[static_cast<size_t>(c)] += double(flows) * use.first;
      busy_[static_cast<size_t>(c)] += use.second;
    }
  // Links, busiest first.
  r.timeline.channelNames.resize(beta_.size());
  r.timeline.channelUsers.resize(beta_.size());
  for (size_t c = 0; c < beta_.size(); ++c) {
    const int link = static_cast<int>(c / 2);
    r.timeline.channelNames[c] = topo_.describeLink(link, c % 2 == 0);
    r.timeline.channelUsers[c] = topo_.linkUsers(link);
    if (bytesOn_[c] <= 0)
      continue;
    LinkUse u;
    u.name = r.timeline.channelNames[c];
    u.bandwidth = BytesPerSecond(beta_[c]);
    // Per step (a ps plan's steps share them alike); utilisation over
    // the whole simulated time.
    u.bytes = Bytes(bytesOn_[c] * perStep);
    u.busy = Seconds(busy_[c] * perStep);
    u.utilisation = makespan > 0 ? bytesOn_[c] / (beta_[c] * makespan) : 0;
    r.links.push_back(u);
  }
  std::stable_sort(r.links.begin(), r.links.end(), [](const LinkUse& a, const LinkUse& b) {
    return a.utilisation > b.utilisation;
  });
  est.computeSource = costs_.describe();
  est.bottleneck = r.links.empty() ? "none" : r.links.front().name;
  est.allreduce = plan_.allreduce;
  r.timeline.slices = std::move(slices_);
  r.timeline.linkSlices = std::move(linkSlices_);
  return r;
}

}  // namespace strata::sim::detail

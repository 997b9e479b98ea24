// The simulator's engine: construction, the event loop, and the life of a
// task from ready to finished (engine.h).
#include "engine.h"

#include <fmt/format.h>

#include <algorithm>

#include "strata/model/error.h"
#include "strata/model/limits.h"
#include "strata/model/quantity_text.h"

namespace strata::sim::detail {

Engine::Engine(const Plan& plan, const Network& net, const Cluster& cluster, const Options& options,
               int64_t maxEvents)
    : maxEvents_(maxEvents),
      plan_(plan),
      net_(net),
      cluster_(cluster),
      opt_(options),
      topo_(cluster, plan.scenario.workers + plan.servers),
      ranks_(plan.scenario.workers + plan.servers),
      k_(plan.scenario.workers),
      costs_(net, cluster, plan.scenario.options.element,
             workersPerNode(cluster, plan.scenario.workers), plan.scenario.options.optimizer,
             plan.scenario.options.threadsPerWorker, plan.scenario.batchPerWorker),
      gamma_(1.0 / cluster.device.reduceBandwidth.value()),
      lanes_(
          overlapSpeeds(cluster, Topology(cluster, plan.scenario.workers), plan.scenario.workers)) {
  cpuShared_ = lanes_.shared();
  handoff_ = cluster.device.handoffFor(workersPerNode(cluster, plan.scenario.workers)).value();
  commActive_.assign(static_cast<size_t>(ranks_), 0);
  cpuCommActive_.assign(static_cast<size_t>(ranks_), 0);
  running_.assign(static_cast<size_t>(ranks_), 0);
  computeLeft_.assign(static_cast<size_t>(ranks_), 0.0);
  computeRate_.assign(static_cast<size_t>(ranks_), 1.0);
  rateSince_.assign(static_cast<size_t>(ranks_), 0.0);
  computeVersion_.assign(plan.tasks.size(), 0);
  commOn_.resize(static_cast<size_t>(ranks_));
  commWorkersOf_.resize(plan.tasks.size());
  commLeft_.assign(plan.tasks.size(), 0.0);
  commRate_.assign(plan.tasks.size(), 1.0);
  commSince_.assign(plan.tasks.size(), 0.0);
  const size_t n = plan.tasks.size();
  depsLeft_.resize(n);
  start_.assign(n, -1.0);
  end_.assign(n, -1.0);
  cpuFactor_.assign(n, 1.0);
  computeAhead_.assign(static_cast<size_t>(ranks_), 0.0);
  collectiveSpeed_.assign(plan.collectives.size(), -1.0);
  if (cpuShared_ && !lanes_.commByDuty.empty())
    for (size_t t = 0; t < n; ++t)
      if (plan.tasks[t].kind == TaskKind::kCompute)
        computeAhead_[static_cast<size_t>(plan.tasks[t].worker)] +=
            computeTime(plan.tasks[t], static_cast<uint32_t>(t));
  // Dependents in CSR form.
  std::vector<uint32_t> counts(n + 1, 0);
  for (size_t t = 0; t < n; ++t) {
    depsLeft_[t] = plan.tasks[t].depCount;
    for (int d : plan.depsOf(plan.tasks[t]))
      ++counts[static_cast<size_t>(d) + 1];
  }
  for (size_t i = 1; i <= n; ++i)
    counts[i] += counts[i - 1];
  dependentsBegin_ = counts;
  dependents_.resize(plan.deps.size());
  for (size_t t = 0; t < n; ++t)
    for (int d : plan.depsOf(plan.tasks[t]))
      dependents_[counts[static_cast<size_t>(d)]++] = static_cast<uint32_t>(t);

  parked_.resize(plan.jobs.size());
  requested_.assign(plan.jobs.size(), 0);
  jobTasksLeft_.resize(plan.jobs.size());
  for (size_t j = 0; j < plan.jobs.size(); ++j)
    jobTasksLeft_[j] = plan.jobs[j].lastTask - plan.jobs[j].firstTask + 1;
  workerQueue_.resize(static_cast<size_t>(ranks_));
  workerBusy_.assign(static_cast<size_t>(ranks_), 0);
  const int channels = 2 * topo_.linkCount();
  beta_.resize(static_cast<size_t>(channels));
  for (int l = 0; l < topo_.linkCount(); ++l) {
    beta_[static_cast<size_t>(2 * l)] = beta_[static_cast<size_t>(2 * l + 1)] =
        topo_.linkSpec(l).bandwidth.value();
  }
  flowsOn_.assign(static_cast<size_t>(channels), 0);
  for (int l = 0; l < topo_.linkCount(); ++l)
    hasTables_ = hasTables_ || topo_.linkSpec(l).pricesBySize();
  tasksOn_.resize(static_cast<size_t>(channels));
  activeOn_.assign(static_cast<size_t>(channels), 0);
  busySince_.assign(static_cast<size_t>(channels), 0);
  busy_.assign(static_cast<size_t>(channels), 0);
  bytesOn_.assign(static_cast<size_t>(channels), 0);
  scratch_.assign(static_cast<size_t>(channels), 0);
  stamp_.assign(n, 0);
  activeIndex_.assign(n, -1);

  sent_.assign(static_cast<size_t>(ranks_), 0);
  received_.assign(static_cast<size_t>(ranks_), 0);
  phase_.resize(static_cast<size_t>(ranks_));
  computeIntervals_.resize(static_cast<size_t>(ranks_));
  ownComm_.resize(static_cast<size_t>(ranks_));
  workerStamp_.assign(static_cast<size_t>(ranks_), 0);
  if (opt_.timeline)
    selectTimeline(channels);
}

Result Engine::run() {
  for (size_t t = 0; t < plan_.tasks.size(); ++t)
    if (depsLeft_[t] == 0)
      makeReady(static_cast<uint32_t>(t));
  while (!q_.empty()) {
    // The plan was sized before starting; this bounds the rest (rate
    // changes re-schedule transfers), so no input runs without end.
    if (q_.popped() >= static_cast<uint64_t>(maxEvents_))
      throw OptionError(
          "--workers",
          fmt::format("the simulation of {} ({}, {} workers) passed the limit of {} events at "
                      "simulated time {}; use fewer workers, or raise the limit with {} N ({} "
                      "lifts every limit)",
                      plan_.network, toString(plan_.scenario.strategy), k_, maxEvents_,
                      formatSeconds(Seconds(q_.now())), kMaxEventsOption, kAllowLargeOption));
    const Event e = q_.pop();
    switch (e.kind) {
      case EventKind::kTaskDone:
        // A compute task re-rated since (shared cores) carries an old version.
        if (e.version == computeVersion_[e.task])
          finish(e.task);
        break;
      case EventKind::kActivate:
        activate(e.task);
        break;
      case EventKind::kReady:
        makeReady(e.task);
        break;
      case EventKind::kTransferDone:
        // Stale completions (the rate changed since) carry an old version.
        if (end_[e.task] < 0 &&
            active_[static_cast<size_t>(activeIndex_[e.task])].version == e.version)
          finish(e.task);
        break;
    }
    if (q_.empty() || q_.nextTime() > q_.now())
      recomputeRates();
  }
  for (size_t t = 0; t < plan_.tasks.size(); ++t)
    if (end_[t] < 0)
      throw InvariantError(fmt::format("simulation stalled: task {} ({}) never ran", t,
                                       toString(plan_.tasks[t].kind)));
  return assemble();
}

// ---- task lifecycle --------------------------------------------------------
void Engine::makeReady(uint32_t t) {
  const Task& task = plan_.tasks[t];
  const double now = q_.now();
  if (task.job >= 0 && holder_ != task.job) {
    // A ps job's task waits until the server's thread runs its job.
    const auto j = static_cast<size_t>(task.job);
    parked_[j].push_back(t);
    if (!requested_[j]) {
      requested_[j] = 1;
      waiting_.push_back({plan_.jobs[j].priority, requests_++, task.job});
      grantNext();
    }
    return;
  }
  if (task.kind == TaskKind::kUpdate && task.server) {
    // A ps server's shard update, on its communication thread.
    start_[t] = now;
    addComm(task.worker, 1, true);
    commLeft_[t] = costs_.update(task.params).value();
    if (cpuShared_) {
      commWorkersOf_[t] = {task.worker};
      commOn_[static_cast<size_t>(task.worker)].push_back(t);
    }
    scheduleTimed(t, commRateOf(t));
    return;
  }
  switch (task.kind) {
    case TaskKind::kCompute:
    case TaskKind::kUpdate:
      workerQueue_[static_cast<size_t>(task.worker)].push(t);
      tryStart(task.worker);
      break;
    case TaskKind::kReduce: {
      start_[t] = now;
      commLeft_[t] = gamma_ * task.bytes.value() * task.inputs;
      if (cpuShared_)
        decideCollectiveSpeed(task, startComm(task, t));
      scheduleTimed(t, commRateOf(t));
      break;
    }
    case TaskKind::kTransfer: {
      start_[t] = now;
      if (cpuShared_) {
        decideCollectiveSpeed(task, startComm(task, t));
        cpuFactor_[t] = commRateOf(t);
      }
      if (plan_.flowCountOf(task) == 0) {
        q_.push(now, EventKind::kTaskDone, t);
        break;
      }
      const Load& load = loadOf(task);
      const bool hidden = task.follows && load.latencyPerStep;
      q_.push(now + (hidden ? 0.0 : load.latency.value()), EventKind::kActivate, t);
      break;
    }
  }
}

// The server's thread is free: it runs the waiting job with the biggest
// priority, ties by request order (last-ready: the latest request).
void Engine::grantNext() {
  if (holder_ >= 0 || waiting_.empty())
    return;
  const bool lifo = plan_.scenario.options.psPriority == PsPriority::kLastReady;
  size_t best = 0;
  for (size_t i = 1; i < waiting_.size(); ++i) {
    const auto& a = waiting_[i];
    const auto& b = waiting_[best];
    if (a.priority > b.priority ||
        (a.priority == b.priority && (lifo ? a.seq > b.seq : a.seq < b.seq)))
      best = i;
  }
  holder_ = waiting_[best].job;
  waiting_.erase(waiting_.begin() + static_cast<std::ptrdiff_t>(best));
  std::vector<uint32_t> parked;
  parked.swap(parked_[static_cast<size_t>(holder_)]);
  for (uint32_t p : parked)
    makeReady(p);
}

void Engine::tryStart(int worker) {
  auto& queue = workerQueue_[static_cast<size_t>(worker)];
  if (workerBusy_[static_cast<size_t>(worker)] || queue.empty())
    return;
  const uint32_t t = queue.top();
  queue.pop();
  const auto w = static_cast<size_t>(worker);
  workerBusy_[w] = 1;
  start_[t] = q_.now();
  running_[w] = t;
  computeLeft_[w] = computeTime(plan_.tasks[t], t);
  if (plan_.tasks[t].kind == TaskKind::kCompute)
    computeAhead_[w] -= computeLeft_[w];
  computeRate_[w] = computeRateOf(w);
  rateSince_[w] = q_.now();
  q_.push(q_.now() + computeLeft_[w] / computeRate_[w], EventKind::kTaskDone, t,
          computeVersion_[t]);
  reRateComm(w);
}

void Engine::finish(uint32_t t) {
  const Task& task = plan_.tasks[t];
  end_[t] = q_.now();
  switch (task.kind) {
    case TaskKind::kUpdate:
      if (task.server) {
        // A ps server's update: communication-thread time of its worker.
        const auto w = static_cast<size_t>(task.worker);
        addComm(task.worker, -1, true);
        if (cpuShared_)
          endComm(task, t);
        ownComm_[w].push_back({start_[t], end_[t]});
        if (opt_.timeline && recordWorker_[w])
          slices_.push_back({t, task.worker, Track::kReduce, -1, start_[t], end_[t]});
        break;
      }
      [[fallthrough]];
    case TaskKind::kCompute: {
      const auto w = static_cast<size_t>(task.worker);
      const double d = end_[t] - start_[t];
      auto& p = phase_[w];
      if (task.kind == TaskKind::kUpdate) {
        p.update += Seconds(d);
      } else if (task.phase == Phase::kFwd) {
        p.fwd += Seconds(d);
      } else if (task.phase == Phase::kBwdData) {
        p.bwdData += Seconds(d);
      } else {
        p.bwdWeights += Seconds(d);
      }
      computeIntervals_[w].push_back({start_[t], end_[t]});
      if (opt_.timeline && recordWorker_[w])
        slices_.push_back({t, task.worker, Track::kCompute, -1, start_[t], end_[t]});
      workerBusy_[w] = 0;
      tryStart(task.worker);
      reRateComm(w);
      break;
    }
    case TaskKind::kReduce:
      if (cpuShared_)
        endComm(task, t);
      noteCommunication(task, t, false);
      break;
    case TaskKind::kTransfer:
      if (cpuShared_)
        endComm(task, t);
      if (activeIndex_[t] >= 0)
        leave(t);
      countBytes(task);
      noteCommunication(task, t, true);
      break;
  }
  if (task.job >= 0 && --jobTasksLeft_[static_cast<size_t>(task.job)] == 0) {
    holder_ = -1;
    grantNext();
  }
  // A task released by one on the other lane (compute <-> communication)
  // starts a lane hand-off later: its lane was asleep waiting for it.
  const bool computeLane = onComputeLane(task);
  for (uint32_t i = dependentsBegin_[t]; i < dependentsBegin_[t + 1]; ++i) {
    const uint32_t d = dependents_[i];
    if (--depsLeft_[d] != 0)
      continue;
    const bool dCompute = onComputeLane(plan_.tasks[d]);
    if (handoff_ > 0 && dCompute != computeLane)
      q_.push(q_.now() + handoff_, EventKind::kReady, d);
    else
      makeReady(d);
  }
}

}  // namespace strata::sim::detail

#include "strata/sim/simulator.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <map>
#include <queue>
#include <set>
#include <tuple>

#include "strata/model/compute_cost.h"
#include "strata/model/error.h"
#include "strata/model/estimate.h"
#include "strata/model/limits.h"
#include "strata/model/quantity_text.h"
#include "strata/model/topology.h"

namespace strata::sim {

namespace {

// ---- event queue -------------------------------------------------------------
// A binary heap ordered by (time, insertion number): events at the same time
// come out in the order they were scheduled, so a run is reproducible byte for
// byte. The clock never goes back (asserted).

enum class EventKind : uint32_t { kTaskDone, kActivate, kTransferDone, kReady };

struct Event {
  double time;
  uint64_t seq;
  EventKind kind;
  uint32_t task;
  uint32_t version;
};

struct Later {
  bool operator()(const Event& a, const Event& b) const {
    return a.time > b.time || (a.time == b.time && a.seq > b.seq);
  }
};

class EventQueue {
 public:
  void push(double time, EventKind kind, uint32_t task, uint32_t version = 0) {
    STRATA_ENFORCE_OP(time, >=, now_);
    heap_.push(Event{time, seq_++, kind, task, version});
  }
  Event pop() {
    Event e = heap_.top();
    heap_.pop();
    STRATA_ENFORCE_OP(e.time, >=, now_);
    now_ = e.time;
    ++popped_;
    return e;
  }
  bool empty() const { return heap_.empty(); }
  double nextTime() const { return heap_.top().time; }
  double now() const { return now_; }
  uint64_t popped() const { return popped_; }

 private:
  std::priority_queue<Event, std::vector<Event>, Later> heap_;
  uint64_t seq_ = 0;
  uint64_t popped_ = 0;
  double now_ = 0;
};

// ---- channel loads of a transfer pattern ------------------------------------

struct Load {
  std::vector<std::pair<int, int>> channels;  // (channel, flows), sorted by channel
  Seconds latency;
  double secondsPerByte = 0;    // alone on the network
  double exchangeShare = 0;     // of pairs sending to each other (PatternCost::exchangeShare)
  bool latencyPerStep = false;  // the latency's level pays it once per step (Task::follows)
};

// Uniform in [-1, 1] from (seed, task): splitmix64.
double unitNoise(uint64_t seed, uint64_t task) {
  uint64_t z = seed * 0x9E3779B97F4A7C15ull + task + 0x632BE59BD9B4E5Bull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return double(z >> 11) / double(1ull << 53) * 2.0 - 1.0;
}

class Engine {
 public:
  Engine(const Plan& plan, const Network& net, const Cluster& cluster, const Options& options,
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
               plan.scenario.options.threadsPerWorker),
        gamma_(1.0 / cluster.device.reduceBandwidth.value()),
        lanes_(overlapSpeeds(cluster, Topology(cluster, plan.scenario.workers),
                             plan.scenario.workers)) {
    cpuShared_ = lanes_.shared();
    handoff_ = cluster.device.handoffFor(workersPerNode(cluster, plan.scenario.workers)).value();
    commActive_.assign(static_cast<size_t>(ranks_), 0);
    cpuCommActive_.assign(static_cast<size_t>(ranks_), 0);
    running_.assign(static_cast<size_t>(ranks_), 0);
    computeLeft_.assign(static_cast<size_t>(ranks_), 0.0);
    computeRate_.assign(static_cast<size_t>(ranks_), 1.0);
    rateSince_.assign(static_cast<size_t>(ranks_), 0.0);
    computeVersion_.assign(plan.tasks.size(), 0);
    const size_t n = plan.tasks.size();
    depsLeft_.resize(n);
    start_.assign(n, -1.0);
    end_.assign(n, -1.0);
    cpuFactor_.assign(n, 1.0);
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

  Result run() {
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

 private:
  // ---- task lifecycle --------------------------------------------------------
  void makeReady(uint32_t t) {
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
    if (task.kind == TaskKind::kUpdate && task.part >= 0) {
      // A ps server's shard update, on its communication thread.
      start_[t] = now;
      const auto w = static_cast<size_t>(task.worker);
      addComm(task.worker, 1, true);
      const double slow = cpuShared_ && workerBusy_[w] ? lanes_.busyComm : 1.0;
      q_.push(now + costs_.update(task.params).value() / slow, EventKind::kTaskDone, t);
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
        const double slow = cpuShared_ && startComm(task) ? lanes_.comm : 1.0;
        q_.push(now + gamma_ * task.bytes.value() * task.inputs / slow, EventKind::kTaskDone, t);
        break;
      }
      case TaskKind::kTransfer: {
        start_[t] = now;
        if (cpuShared_)
          cpuFactor_[t] = startComm(task) ? lanes_.comm : 1.0;
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
  void grantNext() {
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

  void tryStart(int worker) {
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
    computeRate_[w] = computeRateOf(w);
    rateSince_[w] = q_.now();
    q_.push(q_.now() + computeLeft_[w] / computeRate_[w], EventKind::kTaskDone, t,
            computeVersion_[t]);
  }

  // Communication on `worker`'s cores starts (+1) or ends (-1). Where the
  // lanes share cores, the compute task running there changes speed when
  // the first one starts or the last one ends: what it has left runs at the
  // new speed from now (the model's sharedLanes, fluid).
  // A ps server's update (`cpu`) is CPU work whatever the link: beside it
  // compute runs at the speed as measured (LaneSpeeds::busyCompute).
  void addComm(int worker, int delta, bool cpu = false) {
    const auto w = static_cast<size_t>(worker);
    const double before = computeRateOf(w);
    commActive_[w] += delta;
    if (cpu)
      cpuCommActive_[w] += delta;
    const double after = computeRateOf(w);
    if (!cpuShared_ || before == after || !workerBusy_[w])
      return;
    const uint32_t t = running_[w];
    const double now = q_.now();
    computeLeft_[w] = std::max(0.0, computeLeft_[w] - (now - rateSince_[w]) * computeRate_[w]);
    computeRate_[w] = after;
    rateSince_[w] = now;
    q_.push(now + computeLeft_[w] / computeRate_[w], EventKind::kTaskDone, t, ++computeVersion_[t]);
  }

  // The speed of a compute task on worker w with what communication runs there.
  double computeRateOf(size_t w) const {
    if (!cpuShared_)
      return 1.0;
    if (cpuCommActive_[w] > 0)
      return lanes_.busyCompute;
    return commActive_[w] > 0 ? lanes_.compute : 1.0;
  }

  double computeTime(const Task& task, uint32_t id) const {
    double seconds = 0;
    if (task.kind == TaskKind::kCompute) {
      seconds = costs_.layer(task.layer, task.phase, task.examples, task.fraction).value();
    } else {
      seconds = costs_.update(task.params).value();
    }
    // Alone: communication on the worker's cores slows it while it runs
    // (tryStart, addComm).
    const auto w = static_cast<size_t>(task.worker);
    if (w < opt_.slowdown.size())
      seconds *= opt_.slowdown[w];
    if (opt_.jitter > 0)
      seconds *= 1.0 + opt_.jitter * unitNoise(opt_.seed, id);
    return seconds;
  }

  void finish(uint32_t t) {
    const Task& task = plan_.tasks[t];
    end_[t] = q_.now();
    switch (task.kind) {
      case TaskKind::kUpdate:
        if (task.part >= 0) {
          // A ps server's update: communication-thread time of its worker.
          const auto w = static_cast<size_t>(task.worker);
          addComm(task.worker, -1, true);
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
        break;
      }
      case TaskKind::kReduce:
        if (cpuShared_)
          endComm(task);
        noteCommunication(task, t, false);
        break;
      case TaskKind::kTransfer:
        if (cpuShared_)
          endComm(task);
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

  // ---- network ---------------------------------------------------------------
  int channelOf(int link, bool up) const {
    return topo_.linkSpec(link).fullDuplex ? 2 * link + (up ? 0 : 1) : 2 * link;
  }

  const Load& loadOf(const Task& task) {
    // Patterned steps share a load per (pattern, root); stored flows get their own.
    const bool patterned = task.pattern != PatternKind::kPairs;
    // The naive reducer's root sends summed segment j-1 to a worker while it
    // receives segment j from it (one exchange per pair): its gathers and
    // broadcasts are priced as exchanges, as in the model, all but segment
    // 0's gather and the last segment's broadcast, which go one way alone.
    const auto* owner =
        task.collective >= 0 ? &plan_.collectives[static_cast<size_t>(task.collective)] : nullptr;
    const bool naivePair =
        owner && owner->algorithm == toString(AllreduceAlgorithm::kNaive) &&
        ((task.pattern == PatternKind::kGather && task.segment > 0) ||
         (task.pattern == PatternKind::kScatter && task.segment < owner->segments - 1));
    const LoadKey key{static_cast<int>(task.pattern),
                      patterned ? task.root : -1 - long(task.flowBegin), naivePair,
                      task.pattern == PatternKind::kRing ? task.ringSpan : 0,
                      task.pattern == PatternKind::kRing ? task.ringStride : 0};
    auto it = loads_.find(key);
    if (it != loads_.end())
      return it->second;
    Load load;
    std::vector<int> touched;
    // As the model's patterns: an all-to-all in K-1 shifted rounds.
    if (naivePair) {
      load.exchangeShare = 1;
    } else if (task.pattern == PatternKind::kAllToAll) {
      load.exchangeShare = allToAllExchangeShare(k_);
    } else {
      std::vector<Flow> pairs;
      for (const auto& f : plan_.flowsOf(task))
        pairs.push_back({f.src, f.dst});
      load.exchangeShare = allExchanges(pairs) ? 1 : 0;
    }
    for (const auto& f : plan_.flowsOf(task)) {
      const int meet = topo_.meetLevel(f.src, f.dst);
      if (meet < 0)
        continue;
      raiseLatency(load.latency, load.latencyPerStep, topo_.linkSpec(topo_.linkIndex(meet, f.src)));
      for (int l = 0; l <= meet; ++l) {
        for (const auto& [worker, up] : {std::pair{f.src, true}, std::pair{f.dst, false}}) {
          const int c = channelOf(topo_.linkIndex(l, worker), up);
          if (scratch_[static_cast<size_t>(c)]++ == 0)
            touched.push_back(c);
        }
      }
    }
    // Sorted by channel: a scan of every channel beats sorting when the
    // pattern touches a good part of them (a step of every worker at 10^5).
    if (touched.size() * 16 > scratch_.size()) {
      touched.clear();
      for (size_t c = 0; c < scratch_.size(); ++c)
        if (scratch_[c] > 0)
          touched.push_back(static_cast<int>(c));
    } else {
      std::sort(touched.begin(), touched.end());
    }
    for (int c : touched) {
      const int flows = scratch_[static_cast<size_t>(c)];
      load.channels.push_back({c, flows});
      load.secondsPerByte = std::max(load.secondsPerByte, flows / beta_[static_cast<size_t>(c)]);
      scratch_[static_cast<size_t>(c)] = 0;
    }
    return loads_.emplace(key, std::move(load)).first->second;
  }

  struct Active {
    const Load* load;
    double remaining;  // bytes per flow
    double rate;       // bytes per second per flow
    double last;
    uint32_t version;
    std::vector<int> position;  // in tasksOn_ of each channel
    // Alone on the network since it started: its channels are not touched
    // (O(1) instead of O(channels)); it joins them if another transfer starts.
    bool solo = false;
    double activatedAt = 0;
    double bytes = 0;
  };

  // Puts a task's flows on its channels (busy since `since`).
  void join(uint32_t t, Active& a, double since) {
    const Load& load = *a.load;
    a.position.resize(load.channels.size());
    for (size_t i = 0; i < load.channels.size(); ++i) {
      const auto [c, flows] = load.channels[i];
      const auto ci = static_cast<size_t>(c);
      flowsOn_[ci] += flows;
      a.position[i] = static_cast<int>(tasksOn_[ci].size());
      tasksOn_[ci].push_back(t);
      if (activeOn_[ci]++ == 0)
        busySince_[ci] = since;
      bytesOn_[ci] += double(flows) * a.bytes;
      if (opt_.contention)
        markChannel(c);
    }
    a.solo = false;
  }

  // The workers a communication task runs on: the ends of its flows (a
  // reduce: the receivers, who sum). Registers it as running on them and
  // returns whether any of them is computing.
  bool startComm(const Task& task) {
    bool busy = false;
    for (int w : commWorkers(task)) {
      busy = busy || workerBusy_[static_cast<size_t>(w)];
      addComm(w, 1);
    }
    return busy;
  }
  void endComm(const Task& task) {
    for (int w : commWorkers(task))
      addComm(w, -1);
  }
  std::vector<int> commWorkers(const Task& task) const {
    std::vector<char> in(static_cast<size_t>(ranks_), 0);
    for (const auto& f : plan_.flowsOf(task)) {
      if (task.kind == TaskKind::kTransfer)
        in[static_cast<size_t>(f.src)] = 1;
      in[static_cast<size_t>(f.dst)] = 1;
    }
    std::vector<int> out;
    for (int w = 0; w < ranks_; ++w)
      if (in[static_cast<size_t>(w)])
        out.push_back(w);
    return out;
  }

  void activate(uint32_t t) {
    const Task& task = plan_.tasks[t];
    const Load& load = loadOf(task);
    Active a{&load, task.bytes.value(), 0, q_.now(), 0, {}};
    a.activatedAt = q_.now();
    a.bytes = task.bytes.value();
    // The first transfer on an idle network runs solo; a second one makes a
    // solo one join its channels first, so sharing is seen from then on.
    if (soloTask_ >= 0) {
      join(static_cast<uint32_t>(soloTask_), active_[static_cast<size_t>(activeIndex_[soloTask_])],
           active_[static_cast<size_t>(activeIndex_[soloTask_])].activatedAt);
      soloTask_ = -1;
    }
    const bool solo = activeTransfers_ == 0 && !opt_.timeline;
    ++activeTransfers_;
    if (solo) {
      a.solo = true;
      soloTask_ = static_cast<int>(t);
    }
    int slot = static_cast<int>(active_.size());
    if (!freeActive_.empty()) {
      slot = freeActive_.back();
      freeActive_.pop_back();
      active_[static_cast<size_t>(slot)] = std::move(a);
    } else {
      active_.push_back(std::move(a));
    }
    activeIndex_[t] = slot;
    if (!solo)
      join(t, active_[static_cast<size_t>(slot)], q_.now());
    markTask(t);
  }

  void leave(uint32_t t) {
    const auto slot = static_cast<size_t>(activeIndex_[t]);
    Active& a = active_[slot];
    --activeTransfers_;
    if (a.solo) {
      // Alone all along: charge its load's channels in bulk at the end.
      auto& acc = soloUse_[a.load];
      acc.first += a.bytes;
      acc.second += q_.now() - a.activatedAt;
      soloTask_ = -1;
      a.solo = false;
      a.version++;
      freeActive_.push_back(static_cast<int>(slot));
      return;
    }
    leaveChannels(t, a, slot);
  }

  void leaveChannels(uint32_t t, Active& a, size_t slot) {
    for (size_t i = 0; i < a.load->channels.size(); ++i) {
      const auto [c, flows] = a.load->channels[i];
      const auto ci = static_cast<size_t>(c);
      flowsOn_[ci] -= flows;
      // Swap-remove t from the channel's task list.
      auto& list = tasksOn_[ci];
      const int pos = a.position[i];
      const uint32_t moved = list.back();
      list[static_cast<size_t>(pos)] = moved;
      list.pop_back();
      if (moved != t) {
        Active& m = active_[static_cast<size_t>(activeIndex_[moved])];
        const auto& ch = m.load->channels;
        const auto at =
            std::lower_bound(ch.begin(), ch.end(), std::pair{c, 0},
                             [](const auto& x, const auto& y) { return x.first < y.first; });
        m.position[static_cast<size_t>(at - ch.begin())] = pos;
      }
      if (--activeOn_[ci] == 0) {
        busy_[ci] += q_.now() - busySince_[ci];
        if (opt_.timeline && recordChannel_[ci])
          linkSlices_.push_back({c, busySince_[ci], q_.now()});
      }
      if (opt_.contention)
        markChannel(c);
    }
    a.version++;
    freeActive_.push_back(static_cast<int>(slot));
    activeIndex_[t] = static_cast<int>(slot);  // kept for the version check of stale events
  }

  void markChannel(int c) {
    for (uint32_t t : tasksOn_[static_cast<size_t>(c)])
      markTask(t);
  }
  void markTask(uint32_t t) {
    if (stamp_[t] != stampNow_ + 1) {
      stamp_[t] = stampNow_ + 1;
      affected_.push_back(t);
    }
  }

  // New rates for every transfer whose channels changed, and their new ends.
  void recomputeRates() {
    if (affected_.empty())
      return;
    const double now = q_.now();
    for (uint32_t t : affected_) {
      if (end_[t] >= 0)
        continue;  // finished (and left) in this batch
      Active& a = active_[static_cast<size_t>(activeIndex_[t])];
      a.remaining = std::max(0.0, a.remaining - a.rate * (now - a.last));
      a.last = now;
      double perByte = a.load->secondsPerByte;
      const bool shared = opt_.contention && !a.solo;
      if (shared || hasTables_) {
        // Per channel: its flows (all tasks' when shared) over its bandwidth,
        // taken for this task's message size when the link has a table.
        perByte = 0;
        for (const auto& [c, flows] : a.load->channels) {
          const auto ci = static_cast<size_t>(c);
          const double perFlowByte = hasTables_ ? topo_.linkSpec(c / 2).secondsPerByte(
                                                      Bytes(a.bytes), a.load->exchangeShare)
                                                : 1 / beta_[ci];
          perByte = std::max(perByte, (shared ? flowsOn_[ci] : flows) * perFlowByte);
        }
      }
      if (cpuShared_)
        perByte /= cpuFactor_[t];
      a.rate = perByte > 0 ? 1.0 / perByte : 0;
      ++a.version;
      q_.push(perByte > 0 ? now + a.remaining * perByte : now, EventKind::kTransferDone, t,
              a.version);
    }
    affected_.clear();
    ++stampNow_;
  }

  // ---- accounting ------------------------------------------------------------
  void countBytes(const Task& task) {
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
  void noteCommunication(const Task& task, uint32_t t, bool transfer) {
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
  void selectTimeline(int channels) {
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

  // Appends [a, b], merged into the last interval when they overlap: a
  // worker's communication tasks mostly follow one another, so its list
  // stays short at 10^5 workers (merged() still sorts and merges it all).
  static void addInterval(Intervals& v, std::pair<double, double> span) {
    if (!v.empty() && span.first <= v.back().second && span.second >= v.back().first) {
      v.back().first = std::min(v.back().first, span.first);
      v.back().second = std::max(v.back().second, span.second);
      return;
    }
    v.push_back(span);
  }

  static Intervals merged(Intervals v) {
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
  static double length(const Intervals& v) {
    double s = 0;
    for (const auto& iv : v)
      s += iv.second - iv.first;
    return s;
  }

  // The parts of sorted intervals inside [from, to].
  static Intervals clipped(const Intervals& v, double from, double to) {
    Intervals out;
    for (const auto& [a, b] : v)
      if (std::min(b, to) > std::max(a, from))
        out.push_back({std::max(a, from), std::min(b, to)});
    return out;
  }

  Result assemble() {
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
    Scenario single = sc;
    single.workers = 1;
    single.strategy = Strategy::kRing;
    est.singleWorkerStep = estimate(net_, cluster_, single).step;
    const double examples = double(k_) * sc.batchPerWorker;
    est.throughput = step > 0 ? examples / step : 0;
    est.speedup = est.throughput / (sc.batchPerWorker / est.singleWorkerStep.value());
    est.efficiency = est.speedup / k_;

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
    est.workers.resize(static_cast<size_t>(k_));
    bool haveShared = false;
    double sharedC = 0, sharedHidden = 0;
    for (int w = 0; w < k_; ++w) {
      const auto wi = static_cast<size_t>(w);
      auto& we = est.workers[wi];
      we.rank = w;
      // A representative plan's worker 0 computes for every worker.
      const auto ci = plan_.representative ? size_t{0} : wi;
      we.compute = n > 1 ? lastPhase[ci] : phase_[ci];
      // Workers with no communication of their own and worker 0's compute
      // (a representative plan) share one answer, computed once.
      const bool shared = plan_.representative && ownComm_[wi].empty();
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
      we.memory = w == 0 ? memRoot : memOther;
      if (we.memory.total() > cluster_.device.memoryCapacity)
        est.fitsInMemory = false;
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

  int64_t maxEvents_;
  const Plan& plan_;
  const Network& net_;
  const Cluster& cluster_;
  Options opt_;
  Topology topo_;
  int ranks_;  // workers, then a ps plan's dedicated servers
  int k_;
  ComputeCosts costs_;
  double gamma_;
  // Where communication shares the workers' cores (calibrated CPU clusters):
  // speeds of compute and communication while both run on a worker, and per
  // worker the communication tasks running (docs/simulator.md).
  LaneSpeeds lanes_;  // as the model's (overlapSpeeds)
  bool cpuShared_ = false;
  double handoff_ = 0;  // seconds for a lane to wake up (calibrated executors)
  std::vector<int> commActive_;
  std::vector<int> cpuCommActive_;  // of them, ps server updates
  // Per worker, its running compute task (shared cores): the work it has
  // left at full speed, its speed and since when; per task, the version of
  // its completion event (bumped when re-rated).
  std::vector<uint32_t> running_;
  std::vector<double> computeLeft_, computeRate_, rateSince_;
  std::vector<uint32_t> computeVersion_;

  EventQueue q_;

  std::vector<uint32_t> depsLeft_;
  std::vector<uint32_t> dependentsBegin_;
  std::vector<uint32_t> dependents_;
  std::vector<double> start_, end_;
  std::vector<double> cpuFactor_;  // a transfer's speed from its workers' cores
  std::vector<std::priority_queue<uint32_t, std::vector<uint32_t>, std::greater<>>> workerQueue_;
  std::vector<char> workerBusy_;
  // ps: the job the server's thread runs (-1: none), the jobs waiting for it
  // and their tasks that are ready.
  struct JobRequest {
    int priority;
    uint64_t seq;
    int job;
  };
  int holder_ = -1;
  std::vector<JobRequest> waiting_;
  uint64_t requests_ = 0;
  std::vector<std::vector<uint32_t>> parked_;
  std::vector<char> requested_;
  std::vector<uint32_t> jobTasksLeft_;

  std::vector<double> beta_;
  bool hasTables_ = false;  // some link prices messages by size
  std::vector<int> flowsOn_;
  std::vector<std::vector<uint32_t>> tasksOn_;
  std::vector<int> activeOn_;
  std::vector<double> busySince_, busy_, bytesOn_;
  std::vector<int> scratch_;
  // (pattern, root or stored flows, naive pair, ring span, ring stride)
  using LoadKey = std::tuple<int, long, bool, int, int>;
  std::map<LoadKey, Load> loads_;
  std::vector<Active> active_;
  std::vector<int> freeActive_;
  std::vector<int> activeIndex_;
  std::vector<uint32_t> stamp_;
  uint32_t stampNow_ = 0;
  std::vector<uint32_t> affected_;
  int activeTransfers_ = 0;
  int soloTask_ = -1;
  std::map<const Load*, std::pair<double, double>> soloUse_;  // bytes per flow, busy seconds

  double allSent_ = 0, allReceived_ = 0;
  std::vector<double> sent_, received_;
  std::vector<PhaseTimes> phase_;
  std::vector<Intervals> computeIntervals_;
  Intervals allComm_;
  std::vector<Intervals> ownComm_;
  std::vector<uint32_t> workerStamp_;
  uint32_t workerStampNow_ = 0;
  std::vector<Slice> slices_;
  std::vector<LinkSlice> linkSlices_;
  std::vector<char> recordWorker_;   // with timeline: per worker, its slices are recorded
  std::vector<char> recordChannel_;  // with timeline: per channel, its busy slices are recorded
};

}  // namespace

Result simulate(const Plan& plan, const Network& network, const Cluster& cluster,
                const Options& options) {
  // A slowdown of 1000 turns a millisecond into a second: beyond it a factor
  // is a typo, and NaN, infinity or a denormal would stall the clock.
  for (double s : options.slowdown)
    if (!(s >= 1e-3 && s <= 1e3))
      throw OptionError("--straggler",
                        fmt::format("slowdown factors must be in [0.001, 1000], got {}", s));
  if (!(options.jitter >= 0 && options.jitter < 1))
    throw OptionError("--jitter", fmt::format("must be in [0, 1), got {}", options.jitter));
  if (options.slowdown.size() > static_cast<size_t>(plan.scenario.workers))
    throw OptionError("--straggler",
                      fmt::format("names worker {} but there are {} workers",
                                  options.slowdown.size() - 1, plan.scenario.workers));
  // Bounded before allocating (estimatedWork).
  const Limits& lim = limits();
  const double work = estimatedWork(plan, cluster, options);
  if (work > double(lim.maxSimEvents))
    throw OptionError(
        "--workers",
        fmt::format("simulating the plan of {} ({}, {} workers: {} tasks, {:.3g} flows) would take "
                    "about {:.3g} events, over the limit of {}; use fewer workers or larger "
                    "segments, or raise the limit with {} N ({} lifts every limit)",
                    plan.network, toString(plan.scenario.strategy), plan.scenario.workers,
                    plan.tasks.size(), plan.totalFlows(), work, lim.maxSimEvents, kMaxEventsOption,
                    kAllowLargeOption));
  checkPsPlacement(cluster, plan.scenario);
  if (plan.representative) {
    const auto why = representativeReason(plan.scenario, cluster, options);
    if (!why.empty())
      throw InvariantError("a representative plan was given to simulate, but " + why);
  }
  Engine engine(plan, network, cluster, options, lim.maxSimEvents);
  return engine.run();
}

double estimatedWork(const Plan& plan, const Cluster& cluster, const Options& options) {
  const bool perTask = options.timeline || !cluster.device.overlapCompute.empty() ||
                       !cluster.device.overlapComm.empty();
  double work = double(plan.tasks.size());
  std::set<std::tuple<int, int, int, int>> patterns;
  for (const auto& t : plan.tasks) {
    if (t.kind != TaskKind::kTransfer && t.kind != TaskKind::kReduce)
      continue;
    const double flows = double(plan.flowCountOf(t));
    if (t.pattern == PatternKind::kPairs || perTask)
      work += 2 * flows;
    else if (patterns.insert({static_cast<int>(t.pattern), t.root, t.ringSpan, t.ringStride})
                 .second)
      work += flows;
  }
  return work;
}

std::string representativeReason(const Scenario& scenario, const Cluster& cluster,
                                 const Options& options) {
  if (!canBeRepresentative(scenario))
    return fmt::format("{} workers hold different tasks", toString(scenario.strategy));
  for (double s : options.slowdown)
    if (s != 1.0)
      return "--straggler makes workers differ";
  if (options.jitter > 0)
    return "--jitter makes workers differ";
  if (options.timeline)
    return "a trace shows every worker's tasks";
  const auto lanes = overlapSpeeds(cluster, Topology(cluster, scenario.workers), scenario.workers);
  if (lanes.shared())
    return "communication shares the workers' cores, each worker's by its own part";
  return "";
}

Result simulateScenario(const Network& network, const Cluster& cluster, const Scenario& scenario,
                        const Options& options, int iterations) {
  checkSimWorkers(scenario.workers, limits());
  const std::string reason = representativeReason(scenario, cluster, options);
  const auto detail = reason.empty() ? PlanDetail::kRepresentative : PlanDetail::kFull;
  const Plan plan = lowerToPlan(network, scenario, cluster, iterations, detail);
  auto r = simulate(plan, network, cluster, options);
  r.detail = reason.empty() ? fmt::format(
                                  "representative: worker 0's compute stands for all {} "
                                  "(every worker computes alike)",
                                  scenario.workers)
                            : "full: " + reason;
  return r;
}

}  // namespace strata::sim

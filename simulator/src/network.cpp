// The simulator's network: the channel loads of transfer patterns, transfers
// joining and leaving the channels they cross, and their rates when flows
// share a channel (engine.h).
#include <algorithm>

#include "engine.h"

namespace strata::sim::detail {

const Load& Engine::loadOf(const Task& task) {
  // Patterned steps share a load per (pattern, root); stored flows get their own.
  const bool patterned = task.pattern != PatternKind::kPairs;
  // The naive reducer's root sends summed segment j-1 to a worker while it
  // receives segment j from it (one exchange per pair): its gathers and
  // broadcasts are priced as exchanges, as in the model, all but segment
  // 0's gather and the last segment's broadcast, which go one way alone.
  const auto* owner =
      task.collective >= 0 ? &plan_.collectives[static_cast<size_t>(task.collective)] : nullptr;
  const bool naivePair =
      owner && owner->allreduce == AllreduceAlgorithm::kNaive &&
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

// Puts a task's flows on its channels (busy since `since`).
void Engine::join(uint32_t t, Active& a, double since) {
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

void Engine::activate(uint32_t t) {
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

void Engine::leave(uint32_t t) {
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

void Engine::leaveChannels(uint32_t t, Active& a, size_t slot) {
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

// New rates for every transfer whose channels changed, and their new ends.
void Engine::recomputeRates() {
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
        const double perFlowByte =
            hasTables_ ? topo_.linkSpec(c / 2).secondsPerByte(Bytes(a.bytes), a.load->exchangeShare)
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

}  // namespace strata::sim::detail

// The simulator's compute lanes: a compute task's time, and a worker's cores
// shared between its compute and its communication (engine.h).
#include <algorithm>

#include "engine.h"
#include "strata/model/collectives.h"

namespace strata::sim::detail {

namespace {

// Uniform in [-1, 1] from (seed, task): splitmix64.
double unitNoise(uint64_t seed, uint64_t task) {
  uint64_t z = seed * 0x9E3779B97F4A7C15ull + task + 0x632BE59BD9B4E5Bull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return double(z >> 11) / double(1ull << 53) * 2.0 - 1.0;
}

}  // namespace

// Communication on `worker`'s cores starts (+1) or ends (-1). Where the
// lanes share cores, the compute task running there changes speed when
// the first one starts or the last one ends: what it has left runs at the
// new speed from now (the model's sharedLanes, fluid).
// A ps server's update (`cpu`) is CPU work whatever the link: beside it
// compute runs at the speed as measured (LaneSpeeds::busyCompute).
void Engine::addComm(int worker, int delta, bool cpu) {
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

double Engine::computeTime(const Task& task, uint32_t id) const {
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

// The workers a communication task runs on: the ends of its flows (a
// reduce: the receivers, who sum). Registers it as running on them.
bool Engine::startComm(const Task& task, uint32_t t) {
  bool busy = false;
  commWorkersOf_[t] = commWorkers(task);
  for (int w : commWorkersOf_[t]) {
    busy = busy || workerBusy_[static_cast<size_t>(w)];
    addComm(w, 1);
    commOn_[static_cast<size_t>(w)].push_back(t);
  }
  return busy;
}

void Engine::endComm(const Task& task, uint32_t t) {
  for (int w : commWorkersOf_[t]) {
    auto& on = commOn_[static_cast<size_t>(w)];
    on.erase(std::find(on.begin(), on.end(), t));
    if (task.kind != TaskKind::kUpdate)
      addComm(w, -1);
  }
}

// While one of its workers computes, a transfer or sum goes at the
// communication speed, a ps server update at the speed as measured
// (LaneSpeeds::busyComm); alone at full speed.
double Engine::commRateOf(uint32_t t) const {
  if (!cpuShared_)
    return 1.0;
  const Task& task = plan_.tasks[t];
  if (task.collective >= 0 && collectiveSpeed_[static_cast<size_t>(task.collective)] >= 0)
    return collectiveSpeed_[static_cast<size_t>(task.collective)];
  bool busy = false;
  for (int w : commWorkersOf_[t])
    busy = busy || workerBusy_[static_cast<size_t>(w)];
  if (!busy)
    return 1.0;
  return plan_.tasks[t].kind == TaskKind::kUpdate ? lanes_.busyComm : lanes_.comm;
}

void Engine::scheduleTimed(uint32_t t, double rate) {
  commRate_[t] = rate;
  commSince_[t] = q_.now();
  q_.push(q_.now() + commLeft_[t] / rate, EventKind::kTaskDone, t, ++computeVersion_[t]);
}

// Worker w's compute lane started or stopped: what it has left of each
// communication task on its cores runs at the new speed from now (the
// model's playLanes, fluid both ways). A transfer is re-rated through the
// network's rates (its cpuFactor_), a sum or server update here.
void Engine::reRateComm(size_t w) {
  if (!cpuShared_)
    return;
  const double now = q_.now();
  for (uint32_t t : commOn_[w]) {
    const double rate = commRateOf(t);
    const Task& task = plan_.tasks[t];
    if (task.kind == TaskKind::kTransfer) {
      if (rate == cpuFactor_[t])
        continue;
      cpuFactor_[t] = rate;
      if (activeIndex_[t] >= 0)
        markTask(t);
    } else if (rate != commRate_[t]) {
      commLeft_[t] = std::max(0.0, commLeft_[t] - (now - commSince_[t]) * commRate_[t]);
      scheduleTimed(t, rate);
    }
  }
}

double Engine::computeLeftOn(size_t w) const {
  double left = std::max(0.0, computeAhead_[w]);
  if (workerBusy_[w])
    left += std::max(0.0, computeLeft_[w] - (q_.now() - rateSince_[w]) * computeRate_[w]);
  return left;
}

void Engine::decideCollectiveSpeed(const Task& task, bool busy) {
  if (lanes_.commByDuty.empty() || task.collective < 0)
    return;
  const auto& c = plan_.collectives[static_cast<size_t>(task.collective)];
  double& speed = collectiveSpeed_[static_cast<size_t>(task.collective)];
  if (!c.allreduce.has_value() || speed >= 0)
    return;
  double left = 0;
  if (busy)
    for (int w : commWorkers(task))
      if (workerBusy_[static_cast<size_t>(w)])
        left = std::max(left, computeLeftOn(static_cast<size_t>(w)));
  CommParams p;
  p.segment = plan_.scenario.options.segment;
  p.gamma = gamma_;
  const double window =
      allReduce(Topology(cluster_, k_), *c.allreduce, c.bytes, p).time.value() + 2 * handoff_;
  speed = busy ? lanes_.commAtDuty(lanes_.windowDuty(left, window)) : 1.0;
}

std::vector<int> Engine::commWorkers(const Task& task) const {
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

}  // namespace strata::sim::detail

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
// reduce: the receivers, who sum). Registers it as running on them and
// returns whether any of them is computing.
bool Engine::startComm(const Task& task) {
  bool busy = false;
  for (int w : commWorkers(task)) {
    busy = busy || workerBusy_[static_cast<size_t>(w)];
    addComm(w, 1);
  }
  return busy;
}

double Engine::computeLeftOn(size_t w) const {
  double left = std::max(0.0, computeAhead_[w]);
  if (workerBusy_[w])
    left += std::max(0.0, computeLeft_[w] - (q_.now() - rateSince_[w]) * computeRate_[w]);
  return left;
}

double Engine::commSpeed(const Task& task, bool busy) {
  if (lanes_.commByDuty.empty())
    return busy ? lanes_.comm : 1.0;
  if (task.collective >= 0 &&
      plan_.collectives[static_cast<size_t>(task.collective)].allreduce.has_value()) {
    const auto& c = plan_.collectives[static_cast<size_t>(task.collective)];
    double& speed = collectiveSpeed_[static_cast<size_t>(task.collective)];
    if (speed < 0) {
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
    return speed;
  }
  // Not an allreduce (owt's exchanges, ps's pushes, pulls and sums): the
  // saturated speed while a worker computes, as the model prices them.
  return busy ? lanes_.comm : 1.0;
}

void Engine::endComm(const Task& task) {
  for (int w : commWorkers(task))
    addComm(w, -1);
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

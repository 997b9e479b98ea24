// A ps run's side of a rank: the communication lane's jobs in rank 0's
// order, a server's update of its shard, and the staged weights of a run
// with staleness.
#include <algorithm>

#include "strata/model/error.h"
#include "worker.h"

namespace strata::exec::detail {

void Worker::serveJobs(Clock::time_point t0, std::vector<Measured>& ms) {
  const size_t n = plan_.jobs.size();
  std::vector<char> started(n, 0);
  const bool lifo = plan_.scenario.options.psPriority == PsPriority::kLastReady;
  for (size_t i = 0; i < n; ++i) {
    std::vector<int32_t> choice{-1};
    if (w_ == 0) {
      std::unique_lock lock(mutex_);
      cv_.wait(lock, [&] {
        if (error_)
          return true;
        choice[0] = -1;
        for (size_t j = 0; j < n; ++j) {
          if (started[j] || !jobReady(j))
            continue;
          const int best = choice[0];
          const auto& a = plan_.jobs[j];
          if (best < 0 || a.priority > plan_.jobs[static_cast<size_t>(best)].priority ||
              (a.priority == plan_.jobs[static_cast<size_t>(best)].priority && lifo))
            choice[0] = static_cast<int32_t>(j);
        }
        return choice[0] >= 0;
      });
      if (error_)
        return;
      lock.unlock();
      for (int r = 1; r < world_; ++r)
        comm_.send(r, decisionTag_[i], std::as_bytes(std::span<const int32_t>(choice)));
    } else {
      comm_.recv(0, decisionTag_[i], std::as_writable_bytes(std::span<int32_t>(choice)));
    }
    const auto j = static_cast<size_t>(choice[0]);
    STRATA_ENFORCE(j < n && !started[j]);
    started[j] = 1;
    for (size_t t : jobTasks_[j])
      if (!runTask(t, t0, true, ms))
        return;
  }
}

bool Worker::jobReady(size_t j) const {
  if (jobTasks_[j].empty())
    return true;
  for (int d : ownDeps_[jobTasks_[j].front()])
    if (!done_[static_cast<size_t>(d)])
      return false;
  return true;
}

void Worker::serverUpdate(const Task& task) {
  const auto n = static_cast<int64_t>(model_.parametersNoWait(task.layer, task.lastLayer).size());
  const auto [begin, end] = piece(n, task.shards > 0 ? task.shards : k_, task.part);
  // Adam's step t: the run's step s (0-based) is every layer's update s + 1.
  const int64_t step = int64_t{firstStep_} + task.iteration + 1;
  if (stale_ == 0) {
    // Synchronous: the server's chunk is the model's own (every worker
    // holds the same weights between steps).
    model_.updateShard(task.layer, task.lastLayer, begin, end, rule_, step);
    return;
  }
  // With staleness the model holds older weights: the server keeps its
  // own, updates them as updateShard would, and stages its chunk for
  // this step's pull.
  auto& key = keys_.at(task.layer);
  const auto grads = model_.gradientsNoWait(task.layer, task.lastLayer)
                         .subspan(static_cast<size_t>(begin), static_cast<size_t>(end - begin));
  if (isAdam(rule_.optimizer))
    backend_->adam(key.weights, key.adamM, key.adamV, grads, rule_.adam(step));
  else
    backend_->sgdMomentum(key.weights, key.momentum, grads, rule_.learningRate,
                          rule_.optimizer == Optimizer::kSgd ? 0.0f : rule_.momentum,
                          rule_.weightDecay);
  std::copy(key.weights.begin(), key.weights.end(),
            key.slot(task.iteration).begin() + static_cast<std::ptrdiff_t>(begin));
}

void Worker::makeKeys() {
  for (const auto& j : plan_.jobs) {
    if (keys_.count(j.firstLayer))
      continue;
    Key key;
    key.firstLayer = j.firstLayer;
    key.lastLayer = j.lastLayer;
    const std::vector<float> all = model_.parametersToHost(j.firstLayer, j.lastLayer);
    const auto [begin, end] = piece(static_cast<int64_t>(all.size()), k_, w_);
    key.weights.assign(all.begin() + begin, all.begin() + end);
    if (isAdam(rule_.optimizer)) {
      key.adamM.assign(key.weights.size(), 0.0f);
      key.adamV.assign(key.weights.size(), 0.0f);
    } else {
      key.momentum.assign(key.weights.size(), 0.0f);
    }
    key.slots.assign(static_cast<size_t>(stale_) + 1, std::vector<float>(all.size()));
    for (int l = j.firstLayer; l <= j.lastLayer; ++l)
      keyOf_[static_cast<size_t>(l)] = j.firstLayer;
    keys_.emplace(j.firstLayer, std::move(key));
  }
}

void Worker::stagedWeights(int l, int s) {
  const int first = keyOf_[static_cast<size_t>(l)];
  if (first < 0)
    return;
  {
    std::lock_guard lock(mutex_);
    const int newest = pulledUpTo_.at(first);
    stalenessSeen_ = std::max(stalenessSeen_, s - 1 - newest);
  }
  const int from = s - 1 - stale_;
  if (from < 0)
    return;
  auto& key = keys_.at(first);
  const auto base = model_.paramBlock(key.firstLayer).offset;
  const auto b = model_.paramBlock(l);
  const auto src =
      key.slot(from).subspan(static_cast<size_t>(b.offset - base), static_cast<size_t>(b.size()));
  model_.uploadParameters(l, l, src);
}

}  // namespace strata::exec::detail

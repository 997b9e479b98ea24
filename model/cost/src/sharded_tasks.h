// One worker's step laid out as lane tasks (playLanes), and the pieces of a
// layer's forward and backward with tensor parallelism: what sharded.cpp
// (tensor parallelism, ZeRO, recomputation) and pipeline.cpp (a pipeline
// stage's chunks) share. Private to strata::model_cost.
#pragma once

#include <vector>

#include "step_context.h"
#include "strata/model/tensor_parallel.h"

namespace strata::cost {

// A step being laid out as lane tasks, with what each task is.
class StepTasks {
 public:
  StepTasks(const Context& ctx, Tally& t) : ctx_(ctx), t_(t) {}

  // A compute task after everything in the stream's path (and `extra`).
  int compute(Seconds work, Phase phase, std::vector<int> extra = {}) {
    if (path_ >= 0)
      extra.push_back(path_);
    path_ = add({false, work, std::move(extra)}, phase);
    return path_;
  }
  // A collective in the stream's path: it waits for the path and the path
  // waits for it.
  void inPath(const CollectiveCost& c) {
    if (c.time.value() <= 0 && c.steps == 0)
      return;
    path_ = add({true, c.time, path_ >= 0 ? std::vector<int>{path_} : std::vector<int>{}}, {});
    note(c);
  }
  // A collective beside the stream, after `deps` and no earlier than
  // `notBefore`.
  int beside(const CollectiveCost& c, std::vector<int> deps, double notBefore = 0) {
    std::erase(deps, -1);
    note(c);
    return add({true, c.time, std::move(deps), true, notBefore}, {});
  }
  int path() const { return path_; }
  const std::vector<LaneTask>& tasks() const { return tasks_; }

  // Plays the tasks and adds the step's times to the tally; returns the step.
  Seconds play() {
    const auto s =
        playLanes(tasks_, ctx_.lanes.compute, ctx_.lanes.comm, ctx_.handoff, &ctx_.lanes);
    double end = 0, computeWall = 0, commWall = 0;
    for (size_t i = 0; i < tasks_.size(); ++i) {
      const double wall = s.end[i] - s.start[i];
      end = std::max(end, s.end[i]);
      if (tasks_[i].comm) {
        commWall += wall;
        continue;
      }
      computeWall += wall;
      switch (phase_[i]) {
        case Phase::kFwd:
          t_.compute.fwd += Seconds(wall);
          break;
        case Phase::kBwdData:
          t_.compute.bwdData += Seconds(wall);
          break;
        case Phase::kBwdWeights:
          t_.compute.bwdWeights += Seconds(wall);
          break;
        case Phase::kUpdate:
          t_.compute.update += Seconds(wall);
          break;
      }
    }
    t_.communication += Seconds(commWall);
    t_.exposed += Seconds(std::max(0.0, end - computeWall));
    return Seconds(end);
  }

 private:
  int add(LaneTask task, Phase phase) {
    tasks_.push_back(std::move(task));
    phase_.push_back(phase);
    return static_cast<int>(tasks_.size()) - 1;
  }
  // Bytes and the bottleneck of a collective; its time is the task's wall.
  void note(const CollectiveCost& c) {
    for (size_t i = 0; i < t_.sent.size() && i < c.sent.size(); ++i) {
      t_.sent[i] += c.sent[i];
      t_.received[i] += c.received[i];
    }
    if (c.time > t_.worstCollective && c.bottleneckLink >= 0) {
      t_.worstCollective = c.time;
      t_.bottleneckLink = c.bottleneckLink;
      t_.bottleneckUp = c.bottleneckUp;
    }
  }

  const Context& ctx_;
  Tally& t_;
  std::vector<LaneTask> tasks_;
  std::vector<Phase> phase_;
  int path_ = -1;
};

// A worker's layers under a tensor-parallel layout: their times for b
// examples and the in-path collectives around them.
struct ShardedLayers {
  const Context& ctx;
  const TpLayout& tp;
  RankGroups tpGroups;

  Seconds time(int i, Phase p) const {
    return ctx.time(ctx.net.layers[static_cast<size_t>(i)], p, ctx.b,
                    tp.layers[static_cast<size_t>(i)].work);
  }
  // A tensor-parallel collective in the stream's path.
  void collective(StepTasks& s, const TpComm& c) const;
  // Layer i's forward with its collectives; `extra`: what its compute also waits for.
  void forward(StepTasks& s, int i, std::vector<int> extra = {}) const;
  // Layer i's backward: full recomputation reruns the forward of its block's
  // layers from max(first, the block's first) at the block's last layer;
  // selective reruns the attention core; then the collectives before it,
  // bwd_weights (returned: the task its gradient is ready after, -1 when it
  // has none), and bwd_data with the collectives after it (none for a layer
  // reading the network input).
  int backward(StepTasks& s, int i, int first, const std::vector<int>& extra) const;
};

// One worker's data-parallel gradient syncs of layers [first, last) on its
// communication side, one after another, and the update once they are
// over: buckets of consecutive layers (StrategyOptions::bucket) with
// overlap, reduce-scattered with ZeRO-1/2, allreduced over the
// data-parallel groups' rings otherwise (the ring strategy's --allreduce
// without tensor, pipeline parallelism or ZeRO).
class GradientSyncs {
 public:
  GradientSyncs(const Context& ctx, const TpLayout& tp, StepTasks& s, Tally& t, RankGroups dpGroups,
                int first, int last);
  // After layer i's backward (`gradient`: its bwd_weights task, or -1):
  // with sequence parallelism the tensor-parallel sum of a replicated
  // layer's weight gradient; with overlap and `buckets`, the sync of the
  // bucket layer i closes.
  void afterBackward(int i, int gradient, bool buckets);
  // One sync of `params` after `deps` (ZeRO-3's units).
  void sync(double params, std::vector<int> deps);
  // Every bucket's sync after `deps` (without overlap; a pipeline chunk whose
  // last backward ran earlier).
  void syncBuckets(const std::vector<int>& deps);
  // Layers [first, last) of another chunk of a pipeline stage, whose
  // backward is over: their sequence-parallel sums and bucket syncs, ready
  // now, in turn with the rest; the update covers them too.
  void syncEarlier(int first, int last);
  // Any other collective in turn with the syncs (the update waits for it),
  // no earlier than `notBefore`.
  void beside(const CollectiveCost& c, std::vector<int> deps, double notBefore = 0);
  // The update of the range's parameters (and syncEarlier's) plus
  // `extraParams` (a pipeline stage's copy of a tied table), after every sync.
  void update(bool zero3, double extraParams = 0);

 private:
  const Context& ctx_;
  const TpLayout& tp_;
  StepTasks& s_;
  Tally& t_;
  RankGroups dpGroups_;
  int dp_;
  int first_, last_;
  bool sharded_ = false, ringGroups_ = false;
  std::vector<int> bucketOf_;  // per layer of the range: its bucket, -1 without weights
  std::vector<double> bucketParams_;
  std::vector<int> closer_;  // per bucket: its lowest layer (its gradient closes it)
  std::vector<int> syncs_;
  std::vector<double> earlierParams_;  // syncEarlier's buckets

  void buckets(int first, int last, std::vector<int>& bucketOf, std::vector<double>& params,
               std::vector<int>& closer) const;
};

}  // namespace strata::cost

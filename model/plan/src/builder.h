// The Plan builder shared by the strategies' lowerings (plan/src/*.cpp):
// compute, update and transfer tasks, and every collective lowered to
// transfers and reduces that mirror its cost formula in collectives.cpp (same
// stages, same pipelining). Private to strata::model_plan.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <utility>

#include "strata/model/collectives.h"
#include "strata/model/error.h"
#include "strata/model/estimate.h"
#include "strata/model/lowering.h"
#include "strata/model/plan.h"
#include "strata/model/quantity_text.h"
#include "strata/model/ring.h"
#include "strata/model/tensor_parallel.h"
#include "strata/model/topology.h"

namespace strata::planning {

using Deps = std::vector<int>;

// The ranks a collective runs on: every rank, or (a pipeline) the ranks of
// one stage, rank r on stage r / width mod stages (width: RankLayout's
// stageDistance, tp or tp x dp).
struct Members {
  int stage = -1;  // -1: every rank
  int stages = 1;
  int width = 1;
  bool all() const { return stage < 0 || stages <= 1; }
  bool has(int r) const { return all() || r / width % stages == stage; }
};

class Builder {
 public:
  // `topo`: the cluster's topology, for the hierarchical allreduce and auto
  // (nullptr: neither can be lowered).
  Builder(Plan& plan, const Topology* topo, double gamma)
      : plan_(plan),
        k_(plan.scenario.workers),
        segment_(plan.scenario.options.segment),
        topo_(topo) {
    comm_.segment = segment_;
    comm_.gamma = gamma;
  }

  int workers() const { return k_; }
  // The workers whose compute and update tasks are lowered (1: worker 0
  // stands for all, Plan::representative).
  int computeWorkers() const { return plan_.representative ? 1 : k_; }
  // Each weight-gradient allreduce's algorithm and bytes, for describeAllreduce.
  std::vector<std::pair<std::string, double>> picks;

  int add(Task t, const Deps& deps) {
    t.depBegin = static_cast<uint32_t>(plan_.deps.size());
    for (int d : deps)
      if (d >= 0)
        plan_.deps.push_back(d);
    t.depCount = static_cast<uint32_t>(plan_.deps.size()) - t.depBegin;
    if (current_ >= 0)
      t.collective = current_;
    t.iteration = iteration_;
    t.job = job_;
    if (t.kind == TaskKind::kCompute || t.kind == TaskKind::kTransfer)
      t.micro = micro_;
    plan_.tasks.push_back(t);
    return static_cast<int>(plan_.tasks.size()) - 1;
  }

  int compute(int worker, int layer, Phase phase, double examples, double fraction,
              const Deps& deps) {
    Task t;
    t.kind = TaskKind::kCompute;
    t.worker = worker;
    t.layer = layer;
    t.phase = phase;
    t.examples = examples;
    t.fraction = fraction;
    t.round = round_;
    return add(t, deps);
  }

  int update(int worker, int firstLayer, int lastLayer, double params, const Deps& deps) {
    Task t;
    t.kind = TaskKind::kUpdate;
    t.worker = worker;
    t.layer = firstLayer;
    t.lastLayer = lastLayer;
    t.phase = Phase::kUpdate;
    t.params = params;
    return add(t, deps);
  }

  // Starts a collective; its transfer and reduce tasks are tagged with it.
  void begin(Collective c) {
    c.firstTask = static_cast<uint32_t>(plan_.tasks.size());
    plan_.collectives.push_back(std::move(c));
    current_ = static_cast<int>(plan_.collectives.size()) - 1;
  }
  int end(int lastTask) {
    plan_.collectives.back().lastTask = static_cast<uint32_t>(lastTask);
    current_ = -1;
    return lastTask;
  }
  Collective& collective() { return plan_.collectives.back(); }

  int transfer(PatternKind pattern, int root, PartRule parts, Bytes bytes, int step, int segment,
               const Deps& deps, const std::vector<PlanFlow>& explicitFlows = {}) {
    Task t;
    t.kind = TaskKind::kTransfer;
    t.pattern = pattern;
    t.parts = parts;
    t.root = root;
    t.bytes = bytes;
    t.flowBegin = static_cast<uint32_t>(plan_.flows.size());
    t.flowCount = static_cast<uint32_t>(explicitFlows.size());
    plan_.flows.insert(plan_.flows.end(), explicitFlows.begin(), explicitFlows.end());
    t.step = step;
    t.segment = segment;
    t.round = round_;
    return add(t, deps);
  }

  // Flows stored once per plan under `key` (collectives of one shape share
  // them: a plan at 10^5 workers would otherwise hold them per bucket):
  // their [begin, begin + count) in Plan::flows.
  using FlowRange = std::pair<uint32_t, uint32_t>;
  FlowRange stored(const std::string& key, const std::function<std::vector<PlanFlow>()>& make) {
    auto it = stored_.find(key);
    if (it == stored_.end()) {
      const auto flows = make();
      const auto begin = static_cast<uint32_t>(plan_.flows.size());
      plan_.flows.insert(plan_.flows.end(), flows.begin(), flows.end());
      it = stored_.emplace(key, FlowRange{begin, static_cast<uint32_t>(flows.size())}).first;
    }
    return it->second;
  }
  // A transfer of stored flows.
  int storedTransfer(FlowRange flows, Bytes bytes, int step, int segment, const Deps& deps) {
    const int t =
        transfer(PatternKind::kPairs, -1, PartRule::kExplicit, bytes, step, segment, deps);
    auto& task = plan_.tasks[static_cast<size_t>(t)];
    task.flowBegin = flows.first;
    task.flowCount = flows.second;
    return t;
  }

  // The destinations of `transfer`'s flows each add `inputs` chunks of `bytes`.
  int reduce(int transfer, Bytes bytes, int inputs, const Deps& deps) {
    Task t;
    t.kind = TaskKind::kReduce;
    auto& x = plan_.tasks[static_cast<size_t>(transfer)];
    x.summed = true;
    t.flowBegin = x.flowBegin;
    t.flowCount = x.flowCount;
    t.pattern = x.pattern;
    t.parts = x.parts;
    t.root = x.root;
    t.step = x.step;
    t.segment = x.segment;
    t.round = round_;
    t.bytes = bytes;
    t.inputs = inputs;
    return add(t, deps);
  }

  void setRound(int r) { round_ = r; }
  void setIteration(int s) { iteration_ = s; }
  void setJob(int j) { job_ = j; }
  void setMicro(int m) { micro_ = m; }
  int micro() const { return micro_; }
  Plan& plan() { return plan_; }

  // ---- collectives (each mirrors collectives.cpp) ------------------------
  // All return the task whose completion completes the collective.

  int allReduce(AllreduceAlgorithm algorithm, Bytes n, BufferKind buffer, int firstLayer,
                int lastLayer, const Deps& start) {
    if (algorithm == AllreduceAlgorithm::kAuto)
      algorithm = chooseAllreduce(topology("auto"), n, comm_);
    if (buffer == BufferKind::kWeightGradients)
      picks.emplace_back(toString(algorithm), n.value());
    Collective c;
    c.allreduce = algorithm;
    c.algorithm = std::string(toString(algorithm));
    c.buffer = buffer;
    c.bytes = n;
    c.firstLayer = firstLayer;
    c.lastLayer = lastLayer;
    c.round = round_;
    switch (algorithm) {
      case AllreduceAlgorithm::kRing:
        return allReduceRing(c, n, start);
      case AllreduceAlgorithm::kNaive:
        return allReduceNaive(c, n, start);
      case AllreduceAlgorithm::kDirect:
        return allReduceDirect(c, n, start);
      case AllreduceAlgorithm::kHalvingDoubling:
        return allReduceHalvingDoubling(c, n, start);
      case AllreduceAlgorithm::kHierarchical:
        return allReduceHierarchical(c, n, start);
      case AllreduceAlgorithm::kTree:
        return allReduceTree(c, n, start);
      case AllreduceAlgorithm::kAuto:
        break;
    }
    return -1;
  }

  // One phase of rings of `size` ranks (ringNext(span, stride)) on chunks of
  // `chunk` bytes, as collectives.cpp's ringPhase: reduce-scatter, size-1
  // steps of m segments (send, then add, pipelined), or allgather, size-1
  // steps of m sends; each step starts when the last one is complete.
  // Returns the phase's last task (`after` when it has none).
  // With `only` a stage, the rings are that stage's ranks' alone: kPairs
  // steps of stored flows, each flow's part as a ring step's.
  int ringPhase(int span, int stride, Bytes chunk, bool reduceScatter, int after, const Deps& start,
                const Members& only = {}) {
    const int size = span / stride;
    const int segs = segmentCount(chunk, segment_);
    const Bytes s = chunk / segs;
    int last = after;
    auto ringTransfer = [&](PartRule rule, int step, int j, const Deps& d) {
      if (!only.all()) {
        const auto flows =
            stored(fmt::format("ring {} {} step {} of stage {} of {} x {}", span, stride, step,
                               only.stage, only.stages, only.width),
                   [&] {
                     std::vector<PlanFlow> v;
                     for (int r = 0; r < k_; ++r)
                       if (only.has(r)) {
                         const int pos = r % span / stride;
                         v.push_back({r, ringNext(r, span, stride),
                                      rule == PartRule::kRingReduceScatter
                                          ? ringReduceScatterSends(pos, step, size)
                                          : ringAllGatherSends(pos, step - (size - 1), size)});
                       }
                     return v;
                   });
        const int t = storedTransfer(flows, s, step, j, d);
        plan_.tasks[static_cast<size_t>(t)].follows = j > 0;
        return t;
      }
      const int t = transfer(PatternKind::kRing, -1, rule, s, step, j, d);
      auto& task = plan_.tasks[static_cast<size_t>(t)];
      task.ringSpan = span == k_ && stride == 1 ? 0 : span;
      task.ringStride = stride;
      task.follows = j > 0;
      return t;
    };
    for (int i = 0; i < size - 1; ++i) {
      int prevSend = -1, red = -1;
      for (int j = 0; j < segs; ++j) {
        const Deps d = j > 0 ? Deps{prevSend} : (last >= 0 ? Deps{last} : start);
        if (reduceScatter) {
          prevSend = ringTransfer(PartRule::kRingReduceScatter, i, j, d);
          red = reduce(prevSend, s, 1, {prevSend, red});
        } else {
          prevSend = ringTransfer(PartRule::kRingAllGather, size - 1 + i, j,
                                  last >= 0 ? Deps{last} : start);
          last = prevSend;
        }
      }
      if (reduceScatter)
        last = red;
    }
    return last;
  }

  // Collectives inside groups, every group at once (collectives.cpp's
  // groupCollective): n is one rank's whole buffer. g.algorithm kRing: one
  // ring per group, cut in size chunks; kHierarchical: hierarchicalLevels'
  // inner ring on n and outer ring on n / inner size, reduce-scatters
  // inside then across, all-gathers across then inside; kAuto: the model's
  // pick for this buffer (chooseGroupAlgorithm), a weight-gradient sync's
  // pick noted in `picks`. A group of one moves nothing: returns -1.
  using GroupOp = strata::GroupOp;
  // `only`: the groups of one pipeline stage.
  int groupCollective(GroupOp op, RankGroups g, Bytes n, BufferKind buffer, int firstLayer,
                      int lastLayer, const Deps& start, const Members& only = {}) {
    const int size = g.size();
    if (size <= 1)
      return -1;
    AllreduceAlgorithm algorithm = g.algorithm;
    if (algorithm == AllreduceAlgorithm::kAuto) {
      algorithm = chooseGroupAlgorithm(topology("auto"), g, op, n, comm_);
      if (buffer == BufferKind::kWeightGradients && op != GroupOp::kAllGather)
        picks.emplace_back(toString(algorithm), n.value());
    }
    Collective c;
    c.allreduce = AllreduceAlgorithm::kRing;  // its window in the simulator's lanes
    c.buffer = buffer;
    c.bytes = n;
    c.firstLayer = firstLayer;
    c.lastLayer = lastLayer;
    c.round = round_;
    if (algorithm == AllreduceAlgorithm::kTree) {
      STRATA_ENFORCE(op == GroupOp::kAllReduce);  // checkScenario refuses tree with ZeRO
      c.algorithm = "tree";
      c.parts = 2;
      begin(c);
      return end(treePhases(g, n, start, only));
    }
    // {inner, outer}: the ring alone is an outer level of g itself.
    GroupLevels levels{RankGroups{1, 1}, g};
    if (algorithm == AllreduceAlgorithm::kHierarchical)
      levels = hierarchicalLevels(topology("hierarchical"), g);
    const auto& [inner, outer] = levels;
    const Bytes chunk = n / inner.size();  // what the outer level carries
    c.algorithm = op == GroupOp::kReduceScatter ? "reduce-scatter"
                  : op == GroupOp::kAllGather   ? "allgather"
                                                : std::string(toString(algorithm));
    if (algorithm == AllreduceAlgorithm::kHierarchical && op != GroupOp::kAllReduce)
      c.algorithm = "hierarchical " + c.algorithm;
    c.parts = size;
    c.segments = segmentCount(inner.size() > 1 ? n / inner.size() : chunk / outer.size(), segment_);
    begin(c);
    auto phase = [&](RankGroups level, Bytes whole, bool reduceScatter, int after) {
      if (level.size() <= 1)
        return after;
      return ringPhase(level.span, level.stride, whole / level.size(), reduceScatter, after, start,
                       only);
    };
    int last = -1;
    if (op != GroupOp::kAllGather) {
      last = phase(inner, n, true, last);
      last = phase(outer, chunk, true, last);
    }
    if (op != GroupOp::kReduceScatter) {
      last = phase(outer, chunk, false, last);
      last = phase(inner, n, false, last);
    }
    return end(last);
  }

  // One step of point-to-point flows, `bytes` each (a pipeline's
  // stage-to-stage transfers, a tied table's copies), stored under `key`.
  int pointToPoint(const std::string& key, const std::function<std::vector<PlanFlow>()>& flows,
                   Bytes bytes, BufferKind buffer, int layer, const Deps& start) {
    begin(simple("p2p", buffer, bytes, layer));
    return end(storedTransfer(stored(key, flows), bytes, 0, 0, start));
  }

  // The same, each destination adding what it receives into its own buffer
  // (a tied table's two copies: each stage sends its gradient and adds the
  // other's).
  int pointToPointSum(const std::string& key, const std::function<std::vector<PlanFlow>()>& flows,
                      Bytes bytes, BufferKind buffer, int layer, const Deps& start) {
    begin(simple("p2p", buffer, bytes, layer));
    const int t = storedTransfer(stored(key, flows), bytes, 0, 0, start);
    return end(reduce(t, bytes, 1, {t}));
  }

  // Ring: reduce-scatter then allgather around the ring of all K workers.
  int allReduceRing(Collective c, Bytes n, const Deps& start) {
    const Bytes chunk = n / k_;
    c.parts = k_;
    c.segments = segmentCount(chunk, segment_);
    begin(c);
    const int rs = ringPhase(k_, 1, chunk, true, -1, start);
    return end(ringPhase(k_, 1, chunk, false, rs, start));
  }

  // Hierarchical (collectives.cpp): reduce-scatter in each node's ring, an
  // allreduce per rail across the nodes, allgather in each node's ring. A
  // flow's part is its chunk in its own ring (Plan::flowsOf).
  int allReduceHierarchical(Collective c, Bytes n, const Deps& start) {
    const int g = topology("hierarchical").nodeSize();
    if (k_ % g != 0)  // the model's message
      (void)strata::allReduce(topology("hierarchical"), AllreduceAlgorithm::kHierarchical, n,
                              comm_);
    const int nodes = k_ / g;
    const Bytes chunk = n / g, sub = chunk / nodes;
    c.parts = k_;
    c.segments = segmentCount(chunk, segment_);
    begin(c);
    int last = ringPhase(g, 1, chunk, true, -1, start);
    last = ringPhase(k_, g, sub, true, last, start);
    last = ringPhase(k_, g, sub, false, last, start);
    return end(ringPhase(g, 1, chunk, false, last, start));
  }

  // Double binary tree (collectives.cpp): per segment of each tree's half,
  // every up stage's transfer and sum, then every down stage's transfer. A
  // stage's segment j waits for the stage before it (segment j), for its own
  // segment j-1, and for segment j-1 of every later stage that shares a link
  // with it (Topology::treeConflicts: two stages never load one link at
  // once). A flow's part is its tree (0: the buffer's first half). The
  // stages' flows are stored once and shared by every segment. Without a
  // cluster (the executor, which runs tasks in plan order anyway) no link is
  // known to be shared.
  int allReduceTree(Collective c, Bytes n, const Deps& start) {
    c.parts = 2;
    begin(c);
    return end(treePhases(RankGroups{k_, 1}, n, start, {}));
  }

  // The tree's transfers and sums of every group of `g` at once (g = {K, 1}:
  // all ranks), inside the collective begun; `only`: one pipeline stage's
  // groups. Returns the last task.
  int treePhases(RankGroups g, Bytes n, const Deps& start, const Members& only) {
    const bool all = g.span == k_ && g.stride == 1;
    // Without a cluster (the executor's plan) no link is known to be shared.
    const auto local = topo_ ? std::vector<TreeStage>{} : groupTrees(k_, g.span, g.stride);
    const auto& stages = topo_ ? topo_->treeOf(g.span, g.stride).stages : local;
    const size_t count = stages.size();
    const Bytes half = n / 2;
    const int segs = segmentCount(half, segment_);
    const Bytes s = half / segs;
    plan_.collectives.back().segments = segs;
    // Transfer stage p (its step): up stage p for p < count, else down stage
    // 2 count - 1 - p, whose flows are up stage p's reversed.
    std::vector<FlowRange> ranges;
    for (size_t p = 0; p < 2 * count; ++p) {
      const bool down = p >= count;
      const size_t i = down ? 2 * count - 1 - p : p;
      const std::string key =
          all ? fmt::format("tree {} {}", down ? "down" : "up", i)
              : fmt::format("tree {} {} of {} {} stage {} of {} x {}", down ? "down" : "up", i,
                            g.span, g.stride, only.stage, only.stages, only.width);
      ranges.push_back(stored(key, [&] {
        const auto& st = stages[i];
        std::vector<PlanFlow> v;
        for (size_t f = 0; f < st.flows.size(); ++f) {
          const auto& fl = st.flows[f];
          if (only.has(fl.src))
            v.push_back(down ? PlanFlow{fl.dst, fl.src, st.tree[f]}
                             : PlanFlow{fl.src, fl.dst, st.tree[f]});
        }
        return v;
      }));
    }
    const std::vector<uint64_t> none(2 * count, 0);
    const auto& conflicts = topo_ ? topo_->treeOf(g.span, g.stride).conflicts : none;
    std::vector<int> sent(2 * count, -1), summed(count, -1);  // the segment before's tasks
    int last = -1;
    for (int j = 0; j < segs; ++j) {
      int before = -1;
      for (size_t p = 0; p < 2 * count; ++p) {
        Deps deps{before, sent[p]};
        if (before < 0)
          deps.insert(deps.end(), start.begin(), start.end());
        for (size_t q = p + 1; q < 2 * count; ++q)
          if (conflicts[p] >> q & 1)
            deps.push_back(sent[q]);
        const int x = storedTransfer(ranges[p], s, static_cast<int>(p), j, deps);
        plan_.tasks[static_cast<size_t>(x)].follows = j > 0;
        sent[p] = before = last = x;
        if (p < count)
          before = summed[p] = reduce(x, s, stages[p].inputs, {x, summed[p]});
      }
    }
    return last;
  }

  // Naive reducer: per segment, gather into rank 0, sum there, broadcast;
  // the three stages pipeline over segments.
  int allReduceNaive(Collective c, Bytes n, const Deps& start) {
    const int segs = segmentCount(n, segment_);
    const Bytes s = n / segs;
    c.segments = segs;
    begin(c);
    int g = -1, r = -1, b = -1;
    for (int j = 0; j < segs; ++j) {
      g = transfer(PatternKind::kGather, 0, PartRule::kSource, s, 0, j, j > 0 ? Deps{g} : start);
      r = reduce(g, s, k_ - 1, {g, r});
      b = transfer(PatternKind::kScatter, 0, PartRule::kSource, s, 1, j, {r, b});
    }
    return end(b);
  }

  // Direct: per segment scatter S_i (all-to-all), sum R_i, gather-back G_i,
  // on one stream in the order S0 S1 G0 S2 G1 ... G_{m-1}.
  int allReduceDirect(Collective c, Bytes n, const Deps& start) {
    const Bytes chunk = n / k_;
    const int segs = segmentCount(chunk, segment_);
    const Bytes s = chunk / segs;
    c.parts = k_;
    c.segments = segs;
    begin(c);
    std::vector<int> sums(static_cast<size_t>(segs), -1);
    int stream = -1, sum = -1;
    auto gatherBack = [&](int i) {
      stream = transfer(PatternKind::kAllToAll, -1, PartRule::kSource, s, 1, i,
                        {stream, sums[static_cast<size_t>(i)]});
    };
    for (int i = 0; i < segs; ++i) {
      stream = transfer(PatternKind::kAllToAll, -1, PartRule::kDestination, s, 0, i,
                        stream >= 0 ? Deps{stream} : start);
      sum = reduce(stream, s, k_ - 1, {stream, sum});
      sums[static_cast<size_t>(i)] = sum;
      if (i >= 1)
        gatherBack(i - 1);
    }
    gatherBack(segs - 1);
    return end(stream);
  }

  // Recursive halving-doubling: fold the extra ranks in, log2 p' exchanges
  // of halving size (each followed by its sum), the same in reverse without
  // sums, fold out. Unsegmented, one step after another.
  int allReduceHalvingDoubling(Collective c, Bytes n, const Deps& start) {
    int pof2 = 1;
    while (pof2 * 2 <= k_)
      pof2 *= 2;
    const int extra = k_ - pof2;
    auto worker = [&](int active) { return active < extra ? 2 * active : active + extra; };
    // The buffer is cut into p' blocks; a flow's part is the first block it
    // carries, and its bytes say how many. Active rank i's window (the blocks
    // it is responsible for) starts at window[i].
    c.parts = pof2;
    begin(c);
    const Bytes block = n / pof2;
    std::vector<int> window(static_cast<size_t>(pof2), 0);
    int last = -1;
    int step = 0;
    auto next = [&](const Deps& d) { return last >= 0 ? Deps{last} : d; };
    // Every bucket's exchanges have the same flows: stored once, shared.
    auto flowsOfStep = [&](int at, const std::function<std::vector<PlanFlow>()>& make) {
      return stored(fmt::format("halving-doubling {}", at), make);
    };
    if (extra > 0) {
      const auto f = flowsOfStep(step, [&] {
        std::vector<PlanFlow> v;
        for (int i = 0; i < extra; ++i)
          v.push_back({2 * i + 1, 2 * i, 0});
        return v;
      });
      const int x = storedTransfer(f, n, step++, 0, next(start));
      last = reduce(x, n, 1, {x});
    }
    // Reduce-scatter by recursive halving: with distance d, rank i keeps the
    // lower half of its window when bit d of i is clear and sends the upper.
    std::vector<int> distances;
    for (int d = pof2 / 2; d >= 1; d /= 2) {
      distances.push_back(d);
      const auto f = flowsOfStep(step, [&] {
        std::vector<PlanFlow> v;
        for (int i = 0; i < pof2; ++i) {
          const int w = window[static_cast<size_t>(i)];
          v.push_back({worker(i), worker(i ^ d), (i & d) ? w : w + d});
        }
        return v;
      });
      for (int i = 0; i < pof2; ++i)
        window[static_cast<size_t>(i)] += (i & d) ? d : 0;
      // The first exchange also waits for `start` itself: ranks that did not
      // fold anything in take part for the first time here, and must wait
      // for their own gradients (an executor keeps only a rank's own
      // dependencies).
      Deps deps = next(start);
      if (d == pof2 / 2 && extra > 0)
        deps.insert(deps.end(), start.begin(), start.end());
      const int x = storedTransfer(f, block * d, step++, 0, deps);
      last = reduce(x, block * d, 1, {x});
    }
    // Allgather by recursive doubling: the same partners in reverse, each
    // sending its whole window.
    for (auto it = distances.rbegin(); it != distances.rend(); ++it) {
      const int d = *it;
      const auto f = flowsOfStep(step, [&] {
        std::vector<PlanFlow> v;
        for (int i = 0; i < pof2; ++i)
          v.push_back({worker(i), worker(i ^ d), window[static_cast<size_t>(i)]});
        return v;
      });
      for (int i = 0; i < pof2; ++i)
        window[static_cast<size_t>(i)] -= (i & d) ? d : 0;
      last = storedTransfer(f, block * d, step++, 0, next(start));
    }
    if (extra > 0) {
      const auto f = flowsOfStep(step, [&] {
        std::vector<PlanFlow> v;
        for (int i = 0; i < extra; ++i)
          v.push_back({2 * i, 2 * i + 1, 0});
        return v;
      });
      last = storedTransfer(f, n, step++, 0, next(start));
    }
    return end(last);
  }

  // Flat broadcast from root: one step.
  int broadcast(int root, Bytes n, BufferKind buffer, int layer, const Deps& start) {
    begin(simple("broadcast", buffer, n, layer));
    return end(transfer(PatternKind::kScatter, root, PartRule::kSource, n, 0, 0, start));
  }

  // Every rank's n bytes to every other rank: one all-to-all step.
  int allGatherDirect(Bytes perRank, BufferKind buffer, int layer, const Deps& start) {
    begin(simple("allgather", buffer, perRank * k_, layer));
    collective().parts = k_;
    return end(transfer(PatternKind::kAllToAll, -1, PartRule::kSource, perRank, 0, 0, start));
  }

  // Streamed reduce into root: gather segment j, sum it, pipelined.
  int reduceToRoot(int root, Bytes n, BufferKind buffer, int layer, const Deps& start) {
    const int segs = segmentCount(n, segment_);
    const Bytes s = n / segs;
    auto c = simple("reduce", buffer, n, layer);
    c.segments = segs;
    begin(c);
    int g = -1, r = -1;
    for (int j = 0; j < segs; ++j) {
      g = transfer(PatternKind::kGather, root, PartRule::kSource, s, 0, j, j > 0 ? Deps{g} : start);
      r = reduce(g, s, k_ - 1, {g, r});
    }
    return end(r);
  }

  // Direct reduce-scatter of n bytes: per segment of a chunk, an all-to-all
  // step then the sum of K-1 chunks, pipelined.
  int reduceScatterDirect(Bytes n, BufferKind buffer, int layer, const Deps& start) {
    const Bytes chunk = n / k_;
    const int segs = segmentCount(chunk, segment_);
    const Bytes s = chunk / segs;
    auto c = simple("reduce-scatter", buffer, n, layer);
    c.parts = k_;
    c.segments = segs;
    begin(c);
    int x = -1, r = -1;
    for (int j = 0; j < segs; ++j) {
      x = transfer(PatternKind::kAllToAll, -1, PartRule::kDestination, s, 0, j,
                   j > 0 ? Deps{x} : start);
      r = reduce(x, s, k_ - 1, {x, r});
    }
    return end(r);
  }

 private:
  Collective simple(const char* algorithm, BufferKind buffer, Bytes n, int layer) const {
    Collective c;
    c.algorithm = algorithm;
    c.buffer = buffer;
    c.bytes = n;
    c.firstLayer = c.lastLayer = layer;
    c.round = round_;
    return c;
  }

  const Topology& topology(const char* algorithm) const {
    if (!topo_)
      throw InvariantError(
          fmt::format("the {} allreduce was lowered without a cluster", algorithm));
    return *topo_;
  }

  Plan& plan_;
  int k_;
  Bytes segment_;
  const Topology* topo_;
  CommParams comm_;
  std::map<std::string, FlowRange> stored_;  // stored(): flows by key
  int current_ = -1;
  int round_ = -1;
  int iteration_ = 0;
  int job_ = -1;
  int micro_ = -1;
};

// The group collective a tensor-parallel layer's TpComm is.
inline GroupOp groupOpOf(TpCollective c) {
  switch (c) {
    case TpCollective::kReduceScatter:
      return Builder::GroupOp::kReduceScatter;
    case TpCollective::kAllGather:
      return Builder::GroupOp::kAllGather;
    default:
      return Builder::GroupOp::kAllReduce;
  }
}

// A bucket of local gradients (cost/src/sharded.cpp, GradientSyncs): layers
// [first, last] of a tensor-parallel layout.
struct TpBucket {
  double params = 0;
  int first = 0, last = 0;
};
// The buckets of layers [first, last), last layers first: one per layer
// with weights without overlap filling up to StrategyOptions::bucket bytes.
inline std::vector<TpBucket> gradientBucketsOf(const TpLayout& tp, const StrategyOptions& o,
                                               double e, int first, int last) {
  std::vector<TpBucket> out;
  bool open = false;
  for (int i = last - 1; i >= first; --i) {
    const double p = tp.layers[static_cast<size_t>(i)].params;
    if (p <= 0)
      continue;
    if (!open) {
      out.push_back({0, i, i});
      open = true;
    }
    out.back().params += p;
    out.back().first = i;
    if (o.overlap && out.back().params * e >= o.bucket.value())
      open = false;
  }
  return out;
}

// Parameters of layers [first, last).
double paramsIn(const Network& net, int first, int last);

// Backprop of data-parallel layers [first, last) on every worker, then their
// gradient synchronisation, one bucket (strategy.h) after another: each
// bucket's allreduce starts when every worker has the bucket's last gradient
// (overlap) or has finished backprop (no overlap). `prev[w]` is each worker's
// last task so far; on return it is the worker's last backprop task. Returns
// the task that completes the synchronisation (-1 when none).
int backpropWithSync(Builder& b, const Network& net, const Scenario& sc, int first, int last,
                     AllreduceAlgorithm algorithm, std::vector<int>& prev);

// One lowering per strategy family, each in the file named after it; a ps
// plan holds `iterations` steps, the others one.
using LowerStrategy = void (*)(Builder& b, const Network& net, const Scenario& sc, int iterations);
// Ring with tensor parallelism, ZeRO or recomputation (sharded.cpp): the
// tasks of cost/src/sharded.cpp's step; lowerDataParallel hands it such a
// scenario.
void lowerSharded(Builder& b, const Network& net, const Scenario& sc);
// Pipelines and gradient accumulation (pipeline.cpp): `chunks`, the first
// layer of each of the pp x V chunks and the layer count (pipelineChunks).
void lowerPipeline(Builder& b, const Network& net, const Scenario& sc,
                   const std::vector<int>& chunks);
// Without a cluster to time the layers on: the chunks balanced by FLOPs.
std::vector<int> pipelineChunksByFlops(const Network& net, const Scenario& sc);
void lowerDataParallel(Builder& b, const Network& net, const Scenario& sc,
                       int iterations);  // data_parallel.cpp
void lowerParamServer(Builder& b, const Network& net, const Scenario& sc,
                      int iterations);  // param_server.cpp
void lowerWeirdTrick(Builder& b, const Network& net, const Scenario& sc,
                     int iterations);  // weird_trick.cpp

}  // namespace strata::planning

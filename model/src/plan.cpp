// Lowering strategies and collectives to Plans. Each collective's lowering
// mirrors its cost formula in collectives.cpp (same stages, same pipelining),
// and each strategy's lowering mirrors its schedule in estimate.cpp, so that a
// simulator with contention off reproduces the analytic model.
#include "strata/model/plan.h"

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
#include "strata/model/quantity_text.h"

namespace strata {

std::string_view toString(TaskKind kind) {
  switch (kind) {
    case TaskKind::kCompute:
      return "compute";
    case TaskKind::kTransfer:
      return "transfer";
    case TaskKind::kReduce:
      return "reduce";
    case TaskKind::kUpdate:
      return "update";
  }
  return "?";
}

std::string_view toString(PatternKind kind) {
  switch (kind) {
    case PatternKind::kRing:
      return "ring";
    case PatternKind::kAllToAll:
      return "all-to-all";
    case PatternKind::kGather:
      return "gather";
    case PatternKind::kScatter:
      return "scatter";
    case PatternKind::kPairs:
      return "pairs";
  }
  return "?";
}

std::string_view toString(BufferKind kind) {
  switch (kind) {
    case BufferKind::kWeightGradients:
      return "weight gradients";
    case BufferKind::kActivations:
      return "activations";
    case BufferKind::kActivationGradients:
      return "activation gradients";
    case BufferKind::kWeights:
      return "weights";
    case BufferKind::kLossStatistics:
      return "loss statistics";
  }
  return "?";
}

size_t Plan::flowCountOf(const Task& t) const {
  const size_t k = static_cast<size_t>(scenario.workers);
  if (t.kind != TaskKind::kTransfer && t.kind != TaskKind::kReduce)
    return 0;
  switch (t.pattern) {
    case PatternKind::kRing:
      return k > 1 && (t.ringSpan == 0 || t.ringSpan > t.ringStride) ? k : 0;
    case PatternKind::kAllToAll:
      return k * (k - 1);
    case PatternKind::kGather:
    case PatternKind::kScatter:
      return k - 1;
    case PatternKind::kPairs:
      return t.flowCount;
  }
  return 0;
}

std::vector<PlanFlow> Plan::flowsOf(const Task& t) const {
  std::vector<PlanFlow> f;
  const int k = scenario.workers;
  if (t.kind != TaskKind::kTransfer && t.kind != TaskKind::kReduce)
    return f;
  f.reserve(flowCountOf(t));
  // A ring's chunks are numbered by position in the flow's own ring.
  const int span = t.ringSpan > 0 ? t.ringSpan : k, stride = t.ringSpan > 0 ? t.ringStride : 1;
  const int size = span / stride;
  auto part = [&](int src, int dst) {
    const int pos = src % span / stride;
    switch (t.parts) {
      case PartRule::kRingReduceScatter:
        return ((pos - t.step) % size + size) % size;
      case PartRule::kRingAllGather:
        return ((pos + 1 - (t.step - (size - 1))) % size + size) % size;
      case PartRule::kDestination:
        return dst;
      case PartRule::kSource:
        return src;
      case PartRule::kExplicit:
        return 0;
    }
    return 0;
  };
  switch (t.pattern) {
    case PatternKind::kRing:
      if (flowCountOf(t) > 0)
        for (int r = 0; r < k; ++r) {
          const int next = ringNext(r, span, stride);
          f.push_back({r, next, part(r, next)});
        }
      break;
    case PatternKind::kAllToAll:
      for (int i = 0; i < k; ++i)
        for (int j = 0; j < k; ++j)
          if (i != j)
            f.push_back({i, j, part(i, j)});
      break;
    case PatternKind::kGather:
      for (int i = 0; i < k; ++i)
        if (i != t.root)
          f.push_back({i, t.root, part(i, t.root)});
      break;
    case PatternKind::kScatter:
      for (int i = 0; i < k; ++i)
        if (i != t.root)
          f.push_back({t.root, i, part(t.root, i)});
      break;
    case PatternKind::kPairs:
      f.assign(flows.begin() + t.flowBegin, flows.begin() + t.flowBegin + t.flowCount);
      break;
  }
  return f;
}

double Plan::totalFlows() const {
  double n = 0;
  for (const auto& t : tasks)
    n += double(flowCountOf(t));
  return n;
}

size_t Plan::count(TaskKind kind) const {
  size_t n = 0;
  for (const auto& t : tasks)
    n += t.kind == kind ? 1 : 0;
  return n;
}

namespace {

using Deps = std::vector<int>;

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
    const auto& x = plan_.tasks[static_cast<size_t>(transfer)];
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
    c.algorithm = std::string(toString(algorithm));
    c.buffer = buffer;
    c.bytes = n;
    c.firstLayer = firstLayer;
    c.lastLayer = lastLayer;
    c.round = round_;
    switch (algorithm) {
      case AllreduceAlgorithm::kRing:
        return ring(c, n, start);
      case AllreduceAlgorithm::kNaive:
        return naive(c, n, start);
      case AllreduceAlgorithm::kDirect:
        return direct(c, n, start);
      case AllreduceAlgorithm::kHalvingDoubling:
        return halvingDoubling(c, n, start);
      case AllreduceAlgorithm::kHierarchical:
        return hierarchical(c, n, start);
      case AllreduceAlgorithm::kTree:
        return tree(c, n, start);
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
  int ringPhase(int span, int stride, Bytes chunk, bool reduceScatter, int after,
                const Deps& start) {
    const int size = span / stride;
    const int segs = segmentCount(chunk, segment_);
    const Bytes s = chunk / segs;
    int last = after;
    auto ringTransfer = [&](PartRule rule, int step, int j, const Deps& d) {
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

  // Ring: reduce-scatter then allgather around the ring of all K workers.
  int ring(Collective c, Bytes n, const Deps& start) {
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
  int hierarchical(Collective c, Bytes n, const Deps& start) {
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
  int tree(Collective c, Bytes n, const Deps& start) {
    const auto stages = doubleBinaryTree(k_);
    const size_t count = stages.size();
    const Bytes half = n / 2;
    const int segs = segmentCount(half, segment_);
    const Bytes s = half / segs;
    c.parts = 2;
    c.segments = segs;
    begin(c);
    // Transfer stage p (its step): up stage p for p < count, else down stage
    // 2 count - 1 - p, whose flows are up stage p's reversed.
    std::vector<FlowRange> ranges;
    for (size_t p = 0; p < 2 * count; ++p) {
      const bool down = p >= count;
      const size_t i = down ? 2 * count - 1 - p : p;
      ranges.push_back(stored(fmt::format("tree {} {}", down ? "down" : "up", i), [&] {
        const auto& st = stages[i];
        std::vector<PlanFlow> v;
        for (size_t f = 0; f < st.flows.size(); ++f) {
          const auto& fl = st.flows[f];
          v.push_back(down ? PlanFlow{fl.dst, fl.src, st.tree[f]}
                           : PlanFlow{fl.src, fl.dst, st.tree[f]});
        }
        return v;
      }));
    }
    const std::vector<uint64_t> none(2 * count, 0);
    const auto& conflicts = topo_ ? topo_->treeConflicts() : none;
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
    return end(last);
  }

  // Naive reducer: per segment, gather into rank 0, sum there, broadcast;
  // the three stages pipeline over segments.
  int naive(Collective c, Bytes n, const Deps& start) {
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
  int direct(Collective c, Bytes n, const Deps& start) {
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
  int halvingDoubling(Collective c, Bytes n, const Deps& start) {
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
};

double paramsIn(const Network& net, int first, int last) {
  double p = 0;
  for (int i = first; i < last; ++i)
    p += double(net.layers[static_cast<size_t>(i)].params);
  return p;
}

// Backprop of data-parallel layers [first, last) on every worker, then their
// gradient synchronisation, one bucket (strategy.h) after another: each
// bucket's allreduce starts when every worker has the bucket's last gradient
// (overlap) or has finished backprop (no overlap). `prev[w]` is each worker's
// last task so far; on return it is the worker's last backprop task. Returns
// the task that completes the synchronisation (-1 when none).
int backpropWithSync(Builder& b, const Network& net, const Scenario& sc, int first, int last,
                     AllreduceAlgorithm algorithm, std::vector<int>& prev) {
  const int k = sc.workers;
  const double e = elementBytes(sc.options.element);
  // ready[l - first][w]: worker w's bwd_weights task of layer l.
  std::vector<std::vector<int>> ready(static_cast<size_t>(last - first));
  for (int w = 0; w < b.computeWorkers(); ++w) {
    auto& p = prev[static_cast<size_t>(w)];
    for (int l = last - 1; l >= first; --l) {
      const auto& layer = net.layers[static_cast<size_t>(l)];
      if (layer.computesWeightGradient()) {
        p = b.compute(w, l, Phase::kBwdWeights, sc.batchPerWorker, 1.0, {p});
        ready[static_cast<size_t>(l - first)].push_back(p);
      }
      if (!layer.readsNetworkInput())
        p = b.compute(w, l, Phase::kBwdData, sc.batchPerWorker, 1.0, {p});
    }
  }
  if (k == 1)
    return -1;
  int done = -1;
  for (const auto& bucket : gradientBuckets(net, first, last, sc.options)) {
    Deps start = sc.options.overlap ? ready[static_cast<size_t>(bucket.firstLayer - first)] : prev;
    start.push_back(done);
    done = b.allReduce(algorithm, Bytes(bucket.params * e), BufferKind::kWeightGradients,
                       bucket.firstLayer, bucket.lastLayer, start);
  }
  return done;
}

void lowerDataParallel(Builder& b, const Network& net, const Scenario& sc) {
  const int k = sc.workers;
  const int layers = static_cast<int>(net.layers.size());
  std::vector<int> prev(static_cast<size_t>(k), -1);
  for (int w = 0; w < b.computeWorkers(); ++w)
    for (int l = 0; l < layers; ++l)
      prev[static_cast<size_t>(w)] =
          b.compute(w, l, Phase::kFwd, sc.batchPerWorker, 1.0, {prev[static_cast<size_t>(w)]});
  const int synced = backpropWithSync(b, net, sc, 0, layers, gradientAllreduce(sc), prev);
  const double params = paramsIn(net, 0, layers);
  for (int w = 0; w < b.computeWorkers(); ++w)
    b.update(w, 0, layers - 1, params, {prev[static_cast<size_t>(w)], synced});
}

// ps (mshadow-ps), steps back to back. A bucket's job (PsJob): push its
// gradients (direct reduce-scatter: worker j is the server of chunk j and sums
// it), each server updates its chunk of the weights, pull them (allgather of
// the updated chunks into every worker's weights). A push starts when every
// worker's backprop has left the bucket's layers (their weights are then free
// to be overwritten by the pull), or when backprop is over without overlap.
// Step s's forward of a layer waits only for the pull of its bucket from step
// s-1-S (PullWait); estimate.cpp prices the same schedule.
void lowerParamServer(Builder& b, const Network& net, const Scenario& sc, int iterations) {
  const int k = sc.workers;
  const int layers = static_cast<int>(net.layers.size());
  const double e = elementBytes(sc.options.element);
  const int stale = sc.options.staleness;
  const int servers = sc.options.psServers;
  const int levels = sc.options.psNode > 0 ? 2 : 1;
  const int perNode = std::min(k, std::max(1, sc.options.psNode));  // two levels: node size
  const int nodes = (k + perNode - 1) / perNode;
  auto leaderOf = [&](int w) { return w / perNode * perNode; };
  const auto buckets = psKeys(net, sc.options);
  const int nb = static_cast<int>(buckets.size());
  std::vector<int> bucketOf(static_cast<size_t>(layers), -1);
  for (int j = 0; j < nb; ++j)
    for (int l = buckets[static_cast<size_t>(j)].firstLayer;
         l <= buckets[static_cast<size_t>(j)].lastLayer; ++l)
      bucketOf[static_cast<size_t>(l)] = j;
  // pulled[s][j]: the tasks completing step s's pull of key j (two levels:
  // the leaders' allgather and the nodes' broadcasts, which not every worker
  // takes part in).
  std::vector<std::vector<Deps>> pulled(static_cast<size_t>(iterations),
                                        std::vector<Deps>(static_cast<size_t>(nb)));
  std::vector<int> prev(static_cast<size_t>(k), -1);
  auto job = [&](int s, int j, const Deps& start) {
    const auto& bk = buckets[static_cast<size_t>(j)];
    auto& plan = b.plan();
    PsJob pj;
    pj.priority = sc.options.psPriority == PsPriority::kFirstNeeded ? layers - bk.firstLayer : 0;
    pj.firstLayer = bk.firstLayer;
    pj.lastLayer = bk.lastLayer;
    pj.iteration = s;
    pj.firstTask = static_cast<uint32_t>(plan.tasks.size());
    b.setJob(static_cast<int>(plan.jobs.size()));
    const Bytes n(bk.params * e);
    int pull = -1;
    auto collective = [&](const char* name, BufferKind buffer, int parts) {
      Collective c;
      c.algorithm = name;
      c.buffer = buffer;
      c.bytes = n;
      c.firstLayer = bk.firstLayer;
      c.lastLayer = bk.lastLayer;
      c.parts = parts;
      return c;
    };
    // One step of explicit flows with its sum (inputs > 0), as a collective.
    auto step = [&](const char* name, BufferKind buffer, int parts, Bytes bytes,
                    const std::vector<PlanFlow>& flows, int inputs, const Deps& deps) {
      b.begin(collective(name, buffer, parts));
      const int x =
          b.transfer(PatternKind::kPairs, -1, PartRule::kExplicit, bytes, 0, 0, deps, flows);
      return b.end(inputs > 0 ? b.reduce(x, bytes, inputs, {x}) : x);
    };
    if (levels == 2) {
      // Level 1: each worker's whole key to its node's leader, which sums
      // them; level 2: the leaders reduce-scatter it (leader of node m is
      // the server of chunk m of M), update, allgather; level 1 again: each
      // leader sends the new weights to its node. Stages with no flow (one
      // node, or one worker per node) are left out.
      std::vector<PlanFlow> in, out, across, back;
      for (int w = 0; w < k; ++w)
        if (w != leaderOf(w)) {
          in.push_back({w, leaderOf(w), 0});
          out.push_back({leaderOf(w), w, 0});
        }
      for (int a = 0; a < nodes; ++a)
        for (int c = 0; c < nodes; ++c)
          if (a != c) {
            across.push_back({a * perNode, c * perNode, c});
            back.push_back({c * perNode, a * perNode, c});
          }
      // A leader alone in its node takes no part in level 1: its level 2
      // also waits for its own backprop (`start`).
      Deps d = start;
      if (!in.empty())
        d.push_back(
            step("node-reduce", BufferKind::kWeightGradients, 1, n, in, perNode - 1, start));
      if (!across.empty())
        d = {step("reduce-scatter", BufferKind::kWeightGradients, nodes, n / nodes, across,
                  nodes - 1, d)};
      Deps updated;
      for (int m = 0; m < nodes; ++m) {
        updated.push_back(b.update(m * perNode, bk.firstLayer, bk.lastLayer, bk.params / nodes, d));
        plan.tasks.back().part = m;
        plan.tasks.back().shards = nodes;
      }
      Deps done;
      if (!across.empty())
        done.push_back(
            pull = step("allgather", BufferKind::kWeights, nodes, n / nodes, back, 0, updated));
      if (!out.empty())
        done.push_back(pull = step("node-broadcast", BufferKind::kWeights, 1, n, out, 0,
                                   across.empty() ? updated : done));
      b.setJob(-1);
      pj.lastTask = static_cast<uint32_t>(pull);
      plan.jobs.push_back(pj);
      pulled[static_cast<size_t>(s)][static_cast<size_t>(j)] = done;
      return;
    } else if (servers == 0) {
      const int push = b.reduceScatterDirect(n, BufferKind::kWeightGradients, bk.firstLayer, start);
      plan.collectives.back().lastLayer = bk.lastLayer;
      Deps updated;
      for (int w = 0; w < k; ++w) {
        updated.push_back(b.update(w, bk.firstLayer, bk.lastLayer, bk.params / k, {push}));
        plan.tasks.back().part = w;
        plan.tasks.back().shards = k;
      }
      pull = b.allGatherDirect(n / k, BufferKind::kWeights, bk.firstLayer, updated);
      plan.collectives.back().lastLayer = bk.lastLayer;
    } else {
      // Dedicated servers (ranks K..K+N-1): every worker sends chunk j of N
      // to server j, which sums the K chunks, updates its chunk and sends it
      // back to every worker. One step each way, unsegmented.
      std::vector<PlanFlow> up, down;
      for (int w = 0; w < k; ++w)
        for (int j2 = 0; j2 < servers; ++j2) {
          up.push_back({w, k + j2, j2});
          down.push_back({k + j2, w, j2});
        }
      const int push =
          step("push", BufferKind::kWeightGradients, servers, n / servers, up, k, start);
      Deps updated;
      for (int j2 = 0; j2 < servers; ++j2) {
        updated.push_back(
            b.update(k + j2, bk.firstLayer, bk.lastLayer, bk.params / servers, {push}));
        plan.tasks.back().part = j2;
        plan.tasks.back().shards = servers;
      }
      pull = step("pull", BufferKind::kWeights, servers, n / servers, down, 0, updated);
    }
    b.setJob(-1);
    pj.lastTask = static_cast<uint32_t>(pull);
    plan.jobs.push_back(pj);
    pulled[static_cast<size_t>(s)][static_cast<size_t>(j)] = {pull};
  };
  const double params = paramsIn(net, 0, layers);
  for (int s = 0; s < iterations; ++s) {
    b.setIteration(s);
    const int waitFor = s - 1 - stale;
    for (int w = 0; w < k; ++w)
      for (int l = 0; l < layers; ++l) {
        const int j = bucketOf[static_cast<size_t>(l)];
        auto& p = prev[static_cast<size_t>(w)];
        Deps d{p};
        if (k > 1 && waitFor >= 0 && j >= 0) {
          const auto& pl = pulled[static_cast<size_t>(waitFor)][static_cast<size_t>(j)];
          d.insert(d.end(), pl.begin(), pl.end());
        }
        p = b.compute(w, l, Phase::kFwd, sc.batchPerWorker, 1.0, d);
      }
    // Backprop layer by layer on every worker; a bucket's job once all have
    // left its first layer.
    // With staleness a worker may reach a layer's backprop before the step
    // before has synchronised it: its gradients (one buffer per layer) wait
    // for that job.
    for (int l = layers - 1; l >= 0; --l) {
      const auto& layer = net.layers[static_cast<size_t>(l)];
      const int j = bucketOf[static_cast<size_t>(l)];
      // A tied fc writes its embedding's gradient: it waits for that key.
      const int jg = bucketOf[static_cast<size_t>(gradientOwner(net, l))];
      const Deps previous = k > 1 && stale > 0 && s > 0 && jg >= 0
                                ? pulled[static_cast<size_t>(s - 1)][static_cast<size_t>(jg)]
                                : Deps{};
      for (int w = 0; w < k; ++w) {
        auto& p = prev[static_cast<size_t>(w)];
        if (layer.computesWeightGradient()) {
          Deps d{p};
          d.insert(d.end(), previous.begin(), previous.end());
          p = b.compute(w, l, Phase::kBwdWeights, sc.batchPerWorker, 1.0, d);
        }
        if (!layer.readsNetworkInput())
          p = b.compute(w, l, Phase::kBwdData, sc.batchPerWorker, 1.0, {p});
      }
      if (k > 1 && sc.options.overlap && j >= 0 && buckets[static_cast<size_t>(j)].firstLayer == l)
        job(s, j, prev);
    }
    if (k == 1) {
      for (int w = 0; w < k; ++w)
        prev[static_cast<size_t>(w)] =
            b.update(w, 0, layers - 1, params, {prev[static_cast<size_t>(w)]});
    } else if (!sc.options.overlap) {
      for (int j = 0; j < nb; ++j)
        job(s, j, prev);
    }
  }
  b.setIteration(0);
}

void lowerWeirdTrick(Builder& b, const Network& net, const Scenario& sc) {
  const int k = sc.workers;
  const int mp = net.modelParallelFrom;
  const int layers = static_cast<int>(net.layers.size());
  const double bw = sc.batchPerWorker;
  const double e = elementBytes(sc.options.element);
  const double frac = 1.0 / k;
  const auto strategy = sc.strategy;
  const int rounds = strategy == Strategy::kOwtA ? 1 : k;
  const double batch = strategy == Strategy::kOwtA ? k * bw : bw;
  const double boundary = double(net.layers[static_cast<size_t>(mp)].inShape.elements()) * e;
  const bool perRoundUpdate =
      strategy != Strategy::kOwtA && sc.options.fcUpdate == FcUpdate::kRound;
  const double fcParams = paramsIn(net, mp, layers);
  std::vector<int> prev(static_cast<size_t>(k), -1);

  // Conv forward on b examples.
  for (int w = 0; w < k; ++w)
    for (int l = 0; l < mp; ++l)
      prev[static_cast<size_t>(w)] =
          b.compute(w, l, Phase::kFwd, bw, 1.0, {prev[static_cast<size_t>(w)]});
  const std::vector<int> convForwardDone = prev;

  // The FC phase: a flow shop of rounds (activations in, FC compute with its
  // inner exchanges, gradients back), as in estimate.cpp. Round r+1's
  // activations are issued when round r starts (one round ahead: an in-order
  // communication stream then moves them while round r computes, and a
  // receiver needs two round buffers).
  std::vector<int> in(static_cast<size_t>(rounds), -1);
  auto issueIn = [&](int r) {
    if (k == 1 || r >= rounds)
      return;
    b.setRound(r);
    const Deps start = r > 0 ? Deps{in[static_cast<size_t>(r - 1)]} : convForwardDone;
    if (strategy == Strategy::kOwtB) {
      in[static_cast<size_t>(r)] =
          b.broadcast(r, Bytes(bw * boundary), BufferKind::kActivations, mp, start);
    } else {
      const double perRound = strategy == Strategy::kOwtA ? bw : bw / k;
      in[static_cast<size_t>(r)] =
          b.allGatherDirect(Bytes(perRound * boundary), BufferKind::kActivations, mp, start);
    }
  };
  issueIn(0);
  int lastBack = -1;
  for (int r = 0; r < rounds; ++r) {
    issueIn(r + 1);
    b.setRound(r);
    const int lastIn = in[static_cast<size_t>(r)];
    for (int w = 0; w < k; ++w)
      prev[static_cast<size_t>(w)] =
          b.compute(w, mp, Phase::kFwd, batch, frac, {prev[static_cast<size_t>(w)], lastIn});
    // Forward through the model-parallel layers.
    for (int l = mp + 1; l < layers; ++l) {
      const auto& layer = net.layers[static_cast<size_t>(l)];
      int exchange = -1;
      if (k > 1 && layer.hasWeights())
        exchange = b.allGatherDirect(Bytes(batch * double(layer.inShape.elements()) * frac * e),
                                     BufferKind::kActivations, l - 1, prev);
      for (int w = 0; w < k; ++w)
        prev[static_cast<size_t>(w)] =
            b.compute(w, l, Phase::kFwd, batch, frac, {prev[static_cast<size_t>(w)], exchange});
      if (k > 1 && layer.kind == LayerKind::kSoftmax) {
        const int stats = b.allReduce(AllreduceAlgorithm::kDirect, Bytes(2 * batch * e),
                                      BufferKind::kLossStatistics, l, l, prev);
        for (auto& p : prev)
          p = stats;
      }
    }
    // Backward through them.
    for (int l = layers - 1; l >= mp; --l) {
      const auto& layer = net.layers[static_cast<size_t>(l)];
      for (int w = 0; w < k; ++w) {
        auto& p = prev[static_cast<size_t>(w)];
        if (layer.hasWeights())
          p = b.compute(w, l, Phase::kBwdWeights, batch, frac, {p});
        p = b.compute(w, l, Phase::kBwdData, batch, frac, {p});
      }
      if (k > 1 && l > mp && layer.hasWeights()) {
        const int scattered =
            b.reduceScatterDirect(Bytes(batch * double(layer.inShape.elements()) * e),
                                  BufferKind::kActivationGradients, l - 1, prev);
        for (auto& p : prev)
          p = scattered;
      }
    }
    if (perRoundUpdate)
      for (int w = 0; w < k; ++w)
        prev[static_cast<size_t>(w)] =
            b.update(w, mp, layers - 1, fcParams * frac, {prev[static_cast<size_t>(w)]});
    if (k > 1) {
      Deps backStart = prev;
      backStart.push_back(lastBack);
      if (strategy == Strategy::kOwtB) {
        lastBack = b.reduceToRoot(r, Bytes(bw * boundary), BufferKind::kActivationGradients, mp - 1,
                                  backStart);
      } else {
        const double perRound = strategy == Strategy::kOwtA ? bw : bw / k;
        lastBack = b.reduceScatterDirect(Bytes(k * perRound * boundary),
                                         BufferKind::kActivationGradients, mp - 1, backStart);
      }
    }
  }
  b.setRound(-1);
  // Conv backprop starts when every round's gradients are back.
  if (lastBack >= 0)
    for (auto& p : prev)
      p = lastBack;
  const int synced = backpropWithSync(b, net, sc, 0, mp, sc.options.convSync, prev);
  for (int w = 0; w < k; ++w) {
    int p = b.update(w, 0, mp - 1, paramsIn(net, 0, mp), {prev[static_cast<size_t>(w)], synced});
    if (!perRoundUpdate)
      p = b.update(w, mp, layers - 1, fcParams * frac, {p});
    prev[static_cast<size_t>(w)] = p;
  }
}

}  // namespace

// Mirrors the lowering above, counting instead of building: compute and
// update tasks per worker and layer, and each collective's steps (ring:
// 3 (K-1) per segment, direct and naive: 3 per segment, reduce-scatter and
// reduce: 2 per segment, halving-doubling: 3 per exchange plus the folds).
double estimatePlanTasks(const Network& net, const Scenario& sc, int iterations,
                         PlanDetail detail) {
  const double k = sc.workers;
  const int layers = static_cast<int>(net.layers.size());
  const double e = elementBytes(sc.options.element);
  const double segment = sc.options.segment.value();
  auto segs = [&](double bytes) {
    return segment <= 0 || bytes <= segment ? 1.0 : std::ceil(bytes / segment);
  };
  auto allReduceTasks = [&](AllreduceAlgorithm a, double n) {
    switch (a) {
      case AllreduceAlgorithm::kRing:
        return 3 * (k - 1) * segs(n / k);
      case AllreduceAlgorithm::kNaive:
        return 3 * segs(n);
      case AllreduceAlgorithm::kDirect:
        return 3 * segs(n / k);
      case AllreduceAlgorithm::kHalvingDoubling:
        return 3 * std::ceil(std::log2(k)) + 3;
      case AllreduceAlgorithm::kHierarchical:
      case AllreduceAlgorithm::kAuto:  // at most the ring's
        return 3 * (k - 1) * segs(n / k);
      case AllreduceAlgorithm::kTree:
        return 3 * 2 * std::ceil(std::log2(k) + 1) * segs(n / 2);
    }
    return 0.0;
  };
  // Workers whose compute and update tasks are in the plan.
  const double cw = detail == PlanDetail::kRepresentative ? 1 : k;
  // Backprop of [first, last) on every worker and its gradient buckets.
  auto backprop = [&](int first, int last, AllreduceAlgorithm a) {
    double t = 0;
    for (int l = first; l < last; ++l) {
      const auto& layer = net.layers[static_cast<size_t>(l)];
      t += cw * ((layer.hasWeights() ? 1 : 0) + (layer.readsNetworkInput() ? 0 : 1));
    }
    if (k > 1)
      for (const auto& bucket : gradientBuckets(net, first, last, sc.options))
        t += allReduceTasks(a, bucket.params * e);
    return t;
  };
  if (sc.strategy == Strategy::kPs) {
    // Per step: the compute tasks; per bucket a push (2 per segment of a
    // chunk), K server updates and a one-step pull; one update per step alone.
    double step = k * layers;
    for (int l = 0; l < layers; ++l) {
      const auto& layer = net.layers[static_cast<size_t>(l)];
      step += k * ((layer.hasWeights() ? 1 : 0) + (layer.readsNetworkInput() ? 0 : 1));
    }
    if (k > 1) {
      const double nodes =
          sc.options.psNode > 0 ? std::ceil(k / std::min(k, double(sc.options.psNode))) : 0;
      for (const auto& bucket : psKeys(net, sc.options))
        step += sc.options.psNode > 0      ? 6 + nodes
                : sc.options.psServers > 0 ? 3 + sc.options.psServers
                                           : 2 * segs(bucket.params * e / k) + k + 1;
    } else {
      step += 1;
    }
    return step * (k > 1 && iterations > 0 ? iterations : defaultPlanIterations(sc));
  }
  if (!isModelParallel(sc.strategy))
    return cw * layers + backprop(0, layers, gradientAllreduce(sc)) + cw;
  const int mp = net.modelParallelFrom;
  const bool owtA = sc.strategy == Strategy::kOwtA;
  const double rounds = owtA ? 1 : k;
  const double bw = sc.batchPerWorker;
  const double batch = owtA ? k * bw : bw;
  const double boundary = double(net.layers[static_cast<size_t>(mp)].inShape.elements()) * e;
  double round = k;  // the first model-parallel layer's fwd
  if (k > 1)
    round += 1;  // activations in
  for (int l = mp + 1; l < layers; ++l) {
    const auto& layer = net.layers[static_cast<size_t>(l)];
    round += k + (k > 1 && layer.hasWeights() ? 1 : 0);
    if (k > 1 && layer.kind == LayerKind::kSoftmax)
      round += allReduceTasks(AllreduceAlgorithm::kDirect, 2 * batch * e);
  }
  for (int l = layers - 1; l >= mp; --l) {
    const auto& layer = net.layers[static_cast<size_t>(l)];
    round += k * (layer.hasWeights() ? 2 : 1);
    if (k > 1 && l > mp && layer.hasWeights())
      round += 2 * segs(batch * double(layer.inShape.elements()) * e / k);
  }
  const bool perRoundUpdate = !owtA && sc.options.fcUpdate == FcUpdate::kRound;
  if (perRoundUpdate)
    round += k;
  if (k > 1)
    round += sc.strategy == Strategy::kOwtB ? 2 * segs(bw * boundary)
                                            : 2 * segs((owtA ? bw : bw / k) * boundary);
  const double updates = perRoundUpdate ? k : 2 * k;
  return k * mp + rounds * round + backprop(0, mp, sc.options.convSync) + updates;
}

void checkPlanSize(const Network& network, const Scenario& sc, const Limits& limits, int iterations,
                   PlanDetail detail) {
  const double tasks = estimatePlanTasks(network, sc, iterations, detail);
  if (tasks <= double(limits.maxPlanTasks))
    return;
  // Name what makes the plan large: a ps run's steps when one step fits,
  // segments when they dominate, else workers.
  if (iterations > 1 && estimatePlanTasks(network, sc, 1) * iterations <= tasks &&
      estimatePlanTasks(network, sc, 1) <= double(limits.maxPlanTasks))
    throw OptionError(
        "--steps",
        fmt::format("a ps plan holds every step it runs: {} steps of {} ({} workers) would be "
                    "about {:.3g} tasks, over the limit of {}; run fewer steps, or raise the "
                    "limit with {} N ({} lifts every limit)",
                    iterations, network.name, sc.workers, tasks, limits.maxPlanTasks,
                    kMaxTasksOption, kAllowLargeOption));
  Scenario unsegmented = sc;
  unsegmented.options.segment = Bytes(0);
  const bool bySegments = estimatePlanTasks(network, unsegmented, iterations, detail) * 2 < tasks;
  const std::string option = bySegments ? "--segment" : "--workers";
  const std::string cure =
      bySegments ? fmt::format("use larger segments than {} (or 0 for unsegmented transfers)",
                               formatBytes(sc.options.segment))
                 : std::string("use fewer workers");
  throw OptionError(
      option, fmt::format("the plan of {} ({}, {} workers) would have about {:.3g} tasks, over the "
                          "limit of {} (about {} of memory); {}, or raise the limit with {} N ({} "
                          "lifts every limit)",
                          network.name, toString(sc.strategy), sc.workers, tasks,
                          limits.maxPlanTasks, formatBytes(Bytes(tasks * kBytesPerPlanTask)), cure,
                          kMaxTasksOption, kAllowLargeOption));
}

void checkPlanPrintable(const Plan& plan, const Limits& limits) {
  const double items = double(plan.tasks.size()) + plan.totalFlows();
  if (items > double(limits.maxPrintedPlanItems))
    throw OptionError(
        "--workers",
        fmt::format("the plan of {} ({}, {} workers) has {} tasks and {:.3g} flows, over the "
                    "limit of {} printed; print a smaller plan (fewer workers; `strata simulate` "
                    "summarises large ones), or print it anyway with {}",
                    plan.network, toString(plan.scenario.strategy), plan.scenario.workers,
                    plan.tasks.size(), plan.totalFlows(), limits.maxPrintedPlanItems,
                    kAllowLargeOption));
}

double psPeriod(const std::vector<double>& computeEnd) {
  const int n = static_cast<int>(computeEnd.size());
  if (n < 2)
    return n == 1 ? computeEnd[0] : 0.0;
  const int h = (n - 1) / 2;
  return (computeEnd[static_cast<size_t>(n - 1)] - computeEnd[static_cast<size_t>(h)]) /
         (n - 1 - h);
}

int defaultPlanIterations(const Scenario& sc) {
  return sc.strategy == Strategy::kPs && sc.workers > 1 ? kPsSteadySteps + 2 * sc.options.staleness
                                                        : 1;
}

bool canBeRepresentative(const Scenario& scenario) {
  return scenario.strategy == Strategy::kNaive || scenario.strategy == Strategy::kRing;
}

namespace {

Plan lower(const Network& network, const Scenario& scenario, const Cluster* cluster, int iterations,
           PlanDetail detail) {
  checkScenario(network, scenario);
  iterations = scenario.strategy != Strategy::kPs || scenario.workers == 1 ? 1
               : iterations > 0                                            ? iterations
                                : defaultPlanIterations(scenario);
  STRATA_ENFORCE(detail == PlanDetail::kFull || canBeRepresentative(scenario));
  checkPlanSize(network, scenario, limits(), iterations, detail);
  Plan plan;
  // Reserved: grown by doubling, a plan of 10^6 tasks was copied ~20 times.
  const double tasks = estimatePlanTasks(network, scenario, iterations, detail);
  plan.tasks.reserve(static_cast<size_t>(tasks * 1.05) + 16);
  plan.deps.reserve(static_cast<size_t>(tasks * 2.1) + 16);
  plan.network = network.name;
  plan.scenario = scenario;
  plan.representative = detail == PlanDetail::kRepresentative;
  std::optional<Topology> topo;
  if (cluster) {
    checkPsPlacement(*cluster, scenario);  // its message before the topology's
    topo.emplace(*cluster, scenario.workers + psServerRanks(scenario));
  }
  Builder b(plan, topo ? &*topo : nullptr,
            cluster ? 1.0 / cluster->device.reduceBandwidth.value() : 0.0);
  if (isModelParallel(scenario.strategy)) {
    lowerWeirdTrick(b, network, scenario);
  } else if (scenario.strategy == Strategy::kPs) {
    plan.iterations = iterations;
    plan.servers = psServerRanks(scenario);
    lowerParamServer(b, network, scenario, iterations);
  } else {
    lowerDataParallel(b, network, scenario);
  }
  const auto sync = syncAllreduce(scenario);
  plan.allreduce = sync ? describeAllreduce(*sync, b.picks) : "";
  return plan;
}

}  // namespace

Plan lowerToPlan(const Network& network, const Scenario& scenario, int iterations) {
  if (const auto a = syncAllreduce(scenario);
      a && (*a == AllreduceAlgorithm::kAuto || *a == AllreduceAlgorithm::kHierarchical))
    throw UserError(
        fmt::format("the {} allreduce needs the cluster to be lowered to a plan", toString(*a)));
  return lower(network, scenario, nullptr, iterations, PlanDetail::kFull);
}

Plan lowerToPlan(const Network& network, const Scenario& scenario, const Cluster& cluster,
                 int iterations, PlanDetail detail) {
  return lower(network, scenario, &cluster, iterations, detail);
}

}  // namespace strata

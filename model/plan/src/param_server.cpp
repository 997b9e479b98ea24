// The asynchronous parameter server as a Plan: steps back to back.
#include "builder.h"

namespace strata::planning {

// ps (mshadow-ps), steps back to back. A bucket's job (PsJob): push its
// gradients (direct reduce-scatter: worker j is the server of chunk j and sums
// it), each server updates its chunk of the weights, pull them (allgather of
// the updated chunks into every worker's weights). A push starts when every
// worker's backprop has left the bucket's layers (their weights are then free
// to be overwritten by the pull), or when backprop is over without overlap.
// Step s's forward of a layer waits only for the pull of its bucket from step
// s-1-S (PullWait); cost/src/param_server.cpp prices the same schedule.
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
        plan.tasks.back().server = true;
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
        plan.tasks.back().server = true;
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
        plan.tasks.back().server = true;
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

}  // namespace strata::planning

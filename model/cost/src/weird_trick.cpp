// Krizhevsky's "one weird trick" (owt-a, owt-b, owt-c): the conv part
// data-parallel, the fc part model-parallel.
#include <algorithm>
#include <cmath>

#include "step_context.h"
#include "strata/model/error.h"

namespace strata::cost {

// owt-a / owt-b / owt-c: conv part data-parallel, FC part model-parallel.
Seconds weirdTrickStep(const Context& ctx, Tally& t, RoundInfo& info, Seconds& firstStep,
                       int& steps) {
  steps = 1;
  const auto& net = ctx.net;
  const int mp = net.modelParallelFrom;
  const int layers = static_cast<int>(net.layers.size());
  const int k = ctx.k;
  const double b = ctx.b;
  const double frac = 1.0 / k;
  const auto strategy = ctx.sc.strategy;

  // Conv forward on b examples.
  const Seconds convFwd = forward(ctx, 0, mp, b, 1.0, t);

  // Rounds of the FC phase.
  const int rounds = strategy == Strategy::kOwtA ? 1 : k;
  const double batch = strategy == Strategy::kOwtA ? k * b : b;
  const double boundary = double(net.layers[static_cast<size_t>(mp)].inShape.elements()) * ctx.e;
  const bool perRoundUpdate =
      strategy != Strategy::kOwtA && ctx.sc.options.fcUpdate == FcUpdate::kRound;
  const double fcParams = paramsIn(net, mp, layers);

  // FC compute of one round (fwd + bwd of every model-parallel layer on its 1/K).
  Seconds fcFwd, fcBwdW, fcBwdD;
  for (int i = mp; i < layers; ++i) {
    const auto& l = net.layers[static_cast<size_t>(i)];
    fcFwd += ctx.time(l, Phase::kFwd, batch, frac);
    fcBwdW += ctx.time(l, Phase::kBwdWeights, batch, frac);
    fcBwdD += ctx.time(l, Phase::kBwdData, batch, frac);
  }
  const Seconds roundUpdate = perRoundUpdate ? ctx.update(fcParams * frac) : Seconds(0);
  const Seconds roundCompute = fcFwd + fcBwdW + fcBwdD + roundUpdate;

  // Exchanges inside the model-parallel part, per round: a layer with weights
  // after the first needs the whole output of the layer before it (allgather
  // of slices) and returns partial input gradients to their owners
  // (reduce-scatter); the softmax needs a max and a sum per example across the
  // slices (allreduce of 2 values per example).
  Seconds inner;
  Tally innerTally(k);
  std::vector<Seconds> gatherTime(static_cast<size_t>(layers)),
      scatterTime(static_cast<size_t>(layers));
  Seconds softmaxTime;
  for (int i = mp + 1; i < layers; ++i) {
    const auto& l = net.layers[static_cast<size_t>(i)];
    if (l.hasWeights()) {
      const Bytes slice(batch * double(l.inShape.elements()) * frac * ctx.e);
      const auto gatherIn = allGather(ctx.topo, slice, false);
      const auto scatterGrad = reduceScatter(ctx.topo, slice * k, ctx.comm, false);
      gatherTime[static_cast<size_t>(i)] = gatherIn.time;
      scatterTime[static_cast<size_t>(i)] = scatterGrad.time;
      // Each exchange: the communication lane wakes for it, the compute lane for its result.
      inner += gatherIn.time + scatterGrad.time + ctx.handoff * 4;
      innerTally.add(gatherIn);
      innerTally.add(scatterGrad);
    } else if (l.kind == LayerKind::kSoftmax && k > 1) {
      const auto c =
          allReduce(ctx.topo, AllreduceAlgorithm::kDirect, Bytes(2 * batch * ctx.e), ctx.comm);
      softmaxTime = c.time;
      inner += c.time + ctx.handoff * 2;
      innerTally.add(c);
    }
  }
  // The exchanges' bytes and bottleneck from here; their time from the lanes below.
  const Seconds communicationBefore = t.communication;

  // Activations in and activation gradients back, per round.
  std::vector<Seconds> in(static_cast<size_t>(rounds)), back(static_cast<size_t>(rounds));
  double egress = 0;
  if (strategy == Strategy::kOwtB) {
    // Round r: worker r broadcasts its b examples; all return their partial
    // gradients to worker r, which sums them. Over the K rounds every worker
    // is the root once: it sends (K-1) b A e as root and b A e in each of the
    // K-1 other rounds, and receives as much.
    const Bytes n(b * boundary);
    for (int r = 0; r < rounds; ++r) {
      in[static_cast<size_t>(r)] = broadcastTime(ctx.topo, r, n) + ctx.handoff;
      back[static_cast<size_t>(r)] = reduceTime(ctx.topo, r, n, ctx.comm) + ctx.handoff;
      t.addTime(in[static_cast<size_t>(r)] + back[static_cast<size_t>(r)] - ctx.handoff * 2,
                ctx.topo.scatter(r));
    }
    t.addSymmetricBytes(2.0 * (k - 1) * n.value(), 2.0 * (k - 1) * n.value());
    egress = (k - 1) * n.value();
  } else {
    // owt-a: every worker sends its b examples to every other worker; the
    // owners sum the K-1 partial gradients of their examples.
    // owt-c: the same with b/K examples, in each of K rounds.
    const double perRound = strategy == Strategy::kOwtA ? b : b / k;
    const auto x = allToAll(ctx.topo, Bytes(perRound * boundary));
    const auto g = reduceScatter(ctx.topo, Bytes(k * perRound * boundary), ctx.comm, false);
    for (int r = 0; r < rounds; ++r) {
      in[static_cast<size_t>(r)] = x.time + ctx.handoff;
      back[static_cast<size_t>(r)] = g.time + ctx.handoff;
    }
    t.add(x, rounds);
    t.add(g, rounds);
    egress = (k - 1) * perRound * boundary;
  }
  for (size_t i = 0; i < t.sent.size(); ++i) {
    t.sent[i] += innerTally.sent[i] * rounds;
    t.received[i] += innerTally.received[i] * rounds;
  }
  t.communication = communicationBefore;

  // The rounds as the Plan runs them (plan/src/weird_trick.cpp), played on
  // one worker's two lanes (playLanes; every worker alike). Without shared
  // cores or hand-offs it is the three-stage flow shop over the rounds:
  // transfer in (network), FC compute with its inner exchanges (device),
  // gradients back (network); transfer r+1 runs while round r computes, so
  // with compute >= transfer K-1 of the K transfers hide (Krizhevsky 2014,
  // scheme b). Where the lanes share cores, compute beside any transfer runs
  // at the overlap compute speed and the transfers beside compute at the
  // overlap communication speed; every task released by the other lane
  // (compute -> exchange -> compute ..., the rounds are a chain of them) waits
  // for its lane's wake-up.
  std::vector<LaneTask> tasks;
  std::vector<Phase> phaseOf;  // per task (compute)
  std::vector<char> isUpdate;
  auto add = [&](bool comm, Seconds work, std::vector<int> deps, Phase phase = Phase::kFwd,
                 bool update = false) {
    tasks.push_back({comm, work, std::move(deps)});
    phaseOf.push_back(phase);
    isUpdate.push_back(update ? 1 : 0);
    return static_cast<int>(tasks.size()) - 1;
  };
  // The conv forward (its wall time is convFwd: nothing runs beside it).
  int prev = add(false, convFwd, {});
  const int convDone = prev;
  const Seconds h = ctx.handoff;
  std::vector<int> inTask(static_cast<size_t>(rounds), -1),
      lastCompute(static_cast<size_t>(rounds));
  auto issueIn = [&](int r) {
    if (k == 1 || r >= rounds)
      return;
    inTask[static_cast<size_t>(r)] = add(true, in[static_cast<size_t>(r)] - h,
                                         {r > 0 ? inTask[static_cast<size_t>(r - 1)] : convDone});
  };
  issueIn(0);
  int lastBack = -1;
  for (int r = 0; r < rounds; ++r) {
    issueIn(r + 1);
    prev = add(false, ctx.time(net.layers[static_cast<size_t>(mp)], Phase::kFwd, batch, frac),
               {prev, inTask[static_cast<size_t>(r)]});
    for (int i = mp + 1; i < layers; ++i) {
      const auto& l = net.layers[static_cast<size_t>(i)];
      int exchange = -1;
      if (k > 1 && l.hasWeights())
        exchange = add(true, gatherTime[static_cast<size_t>(i)], {prev});
      prev = add(false, ctx.time(l, Phase::kFwd, batch, frac), {prev, exchange});
      if (k > 1 && l.kind == LayerKind::kSoftmax)
        prev = add(true, softmaxTime, {prev});
    }
    for (int i = layers - 1; i >= mp; --i) {
      const auto& l = net.layers[static_cast<size_t>(i)];
      if (l.hasWeights())
        prev = add(false, ctx.time(l, Phase::kBwdWeights, batch, frac), {prev}, Phase::kBwdWeights);
      prev = add(false, ctx.time(l, Phase::kBwdData, batch, frac), {prev}, Phase::kBwdData);
      if (k > 1 && i > mp && l.hasWeights())
        prev = add(true, scatterTime[static_cast<size_t>(i)], {prev});
    }
    if (perRoundUpdate)
      prev = add(false, roundUpdate, {prev}, Phase::kUpdate, true);
    lastCompute[static_cast<size_t>(r)] = prev;
    if (k > 1)
      lastBack = add(true, back[static_cast<size_t>(r)] - h, {prev, lastBack});
  }
  // The conv backprop starts when the last gradients are back (its lane woken).
  const int fcDone = add(false, Seconds(0), {prev, lastBack});
  const auto lanes = playLanes(tasks, ctx.lanes.compute, ctx.lanes.comm, h);
  // One worker: no exchange, the round's compute alone (summed by phase, as
  // the data-parallel step sums its own: equal steps print equal).
  const Seconds fcPhase =
      k == 1 ? roundCompute : Seconds(lanes.end[static_cast<size_t>(fcDone)]) - convFwd;
  Seconds fcComputeWall;
  if (k == 1) {
    t.compute.fwd += fcFwd;
    t.compute.bwdWeights += fcBwdW;
    t.compute.bwdData += fcBwdD;
    t.compute.update += roundUpdate;
    fcComputeWall = roundCompute;
  }
  for (size_t i = 1; i < tasks.size() && k > 1; ++i) {
    const Seconds wall(lanes.end[i] - lanes.start[i]);
    if (tasks[i].comm) {
      t.communication += wall;
      continue;
    }
    fcComputeWall += wall;
    if (isUpdate[i])
      t.compute.update += wall;
    else if (phaseOf[i] == Phase::kFwd)
      t.compute.fwd += wall;
    else if (phaseOf[i] == Phase::kBwdWeights)
      t.compute.bwdWeights += wall;
    else
      t.compute.bwdData += wall;
  }
  int hidden = 0;
  for (int r = 1; r < rounds; ++r)
    if (k > 1 && lanes.end[static_cast<size_t>(inTask[static_cast<size_t>(r)])] <=
                     lanes.end[static_cast<size_t>(lastCompute[static_cast<size_t>(r - 1)])])
      ++hidden;
  t.exposed += fcPhase - fcComputeWall;

  Seconds meanIn, meanBack;
  for (int r = 0; r < rounds; ++r) {
    meanIn += in[static_cast<size_t>(r)];
    meanBack += back[static_cast<size_t>(r)];
  }
  info.rounds = rounds;
  info.batchPerRound = static_cast<int>(std::lround(batch));
  info.transfer = meanIn / rounds;
  info.gradientReturn = meanBack / rounds;
  info.compute = roundCompute;
  info.innerComm = inner;
  info.hiddenTransfers = hidden;
  info.egressPerRound = Bytes(egress);

  // Conv backprop with the conv-gradient sync, then the updates.
  const Seconds convBwd = backpropWithSync(ctx, 0, mp, ctx.sc.options.convSync, t);
  Seconds upd = ctx.update(paramsIn(net, 0, mp));
  if (!perRoundUpdate)
    upd += ctx.update(fcParams * frac);
  t.compute.update += upd;
  firstStep = convFwd + fcPhase + convBwd + upd;
  return firstStep;
}

}  // namespace strata::cost

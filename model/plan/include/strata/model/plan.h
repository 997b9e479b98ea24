// The Plan: what one training step does, as tasks with dependencies.
//
// Strategies lower to a Plan; collectives lower to their steps. The simulator
// schedules a Plan on simulated resources and the executor interprets the
// same Plan with real buffers, so what is simulated is what is run. A Plan
// does not depend on the hardware: durations come from the engine.
//
// Tasks:
//   compute   one worker runs one phase of one layer on `examples` examples,
//             `fraction` of the layer (1/K for a model-parallel layer)
//   transfer  one step of a collective: a set of flows (src -> dst, which
//             part of the collective's buffer) that run at the same time,
//             `bytes` each; `pattern` names their shape so engines can price
//             it without looking at every flow
//   reduce    every flow's destination adds `inputs` received chunks of
//             `bytes` into its copy (the flows are those of the transfer it
//             follows)
//   update    one worker applies SGD with momentum to layers [layer, lastLayer]
//             (`params` parameters: 1/K of them for a model-parallel FC
//             layer); with `part` >= 0 it updates chunk `part` of `shards` of
//             those layers' parameters: a ps server's shard (`server`), on its
//             communication thread, or a ZeRO worker's, on its compute stream
//
// ps plans hold several steps back to back (`iterations`, each task's
// `iteration`): a bucket's push, its server updates and its pull form a job
// (PsJob) that the parameter server's communication thread runs one at a
// time, choosing among waiting jobs by priority; step s's forward of a layer
// waits for the pull of its bucket from step s-1-S (S: StrategyOptions::
// staleness).
//
// Pipelines (StrategyOptions::pp) run each stage's micro-batches in its
// schedule's order (pipeline.h): a chunk's forward of micro-batch m waits for
// the "p2p" collective that carried m's activation from the stage before it,
// its backward for the one that carried the gradient back. A stage's ring
// collectives (its tensor-parallel groups', its data-parallel groups') are
// kPairs steps whose flows are that stage's rings only, stored once per shape.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "strata/model/limits.h"
#include "strata/model/network.h"
#include "strata/model/param_server.h"
#include "strata/model/strategy.h"
#include "strata/model/units.h"

namespace strata {

enum class TaskKind { kCompute, kTransfer, kReduce, kUpdate };
std::string_view toString(TaskKind kind);

// The shape of a transfer step's flows.
enum class PatternKind {
  kRing,      // i -> i+1 mod K
  kAllToAll,  // every i -> every j != i
  kGather,    // every i != root -> root
  kScatter,   // root -> every i != root
  kPairs,     // any other set of pairs (halving-doubling)
};
std::string_view toString(PatternKind kind);

// What a collective's buffer holds.
enum class BufferKind {
  kWeightGradients,      // gradients of layers [firstLayer, lastLayer]
  kActivations,          // outputs of layer firstLayer (owt: the conv/FC boundary or an FC slice)
  kActivationGradients,  // gradients w.r.t. those outputs
  kLossStatistics,       // softmax max and sum per example, split over workers
  kWeights,              // weights of layers [firstLayer, lastLayer] (ps pull)
};
std::string_view toString(BufferKind kind);

// Which part of the buffer each flow of a patterned step carries; flows of
// ring, all-to-all, gather and scatter steps are implied by the pattern and
// not stored.
enum class PartRule : uint8_t {
  kExplicit,           // stored flows (kPairs)
  kRingReduceScatter,  // step i: ringReduceScatterSends (ring.h)
  kRingAllGather,      // allgather step i (plan step K-1+i): ringAllGatherSends
  kDestination,        // chunk owned by the destination (reduce-scatter, gather)
  kSource,             // chunk owned by the source (allgather, scatter)
};

struct PlanFlow {
  int32_t src = 0;
  int32_t dst = 0;
  int32_t part = 0;  // which of the collective's `parts` chunks it carries
};

struct Task {
  TaskKind kind = TaskKind::kCompute;
  int worker = -1;     // compute / update: the worker; -1 for transfer / reduce
  int layer = -1;      // compute: the layer; update: the first layer updated
  int lastLayer = -1;  // update: the last layer updated
  Phase phase = Phase::kFwd;
  double examples = 0;  // compute
  double fraction = 1;  // compute: the share of the layer this worker holds
  // compute, phase kFwd: a forward run again before the layer's backward
  // (--recompute): full, the whole layer (fraction as its forward's);
  // selective, the attention core only (fraction: attentionCoreShare of it).
  bool recompute = false;
  double params = 0;  // update
  Bytes bytes;        // transfer: per flow; reduce: per chunk summed
  int inputs = 0;     // reduce: chunks summed per destination
  PatternKind pattern = PatternKind::kPairs;
  PartRule parts = PartRule::kExplicit;
  int root = -1;  // gather / scatter
  // ring: the rings' span and stride (ringNext in ring.h); 0, 1: the
  // flat ring of every worker
  int ringSpan = 0, ringStride = 1;
  uint32_t flowBegin = 0, flowCount = 0;
  uint32_t depBegin = 0, depCount = 0;
  int collective = -1;  // transfer / reduce: index into Plan::collectives
  int step = -1;        // step of the collective's algorithm
  int segment = -1;     // segment of a pipelined step
  // A segment issued right behind the one before it of its step (a ring
  // step's or a tree stage's segments after the first): where the link pays
  // its latency once per step (LinkSpec::latencyPerStep) it pays none.
  bool follows = false;
  // transfer: a reduce task sums what it delivers (Builder::reduce), so the
  // data lands in scratch, not in the buffer.
  bool summed = false;
  int round = -1;     // owt-*: round of the FC phase
  int iteration = 0;  // the training step the task belongs to
  // Pipelines and gradient accumulation (StrategyOptions::pp, microbatches):
  // the micro-batch a compute task or a stage-to-stage transfer carries;
  // -1 for the syncs and updates after the last one.
  int micro = -1;
  int part = -1;   // update: the ps server shard (chunk) it updates; -1: all
  int shards = 0;  // update with part >= 0: the chunks the parameters are cut into
  // update: a ps server's shard update, which the worker's communication
  // thread runs (false: the worker's compute stream runs it, as a ZeRO
  // worker's update of its chunk `part` of `shards`).
  bool server = false;
  int job = -1;  // ps: index into Plan::jobs
};

// ps: one bucket's push, server updates and pull in one step, tasks
// [firstTask, lastTask]. When the server's communication thread frees, it
// starts the waiting job with the biggest `priority` (mshadow-ps's rule),
// ties by request order (last-ready: latest request first).
struct PsJob {
  int priority = 0;  // first-needed: layers - firstLayer; fifo, last-ready: 0
  int firstLayer = -1;
  int lastLayer = -1;
  int iteration = 0;
  uint32_t firstTask = 0;
  uint32_t lastTask = 0;
};

struct Collective {
  // The allreduce algorithm lowered, for an allreduce (never kAuto: the one
  // auto picked); empty for the other collectives. Engines decide by this.
  std::optional<AllreduceAlgorithm> allreduce;
  // Its name in plans and traces: toString(*allreduce), or "broadcast",
  // "all-to-all", "reduce", "reduce-scatter", "allgather", "p2p".
  std::string algorithm;
  BufferKind buffer = BufferKind::kWeightGradients;
  Bytes bytes;          // the whole buffer
  int firstLayer = -1;  // layers whose buffers it covers
  int lastLayer = -1;
  int parts = 1;     // chunks the buffer is cut into
  int segments = 1;  // segments per chunk
  int round = -1;
  uint32_t firstTask = 0;  // its tasks are [firstTask, lastTask]
  uint32_t lastTask = 0;
};

// Whether a worker's compute stream runs the task (compute and update tasks,
// except a ps server's shard update, which its communication thread runs).
inline bool onComputeLane(const Task& t) {
  return t.kind == TaskKind::kCompute || (t.kind == TaskKind::kUpdate && !t.server);
}

struct Plan {
  std::string network;
  Scenario scenario;
  std::vector<Task> tasks;
  std::vector<PlanFlow> flows;
  std::vector<int> deps;
  std::vector<Collective> collectives;
  int iterations = 1;       // steps in the plan (ps: several, back to back)
  int servers = 0;          // ps: dedicated server ranks K..K+servers-1 (their tasks' `worker`)
  std::vector<PsJob> jobs;  // ps
  // Only worker 0's compute and update tasks are in the plan: every worker
  // computes alike and the collectives' tasks already name every worker, so
  // worker 0 stands for all (PlanDetail::kRepresentative). A pipeline's:
  // each stage's first rank's, standing for the stage's.
  bool representative = false;
  // naive and ring: the gradient allreduce as describeAllreduce says it
  // (auto: what each bucket got); "" for the other strategies.
  std::string allreduce;

  std::span<const int> depsOf(const Task& t) const {
    return {deps.data() + t.depBegin, t.depCount};
  }
  // The flows of a transfer or reduce task (materialised for patterned ones).
  std::vector<PlanFlow> flowsOf(const Task& t) const;
  // A kPairs task's stored flows, without a copy.
  std::span<const PlanFlow> storedFlows(const Task& t) const {
    return {flows.data() + t.flowBegin, t.flowCount};
  }
  size_t flowCountOf(const Task& t) const;
  // The worker whose compute and update tasks are `worker`'s: itself, or in
  // a representative plan worker 0 (a pipeline: its stage's first rank).
  int computesFor(int worker) const;
  size_t count(TaskKind kind) const;
  // Flows of every transfer and reduce task (what printing or simulating the
  // plan visits: an all-to-all step of K workers has K(K-1)).
  double totalFlows() const;
};

// Memory of one task in a Plan and its engine's bookkeeping, for the limit
// messages (sizeof(Task), its dependencies, the simulator's per-task state).
inline constexpr double kBytesPerPlanTask = 300;

// kRepresentative: worker 0's compute and update tasks only (Plan::
// representative; a pipeline: each stage's first rank's); naive and ring only.
// A simulator plays it as the full plan when every worker computes alike (no
// stragglers, no jitter, no cores shared between the lanes), in O(layers +
// collective steps) tasks instead of O(K layers).
enum class PlanDetail { kFull, kRepresentative };
bool canBeRepresentative(const Scenario& scenario);

// The number of tasks lowerToPlan would build, computed in O(layers) without
// building them (exact up to rounding of segment counts).
double estimatePlanTasks(const Network& network, const Scenario& scenario, int iterations = 0,
                         PlanDetail detail = PlanDetail::kFull);

// Throws OptionError (naming --workers, or --segment when segments make the
// plan large, and the option that raises the limit) when the plan would have
// more than limits.maxPlanTasks tasks.
void checkPlanSize(const Network& network, const Scenario& scenario, const Limits& limits,
                   int iterations = 0, PlanDetail detail = PlanDetail::kFull);

// Throws OptionError("--workers") when printing `plan` (every task and flow,
// `strata plan`) would be over limits.maxPrintedPlanItems.
void checkPlanPrintable(const Plan& plan, const Limits& limits);

// Lowers `scenario` on `network` to a Plan that mirrors the cost model's
// schedule step for step (docs/simulator.md). Throws UserError as estimate()
// does for impossible scenarios, and before building anything when the plan
// would be over limits().maxPlanTasks (checkPlanSize). `iterations`: the
// steps of a ps plan (0: defaultPlanIterations); other strategies' plans, and
// ps on one worker, are one step whatever it says.
Plan lowerToPlan(const Network& network, const Scenario& scenario, int iterations = 0);

// With the cluster: the hierarchical allreduce knows its nodes and auto
// picks each bucket's algorithm (chooseAllreduce) as the model does; the
// overload without it throws UserError for those two.
Plan lowerToPlan(const Network& network, const Scenario& scenario, const Cluster& cluster,
                 int iterations = 0, PlanDetail detail = PlanDetail::kFull);

}  // namespace strata

// The analytic cost model: a StepEstimate for one Scenario, in microseconds.
#pragma once

#include <optional>

#include "strata/model/cluster.h"
#include "strata/model/network.h"
#include "strata/model/strategy.h"
#include "strata/model/topology.h"

namespace strata {

// Predicts one training step of `network` on `cluster` under `scenario`.
// Throws UserError for impossible requests (K = 0, b = 0, more workers than
// the cluster has, owt-* on a network with no model-parallel part, an element
// type the device has no peak for) and for K over limits().maxModelWorkers.
// Formulas: docs/cost-model.md.
// `countBytes` false (strata search): the bytes each worker sends and
// receives are not counted (StepEstimate::bytesCounted), which at 10^3
// workers and more is most of an evaluation's time; the times are the same.
StepEstimate estimate(const Network& network, const Cluster& cluster, const Scenario& scenario,
                      bool countBytes = true);

// Throws UserError (OptionError for K, b, segment, bucket) when `scenario`
// cannot run on `network`: K or b below 1, a global batch K x b over 2^31 - 1,
// a segment or bucket that is not exactly 0 (off) nor a finite size of at
// least 1 B, owt-* without a model-parallel part. Resource limits are checked
// by each engine (limits.h).
void checkScenario(const Network& network, const Scenario& scenario);

// Throws OptionError("--ps-servers") when ps's dedicated servers do not fit
// on the cluster's devices beside the workers.
void checkPsPlacement(const Cluster& cluster, const Scenario& scenario);

// K x b, checked: throws OptionError("--batch") naming both when the global
// batch does not fit an int (the CLI's `-b 2147483647 -k 2`).
int globalBatch(int workers, int batchPerWorker);
// The examples of one step, dp x microbatches x b, checked as above
// (OptionError("--microbatches") when the micro-batches overflow it).
int globalBatch(const Scenario& scenario);

// The most steps a training run may have (--steps, or epochs x steps per
// epoch): 10^12, over 30 years at a millisecond a step.
inline constexpr double kMaxTrainingSteps = 1e12;
// The most examples a dataset may have (--dataset): 2^53, counted exactly.
inline constexpr double kMaxDatasetExamples = 9007199254740992.0;
// The most epochs (--epochs).
inline constexpr double kMaxEpochs = 1e6;

// A run of `steps` steps. Throws OptionError(option) unless steps is a whole
// number in [1, kMaxTrainingSteps].
TrainingRun trainingRunOfSteps(double steps, const std::string& option = "--steps");
// `epochs` passes over `dataset` examples at `globalBatch` examples a step:
// ceil(dataset / globalBatch) steps per epoch (the last, partial batch is a
// step), ceil(epochs x that) steps in all (epochs may be fractional).
// Throws OptionError("--epochs") for epochs not finite or outside (0,
// kMaxEpochs], OptionError("--dataset") for a dataset not a whole number in
// [1, kMaxDatasetExamples], OptionError("--epochs") when the run has more than
// kMaxTrainingSteps steps.
// `epochsOption`, `datasetOption`: the options' names in errors.
TrainingRun trainingRunOfEpochs(double epochs, double dataset, int globalBatch,
                                const std::string& epochsOption = "--epochs",
                                const std::string& datasetOption = "--dataset");
// `run` with its time from `estimate`: firstStep + (steps - 1) x step.
TrainingRun priceTrainingRun(TrainingRun run, const StepEstimate& estimate);

// Time of one phase of one layer on one device for `examples` examples, of
// which this worker computes `fraction` (1/K of a model-parallel layer):
// roofline max(FLOPs / (peak x efficiency), bytes / (bandwidth x efficiency)).
// The efficiency is the element type's own (DeviceSpec::efficiencyFor);
// `optimizer` prices Phase::kUpdate (updateTime).
Seconds layerTime(const Layer& layer, Phase phase, double examples, double fraction,
                  const DeviceSpec& device, FlopsPerSecond peak, ElementType element,
                  Optimizer optimizer = Optimizer::kMomentum);

// Peak memory of worker `rank` under `scenario` (weights, gradients, the
// optimizer's states and fp32 master weights in mixed precision, saved
// activations, communication staging); the same for every engine.
MemoryUse estimateMemory(const Network& network, const Cluster& cluster, const Scenario& scenario,
                         int rank);

// For a scenario that does not fit in the device's memory: the change of
// --zero, --tp (up to the workers of a node), --sequence-parallel and
// --recompute that fits with the fewest options changed, then the least
// step time; nullopt when the scenario fits or no such change fits (or the
// strategy takes none of them: ring takes all four, naive --recompute).
struct FitChange {
  std::string options;  // "--zero 1 --recompute selective"
  Bytes memory;         // the largest worker's peak with the change
  Seconds step;
};
std::optional<FitChange> smallestFittingChange(const Network& network, const Cluster& cluster,
                                               const Scenario& scenario);

// With --tp, --zero or --recompute: how the K workers on `topo` split into
// tensor-parallel and data-parallel groups, the links each group's
// collectives cross, the ZeRO stage and the recomputation
// (StepEstimate::placement).
std::string describePlacement(const Topology& topo, const Scenario& scenario);

// A pipeline's chunks as the closed form places them on `cluster`
// (pipeline.h, balancedChunks on each layer's fwd + bwd time for b examples
// at its tensor-parallel share): the first layer of each of the pp x V
// chunks, then the layer count. {0, layers} without a pipeline.
std::vector<int> pipelineChunks(const Network& network, const Cluster& cluster,
                                const Scenario& scenario);

// Workers that share a node (the innermost topology group) with worker 0.
int workersPerNode(const Cluster& cluster, int workers);

// Speeds of a worker's compute and communication lanes, relative to alone,
// while both run (CPU workers sharing cores; 1 where communication has
// engines of its own).
struct LaneSpeeds {
  double compute = 1;
  double comm = 1;
  // While the communication lane runs work that is all CPU whatever the
  // link (a ps server's update on its thread): the speeds as measured.
  double busyCompute = 1;
  double busyComm = 1;
  // Optional (the device's overlap_comm_speed_by_duty): the communication
  // speed averaged over a window against the share d of it in which the
  // compute lane is busy, as (d, speed) points from d = 0 (speed 1) to d = 1
  // (speed `comm`), linear in between; empty: no curve (a window's transfer
  // runs at `comm` while compute runs and 1 while it does not).
  std::vector<std::pair<double, double>> commByDuty;
  // Whether the lanes share a worker's cores (a speed below 1).
  bool shared() const { return compute < 1 || comm < 1 || busyCompute < 1 || busyComm < 1; }
  // commByDuty at `duty` (clamped to [0, 1]); 1 - duty (1 - comm) without it.
  double commAtDuty(double duty) const;
  // The duty of a communication window that starts with `computeLeft`
  // seconds of compute (alone) still to run on its worker and `work` seconds
  // of communication (alone): compute runs at `compute` while both run, so it
  // is busy b = computeLeft / compute seconds of the window, and the window
  // lasts work / s(d): d = min(1, b s(d) / work), solved by bisection (s
  // falls with d, so the root is unique). 0 when computeLeft is 0.
  double windowDuty(double computeLeft, double work) const;
};
// The device's overlap speeds for `workers` workers, scaled by how much of
// its time the communication lane keeps a core busy. The speeds were
// measured with a lane that moved overlap_comm_rate bytes per second alone,
// every byte a copy and a sum on the cores. On a link whose flows move fewer
// (the ring step's bottleneck, per flow), the lane waits on the wire a share
// 1 - u of its time, u = min(1, flow rate / overlap_comm_rate): compute runs
// at 1 - (1 - s_compute) u, and communication stays at the link's speed while
// its slowed cores still keep up, min(1, s_comm / u). Without a measured
// rate u = 1: the speeds as measured.
// With a duty curve (overlap_comm_speed_by_duty) each of its points is
// scaled as the saturated one: min(1, s(d) / u).
LaneSpeeds overlapSpeeds(const Cluster& cluster, const Topology& topo, int workers);

// What one parameter's update costs: bytes read and written, FLOPs. Bytes:
// g (e bytes), the fp32 weights read and written (8), each optimizer state
// read and written (8 each), and in mixed precision (fp16, bf16) the e-byte
// working copy written: sgd 12, momentum 20, adam 28 bytes for every element
// type. FLOPs: sgd 2, momentum 4, adam 12. Formulas: docs/cost-model.md.
struct UpdateCost {
  double bytes = 0;
  double flops = 0;
};
UpdateCost updateCostPerParam(Optimizer optimizer, ElementType element);

// The update of `params` parameters on the roofline: max(bytes / (bandwidth x
// memory efficiency), FLOPs / fp32 peak) with updateCostPerParam's figures.
Seconds updateTime(double params, const DeviceSpec& device, ElementType element,
                   Optimizer optimizer = Optimizer::kMomentum);

}  // namespace strata

// How every engine that predicts (model, simulator) prices compute: one layer
// phase or one update on one worker, from the best source the cluster has:
//  1. a per-op profile of this very network (--profile): composition only;
//  2. kernel tables measured by `strata calibrate`: the phase lowered into the
//     backend's kernel calls at their exact shapes (model/kernels.h);
//  3. roofline x per-kind efficiency (clusters without tables: the GPU presets).
// Workers sharing a node slow each other down per the cluster's sharing table
// (GEMMs and memory-bound kernels separately where it has both figures).
#pragma once

#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>

#include "strata/model/cluster.h"
#include "strata/model/network.h"
#include "strata/model/strategy.h"
#include "strata/model/units.h"

namespace strata {

enum class ComputeSource { kProfile, kTables, kRoofline };
std::string_view toString(ComputeSource source);

class ComputeCosts {
 public:
  // workersPerNode: the workers sharing worker 0's node (its cores, memory).
  // `optimizer` prices the updates. threadsPerWorker: each worker's kernels
  // on T threads (CPU), T cores each: T times the speed of one core with
  // workersPerNode x T cores busy. Throws OptionError("--element") when the
  // device has no peak for `element`, UserError when a profile of another
  // network is attached.
  // stepExamples: a worker's examples per step, whose traffic prices how
  // much of the updates' operands the step has evicted (0: updates hot).
  ComputeCosts(const Network& network, const Cluster& cluster, ElementType element,
               int workersPerNode, Optimizer optimizer = Optimizer::kMomentum,
               int threadsPerWorker = 1, double stepExamples = 0);

  // Phase of layer `index` on `examples` examples, of which this worker holds
  // `fraction` of the outputs (1/K of a model-parallel layer).
  Seconds layer(int index, Phase phase, double examples, double fraction) const;
  // The optimizer's update of `params` parameters (one call): from the
  // profile (per parameter, as measured, whatever the optimizer), the kernel
  // tables' sgd (sgd, momentum: the executor's one kernel with momentum 0 or
  // not) or adam row, else the roofline (updateTime).
  Seconds update(double params) const;

  // The part of layer()'s time spent moving data to and from DRAM (kernel
  // tables): each memory-bound call's time (every call that is not a GEMM or
  // convolution) times the share of its traffic beyond the caches, by the
  // bytes each thread touches (none up to 1 MiB, all from 16 MiB, log-linear
  // between: compute_cost.cpp, dramShare). 0 from a profile or the roofline,
  // which do not split a layer's time.
  Seconds dramPart(int index, Phase phase, double examples, double fraction) const;

  // Operand residency: the share of the bytes a layer phase's memory-bound
  // kernels read that the cache no longer holds when the phase runs, 0..1.
  // With kernel tables that have cold tables and a last-level cache (else 0),
  // each memory-bound call is priced hot x (1 - share) + cold x share. An
  // operand last touched D bytes of the step's traffic ago (every kernel call
  // in between, in the order the executor runs a step: forward 0..L-1, then
  // each layer's backward from the last) stays in a cache of C bytes with
  // probability min(1, C / (D + its size)), C the node's last-level cache
  // over the workers on the node. A forward phase reads its inputs (D: the
  // traffic since their producer's forward); a backward phase its output's
  // gradient (D: since the consumer's backward that produced it) and, but for
  // add, its saved input (D: since its own forward).
  double coldShare(int index, Phase phase, double examples) const;
  // The same rule for the core's own cache (KernelTables::coreCache, each of
  // the worker's threads its own): the share of those bytes that the core's
  // cache no longer holds but the last-level cache does, 0..1. With warm
  // tables each memory-bound call is priced hot x (1 - cold - warm) + warm x
  // warm share + cold x cold share.
  double warmShare(int index, Phase phase, double examples) const;

  ComputeSource source() const { return source_; }
  // Kernel shapes priced so far that lie outside the tables' grid (their
  // rate is the grid edge's): one text per distinct shape.
  const std::set<std::string>& outsideGrid() const { return outside_; }
  // One line for the output: the source (with the roofline, the element
  // type's peak and whose efficiency table, saying when a type without its
  // own table falls back to the fp32 one), and the shapes outside the grid.
  std::string describe() const;

 private:
  // A layer phase from the kernel tables: its whole time, and dramPart's.
  struct TablesTime {
    Seconds total, dram;
  };
  TablesTime fromTables(int index, Phase phase, double examples, double fraction) const;
  // The kernel table row that prices the update: adam's (adam, adamw: one
  // kernel), or sgd's (the executor's SGD-with-momentum kernel, run with
  // momentum 0 for sgd).
  MemKernel updateKernel() const { return isAdam(optimizer_) ? MemKernel::kAdam : MemKernel::kSgd; }

  const Network& net_;
  const DeviceSpec& device_;
  // The tables that price this element type (kTables): the device's own for
  // fp32, else a copy with the element's GEMM and conv tables in place
  // (KernelTables::forElement), shared by copies of this object.
  std::shared_ptr<const KernelTables> elementTables_;
  const KernelTables& tables() const { return elementTables_ ? *elementTables_ : device_.kernels; }
  ElementType element_;
  Optimizer optimizer_;
  std::string clusterFile_;
  FlopsPerSecond peak_;
  ComputeSource source_;
  // Memory-bound kernels' speed for a call touching `bytes` (all threads of
  // the worker): threads x the per-core speed at the busy cores and the
  // bytes each thread touches (DeviceSpec::sharingMemorySpeed by size).
  double memorySpeed(double bytes) const;

  // For one examples count: the bytes every phase of a step touches (its
  // kernel calls' operands), summed along the step's order (forward 0..L-1,
  // then the backward of L-1..0): before[p] is the traffic of positions
  // 0..p-1. coldShare's distances.
  struct Traffic {
    std::vector<double> before;
    // updateFrom[i]: the update phases' traffic of layers i..L-1 (run in
    // layer order after the backward).
    std::vector<double> updateFrom;
    // weightGradient[i]: layer i's backward-weights traffic.
    std::vector<double> weightGradient;
    // Traffic of the step's phases from position a up to (not including)
    // b, in the order a step runs: forward 0..n-1 (positions 0..n-1), then
    // the backward of n-1..0 (positions n..2n-1); clamped to 0..2n.
    double between(int a, int b) const;
  };
  // The layers that read `producer`'s output (the network input's for -1),
  // in order.
  std::vector<int> readers(int producer) const;
  const Traffic& traffic(double examples) const;
  // Bytes of a phase's operands, and the share of them no longer cached.
  struct ColdBytes {
    double all = 0, cold = 0;
  };
  // The share of `size` bytes last touched `distance` bytes of traffic ago
  // still in a cache of `cache` bytes: min(1, cache / (distance + size)).
  static double residentShare(double size, double distance, double cache);
  // coldShare's operands, with `written` what the phase writes over too,
  // against a cache of `cache` bytes.
  ColdBytes activationsCold(int index, Phase phase, double examples, bool written,
                            double cache) const;
  // The share of a phase's memory-bound operands out of a cache of `cache`.
  double evictedShare(int index, Phase phase, double examples, double cache) const;
  // Bytes of one step's traffic (every phase's, the updates').
  double stepTraffic(double examples) const;
  // The share of `size` bytes of a GEMM operand holding `held` in a layer
  // phase that the step has evicted, by how long ago it last touched them
  // (0 for scratch, which the phase has just written).
  // `cache`: the cache's bytes (cache_, or core_ for the core's own).
  double operandCold(int index, Phase phase, double examples, GemmOperand held, double size,
                     double cache) const;
  // The share of GEMM call c's operand bytes (over its count) that the step
  // has evicted from a cache of `cache` bytes beyond what its hot table had
  // out of it (`tableCache`: the cache as the table found it), 0..1;
  // `filled`: C = after a zero fill, which brought C into the cache.
  double gemmColdShare(int index, Phase phase, double examples, const KernelCall& c, bool filled,
                       double cache, double tableCache) const;
  mutable std::map<double, Traffic> traffic_;
  double cache_ = 0;       // bytes of last-level cache per worker; 0: no cold pricing
  double tableCache_ = 0;  // the whole cache, as calibrate's tables found it
  // Bytes of the core's own cache over the worker's threads (one each); 0:
  // no warm pricing.
  double core_ = 0;

  double speed_ = 1.0;  // compute speed when the node is shared
  int busyCores_ = 1;   // workers on the node x threads per worker
  int threads_ = 1;     // threads per worker
  double stepExamples_ = 0;
  mutable std::set<std::string> outside_;
};

// The share of a memory-bound call's traffic that goes to DRAM rather than a
// cache, by the bytes each thread touches: none up to 1 MiB (a core's L2 on
// the development VM's EPYC), all from 16 MiB (half its 32 MiB L3, and the
// size of validate's copy reference, exec::kReferenceCopy), log-linear in
// between (the sizes of calibrate's memory_speed_by_size grid). It weighs the
// copy reference against the GEMM one in validate's normalisation and in
// calibrate's scaling of each point to the references' speed (a VM host's
// memory contention slows DRAM traffic, not a core's caches); it prices
// nothing.
double dramShare(double bytesPerThread);

// The machine's speed as a piece of work feels it, from two reference
// kernels' speeds (each its rate over the rate it is compared with): time
// in GEMMs scales with 1 / gemmSpeed and time in memory-bound kernels with
// 1 / copySpeed, so work a share `memoryShare` memory-bound runs at
// 1 / ((1 - memoryShare) / gemmSpeed + memoryShare / copySpeed).
// copySpeed <= 0 (no copy reference): gemmSpeed. validate normalises a row
// by it (docs/validation.md, "Normalisation"); calibrate scales each table
// point to the speed of the references' median by it.
double rowSpeed(double gemmSpeed, double copySpeed, double memoryShare);

// The share of one worker's compute in a step of `scenario` (every layer's
// forward and backward on its examples, model-parallel layers as the owt
// strategies split them, and the update) that the cluster's kernel tables
// price as DRAM traffic (dramPart, and the update's): how much of the step a
// slowdown of memory bandwidth reaches where one of the cores' arithmetic or
// caches does not (validate weighs its GEMM and copy references by it). 0
// without kernel tables.
double dramBoundShare(const Network& network, const Cluster& cluster, const Scenario& scenario);

}  // namespace strata

// Parallelization strategies, their options, and the StepEstimate every engine
// (model, simulator, executor) produces for one training step.
#pragma once

#include <algorithm>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "strata/model/allreduce_algorithm.h"
#include "strata/model/cluster.h"
#include "strata/model/network.h"
#include "strata/model/units.h"

namespace strata {

// Canonical strategy names of DESIGN.md.
enum class Strategy { kNaive, kRing, kOwtA, kOwtB, kOwtC, kPs };
inline constexpr Strategy kAllStrategies[] = {Strategy::kNaive, Strategy::kRing, Strategy::kOwtA,
                                              Strategy::kOwtB,  Strategy::kOwtC, Strategy::kPs};

std::string_view toString(Strategy strategy);
// Parses a canonical name; throws OptionError(option) listing the valid names.
Strategy parseStrategy(std::string_view text, const std::string& option);
// Parses a comma-separated list or "all".
std::vector<Strategy> parseStrategies(std::string_view text, const std::string& option);
bool isModelParallel(Strategy strategy);  // owt-a, owt-b, owt-c

// When the model-parallel FC layers of owt-b/owt-c update their weights.
enum class FcUpdate { kStep, kRound };
std::string_view toString(FcUpdate update);
FcUpdate parseFcUpdate(std::string_view text, const std::string& option);

// ps: which waiting bucket the parameter server serves first when its
// communication thread frees (mshadow-ps serves the bigger priority number
// first). first-needed: the bucket holding the earliest layers, which the
// next forward reaches first (the seed's default); fifo: the one whose
// gradients were ready first; last-ready: the one ready last.
enum class PsPriority { kFirstNeeded, kFifo, kLastReady };
std::string_view toString(PsPriority priority);
PsPriority parsePsPriority(std::string_view text, const std::string& option);

// The weight update: plain SGD (w -= lr g), SGD with momentum (one velocity v
// per parameter, the default), Adam (Kingma and Ba 2015: two moments m, v per
// parameter; weight decay as L2 in the gradient) or AdamW (Loshchilov and
// Hutter 2019: Adam with the weight decay decoupled from the gradient; the
// same kernel and states as Adam, so priced as Adam).
enum class Optimizer { kSgd, kMomentum, kAdam, kAdamW };
std::string_view toString(Optimizer optimizer);
Optimizer parseOptimizer(std::string_view text, const std::string& option);
// State tensors the optimizer keeps per parameter: 0 (sgd), 1 (momentum), 2
// (adam, adamw).
double optimizerStatesPerParam(Optimizer optimizer);
// Whether the update is Adam's (adam or adamw: the adam kernel, m and v).
inline bool isAdam(Optimizer optimizer) {
  return optimizer == Optimizer::kAdam || optimizer == Optimizer::kAdamW;
}

// Activation recomputation (--recompute; Korthikanti et al., "Reducing
// Activation Recomputation in Large Transformer Models", MLSys 2023): none
// keeps every activation for backward; selective drops the attention core's
// H x T^2 score and probability tensors and recomputes the core (scores,
// softmax, context) before its backward; full keeps only each repeated
// block's input and reruns the block's forward before its backward.
enum class Recompute { kNone, kSelective, kFull };
std::string_view toString(Recompute recompute);
Recompute parseRecompute(std::string_view text, const std::string& option);

// The most workers of one tensor-parallel group (--tp).
inline constexpr int kMaxTensorParallel = 1024;

// The order a pipeline stage runs its micro-batches' forwards and backwards
// in (--schedule; pipeline.h has each order):
//   gpipe        every forward, then every backward (Huang et al., "GPipe",
//                NeurIPS 2019): M micro-batches' activations in flight;
//   1f1b         stage s runs P - s - 1 forwards, then one forward and one
//                backward in turn (PipeDream-Flush: Narayanan et al.,
//                "Memory-Efficient Pipeline-Parallel DNN Training", ICML
//                2021): at most P - s in flight;
//   interleaved  1f1b over V chunks of layers per stage, stage s holding
//                chunks s, s + P, ... (Narayanan et al., "Efficient
//                Large-Scale Language Model Training on GPU Clusters Using
//                Megatron-LM", SC 2021, section 2.2.2): the bubble / V.
enum class PipelineSchedule { kGpipe, k1f1b, kInterleaved };
std::string_view toString(PipelineSchedule schedule);
PipelineSchedule parsePipelineSchedule(std::string_view text, const std::string& option);
// Where a layout's ranks sit (--placement), innermost first; tensor-parallel
// groups are always consecutive ranks (inside a node first):
//   tp,pp,dp  replica d's stage s's worker i is rank (d P + s) tp + i: a
//             replica's stages side by side, then the replicas (Narayanan
//             et al. 2021, section 3.3: pipelines across nodes as needed)
//   tp,dp,pp  rank (s dp + d) tp + i: a stage's replicas side by side, the
//             stages outermost (Megatron-core's default rank order, "tp-cp-
//             ep-dp-pp" in parallel_state.py), so the data-parallel groups
//             stay in fewer nodes and the stage-to-stage transfers cross them
enum class Placement { kTpPpDp, kTpDpPp };
std::string_view toString(Placement placement);
Placement parsePlacement(std::string_view text, const std::string& option);
// The most pipeline stages (--pp), micro-batches per step (--microbatches)
// and chunks per stage (--virtual-stages).
inline constexpr int kMaxPipelineStages = 1024;
inline constexpr int kMaxMicrobatches = 65536;
inline constexpr int kMaxVirtualStages = 64;
// The ZeRO stages (--zero; Rajbhandari et al., "ZeRO", SC 2020): 1 shards
// the optimizer states (and fp32 master weights) over the data-parallel
// group, 2 also the gradients, 3 also the weights (FSDP).
inline constexpr int kMaxZeroStage = 3;

// The most steps a ps worker may run ahead of its pulls (--staleness).
inline constexpr int kMaxStaleness = 16;
// The most dedicated ps server nodes (--ps-servers).
inline constexpr int kMaxPsServers = 1024;

struct StrategyOptions {
  // Overlap gradient communication with backprop (layer by layer, last first).
  bool overlap = true;
  // owt-b/owt-c: update the FC layers after every round (batch b) or once per
  // step (batch K b). owt-a always updates per step.
  FcUpdate fcUpdate = FcUpdate::kStep;
  // Pipelining granularity of segmented transfers; 4 MiB is NCCL's default
  // NCCL_BUFFSIZE (NCCL environment-variable documentation). 0: unsegmented.
  Bytes segment = Bytes(4.0 * 1024 * 1024);
  ElementType element = ElementType::kFp32;
  // The update rule: what the optimizer holds per parameter (memory) and
  // what the update reads and writes (its time).
  Optimizer optimizer = Optimizer::kMomentum;
  // With overlap, gradients are synchronised in buckets of consecutive layers
  // (in backprop order) of at least this many bytes, each bucket as soon as
  // its last gradient is ready. 25 MiB is PyTorch DDP's default
  // bucket_cap_mb (torch.nn.parallel.DistributedDataParallel documentation).
  // 0: one bucket per layer.
  Bytes bucket = Bytes(25.0 * 1024 * 1024);
  // Conv-gradient synchronisation of owt-* (conv_sync, --conv-sync):
  // Krizhevsky's scheme is `direct` (arXiv:1404.5997 section 3: each worker
  // reduces and broadcasts its 1/K of every gradient matrix).
  AllreduceAlgorithm convSync = AllreduceAlgorithm::kDirect;
  // The ring strategy's gradient allreduce (allreduce, --allreduce): the Baidu ring by
  // default; hierarchical, tree, halving-doubling, direct forced; auto: per
  // bucket, the one with the least predicted time (chooseAllreduce).
  AllreduceAlgorithm gradientSync = AllreduceAlgorithm::kRing;
  // ps: the order the server serves waiting buckets in.
  PsPriority psPriority = PsPriority::kFirstNeeded;
  // ps: where the servers are. 0: sharded over the workers (worker j serves
  // chunk j of every key); N > 0: N dedicated server nodes, placed on the
  // cluster's devices after the K workers' (the parameter-server deployment):
  // server j holds chunk j of N, receives every worker's chunk, sums, updates
  // and sends it back.
  int psServers = 0;
  // ps: 0: one level, every worker pushes to the servers. G > 0: two levels
  // (the mshadow-ps guide's layout) over nodes of G consecutive workers: a
  // node's workers first sum into its leader (its first worker, level 1),
  // the leaders are the servers, sharded (level 2), and each leader returns
  // the new weights to its node. G is normally the cluster's workers per node.
  int psNode = 0;
  // ps: bounded staleness S. Step s's forward of a layer waits for the pull
  // of its weights from step s-1-S (0: from the step before, synchronous SGD).
  int staleness = 0;
  // CPU workers: threads of each worker's kernels (--threads-per-worker).
  // On a CPU cluster a device is a core, so a worker with T threads keeps T
  // cores busy: its compute is priced at T times the per-core speed with
  // (workers on the node) x T cores busy (DeviceSpec::sharingSpeed), as if
  // every kernel split perfectly (docs/cost-model.md, "Threads per worker").
  int threadsPerWorker = 1;
  // Megatron tensor parallelism (Shoeybi et al. 2019, arXiv:1909.08053): the
  // attention heads, the MLP's fc -> activation -> fc pairs and the
  // vocabulary of the embedding, output layer and loss split over groups of
  // `tp` consecutive workers (inside a node first); K = dp x tp, and the
  // gradients are synchronised over the dp = K / tp workers holding the same
  // slice. 1: no tensor parallelism.
  int tp = 1;
  // Sequence parallelism (Korthikanti et al. 2023): with tp > 1, the layers
  // between the split ones (layernorm, dropout, add) run on T / tp positions
  // of each example; the tensor-parallel allreduces become reduce-scatters and
  // all-gathers of the same volume.
  bool sequenceParallel = false;
  // ZeRO stage over the data-parallel group (0: none; kMaxZeroStage).
  int zero = 0;
  Recompute recompute = Recompute::kNone;
  // Pipeline parallelism: the layers split into `pp` stages of consecutive
  // layers (pp x virtualStages chunks with the interleaved schedule), each
  // stage on its own tensor-parallel group; K = dp x tp x pp, ranks tp
  // innermost, then the stage, then the data-parallel replica. 1: none.
  int pp = 1;
  // Micro-batches per step, each of b examples per worker (--batch): the
  // gradients accumulate over them and are synchronised once. With pp = 1
  // and microbatches > 1: gradient accumulation. A step trains
  // dp x microbatches x b examples.
  int microbatches = 1;
  PipelineSchedule schedule = PipelineSchedule::k1f1b;
  int virtualStages = 1;  // chunks per stage (interleaved only; >= 2 there)
  // Where the user cuts the layers into chunks (empty: balanced by the cost
  // model): the first layer of each chunk after the first, pp x
  // virtualStages - 1 names, each a layer's or a repeated block's (its
  // first layer), ascending and at a place the network can be cut
  // (pipeline.h, chunkStartsByName).
  std::vector<std::string> stageStarts;
  // The order of the ranks (RankLayout): tp,pp,dp unless the user says.
  Placement placement = Placement::kTpPpDp;
};

// The most threads one worker's kernels may use (--threads-per-worker).
inline constexpr int kMaxThreadsPerWorker = 256;
// Throws OptionError("--threads-per-worker") unless 1 <= threads <= kMaxThreadsPerWorker.
void checkThreadsPerWorker(int threads);

// ---- which strategies use which option: the one rule -------------------------
// Every option a user sets, on the command line or in a file, must change what
// runs: an option that every strategy asked for would ignore is a mistake
// (exit 2), never a silent no-op. Front ends record which options were given
// and ask optionUnused once the strategies are known.
enum class OptionKey {
  kOverlap,
  kFcUpdate,
  kSegment,
  kBucket,
  kElement,
  kOptimizer,
  kAllreduce,
  kConvSync,
  kPsPriority,
  kStaleness,
  kPsServers,
  kPsNode,
  kThreadsPerWorker,
  kTensorParallel,
  kSequenceParallel,
  kZero,
  kRecompute,
  kPipelineParallel,
  kMicrobatches,
  kSchedule,
  kVirtualStages,
  kStageStarts,
  kPlacement,
};
inline constexpr OptionKey kAllOptionKeys[] = {
    OptionKey::kOverlap,          OptionKey::kFcUpdate,
    OptionKey::kSegment,          OptionKey::kBucket,
    OptionKey::kElement,          OptionKey::kOptimizer,
    OptionKey::kAllreduce,        OptionKey::kConvSync,
    OptionKey::kPsPriority,       OptionKey::kStaleness,
    OptionKey::kPsServers,        OptionKey::kPsNode,
    OptionKey::kThreadsPerWorker, OptionKey::kTensorParallel,
    OptionKey::kSequenceParallel, OptionKey::kZero,
    OptionKey::kRecompute,        OptionKey::kPipelineParallel,
    OptionKey::kMicrobatches,     OptionKey::kSchedule,
    OptionKey::kVirtualStages,    OptionKey::kStageStarts,
    OptionKey::kPlacement};

// The command-line flag ("--conv-sync") and the file key ("conv_sync") of `key`.
std::string_view optionFlag(OptionKey key);
std::string_view optionFileKey(OptionKey key);

// Why `strategy` with options `o` ignores `key` ("applies to ps only"), or ""
// when it uses it.
std::string optionIgnoredBy(OptionKey key, Strategy strategy, const StrategyOptions& o);

// The first of `given` that none of `strategies` uses, with the reason, or
// nullopt. The reason names where the option applies and the strategies
// asked for, e.g. "applies to ps only; the strategies asked for are ring".
struct UnusedOption {
  OptionKey key;
  std::string why;
};
std::optional<UnusedOption> optionUnused(const std::vector<OptionKey>& given,
                                         const std::vector<Strategy>& strategies,
                                         const StrategyOptions& o);

// Throws OptionError naming the first repeated item of `items` (strategy
// names, networks, files...), e.g. "--strategies: lists 'ring' twice in
// 'ring,ring'": a list names each thing once, never prints it twice or merges
// it silently. `text` is the list as written, quoted in the message.
void refuseRepeats(const std::vector<std::string>& items, const std::string& option,
                   std::string_view text);

// A group of consecutive layers whose gradients are synchronised together.
struct GradientBucket {
  int firstLayer = 0;  // lowest layer index: its gradient is the last one ready
  int lastLayer = 0;
  double params = 0;
};

// The buckets of data-parallel layers [first, last) in the order they are
// synchronised (last layers first): all of them in one bucket without
// overlap, else consecutive layers with weights until a bucket holds at least
// `options.bucket` bytes.
std::vector<GradientBucket> gradientBuckets(const Network& network, int first, int last,
                                            const StrategyOptions& options);

// ps: what is pushed and pulled as one key. mshadow-ps keys are layers, so
// ps ignores the bucket size: one key per layer with weights with overlap,
// one key for every layer without.
std::vector<GradientBucket> psKeys(const Network& network, const StrategyOptions& options);

// One question: this network on this cluster with this strategy and K workers
// of b examples each.
struct Scenario {
  Strategy strategy = Strategy::kRing;
  int workers = 1;
  int batchPerWorker = 128;
  StrategyOptions options;
};

// Ranks after the workers that `scenario`'s dedicated ps servers take
// (--ps-servers; 0 for other strategies and for ps on one worker, which
// has nothing to push).
inline int psServerRanks(const Scenario& scenario) {
  return scenario.strategy == Strategy::kPs && scenario.workers > 1 ? scenario.options.psServers
                                                                    : 0;
}

// Whether `options` ask for tensor parallelism, ZeRO or recomputation (the
// dimensions beyond 2014's data parallelism: cost/src/sharded.cpp).
inline bool usesShardedStep(const StrategyOptions& o) {
  return o.tp > 1 || o.zero > 0 || o.recompute != Recompute::kNone || o.pp > 1 ||
         o.microbatches > 1;
}
// Whether `options` ask for a pipeline or gradient accumulation (more than
// one stage or micro-batch: cost/src/pipeline.cpp).
inline bool usesPipeline(const StrategyOptions& o) {
  return o.pp > 1 || o.microbatches > 1;
}
// The speedup's reference (every engine's singleWorkerStep): the same
// network and options on one worker of b examples, no communication: ring
// without tensor parallelism, ZeRO or recomputation.
inline Scenario singleWorkerScenario(const Scenario& scenario) {
  Scenario single = scenario;
  single.workers = 1;
  single.strategy = Strategy::kRing;
  single.options.tp = 1;
  single.options.sequenceParallel = false;
  single.options.zero = 0;
  single.options.recompute = Recompute::kNone;
  single.options.pp = 1;
  single.options.microbatches = 1;
  single.options.schedule = PipelineSchedule::k1f1b;
  single.options.virtualStages = 1;
  single.options.stageStarts.clear();
  single.options.placement = Placement::kTpPpDp;
  return single;
}
// The workers of one data-parallel group: K / (tp x pp).
inline int dataParallelSize(const Scenario& scenario) {
  return scenario.workers / (std::max(1, scenario.options.tp) * std::max(1, scenario.options.pp));
}
// Where replica d's stage s's tensor-parallel worker i sits among the K =
// dp x tp x pp ranks (StrategyOptions::placement), and the groups that
// follow: a data-parallel group is the ranks of one (s, i), every
// dpStride() apart inside blocks of dpSpan() ranks (RankGroups' span and
// stride); a worker's next stage is stageDistance() ranks on.
struct RankLayout {
  int tp = 1, pp = 1, dp = 1;
  Placement order = Placement::kTpPpDp;
  int rank(int d, int s, int i) const {
    return (order == Placement::kTpPpDp ? d * pp + s : s * dp + d) * tp + i;
  }
  int stage(int r) const { return order == Placement::kTpPpDp ? r / tp % pp : r / (tp * dp); }
  int replica(int r) const { return order == Placement::kTpPpDp ? r / (tp * pp) : r / tp % dp; }
  int stageDistance() const { return order == Placement::kTpPpDp ? tp : tp * dp; }
  int dpSpan() const { return order == Placement::kTpPpDp ? tp * pp * dp : tp * dp; }
  int dpStride() const { return order == Placement::kTpPpDp ? tp * pp : tp; }
};
inline RankLayout rankLayoutOf(const Scenario& scenario) {
  return {std::max(1, scenario.options.tp), std::max(1, scenario.options.pp),
          dataParallelSize(scenario), scenario.options.placement};
}
// Examples one step trains: dp x microbatches x b (a tensor-parallel group
// shares its examples, a pipeline's stages pass the same ones on).
inline double examplesPerStep(const Scenario& scenario) {
  return double(dataParallelSize(scenario)) * std::max(1, scenario.options.microbatches) *
         scenario.batchPerWorker;
}

// The gradient allreduce of naive (the naive reducer) and ring
// (options.gradientSync).
inline AllreduceAlgorithm gradientAllreduce(const Scenario& scenario) {
  return scenario.strategy == Strategy::kNaive ? AllreduceAlgorithm::kNaive
                                               : scenario.options.gradientSync;
}

// The allreduce that `scenario`'s strategy synchronises its data-parallel
// gradients with: the naive reducer for naive, options.gradientSync for ring,
// options.convSync (conv layers) for owt-*; nullopt for ps (push and pull).
inline std::optional<AllreduceAlgorithm> syncAllreduce(const Scenario& scenario) {
  if (scenario.strategy == Strategy::kPs)
    return std::nullopt;
  return isModelParallel(scenario.strategy) ? scenario.options.convSync
                                            : gradientAllreduce(scenario);
}

// Time per phase of the compute stream.
struct PhaseTimes {
  Seconds fwd;
  Seconds bwdData;
  Seconds bwdWeights;
  Seconds update;
  Seconds total() const { return fwd + bwdData + bwdWeights + update; }
};

// Peak memory of one worker, by what it holds.
struct MemoryUse {
  Bytes weights;
  Bytes gradients;
  Bytes optimizer;    // momentum
  Bytes activations;  // saved for backward
  Bytes buffers;      // communication staging
  Bytes total() const { return weights + gradients + optimizer + activations + buffers; }
};

struct WorkerEstimate {
  int rank = 0;
  PhaseTimes compute;
  // Time this worker's communication keeps a link busy (its collectives'
  // durations, summed), and the part of it not hidden behind compute.
  Seconds communication;
  Seconds exposedCommunication;
  Seconds idle;  // step - compute - exposed communication
  Bytes sent;
  Bytes received;
  MemoryUse memory;
};

// owt-* only: the rounds of the FC phase.
struct RoundInfo {
  int rounds = 0;
  int batchPerRound = 0;    // examples in one round's FC batch
  Seconds transfer;         // activations in, per round
  Seconds compute;          // FC fwd + bwd compute, per round
  Seconds innerComm;        // exchanges between model-parallel layers, per round
  Seconds gradientReturn;   // activation gradients back to their owners, per round
  int hiddenTransfers = 0;  // activation transfers hidden behind FC compute
  Bytes egressPerRound;     // activation bytes leaving the busiest worker per round
};

// A whole training run (predict and simulate: --steps, or --epochs over a
// --dataset of examples): its length in steps and its time.
struct TrainingRun {
  double steps = 0;          // optimizer steps in the run; 0: no run asked
  double epochs = 0;         // 0 when the run was given in steps
  double dataset = 0;        // examples in the dataset (0 with steps)
  double stepsPerEpoch = 0;  // ceil(dataset / global batch) (0 with steps)
  // firstStep + (steps - 1) x step: steps x step where steps synchronise,
  // the first step and then the steady period for ps.
  Seconds time;
};

struct StepEstimate {
  std::string engine = "model";
  std::string network;
  std::string cluster;
  Scenario scenario;
  Seconds step;
  std::vector<WorkerEstimate> workers;
  // Examples per second over all workers (dp b / step: a tensor-parallel
  // group shares its examples).
  double throughput = 0;
  // A sequence model (an embedding reads the input): tokens a second,
  // throughput x T; 0 otherwise (model_flops.h, setUtilisation).
  double tokensPerSecond = 0;
  // Model FLOPs a second (3 x the forward matmuls, no recomputation) over
  // the K workers' peak for the element type, and the same counting the
  // recomputed forward (hardware FLOPs); 0 when no peak is known (a run
  // without a cluster).
  double modelFlopsUtilisation = 0;
  double hardwareFlopsUtilisation = 0;
  Seconds singleWorkerStep;  // same network, one worker, b examples, no communication
  double speedup = 0;        // throughput / single-worker throughput
  double efficiency = 0;     // speedup / K
  std::string bottleneck;    // the link limiting the costliest communication
  // The gradient allreduce of naive and ring (describeAllreduce: with auto,
  // what it picked per bucket); "" for the other strategies.
  std::string allreduce;
  // How compute was priced (profile, kernel tables, roofline), with the
  // kernel shapes that fell outside the tables' grid; "" for the executor.
  std::string computeSource;
  // With --tp or --zero: how the K workers split into tensor-parallel and
  // data-parallel groups and the links each group's collectives cross
  // ("dp 8 x tp 8: tensor-parallel groups of 8 consecutive workers inside
  // nvswitch, ..."); "" otherwise.
  std::string placement;
  // With --pp or --microbatches: the stages (their layers), the schedule
  // and the micro-batches; "" otherwise.
  std::string pipeline;
  // The pipeline's bubble: from the first stage's start to the last
  // backward's end, less the busiest stage's forwards and backwards ((P -
  // 1)(tf + tb) / V with balanced stages and free transfers). 0 without.
  Seconds pipelineBubble;
  bool fitsInMemory = true;  // peak memory of every worker <= device capacity
  // false when the bytes each worker sends and receives were not counted
  // (strata search: estimate's countBytes); they read 0 and print as null.
  bool bytesCounted = true;
  // strata predict, when it does not fit: the smallest change of --zero,
  // --tp, --sequence-parallel, --recompute that fits, with its memory and
  // step ("--zero 1: 12.8 GB per worker, step 174 ms"); "" when it fits,
  // "none of --zero, ..." when nothing does.
  std::string fitsWith;
  RoundInfo rounds;
  // ps runs steps back to back (the next forward waits only for its layers'
  // pulls): `step` is then the steady-state period and `firstStep` the first
  // step alone, from its start until its last pull lands; `steadySteps` is
  // how many steps were played to reach the period (model, simulator) or run
  // (executor). The other strategies synchronise before the next step:
  // firstStep = step and steadySteps = 1.
  Seconds firstStep;
  int steadySteps = 1;
  // Set by the CLI when a training run was asked (training.steps > 0).
  TrainingRun training;
};

}  // namespace strata

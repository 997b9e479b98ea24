// The Plan interpreter's entry points (docs/executor.md): whether a run can
// run (checkRun and its parts), the ranks' agreement on their configuration,
// and runWorker and runThreads, which lower a ps plan for the run's steps
// once and hand it to every rank (measurement.cpp runs and measures it; a
// rank's Worker is in worker.h).
#include "strata/exec/runtime.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <thread>

#include "measurement.h"
#include "strata/exec/comm/local_communicator.h"
#include "strata/exec/device.h"
#include "strata/exec/nn/backend.h"
#include "strata/model/error.h"
#include "strata/model/estimate.h"
#include "strata/model/limits.h"
#include "strata/model/plan.h"
#include "strata/model/quantity_text.h"

namespace strata::exec {

namespace {

using detail::bytesOf;
using detail::gatherToRoot;
using detail::kTagHash;
using detail::kTagVerdict;
using detail::writableBytesOf;

void fnv(uint64_t& h, const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
}
template <class T>
void fnv(uint64_t& h, const T& v) {
  fnv(h, &v, sizeof(v));
}

// The plan a run of options.steps steps executes. A ps plan holds every
// step of the run, back to back (any other plan one step, run once per
// step): one lowered for another number of steps is lowered again for this
// run, into `relowered`.
const Plan& planForSteps(const Plan& given, const Network& network, const RunOptions& options,
                         Plan& relowered) {
  if (given.iterations > 1 && given.iterations != options.steps && options.steps >= 1 &&
      options.steps <= kMaxRunSteps)
    relowered = lowerToPlan(network, given.scenario, options.steps);
  return relowered.tasks.empty() ? given : relowered;
}

// This rank's run of `plan` (lowered for options.steps) once its checks
// passed: the ranks agree on their configuration, then run and measure it.
RunResult runChecked(Communicator& comm, const Plan& plan, const Network& network,
                     const RunOptions& options) {
  const int world = plan.scenario.workers + plan.servers;
  comm.setTimeout(options.timeout);

  // Ranks started with different configs would compute nonsense together.
  const uint64_t hash = configHash(network, plan.scenario, options);
  const auto hashes = gatherToRoot(comm, hash, kTagHash);
  // verdict: (first rank that differs + 1 or 0, rank 0's hash, that rank's hash)
  std::vector<uint64_t> verdict{0, hash, 0};
  if (comm.rank() == 0) {
    for (int r = world - 1; r >= 1; --r)
      if (hashes[static_cast<size_t>(r)] != hash)
        verdict = {uint64_t(r) + 1, hash, hashes[static_cast<size_t>(r)]};
    for (int r = 1; r < world; ++r)
      comm.send(r, kTagVerdict, bytesOf(verdict));
  } else {
    comm.recv(0, kTagVerdict, writableBytesOf(verdict));
  }
  if (verdict[0] > 0)
    throw ConfigMismatch(fmt::format(
        "rank {} was started with a different configuration than rank 0 (config hash {:016x} vs "
        "{:016x}); start every rank with the same network, strategy, workers, batch, options and "
        "run options",
        verdict[0] - 1, verdict[2], verdict[1]));

  return detail::runMeasured(comm, plan, network, options);
}

}  // namespace

void checkRunnable(const Network& network, const Scenario& sc, Device device) {
  checkElement(sc.options.element, device);
  // Tensor and sequence parallelism run (Model's shares and positions, on
  // the cpu and cuda backends), ZeRO 1 to 3 (collectives and sharded
  // updates), and recomputation: full (each block's forward again) and
  // selective (the attention core again).
  // Gradient accumulation runs (each micro-batch's forward and backward in
  // turn, the gradients summed in place), and pipelines: each stage's
  // schedule (gpipe, 1f1b, interleaved) as the Plan orders it, every
  // micro-batch of the step in its own activation slot. Not yet: ZeRO with a
  // table tied across stages (each stage's reduce-scatter cuts its own
  // buckets, so the copies' summed shards would not line up).
  if (sc.options.pp > 1 && sc.options.zero >= 1)
    for (const auto& l : network.layers)
      if (l.spec.tiedTo >= 0)
        throw OptionError(
            "--zero",
            fmt::format("the executor runs ZeRO with --pp only on networks without tied tables; "
                        "'{}' shares its embedding's table with fc '{}', whose copies on the "
                        "first and last stage it would have to sum before the reduce-scatter "
                        "(strata predict and simulate price it)",
                        network.name, l.name));
  if (sc.strategy == Strategy::kPs && sc.options.psNode > 0 && sc.options.staleness > 0 &&
      sc.workers > 1)
    throw OptionError("--staleness",
                      "the executor runs two-level ps (--ps-node) with staleness 0 only; the "
                      "model and the simulator price S > 0");
  // One level of workers (threads, or ranks): no nodes to be hierarchical
  // over, and no cluster to choose by.
  if (const auto a = syncAllreduce(sc);
      a && (*a == AllreduceAlgorithm::kHierarchical || *a == AllreduceAlgorithm::kAuto))
    throw OptionError(isModelParallel(sc.strategy) ? "--conv-sync" : "--allreduce",
                      fmt::format("the executor runs one level of workers (threads, or MPI "
                                  "ranks) and runs ring, tree, halving-doubling, direct and "
                                  "naive; {} is priced and simulated (strata predict, strata "
                                  "simulate)",
                                  toString(*a)));
  for (size_t i = 0; i < network.layers.size(); ++i)
    if (network.layers[i].kind == LayerKind::kRnn)
      throw ConfigError(network.sourceFile, network.layers[i].configLine,
                        fmt::format("layers[{}]", i),
                        fmt::format("layer '{}' is an rnn, which the executor cannot run yet",
                                    network.layers[i].name));
}

uint64_t configHash(const Network& network, const Scenario& sc, const RunOptions& o) {
  uint64_t h = 1469598103934665603ull;
  fnv(h, network.name.data(), network.name.size());
  for (const auto& l : network.layers) {
    fnv(h, l.kind);
    fnv(h, l.outShape);
    fnv(h, l.params);
  }
  fnv(h, sc.strategy);
  fnv(h, sc.workers);
  fnv(h, sc.batchPerWorker);
  fnv(h, sc.options.overlap);
  fnv(h, sc.options.fcUpdate);
  fnv(h, sc.options.segment);
  fnv(h, sc.options.bucket);
  fnv(h, sc.options.element);
  fnv(h, sc.options.convSync);
  fnv(h, sc.options.gradientSync);
  fnv(h, sc.options.psPriority);
  fnv(h, sc.options.staleness);
  fnv(h, sc.options.psServers);
  fnv(h, sc.options.psNode);
  fnv(h, o.steps);
  fnv(h, o.learningRate);
  fnv(h, o.momentum);
  fnv(h, sc.options.optimizer);
  fnv(h, o.weightDecay);
  fnv(h, o.beta1);
  fnv(h, o.beta2);
  fnv(h, o.eps);
  fnv(h, o.seed);
  fnv(h, o.dropout);
  return h;
}

RunResult runWorker(Communicator& comm, const Plan& given, const Network& network,
                    const RunOptions& options) {
  Plan relowered;
  const Plan& plan = planForSteps(given, network, options, relowered);
  const int k = plan.scenario.workers;
  // Ranks: the workers, then a ps plan's dedicated servers.
  const int world = k + plan.servers;
  if (comm.size() != world)
    throw OptionError(
        "--workers",
        plan.servers > 0
            ? fmt::format("the plan has {} workers and {} ps server{} ({} ranks) but {} ranks "
                          "were started",
                          k, plan.servers, plan.servers == 1 ? "" : "s", world, comm.size())
            : fmt::format("the plan has {} workers but {} ranks were started", k, comm.size()));
  checkRun(network, plan.scenario, options, RunPlacement::kRanks);
  return runChecked(comm, plan, network, options);
}

float defaultLearningRate(Optimizer optimizer) {
  return isAdam(optimizer) ? nn::AdamParams{}.learningRate : RunOptions{}.learningRate;
}

float defaultWeightDecay(Optimizer optimizer) {
  return optimizer == Optimizer::kAdamW ? nn::kAdamWWeightDecay : 0.0f;
}

void checkRunOptions(const RunOptions& options) {
  if (options.steps < 1)
    throw OptionError("--steps", fmt::format("must be at least 1, got {}", options.steps));
  // Every step's timings are kept for the median step: bounded like any input.
  if (options.steps > kMaxRunSteps)
    throw OptionError("--steps",
                      fmt::format("must be at most {}, got {}", kMaxRunSteps, options.steps));
  // NaN, infinity or a huge rate would train to NaN losses and exit 0 (the
  // CLI's --lr takes the same range).
  if (!(options.learningRate > 0 && options.learningRate <= 1e6))
    throw OptionError("--lr", fmt::format("must be in (0, 1000000], got {}", options.learningRate));
  if (!(options.momentum >= 0 && options.momentum < 1))
    throw OptionError("--momentum", fmt::format("must be in [0, 1), got {}", options.momentum));
  if (!(options.weightDecay >= 0 && std::isfinite(options.weightDecay)))
    throw OptionError("--weight-decay",
                      fmt::format("must be finite and at least 0, got {}", options.weightDecay));
  // The betas and eps have no CLI option (PyTorch's defaults): a caller's
  // out-of-range value names the RunOptions member.
  if (!(options.beta1 >= 0 && options.beta1 < 1))
    throw OptionError("beta1", fmt::format("must be in [0, 1), got {}", options.beta1));
  if (!(options.beta2 >= 0 && options.beta2 < 1))
    throw OptionError("beta2", fmt::format("must be in [0, 1), got {}", options.beta2));
  if (!(options.eps > 0 && std::isfinite(options.eps)))
    throw OptionError("eps", fmt::format("must be positive and finite, got {}", options.eps));
  checkThreadsPerWorker(options.threadsPerWorker);
  if (!(options.timeout.value() > 0 && std::isfinite(options.timeout.value())))
    throw OptionError("--timeout",
                      fmt::format("must be a positive time, got {} s", options.timeout.value()));
}

void checkRunDevice(const RunOptions& options, int workers) {
  checkDevice(options.device, "--device");
  (void)workers;  // any K: workers share the GPUs round-robin (gpuOfWorker)
  STRATA_ENFORCE_OP(options.gpu, >=, -1);
  if (options.device == Device::kCuda)
    STRATA_ENFORCE_OP(options.gpu, <, deviceCount(Device::kCuda));
}

int gpuOfWorker(const RunOptions& options, int worker) {
  if (options.device != Device::kCuda)
    return 0;
  if (options.gpu >= 0)
    return options.gpu;
  return worker % std::max(1, deviceCount(Device::kCuda));
}

double runMemoryLowerBound(const Network& network, const Scenario& sc) {
  // Per worker (nn::Model): parameters, gradients and the optimizer's states
  // (none for sgd, whose update still allocates the momentum it runs with 0;
  // m and v for adam and adamw), and the copy of the parameters each worker
  // hands back (RunResult::parameters); every
  // layer's output and its gradient for b examples; the input batch. The
  // plan's bookkeeping: dependencies, done flags and timings per task.
  const double b = sc.batchPerWorker;
  double outputs = 0;
  for (const auto& l : network.layers)
    outputs += double(l.outShape.elements());
  const double states = std::max(1.0, optimizerStatesPerParam(sc.options.optimizer));
  const double floats = (3 + states) * double(network.totalParams()) + 2 * b * outputs +
                        b * double(network.input.elements());
  const double perWorker = floats * sizeof(float) + 32 * estimatePlanTasks(network, sc);
  // A ps plan's dedicated servers hold a whole model each (no activations
  // to speak of, counted alike: a bound, not an estimate).
  return perWorker * (sc.workers + psServerRanks(sc));
}

double bf16ScratchBytes(const Network& network, const Scenario& sc) {
  if (sc.options.element != ElementType::kBf16)
    return 0;
  // The slots of CudaBackend::Impl::bf16Slot, each grown to its largest
  // need (at least 256 bytes once used): 0 holds x (forward, backward
  // weights) or dy (backward data); 1 the weights (forward, backward data)
  // or dy (backward weights); 2 a convolution's result (y, dx or dw) or
  // attention's scores (below). A
  // layer that reads the network's input has no backward data (no dx, and
  // its dy is cast for the weights only). An fc slice of a model-parallel
  // part holds outputs / K rows at least.
  const double b = sc.batchPerWorker;
  std::array<double, 3> slot{};
  for (size_t i = 0; i < network.layers.size(); ++i) {
    const Layer& l = network.layers[i];
    const double in = b * double(l.inShape.elements());
    const bool backwardData = !l.readsNetworkInput();
    if (l.kind == LayerKind::kConv) {
      const double out = b * double(l.outShape.elements());
      const double w =
          double(l.spec.filters) * (l.inShape.c / l.spec.groups) * l.spec.kernelH * l.spec.kernelW;
      slot[0] = std::max({slot[0], in, backwardData ? out : 0.0});
      slot[1] = std::max({slot[1], w, out});
      slot[2] = std::max({slot[2], out, backwardData ? in : 0.0, w});
    } else if (l.kind == LayerKind::kFc) {
      const bool sliced = isModelParallel(sc.strategy) && network.modelParallelFrom >= 0 &&
                          int(i) >= network.modelParallelFrom;
      const double o = sliced ? std::floor(double(l.spec.outputs) / sc.workers) : l.spec.outputs;
      const double k = l.spec.flatten ? double(l.inShape.elements()) : double(l.inShape.c);
      const double positions = l.spec.flatten ? 1.0 : double(l.inShape.h) * l.inShape.w;
      const double out = b * positions * o;
      slot[0] = std::max({slot[0], in, backwardData ? out : 0.0});
      slot[1] = std::max({slot[1], o * k, out});
    } else if (l.kind == LayerKind::kAttention) {
      // attention_plan.h's casts: QKV (3 b f T) into slot 0; Wqkv and Wo
      // (4 f^2) or the context (b f T) into slot 1; the scores P and dS
      // (b heads T^2) into slot 2.
      const double f = l.inShape.c, t = double(l.inShape.h) * l.inShape.w;
      slot[0] = std::max(slot[0], 3 * b * f * t);
      slot[1] = std::max({slot[1], 4 * f * f, b * f * t});
      slot[2] = std::max(slot[2], b * l.spec.heads * t * t);
    }
  }
  double elements = 0;
  for (double e : slot)
    elements += e > 0 ? std::max(e, 128.0) : 0.0;
  return elements * sizeof(uint16_t);
}

double gpuWorkerMemoryLowerBound(const Network& network, const Scenario& sc) {
  Scenario one = sc;
  one.workers = 1;
  one.options.psServers = 0;
  // runMemoryLowerBound counts four copies of the parameters per worker; the
  // fourth (RunResult::parameters) is on the host. A bf16 run adds the
  // backend's bf16 scratch (at the run's K: a model-parallel slice's size).
  return runMemoryLowerBound(network, one) - double(network.totalParams()) * sizeof(float) +
         bf16ScratchBytes(network, sc);
}

std::string gpuMemoryShortfall(const GpuMemory& gpu, double perWorkerBytes, int workers,
                               const std::string& network, int batch) {
  const double need = perWorkerBytes * workers;
  if (need <= gpu.freeBytes)
    return {};
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  return fmt::format(
      "{} worker{} x {} examples of {} need at least {:.2f} GiB of device memory on GPU {} ({}) "
      "(weights, gradients, optimizer states and activations per worker), more than the "
      "{:.2f} GiB free there now (of {:.2f} GiB; cudaMemGetInfo); use a smaller --batch or fewer "
      "--workers per GPU",
      workers, workers == 1 ? "" : "s", batch, network, need / kGiB, gpu.gpu, gpu.name,
      gpu.freeBytes / kGiB, gpu.totalBytes / kGiB);
}

void checkThreadRun(const Network& network, const Scenario& sc, Device device, int gpu) {
  const int k = sc.workers;
  // Every rank of the run is a thread with a communication lane of its own
  // (two threads): the workers and a ps plan's dedicated servers.
  const int servers = psServerRanks(sc);
  const int64_t ranks = int64_t{k} + servers;
  const int64_t maxWorkers = threadWorkerLimit(limits());
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  if (k > maxWorkers)
    throw OptionError(
        "--workers",
        fmt::format("{} workers would start {} threads in this process, over the limit of {} "
                    "workers (64 or twice the {} cores, whichever is larger); use fewer workers, "
                    "run them as MPI ranks (mpirun -np {} strata run ...), or raise the limit "
                    "with {} N ({} lifts every limit)",
                    k, 2 * ranks, maxWorkers, cores, ranks, kMaxWorkersOption, kAllowLargeOption));
  if (ranks > maxWorkers)
    throw OptionError(
        "--ps-servers",
        fmt::format("{} workers and {} ps servers would start {} threads in this process (two "
                    "each), over the limit of {} workers and servers (64 or twice the {} cores, "
                    "whichever is larger); use fewer servers, run them as MPI ranks (mpirun -np "
                    "{} strata run ...), or raise the limit with {} N ({} lifts every limit)",
                    k, servers, 2 * ranks, maxWorkers, cores, ranks, kMaxWorkersOption,
                    kAllowLargeOption));
  if (device == Device::kCuda) {
    // Workers on GPU gpu, or round-robin (gpuOfWorker): each GPU used against
    // what it has free now.
    const int gpus = std::max(1, deviceCount(device));
    STRATA_ENFORCE_OP(gpu, <, gpus);
    std::vector<int> workersOn(static_cast<size_t>(gpus), 0);
    for (int w = 0; w < k; ++w)
      ++workersOn[static_cast<size_t>(gpu >= 0 ? gpu : w % gpus)];
    const double perWorker = gpuWorkerMemoryLowerBound(network, sc);
    for (int g = 0; g < gpus; ++g) {
      if (workersOn[static_cast<size_t>(g)] == 0)
        continue;
      const DeviceMemoryNow now = deviceMemoryNow(device, g);
      const std::string why =
          gpuMemoryShortfall(GpuMemory{g, now.name, now.freeBytes, now.totalBytes}, perWorker,
                             workersOn[static_cast<size_t>(g)], network.name, sc.batchPerWorker);
      if (!why.empty())
        throw OptionError(sc.batchPerWorker > 1 ? "--batch" : "--workers", why);
    }
    return;
  }
  const int sharing = k;
  double need = runMemoryLowerBound(network, sc);
  const MemoryLimit memory = availableMemory();
  const double available = memory.bytes;
  const std::string bound = memory.what;
  if (memory.addressSpace)  // the threads' stacks and arenas count too
    need += threadsReservedBytes(2 * ranks);
  if (available > 0 && need > available)
    throw OptionError(
        sc.batchPerWorker > 1 ? "--batch" : "--workers",
        fmt::format("{} workers x {} examples of {} need at least {} of memory (weights, "
                    "gradients, optimizer states and activations per worker{}), more than the {} "
                    "available ({}); use a smaller --batch or fewer --workers",
                    sharing, sc.batchPerWorker, network.name, formatBytes(Bytes(need)),
                    device == Device::kCpu && servers > 0 ? ", and a model per ps server" : "",
                    formatBytes(Bytes(available)), bound));
}

void checkRun(const Network& network, const Scenario& sc, const RunOptions& options,
              RunPlacement placement) {
  checkRunnable(network, sc, options.device);
  checkRunOptions(options);
  checkRunDevice(options, sc.workers);
  if (sc.strategy == Strategy::kPs && sc.options.staleness > 0 && options.device != Device::kCpu)
    throw OptionError("--staleness",
                      "the GPU executor runs ps with staleness 0 only (the CPU executor, the "
                      "model and the simulator take S > 0)");
  if (psServerRanks(sc) > 0 && options.device != Device::kCpu)
    throw OptionError("--ps-servers",
                      "the GPU executor runs ps with its servers sharded over the workers only "
                      "(the CPU executor, the model and the simulator take dedicated servers)");
  if (placement == RunPlacement::kThreads) {
    checkThreadRun(network, sc, options.device, options.gpu);
    coresOfWorker(options.binding, 0, sc.workers + psServerRanks(sc), options.threadsPerWorker);
  } else if (options.binding != CoreBinding::kAuto) {
    throw OptionError("--bind-to",
                      "applies to workers run as threads; under mpirun, bind the ranks with "
                      "mpirun's own --bind-to");
  }
  if (placement == RunPlacement::kRanks && options.device == Device::kCuda && options.gpu >= 0) {
    // A rank per GPU: this rank's worker against what its GPU has free.
    const DeviceMemoryNow now = deviceMemoryNow(options.device, options.gpu);
    const std::string why = gpuMemoryShortfall(
        GpuMemory{options.gpu, now.name, now.freeBytes, now.totalBytes},
        gpuWorkerMemoryLowerBound(network, sc), 1, network.name, sc.batchPerWorker);
    if (!why.empty())
      throw OptionError("--batch", why);
  }
}

RunResult runThreads(const Plan& given, const Network& network, const RunOptions& options,
                     std::vector<std::vector<float>>* perRankParameters) {
  checkRun(network, given.scenario, options, RunPlacement::kThreads);
  // Once for every thread (each rank lowered it again when it ran).
  Plan relowered;
  const Plan& plan = planForSteps(given, network, options, relowered);
  const int k = plan.scenario.workers;
  const int world = k + plan.servers;  // a ps plan's dedicated servers are threads too
  std::vector<RunResult> results(static_cast<size_t>(world));
  // On GPUs, the device communicator: each worker's messages are copied and
  // summed on its own GPU's stream (cuda_ops.h).
  std::vector<std::shared_ptr<BufferOps>> ops;
  for (int w = 0; w < world && (options.commOps || options.device != Device::kCpu); ++w)
    ops.push_back(options.commOps ? options.commOps(w)
                                  : makeCommOps(options.device, gpuOfWorker(options, w)));
  runLocal(
      world,
      [&](Communicator& comm) {
        // Before the worker starts its kernel and communication threads,
        // which inherit the binding.
        bindThisThread(
            coresOfWorker(options.binding, comm.rank(), world, options.threadsPerWorker));
        results[static_cast<size_t>(comm.rank())] = runChecked(comm, plan, network, options);
      },
      options.timeout, std::move(ops));
  if (perRankParameters) {
    perRankParameters->clear();
    for (int r = 0; r < k; ++r)  // the workers' (a server's is current in its chunks only)
      perRankParameters->push_back(std::move(results[static_cast<size_t>(r)].parameters));
  }
  return std::move(results[0]);
}

}  // namespace strata::exec

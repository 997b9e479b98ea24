// The executor: interprets a strategy's Plan with real buffers — real forward
// and backward passes (strata::nn), real gradients and activations on the wire
// (strata::exec::Communicator, threads or MPI ranks), real SGD — and measures
// every task, producing the same StepEstimate and trace schema as the model and
// the simulator.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "strata/exec/comm/communicator.h"
#include "strata/exec/device.h"
#include "strata/model/cluster.h"
#include "strata/model/network.h"
#include "strata/model/plan.h"
#include "strata/model/strategy.h"
#include "strata/model/timeline.h"

namespace strata::exec {

struct RunOptions {
  // Where each worker computes: its own CpuBackend, or its own CudaBackend.
  Device device = Device::kCpu;
  // CUDA: the GPU every worker of this process uses; -1: worker w on GPU
  // w mod (GPUs this process sees), so K workers share fewer GPUs
  // round-robin, each with its own streams (gpuOfWorker).
  int gpu = -1;
  // CPU: threads of each worker's kernels (CpuOptions::threads; the CLI's
  // --threads-per-worker, by default the cores this process may use divided
  // among its workers). Results depend on it only in the last bits.
  int threadsPerWorker = 1;
  // runThreads: each worker's (and ps server's) threads on cores of their
  // own, or not (device.h, CoreBinding). MPI ranks are bound by mpirun.
  CoreBinding binding = CoreBinding::kAuto;
  // runThreads: how worker w copies and sums its messages; empty: by device
  // (makeCommOps: the host's, or its GPU's stream and kernels). Tests give
  // instrumented ops here to see that every byte goes through them.
  std::function<std::shared_ptr<BufferOps>(int worker)> commOps;
  // Every rank's compute backend; empty: by device (makeBackend). Tests give
  // a CPU backend whose memory the host may not address (memory.h) here, so
  // any host touch of a buffer on the run's path fails as it would on a GPU.
  std::function<std::unique_ptr<nn::Backend>(int rank)> backend;
  int steps = 10;
  // The update rule is the plan's (plan.scenario.options.optimizer: sgd,
  // momentum, adam or adamw; nn::UpdateRule), with these hyper-parameters.
  float learningRate = 0.01f;
  float momentum = 0.9f;  // sgd (as 0) and momentum
  // L2 in the gradient (sgd, momentum, adam) or decoupled (adamw).
  float weightDecay = 0;
  // adam and adamw: nn::AdamParams' defaults (PyTorch's).
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  uint64_t seed = 1;    // weights, synthetic data and dropout masks
  bool dropout = true;  // off makes runs comparable across worker counts
  // Steps left out of the measured estimate (the first touches cold memory).
  int warmup = 1;
  // Called on rank 0 after every step with (step, global loss, step seconds).
  std::function<void(int, double, double)> onStep;
  // Fault injection, to test that a failing worker ends the run: rank
  // `failRank` throws at the start of step `failStep` (-1: never).
  int failRank = -1;
  int failStep = 0;
  // Fault injection, to test that a stopped worker ends the run: rank
  // `hangRank` stops at the start of step `hangStep` (-1: never). With
  // `hangStopsProcess` (under MPI) its whole process stops (SIGSTOP), as a
  // frozen node would, and the heartbeats end the job; otherwise (threads) the
  // worker stops communicating until the world is aborted, and the other
  // workers' receive timeout ends the run.
  int hangRank = -1;
  int hangStep = 0;
  bool hangStopsProcess = false;
  // How long a blocked receive waits before failing (naming peer and tag).
  Seconds timeout = Seconds(60);
};

struct StepLog {
  int step = 0;
  double loss = 0;     // mean loss over the global batch
  double seconds = 0;  // slowest worker's wall time for the step
};

// The first step whose loss is not finite (the training diverged), or
// nullptr: its step times stand, its weights do not.
inline const StepLog* firstDivergedStep(const std::vector<StepLog>& steps) {
  for (const auto& st : steps)
    if (!std::isfinite(st.loss))
      return &st;
  return nullptr;
}

// What every rank returns; rank 0's also holds the whole run's view.
struct RunResult {
  std::vector<StepLog> steps;  // rank 0: every step
  // Rank 0: the measured step (median over the steps after warmup), per worker.
  StepEstimate measured;
  // Rank 0: every worker's tasks during the median step, for the trace.
  Timeline timeline;
  // This rank's parameters after the last step (model-parallel layers hold
  // their slice only).
  std::vector<float> parameters;
  // Rank 0, ps with staleness S: the most steps any worker's forward of a
  // layer ran ahead of the newest pull of it that had landed (0..S; 0: the
  // run never needed the staleness). Its weights are always those of step
  // s - 1 - S's pull (delayed SGD, so a run is reproducible bit for bit).
  int stalenessSeen = 0;
};

// Ranks started with different configurations. runWorker throws it on every
// rank at the same point (rank 0's verdict reaches all), so a caller may end
// every rank cleanly, as after any mistake all ranks agree on.
class ConfigMismatch : public UserError {
 public:
  using UserError::UserError;
};

// Where the ranks of a run are: what checkRun checks beyond the run itself.
enum class RunPlacement {
  kRanks,    // this process is one rank (runWorker; e.g. under mpirun)
  kThreads,  // every rank is a thread of this process (runThreads)
};

// The one check of whether the executor can run `scenario` of `network` with
// `options`, its ranks placed as `placement`: throws UserError saying why
// not (OptionError naming the option, ConfigError naming a layer's file and
// line), InvariantError when options.gpu is not -1 or a GPU this process
// sees. In this order:
// checkRunnable, checkRunOptions, checkRunDevice, what only the CPU executor
// runs (ps with staleness, dedicated ps servers), and for threads
// checkThreadRun. Cheap (O(layers)); runWorker and runThreads call it, and a
// caller may call it before lowering and printing anything.
void checkRun(const Network& network, const Scenario& scenario, const RunOptions& options,
              RunPlacement placement);

// Part of checkRun: throws UserError (OptionError for options) when the
// executor cannot run this scenario on `device`: an element type it does not
// compute in there (checkElement: fp32 only on the CPU; fp32, tf32 and bf16 on
// CUDA), an rnn layer.
void checkRunnable(const Network& network, const Scenario& scenario, Device device = Device::kCpu);

// A hash of everything the ranks must agree on (the network's layers and
// shapes, strategy, K, b, options, run options); compared at start.
uint64_t configHash(const Network& network, const Scenario& scenario, const RunOptions& options);

// Runs `options.steps` steps (1..kMaxRunSteps) of `plan` on this rank (comm.rank() is the
// worker). A one-step plan runs once per step, each step over before the next
// starts; a ps plan runs its steps back to back (a step's forward of a layer
// waits only for that layer's pull), lowered again for options.steps when it
// holds another number (so pass lowerToPlan(network, scenario, steps) for the
// timeline's task ids to be the plan's, and for the plan to be lowered once).
// A step's measured time is then the
// period from the end of the step before; RunResult::measured.firstStep is
// the first step's. Collective: every rank of comm.size() == plan.scenario.workers
// ranks must call it with the same arguments; ranks whose config hash differs
// are detected at start (ConfigMismatch on every rank). Throws UserError for what
// cannot run (checkRun, placed as kRanks); CommError for
// communication failures (timeouts name the peer and tag).
RunResult runWorker(Communicator& comm, const Plan& plan, const Network& network,
                    const RunOptions& options);

// Steps of one run: every step's task timings are kept until the end (a ps
// plan holds them all: checkPlanSize bounds it).
inline constexpr int kMaxRunSteps = 1'000'000;

// The defaults of a run with `optimizer` where the user gives none: learning
// rate 0.01 for sgd and momentum, PyTorch's 1e-3 for adam and adamw; weight
// decay 0, except PyTorch's 0.01 for adamw (nn::AdamParams).
float defaultLearningRate(Optimizer optimizer);
float defaultWeightDecay(Optimizer optimizer);

// Part of checkRun: throws OptionError naming the option when a run option is
// out of range:
// steps in 1..kMaxRunSteps, learning rate in (0, 1e6], momentum in [0, 1),
// weight decay finite and >= 0, betas in [0, 1), eps positive and finite,
// timeout positive and finite (NaN and infinities included).
void checkRunOptions(const RunOptions& options);

// Part of checkRun: throws OptionError naming --device when options.device
// cannot be used here
// (not built, or no usable GPU: checkDevice); InvariantError when
// options.gpu is not -1 or a GPU this process sees.
void checkRunDevice(const RunOptions& options, int workers);

// The GPU ordinal worker `worker` of this process computes on (0 on the CPU).
int gpuOfWorker(const RunOptions& options, int worker);

// A lower bound of the memory K = scenario.workers workers of this process
// need (each its own network: parameters, gradients, the optimizer's states
// of scenario.options.optimizer, activations of b examples; the plan's
// per-task bookkeeping), in bytes.
double runMemoryLowerBound(const Network& network, const Scenario& scenario);

// The device memory one worker of `scenario` needs on its GPU at least, in
// bytes: runMemoryLowerBound's share of one worker, less the copy of the
// parameters it hands back (host memory), plus bf16ScratchBytes.
double gpuWorkerMemoryLowerBound(const Network& network, const Scenario& scenario);

// The CUDA backend's bf16 scratch of a worker of `scenario`, in bytes (0
// unless scenario.options.element is bf16): the bf16 copies of the operands
// and a convolution's bf16 result, three slots each as large as the largest
// such operand or result of any conv or fc layer at the run's batch per
// worker. A pure function (gpuWorkerMemoryLowerBound adds it).
double bf16ScratchBytes(const Network& network, const Scenario& scenario);

// One GPU's memory as cudaMemGetInfo reads it now (device.h: deviceMemoryNow).
struct GpuMemory {
  int gpu = 0;
  std::string name;       // "NVIDIA H100 80GB HBM3"
  double freeBytes = 0;   // free now: other processes' allocations are not
  double totalBytes = 0;  // its global memory
};

// Whether `workers` workers that need `perWorkerBytes` each fit in what `gpu`
// has free (not its total: a GPU asked for more than is free fails or, with
// managed memory, can hang). Empty when they fit; otherwise the one-line
// refusal, naming the GPU, the bytes needed and free (GiB), and `option`'s
// remedy. A pure function, for checkThreadRun and its tests.
std::string gpuMemoryShortfall(const GpuMemory& gpu, double perWorkerBytes, int workers,
                               const std::string& network, int batch);

// Part of checkRun for threads: throws OptionError before any thread starts
// when K = scenario.workers threads-as-workers are over limits()'s
// thread-worker limit (naming --workers and the option that raises it) or
// need more memory than this machine has (naming --batch). Cheap (O(layers)).
// On CUDA the bound is per GPU: the workers placed on each GPU (gpuOfWorker;
// all on `gpu` when it is not -1) against the memory free on it now
// (gpuMemoryShortfall).
void checkThreadRun(const Network& network, const Scenario& scenario, Device device = Device::kCpu,
                    int gpu = -1);

// Runs the plan on K = plan.scenario.workers threads of this process (and
// one more per dedicated ps server, plan.servers) and returns rank 0's
// result (with every worker's parameters in `perRankParameters` when
// non-null). Checks first (checkRun, placed as kThreads) and lowers a ps
// plan for options.steps once for all workers (as runWorker). A worker that
// throws ends all workers; the error names it.
RunResult runThreads(const Plan& plan, const Network& network, const RunOptions& options,
                     std::vector<std::vector<float>>* perRankParameters = nullptr);

}  // namespace strata::exec

// `strata run`: training steps for real and measured; threads by default, MPI
// ranks when started by mpirun.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cmath>
#include <csignal>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <thread>
#include <tuple>
#include <utility>

#include "commands.h"
#include "flags.h"
#include "rank_start.h"
#include "strata/exec/comm/mpi_communicator.h"
#ifdef STRATA_HAVE_NCCL
#include "strata/exec/comm/nccl_communicator.h"
#endif
#include "strata/exec/nn/cpu_backend.h"
#include "strata/exec/runtime.h"
#include "strata/model/plan.h"
#include "strata/model/quantity_text.h"
#include "strata/model/timeline.h"
#include "strata/study/trace.h"

namespace strata::cli {

namespace {

struct RunFlags {
  std::string network, strategy, workers, trace, timeout = "60s", heartbeat = "1s",
                                                 format = "table", seed = "1", device = "cpu",
                                                 bindTo = "auto";
  ScenarioFlags flags;
  TraceFlags traceFlags;
  LimitFlags limitFlags;
  exec::RunOptions run;
  bool noDropout = false;
  CLI::Option* momentumOption = nullptr;     // whether --momentum was given
  CLI::Option* lrOption = nullptr;           // whether --lr was given
  CLI::Option* weightDecayOption = nullptr;  // whether --weight-decay was given
};

// A run's options and configs, read and checked. Every user mistake shows
// while this is made, before any rank works with another.
struct Setup {
  Network net;
  Scenario sc;
  Plan plan;
  exec::RunOptions opt;
  Format format = Format::kTable;
  TraceOptions traceOptions;
  std::unique_ptr<TraceFile> traceFile;       // rank 0 (or threads) with --trace
  nn::CpuIsa cpuIsa = nn::CpuIsa::kBaseline;  // the CPU kernels' path (--device cpu)
};

// A finite time of at least 100 ms with its unit: a bare "2" could be meant
// as seconds or as heartbeats missed, so it is refused.
Seconds heartbeatOf(const RunFlags& f) {
  const std::string& text = f.heartbeat;
  const auto last = text.find_last_not_of(" \t");
  if (last == std::string::npos || std::isdigit(static_cast<unsigned char>(text[last])) ||
      text[last] == '.')
    throw OptionError("--heartbeat",
                      "needs a time with its unit, such as 1s or 500ms, got '" + text + "'");
  const Seconds period = parseTime(text, "--heartbeat");
  if (period.value() < 0.1)
    throw OptionError("--heartbeat",
                      "must be at least 100ms (a rank's watcher looks every "
                      "period / 4, at most every 50 ms), got '" +
                          text + "'");
  return period;
}

// --threads-per-worker, or by default the cores this process may use divided
// among the workers it runs (threads: all K and the ps servers; under mpirun
// the ranks on this node, unless mpirun bound the rank to its own cores).
int threadsPerWorker(const RunFlags& f, const Scenario& sc, exec::Device device, int ranks) {
  const auto given = f.flags.given();
  const bool explicitly =
      std::find(given.begin(), given.end(), OptionKey::kThreadsPerWorker) != given.end();
  if (device == exec::Device::kCuda) {
    if (explicitly)
      throw OptionError("--threads-per-worker",
                        "applies to --device cpu (a cuda worker's kernels run on its GPU)");
    return 1;
  }
  if (explicitly)
    return sc.options.threadsPerWorker;
  const int cores = exec::usableCores();
  const int machine = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  int sharing = sc.workers + psServerRanks(sc);
  if (ranks > 0)  // a rank bound to fewer cores than the machine has owns them
    sharing = cores < machine ? 1 : std::max(1, exec::localSizeFromLauncher());
  return std::clamp(cores / std::max(1, sharing), 1, kMaxThreadsPerWorker);
}

// `ranks`: the number of MPI ranks, 0 on threads. Throws UserError.
Setup prepare(const RunFlags& f, int ranks, int rank) {
  Setup s;
  s.format = parseFormat(f.format);
  if (s.format == Format::kCsv)
    throw OptionError("--format", "run prints table or json");
  // A trace target that cannot be one (a device, a folder): before any work.
  if (rank == 0 && !f.trace.empty())
    checkOutputFile(f.trace, "--trace");
  exec::RunOptions& opt = s.opt;
  opt = f.run;
  f.limitFlags.apply();
  opt.timeout = parseTime(f.timeout, "--timeout");
  opt.seed = parseSeed(f.seed, "--seed");
  heartbeatOf(f);
  opt.dropout = !f.noDropout;
  checkRange(opt.learningRate, 0, 1e6, true, "--lr");
  if (!(opt.learningRate > 0))
    throw OptionError("--lr", "must be positive");
  checkRange(opt.momentum, 0, 1, false, "--momentum");
  if (!(opt.weightDecay >= 0 && std::isfinite(opt.weightDecay)))
    throw OptionError("--weight-decay",
                      fmt::format("must be finite and at least 0, got {}", opt.weightDecay));
  if (opt.steps < 1)
    throw OptionError("--steps", fmt::format("must be at least 1, got {}", opt.steps));
  for (const auto& [option, value] :
       {std::pair{"--fail-rank", opt.failRank}, std::pair{"--hang-rank", opt.hangRank}})
    if (value < -1)
      throw OptionError(option, "must be a worker (0..K-1)");
  for (const auto& [option, value] :
       {std::pair{"--fail-step", opt.failStep}, std::pair{"--hang-step", opt.hangStep}})
    if (value < 0)
      throw OptionError(option, "must be at least 0");
  if (ranks == 0 && f.workers.empty())
    throw OptionError("--workers", "required when not started by mpirun (threads: --workers K)");
  s.net = networkArg(f.network, "--network");
  const std::string workers = f.workers.empty() ? std::to_string(ranks) : f.workers;
  s.sc = f.flags.scenario(f.strategy, workers);
  // sgd and momentum run Backend::sgdMomentum (sgd: momentum 0), adam and
  // adamw Backend::adam; unset --lr and --weight-decay take the optimizer's
  // defaults (exec::defaultLearningRate, defaultWeightDecay).
  const Optimizer optimizer = s.sc.options.optimizer;
  const auto given = [](const CLI::Option* o) { return o != nullptr && o->count() > 0; };
  if (!given(f.lrOption))
    opt.learningRate = exec::defaultLearningRate(optimizer);
  if (!given(f.weightDecayOption))
    opt.weightDecay = exec::defaultWeightDecay(optimizer);
  if (isAdam(optimizer) && given(f.momentumOption))
    throw OptionError("--momentum", fmt::format("applies to sgd and momentum, not {} (whose "
                                                "moments decay with PyTorch's betas 0.9, 0.999)",
                                                toString(optimizer)));
  if (optimizer == Optimizer::kSgd) {
    if (f.momentumOption && f.momentumOption->count() > 0 && opt.momentum != 0)
      throw OptionError("--optimizer", fmt::format("sgd has no momentum, but --momentum {} was "
                                                   "given (use --optimizer momentum)",
                                                   opt.momentum));
    opt.momentum = 0;
  }
  // Under mpirun a ps plan's dedicated servers are ranks too (after the
  // workers): without -k the workers are the ranks the servers leave.
  auto servers = [&] { return psServerRanks(s.sc); };
  if (ranks > 0 && f.workers.empty() && servers() > 0) {
    if (ranks - servers() < 2)
      throw OptionError(
          "--ps-servers",
          fmt::format("{} servers leave {} of the {} ranks mpirun started for "
                      "workers; start at least {} ranks",
                      servers(), std::max(0, ranks - servers()), ranks, servers() + 2));
    s.sc = f.flags.scenario(f.strategy, std::to_string(ranks - servers()));
  }
  if (ranks > 0 && s.sc.workers + servers() != ranks)
    throw OptionError("--workers",
                      servers() > 0
                          ? fmt::format("is {} with {} ps server{} ({} ranks) but mpirun started "
                                        "{} ranks",
                                        s.sc.workers, servers(), servers() == 1 ? "" : "s",
                                        s.sc.workers + servers(), ranks)
                          : fmt::format("is {} but mpirun started {} ranks", s.sc.workers, ranks));
  for (const auto& [option, worker, step, stepOption] :
       {std::tuple{"--fail-rank", opt.failRank, opt.failStep, "--fail-step"},
        std::tuple{"--hang-rank", opt.hangRank, opt.hangStep, "--hang-step"}}) {
    if (worker >= s.sc.workers)
      throw OptionError(option,
                        fmt::format("worker {} does not exist (K = {})", worker, s.sc.workers));
    if (worker >= 0 && step >= opt.steps)
      throw OptionError(stepOption,
                        fmt::format("step {} is past the last step ({} steps)", step, opt.steps));
  }
  if (opt.hangRank >= 0 && s.sc.workers < 2)
    throw OptionError("--hang-rank",
                      "needs 2 workers or more (a lone worker that hangs has no "
                      "peer to notice it)");
  opt.hangStopsProcess = ranks > 0;
  opt.device = exec::parseDevice(f.device, "--device");
  // An element type the device does not run is a mistake on any machine.
  exec::checkElement(s.sc.options.element, opt.device);
  exec::checkRunDevice(opt, s.sc.workers);
  if (ranks > 0 && opt.device == exec::Device::kCuda) {
    // A rank per GPU: its local rank on the node picks it.
    const int gpus = std::max(1, exec::deviceCount(opt.device));
    const int local = exec::localRankFromLauncher();
    opt.gpu = (local >= 0 ? local : rank) % gpus;
#ifdef STRATA_HAVE_NCCL
    const int onNode = exec::localSizeFromLauncher();
    if (ranks > 1 && onNode > gpus)
      throw OptionError(
          "--device",
          fmt::format("cuda under mpirun runs one rank per GPU (NCCL refuses two ranks on one "
                      "GPU): {} ranks on this node, {} GPU{}; start at most {} rank{} per node, "
                      "or run the workers as threads of one process, where they may share a GPU "
                      "(strata run -k {} --device cuda, without mpirun)",
                      onNode, gpus, gpus == 1 ? "" : "s", gpus, gpus == 1 ? "" : "s", ranks));
#else
    // Without NCCL the ranks' messages would go through MPI, which this
    // build hands host pointers only: a GPU rank's buffers are device memory.
    if (ranks > 1)
      throw OptionError("--device",
                        fmt::format("cuda under mpirun needs NCCL between the {} ranks (this "
                                    "strata was built without it); run the workers as threads of "
                                    "one process instead (strata run -k {} --device cuda, "
                                    "without mpirun)",
                                    ranks, ranks));
#endif
  }
  if (opt.device == exec::Device::kCpu)
    s.cpuIsa = nn::selectedCpuIsa();  // a bad STRATA_CPU_ISA is a mistake, before any work
  s.sc.options.threadsPerWorker = threadsPerWorker(f, s.sc, opt.device, ranks);
  opt.threadsPerWorker = s.sc.options.threadsPerWorker;
  opt.binding = exec::parseCoreBinding(f.bindTo, "--bind-to");
  exec::checkRun(s.net, s.sc, opt,
                 ranks > 0 ? exec::RunPlacement::kRanks : exec::RunPlacement::kThreads);
  s.plan = lowerToPlan(s.net, s.sc, s.opt.steps);  // a ps plan holds every step
  // Every rank checks the trace options, so all stop together on a mistake.
  s.traceOptions = f.traceFlags.options(f.trace, s.sc.workers);
  if (!f.trace.empty())
    checkTraceSize(s.plan, s.traceOptions);
  if (rank == 0 && !f.trace.empty())
    s.traceFile = std::make_unique<TraceFile>(f.trace, "--trace");
  return s;
}

// Where the workers compute and how their data moves, in words.
std::string placementOf(const Setup& s, bool mpi) {
  if (s.opt.device == exec::Device::kCpu) {
    const int servers = s.plan.servers;
    const std::string on = mpi ? "MPI ranks" : "threads";
    return servers > 0 ? fmt::format("{}, and {} ps server{} as {} after them", on, servers,
                                     servers == 1 ? "" : "s", mpi ? "ranks" : "threads")
                       : on;
  }
  if (mpi) {
#ifdef STRATA_HAVE_NCCL
    return s.sc.workers > 1 ? "MPI ranks, one GPU each, NCCL" : "MPI rank, on cuda";
#else
    return "MPI ranks on cuda, data staged through the host";
#endif
  }
  const int gpus = std::max(1, exec::deviceCount(s.opt.device));
  const int used = std::min(gpus, s.sc.workers);
  const int sharing = (s.sc.workers + gpus - 1) / gpus;
  return fmt::format("threads on {} GPU{}{}, device-to-device copies", used, used == 1 ? "" : "s",
                     sharing > 1 ? fmt::format(", up to {} workers sharing a GPU", sharing) : "");
}

// Threads: the cores each worker is bound to (exec::CoreBinding), 0 when
// unbound; under mpirun 0 (mpirun binds the ranks, not strata).
int boundCoresPerWorker(const Setup& s, bool mpi) {
  if (mpi)
    return 0;
  return static_cast<int>(
      exec::coresOfWorker(s.opt.binding, 0, s.sc.workers + s.plan.servers, s.opt.threadsPerWorker)
          .size());
}

std::string headerLine(const Setup& s, bool mpi) {
  // The threads are on the kernels' line below.
  StrategyOptions shown = s.sc.options;
  shown.threadsPerWorker = StrategyOptions{}.threadsPerWorker;
  const auto options = nonDefaultOptionsText(s.sc.strategy, shown);
  std::string kernels;
  if (s.opt.device == exec::Device::kCpu) {
    std::string bound;
    if (!mpi) {
      const int cores = boundCoresPerWorker(s, mpi);
      bound = cores == 0 ? ", threads not bound to cores"
                         : fmt::format(", each worker bound to {} core{} of its own", cores,
                                       cores == 1 ? "" : "s");
    }
    kernels = fmt::format("cpu kernels: {}, {} thread{} per worker{}{}\n",
                          nn::cpuIsaDescription(s.cpuIsa), s.opt.threadsPerWorker,
                          s.opt.threadsPerWorker == 1 ? "" : "s", mpi ? " (rank 0)" : "", bound);
  }
  // The update rule's own hyper-parameters (the optimizer itself is among
  // the options when not the default).
  std::string rule = isAdam(s.sc.options.optimizer)
                         ? fmt::format("lr {}, betas {} {}, eps {}", s.opt.learningRate,
                                       s.opt.beta1, s.opt.beta2, s.opt.eps)
                         : fmt::format("lr {}, momentum {}", s.opt.learningRate, s.opt.momentum);
  if (s.opt.weightDecay != 0)
    rule += fmt::format(", weight decay {}", s.opt.weightDecay);
  return fmt::format("{}: {}, {} workers ({}) x {} examples, {} steps, {}{}\n{}", s.net.name,
                     toString(s.sc.strategy), s.sc.workers, placementOf(s, mpi),
                     s.sc.batchPerWorker, s.opt.steps, rule, options.empty() ? "" : ", " + options,
                     kernels);
}

// Prints each step as it ends (table format): every step on short runs; on
// long ones 25 lines with a progress bar. `header` comes first.
void printSteps(exec::RunOptions& opt, std::string header) {
  const int every = std::max(1, opt.steps / 25);
  const int steps = opt.steps;
  opt.onStep = [every, steps, header = std::move(header)](int s, double loss,
                                                          double seconds) mutable {
    if (!header.empty()) {
      std::cout << header;
      header.clear();
    }
    if (s % every != 0 && s + 1 != steps)
      return;
    std::string bar;
    if (every > 1) {
      const int filled = (s + 1) * 20 / steps;
      bar = "[" + std::string(static_cast<size_t>(filled), '#') +
            std::string(static_cast<size_t>(20 - filled), '.') + "] ";
    }
    std::cout << fmt::format("{}step {:>4}/{}  loss {:8.4f}  step time {}\n", bar, s + 1, steps,
                             loss, formatSeconds(Seconds(seconds)))
              << std::flush;
  };
}

// Rank 0's (or the threads') report of a finished run; its exit status. A
// trace that cannot be written (a full disk) loses no measurement: the
// measured step is printed all the same, then one line says what was not
// written (status 1). The trace's temporary file is gone then and a file
// that was at --trace is as it was.
int report(const RunFlags& f, Setup& s, exec::RunResult& result, bool mpi) {
  const int stale = s.sc.strategy == Strategy::kPs && s.sc.workers > 1 ? s.sc.options.staleness : 0;
  result.measured.cluster = mpi ? "mpi" : s.opt.device == exec::Device::kCpu ? "threads" : "cuda";
  std::string notWritten;
  if (s.traceFile) {
    try {
      writeTrace(s.traceFile->stream(), s.plan, s.net, result.measured, result.timeline,
                 s.traceOptions);
      s.traceFile->finish();
    } catch (const WriteError& e) {
      notWritten = e.what();
    }
    if (!notWritten.empty())
      s.traceFile.reset();  // removes the temporary file now
  }
  const exec::StepLog* diverged = exec::firstDivergedStep(result.steps);
  if (s.format == Format::kJson) {
    std::cout << "{\"steps\":[";
    for (size_t i = 0; i < result.steps.size(); ++i) {
      const double loss = result.steps[i].loss;
      std::cout << (i ? "," : "")
                << fmt::format("{{\"step\":{},\"loss\":{},\"step_s\":{:.9g}}}",
                               result.steps[i].step,
                               std::isfinite(loss) ? fmt::format("{:.9g}", loss) : "null",
                               result.steps[i].seconds);
    }
    std::cout << "],";
    if (stale > 0)
      std::cout << fmt::format("\"staleness_seen\":{},", result.stalenessSeen);
    if (s.opt.device == exec::Device::kCpu)
      std::cout << fmt::format(
          "\"cpu_kernels\":{{\"isa\":\"{}\",\"threads_per_worker\":{},"
          "\"bound_cores_per_worker\":{}}},",
          nn::cpuIsaName(s.cpuIsa), s.opt.threadsPerWorker, boundCoresPerWorker(s, mpi));
    std::cout << "\"measured\":";
    printEstimate(std::cout, result.measured, Format::kJson);
    std::cout << "}\n";
  } else {
    std::cout << "\nmeasured (median step after warm-up):\n";
    printEstimate(std::cout, result.measured, s.format);
    if (stale > 0 && s.format == Format::kTable)
      std::cout << fmt::format(
          "\nstaleness: a forward ran at most {} of the {} steps allowed "
          "ahead of its layer's newest pull\n",
          result.stalenessSeen, stale);
    if (s.traceFile)
      std::cout << "\ntrace written to " << f.trace << " (open it in ui.perfetto.dev)\n";
  }
  if (diverged) {
    std::cout << std::flush;
    std::cerr << fmt::format(
        "strata: warning: the loss is not finite from step {} on (the training diverged: "
        "try a smaller --lr than {}); the step times above stand, the weights do not\n",
        diverged->step + 1, s.opt.learningRate);
  }
  if (notWritten.empty())
    return 0;
  std::cout << std::flush;
  std::cerr << "strata: error: " << notWritten
            << " (the run above was measured; its trace was not written)\n";
  return kRunFailureExit;
}

int runThreads(const RunFlags& f) {
  Setup s = prepare(f, 0, 0);
  if (s.format == Format::kTable)
    printSteps(s.opt, headerLine(s, false));
  exec::RunResult result = exec::runThreads(s.plan, s.net, s.opt);
  return report(f, s, result, false);
}

#ifdef STRATA_HAVE_MPI
// mpirun ends the surviving ranks with SIGTERM when a rank dies (kill -9, the
// OOM killer) or the job is interrupted. Under `mpirun -q` nothing else would
// say so: rank 0 prints one line then, unless another rank's line already
// said why (MpiCommunicator::endSeenElsewhere). Async-signal-safe: atomic
// loads, the clock, write(2), the default action.
std::atomic<const exec::MpiCommunicator*> gTermWatch{nullptr};

extern "C" void onTerminate(int signal) {
  removeTemporaryFilesNow();  // an unfinished trace's (atomic_file.h)
  const exec::MpiCommunicator* comm = gTermWatch.load();
  if (comm && !comm->endSeenElsewhere()) {
    constexpr char kLine[] =
        "strata: error: mpirun ended the run (SIGTERM): a rank died or the job was interrupted "
        "(mpirun without -q names the rank)\n";
    [[maybe_unused]] const auto written = ::write(2, kLine, sizeof kLine - 1);
  }
  std::signal(signal, SIG_DFL);
  std::raise(signal);
}

// Installs onTerminate on rank 0 for the lifetime of the run.
class TermWatch {
 public:
  explicit TermWatch(const exec::MpiCommunicator& comm) {
    if (comm.rank() != 0)
      return;
    gTermWatch = &comm;
    previous_ = std::signal(SIGTERM, onTerminate);
    installed_ = true;
  }
  ~TermWatch() {
    if (!installed_)
      return;
    std::signal(SIGTERM, previous_);
    gTermWatch = nullptr;
  }
  TermWatch(const TermWatch&) = delete;
  TermWatch& operator=(const TermWatch&) = delete;

 private:
  bool installed_ = false;
  void (*previous_)(int) = SIG_DFL;
};

// One line on this rank's stderr, as main prints it; the exit status.
int printError(const std::exception& e) {
  std::cerr << "strata: error: " << e.what() << "\n";
  return dynamic_cast<const UserError*>(&e) ? kUserErrorExit : kRunFailureExit;
}

// `strata run` as one MPI rank. Every rank starts MPI and its heartbeats
// first, then reads its options and configs and agrees with the others on
// the outcome, so that a mistake (on every rank, or only on some: a file one
// node cannot read) ends every rank cleanly: rank 0 prints the one line, all
// finalise MPI and exit 2, no MPI_Abort. A failure while the ranks work
// together (a worker fails, a peer stops or dies, a timeout) ends the job
// with one line and status 1 (MpiCommunicator::abort). `f` is null when the
// command line itself was wrong (`mistake`).
int runRank(const RunFlags* f, std::string mistake, Process process) {
  exec::MpiSession session(*process.argc, *process.argv);
  Seconds heartbeat(exec::MpiCommunicator::kDefaultHeartbeatSeconds);
  if (f) {
    try {
      heartbeat = heartbeatOf(*f);
    } catch (const UserError& e) {
      mistake = e.what();
    }
  }
  std::optional<exec::MpiCommunicator> comm;
  if (!openWorld(comm, heartbeat))
    return kRunFailureExit;
  const bool root = comm->rank() == 0;
  const TermWatch termWatch(*comm);

  std::optional<Setup> setup;
  if (const int status = startRanks(*comm, mistake,
                                    [&](exec::Communicator& c) {
                                      setup.emplace(prepare(*f, c.size(), c.rank()));
                                      c.setTimeout(setup->opt.timeout);
                                    });
      status != 0)
    return status;

  Setup& s = *setup;
  // The header waits for the first step: ranks started with different
  // configurations end before it (ConfigMismatch) with the one line only.
  if (root && s.format == Format::kTable)
    printSteps(s.opt, headerLine(s, true));
  exec::RunResult result;
  std::string mismatch;
  auto work = [&](exec::Communicator& c) {
    try {
      result = exec::runWorker(c, s.plan, s.net, s.opt);
    } catch (const exec::ConfigMismatch& e) {
      mismatch = e.what();  // every rank has it: end cleanly, as a mistake
    }
  };
  // A GPU rank alone in the job: its copies are device to device.
  if (s.opt.device == exec::Device::kCuda && comm->size() == 1)
    comm->setOps(exec::makeCommOps(s.opt.device, s.opt.gpu));
#ifdef STRATA_HAVE_NCCL
  // GPUs across processes: the workers' data moves by NCCL, one rank per GPU.
  std::optional<exec::NcclCommunicator> nccl;
  if (s.opt.device == exec::Device::kCuda && comm->size() > 1) {
    exec::runOrAbort(*comm, [&](exec::Communicator&) { nccl.emplace(*comm, s.opt.gpu); });
    exec::runOrAbort(*nccl, work);
  } else {
    exec::runOrAbort(*comm, work);
  }
#else
  exec::runOrAbort(*comm, work);
#endif
  if (!mismatch.empty()) {
    if (root)
      std::cerr << "strata: error: " << mismatch << "\n";
    return kUserErrorExit;
  }
  if (!root)
    return 0;
  // The other ranks are done: a failure here is rank 0's alone, and MPI
  // still finalises cleanly.
  try {
    return report(*f, s, result, true);
  } catch (const std::exception& e) {
    return printError(e);
  }
}
#endif

}  // namespace

int reportRunMistake(Process process, const std::string& message) {
  if (exec::launchedByMpiexec()) {
#ifdef STRATA_HAVE_MPI
    return runRank(nullptr, message, process);
#endif
  }
  (void)process;
  std::cerr << "strata: error: " << message << "\n";
  return kUserErrorExit;
}

Command addRunCommand(CLI::App& app, Process process) {
  auto f = std::make_shared<RunFlags>();
  auto* sub = app.add_subcommand(
      "run", "run training steps for real (threads, or MPI ranks under mpirun) and measure them");
  sub->add_option("--network,-n", f->network, kNetworkHelp)->required();
  sub->add_option("--strategy,-s", f->strategy, "naive|ring|owt-a|owt-b|owt-c|ps")->required();
  sub->add_option("--workers,-k", f->workers,
                  "number of workers (threads); under mpirun the number of ranks");
  f->flags.add(sub);
  sub->add_option("--device", f->device,
                  "cpu (default) or cuda (needs a CUDA build): K workers on the GPUs round-robin, "
                  "sharing one when K exceeds them; under mpirun one rank per GPU, data by NCCL");
  sub->add_option("--steps", f->run.steps, "training steps (default 10)");
  f->lrOption = sub->add_option("--lr", f->run.learningRate,
                                "learning rate (default 0.01; 0.001 with --optimizer adam|adamw, "
                                "PyTorch's)");
  f->momentumOption =
      sub->add_option("--momentum", f->run.momentum,
                      "SGD momentum in [0, 1) (default 0.9; 0 with --optimizer sgd)");
  f->weightDecayOption = sub->add_option(
      "--weight-decay", f->run.weightDecay,
      "weight decay >= 0: L2 in the gradient (sgd, momentum, adam) or decoupled (adamw) "
      "(default 0; 0.01 with --optimizer adamw, PyTorch's)");
  sub->add_option("--seed", f->seed, "seed of weights, data and dropout (default 1)");
  sub->add_flag("--no-dropout", f->noDropout, "turn dropout off (runs then match across K)");
  sub->add_option("--trace", f->trace,
                  "write the measured step as a Chrome trace-event JSON (gzipped when it ends in "
                  ".gz)");
  f->traceFlags.add(sub);
  f->limitFlags.add(sub, true);
  sub->add_option("--bind-to", f->bindTo,
                  "threads: auto (default), core or none; core puts each worker's threads "
                  "(kernels and communication) on cores of its own, auto does when every "
                  "worker can have them (K x threads per worker <= the cores this process may "
                  "use); under mpirun, use mpirun's --bind-to");
  sub->add_option("--timeout", f->timeout,
                  "how long a blocked receive from a live peer waits before failing (default "
                  "60s)");
  sub->add_option("--heartbeat", f->heartbeat,
                  "under mpirun: heartbeat period between ranks; a rank silent for 5 periods "
                  "(stopped or dead) ends the run (default 1s)");
  sub->add_option("--fail-rank", f->run.failRank,
                  "fault injection (tests): this rank throws at --fail-step");
  sub->add_option("--fail-step", f->run.failStep, "step of the injected fault (default 0)");
  sub->add_option("--hang-rank", f->run.hangRank,
                  "fault injection (tests): this rank stops at --hang-step (under mpirun its "
                  "process stops, SIGSTOP)");
  sub->add_option("--hang-step", f->run.hangStep, "step of the injected hang (default 0)");
  addFormatOption(sub, f->format, "output: table|json (default table)");
  sub->footer(
      "Examples:\n"
      "  strata run --network tiny-cnn --strategy owt-b --workers 4 --steps 20 --trace run.json\n"
      "  mpirun -q -np 4 strata run --network tiny-cnn --strategy ring --steps 20\n"
      "Networks too large for this machine run with a smaller batch: --batch 8.\n"
      "Under mpirun, -q keeps mpirun's own banner from following strata's one error line.");
  return {sub, [f, process] {
            if (!exec::launchedByMpiexec())
              return runThreads(*f);
#ifdef STRATA_HAVE_MPI
            return runRank(f.get(), "", process);
#else
            (void)process;
            throw UserError("started by mpirun, but this strata was built without MPI");
#endif
          }};
}

}  // namespace strata::cli

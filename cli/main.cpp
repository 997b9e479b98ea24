// The `strata` command: what-if questions about distributed training.
//
// Every user mistake ends as one line "strata: error: ..." naming the file,
// line and key or the option, with exit status 2; bugs exit with status 1.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <thread>
#include <tuple>

#include "output.h"
#include "strata/exec/calibrate.h"
#include "strata/exec/comm/mpi_communicator.h"
#include "strata/exec/profile.h"
#include "strata/exec/runtime.h"
#include "strata/model/error.h"
#include "strata/model/estimate.h"
#include "strata/model/plan.h"
#include "strata/model/presets.h"
#include "strata/model/quantity_text.h"
#include "strata/model/validation.h"
#include "strata/model/validation_suite.h"
#include "validate.h"

namespace strata::cli {
namespace {

constexpr int kUserErrorExit = 2;

std::vector<std::string> splitList(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ','))
    out.push_back(item);
  if (!text.empty() && text.back() == ',')
    out.emplace_back();
  return out;
}

std::vector<int> parsePositiveList(const std::string& text, const std::string& option) {
  std::vector<int> out;
  for (const auto& item : splitList(text)) {
    int v = 0;
    auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (item.empty() || ec != std::errc() || ptr != item.data() + item.size() || v < 1)
      throw OptionError(
          option,
          "must be a positive integer or a comma-separated list of them, got '" + text + "'");
    out.push_back(v);
  }
  return out;
}

// One positive integer (options that take a single value).
int parsePositive(const std::string& text, const std::string& option) {
  const auto values = parsePositiveList(text, option);
  if (values.size() != 1)
    throw OptionError(option, "takes one value, got '" + text + "' (compare and sweep take lists)");
  return values.front();
}

// A byte size such as "1MiB", "25 MB" or 0.
Bytes parseSize(const std::string& text, const std::string& option) {
  const auto v = parseQuantity(text, QuantityKind::kBytes);
  if (!v || *v < 0)
    throw OptionError(option, "must be a size such as 1MiB or 0, got '" + text + "'");
  return Bytes(*v);
}

bool parseOnOff(const std::string& text, const std::string& option) {
  if (text == "on" || text == "true")
    return true;
  if (text == "off" || text == "false")
    return false;
  throw OptionError(option, "must be on or off, got '" + text + "'");
}

Format parseFormat(const std::string& text) {
  if (text == "table")
    return Format::kTable;
  if (text == "json")
    return Format::kJson;
  if (text == "csv")
    return Format::kCsv;
  throw OptionError("--format", "must be table, json or csv, got '" + text + "'");
}

// The options shared by predict, compare and sweep, as typed on the command line.
struct ScenarioFlags {
  std::string batch;
  std::string overlap;
  std::string fcUpdate;
  std::string segment;
  std::string bucket;
  std::string element;
  std::string allreduce;

  void add(CLI::App* app) {
    app->add_option("--batch,-b", batch, "examples per worker per step (default 128)");
    app->add_option("--overlap", overlap,
                    "overlap gradient communication with backprop: on|off (default on)");
    app->add_option("--fc-update", fcUpdate, "owt-b/owt-c FC update per round|step (default step)");
    app->add_option(
        "--bucket", bucket,
        "gradient bucket size with overlap, e.g. 25MiB, 0 = per layer (default 25 MiB)");
    app->add_option("--segment", segment,
                    "segment size of pipelined transfers, e.g. 1MiB, 0 = off (default 4 MiB)");
    app->add_option("--element", element, "element type: fp32|fp16|bf16 (default fp32)");
    app->add_option(
        "--allreduce", allreduce,
        "conv-gradient sync of owt-*: direct|ring|halving-doubling|naive (default direct)");
  }

  // One scenario from --strategy, --workers and these flags over the defaults.
  Scenario scenario(const std::string& strategy, const std::string& workers) const {
    Scenario sc;
    sc.strategy = parseStrategy(strategy, "--strategy");
    sc.workers = parsePositive(workers, "--workers");
    apply(sc.batchPerWorker, sc.options);
    return sc;
  }

  // Applies the flags given on the command line over `base` (from a file or defaults).
  void apply(int& batchPerWorker, StrategyOptions& o) const {
    if (!batch.empty())
      batchPerWorker = parsePositive(batch, "--batch");
    if (!overlap.empty())
      o.overlap = parseOnOff(overlap, "--overlap");
    if (!fcUpdate.empty())
      o.fcUpdate = parseFcUpdate(fcUpdate, "--fc-update");
    if (!segment.empty())
      o.segment = parseSize(segment, "--segment");
    if (!bucket.empty())
      o.bucket = parseSize(bucket, "--bucket");
    if (!element.empty())
      o.element = parseElementType(element, "--element");
    if (!allreduce.empty())
      o.convSync = parseAllreduceAlgorithm(allreduce, "--allreduce");
  }
};

// One step estimate from the chosen engine: the closed-form model, or the
// simulator playing the strategy's Plan with contention on.
StepEstimate evaluate(const Network& net, const Cluster& cl, const Scenario& sc,
                      const std::string& engine) {
  if (engine == "model")
    return estimate(net, cl, sc);
  if (engine == "sim")
    return sim::simulate(lowerToPlan(net, sc), net, cl, sim::Options{}).estimate;
  throw OptionError("--engine", "must be model or sim, got '" + engine + "'");
}

// "3:1.5" -> worker 3 runs 1.5x slower.
void parseStraggler(const std::string& text, std::vector<double>& slowdown, int workers) {
  const auto colon = text.find(':');
  int w = -1;
  double f = 0;
  bool ok = colon != std::string::npos;
  if (ok) {
    const auto ws = text.substr(0, colon), fs = text.substr(colon + 1);
    auto [p1, e1] = std::from_chars(ws.data(), ws.data() + ws.size(), w);
    auto [p2, e2] = std::from_chars(fs.data(), fs.data() + fs.size(), f);
    ok = e1 == std::errc() && p1 == ws.data() + ws.size() && e2 == std::errc() &&
         p2 == fs.data() + fs.size() && w >= 0 && f > 0;
  }
  if (!ok)
    throw OptionError("--straggler",
                      "must be WORKER:FACTOR with FACTOR > 0, e.g. 3:1.5, got '" + text + "'");
  if (w >= workers)
    throw OptionError("--straggler", fmt::format("worker {} does not exist (K = {})", w, workers));
  if (slowdown.size() <= static_cast<size_t>(w))
    slowdown.resize(static_cast<size_t>(w) + 1, 1.0);
  slowdown[static_cast<size_t>(w)] = f;
}

Network networkArg(const std::string& nameOrPath, const std::string& option) {
  return loadNetwork(resolveConfig(ConfigKind::kNetwork, nameOrPath, option));
}
Cluster clusterArg(const std::string& nameOrPath, const std::string& option) {
  return loadCluster(resolveConfig(ConfigKind::kCluster, nameOrPath, option));
}

// The cluster with a per-op profile of `net` attached when `profilePath` is
// given (--profile): compute is then priced from the network's own op times.
Cluster withProfile(Cluster cluster, const Network& net, const std::string& profilePath) {
  if (!profilePath.empty())
    cluster.device.profile = std::make_shared<OpProfile>(loadProfile(profilePath, net));
  return cluster;
}

void writeOutput(const std::string& path, const std::function<void(std::ostream&)>& print) {
  if (path.empty() || path == "-") {
    print(std::cout);
    return;
  }
  std::ofstream file(path);
  if (!file)
    throw OptionError("--out", "cannot write '" + path + "'");
  print(file);
  if (!file)
    throw OptionError("--out", "error while writing '" + path + "'");
}

// `strata run`: threads by default; MPI ranks when started by mpirun.
template <class Flags>
int runCommand(int& argc, char**& argv, const std::string& netName, const std::string& strategy,
               std::string workers, const Flags& flags, exec::RunOptions opt, bool noDropout,
               const std::string& timeout, const std::string& tracePath, Format format) {
  if (format == Format::kCsv)
    throw OptionError("--format", "run prints table or json");
  const auto t = parseQuantity(timeout, QuantityKind::kTime);
  if (!t || *t <= 0)
    throw OptionError("--timeout", "must be a positive time such as 30s, got '" + timeout + "'");
  opt.timeout = Seconds(*t);
  opt.dropout = !noDropout;
  if (!(opt.learningRate > 0))
    throw OptionError("--lr", "must be positive");
  if (opt.momentum < 0 || opt.momentum >= 1)
    throw OptionError("--momentum", "must be in [0, 1)");
  const auto net = networkArg(netName, "--network");
  const bool mpi = exec::launchedByMpiexec();
  auto runAndReport = [&](exec::Communicator* comm, int k) {
    if (workers.empty())
      workers = std::to_string(k);
    const Scenario sc = flags.scenario(strategy, workers);
    if (comm && sc.workers != k)
      throw OptionError("--workers",
                        fmt::format("is {} but mpirun started {} ranks", sc.workers, k));
    exec::checkRunnable(net, sc);
    const Plan plan = lowerToPlan(net, sc);
    const bool root = !comm || comm->rank() == 0;
    std::ofstream traceFile;
    if (root && !tracePath.empty()) {
      traceFile.open(tracePath);
      if (!traceFile)
        throw OptionError("--trace", "cannot write '" + tracePath + "'");
    }
    if (root && format == Format::kTable) {
      std::cout << fmt::format(
          "{}: {}, {} workers ({}) x {} examples, {} steps, lr {}, momentum {}\n", net.name,
          toString(sc.strategy), sc.workers, comm ? "MPI ranks" : "threads", sc.batchPerWorker,
          opt.steps, opt.learningRate, opt.momentum);
      // Every step on short runs; on long ones 25 lines with a progress bar.
      const int every = std::max(1, opt.steps / 25);
      opt.onStep = [&, every](int s, double loss, double seconds) {
        if (s % every != 0 && s + 1 != opt.steps)
          return;
        std::string bar;
        if (every > 1) {
          const int filled = (s + 1) * 20 / opt.steps;
          bar = "[" + std::string(static_cast<size_t>(filled), '#') +
                std::string(static_cast<size_t>(20 - filled), '.') + "] ";
        }
        std::cout << fmt::format("{}step {:>4}/{}  loss {:8.4f}  step time {}\n", bar, s + 1,
                                 opt.steps, loss, formatSeconds(Seconds(seconds)))
                  << std::flush;
      };
    }
    exec::RunResult result =
        comm ? exec::runWorker(*comm, plan, net, opt) : exec::runThreads(plan, net, opt);
    if (!root)
      return;
    result.measured.cluster = comm ? "mpi" : "threads";
    if (traceFile.is_open()) {
      writeTrace(traceFile, plan, net, result.measured, result.timeline);
      if (!traceFile.flush())
        throw OptionError("--trace", "error while writing '" + tracePath + "'");
    }
    if (format == Format::kJson) {
      std::cout << "{\"steps\":[";
      for (size_t i = 0; i < result.steps.size(); ++i)
        std::cout << (i ? "," : "")
                  << fmt::format("{{\"step\":{},\"loss\":{:.9g},\"step_s\":{:.9g}}}",
                                 result.steps[i].step, result.steps[i].loss,
                                 result.steps[i].seconds);
      std::cout << "],\"measured\":";
      printEstimate(std::cout, result.measured, Format::kJson);
      std::cout << "}\n";
      return;
    }
    std::cout << "\nmeasured (median step after warm-up):\n";
    printEstimate(std::cout, result.measured, format);
    if (traceFile.is_open())
      std::cout << "\ntrace written to " << tracePath << " (open it in ui.perfetto.dev)\n";
  };
  if (!mpi) {
    if (workers.empty())
      throw OptionError("--workers", "required when not started by mpirun (threads: --workers K)");
    runAndReport(nullptr, 0);
    return 0;
  }
#ifdef STRATA_HAVE_MPI
  exec::MpiSession session(argc, argv);
  exec::MpiCommunicator comm;
  exec::runOrAbort(comm, [&](exec::Communicator& c) { runAndReport(&c, c.size()); });
  return 0;
#else
  throw UserError("started by mpirun, but this strata was built without MPI");
#endif
}

// `strata validate`: measured steps against model and simulator, on one
// network (a one-entry suite built from the flags) or over a suite file.
// steps and repeats are 0 when not given on the command line.
int validateCommand(const std::string& netName, const std::string& strategies,
                    const std::string& workers, int batch, const std::string& suitePath, int steps,
                    int repeats, ValidateOptions opt) {
  if (steps != 0 && steps < kMinValidateSteps)
    throw OptionError("--steps", "must be at least 3 (2 warm-up steps, then measured ones)");
  if (repeats < 0)
    throw OptionError("--repeats", "must be at least 1");
  ValidationSuite suite;
  if (!suitePath.empty()) {
    suite = loadValidationSuite(resolveConfig(ConfigKind::kExperiment, suitePath, "--suite"));
    opt.suite = true;
  } else {
    if (batch < 1)
      throw OptionError("--batch", "must be at least 1");
    SuiteEntry entry;
    entry.network = networkArg(netName, "--network");
    entry.batches = {batch};
    suite.name = entry.network.name;
    suite.entries.push_back(std::move(entry));
    suite.strategies = parseStrategies(strategies, "--strategies");
    suite.workers = parsePositiveList(workers, "--workers");
    suite.repeats = 1;  // one run per row unless --repeats asks for a spread
    suite.steps = 8;
  }
  if (steps != 0)
    suite.steps = steps;
  if (repeats != 0)
    suite.repeats = repeats;
  return runValidation(suite, opt);
}

int run(int argc, char** argv) {
  CLI::App app{"strata: how fast will this network train on this cluster with this strategy?"};
  app.require_subcommand(1);
  app.footer(
      "Examples:\n"
      "  strata list\n"
      "  strata describe alexnet-owt\n"
      "  strata predict --network alexnet-owt --cluster k20x8-pcie --strategy owt-b --workers 8\n"
      "  strata compare configs/experiments/owt-k20.yaml\n"
      "  strata compare --network resnet50 --cluster dgx-h100 --strategies ring,ps --workers "
      "8,16,64\n"
      "  strata sweep --networks alexnet-owt,vgg16 --clusters k20x8-pcie --workers 1,2,4,8 "
      "--format csv\n"
      "Networks and clusters are preset names (strata list) or paths to YAML files "
      "(docs/configs.md).");
  std::string format = "table";
  auto addFormat = [&](CLI::App* sub) {
    sub->add_option("--format", format, "output: table|json|csv (default table)");
  };

  // list
  auto* list = app.add_subcommand("list", "list the preset networks, clusters and experiments");
  addFormat(list);

  // describe
  std::string describeNet, describeElement = "fp32";
  auto* describe =
      app.add_subcommand("describe", "per-layer shapes, parameters and FLOPs of a network");
  describe->add_option("network", describeNet, "network preset or YAML file")->required();
  describe->add_option("--element", describeElement, "element type for byte sizes: fp32|fp16|bf16");
  addFormat(describe);
  describe->footer("Example:\n  strata describe alexnet-owt --format json");

  // predict
  std::string predNet, predCluster, predStrategy, predWorkers, predProfile;
  ScenarioFlags predFlags;
  auto* predict =
      app.add_subcommand("predict", "one network x cluster x strategy x K: the breakdown");
  predict->add_option("--network,-n", predNet, "network preset or YAML file")->required();
  predict->add_option("--cluster,-c", predCluster, "cluster preset or YAML file")->required();
  predict->add_option("--profile", predProfile,
                      "per-op profile of the network (strata profile --out): price compute from "
                      "its measured op times");
  predict->add_option("--strategy,-s", predStrategy, "naive|ring|owt-a|owt-b|owt-c|ps")->required();
  predict->add_option("--workers,-k", predWorkers, "number of workers K")->required();
  predFlags.add(predict);
  std::string engine = "model";
  auto addEngine = [&](CLI::App* sub) {
    sub->add_option("--engine", engine,
                    "model (closed form) or sim (simulated Plan); default model");
  };
  addEngine(predict);
  addFormat(predict);
  predict->footer(
      "Example:\n"
      "  strata predict -n alexnet-owt -c k20x8-pcie -s owt-b -k 8 --fc-update round");

  // compare
  std::string cmpExperiment, cmpNet, cmpCluster, cmpStrategies, cmpWorkers, cmpProfile;
  ScenarioFlags cmpFlags;
  auto* compare = app.add_subcommand("compare", "strategies x worker counts side by side");
  compare->add_option("experiment", cmpExperiment, "experiment preset or YAML file (optional)");
  compare->add_option("--network,-n", cmpNet, "network (overrides the experiment's)");
  compare->add_option("--cluster,-c", cmpCluster, "cluster (overrides the experiment's)");
  compare->add_option("--profile", cmpProfile,
                      "per-op profile of the network (strata profile --out): price compute from "
                      "its measured op times");
  compare->add_option("--strategies,-s", cmpStrategies, "comma-separated strategies or all");
  compare->add_option("--workers,-k", cmpWorkers, "comma-separated worker counts");
  cmpFlags.add(compare);
  addEngine(compare);
  addFormat(compare);
  compare->footer(
      "Examples:\n"
      "  strata compare owt-k20\n"
      "  strata compare -n alexnet-owt -c k20x8-pcie -s all -k 1,2,4,8 --format csv");

  // plan
  std::string planNet, planStrategy, planWorkers;
  ScenarioFlags planFlags;
  auto* plan = app.add_subcommand("plan", "the tasks of one training step, as engines run them");
  plan->add_option("--network,-n", planNet, "network preset or YAML file")->required();
  plan->add_option("--strategy,-s", planStrategy, "naive|ring|owt-a|owt-b|owt-c|ps")->required();
  plan->add_option("--workers,-k", planWorkers, "number of workers K")->required();
  planFlags.add(plan);
  addFormat(plan);
  plan->footer("Example:\n  strata plan -n tiny-cnn -s ring -k 3 --overlap off");

  // simulate
  std::string simNet, simCluster, simStrategy, simWorkers, simContention = "on", simTrace,
                                                           simProfile;
  std::vector<std::string> simStragglers;
  double simJitter = 0;
  uint64_t simSeed = 1;
  ScenarioFlags simFlags;
  auto* simulateCmd =
      app.add_subcommand("simulate", "play one step's Plan on a simulated cluster, with a trace");
  simulateCmd->add_option("--network,-n", simNet, "network preset or YAML file")->required();
  simulateCmd->add_option("--cluster,-c", simCluster, "cluster preset or YAML file")->required();
  simulateCmd->add_option("--profile", simProfile,
                          "per-op profile of the network (strata profile --out): price compute "
                          "from its measured op times");
  simulateCmd->add_option("--strategy,-s", simStrategy, "naive|ring|owt-a|owt-b|owt-c|ps")
      ->required();
  simulateCmd->add_option("--workers,-k", simWorkers, "number of workers K")->required();
  simFlags.add(simulateCmd);
  simulateCmd->add_option("--contention", simContention,
                          "links shared by concurrent transfers split their bandwidth: on|off "
                          "(default on; off = the analytic model's assumption)");
  simulateCmd->add_option("--straggler", simStragglers,
                          "WORKER:FACTOR, that worker computes FACTOR x slower (repeatable)");
  simulateCmd->add_option("--jitter", simJitter,
                          "each compute time x (1 + u), u uniform in [-J, J] (default 0)");
  simulateCmd->add_option("--seed", simSeed, "seed of the jitter (default 1)");
  simulateCmd->add_option("--trace", simTrace,
                          "write a Chrome trace-event JSON file (open it in ui.perfetto.dev)");
  addFormat(simulateCmd);
  simulateCmd->footer(
      "Examples:\n"
      "  strata simulate -n alexnet-owt -c k20x8-pcie -s owt-b -k 4 --trace step.json\n"
      "  strata simulate -n resnet50 -c dgx-h100 -s ring -k 16 --straggler 3:1.2");

  // run
  std::string runNet, runStrategy, runWorkers, runTrace, runTimeout = "60s";
  ScenarioFlags runFlags;
  exec::RunOptions runOpt;
  bool runNoDropout = false;
  auto* runCmd = app.add_subcommand(
      "run", "run training steps for real (threads, or MPI ranks under mpirun) and measure them");
  runCmd->add_option("--network,-n", runNet, "network preset or YAML file")->required();
  runCmd->add_option("--strategy,-s", runStrategy, "naive|ring|owt-a|owt-b|owt-c|ps")->required();
  runCmd->add_option("--workers,-k", runWorkers,
                     "number of workers (threads); under mpirun the number of ranks");
  runFlags.add(runCmd);
  runCmd->add_option("--steps", runOpt.steps, "training steps (default 10)");
  runCmd->add_option("--lr", runOpt.learningRate, "SGD learning rate (default 0.01)");
  runCmd->add_option("--momentum", runOpt.momentum, "SGD momentum (default 0.9)");
  runCmd->add_option("--seed", runOpt.seed, "seed of weights, data and dropout (default 1)");
  runCmd->add_flag("--no-dropout", runNoDropout, "turn dropout off (runs then match across K)");
  runCmd->add_option("--trace", runTrace, "write the measured step as a Chrome trace-event JSON");
  runCmd->add_option("--timeout", runTimeout,
                     "how long a blocked receive waits before failing (default 60s)");
  runCmd->add_option("--fail-rank", runOpt.failRank,
                     "fault injection (tests): this rank throws at --fail-step");
  runCmd->add_option("--fail-step", runOpt.failStep, "step of the injected fault (default 0)");
  addFormat(runCmd);
  runCmd->footer(
      "Examples:\n"
      "  strata run --network tiny-cnn --strategy owt-b --workers 4 --steps 20 --trace run.json\n"
      "  mpirun -np 4 strata run --network tiny-cnn --strategy ring --steps 20\n"
      "Networks too large for this machine run with a smaller batch: --batch 8.");

  // validate
  std::string valNet = "tiny-cnn", valStrategies = "all", valWorkers = "1,2", valSuite;
  int valSteps = 0, valBatch = 32, valRepeats = 0;
  ValidateOptions valOpt;
  auto* validateCmd = app.add_subcommand(
      "validate",
      "run strategies for real and put the measured steps beside model and simulator "
      "(one network, or a validation suite)");
  validateCmd->add_option("--suite", valSuite,
                          "validation suite preset or YAML file (networks, batches, strategies "
                          "and worker counts; e.g. validation-suite)");
  auto* valNetOpt = validateCmd->add_option("--network,-n", valNet, "network (default tiny-cnn)");
  auto* valStratOpt = validateCmd->add_option("--strategies,-s", valStrategies,
                                              "comma-separated or all (default all)");
  auto* valWorkersOpt = validateCmd->add_option("--workers,-k", valWorkers,
                                                "comma-separated worker counts (default 1,2)");
  auto* valBatchOpt =
      validateCmd->add_option("--batch,-b", valBatch, "examples per worker (default 32)");
  for (auto* single : {valNetOpt, valStratOpt, valWorkersOpt, valBatchOpt})
    single->excludes("--suite");
  validateCmd->add_option("--cluster,-c", valOpt.clusterPath,
                          "calibrated cluster YAML (default: calibrate now, kernels only, and "
                          "write it to the output folder)");
  validateCmd->add_option("--steps", valSteps,
                          "steps per run; the first 2 are warm-up (default 8; a suite's own)");
  validateCmd->add_option("--repeats", valRepeats,
                          "runs per row, for the run-to-run spread (default 1; a suite's own, 3)");
  validateCmd->add_flag("--fit-on-network", valOpt.fitOnNetwork,
                        "calibrate on the validated network's layers (rows are then fitted, "
                        "not held-out)");
  validateCmd->add_option("--out-dir", valOpt.outDir,
                          "folder for the calibrated cluster and the measured and simulated "
                          "traces (default validate)");
  addFormat(validateCmd);
  validateCmd->footer(
      "Examples:\n"
      "  strata validate --network tiny-cnn --strategies all --workers 1,2,4\n"
      "  strata validate --suite validation-suite --format json > suite.json");

  // calibrate
  std::string calNet, calOut;
  int calBatch = 32, calMaxWorkers = 4;
  auto* calibrateCmd =
      app.add_subcommand("calibrate", "measure this machine and write it as a cluster config");
  calibrateCmd->add_option("--out,-o", calOut, "cluster YAML to write (its stem is its name)")
      ->required();
  calibrateCmd->add_option("--network,-n", calNet,
                           "also fit roofline efficiencies on this network's own layers (the "
                           "cluster then is not held-out for it; default: kernel tables only)");
  calibrateCmd->add_option("--batch,-b", calBatch,
                           "examples per timed pass with --network (default 32)");
  calibrateCmd->add_option("--max-workers", calMaxWorkers,
                           "measure sharing for 1, 2, 4, ... up to this many workers (default 4)");
  calibrateCmd->footer(
      "Example:\n"
      "  strata calibrate --out my-cluster.yaml\n"
      "  strata predict -n tiny-cnn -c my-cluster.yaml -s ring -k 2 -b 32");

  // profile
  std::string profNet, profOut, profCluster;
  int profBatch = 32, profRepeats = 5;
  auto* profileCmd = app.add_subcommand(
      "profile", "time each layer phase of one network on one worker (a per-op profile)");
  profileCmd->add_option("--network,-n", profNet, "network preset or YAML file")->required();
  profileCmd->add_option("--batch,-b", profBatch, "examples per timed pass (default 32)");
  profileCmd->add_option("--repeats", profRepeats,
                         "timed passes after a warm-up; figures are medians (default 5)");
  profileCmd->add_option("--out,-o", profOut, "profile YAML to write (for --profile)");
  profileCmd->add_option("--cluster,-c", profCluster,
                         "also print each phase as this cluster prices it (kernel tables or "
                         "roofline), beside the measured one");
  addFormat(profileCmd);
  profileCmd->footer(
      "Example:\n"
      "  strata profile -n alexnet-owt --batch 8 --out alexnet-owt.profile.yaml\n"
      "  strata predict -n alexnet-owt -c my-cluster.yaml -s ring -k 2 -b 8 --profile "
      "alexnet-owt.profile.yaml");

  // sweep
  std::string swNets, swClusters, swStrategies = "all", swWorkers = "1,2,4,8", swBatches = "128",
                                  swOverlap = "on", swElements = "fp32", swFcUpdates = "step",
                                  swOut;
  ScenarioFlags swFlags;
  auto* sweep = app.add_subcommand("sweep", "many configurations to CSV/JSON (stdout or a file)");
  sweep->add_option("--networks", swNets, "comma-separated networks")->required();
  sweep->add_option("--clusters", swClusters, "comma-separated clusters")->required();
  sweep->add_option("--strategies", swStrategies,
                    "comma-separated strategies or all (default all)");
  sweep->add_option("--workers", swWorkers, "comma-separated worker counts (default 1,2,4,8)");
  sweep->add_option("--batches", swBatches, "comma-separated examples per worker (default 128)");
  sweep->add_option("--overlaps", swOverlap, "comma-separated on/off (default on)");
  sweep->add_option("--elements", swElements, "comma-separated element types (default fp32)");
  sweep->add_option("--fc-updates", swFcUpdates, "comma-separated step/round (default step)");
  sweep->add_option("--segment", swFlags.segment, "segment size, e.g. 1MiB (default 4 MiB)");
  sweep->add_option("--bucket", swFlags.bucket, "gradient bucket size (default 25 MiB)");
  sweep->add_option("--allreduce", swFlags.allreduce,
                    "conv-gradient sync of owt-* (default direct)");
  sweep->add_option("--out,-o", swOut, "write to this file instead of stdout");
  addEngine(sweep);
  sweep->add_option("--format", format, "output: table|json|csv (default csv)");
  sweep->footer(
      "Example:\n"
      "  strata sweep --networks resnet50,vgg16 --clusters dgx-h100,gige-cluster --workers "
      "8,64,512 "
      "--overlaps on,off --out sweep.csv");

  // CLI11 reports an unknown command only as "a subcommand is required".
  if (argc > 1 && argv[1][0] != '-') {
    const std::string command = argv[1];
    bool known = false;
    for (const auto* sub : app.get_subcommands({}))
      known = known || sub->get_name() == command;
    if (!known)
      throw OptionError(command,
                        "unknown command (expected list, describe, predict, compare, sweep, "
                        "profile, "
                        "plan, simulate, run, calibrate or validate; see strata --help)");
  }
  // Defaults per subcommand: sweep prints CSV, the others a table.
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "strata: error: " << e.what() << " (see strata --help)\n";
    return kUserErrorExit;
  }
  // Every command prints a table by default, except sweep (CSV).
  if (sweep->parsed() && !sweep->count("--format"))
    format = "csv";
  const Format fmtOut = parseFormat(format);

  if (list->parsed()) {
    printPresetList(std::cout, fmtOut);
  } else if (describe->parsed()) {
    const auto element = parseElementType(describeElement, "--element");
    printNetwork(std::cout, networkArg(describeNet, "network"), element, fmtOut);
  } else if (predict->parsed()) {
    const Scenario sc = predFlags.scenario(predStrategy, predWorkers);
    const auto net = networkArg(predNet, "--network");
    const auto cl = withProfile(clusterArg(predCluster, "--cluster"), net, predProfile);
    printEstimate(std::cout, evaluate(net, cl, sc, engine), fmtOut);
  } else if (compare->parsed()) {
    Experiment ex;
    if (!cmpExperiment.empty()) {
      ex = loadExperiment(resolveConfig(ConfigKind::kExperiment, cmpExperiment, "experiment"));
    } else {
      if (cmpNet.empty())
        throw OptionError("--network", "required when no experiment file is given");
      if (cmpCluster.empty())
        throw OptionError("--cluster", "required when no experiment file is given");
      ex.strategies = {std::begin(kAllStrategies), std::end(kAllStrategies)};
      ex.workers = {1, 2, 4, 8};
    }
    if (!cmpNet.empty())
      ex.network = networkArg(cmpNet, "--network");
    if (!cmpCluster.empty())
      ex.cluster = clusterArg(cmpCluster, "--cluster");
    if (!cmpStrategies.empty())
      ex.strategies = parseStrategies(cmpStrategies, "--strategies");
    if (!cmpWorkers.empty())
      ex.workers = parsePositiveList(cmpWorkers, "--workers");
    cmpFlags.apply(ex.batchPerWorker, ex.options);
    ex.cluster = withProfile(ex.cluster, ex.network, cmpProfile);
    std::vector<StepEstimate> rows;
    for (int k : ex.workers) {
      for (auto s : ex.strategies) {
        Scenario sc{s, k, ex.batchPerWorker, ex.options};
        rows.push_back(evaluate(ex.network, ex.cluster, sc, engine));
      }
    }
    printComparison(std::cout, rows, fmtOut);
  } else if (plan->parsed()) {
    const Scenario sc = planFlags.scenario(planStrategy, planWorkers);
    if (fmtOut == Format::kCsv)
      throw OptionError("--format", "plan prints table or json");
    const auto net = networkArg(planNet, "--network");
    printPlan(std::cout, lowerToPlan(net, sc), net, fmtOut);
  } else if (simulateCmd->parsed()) {
    const Scenario sc = simFlags.scenario(simStrategy, simWorkers);
    sim::Options opt;
    opt.contention = parseOnOff(simContention, "--contention");
    for (const auto& s : simStragglers)
      parseStraggler(s, opt.slowdown, sc.workers);
    opt.jitter = simJitter;
    opt.seed = simSeed;
    opt.timeline = !simTrace.empty();
    const auto net = networkArg(simNet, "--network");
    const auto cl = withProfile(clusterArg(simCluster, "--cluster"), net, simProfile);
    // Open the trace before simulating, so a bad path fails alone and early.
    std::ofstream traceFile;
    if (!simTrace.empty()) {
      traceFile.open(simTrace);
      if (!traceFile)
        throw OptionError("--trace", "cannot write '" + simTrace + "'");
    }
    const auto p = lowerToPlan(net, sc);
    const auto result = sim::simulate(p, net, cl, opt);
    if (traceFile.is_open()) {
      writeTrace(traceFile, p, net, result.estimate, result.timeline);
      if (!traceFile.flush())
        throw OptionError("--trace", "error while writing '" + simTrace + "'");
    }
    printSimulation(std::cout, result, fmtOut);
    if (traceFile.is_open() && fmtOut == Format::kTable)
      std::cout << "\ntrace written to " << simTrace << " (open it in ui.perfetto.dev)\n";
  } else if (validateCmd->parsed()) {
    if (validateCmd->count("--steps") && valSteps < 1)
      throw OptionError("--steps", "must be at least 3 (2 warm-up steps, then measured ones)");
    if (validateCmd->count("--repeats") && valRepeats < 1)
      throw OptionError("--repeats", "must be at least 1");
    valOpt.format = fmtOut;
    return validateCommand(valNet, valStrategies, valWorkers, valBatch, valSuite, valSteps,
                           valRepeats, valOpt);
  } else if (profileCmd->parsed()) {
    const auto net = networkArg(profNet, "--network");
    std::optional<Cluster> cluster;
    if (!profCluster.empty())
      cluster = clusterArg(profCluster, "--cluster");
    const OpProfile profile = exec::profileNetwork(net, profBatch, profRepeats);
    if (!profOut.empty()) {
      std::ofstream file(profOut);
      if (!file || !(file << profileYaml(profile)).flush())
        throw OptionError("--out", "cannot write '" + profOut + "'");
    }
    printProfile(std::cout, net, profile, cluster ? &*cluster : nullptr, fmtOut);
    if (!profOut.empty() && fmtOut == Format::kTable)
      std::cout << "\nwrote " << profOut << "\n";
  } else if (calibrateCmd->parsed()) {
    if (calBatch < 1)
      throw OptionError("--batch", "must be at least 1");
    if (calMaxWorkers < 1)
      throw OptionError("--max-workers", "must be at least 1");
    std::optional<Network> net;
    if (!calNet.empty()) {
      net = networkArg(calNet, "--network");
      exec::checkRunnable(*net, Scenario{});
    }
    exec::CalibrationOptions co;
    co.name = std::filesystem::path(calOut).stem().string();
    co.network = net ? &*net : nullptr;
    co.batch = calBatch;
    co.maxWorkers = calMaxWorkers;
    co.progress = [](const std::string& line) { std::cout << line << "\n" << std::flush; };
    std::ofstream file(calOut);
    if (!file)
      throw OptionError("--out", "cannot write '" + calOut + "'");
    if (net)
      std::cout << "calibrating this machine (kernel tables; roofline efficiencies fitted on "
                << net->name << "'s layers, batch " << calBatch << ")\n";
    else
      std::cout << "calibrating this machine (kernel tables, no network)\n";
    file << exec::calibrate(co);
    if (!file.flush())
      throw OptionError("--out", "error while writing '" + calOut + "'");
    std::cout << "wrote " << calOut << "\n";
  } else if (runCmd->parsed()) {
    return runCommand(argc, argv, runNet, runStrategy, runWorkers, runFlags, runOpt, runNoDropout,
                      runTimeout, runTrace, fmtOut);
  } else if (sweep->parsed()) {
    std::vector<Network> nets;
    for (const auto& n : splitList(swNets))
      nets.push_back(networkArg(n, "--networks"));
    std::vector<Cluster> clusters;
    for (const auto& c : splitList(swClusters))
      clusters.push_back(clusterArg(c, "--clusters"));
    const auto strategies = parseStrategies(swStrategies, "--strategies");
    const auto workers = parsePositiveList(swWorkers, "--workers");
    const auto batches = parsePositiveList(swBatches, "--batches");
    std::vector<bool> overlaps;
    for (const auto& o : splitList(swOverlap))
      overlaps.push_back(parseOnOff(o, "--overlaps"));
    std::vector<ElementType> elements;
    for (const auto& e : splitList(swElements))
      elements.push_back(parseElementType(e, "--elements"));
    std::vector<FcUpdate> updates;
    for (const auto& u : splitList(swFcUpdates))
      updates.push_back(parseFcUpdate(u, "--fc-updates"));
    StrategyOptions base;
    int unusedBatch = 0;
    swFlags.apply(unusedBatch, base);
    std::vector<StepEstimate> rows;
    for (const auto& net : nets)
      for (const auto& cl : clusters)
        for (int b : batches)
          for (auto el : elements)
            for (bool ov : overlaps)
              for (auto up : updates)
                for (int k : workers)
                  for (auto s : strategies) {
                    Scenario sc{s, k, b, base};
                    sc.options.element = el;
                    sc.options.overlap = ov;
                    sc.options.fcUpdate = up;
                    if (isModelParallel(s) && net.modelParallelFrom <= 0)
                      continue;
                    rows.push_back(evaluate(net, cl, sc, engine));
                  }
    writeOutput(swOut, [&](std::ostream& out) { printComparison(out, rows, fmtOut); });
  }
  return 0;
}

}  // namespace
}  // namespace strata::cli

int main(int argc, char** argv) {
  try {
    return strata::cli::run(argc, argv);
  } catch (const strata::UserError& e) {
    std::cerr << "strata: error: " << e.what() << "\n";
    return strata::cli::kUserErrorExit;
  } catch (const std::exception& e) {
    std::cerr << "strata: internal error: " << e.what() << "\n";
    return 1;
  }
}

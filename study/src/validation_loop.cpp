#include "strata/study/validation_loop.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <numeric>
#include <thread>

#include "strata/exec/calibrate.h"
#include "strata/exec/profile.h"
#include "strata/exec/runtime.h"
#include "strata/model/atomic_file.h"
#include "strata/model/cluster_loader.h"
#include "strata/model/error.h"
#include "strata/model/estimate.h"
#include "strata/model/limits.h"
#include "strata/model/plan.h"
#include "strata/model/presets.h"
#include "strata/model/timeline.h"
#include "strata/sim/simulator.h"
#include "strata/study/machine_load.h"
#include "strata/study/trace.h"

namespace strata::study {

namespace {

// Seconds validate watches the idle machine before starting, to see whether
// other processes are using it.
constexpr double kLoadWindowSeconds = 1.0;

// One executor run of a row: its measured estimate and its median step's tasks.
struct Repeat {
  StepEstimate measured;
  Timeline timeline;
};

std::string rowName(const Network& net, int batch, Strategy s, int k) {
  return fmt::format("{} b={} {} K={}", net.name, batch, toString(s), k);
}

// Checks every row's scenario before anything runs (calibration alone takes
// a minute): a worker count or a batch that the model, the executor or this
// machine refuses. A value read from a suite file is named by its
// file:line:key, not by the option a command line would have used.
void checkRows(const ValidationSuite& suite, const std::vector<int>& ks, exec::Device device,
               ElementType element, Optimizer optimizer) {
  for (const auto& entry : suite.entries)
    for (size_t b = 0; b < entry.batches.size(); ++b)
      for (size_t i = 0; i < ks.size(); ++i)
        for (auto s : suite.strategies) {
          if (isModelParallel(s) && entry.network.modelParallelFrom < 0)
            continue;
          Scenario sc;
          sc.strategy = s;
          sc.workers = ks[i];
          sc.batchPerWorker = entry.batches[b];
          sc.options.element = element;
          sc.options.optimizer = optimizer;
          try {
            checkModelWorkers(sc.workers, limits());
            checkScenario(entry.network, sc);
            exec::RunOptions run;
            run.device = device;
            exec::checkRun(entry.network, sc, run, exec::RunPlacement::kThreads);
          } catch (const OptionError& e) {
            // OptionError's text is "OPTION: message".
            const std::string what = e.what();
            const auto colon = what.find(": ");
            const std::string option = what.substr(0, colon);
            std::string where;
            if (option == "--workers" && i < suite.workersWhere.size())
              where = suite.workersWhere[i];
            else if (option == "--batch" && b < entry.batchesWhere.size())
              where = entry.batchesWhere[b];
            if (where.empty())
              throw;
            throw UserError(where + ": " + what.substr(colon + 2));
          }
        }
}

// The context every row of one validation shares.
struct Context {
  const ValidationSuite& suite;
  const ValidationOptions& o;
  const ValidationProgress& progress;
  const Cluster& cluster;
  bool onGpu = false;
  int gpus = 0;
  int cores = 1;
  ValidationResult& result;
};

// Predicts, simulates, runs and compares one row; writes its two traces.
ValidationRow runRow(Context& c, const Network& net, const Cluster& profiled, bool fitted,
                     const Scenario& sc) {
  const auto& o = c.o;
  const auto& cluster = c.cluster;
  const bool onGpu = c.onGpu;
  const int gpus = c.gpus, cores = c.cores, k = sc.workers;
  const std::string name = rowName(net, sc.batchPerWorker, sc.strategy, k);
  auto& load = c.result.load;

  ValidationRow row;
  row.model = estimate(net, cluster, sc);
  row.profileModel = estimate(net, profiled, sc);
  row.profileModel->engine = "model-profile";
  const Plan plan = lowerToPlan(net, sc, cluster);
  sim::Options so;
  so.timeline = true;
  const auto simulated = sim::simulate(plan, net, cluster, so);
  row.sim = simulated.estimate;

  exec::RunOptions ro;
  ro.steps = c.suite.steps;
  ro.learningRate = exec::defaultLearningRate(sc.options.optimizer);
  ro.weightDecay = exec::defaultWeightDecay(sc.options.optimizer);
  // A ps plan holds every step it runs.
  const Plan runPlan = sc.strategy == Strategy::kPs ? lowerToPlan(net, sc, ro.steps) : plan;
  ro.warmup = kWarmupSteps;
  ro.device = o.device;
  ro.threadsPerWorker = sc.options.threadsPerWorker;  // as priced: one thread per worker
  // The drift check re-times a CPU GEMM: on a GPU it would watch the wrong device.
  const double speedBefore = onGpu ? 0 : exec::referenceGemmRate();
  const auto before = sampleCpu();
  std::vector<Repeat> repeats;
  for (int r = 0; r < c.suite.repeats; ++r) {
    auto run = exec::runThreads(runPlan, net, ro);
    run.measured.cluster = cluster.name;
    row.repeats.push_back(run.measured.step);
    repeats.push_back({std::move(run.measured), std::move(run.timeline)});
  }
  const auto after = sampleCpu();
  const double speedAfter = onGpu ? 0 : exec::referenceGemmRate();
  // The run whose step is the (lower) median gives the phases compared.
  std::vector<size_t> order(repeats.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return repeats[a].measured.step < repeats[b].measured.step;
  });
  const Repeat& median = repeats[order[(order.size() - 1) / 2]];
  row.measured = median.measured;
  row.measured.step = medianOf(row.repeats);

  std::vector<std::string> notes;
  row.fittedOnNetwork = fitted;
  if (fitted)
    notes.push_back("fitted on this network");
  // Workers sharing a GPU (round-robin): within claims when the calibration
  // measured that many sharing one.
  const int perGpu = onGpu ? (k + gpus - 1) / gpus : 0;
  if (onGpu && perGpu > 1) {
    const bool calibrated =
        std::any_of(cluster.device.sharing.begin(), cluster.device.sharing.end(),
                    [&](const auto& e) { return e.first >= perGpu; });
    row.withinClaims = calibrated;
    notes.push_back(fmt::format("{} workers on {} GPU{}{}", k, gpus, gpus == 1 ? "" : "s",
                                calibrated ? " (sharing calibrated)" : ", sharing not calibrated"));
  }
  // 2 threads per worker (compute and communication lanes) on `cores` cores.
  if (!onGpu && k > cores) {
    const bool calibrated =
        std::any_of(cluster.device.sharing.begin(), cluster.device.sharing.end(),
                    [&](const auto& e) { return e.first >= k; });
    row.withinClaims = calibrated;
    notes.push_back(fmt::format("{} workers on {} cores{}", k, cores,
                                calibrated ? " (sharing calibrated)" : ", sharing not calibrated"));
  }
  if (before && after) {
    row.othersCores = othersCores(*before, *after);
    row.busy = row.othersCores > kBusyOthersCores;
    if (row.busy) {
      notes.push_back(fmt::format("busy: others used {:.2f} cores", row.othersCores));
      load.busyRows.push_back(name);
    }
  }
  // A machine running off its calibrated speed (a VM's host slowing it) is
  // not the machine the prediction is for: outside claims.
  if (!onGpu && !cluster.device.kernels.empty()) {
    const double calibrated = cluster.device.kernels.gemmRate(
        GemmOp::kNN, exec::kReferenceGemm, exec::kReferenceGemm, exec::kReferenceGemm);
    const double drift = std::min(speedBefore, speedAfter) / calibrated - 1;
    row.speedDrift = drift;
    if (std::fabs(drift) > kMaxSpeedDrift) {
      row.withinClaims = false;
      notes.push_back(fmt::format("machine {:+.0f} % off its calibrated speed", 100 * drift));
      load.driftRows.push_back(name);
    }
  }
  for (const auto& n : notes)
    row.note += (row.note.empty() ? "" : "; ") + n;

  const std::string stem =
      o.suite ? fmt::format("{}-b{}-{}-k{}", net.name, sc.batchPerWorker, toString(sc.strategy), k)
              : fmt::format("{}-k{}", toString(sc.strategy), k);
  // Each timeline with the plan it played: a ps run holds its own number of
  // steps, the simulation the default. A trace that cannot be written (a full
  // disk) costs no measurement: the rows are printed, then what was not written.
  auto writeOne = [&](const char* suffix, const Plan& p, const StepEstimate& est,
                      const Timeline& tl) {
    try {
      AtomicFile f((std::filesystem::path(o.outDir) / (stem + "." + suffix + ".json")).string(),
                   "--out-dir");
      writeTrace(f.stream(), p, net, est, tl);
      f.commit();
    } catch (const WriteError& e) {
      c.result.unwritten.push_back(e.what());
    } catch (const OptionError& e) {
      c.result.unwritten.push_back(e.what());
    }
  };
  writeOne("measured", runPlan, median.measured, median.timeline);
  writeOne("sim", plan, simulated.estimate, simulated.timeline);
  return row;
}

}  // namespace

ValidationResult runValidation(const ValidationSuite& suite, const ValidationOptions& o,
                               const ValidationProgress& progress) {
  const bool onGpu = o.device == exec::Device::kCuda;
  exec::checkElement(o.element, o.device);
  exec::checkDevice(o.device, "--device");
  const int gpus = onGpu ? std::max(1, exec::deviceCount(o.device)) : 0;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const std::vector<int> ks = suite.autoWorkers ? autoWorkerCounts(cores) : suite.workers;
  if (o.fitOnNetwork && suite.entries.size() != 1)
    throw OptionError("--fit-on-network",
                      "calibrates on one network; a suite has several (calibrate --network NET "
                      "once per network and pass --cluster)");
  if (o.fitOnNetwork && !o.clusterPath.empty())
    throw OptionError("--fit-on-network",
                      "calibrates now; a --cluster file says itself what it was fitted on "
                      "(its fitted_on key)");
  for (const auto& e : suite.entries) {
    try {
      exec::checkRunnable(e.network, Scenario{});
    } catch (const UserError& err) {
      throw UserError(e.where.empty() ? std::string(err.what()) : e.where + ": " + err.what());
    }
  }
  int total = 0;
  for (const auto& e : suite.entries)
    for (auto s : suite.strategies)
      if (!isModelParallel(s) || e.network.modelParallelFrom >= 0)
        total += static_cast<int>(e.batches.size() * ks.size());
  // A suite file refuses this when loaded (loadValidationSuite); here the
  // command line's --network and --strategies.
  if (total == 0)
    throw OptionError("--strategies",
                      fmt::format("nothing to validate: owt-a/b/c need a model-parallel part, and "
                                  "{} has none (add naive, ring or ps)",
                                  suite.entries.front().network.name));
  checkRows(suite, ks, o.device, o.element, o.optimizer);
  std::error_code ec;
  std::filesystem::create_directories(o.outDir, ec);
  if (ec)
    throw OptionError("--out-dir", "cannot create '" + o.outDir + "': " + ec.message());

  ValidationResult result;
  // The machine's load before anything of ours runs.
  result.load = measureLoadBefore(kLoadWindowSeconds, cores);

  std::string path = o.clusterPath;
  if (path.empty()) {
    path = (std::filesystem::path(o.outDir) / "localhost-calibrated.yaml").string();
    exec::CalibrationOptions co;
    co.name = "localhost-calibrated";
    // Held-out by default: calibrate measures kernels, never the validated network.
    co.network = o.fitOnNetwork ? &suite.entries.front().network : nullptr;
    co.batch = suite.entries.front().batches.front();
    // Sharing is measured up to 64 workers (more is time-slicing); rows
    // beyond what was measured are marked outside the claims.
    co.maxWorkers = std::min(64, *std::max_element(ks.begin(), ks.end()));
    co.device = o.device;
    if (onGpu)  // workers per GPU, round-robin
      co.maxWorkers = std::max(1, (co.maxWorkers + gpus - 1) / gpus);
    co.progress = progress.calibrationLine;
    if (progress.calibrating)
      progress.calibrating(path, o.fitOnNetwork ? suite.entries.front().network.name : "");
    AtomicFile f(path, "--out-dir");  // renamed into place once complete
    f.stream() << exec::calibrate(co);
    f.commit();
  }
  const Cluster cluster = loadCluster(resolveConfig(ConfigKind::kCluster, path, "--cluster"));
  // The rows are predicted in --element: the cluster must price it (a file
  // calibrated on a GPU has tf32 and bf16 peaks), before any row runs.
  static_cast<void>(cluster.device.peakFor(o.element, path));
  result.clusterName = cluster.name;
  result.clusterPath = path;
  if (progress.started)
    progress.started(total, suite.repeats, suite.steps);

  Context context{suite, o, progress, cluster, onGpu, gpus, cores, result};
  for (const auto& entry : suite.entries) {
    const Network& net = entry.network;
    const bool fitted = cluster.fittedOn == net.name || (o.fitOnNetwork && o.clusterPath.empty());
    for (auto s : suite.strategies)
      if (isModelParallel(s) && net.modelParallelFrom < 0)
        result.skipped.push_back(
            fmt::format("{} on {}: no model-parallel part", toString(s), net.name));
    for (int batch : entry.batches) {
      // The profile-based prediction: the same model, compute priced from this
      // network's own per-op times (composition error only).
      if (progress.profiling)
        progress.profiling(net.name, batch);
      Cluster profiled = cluster;
      profiled.device.profile = std::make_shared<OpProfile>(
          exec::profileNetwork(net, batch, 5, o.device, 1, o.element, o.optimizer));
      for (int k : ks) {
        for (auto s : suite.strategies) {
          if (isModelParallel(s) && net.modelParallelFrom < 0)
            continue;
          Scenario sc;
          sc.strategy = s;
          sc.workers = k;
          sc.batchPerWorker = batch;
          sc.options.element = o.element;
          sc.options.optimizer = o.optimizer;
          if (progress.running)
            progress.running(static_cast<int>(result.rows.size()) + 1, total,
                             rowName(net, batch, s, k));
          result.rows.push_back(runRow(context, net, profiled, fitted, sc));
        }
      }
    }
  }
  result.summary = summarize(result.rows);
  return result;
}

}  // namespace strata::study

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
#include "strata/model/compute_cost.h"
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
  int divergedAt = -1;  // the first step whose loss was not finite, or -1
};

std::string rowName(const Network& net, int batch, Strategy s, int k) {
  return fmt::format("{} b={} {} K={}", net.name, batch, toString(s), k);
}

// Checks every row's scenario before anything runs (calibration alone takes
// a minute): a worker count or a batch that the model, the executor or this
// machine refuses. A value read from a suite file is named by its
// file:line:key, not by the option a command line would have used.
// The options every row of strategy `sc.strategy` takes from `o`.
void applyRowOptions(Scenario& sc, const ValidationOptions& o) {
  sc.options.element = o.element;
  sc.options.optimizer = o.optimizer;
  if (sc.strategy == Strategy::kRing) {
    sc.options.zero = o.zero;
    sc.options.tp = o.tp;
    sc.options.sequenceParallel = o.sequenceParallel && o.tp > 1;
    sc.options.pp = o.pp;
    sc.options.microbatches = o.microbatches;
    sc.options.schedule = o.schedule;
    sc.options.virtualStages = o.virtualStages;
  }
  if (sc.strategy == Strategy::kRing || sc.strategy == Strategy::kNaive)
    sc.options.recompute = o.recompute;
}

void checkRows(const ValidationSuite& suite, const std::vector<int>& ks,
               const ValidationOptions& o) {
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
          applyRowOptions(sc, o);
          try {
            checkModelWorkers(sc.workers, limits());
            checkScenario(entry.network, sc);
            exec::RunOptions run;
            run.device = o.device;
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
  int runsDone = 0;
  int runs = 0;  // rows x repeats
};

// Calls of the reference GEMM per timing: about 15 ms here, short beside a
// run and long enough that its median moves by well under 1 % between two
// timings on a steady machine.
constexpr int kReferenceCalls = 31;
// Calls of the copy reference per timing: about 1 ms each here (16 MiB in,
// 16 MiB out), as long as the GEMM's timing.
constexpr int kReferenceCopyCalls = 15;
// A step timing further than this from its trace's span gets a note.
constexpr double kClockCheckNote = 0.05;

// A row of a (network, batch, K) group: predicted before the group's rounds,
// then one run per round, each between two timings of the reference.
struct Pending {
  Scenario sc;
  std::string name;
  ValidationRow row;
  Plan plan;     // the simulated step
  Plan runPlan;  // what the executor runs (a ps plan holds every step it runs)
  sim::Result simulated;
  std::vector<Repeat> runs;
  std::vector<double> speeds;  // per run: its round's speed (rowSpeed of the references)
};

// One timing of the two references (exec::referenceGemmRate and
// referenceCopyRate: FLOP/s, floats/s), or their calibrated rates.
struct ReferenceTiming {
  double gemm = 0;
  double copy = 0;  // 0: not timed (the tables have no copy row)
};

Pending predictRow(const Context& c, const Network& net, const Cluster& profiled,
                   const Scenario& sc) {
  Pending p;
  p.sc = sc;
  p.name = rowName(net, sc.batchPerWorker, sc.strategy, sc.workers);
  p.row.model = estimate(net, c.cluster, sc);
  p.row.profileModel = estimate(net, profiled, sc);
  p.row.profileModel->engine = "model-profile";
  p.plan = lowerToPlan(net, sc, c.cluster);
  sim::Options so;
  so.timeline = true;
  p.simulated = sim::simulate(p.plan, net, c.cluster, so);
  p.row.sim = p.simulated.estimate;
  p.row.memoryShare = dramBoundShare(net, c.cluster, sc);
  p.runPlan = sc.strategy == Strategy::kPs ? lowerToPlan(net, sc, c.suite.steps) : p.plan;
  return p;
}

exec::RunOptions runOptions(const Context& c, const Scenario& sc) {
  exec::RunOptions ro;
  ro.steps = c.suite.steps;
  ro.learningRate = exec::defaultLearningRate(sc.options.optimizer);
  ro.weightDecay = exec::defaultWeightDecay(sc.options.optimizer);
  ro.warmup = kWarmupSteps;
  ro.device = c.o.device;
  ro.threadsPerWorker = sc.options.threadsPerWorker;  // as priced: one thread per worker
  return ro;
}

// The first task's start to the last task's end over every worker's slices.
std::optional<double> traceSpan(const Timeline& t) {
  if (t.slices.empty())
    return std::nullopt;
  double lo = t.slices.front().start, hi = t.slices.front().end;
  for (const auto& s : t.slices) {
    lo = std::min(lo, s.start);
    hi = std::max(hi, s.end);
  }
  return hi - lo;
}

// The references timed on `threads` threads at once.
ReferenceTiming timeReferences(const Context& c, int threads) {
  ReferenceTiming t;
  t.gemm = exec::referenceGemmRate(kReferenceCalls, threads);
  if (c.result.load.referenceCopyCalibrated > 0)
    t.copy = exec::referenceCopyRate(kReferenceCopyCalls, threads);
  return t;
}

// What the references ran at when the tables were measured, on `threads`
// threads at once: the tables' figures times the calibrated sharing speeds
// of that many threads (calibrate times the same 256^3 GEMMs, and copies of
// the same size, on that many threads together).
ReferenceTiming calibratedReferences(const Context& c, int threads) {
  const auto& load = c.result.load;
  const DeviceSpec& d = c.cluster.device;
  const bool shared = threads > 1 && !d.sharing.empty();
  return {load.referenceCalibrated * (shared ? d.sharingSpeed(threads) : 1.0),
          load.referenceCopyCalibrated *
              (shared ? d.sharingMemorySpeed(threads, double(exec::kReferenceCopy) * 8) : 1.0)};
}

// A row's speed from one timing (or a round's medians) of the references.
double speedOf(const ReferenceTiming& t, const ReferenceTiming& calibrated, double memoryShare) {
  return rowSpeed(t.gemm / calibrated.gemm,
                  calibrated.copy > 0 && t.copy > 0 ? t.copy / calibrated.copy : 0.0, memoryShare);
}

// Runs the rows of one (network, batch, K) group interleaved: `repeats`
// rounds, each running every row once in roundOrder's rotation, the
// references timed before the first run and after every run (so each run
// lies between two timings, shared with its neighbours); every run of a round
// is normalised to the round's speed: each reference's median over the
// round's timings, combined by the row's memory share. Other processes'
// CPU use is measured per run; a row's figure is its busiest run's.
void measureGroup(Context& c, const Network& net, std::vector<Pending>& group) {
  const int n = static_cast<int>(group.size());
  const bool normalise = c.result.load.referenceCalibrated > 0;
  std::vector<double> others(group.size(), -1.0);
  // The references run on as many threads as the group's runs keep cores
  // busy (a worker's compute threads; at most the cores).
  const Scenario& first = group.front().sc;
  const int threads =
      std::clamp(first.workers * std::max(1, first.options.threadsPerWorker), 1, c.cores);
  const ReferenceTiming calibrated = calibratedReferences(c, threads);
  ReferenceTiming reference = normalise ? timeReferences(c, threads) : ReferenceTiming{};
  for (int round = 0; round < c.suite.repeats; ++round) {
    // The round's timings of the references: before its first run and after
    // each run. Each run is normalised to their medians, the round's speed:
    // one timing moves by ~2 % on its own (the median swing between two
    // consecutive ones on the idle VM), which normalising each run by its own
    // two would add to the run's spread.
    std::vector<Seconds> gemms, copies;
    auto keep = [&](const ReferenceTiming& t) {
      gemms.push_back(Seconds(t.gemm));
      copies.push_back(Seconds(t.copy));
    };
    if (normalise)
      keep(reference);
    std::vector<int> ran;
    for (int i : roundOrder(n, round)) {
      auto& p = group[static_cast<size_t>(i)];
      if (c.progress.running)
        c.progress.running(++c.runsDone, c.runs,
                           c.suite.repeats > 1 ? fmt::format("{} (round {} of {})", p.name,
                                                             round + 1, c.suite.repeats)
                                               : p.name);
      const auto before = sampleCpu();
      auto run = exec::runThreads(p.runPlan, net, runOptions(c, p.sc));
      const auto after = sampleCpu();
      if (before && after)
        others[static_cast<size_t>(i)] =
            std::max(others[static_cast<size_t>(i)], othersCores(*before, *after));
      if (normalise) {
        const ReferenceTiming next = timeReferences(c, threads);
        keep(next);
        const double was = speedOf(reference, calibrated, p.row.memoryShare);
        const double now = speedOf(next, calibrated, p.row.memoryShare);
        p.row.referenceSwing =
            std::max(p.row.referenceSwing, std::fabs(now - was) / (0.5 * (now + was)));
        reference = next;
      }
      run.measured.cluster = c.cluster.name;
      const exec::StepLog* diverged = exec::firstDivergedStep(run.steps);
      const int divergedAt = diverged ? diverged->step : -1;
      p.runs.push_back({std::move(run.measured), std::move(run.timeline), divergedAt});
      ran.push_back(i);
    }
    if (normalise) {
      const ReferenceTiming roundRates{medianOf(gemms).value(), medianOf(copies).value()};
      for (int i : ran) {
        auto& p = group[static_cast<size_t>(i)];
        p.speeds.push_back(speedOf(roundRates, calibrated, p.row.memoryShare));
      }
    }
  }
  for (size_t i = 0; i < group.size(); ++i)
    group[i].row.othersCores = others[i];
}

// Puts a measured row together: normalises its runs, picks the median run,
// applies the claims rule, and writes its two traces.
ValidationRow finishRow(Context& c, const Network& net, bool fitted, Pending& p) {
  const auto& o = c.o;
  const auto& cluster = c.cluster;
  const bool onGpu = c.onGpu;
  const int gpus = c.gpus, cores = c.cores, k = p.sc.workers;
  auto& load = c.result.load;
  ValidationRow& row = p.row;
  for (size_t r = 0; r < p.runs.size(); ++r) {
    const Seconds raw = p.runs[r].measured.step;
    if (r < p.speeds.size()) {
      row.rawRepeats.push_back(raw);
      row.repeats.push_back(normalisedStep(raw, p.speeds[r]));
      const double drift = p.speeds[r] - 1;
      if (std::fabs(drift) > std::fabs(row.speedDrift))
        row.speedDrift = drift;
    } else {
      row.repeats.push_back(raw);
    }
  }
  // The run whose step is the (lower) median gives the phases compared,
  // scaled as its step was.
  std::vector<size_t> order(p.runs.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return row.repeats[a] < row.repeats[b]; });
  const size_t mid = order[(order.size() - 1) / 2];
  const Repeat& median = p.runs[mid];
  row.measured = median.measured;
  if (const auto span = traceSpan(median.timeline);
      span && p.sc.strategy != Strategy::kPs && median.measured.step.value() > 0)
    row.clockCheck = *span / median.measured.step.value() - 1;
  if (mid < p.speeds.size()) {
    const double scale = p.speeds[mid];
    for (auto& w : row.measured.workers) {
      for (Seconds* t :
           {&w.compute.fwd, &w.compute.bwdData, &w.compute.bwdWeights, &w.compute.update})
        *t = *t * scale;
      w.communication = w.communication * scale;
      w.exposedCommunication = w.exposedCommunication * scale;
      w.idle = w.idle * scale;
    }
  }
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
  // A diverged run still times its steps, but on values no training would
  // see (and subnormals on the way can slow a CPU): the row says so.
  for (const Repeat& r : p.runs)
    if (r.divergedAt >= 0) {
      notes.push_back(fmt::format("loss not finite from step {}", r.divergedAt + 1));
      break;
    }
  // The executor's step against the trace's span (a second clock): a
  // difference this large means time inside the step that no task accounts for.
  if (row.clockCheck && std::fabs(*row.clockCheck) > kClockCheckNote)
    notes.push_back(
        fmt::format("step timing {:+.1f} % off the trace's span", -100 * *row.clockCheck));
  if (row.othersCores >= 0) {
    row.busy = row.othersCores > kBusyOthersCores;
    if (row.busy) {
      notes.push_back(fmt::format("busy: others used {:.2f} cores", row.othersCores));
      load.busyRows.push_back(p.name);
    }
  }
  // The claims rule (validation.h): normalisation corrects a machine
  // uniformly off its calibrated speed, not one too far off or one that
  // changed speed during a run.
  if (!p.speeds.empty()) {
    if (std::fabs(row.speedDrift) > kMaxSpeedDrift) {
      row.withinClaims = false;
      notes.push_back(
          fmt::format("machine {:+.0f} % off its calibrated speed", 100 * row.speedDrift));
      load.driftRows.push_back(p.name);
    } else if (row.referenceSwing > kMaxReferenceSwing) {
      row.withinClaims = false;
      notes.push_back(
          fmt::format("machine speed moved {:.0f} % during a run", 100 * row.referenceSwing));
      load.unsteadyRows.push_back(p.name);
    }
  }
  for (const auto& n : notes)
    row.note += (row.note.empty() ? "" : "; ") + n;

  const std::string stem = o.suite ? fmt::format("{}-b{}-{}-k{}", net.name, p.sc.batchPerWorker,
                                                 toString(p.sc.strategy), k)
                                   : fmt::format("{}-k{}", toString(p.sc.strategy), k);
  // Each timeline with the plan it played: a ps run holds its own number of
  // steps, the simulation the default. A trace that cannot be written (a full
  // disk) costs no measurement: the rows are printed, then what was not written.
  auto writeOne = [&](const char* suffix, const Plan& plan, const StepEstimate& est,
                      const Timeline& tl) {
    try {
      AtomicFile f((std::filesystem::path(o.outDir) / (stem + "." + suffix + ".json")).string(),
                   "--out-dir");
      writeTrace(f.stream(), plan, net, est, tl);
      f.commit();
    } catch (const WriteError& e) {
      c.result.unwritten.push_back(e.what());
    } catch (const OptionError& e) {
      c.result.unwritten.push_back(e.what());
    }
  };
  writeOne("measured", p.runPlan, median.measured, median.timeline);
  writeOne("sim", p.plan, p.simulated.estimate, p.simulated.timeline);
  return std::move(row);
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
  if (o.sweeps != 0 && !o.clusterPath.empty())
    throw OptionError("--sweeps",
                      "sets how validate calibrates; a --cluster file is calibrated already");
  if (o.sweeps != 0 && onGpu)
    throw OptionError("--sweeps",
                      "applies to the CPU's kernel tables (--device cuda sweeps its tables once)");
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
  checkRows(suite, ks, o);
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
    if (o.sweeps != 0)
      co.sweeps = o.sweeps;
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
  // The speed every run is normalised to: the reference GEMM's shape in the
  // cluster's kernel tables, the speed the prediction's tables were measured
  // at (median of 3 timed groups). A timing of the reference right after
  // calibrating was a worse anchor: one ~15 ms timing, 3.4 % below the
  // tables' figure on the idle VM, put every normalised row 5 % slow. None
  // without tables (a roofline cluster's prediction is tied to no measured
  // speed) or on a GPU (the reference is a CPU GEMM: it would watch the wrong
  // device): the runs are then reported raw.
  //
  // Since 2026-11-27 calibrate records the references themselves, timed
  // between its sweeps (kernels.reference): the speed the tables' medians
  // stand for, where one point of the tables is one instant of a VM whose
  // speed moves by tens of percent. Older files: the tables' points for the
  // same kernels (the GEMM's 256^3, the copy row at its size).
  const KernelTables& tables = cluster.device.kernels;
  if (!onGpu && !tables.empty()) {
    result.load.referenceCalibrated =
        tables.referenceGemmRate > 0 ? tables.referenceGemmRate
                                     : tables.gemmRate(GemmOp::kNN, exec::kReferenceGemm,
                                                       exec::kReferenceGemm, exec::kReferenceGemm);
    if (tables.referenceCopyRate > 0)
      result.load.referenceCopyCalibrated = tables.referenceCopyRate;
    else if (!tables.memory[static_cast<size_t>(MemKernel::kCopy)].empty())
      result.load.referenceCopyCalibrated =
          double(exec::kReferenceCopy) /
          tables.memoryTime(MemKernel::kCopy, double(exec::kReferenceCopy)).value();
  }
  if (progress.started)
    progress.started(total, suite.repeats, suite.steps);

  Context context{suite, o, progress, cluster, onGpu, gpus, cores, result};
  context.runs = total * suite.repeats;
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
        // One group: every strategy at this (network, batch, K), predicted,
        // then measured interleaved so that a drift lands on all alike.
        std::vector<Pending> group;
        for (auto s : suite.strategies) {
          if (isModelParallel(s) && net.modelParallelFrom < 0)
            continue;
          Scenario sc;
          sc.strategy = s;
          sc.workers = k;
          sc.batchPerWorker = batch;
          applyRowOptions(sc, o);
          group.push_back(predictRow(context, net, profiled, sc));
        }
        measureGroup(context, net, group);
        for (auto& p : group)
          result.rows.push_back(finishRow(context, net, fitted, p));
      }
    }
  }
  result.summary = summarize(result.rows);
  return result;
}

}  // namespace strata::study

// `strata validate`: the command line and the printing around the validation
// loop (study/validation_loop.h), which predicts, simulates, runs and compares.
#include "validate.h"

#include <fmt/format.h>

#include <algorithm>
#include <iostream>
#include <memory>

#include "commands.h"
#include "flags.h"
#include "strata/model/error.h"
#include "strata/model/presets.h"

namespace strata::cli {

int runValidation(const ValidationSuite& suite, const ValidateOptions& o) {
  const bool table = o.format == Format::kTable;
  const bool onGpu = o.device == exec::Device::kCuda;
  // Progress goes to the table's reader; JSON and CSV stay one document.
  study::ValidationProgress progress;
  if (table) {
    progress.calibrating = [onGpu](const std::string& path, const std::string& fittedOn) {
      std::cout << "calibrating this machine" << (onGpu ? "'s GPU 0" : "") << " (" << path << ")"
                << (fittedOn.empty() ? "" : ", fitted on " + fittedOn) << "\n"
                << std::flush;
    };
    progress.calibrationLine = [](const std::string& l) {
      std::cout << "  " << l << "\n" << std::flush;
    };
    progress.started = [](int rows, int repeats, int steps) {
      std::cout << fmt::format(
                       "{} rows: {} runs each of {} steps ({} warm-up, the median of the rest)\n",
                       rows, repeats, steps, study::kWarmupSteps)
                << std::flush;
    };
    progress.profiling = [](const std::string& network, int batch) {
      std::cout << fmt::format("profiling {} at batch {} (per-op times)\n", network, batch)
                << std::flush;
    };
    progress.running = [](int index, int rows, const std::string& row) {
      std::cout << fmt::format("[{}/{}] running {} ...\n", index, rows, row) << std::flush;
    };
  }
  const study::ValidationResult result = study::runValidation(suite, o, progress);
  if (table) {
    std::cout << "\n";
    if (o.suite)
      std::cout << fmt::format("suite {} ({}): ", suite.name, suite.sourceFile);
    else
      std::cout << fmt::format("{}, {} examples per worker: ", suite.entries.front().network.name,
                               suite.entries.front().batches.front());
    std::cout << fmt::format(
        "on {} ({}), {} run(s) per row of {} steps ({} warm-up, median of the rest){}; traces in "
        "{}/\n",
        result.clusterName, result.clusterPath, suite.repeats, suite.steps, study::kWarmupSteps,
        (o.optimizer == Optimizer::kMomentum
             ? std::string()
             : fmt::format(", optimizer {}", toString(o.optimizer))) +
            (o.tp > 1 ? fmt::format(", ring rows with tensor-parallel groups of {}{}", o.tp,
                                    o.sequenceParallel ? " and sequence parallelism" : "")
                      : std::string()) +
            (o.zero > 0 ? fmt::format(", ring rows with ZeRO-{}", o.zero) : std::string()) +
            (o.pp > 1 ? fmt::format(
                            ", ring rows in {} pipeline stages ({}{})", o.pp, toString(o.schedule),
                            o.virtualStages > 1 ? fmt::format(", {} chunks each", o.virtualStages)
                                                : std::string())
                      : std::string()) +
            (o.microbatches > 1
                 ? fmt::format(", ring rows of {} micro-batches a step", o.microbatches)
                 : std::string()) +
            (o.recompute != Recompute::kNone
                 ? fmt::format(", ring and naive rows with {} recomputation", toString(o.recompute))
                 : std::string()),
        o.outDir);
    for (const auto& s : result.skipped)
      std::cout << "skipped " << s << "\n";
    std::cout << "\n";
  }
  printValidation(std::cout, result.rows, result.summary, o.format, result.load);
  if (!result.unwritten.empty()) {
    std::cout << std::flush;
    std::cerr << fmt::format(
        "strata: error: {} trace{} not written (the rows above are measured): {}\n",
        result.unwritten.size(), result.unwritten.size() == 1 ? "" : "s", result.unwritten.front());
    return kRunFailureExit;
  }
  return 0;
}

}  // namespace strata::cli

namespace strata::cli {

Command addValidateCommand(CLI::App& app) {
  struct Options {
    std::string network = "tiny-cnn", strategies = "all", workers = "1,2", suite, format = "table",
                device = "cpu", element = "fp32", optimizer = "momentum", zero, recompute, tp,
                sequenceParallel, pp, microbatches, schedule, virtualStages;
    int steps = 0, batch = 32, repeats = 0;  // steps, repeats: 0 = the default
    ValidateOptions validate;
    LimitFlags limitFlags;
  };
  auto o = std::make_shared<Options>();
  auto* sub = app.add_subcommand(
      "validate",
      "run strategies for real and put the measured steps beside model and simulator (one "
      "network, or a validation suite)");
  sub->add_option("--suite", o->suite,
                  "validation suite preset or YAML file (networks, batches, strategies and "
                  "worker counts; e.g. validation-suite)");
  auto* net = sub->add_option("--network,-n", o->network, "network (default tiny-cnn)");
  auto* strategies =
      sub->add_option("--strategies,-s", o->strategies, "comma-separated or all (default all)");
  auto* workers =
      sub->add_option("--workers,-k", o->workers, "comma-separated worker counts (default 1,2)");
  auto* batch = sub->add_option("--batch,-b", o->batch, "examples per worker (default 32)");
  for (auto* single : {net, strategies, workers, batch})
    single->excludes("--suite");
  sub->add_option("--cluster,-c", o->validate.clusterPath,
                  "calibrated cluster YAML (default: calibrate now, kernels only, and write it "
                  "to the output folder)");
  auto* steps = sub->add_option(
      "--steps", o->steps, "steps per run; the first 2 are warm-up (default 8; a suite's own)");
  auto* repeats =
      sub->add_option("--repeats", o->repeats,
                      "runs per row, for the run-to-run spread (default 1; a suite's own, 3)");
  sub->add_flag("--fit-on-network", o->validate.fitOnNetwork,
                "calibrate on the validated network's layers (rows are then fitted, not "
                "held-out)");
  auto* sweeps = sub->add_option(
      "--sweeps", o->validate.sweeps,
      "without --cluster: sweeps over the CPU kernel tables when validate calibrates, each "
      "point the median over them (1..9, default 3; 1 is quicker and noisier)");
  sub->add_option("--out-dir", o->validate.outDir,
                  "folder for the calibrated cluster and the measured and simulated traces "
                  "(default validate)");
  sub->add_option("--device", o->device,
                  "cpu (threads) or cuda (K workers on the GPUs round-robin, sharing them when "
                  "K exceeds them; the device communicator between them) (default cpu)");
  sub->add_option("--element", o->element,
                  "cuda: precision of GEMMs and convolutions in the runs, profiles and "
                  "predictions, fp32|tf32|bf16 (default fp32); cpu: fp32 only");
  sub->add_option("--optimizer", o->optimizer,
                  "update rule every row is predicted, simulated and run with: "
                  "sgd|momentum|adam|adamw (default momentum; adam and adamw at PyTorch's "
                  "learning rate 0.001)");
  sub->add_option("--zero", o->zero,
                  "ZeRO stage of the ring rows, 0-3: each worker updates its chunk of each "
                  "bucket, then the weights are all-gathered (3: per unit, before its forward "
                  "and backward) (default 0)");
  sub->add_option("--tp", o->tp,
                  "workers per tensor-parallel group of the ring rows (Megatron: attention by "
                  "heads, the MLP by columns then rows, the vocabulary by rows); K must be a "
                  "multiple of it; cpu only (default 1)");
  sub->add_option("--sequence-parallel", o->sequenceParallel,
                  "on|off: with --tp, Megatron's sequence parallelism (the layers outside the "
                  "split run on T / tp positions; all-gathers and reduce-scatters in place of "
                  "the allreduces) (default off)");
  sub->add_option("--recompute", o->recompute,
                  "recomputation of the ring and naive rows, none|selective|full: each "
                  "attention's core, or each block's forward, again before its backward "
                  "(default none; selective on --device cpu)");
  sub->add_option("--pp", o->pp,
                  "pipeline stages of the ring rows, consecutive layers balanced by the cost "
                  "model; K must be a multiple of tp x it (default 1)");
  sub->add_option("--microbatches", o->microbatches,
                  "micro-batches of --batch examples per step of the ring rows, gradients "
                  "accumulated (default 1)");
  sub->add_option("--schedule", o->schedule,
                  "with --pp 2+: the ring rows' pipeline schedule gpipe|1f1b|interleaved "
                  "(default 1f1b)");
  sub->add_option("--virtual-stages", o->virtualStages,
                  "with --schedule interleaved: chunks of layers per stage, 2+ (default 1)");
  o->limitFlags.add(sub, true);
  addFormatOption(sub, o->format);
  sub->footer(
      "Examples:\n"
      "  strata validate --network tiny-cnn --strategies all --workers 1,2,4\n"
      "  strata validate --device cuda --network tiny-cnn --workers 1,2,3,4\n"
      "  strata validate --suite validation-suite --format json > suite.json");
  return {
      sub, [o, steps, repeats, sweeps] {
        o->limitFlags.apply();
        if (sweeps->count() > 0 && (o->validate.sweeps < 1 || o->validate.sweeps > 9))
          throw OptionError("--sweeps", fmt::format("must be in 1..9, got {}", o->validate.sweeps));
        o->validate.format = parseFormat(o->format);
        if (steps->count() > 0 && o->steps < kMinValidateSteps)
          throw OptionError("--steps", "must be at least 3 (2 warm-up steps, then measured ones)");
        if (repeats->count() > 0 && o->repeats < 1)
          throw OptionError("--repeats", "must be at least 1");
        ValidationSuite suite;
        ValidateOptions opt = o->validate;
        opt.device = exec::parseDevice(o->device, "--device");
        opt.element = parseElementType(o->element, "--element");
        exec::checkElement(opt.element, opt.device);
        opt.optimizer = parseOptimizer(o->optimizer, "--optimizer");
        if (!o->zero.empty()) {
          if (o->zero != "0" && o->zero != "1" && o->zero != "2" && o->zero != "3")
            throw OptionError("--zero", fmt::format("must be 0, 1, 2 or 3 (the stages the "
                                                    "executor runs), got '{}'",
                                                    o->zero));
          opt.zero = o->zero[0] - '0';
        }
        if (!o->recompute.empty())
          opt.recompute = parseRecompute(o->recompute, "--recompute");
        if (!o->tp.empty()) {
          opt.tp = parsePositive(o->tp, "--tp");
          if (opt.tp > kMaxTensorParallel)
            throw OptionError("--tp", fmt::format("must be at most {} workers per group, got {}",
                                                  kMaxTensorParallel, opt.tp));
        }
        if (!o->sequenceParallel.empty()) {
          opt.sequenceParallel = parseOnOff(o->sequenceParallel, "--sequence-parallel");
          if (opt.sequenceParallel && opt.tp <= 1)
            throw OptionError("--sequence-parallel", "applies with --tp 2 or more only");
        }
        if (!o->pp.empty()) {
          opt.pp = parsePositive(o->pp, "--pp");
          if (opt.pp > kMaxPipelineStages)
            throw OptionError("--pp", fmt::format("must be at most {} stages, got {}",
                                                  kMaxPipelineStages, opt.pp));
        }
        if (!o->microbatches.empty()) {
          opt.microbatches = parsePositive(o->microbatches, "--microbatches");
          if (opt.microbatches > kMaxMicrobatches)
            throw OptionError("--microbatches", fmt::format("must be at most {}, got {}",
                                                            kMaxMicrobatches, opt.microbatches));
        }
        if (!o->schedule.empty())
          opt.schedule = parsePipelineSchedule(o->schedule, "--schedule");
        if (!o->virtualStages.empty()) {
          opt.virtualStages = parsePositive(o->virtualStages, "--virtual-stages");
          if (opt.virtualStages > kMaxVirtualStages)
            throw OptionError(
                "--virtual-stages",
                fmt::format("must be at most {}, got {}", kMaxVirtualStages, opt.virtualStages));
        }
        exec::checkDevice(opt.device, "--device");
        if (!o->suite.empty()) {
          suite = loadValidationSuite(resolveConfig(ConfigKind::kExperiment, o->suite, "--suite"));
          opt.suite = true;
        } else {
          if (o->batch < 1)
            throw OptionError("--batch", "must be at least 1");
          SuiteEntry entry;
          entry.network = networkArg(o->network, "--network");
          entry.batches = {o->batch};
          suite.name = entry.network.name;
          suite.entries.push_back(std::move(entry));
          suite.strategies = parseStrategies(o->strategies, "--strategies");
          suite.workers = parsePositiveList(o->workers, "--workers");
          suite.repeats = 1;  // one run per row unless --repeats asks for a spread
          suite.steps = 8;
        }
        const bool ring = std::find(suite.strategies.begin(), suite.strategies.end(),
                                    Strategy::kRing) != suite.strategies.end();
        if (opt.zero > 0 && !ring)
          throw OptionError("--zero",
                            "applies to ring only, and the strategies asked for have no "
                            "ring");
        if (opt.tp > 1 && !ring)
          throw OptionError("--tp",
                            "applies to ring only, and the strategies asked for have no "
                            "ring");
        if (opt.pp > 1 && !ring)
          throw OptionError("--pp",
                            "applies to ring only, and the strategies asked for have no "
                            "ring");
        if (opt.microbatches > 1 && !ring)
          throw OptionError("--microbatches",
                            "applies to ring only, and the strategies asked for have no "
                            "ring");
        if (opt.recompute != Recompute::kNone &&
            std::none_of(suite.strategies.begin(), suite.strategies.end(),
                         [](Strategy s) { return s == Strategy::kRing || s == Strategy::kNaive; }))
          throw OptionError("--recompute",
                            "applies to ring and naive only, and the strategies asked for have "
                            "neither");
        if (o->steps != 0)
          suite.steps = o->steps;
        if (o->repeats != 0)
          suite.repeats = o->repeats;
        return runValidation(suite, opt);
      }};
}

}  // namespace strata::cli

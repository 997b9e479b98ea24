// `strata run`: training steps for real and measured; threads by default, MPI
// ranks when started by mpirun.
#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <iostream>
#include <memory>

#include "commands.h"
#include "flags.h"
#include "strata/exec/comm/mpi_communicator.h"
#include "strata/exec/runtime.h"
#include "strata/model/plan.h"
#include "strata/model/quantity_text.h"
#include "strata/model/timeline.h"

namespace strata::cli {

namespace {

struct RunFlags {
  std::string network, strategy, workers, trace, timeout = "60s", format = "table", seed = "1";
  ScenarioFlags flags;
  exec::RunOptions run;
  bool noDropout = false;
};

// Runs on one rank (comm set, under mpirun) or on K threads (comm null) and
// reports on rank 0.
void runAndReport(const RunFlags& f, const Network& net, exec::RunOptions opt, Format format,
                  exec::Communicator* comm, int ranks) {
  const std::string workers = f.workers.empty() ? std::to_string(ranks) : f.workers;
  const Scenario sc = f.flags.scenario(f.strategy, workers);
  if (comm && sc.workers != ranks)
    throw OptionError("--workers",
                      fmt::format("is {} but mpirun started {} ranks", sc.workers, ranks));
  if (opt.failRank >= sc.workers)
    throw OptionError("--fail-rank",
                      fmt::format("worker {} does not exist (K = {})", opt.failRank, sc.workers));
  if (opt.failRank >= 0 && opt.failStep >= opt.steps)
    throw OptionError("--fail-step", fmt::format("step {} is past the last step ({} steps)",
                                                 opt.failStep, opt.steps));
  exec::checkRunnable(net, sc);
  const Plan plan = lowerToPlan(net, sc);
  const bool root = !comm || comm->rank() == 0;
  std::ofstream traceFile;
  if (root && !f.trace.empty()) {
    traceFile.open(f.trace);
    if (!traceFile)
      throw OptionError("--trace", "cannot write '" + f.trace + "'");
  }
  if (root && format == Format::kTable) {
    std::cout << fmt::format(
        "{}: {}, {} workers ({}) x {} examples, {} steps, lr {}, momentum {}\n", net.name,
        toString(sc.strategy), sc.workers, comm ? "MPI ranks" : "threads", sc.batchPerWorker,
        opt.steps, opt.learningRate, opt.momentum);
    // Every step on short runs; on long ones 25 lines with a progress bar.
    const int every = std::max(1, opt.steps / 25);
    const int steps = opt.steps;
    opt.onStep = [every, steps](int s, double loss, double seconds) {
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
  exec::RunResult result =
      comm ? exec::runWorker(*comm, plan, net, opt) : exec::runThreads(plan, net, opt);
  if (!root)
    return;
  result.measured.cluster = comm ? "mpi" : "threads";
  if (traceFile.is_open()) {
    writeTrace(traceFile, plan, net, result.measured, result.timeline);
    if (!traceFile.flush())
      throw OptionError("--trace", "error while writing '" + f.trace + "'");
  }
  if (format == Format::kJson) {
    std::cout << "{\"steps\":[";
    for (size_t i = 0; i < result.steps.size(); ++i)
      std::cout << (i ? "," : "")
                << fmt::format("{{\"step\":{},\"loss\":{:.9g},\"step_s\":{:.9g}}}",
                               result.steps[i].step, result.steps[i].loss, result.steps[i].seconds);
    std::cout << "],\"measured\":";
    printEstimate(std::cout, result.measured, Format::kJson);
    std::cout << "}\n";
    return;
  }
  std::cout << "\nmeasured (median step after warm-up):\n";
  printEstimate(std::cout, result.measured, format);
  if (traceFile.is_open())
    std::cout << "\ntrace written to " << f.trace << " (open it in ui.perfetto.dev)\n";
}

}  // namespace

Command addRunCommand(CLI::App& app, Process process) {
  auto f = std::make_shared<RunFlags>();
  auto* sub = app.add_subcommand(
      "run", "run training steps for real (threads, or MPI ranks under mpirun) and measure them");
  sub->add_option("--network,-n", f->network, "network preset or YAML file")->required();
  sub->add_option("--strategy,-s", f->strategy, "naive|ring|owt-a|owt-b|owt-c|ps")->required();
  sub->add_option("--workers,-k", f->workers,
                  "number of workers (threads); under mpirun the number of ranks");
  f->flags.add(sub);
  sub->add_option("--steps", f->run.steps, "training steps (default 10)");
  sub->add_option("--lr", f->run.learningRate, "SGD learning rate (default 0.01)");
  sub->add_option("--momentum", f->run.momentum, "SGD momentum in [0, 1) (default 0.9)");
  sub->add_option("--seed", f->seed, "seed of weights, data and dropout (default 1)");
  sub->add_flag("--no-dropout", f->noDropout, "turn dropout off (runs then match across K)");
  sub->add_option("--trace", f->trace, "write the measured step as a Chrome trace-event JSON");
  sub->add_option("--timeout", f->timeout,
                  "how long a blocked receive waits before failing (default 60s)");
  sub->add_option("--fail-rank", f->run.failRank,
                  "fault injection (tests): this rank throws at --fail-step");
  sub->add_option("--fail-step", f->run.failStep, "step of the injected fault (default 0)");
  addFormatOption(sub, f->format, "output: table|json (default table)");
  sub->footer(
      "Examples:\n"
      "  strata run --network tiny-cnn --strategy owt-b --workers 4 --steps 20 --trace run.json\n"
      "  mpirun -np 4 strata run --network tiny-cnn --strategy ring --steps 20\n"
      "Networks too large for this machine run with a smaller batch: --batch 8.");
  return {sub, [f, process] {
            const auto format = parseFormat(f->format);
            if (format == Format::kCsv)
              throw OptionError("--format", "run prints table or json");
            exec::RunOptions opt = f->run;
            opt.timeout = parseTime(f->timeout, "--timeout");
            opt.seed = parseSeed(f->seed, "--seed");
            opt.dropout = !f->noDropout;
            checkRange(opt.learningRate, 0, 1e6, true, "--lr");
            if (!(opt.learningRate > 0))
              throw OptionError("--lr", "must be positive");
            checkRange(opt.momentum, 0, 1, false, "--momentum");
            if (opt.steps < 1)
              throw OptionError("--steps", fmt::format("must be at least 1, got {}", opt.steps));
            if (opt.failRank < -1)
              throw OptionError("--fail-rank", "must be a worker (0..K-1)");
            if (opt.failStep < 0)
              throw OptionError("--fail-step", "must be at least 0");
            const auto net = networkArg(f->network, "--network");
            if (!exec::launchedByMpiexec()) {
              if (f->workers.empty())
                throw OptionError("--workers",
                                  "required when not started by mpirun (threads: --workers K)");
              runAndReport(*f, net, opt, format, nullptr, 0);
              return 0;
            }
#ifdef STRATA_HAVE_MPI
            exec::MpiSession session(*process.argc, *process.argv);
            exec::MpiCommunicator comm;
            exec::runOrAbort(comm, [&](exec::Communicator& c) {
              runAndReport(*f, net, opt, format, &c, c.size());
            });
            return 0;
#else
            (void)process;
            throw UserError("started by mpirun, but this strata was built without MPI");
#endif
          }};
}

}  // namespace strata::cli

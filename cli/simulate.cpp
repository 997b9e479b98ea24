// `strata simulate`: play one step's Plan on a simulated cluster, with a trace.
#include <fmt/format.h>

#include <iostream>
#include <memory>
#include <optional>

#include "commands.h"
#include "flags.h"
#include "strata/model/limits.h"
#include "strata/model/plan.h"
#include "strata/model/strategy.h"
#include "strata/model/timeline.h"
#include "strata/sim/simulator.h"
#include "strata/study/queries.h"
#include "strata/study/trace.h"

namespace strata::cli {
Command addSimulateCommand(CLI::App& app) {
  struct Options {
    std::string network, cluster, strategy, workers, contention = "on", trace, profile,
                                                     format = "table";
    std::vector<std::string> stragglers;
    double jitter = 0;
    std::string seed = "1", steps;
    ScenarioFlags flags;
    TrainingFlags training;
    LimitFlags limitFlags;
    TraceFlags traceFlags;
  };
  auto o = std::make_shared<Options>();
  auto* sub =
      app.add_subcommand("simulate", "play one step's Plan on a simulated cluster, with a trace");
  sub->add_option("--network,-n", o->network, kNetworkHelp)->required();
  sub->add_option("--cluster,-c", o->cluster, "cluster preset or YAML file")->required();
  sub->add_option("--profile", o->profile,
                  "per-op profile of the network (strata profile --out): price compute from its "
                  "measured op times");
  sub->add_option("--strategy,-s", o->strategy, "naive|ring|owt-a|owt-b|owt-c|ps")->required();
  sub->add_option("--workers,-k", o->workers, "number of workers K")->required();
  o->flags.add(sub);
  // --steps is taken (the ps steps played): the run's steps are --train-steps.
  o->training.add(sub, "--train-steps", "--train-steps");
  sub->add_option("--contention", o->contention,
                  "links shared by concurrent transfers split their bandwidth: on|off (default "
                  "on; off = the analytic model's assumption)");
  sub->add_option("--straggler", o->stragglers,
                  "WORKER:FACTOR, that worker computes FACTOR x slower (repeatable)");
  sub->add_option("--jitter", o->jitter,
                  "each compute time x (1 + u), u uniform in [-J, J], 0 <= J < 1 (default 0)");
  sub->add_option("--seed", o->seed, "seed of the jitter (default 1)");
  sub->add_option("--steps", o->steps,
                  "ps: steps played back to back (default 6 + 2 x staleness); more steps "
                  "average --jitter out of the steady period");
  sub->add_option("--trace", o->trace,
                  "write a Chrome trace-event JSON file, gzipped when it ends in .gz (open it in "
                  "ui.perfetto.dev)");
  o->traceFlags.add(sub);
  o->limitFlags.add(sub, false);
  addFormatOption(sub, o->format);
  sub->footer(
      "Examples:\n"
      "  strata simulate -n alexnet-owt -c k20x8-pcie -s owt-b -k 4 --trace step.json\n"
      "  strata simulate -n resnet50 -c dgx-h100 -s ring -k 16 --straggler 3:1.2\n"
      "  strata simulate -n alexnet-owt -c k20x8-pcie -s ps -k 8 -b 32 --jitter 0.2 --steps 60 "
      "--staleness 1");
  return {sub, [o] {
            o->limitFlags.apply();
            const auto format = parseFormat(o->format);
            if (!o->trace.empty())
              checkOutputFile(o->trace, "--trace");  // a device, a folder: before any work
            const Scenario sc = o->flags.scenario(o->strategy, o->workers);
            checkSimWorkers(sc.workers, limits());  // before anything per worker is made
            sim::Options opt;
            opt.contention = parseOnOff(o->contention, "--contention");
            opt.slowdown = parseStragglers(o->stragglers, sc.workers);
            opt.jitter = checkRange(o->jitter, 0, 1, false, "--jitter");
            opt.seed = parseSeed(o->seed, "--seed");
            opt.timeline = !o->trace.empty();
            const auto net = networkArg(o->network, "--network");
            const auto cl = withProfile(clusterArg(o->cluster, "--cluster"), net, o->profile);
            const int steps = study::psSteps(o->steps, sc, "--steps");
            const TrainingRun run = o->training.run(sc);
            const TraceOptions traceOpt = o->traceFlags.options(o->trace, sc.workers);
            if (o->trace.empty()) {
              auto result = sim::simulateScenario(net, cl, sc, opt, steps);
              result.estimate.training = priceTrainingRun(run, result.estimate);
              printSimulation(std::cout, result, format);
              return 0;
            }
            // A trace shows every worker's tasks: the full plan.
            const auto p = lowerToPlan(net, sc, cl, steps);
            // Over the limit or a bad path: exit 2 before simulating.
            checkTraceSize(p, traceOpt);
            TraceFile traceFile(o->trace, "--trace");
            opt.timelineRanks = traceOpt.ranks;
            auto result = sim::simulate(p, net, cl, opt);
            result.detail = "full: " + sim::representativeReason(sc, cl, opt);
            result.estimate.training = priceTrainingRun(run, result.estimate);
            // The step is printed whether or not its trace could be written
            // (a full disk: the reason on one line after it, exit 1).
            std::string notWritten;
            try {
              writeTrace(traceFile.stream(), p, net, result.estimate, result.timeline, traceOpt);
              traceFile.finish();
            } catch (const WriteError& e) {
              notWritten = e.what();
            }
            printSimulation(std::cout, result, format);
            if (!notWritten.empty()) {
              std::cout << std::flush;
              std::cerr << "strata: error: " << notWritten
                        << " (the step above was simulated; its trace was not written)\n";
              return kRunFailureExit;
            }
            if (format == Format::kTable)
              std::cout << "\ntrace written to " << o->trace << " (open it in ui.perfetto.dev)\n";
            return 0;
          }};
}

}  // namespace strata::cli

// `strata plan`: the tasks of one training step, as the engines run them.
#include "strata/model/plan.h"

#include <fmt/format.h>

#include <iostream>
#include <memory>

#include "commands.h"
#include "flags.h"
#include "strata/model/estimate.h"
#include "strata/model/topology.h"

namespace strata::cli {

Command addPlanCommand(CLI::App& app) {
  struct Options {
    std::string network, strategy, workers, cluster, format = "table";
    ScenarioFlags flags;
    LimitFlags limitFlags;
  };
  auto o = std::make_shared<Options>();
  auto* sub = app.add_subcommand("plan", "the tasks of one training step, as engines run them");
  sub->add_option("--network,-n", o->network, kNetworkHelp)->required();
  sub->add_option("--strategy,-s", o->strategy, "naive|ring|owt-a|owt-b|owt-c|ps")->required();
  sub->add_option("--workers,-k", o->workers, "number of workers K")->required();
  sub->add_option("--cluster,-c", o->cluster,
                  "cluster preset or YAML file: --allreduce hierarchical needs its nodes, auto "
                  "its costs");
  o->flags.add(sub);
  o->limitFlags.add(sub, false);
  addFormatOption(sub, o->format, "output: table|json (default table)");
  sub->footer("Example:\n  strata plan -n tiny-cnn -s ring -k 3 --overlap off");
  return {sub, [o] {
            o->limitFlags.apply();
            const auto format = parseFormat(o->format);
            const Scenario sc = o->flags.scenario(o->strategy, o->workers);
            if (format == Format::kCsv)
              throw OptionError("--format", "plan prints table or json");
            const auto net = networkArg(o->network, "--network");
            if (o->cluster.empty()) {
              if (const auto a = syncAllreduce(sc);
                  a && (*a == AllreduceAlgorithm::kAuto || *a == AllreduceAlgorithm::kHierarchical))
                throw OptionError(
                    isModelParallel(sc.strategy) ? "--conv-sync" : "--allreduce",
                    fmt::format("{} needs --cluster (its nodes and link costs)", toString(*a)));
              printPlan(std::cout, lowerToPlan(net, sc), net, format);
              return 0;
            }
            const auto cl = clusterArg(o->cluster, "--cluster");
            const Plan plan = lowerToPlan(net, sc, cl);
            // Where each group runs, as predict and simulate say it.
            printPlan(std::cout, plan, net, format,
                      usesShardedStep(sc.options) ? describePlacement(Topology(cl, sc.workers), sc)
                                                  : std::string());
            return 0;
          }};
}

}  // namespace strata::cli

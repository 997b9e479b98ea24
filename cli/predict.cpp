// `strata predict`: one network x cluster x strategy x K, the breakdown.
#include <iostream>
#include <memory>

#include "commands.h"
#include "flags.h"

namespace strata::cli {

Command addPredictCommand(CLI::App& app) {
  struct Options {
    std::string network, cluster, strategy, workers, profile, engine = "model", format = "table";
    ScenarioFlags flags;
    LimitFlags limitFlags;
  };
  auto o = std::make_shared<Options>();
  auto* sub = app.add_subcommand("predict", "one network x cluster x strategy x K: the breakdown");
  sub->add_option("--network,-n", o->network, "network preset or YAML file")->required();
  sub->add_option("--cluster,-c", o->cluster, "cluster preset or YAML file")->required();
  sub->add_option("--profile", o->profile,
                  "per-op profile of the network (strata profile --out): price compute from its "
                  "measured op times");
  sub->add_option("--strategy,-s", o->strategy,
                  "naive|ring|owt-a|owt-b|owt-c|ps (compare takes several, or all)")
      ->required();
  sub->add_option("--workers,-k", o->workers, "number of workers K")->required();
  o->flags.add(sub);
  addEngineOption(sub, o->engine);
  o->limitFlags.add(sub, false);
  addFormatOption(sub, o->format);
  sub->footer(
      "Example:\n"
      "  strata predict -n alexnet-owt -c k20x8-pcie -s owt-b -k 8 --fc-update round");
  return {sub, [o] {
            o->limitFlags.apply();
            const auto format = parseFormat(o->format);
            const Scenario sc = o->flags.scenario(o->strategy, o->workers);
            const auto net = networkArg(o->network, "--network");
            const auto cl = withProfile(clusterArg(o->cluster, "--cluster"), net, o->profile);
            printEstimate(std::cout, evaluate(net, cl, sc, o->engine), format);
            return 0;
          }};
}

}  // namespace strata::cli

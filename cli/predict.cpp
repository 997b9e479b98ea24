// `strata predict`: one network x cluster x strategy x K, the breakdown.
#include <iostream>
#include <memory>

#include "commands.h"
#include "flags.h"
#include "strata/study/queries.h"

namespace strata::cli {

Command addPredictCommand(CLI::App& app) {
  struct Options {
    std::string network, cluster, strategy, workers, profile, engine = "model", format = "table";
    ScenarioFlags flags;
    TrainingFlags training;
    LimitFlags limitFlags;
  };
  auto o = std::make_shared<Options>();
  auto* sub = app.add_subcommand("predict", "one network x cluster x strategy x K: the breakdown");
  sub->add_option("--network,-n", o->network, kNetworkHelp)->required();
  sub->add_option("--cluster,-c", o->cluster, "cluster preset or YAML file")->required();
  sub->add_option("--profile", o->profile,
                  "per-op profile of the network (strata profile --out): price compute from its "
                  "measured op times");
  sub->add_option("--strategy,-s", o->strategy,
                  "naive|ring|owt-a|owt-b|owt-c|ps (compare takes several, or all)")
      ->required();
  sub->add_option("--workers,-k", o->workers, "number of workers K")->required();
  o->flags.add(sub);
  o->training.add(sub, "--steps,--train-steps", "--steps");
  addEngineOption(sub, o->engine);
  o->limitFlags.add(sub, false);
  addFormatOption(sub, o->format);
  sub->footer(
      "Example:\n"
      "  strata predict -n alexnet-owt -c k20x8-pcie -s owt-b -k 8 --fc-update round\n"
      "  strata predict -n gpt2-small -c dgx-h100 -s ring -k 8 -b 8 --element bf16 "
      "--optimizer adam --epochs 1 --dataset 1000000");
  return {sub, [o] {
            o->limitFlags.apply();
            const auto format = parseFormat(o->format);
            const Scenario sc = o->flags.scenario(o->strategy, o->workers);
            const TrainingRun run = o->training.run(sc);
            const auto net = networkArg(o->network, "--network");
            const auto cl = withProfile(clusterArg(o->cluster, "--cluster"), net, o->profile);
            const auto est = study::predict(net, cl, sc, engineArg(o->engine), run);
            printEstimate(std::cout, est, format);
            return 0;
          }};
}

}  // namespace strata::cli

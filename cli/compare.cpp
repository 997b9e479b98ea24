// `strata compare`: strategies x worker counts side by side, from an
// experiment file or from flags.
#include <iostream>
#include <iterator>
#include <memory>

#include "commands.h"
#include "flags.h"
#include "strata/model/presets.h"
#include "strata/study/queries.h"

namespace strata::cli {

Command addCompareCommand(CLI::App& app) {
  struct Options {
    std::string experiment, network, cluster, strategies, workers, profile, engine = "model",
                                                                            format = "table";
    ScenarioFlags flags;
    LimitFlags limitFlags;
  };
  auto o = std::make_shared<Options>();
  auto* sub = app.add_subcommand("compare", "strategies x worker counts side by side");
  sub->add_option("experiment", o->experiment, "experiment preset or YAML file (optional)");
  sub->add_option("--network,-n", o->network, "network (overrides the experiment's)");
  sub->add_option("--cluster,-c", o->cluster, "cluster (overrides the experiment's)");
  sub->add_option("--profile", o->profile,
                  "per-op profile of the network (strata profile --out): price compute from its "
                  "measured op times");
  auto* strategies =
      sub->add_option("--strategies,-s", o->strategies, "comma-separated strategies or all");
  auto* workers = sub->add_option("--workers,-k", o->workers, "comma-separated worker counts");
  o->flags.add(sub);
  addEngineOption(sub, o->engine);
  o->limitFlags.add(sub, false);
  addFormatOption(sub, o->format);
  sub->footer(
      "Examples:\n"
      "  strata compare owt-k20\n"
      "  strata compare -n alexnet-owt -c k20x8-pcie -s all -k 1,2,4,8 --format csv");
  return {
      sub, [o, sub, strategies, workers] {
        o->limitFlags.apply();
        const auto format = parseFormat(o->format);
        Experiment ex;
        if (!o->experiment.empty()) {
          ex = loadExperiment(resolveConfig(ConfigKind::kExperiment, o->experiment, "experiment"));
        } else {
          if (o->network.empty())
            throw OptionError("--network", "required when no experiment file is given");
          if (o->cluster.empty())
            throw OptionError("--cluster", "required when no experiment file is given");
          ex.strategies = {std::begin(kAllStrategies), std::end(kAllStrategies)};
          ex.workers = {1, 2, 4, 8};
        }
        if (!o->network.empty())
          ex.network = networkArg(o->network, "--network");
        if (!o->cluster.empty())
          ex.cluster = clusterArg(o->cluster, "--cluster");
        // Given but empty (-s '') is a mistake, not "the default".
        if (strategies->count() > 0)
          ex.strategies = parseStrategies(o->strategies, "--strategies");
        if (workers->count() > 0) {
          ex.workers = parsePositiveList(o->workers, "--workers");
          ex.workersWhere.clear();
        }
        // A value given on the command line is the option's, not the file's.
        for (auto it = ex.optionWhere.begin(); it != ex.optionWhere.end();)
          it = sub->count(it->first) > 0 ? ex.optionWhere.erase(it) : std::next(it);
        o->flags.apply(ex.batchPerWorker, ex.options);
        o->flags.checkUsed(ex.strategies, ex.options);
        ex.cluster = withProfile(ex.cluster, ex.network, o->profile);
        const auto engine = engineArg(o->engine);
        ProgressBar bar("configurations priced");
        const auto rows = study::compare(
            ex, engine, [&](size_t done, size_t total) { bar.update(int(done), int(total)); });
        printComparison(std::cout, rows, format);
        return 0;
      }};
}

}  // namespace strata::cli

// `strata sweep`: many configurations to CSV/JSON (stdout or a file).
#include <algorithm>
#include <memory>

#include "commands.h"
#include "flags.h"
#include "strata/study/queries.h"

namespace strata::cli {

Command addSweepCommand(CLI::App& app) {
  struct Options {
    std::string networks, clusters, strategies = "all", workers = "1,2,4,8", batches = "128",
                                    overlaps = "on", elements = "fp32", fcUpdates = "step", out,
                                    engine = "model", format = "csv";
    ScenarioFlags flags;
    LimitFlags limitFlags;
  };
  auto o = std::make_shared<Options>();
  auto* sub = app.add_subcommand("sweep", "many configurations to CSV/JSON (stdout or a file)");
  sub->add_option("--networks", o->networks, "comma-separated networks")->required();
  sub->add_option("--clusters", o->clusters, "comma-separated clusters")->required();
  sub->add_option("--strategies", o->strategies, "comma-separated strategies or all (default all)");
  sub->add_option("--workers", o->workers, "comma-separated worker counts (default 1,2,4,8)");
  sub->add_option("--batches", o->batches, "comma-separated examples per worker (default 128)");
  sub->add_option("--overlaps", o->overlaps, "comma-separated on/off (default on)");
  sub->add_option("--elements", o->elements, "comma-separated element types (default fp32)");
  auto* fcUpdatesGiven =
      sub->add_option("--fc-updates", o->fcUpdates, "comma-separated step/round (default step)");
  sub->add_option("--segment", o->flags.segment, "segment size, e.g. 1MiB (default 4 MiB)");
  sub->add_option("--bucket", o->flags.bucket, "gradient bucket size (default 25 MiB)");
  sub->add_option("--allreduce", o->flags.allreduce,
                  "ring: the gradient allreduce, auto|ring|hierarchical|tree|... (default ring)");
  sub->add_option("--conv-sync", o->flags.convSync,
                  "owt-*: the conv-gradient allreduce, same choices (default direct)");
  sub->add_option("--out,-o", o->out, "write to this file instead of stdout");
  addEngineOption(sub, o->engine);
  o->limitFlags.add(sub, false);
  addFormatOption(sub, o->format, "output: table|json|csv (default csv)");
  sub->footer(
      "Example:\n"
      "  strata sweep --networks resnet50,vgg16 --clusters dgx-h100,gige-cluster --workers "
      "8,64,512 --overlaps on,off --out sweep.csv");
  return {
      sub, [o, fcUpdatesGiven] {
        o->limitFlags.apply();
        const auto format = parseFormat(o->format);
        OutputFile out(o->out, "--out");
        // Each list needs at least one item; empty items are each reader's to reject.
        auto items = [](const std::string& text, const char* option) {
          return splitItems(text, option);
        };
        study::SweepGrid grid;
        for (const auto& n : items(o->networks, "--networks"))
          grid.networks.push_back(networkArg(n, "--networks"));
        for (const auto& c : items(o->clusters, "--clusters"))
          grid.clusters.push_back(clusterArg(c, "--clusters"));
        grid.strategies = parseStrategies(o->strategies, "--strategies");
        grid.workers = parsePositiveList(o->workers, "--workers");
        grid.batches = parsePositiveList(o->batches, "--batches");
        for (const auto& v : items(o->overlaps, "--overlaps"))
          grid.overlaps.push_back(parseOnOff(v, "--overlaps"));
        for (const auto& e : items(o->elements, "--elements"))
          grid.elements.push_back(parseElementType(e, "--elements"));
        for (const auto& u : items(o->fcUpdates, "--fc-updates"))
          grid.fcUpdates.push_back(parseFcUpdate(u, "--fc-updates"));
        int unusedBatch = 0;
        o->flags.apply(unusedBatch, grid.base);
        // Every flag (and --fc-updates when given) is used by a strategy swept.
        // (a bucket is used when one of the overlaps swept is on).
        StrategyOptions probe = grid.base;
        probe.overlap =
            std::find(grid.overlaps.begin(), grid.overlaps.end(), true) != grid.overlaps.end();
        o->flags.checkUsed(grid.strategies, probe);
        if (fcUpdatesGiven->count() > 0)
          if (const auto unused = optionUnused({OptionKey::kFcUpdate}, grid.strategies, grid.base))
            throw OptionError("--fc-updates", unused->why);
        ProgressBar bar("configurations priced");
        const auto rows = study::sweep(grid, engineArg(o->engine), [&](size_t done, size_t total) {
          bar.update(int(done), int(total));
        });
        printComparison(out.stream(), rows, format);
        out.close();
        return 0;
      }};
}

}  // namespace strata::cli

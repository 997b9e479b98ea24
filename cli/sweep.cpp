// `strata sweep`: many configurations to CSV/JSON (stdout or a file).
#include <algorithm>
#include <memory>

#include "commands.h"
#include "flags.h"

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
  return {sub, [o, fcUpdatesGiven] {
            o->limitFlags.apply();
            const auto format = parseFormat(o->format);
            OutputFile out(o->out, "--out");
            // Each list needs at least one item; empty items are each reader's to reject.
            auto items = [](const std::string& text, const char* option) {
              return splitItems(text, option);
            };
            std::vector<Network> nets;
            for (const auto& n : items(o->networks, "--networks"))
              nets.push_back(networkArg(n, "--networks"));
            std::vector<Cluster> clusters;
            for (const auto& c : items(o->clusters, "--clusters"))
              clusters.push_back(clusterArg(c, "--clusters"));
            const auto strategies = parseStrategies(o->strategies, "--strategies");
            const auto workers = parsePositiveList(o->workers, "--workers");
            const auto batches = parsePositiveList(o->batches, "--batches");
            std::vector<bool> overlaps;
            for (const auto& v : items(o->overlaps, "--overlaps"))
              overlaps.push_back(parseOnOff(v, "--overlaps"));
            std::vector<ElementType> elements;
            for (const auto& e : items(o->elements, "--elements"))
              elements.push_back(parseElementType(e, "--elements"));
            std::vector<FcUpdate> updates;
            for (const auto& u : items(o->fcUpdates, "--fc-updates"))
              updates.push_back(parseFcUpdate(u, "--fc-updates"));
            StrategyOptions base;
            int unusedBatch = 0;
            o->flags.apply(unusedBatch, base);
            // Every flag (and --fc-updates when given) is used by a strategy swept.
            // (a bucket is used when one of the overlaps swept is on).
            StrategyOptions probe = base;
            probe.overlap = std::find(overlaps.begin(), overlaps.end(), true) != overlaps.end();
            o->flags.checkUsed(strategies, probe);
            if (fcUpdatesGiven->count() > 0)
              if (const auto unused = optionUnused({OptionKey::kFcUpdate}, strategies, base))
                throw OptionError("--fc-updates", unused->why);
            // Count first, for the progress bar.
            size_t total = 0;
            for (const auto& net : nets)
              for (auto s : strategies)
                if (!isModelParallel(s) || net.modelParallelFrom > 0)
                  total += clusters.size() * batches.size() * elements.size() * overlaps.size() *
                           updates.size() * workers.size();
            const auto engine = engineArg(o->engine);
            ProgressBar bar("configurations priced");
            std::vector<StepEstimate> rows;
            for (const auto& net : nets)
              for (const auto& cl : clusters)
                for (int b : batches)
                  for (auto el : elements)
                    for (bool ov : overlaps)
                      for (auto up : updates)
                        for (int k : workers)
                          for (auto s : strategies) {
                            Scenario sc{s, k, b, base};
                            sc.options.element = el;
                            sc.options.overlap = ov;
                            sc.options.fcUpdate = up;
                            if (isModelParallel(s) && net.modelParallelFrom <= 0)
                              continue;
                            rows.push_back(study::evaluate(net, cl, sc, engine));
                            bar.update(int(rows.size()), int(total));
                          }
            printComparison(out.stream(), rows, format);
            out.close();
            return 0;
          }};
}

}  // namespace strata::cli

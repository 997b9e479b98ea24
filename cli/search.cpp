// `strata search`: every layout of a network on K workers for one global
// batch (search.h), priced by the closed form; the best first.
#include "strata/model/search.h"

#include <fmt/format.h>
#include <malloc.h>

#include <chrono>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "flags.h"
#include "output.h"
#include "strata/model/limits.h"
#include "strata/model/plan.h"
#include "strata/model/quantity_text.h"
#include "strata/sim/simulator.h"
#include "strata/study/csv.h"
#include "strata/study/estimate_schema.h"
#include "strata/study/queries.h"
#include "table.h"

namespace strata::cli {

Command addSearchCommand(CLI::App& app) {
  struct Options {
    std::string network, cluster, workers, globalBatch, top = "10", format = "table",
                                                        simulate = "0";
    ScenarioFlags flags;
    LimitFlags limitFlags;
  };
  auto o = std::make_shared<Options>();
  auto* sub = app.add_subcommand(
      "search",
      "every layout (dp x tp x pp, schedule, micro-batch, ZeRO, recomputation) of a "
      "network on K workers for one global batch, priced by the model, best first");
  sub->add_option("--network,-n", o->network, kNetworkHelp)->required();
  sub->add_option("--cluster,-c", o->cluster, "cluster preset or YAML file")->required();
  sub->add_option("--workers,-k", o->workers, "number of workers K")->required();
  sub->add_option("--global-batch", o->globalBatch, "examples per step over all workers")
      ->required();
  sub->add_option("--top", o->top, "layouts the table shows (default 10; json and csv: all)");
  sub->add_option("--simulate", o->simulate,
                  "re-check the best N layouts in the simulator (contention on) and say how far "
                  "it is from the model (default 0)");
  o->flags.add(sub);
  o->limitFlags.add(sub, false);
  addFormatOption(sub, o->format,
                  "output: table|json|csv (default table; json and csv hold every layout)");
  sub->footer(
      "--tp, --pp, --zero, --recompute, --sequence-parallel, --schedule, --virtual-stages and "
      "--batch (the micro-batch size) fix their dimension; the others apply to every layout.\n"
      "Example:\n"
      "  strata search -n gpt3-175b -c dgx-a100 -k 1024 --global-batch 1536 --element bf16 "
      "--optimizer adam");
  return {
      sub, [o] {
        o->limitFlags.apply();
        const auto format = parseFormat(o->format);
        const int workers = parsePositive(o->workers, "--workers");
        const int batch = parsePositive(o->globalBatch, "--global-batch");
        const int top = parsePositive(o->top, "--top");
        const int simulate = o->simulate == "0" ? 0 : parsePositive(o->simulate, "--simulate");
        int microBatch = 0;
        StrategyOptions options;
        o->flags.apply(microBatch, options);
        const auto space =
            study::searchSpace(workers, batch, microBatch, options, o->flags.given(), false);
        const auto net = networkArg(o->network, "--network");
        const auto cl = clusterArg(o->cluster, "--cluster");
        const auto start = std::chrono::steady_clock::now();
        // Thousands of evaluations allocate and free the same K-sized
        // vectors: keep freed memory in the heap instead of returning
        // it to the kernel and faulting it in again (half the time at
        // K = 4096 without).
        mallopt(M_MMAP_THRESHOLD, 256 << 20);
        mallopt(M_TRIM_THRESHOLD, 1 << 30);
        ProgressBar bar("layouts priced");
        const auto result =
            searchLayouts(net, cl, space, [&](int done, int total) { bar.update(done, total); });
        const double seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        if (format == Format::kJson) {
          nlohmann::ordered_json j;
          j["network"] = net.name;
          j["cluster"] = cl.name;
          j["workers"] = workers;
          j["global_batch"] = batch;
          j["layouts"] = result.enumerated;
          j["fitting"] = result.fitting;
          j["why_best"] = result.why;
          auto rows = nlohmann::ordered_json::array();
          for (const auto& r : result.rows) {
            auto row = study::estimateJson(r.estimate);
            row["layout"] = describeLayout(r.scenario);
            row["peak_memory_bytes"] = r.peakMemory.value();
            rows.push_back(std::move(row));
          }
          j["rows"] = std::move(rows);
          std::cout << j.dump(2) << "\n";
          return 0;
        }
        if (format == Format::kCsv) {
          // estimate_schema's columns, after the layout and its peak
          // memory (each line ends in its newline), every cell as csv.h
          // writes it (9 significant digits).
          std::cout << "layout,peak_memory_bytes," << study::estimateCsvHeader();
          for (const auto& r : result.rows)
            std::cout << study::csvField(describeLayout(r.scenario)) << ","
                      << study::csvCell(r.peakMemory.value()) << ","
                      << study::estimateCsvRow(r.estimate);
          return 0;
        }
        std::cout << fmt::format(
            "{} on {}: ring, {} workers, global batch {}, {}, optimizer {}{}: {} layouts, {} "
            "fit in {} per worker (searched in {:.1f} s)\n\n",
            net.name, cl.name, workers, batch, toString(space.base.element),
            toString(space.base.optimizer),
            space.base.gradientSync == AllreduceAlgorithm::kRing
                ? std::string()
                : fmt::format(", allreduce {}", toString(space.base.gradientSync)),
            result.enumerated, result.fitting, formatBytes(cl.device.memoryCapacity), seconds);
        Table t({"#", "layout", "step", "tokens/s", "MFU", "memory", "bubble", "bottleneck"}, 2);
        int shown = 0;
        for (const auto& r : result.rows) {
          if (!r.fits || shown >= top)
            break;
          const auto& e = r.estimate;
          t.add({std::to_string(++shown), describeLayout(r.scenario), formatSeconds(e.step),
                 e.tokensPerSecond > 0 ? countText(e.tokensPerSecond) : "-",
                 e.modelFlopsUtilisation > 0 ? percent(e.modelFlopsUtilisation) : "-",
                 formatBytes(r.peakMemory),
                 e.step.value() > 0 ? percent(e.pipelineBubble.value() / e.step.value()) : "-",
                 e.bottleneck});
        }
        if (shown == 0) {
          const auto& least = *std::min_element(
              result.rows.begin(), result.rows.end(),
              [](const auto& a, const auto& b) { return a.peakMemory < b.peakMemory; });
          std::cout << fmt::format(
              "no layout fits: the least memory is {} per worker ({}), over the {} of "
              "cluster '{}'\n",
              formatBytes(least.peakMemory), describeLayout(least.scenario),
              formatBytes(cl.device.memoryCapacity), cl.name);
          return 0;
        }
        t.print(std::cout);
        if (!result.why.empty())
          std::cout << "\nwhy the best: " << result.why << "\n";
        if (simulate > 0) {
          // The simulator plays the same layouts (contention on): where it
          // and the closed form part, the model's overlap or link sharing is
          // what to doubt.
          std::cout << "\nthe best in the simulator (contention on):\n";
          Table s({"#", "layout", "model", "simulator", "sim / model"}, 2);
          int n = 0;
          for (const auto& r : result.rows) {
            if (!r.fits || n >= simulate)
              break;
            ++n;
            // One worker per stage stands for the stage's (a representative
            // plan); a plan still over the limit is left out, saying so.
            const auto detail = sim::representativeReason(r.scenario, cl, sim::Options{}).empty()
                                    ? PlanDetail::kRepresentative
                                    : PlanDetail::kFull;
            if (const double tasks = estimatePlanTasks(net, r.scenario, 0, detail);
                tasks > double(limits().maxPlanTasks)) {
              s.add({std::to_string(n), describeLayout(r.scenario), formatSeconds(r.estimate.step),
                     "-",
                     fmt::format("not played: about {:.2g} plan tasks, over the limit of {} ({})",
                                 tasks, limits().maxPlanTasks, kMaxTasksOption)});
              continue;
            }
            const auto sim = study::evaluate(net, cl, r.scenario, study::Engine::kSimulator);
            s.add({std::to_string(n), describeLayout(r.scenario), formatSeconds(r.estimate.step),
                   formatSeconds(sim.step),
                   fmt::format("{:+.1f} %",
                               100.0 * (sim.step.value() / r.estimate.step.value() - 1))});
          }
          s.print(std::cout);
        }
        return 0;
      }};
}

}  // namespace strata::cli

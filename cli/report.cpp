// `strata report`: a scaling report folder (index.html, report.md, figures,
// data) from an experiment file or flags, optionally with validate results.
#include "strata/reports/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <set>
#include <sstream>

#include "commands.h"
#include "flags.h"
#include "strata/model/presets.h"
#include "strata_version.h"

namespace strata::cli {

namespace {

std::string readText(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The command line as typed, quoted for a POSIX shell where needed.
std::string commandLine(const Process& process) {
  std::string out = "strata";
  for (int i = 1; i < *process.argc; ++i) {
    const std::string a = (*process.argv)[i];
    const bool plain = !a.empty() && a.find_first_not_of(
                                         "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLM"
                                         "NOPQRSTUVWXYZ0123456789-_./:=,+@%") == std::string::npos;
    if (plain) {
      out += " " + a;
      continue;
    }
    out += " '";
    for (char c : a)
      out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    out += "'";
  }
  return out;
}

std::string utcNow() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

}  // namespace

Command addReportCommand(CLI::App& app, Process process) {
  struct Options {
    std::string experiment, networks, clusters, strategies, workers, batches, overlaps, fcUpdates,
        elements, out, engine = "model", title, timeline, searchGlobalBatch;
    std::vector<std::string> validation;
    ScenarioFlags flags;
    LimitFlags limitFlags;
  };
  auto o = std::make_shared<Options>();
  auto* sub = app.add_subcommand(
      "report",
      "a scaling report: one self-contained HTML page, Markdown with SVG figures, CSV/JSON");
  sub->add_option("experiment", o->experiment, "experiment preset or YAML file (optional)");
  sub->add_option("--out,-o", o->out, "the report folder to write (created)")->required();
  sub->add_option("--networks,-n", o->networks,
                  "comma-separated networks (override the experiment's)");
  sub->add_option("--clusters,-c", o->clusters,
                  "comma-separated clusters (override the experiment's)");
  auto* strategies = sub->add_option("--strategies,-s", o->strategies,
                                     "comma-separated strategies or all (default all)");
  auto* workers = sub->add_option("--workers,-k", o->workers,
                                  "comma-separated worker counts (default 1,2,4,8)");
  auto* batches = sub->add_option(
      "--batches", o->batches,
      "comma-separated examples per worker: the first is the report's, several add weak vs strong "
      "scaling");
  o->flags.add(sub);
  auto* overlapsOption = sub->add_option(
      "--overlaps", o->overlaps, "comma-separated on/off: one panel per value (e.g. on,off)");
  auto* fcUpdatesOption = sub->add_option("--fc-updates", o->fcUpdates,
                                          "comma-separated step/round: one panel per value");
  auto* elementsOption = sub->add_option("--elements", o->elements,
                                         "comma-separated element types: one panel per value");
  addEngineOption(sub, o->engine);
  sub->add_option("--validation", o->validation,
                  "the JSON of a strata validate run (--format json): adds predicted vs measured "
                  "(repeatable)");
  sub->add_option("--timeline", o->timeline,
                  "STRATEGY:K, the configuration of the one-step timeline figure (default: the "
                  "fastest strategy at the largest K <= 8)");
  sub->add_option("--search-global-batch", o->searchGlobalBatch,
                  "add the layouts figure: every layout strata search finds for the largest "
                  "--workers and this global batch, throughput against memory with the Pareto "
                  "front (priced by the model)");
  sub->add_option("--title", o->title,
                  "the report's title (default: the experiment's description)");
  o->limitFlags.add(sub, false);
  sub->footer(
      "Examples:\n"
      "  strata report owt-k20 --out owt-k20-report\n"
      "  strata report -n resnet50,vgg16 -c dgx-h100,gige-cluster -s ring,ps -k 8,16,64,256 "
      "--engine sim --out dgx\n"
      "  strata report owt-k20 --batches 128,64,32 --validation validate.json --out owt\n"
      "  strata report -n gpt3-xl -c dgx-h100 -s ring -k 8,64 --element bf16 --optimizer adam "
      "--search-global-batch 512 --out gpt3-xl\n"
      "Open OUT/index.html in any browser (it needs no network). Figures are drawn by gnuplot.");
  return {sub, [o, sub, process, strategies, workers, batches, overlapsOption, fcUpdatesOption,
                elementsOption] {
            o->limitFlags.apply();
            // Fail before any work: no folder named, or no gnuplot.
            if (o->out.empty() || o->out == "-")
              throw OptionError("--out", "needs a folder to write the report into");
            if (std::filesystem::exists(o->out) && !std::filesystem::is_directory(o->out))
              throw OptionError("--out", "'" + o->out + "' exists and is not a folder");
            const std::string gnuplot = reports::findGnuplot();
            reports::ReportRequest rq;
            Experiment ex;
            if (!o->experiment.empty()) {
              const auto path = resolveConfig(ConfigKind::kExperiment, o->experiment, "experiment");
              ex = loadExperiment(path);
              rq.provenance.configs.push_back({"experiment", path, readText(path)});
              rq.networks.push_back(ex.network);
              rq.clusters.push_back(ex.cluster);
              rq.strategies = ex.strategies;
              rq.workers = ex.workers;
            } else {
              if (o->networks.empty())
                throw OptionError("--networks", "required when no experiment file is given");
              if (o->clusters.empty())
                throw OptionError("--clusters", "required when no experiment file is given");
              rq.strategies = {std::begin(kAllStrategies), std::end(kAllStrategies)};
              rq.workers = {1, 2, 4, 8};
            }
            auto items = [](const std::string& text, const char* option) {
              return splitItems(text, option);
            };
            if (!o->networks.empty()) {
              rq.networks.clear();
              for (const auto& n : items(o->networks, "--networks"))
                rq.networks.push_back(networkArg(n, "--networks"));
            }
            if (!o->clusters.empty()) {
              rq.clusters.clear();
              for (const auto& c : items(o->clusters, "--clusters"))
                rq.clusters.push_back(clusterArg(c, "--clusters"));
            }
            // Two networks or clusters of one name would share figure ids and files.
            for (size_t i = 0; i < rq.networks.size(); ++i)
              for (size_t j = 0; j < i; ++j)
                if (rq.networks[i].name == rq.networks[j].name)
                  throw OptionError("--networks", "names network '" + rq.networks[i].name +
                                                      "' twice (give each once)");
            for (size_t i = 0; i < rq.clusters.size(); ++i)
              for (size_t j = 0; j < i; ++j)
                if (rq.clusters[i].name == rq.clusters[j].name)
                  throw OptionError("--clusters", "names cluster '" + rq.clusters[i].name +
                                                      "' twice (give each once)");
            if (strategies->count() > 0)
              rq.strategies = parseStrategies(o->strategies, "--strategies");
            if (workers->count() > 0)
              rq.workers = parsePositiveList(o->workers, "--workers");
            // Each worker count once, ascending: the figures' x axis.
            const std::set<int> ks(rq.workers.begin(), rq.workers.end());
            if (ks.size() != rq.workers.size())
              throw OptionError("--workers", "a worker count is given twice");
            rq.workers.assign(ks.begin(), ks.end());
            int batch = ex.batchPerWorker;
            StrategyOptions base = ex.options;
            o->flags.apply(batch, base);
            rq.batches = {batch};
            // Option sets side by side: the cross product of the lists given.
            std::vector<bool> overlaps{base.overlap};
            std::vector<FcUpdate> fcUpdates{base.fcUpdate};
            std::vector<ElementType> elements{base.element};
            auto single = [](const std::string& flag, const char* one, const char* many) {
              if (!flag.empty())
                throw OptionError(many, std::string("give ") + one + " or " + many + ", not both");
            };
            if (overlapsOption->count() > 0) {
              single(o->flags.overlap, "--overlap", "--overlaps");
              overlaps.clear();
              for (const auto& v : items(o->overlaps, "--overlaps"))
                overlaps.push_back(parseOnOff(v, "--overlaps"));
            }
            if (fcUpdatesOption->count() > 0) {
              single(o->flags.fcUpdate, "--fc-update", "--fc-updates");
              fcUpdates.clear();
              for (const auto& v : items(o->fcUpdates, "--fc-updates"))
                fcUpdates.push_back(parseFcUpdate(v, "--fc-updates"));
              if (const auto unused = optionUnused({OptionKey::kFcUpdate}, rq.strategies, base))
                throw OptionError("--fc-updates", unused->why);
            }
            if (elementsOption->count() > 0) {
              single(o->flags.element, "--element", "--elements");
              elements.clear();
              for (const auto& v : items(o->elements, "--elements"))
                elements.push_back(parseElementType(v, "--elements"));
            }
            {
              // Every flag is used by a strategy reported (a bucket: with one overlap on).
              StrategyOptions probe = base;
              probe.overlap = std::find(overlaps.begin(), overlaps.end(), true) != overlaps.end();
              o->flags.checkUsed(rq.strategies, probe);
            }
            for (auto el : elements)
              for (bool ov : overlaps)
                for (auto up : fcUpdates) {
                  StrategyOptions set = base;
                  set.element = el;
                  set.overlap = ov;
                  set.fcUpdate = up;
                  for (const auto& seen : rq.optionSets)
                    if (seen.element == el && seen.overlap == ov && seen.fcUpdate == up)
                      throw OptionError("--overlaps", "an option set is given twice");
                  rq.optionSets.push_back(set);
                }
            if (batches->count() > 0) {
              if (!o->flags.batch.empty())
                throw OptionError("--batches", "give --batch or --batches, not both");
              rq.batches = parsePositiveList(o->batches, "--batches");
              if (std::set<int>(rq.batches.begin(), rq.batches.end()).size() != rq.batches.size())
                throw OptionError("--batches", "a batch is given twice");
            }
            for (int b : rq.batches)
              for (int k : rq.workers)
                (void)globalBatch(k, b);  // K x b must fit: one line naming --batch otherwise
            for (const auto& n : rq.networks)
              if (!n.sourceFile.empty())
                rq.provenance.configs.push_back({"network", n.sourceFile, readText(n.sourceFile)});
            for (const auto& c : rq.clusters)
              if (!c.sourceFile.empty())
                rq.provenance.configs.push_back({"cluster", c.sourceFile, readText(c.sourceFile)});
            rq.engine = engineArg(o->engine);
            // One file twice would count every measured row twice.
            {
              std::vector<std::string> files;
              for (const auto& v : o->validation) {
                std::error_code ec;
                const auto canonical = std::filesystem::weakly_canonical(v, ec);
                files.push_back(ec ? v : canonical.string());
              }
              refuseRepeats(files, "--validation",
                            fmt::format("{}", fmt::join(o->validation, " ")));
            }
            for (const auto& v : o->validation) {
              auto points = study::loadValidationJson(v, "--validation");
              rq.measured.insert(rq.measured.end(), points.begin(), points.end());
              rq.provenance.configs.push_back({"validation", v, "(strata validate --format json)"});
            }
            if (!o->timeline.empty()) {
              const auto colon = o->timeline.rfind(':');
              if (colon == std::string::npos)
                throw OptionError("--timeline",
                                  "must be STRATEGY:K, e.g. ring:8, got '" + o->timeline + "'");
              rq.timelineStrategy = parseStrategy(o->timeline.substr(0, colon), "--timeline");
              rq.timelineWorkers = parsePositive(o->timeline.substr(colon + 1), "--timeline");
            }
            if (!o->searchGlobalBatch.empty())
              rq.searchGlobalBatch = parsePositive(o->searchGlobalBatch, "--search-global-batch");
            rq.title = !o->title.empty()         ? o->title
                       : !ex.description.empty() ? ex.description
                                                 : "Scaling report: " + rq.networks.front().name +
                                                       " on " + rq.clusters.front().name;
            rq.provenance.version = kVersion;
            rq.provenance.revision = kGitRevision;
            rq.provenance.date = utcNow();
            rq.provenance.command = commandLine(process);
            ProgressBar bar("configurations priced");
            rq.progress = [&bar](int done, int total) { bar.update(done, total); };

            // A value from the experiment file found wrong only when priced (a
            // segment or ps servers the cluster cannot take) names its file:line:key;
            // one given on the command line names the option.
            for (auto it = ex.optionWhere.begin(); it != ex.optionWhere.end();)
              it = sub->count(it->first) > 0 ? ex.optionWhere.erase(it) : std::next(it);
            const auto report = [&] {
              try {
                return reports::buildReport(rq);
              } catch (const OptionError& e) {
                // Which K a --workers error is about is not known here (K = 0
                // matches no count): it keeps naming the option.
                throwAtExperimentSource(ex, e, 0);
                throw;
              }
            }();
            reports::writeReport(report, rq, o->out, gnuplot);
            const auto index = std::filesystem::path(o->out) / "index.html";
            std::cout << "report written to " << index.string() << " (open it in a browser; "
                      << (std::filesystem::path(o->out) / "report.md").string()
                      << ", figures/ and data/ "
                      << "beside it)\n";
            return 0;
          }};
}

}  // namespace strata::cli

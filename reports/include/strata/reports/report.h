// Scaling reports (`strata report`): one sweep of networks x clusters x
// batches x strategies x worker counts, priced by the model or the simulator,
// turned into one folder a person can open or share:
//   index.html      one self-contained page (figures inline, no scripts, no URLs)
//   report.md       the same text, figures as SVG files beside it
//   figures/*.svg   gnuplot's SVG output, and the *.gp scripts that drew them
//   data/*.csv      every number behind the figures; data/report.json the same
//
// buildReport computes (no I/O besides the request's configs, already loaded);
// writeReport draws the figures with gnuplot and writes the folder. The
// numbers and the text are deterministic for one request: only the
// provenance (date, revision, command) changes between two runs.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "strata/model/cluster.h"
#include "strata/model/network.h"
#include "strata/model/search.h"
#include "strata/model/strategy.h"
#include "strata/model/timeline.h"
#include "strata/study/engine.h"
#include "strata/study/validation_schema.h"

namespace strata::reports {

// A config the report was made from, inlined in its provenance.
struct ConfigText {
  std::string kind;  // "experiment", "network", "cluster", "validation"
  std::string path;
  std::string text;
};

// Where the report came from: enough to make it again.
struct Provenance {
  std::string version;   // strata's version
  std::string revision;  // git revision of the build ("unknown" outside a checkout)
  std::string date;      // UTC, ISO 8601
  std::string command;   // the command line that regenerates the report
  std::vector<ConfigText> configs;
};

struct ReportRequest {
  std::string title;
  std::vector<Network> networks;
  std::vector<Cluster> clusters;
  std::vector<Strategy> strategies;
  std::vector<int> workers;  // ascending, each once
  std::vector<int> batches;  // examples per worker; the first is the report's main batch
  // Option sets compared side by side (overlap on and off, ...): each one is
  // a panel of its own. At least one.
  std::vector<StrategyOptions> optionSets;
  study::Engine engine = study::Engine::kModel;  // prices every row: the model or the simulator
  std::vector<study::MeasuredPoint> measured;    // study::loadValidationJson
  // The configuration of the timeline figure; unset: the fastest strategy
  // at the largest K of at most kTimelineMaxWorkers workers.
  std::optional<Strategy> timelineStrategy;
  int timelineWorkers = 0;
  // > 0: every panel also searches the layouts of its largest K for this
  // global batch (strata search's space, the panel's options as the base),
  // priced by the closed form whatever the engine, and draws them:
  // throughput against memory, with the Pareto front.
  int searchGlobalBatch = 0;
  Provenance provenance;
  // Called after each priced configuration (done of total).
  std::function<void(int done, int total)> progress;
};

// What tells option set `index` apart from the request's others ("overlap
// off, FC update per round"); "" with one option set.
std::string optionSetLabel(const ReportRequest& request, size_t index);
// Every option of a set, for the page's header and provenance.
std::string optionsText(const StrategyOptions& options);

// Timeline figures show at most this many workers (a readable Gantt chart).
inline constexpr int kTimelineMaxWorkers = 8;

// The step under one what-if change of the cluster.
struct WhatIf {
  std::string name;  // "bandwidth x0.5", ...
  std::string why;   // what was changed
};
// Bandwidth x0.5 and x2, compute x2 (every kernel and reduction twice as
// fast), latency x10: the sensitivities the report prices.
const std::vector<WhatIf>& whatIfs();
// `cluster` with what-if `index` of whatIfs() applied.
Cluster applyWhatIf(const Cluster& cluster, size_t index);

// One network x cluster at the main batch: the rows the figures are drawn from.
struct Panel {
  int network = 0;  // indices into the request
  int cluster = 0;
  int optionSet = 0;
  int batch = 0;                   // examples per worker
  std::vector<StepEstimate> rows;  // strategy-major, K ascending
  // Strong scaling (several batches given): the global batch of the largest
  // batch at the smallest K, split over K workers wherever it divides.
  int strongGlobalBatch = 0;
  std::vector<StepEstimate> strong;
  // Weak scaling at every other batch given (rows of the same shape as `rows`).
  std::vector<StepEstimate> otherBatches;
  // What-if steps at the largest K, per strategy: index 0 the base step.
  struct Sensitivity {
    Strategy strategy;
    int workers = 0;
    std::vector<Seconds> step;  // 1 + whatIfs().size()
  };
  std::vector<Sensitivity> sensitivity;
  // Simulator link utilisation at the largest K, per strategy.
  struct Link {
    Strategy strategy;
    int workers = 0;
    std::string name;
    BytesPerSecond bandwidth;
    Bytes bytes;
    Seconds busy;
    double utilisation = 0;
  };
  std::vector<Link> links;
  // ReportRequest::searchGlobalBatch: the layouts of `searchWorkers` workers
  // (searchLayouts' rows, fitting first, fastest first) and why the best
  // beats the runner-up.
  int searchWorkers = 0;
  std::vector<SearchRow> search;
  std::string searchWhy;
  // The timeline figure's simulated step.
  StepEstimate timelineEstimate;
  Timeline timeline;
  std::vector<std::string> timelineTaskKind;  // per task: "fwd", "bwd", "update", ...
};

// The Pareto front of a search: the fitting layouts that no other fitting
// layout beats on both throughput and memory (at least as fast with no
// more memory, and better on one), indices into `rows`, memory ascending
// (ties: the faster first; equal layouts: the first listed).
std::vector<size_t> paretoFront(const std::vector<SearchRow>& rows);

// The fastest strategy at one K of a panel that fits in memory, and why.
struct Verdict {
  int workers = 0;
  std::optional<Strategy> best;  // none when nothing fits
  Seconds step;
  std::string why;  // one sentence: margin, bottleneck, exposed communication, memory
};

struct Report {
  std::vector<Panel> panels;                   // network-major, then cluster
  std::vector<std::vector<Verdict>> verdicts;  // per panel, per K
};

// Prices every configuration of `request` (model or simulator), the strong
// scaling, the what-ifs, the links and the timeline. Throws UserError for a
// configuration an engine refuses (more workers than a cluster has, ...).
Report buildReport(const ReportRequest& request);

// Writes the report folder `dir` (created; files of the same names are
// replaced, others kept). The whole report is written and drawn in a folder
// beside `dir` first and moved into place only when complete, so a report
// that fails leaves `dir` as it was. `gnuplot` is the program that draws the
// figures. Throws UserError naming --out when `dir` cannot be a report folder,
// WriteError with the reason when the system refuses a write (a full disk),
// RunFailure when gnuplot fails (with its message).
void writeReport(const Report& report, const ReportRequest& request, const std::string& dir,
                 const std::string& gnuplot);

// The gnuplot to run: $STRATA_GNUPLOT, else `gnuplot` on PATH. Throws
// UserError saying how to install it when there is none.
std::string findGnuplot();

}  // namespace strata::reports

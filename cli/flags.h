// What every subcommand of `strata` shares: reading option values (lists,
// sizes, on/off, formats), the scenario flags, resolving network and cluster
// arguments, and writing output files.
//
// Every reader throws OptionError naming the option on a bad value, so each
// user mistake ends as one line and exit status 2. The readers are a library
// of their own (strata_cli_flags) so tests and the fuzzer can call them.
#pragma once

#include <CLI/CLI.hpp>
#include <fstream>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

#include "output.h"
#include "strata/model/atomic_file.h"
#include "strata/model/cluster.h"
#include "strata/model/error.h"
#include "strata/model/estimate.h"
#include "strata/model/network.h"
#include "strata/model/strategy.h"
#include "strata/study/engine.h"
#include "strata/study/option_text.h"
#include "strata/study/trace.h"

namespace strata::cli {

// The help text of every option that names one network (-n, describe's
// positional): what networkArg takes.
inline constexpr const char* kNetworkHelp =
    "network preset, or a network YAML, ONNX (.onnx) or Hugging Face config (.json) file";

// Exit statuses: a user mistake (bad option, bad config) and a failure at run
// time (a worker failed, a receive timed out); both print one line.
constexpr int kUserErrorExit = 2;
constexpr int kRunFailureExit = 1;

// The readers every front end shares (study/option_text.h).
using study::checkRange;
using study::parseOnOff;
using study::parsePositive;
using study::parsePositiveList;
using study::parseSeed;
using study::parseSize;
using study::parseStraggler;
using study::parseStragglers;
using study::splitItems;
using study::splitList;

// A positive time such as "30s".
Seconds parseTime(const std::string& text, const std::string& option);
Format parseFormat(const std::string& text);

// The options shared by predict, compare, sweep, plan, simulate and run, as
// typed on the command line.
struct ScenarioFlags {
  std::string batch;
  std::string overlap;
  std::string fcUpdate;
  std::string psPriority;
  std::string staleness;
  std::string psServers;
  std::string psNode;
  std::string threadsPerWorker;
  std::string tp;
  std::string sequenceParallel;
  std::string zero;
  std::string recompute;
  std::string pp;
  std::string microbatches;
  std::string schedule;
  std::string virtualStages;
  std::string stageStarts;
  std::string placement;
  std::string segment;
  std::string bucket;
  std::string element;
  std::string optimizer;
  std::string allreduce;
  std::string convSync;

  // Registers every flag on `app`; after parsing, a flag given with an empty
  // value (--segment '') is an error, not the default.
  void add(CLI::App* app);
  // One scenario from --strategy, --workers and these flags over the defaults;
  // a flag the strategy would ignore is refused (checkUsed).
  Scenario scenario(const std::string& strategy, const std::string& workers) const;
  // Applies the flags given on the command line over `batchPerWorker` and `o`
  // (from a file or defaults).
  void apply(int& batchPerWorker, StrategyOptions& o) const;
  // The options given on the command line (a flag set to a non-empty value).
  std::vector<OptionKey> given() const;
  // Each option given, with its text (what study::applyOptionText reads).
  std::vector<std::pair<OptionKey, const std::string*>> texts() const;
  // Throws OptionError naming the first flag given that none of `strategies`
  // uses with options `o` (optionUnused: the one rule).
  void checkUsed(const std::vector<Strategy>& strategies, const StrategyOptions& o) const;

 private:
  // The registered options (null for a flag a command registers itself).
  std::vector<std::pair<CLI::Option*, const std::string*>> given_;
};

// The length of a training run to price (predict, simulate): N steps, or E
// epochs over a dataset of N examples.
struct TrainingFlags {
  std::string steps, epochs, dataset;

  // `stepsName`: the steps option's name(s) for CLI11 ("--steps,--train-steps"
  // on predict; simulate's --steps is the ps steps it plays, so there it is
  // --train-steps alone), `stepsOption` the name errors use.
  void add(CLI::App* app, const std::string& stepsName, const std::string& stepsOption);
  // The run asked for by `scenario`'s workers (steps 0: none asked); its
  // global batch is checked (globalBatch) only when epochs need it.
  // Throws OptionError naming the option: both steps and epochs, epochs
  // without a dataset or the other way round, a count that is not a
  // positive finite number (steps, dataset: whole) or absurdly large.
  TrainingRun run(const Scenario& scenario) const;

 private:
  std::string stepsOption_ = "--steps";
  // Each option, the text it fills, its name in errors.
  std::vector<std::tuple<CLI::Option*, const std::string*, std::string>> given_;
};

// --trace-ranks and --trace-max-events, shared by simulate and run.
struct TraceFlags {
  std::string ranks;
  std::string maxEvents;

  void add(CLI::App* app);
  // The options for a trace of `workers` workers; `trace` is the --trace path
  // (the trace flags without --trace are a mistake).
  TraceOptions options(const std::string& trace, int workers) const;

 private:
  CLI::Option* ranksOption_ = nullptr;
  CLI::Option* maxEventsOption_ = nullptr;
};

// --max-workers, --max-tasks, --max-events and --allow-large: raise the
// resource limits (model/limits.h, docs/configs.md "Limits").
struct LimitFlags {
  std::string maxWorkers, maxTasks, maxEvents;
  bool allowLarge = false;
  bool threadWorkers = false;  // --max-workers limits threads (run, validate)

  void add(CLI::App* app, bool threads);
  // Sets the limits in force from the flags given; call before any work.
  void apply() const;
};

// --format into `format` ("table" unless the caller set another default).
void addFormatOption(CLI::App* app, std::string& format,
                     const std::string& help = "output: table|json|csv (default table)");
// --engine into `engine`: model (closed form) or sim (simulated Plan), read
// by engineArg.
void addEngineOption(CLI::App* app, std::string& engine);
// The engine --engine names (study::parsePredictingEngine): OptionError
// "--engine: must be model or sim, got '...'" otherwise.
study::Engine engineArg(const std::string& engine);

Network networkArg(const std::string& nameOrPath, const std::string& option);
Cluster clusterArg(const std::string& nameOrPath, const std::string& option);
// The cluster with a per-op profile of `net` attached when `profilePath` is
// given (--profile): compute is then priced from the network's own op times.
Cluster withProfile(Cluster cluster, const Network& net, const std::string& profilePath);

// A progress bar on stderr, redrawn in place, for long sweeps and reports:
// silent unless stderr is a terminal (logs and pipes get no control codes).
class ProgressBar {
 public:
  explicit ProgressBar(std::string what);
  // `done` of `total` finished; the last call (done == total) ends the line.
  void update(int done, int total);

 private:
  std::string what_;
  bool on_;
  int drawn_ = -1;
};

// Where a command writes its answer: stdout ("" or "-") or the file at
// `path` through an AtomicFile (model/atomic_file.h), checked and begun at
// once so a bad path fails before any work (named by `option` in errors).
// The file replaces `path` only at close(); destroyed before it (an error on
// the way), it leaves `path` as it was.
class OutputFile {
 public:
  OutputFile(const std::string& path, const std::string& option);
  std::ostream& stream();
  // Renames a file into place; a write error is a WriteError naming the
  // option and its reason. Stdout is checked by main.
  void close();

 private:
  std::unique_ptr<AtomicFile> file_;
};

}  // namespace strata::cli

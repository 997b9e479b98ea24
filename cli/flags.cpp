#include "flags.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>

#include "strata/model/atomic_file.h"
#include "strata/model/cluster_loader.h"
#include "strata/model/error.h"
#include "strata/model/limits.h"
#include "strata/model/network_loader.h"
#include "strata/model/plan.h"
#include "strata/model/presets.h"
#include "strata/model/profile.h"
#include "strata/model/profile_loader.h"
#include "strata/model/quantity_text.h"
#include "strata/sim/simulator.h"
#include "strata/study/queries.h"

namespace strata::cli {

Seconds parseTime(const std::string& text, const std::string& option) {
  return parseTimeOption(text, option);
}

Format parseFormat(const std::string& text) {
  if (text == "table")
    return Format::kTable;
  if (text == "json")
    return Format::kJson;
  if (text == "csv")
    return Format::kCsv;
  throw OptionError("--format", "must be table, json or csv, got '" + text + "'");
}

void ScenarioFlags::add(CLI::App* app) {
  auto option = [&](const char* name, std::string& value, const char* help) {
    given_.emplace_back(app->add_option(name, value, help), &value);
  };
  option("--batch,-b", batch, "examples per worker per step (default 128)");
  option("--overlap", overlap, "overlap gradient communication with backprop: on|off (default on)");
  option("--fc-update", fcUpdate, "owt-b/owt-c FC update per round|step (default step)");
  option("--bucket", bucket,
         "gradient bucket size with overlap, e.g. 25MiB, 0 = per layer (default 25 MiB)");
  option("--segment", segment,
         "segment size of pipelined transfers, e.g. 1MiB, 0 = off (default 4 MiB)");
  option("--element", element,
         "element type: fp32|tf32|fp16|bf16 (default fp32; tf32: fp32 tensors on tensor cores; "
         "fp16/bf16: mixed precision with fp32 master weights)");
  option("--optimizer", optimizer,
         "update rule: sgd|momentum|adam|adamw: the optimizer's memory and update time, and "
         "what strata run trains with (default momentum: SGD with momentum)");
  option("--allreduce", allreduce,
         "ring: the gradient allreduce, auto|ring|hierarchical|tree|halving-doubling|direct|naive; "
         "auto picks per bucket the least predicted time (default ring; naive is the naive "
         "reducer)");
  option("--conv-sync", convSync,
         "owt-a/b/c: the conv-gradient allreduce, same choices as --allreduce (default direct: "
         "Krizhevsky's, each worker reduces and broadcasts its 1/K)");
  option("--ps-priority", psPriority,
         "ps: which waiting key (layer) the server serves first: first-needed|fifo|last-ready "
         "(default first-needed)");
  option("--ps-servers", psServers,
         "ps: dedicated server nodes after the workers' devices, 0 = sharded over the workers "
         "(default 0)");
  option("--ps-node", psNode,
         "ps: two levels over nodes of G workers (sum into the node's leader, the leaders are "
         "the servers), 0 = one level (default 0)");
  option("--threads-per-worker", threadsPerWorker,
         "cpu: threads of each worker's kernels, 1-256; each keeps a core busy (default 1; "
         "strata run: the cores this process may use / its workers)");
  option("--staleness", staleness,
         "ps: steps a worker may run ahead of its pulls, 0-16 (default 0: synchronous SGD)");
  option("--tp", tp,
         "ring: Megatron tensor parallelism over groups of N consecutive workers (attention "
         "heads, MLP pairs and the vocabulary split), K = dp x N (default 1: none)");
  option("--sequence-parallel", sequenceParallel,
         "ring with --tp 2+: the layers between the split ones on T/N positions: on|off "
         "(default off)");
  option("--zero", zero,
         "ring: ZeRO stage over the data-parallel group: 0 none, 1 optimizer states, 2 and "
         "gradients, 3 and weights (FSDP) (default 0)");
  option("--recompute", recompute,
         "activation recomputation: none|selective (the attention core)|full (each block's "
         "forward) (default none)");
  option("--pp", pp,
         "ring: pipeline parallelism over N stages of consecutive layers, balanced by the cost "
         "model, K = dp x tp x N (default 1: none)");
  option("--microbatches", microbatches,
         "ring: micro-batches of --batch examples per step, gradients accumulated; a step "
         "trains dp x M x b examples (default 1)");
  option("--schedule", schedule,
         "ring with --pp 2+: the pipeline schedule gpipe|1f1b|interleaved (default 1f1b)");
  option("--virtual-stages", virtualStages,
         "ring with --schedule interleaved: chunks of layers per stage, 2+ (default 1)");
  option("--stage-starts", stageStarts,
         "ring with --pp 2+: where each chunk after the first starts, pp x virtual stages - 1 "
         "comma-separated layer or block names (e.g. h.7,h.13,h.20; default: balanced by the "
         "model)");
  option("--placement", placement,
         "ring with --pp 2+: the order of the ranks, innermost first, tp,pp,dp (a replica's "
         "stages side by side; default) or tp,dp,pp (a stage's replicas side by side, the "
         "stages outermost)");
}

Scenario ScenarioFlags::scenario(const std::string& strategy, const std::string& workers) const {
  Scenario sc;
  sc.strategy = parseStrategy(strategy, "--strategy");
  sc.workers = parsePositive(workers, "--workers");
  apply(sc.batchPerWorker, sc.options);
  checkUsed({sc.strategy}, sc.options);
  return sc;
}

void ScenarioFlags::apply(int& batchPerWorker, StrategyOptions& o) const {
  for (const auto& [option, value] : given_)
    if (option->count() > 0 && value->empty())
      throw OptionError(option->get_name(), "was given an empty value");
  if (!batch.empty())
    batchPerWorker = parsePositive(batch, "--batch");
  for (const auto& [key, text] : texts())
    study::applyOptionText(key, *text, std::string(optionFlag(key)), o);
}

std::vector<std::pair<OptionKey, const std::string*>> ScenarioFlags::texts() const {
  const std::pair<OptionKey, const std::string*> fields[] = {
      {OptionKey::kOverlap, &overlap},
      {OptionKey::kFcUpdate, &fcUpdate},
      {OptionKey::kSegment, &segment},
      {OptionKey::kBucket, &bucket},
      {OptionKey::kElement, &element},
      {OptionKey::kOptimizer, &optimizer},
      {OptionKey::kAllreduce, &allreduce},
      {OptionKey::kConvSync, &convSync},
      {OptionKey::kPsPriority, &psPriority},
      {OptionKey::kStaleness, &staleness},
      {OptionKey::kPsServers, &psServers},
      {OptionKey::kPsNode, &psNode},
      {OptionKey::kThreadsPerWorker, &threadsPerWorker},
      {OptionKey::kTensorParallel, &tp},
      {OptionKey::kSequenceParallel, &sequenceParallel},
      {OptionKey::kZero, &zero},
      {OptionKey::kRecompute, &recompute},
      {OptionKey::kPipelineParallel, &pp},
      {OptionKey::kMicrobatches, &microbatches},
      {OptionKey::kSchedule, &schedule},
      {OptionKey::kVirtualStages, &virtualStages},
      {OptionKey::kStageStarts, &stageStarts},
      {OptionKey::kPlacement, &placement}};
  std::vector<std::pair<OptionKey, const std::string*>> out;
  for (const auto& field : fields)
    if (!field.second->empty())
      out.push_back(field);
  return out;
}

std::vector<OptionKey> ScenarioFlags::given() const {
  std::vector<OptionKey> out;
  for (const auto& field : texts())
    out.push_back(field.first);
  return out;
}

void ScenarioFlags::checkUsed(const std::vector<Strategy>& strategies,
                              const StrategyOptions& o) const {
  if (const auto unused = optionUnused(given(), strategies, o))
    throw OptionError(std::string(optionFlag(unused->key)), unused->why);
}

void TrainingFlags::add(CLI::App* app, const std::string& stepsName,
                        const std::string& stepsOption) {
  stepsOption_ = stepsOption;
  given_.emplace_back(app->add_option(stepsName, steps,
                                      "price a training run of this many steps: its time = steps "
                                      "x step time (or --epochs with --dataset)"),
                      &steps, stepsOption);
  given_.emplace_back(
      app->add_option("--epochs", epochs,
                      "price a training run of this many epochs (fractions allowed) over "
                      "--dataset examples: ceil(dataset / global batch) steps per epoch"),
      &epochs, "--epochs");
  given_.emplace_back(
      app->add_option("--dataset", dataset, "examples in the dataset, for --epochs"), &dataset,
      "--dataset");
}

TrainingRun TrainingFlags::run(const Scenario& scenario) const {
  for (const auto& [option, text, name] : given_)
    if (option->count() > 0 && text->empty())
      throw OptionError(name, "was given an empty value");
  // A finite number, the whole text (CLI11 would take "1e3x" as an error
  // of its own, but not "nan" or "inf").
  auto number = [](const std::string& text, const std::string& option, const char* what) {
    double v = 0;
    const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (text.empty() || ec != std::errc() || ptr != text.data() + text.size() || !std::isfinite(v))
      throw OptionError(option, fmt::format("must be {}, got '{}'", what, text));
    return v;
  };
  auto given = [&](const std::string& text, const std::string& option,
                   const char* what) -> std::optional<double> {
    if (text.empty())
      return std::nullopt;
    return number(text, option, what);
  };
  return study::trainingRun(given(steps, stepsOption_, "a whole number of steps"),
                            given(epochs, "--epochs", "a number of epochs"),
                            given(dataset, "--dataset", "a whole number of examples"), scenario,
                            {stepsOption_, "--epochs", "--dataset"});
}

void TraceFlags::add(CLI::App* app) {
  ranksOption_ =
      app->add_option("--trace-ranks", ranks,
                      "write only these workers to the trace: A-B, A,B,C or a mix (default all, up "
                      "to the event limit)");
  maxEventsOption_ =
      app->add_option("--trace-max-events", maxEvents,
                      fmt::format("the most events a trace may hold, 0 = no limit (default {})",
                                  kDefaultTraceEventLimit));
}

TraceOptions TraceFlags::options(const std::string& trace, int workers) const {
  TraceOptions o;
  const bool ranksGiven = ranksOption_ && ranksOption_->count() > 0;
  const bool maxGiven = maxEventsOption_ && maxEventsOption_->count() > 0;
  if (trace.empty() && (ranksGiven || maxGiven))
    throw OptionError(ranksGiven ? "--trace-ranks" : "--trace-max-events", "needs --trace FILE");
  if (ranksGiven)
    o.ranks = parseRankList(ranks, workers);
  if (maxGiven) {
    uint64_t v = 0;
    auto [ptr, ec] = std::from_chars(maxEvents.data(), maxEvents.data() + maxEvents.size(), v);
    if (ec != std::errc() || ptr != maxEvents.data() + maxEvents.size())
      throw OptionError("--trace-max-events",
                        "must be a count of events (0 = no limit), got '" + maxEvents + "'");
    o.maxEvents = v;
  }
  return o;
}

void LimitFlags::add(CLI::App* app, bool threads) {
  threadWorkers = threads;
  app->add_option(kMaxWorkersOption, maxWorkers,
                  threads ? "raise the limit on worker threads (default max(64, 2 x cores))"
                          : "raise the limit on workers of one estimate (default 131072)");
  app->add_option(kMaxTasksOption, maxTasks,
                  "raise the limit on tasks of one Plan (default 5000000)");
  app->add_option(kMaxEventsOption, maxEvents,
                  "raise the limit on simulator events (default 2000000000)");
  app->add_flag(kAllowLargeOption, allowLarge, "lift every limit to its ceiling");
}

void LimitFlags::apply() const {
  Limits l = allowLarge ? largestLimits() : limits();
  auto read = [](const std::string& text, const char* option) -> int64_t {
    int64_t v = 0;
    auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (text.empty() || ec != std::errc() || ptr != text.data() + text.size() || v < 1)
      throw OptionError(option, "must be a positive integer, got '" + text + "'");
    return v;
  };
  if (!maxWorkers.empty())
    (threadWorkers ? l.maxThreadWorkers : l.maxModelWorkers) = read(maxWorkers, kMaxWorkersOption);
  if (!maxTasks.empty())
    l.maxPlanTasks = read(maxTasks, kMaxTasksOption);
  if (!maxEvents.empty())
    l.maxSimEvents = read(maxEvents, kMaxEventsOption);
  setLimits(l);
}

void addFormatOption(CLI::App* app, std::string& format, const std::string& help) {
  app->add_option("--format", format, help);
}

void addEngineOption(CLI::App* app, std::string& engine) {
  app->add_option("--engine", engine, "model (closed form) or sim (simulated Plan); default model");
}

study::Engine engineArg(const std::string& engine) {
  return study::parsePredictingEngine(engine, "--engine");
}

Network networkArg(const std::string& nameOrPath, const std::string& option) {
  return loadNetwork(resolveConfig(ConfigKind::kNetwork, nameOrPath, option));
}

Cluster clusterArg(const std::string& nameOrPath, const std::string& option) {
  return loadCluster(resolveConfig(ConfigKind::kCluster, nameOrPath, option));
}

Cluster withProfile(Cluster cluster, const Network& net, const std::string& profilePath) {
  return study::withProfile(std::move(cluster), net, profilePath, "--profile");
}

OutputFile::OutputFile(const std::string& path, const std::string& option) {
  if (path.empty() || path == "-")
    return;
  file_ = std::make_unique<AtomicFile>(path, option);
}

std::ostream& OutputFile::stream() {
  return file_ ? file_->stream() : std::cout;
}

void OutputFile::close() {
  if (file_)
    file_->commit();
}

ProgressBar::ProgressBar(std::string what)
    : what_(std::move(what)), on_(::isatty(STDERR_FILENO) == 1) {}

void ProgressBar::update(int done, int total) {
  if (!on_ || total <= 0)
    return;
  constexpr int kWidth = 30;
  const int filled = std::clamp(done, 0, total) * kWidth / total;
  if (filled == drawn_ && done < total)
    return;
  drawn_ = filled;
  std::cerr << "\r[" << std::string(size_t(filled), '#')
            << std::string(size_t(kWidth - filled), '.') << "] " << done << "/" << total << " "
            << what_ << std::flush;
  if (done >= total)
    std::cerr << "\n";
}

}  // namespace strata::cli

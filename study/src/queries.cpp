#include "strata/study/queries.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <memory>

#include "strata/model/error.h"
#include "strata/model/estimate.h"
#include "strata/model/profile_loader.h"
#include "strata/model/quantity_text.h"
#include "strata/study/option_text.h"

namespace strata::study {

StepEstimate predict(const Network& network, const Cluster& cluster, const Scenario& scenario,
                     Engine engine, const TrainingRun& run) {
  auto est = evaluate(network, cluster, scenario, engine);
  est.training = priceTrainingRun(run, est);
  if (!est.fitsInMemory) {
    const auto change = smallestFittingChange(network, cluster, scenario);
    est.fitsWith = change ? fmt::format("{}: {} per worker, step {}", change->options,
                                        formatBytes(change->memory), formatSeconds(change->step))
                          : std::string(
                                "no change of --zero, --tp, --sequence-parallel or "
                                "--recompute fits; lower --batch or use a device with "
                                "more memory");
  }
  return est;
}

Cluster withProfile(Cluster cluster, const Network& network, const std::string& profilePath,
                    const std::string& option) {
  if (profilePath.empty())
    return cluster;
  if (!std::filesystem::is_regular_file(profilePath))
    throw OptionError(option, "no such file '" + profilePath + "'");
  cluster.device.profile = std::make_shared<OpProfile>(loadProfile(profilePath, network));
  return cluster;
}

TrainingRun trainingRun(std::optional<double> steps, std::optional<double> epochs,
                        std::optional<double> dataset, const Scenario& scenario,
                        const TrainingRunNames& names) {
  if (steps && epochs)
    throw OptionError(names.steps, "give the run's length once: " + names.steps + " N or " +
                                       names.epochs + " E " + names.dataset + " N, not both");
  if (steps) {
    if (dataset)
      throw OptionError(names.dataset, "goes with " + names.epochs + ", not " + names.steps);
    return trainingRunOfSteps(*steps, names.steps);
  }
  if (epochs && !dataset)
    throw OptionError(names.epochs, "needs " + names.dataset +
                                        " N, the examples in the dataset (an epoch is ceil(N / "
                                        "global batch) steps)");
  if (!epochs && dataset)
    throw OptionError(names.dataset,
                      "needs " + names.epochs + " E (or give the run as " + names.steps + ")");
  if (!epochs)
    return {};
  return trainingRunOfEpochs(*epochs, *dataset, globalBatch(scenario), names.epochs, names.dataset);
}

int psSteps(const std::string& text, const Scenario& sc, const std::string& option,
            const std::string& trainStepsOption) {
  if (text.empty())
    return 0;
  const int steps = parsePositive(text, option);
  if (sc.strategy != Strategy::kPs)
    throw OptionError(option, fmt::format("applies to ps only (steps back to back); {} "
                                          "synchronises every step and plays one (the "
                                          "length of a training run to price is {})",
                                          toString(sc.strategy), trainStepsOption));
  if (steps < 2)
    throw OptionError(option,
                      fmt::format("ps needs at least 2 steps to have a period, got {}", steps));
  return steps;
}

SearchSpace searchSpace(int workers, int globalBatch, int microBatch,
                        const StrategyOptions& options, const std::vector<OptionKey>& given,
                        bool keywordNames) {
  auto name = [&](OptionKey key) {
    return std::string(keywordNames ? optionFileKey(key) : optionFlag(key));
  };
  auto has = [&](OptionKey key) {
    return std::find(given.begin(), given.end(), key) != given.end();
  };
  if (has(OptionKey::kMicrobatches))
    throw OptionError(name(OptionKey::kMicrobatches),
                      fmt::format("search sets the micro-batches of each layout from {} / (dp x "
                                  "b); fix the micro-batch size with {} instead",
                                  keywordNames ? "global_batch" : "--global-batch",
                                  keywordNames ? "batch" : "--batch"));
  SearchSpace space;
  space.workers = workers;
  space.globalBatch = globalBatch;
  space.base = options;
  space.keywordNames = keywordNames;
  if (microBatch > 0)
    space.microBatch = microBatch;
  if (has(OptionKey::kTensorParallel))
    space.tp = options.tp;
  if (has(OptionKey::kPipelineParallel))
    space.pp = options.pp;
  if (has(OptionKey::kZero))
    space.zero = options.zero;
  if (has(OptionKey::kRecompute))
    space.recompute = options.recompute;
  if (has(OptionKey::kSequenceParallel))
    space.sequenceParallel = options.sequenceParallel;
  if (has(OptionKey::kSchedule))
    space.schedule = options.schedule;
  if (has(OptionKey::kVirtualStages))
    space.virtualStages = options.virtualStages;
  // Every option must apply to some layout: ring's, with the dimensions that
  // sequence parallelism, the schedule and virtual stages need (they fix
  // their dimension).
  StrategyOptions widest = options;
  widest.tp = std::max(2, widest.tp);
  widest.pp = std::max(2, widest.pp);
  if (!space.schedule)
    widest.schedule = PipelineSchedule::kInterleaved;
  if (const auto unused = optionUnused(given, {Strategy::kRing}, widest))
    throw OptionError(name(unused->key), unused->why);
  return space;
}

std::vector<StepEstimate> compare(const Experiment& ex, Engine engine,
                                  const std::function<void(size_t, size_t)>& progress) {
  const size_t total = ex.workers.size() * ex.strategies.size();
  std::vector<StepEstimate> rows;
  rows.reserve(total);
  for (int k : ex.workers)
    for (auto s : ex.strategies) {
      try {
        rows.push_back(evaluate(ex.network, ex.cluster,
                                Scenario{s, k, ex.batchPerWorker, ex.options}, engine));
      } catch (const OptionError& e) {
        throwAtExperimentSource(ex, e, k);  // a value from the file: its file:line:key
        throw;
      }
      if (progress)
        progress(rows.size(), total);
    }
  return rows;
}

namespace {

bool sweeps(const Network& network, Strategy strategy) {
  return !isModelParallel(strategy) || network.modelParallelFrom > 0;
}

}  // namespace

size_t sweepSize(const SweepGrid& g) {
  size_t total = 0;
  for (const auto& net : g.networks)
    for (auto s : g.strategies)
      if (sweeps(net, s))
        total += g.clusters.size() * g.batches.size() * g.elements.size() * g.overlaps.size() *
                 g.fcUpdates.size() * g.workers.size();
  return total;
}

std::vector<StepEstimate> sweep(const SweepGrid& g, Engine engine,
                                const std::function<void(size_t, size_t)>& progress) {
  const size_t total = sweepSize(g);
  std::vector<StepEstimate> rows;
  rows.reserve(total);
  for (const auto& net : g.networks)
    for (const auto& cl : g.clusters)
      for (int b : g.batches)
        for (auto el : g.elements)
          for (bool ov : g.overlaps)
            for (auto up : g.fcUpdates)
              for (int k : g.workers)
                for (auto s : g.strategies) {
                  if (!sweeps(net, s))
                    continue;
                  Scenario sc{s, k, b, g.base};
                  sc.options.element = el;
                  sc.options.overlap = ov;
                  sc.options.fcUpdate = up;
                  rows.push_back(evaluate(net, cl, sc, engine));
                  if (progress)
                    progress(rows.size(), total);
                }
  return rows;
}

}  // namespace strata::study

// The questions every front end asks (the CLI's predict and sweep, the Python
// module), answered once here so they give the same numbers: one scenario's
// estimate with its training run and, when it does not fit, the smallest
// change that does; and a grid of configurations.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "strata/model/cluster.h"
#include "strata/model/network.h"
#include "strata/model/presets.h"
#include "strata/model/search.h"
#include "strata/model/strategy.h"
#include "strata/study/engine.h"

namespace strata::study {

// One step estimate of `scenario` (evaluate), with `run` priced over it and,
// when the step does not fit in device memory, `fitsWith` naming the smallest
// change of --zero, --tp, --sequence-parallel or --recompute that fits (or
// what to do when none does).
StepEstimate predict(const Network& network, const Cluster& cluster, const Scenario& scenario,
                     Engine engine, const TrainingRun& run = {});

// `cluster` with a per-op profile of `network` attached when `profilePath` is
// not empty (--profile): compute is then priced from the network's own op
// times. A path that is no file is OptionError(option).
Cluster withProfile(Cluster cluster, const Network& network, const std::string& profilePath,
                    const std::string& option);

// The names of a training run's options in a front end's errors.
struct TrainingRunNames {
  std::string steps = "--steps", epochs = "--epochs", dataset = "--dataset";
};
// The run asked for (none given: no run, steps 0): `steps` optimizer steps,
// or `epochs` over `dataset` examples at `scenario`'s global batch. Throws
// OptionError naming the option: both steps and epochs, epochs without a
// dataset or the other way round, a count that is not a positive finite
// number (steps, dataset: whole) or absurdly large.
TrainingRun trainingRun(std::optional<double> steps, std::optional<double> epochs,
                        std::optional<double> dataset, const Scenario& scenario,
                        const TrainingRunNames& names = {});

// The steps a ps plan plays, from `text` (the option `option`; "" gives 0,
// lowerToPlan's default). The other strategies synchronise every step, so
// their plans are one step: asking them for more is a mistake, not something
// to ignore (the length of a training run to price is `trainStepsOption`).
int psSteps(const std::string& text, const Scenario& scenario, const std::string& option,
            const std::string& trainStepsOption = "--train-steps");

// The layouts `strata search` explores: `workers` workers for one global
// batch, over `options` (the defaults with the options `given` set), each
// dimension given fixed (tp, pp, zero, recompute, sp, schedule, virtual
// stages; `microBatch` > 0 fixes the micro-batch size). Throws OptionError
// for micro-batches (search sets them from the global batch) and for an
// option no layout uses; errors name the CLI's flags, or with `keywordNames`
// the options' file keys.
SearchSpace searchSpace(int workers, int globalBatch, int microBatch,
                        const StrategyOptions& options, const std::vector<OptionKey>& given,
                        bool keywordNames);

// An experiment's strategies x worker counts (strata compare), worker count
// by worker count, `progress(done, total)` after each. A mistake found only
// when a scenario is priced, in a value the experiment's file gave, names the
// file's line and key (throwAtExperimentSource).
std::vector<StepEstimate> compare(const Experiment& experiment, Engine engine,
                                  const std::function<void(size_t, size_t)>& progress = {});

// The configurations of a sweep: every combination of the lists, over the
// options `base`.
struct SweepGrid {
  std::vector<Network> networks;
  std::vector<Cluster> clusters;
  std::vector<Strategy> strategies;
  std::vector<int> workers;
  std::vector<int> batches;
  std::vector<bool> overlaps;
  std::vector<ElementType> elements;
  std::vector<FcUpdate> fcUpdates;
  StrategyOptions base;
};

// The combinations sweep prices: a model-parallel strategy (owt-*) on a
// network without a model-parallel part is left out, not refused.
size_t sweepSize(const SweepGrid& grid);
// Every configuration of `grid`, network by network, then cluster, batch,
// element, overlap, fc update, workers and strategy; `progress(done, total)`
// after each.
std::vector<StepEstimate> sweep(const SweepGrid& grid, Engine engine,
                                const std::function<void(size_t, size_t)>& progress = {});

}  // namespace strata::study

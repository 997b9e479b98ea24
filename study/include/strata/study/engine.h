// The three engines that answer "how long is one step" (DESIGN.md): the
// closed-form model, the simulator playing the strategy's Plan, and the
// executor running it for real. Front ends name an engine by this enum;
// its text exists only where a person types it (--engine) and where an
// output writes it (the "engine" key of every estimate).
#pragma once

#include <string>
#include <string_view>

#include "strata/model/cluster.h"
#include "strata/model/network.h"
#include "strata/model/strategy.h"

namespace strata::study {

enum class Engine { kModel, kSimulator, kExecutor };

// "model", "sim", "executor": the value of an estimate's "engine" key (the
// label each engine writes into StepEstimate::engine).
std::string_view toString(Engine engine);

// An estimate's engine, from the label its engine wrote; "model-profile" (the
// model priced from a per-op profile, validate) is the model. Throws
// InvariantError for a label no engine writes.
Engine engineOf(const StepEstimate& estimate);
// True for a step the executor measured: it has no single-worker reference,
// speedup, bottleneck or memory model, so outputs leave those out.
inline bool isMeasured(const StepEstimate& estimate) {
  return engineOf(estimate) == Engine::kExecutor;
}

// The engines a command can price with (--engine): "model" or "sim"; anything
// else is OptionError(option, "must be model or sim, got '<text>'").
Engine parsePredictingEngine(std::string_view text, const std::string& option);

// One step estimate of `scenario` from a predicting engine: the closed-form
// model, or the simulator playing the strategy's Plan (contention on).
// `engine` must not be kExecutor (a measured step needs a run: validate).
// Throws what the engine throws for a scenario it refuses (UserError,
// OptionError naming the option).
StepEstimate evaluate(const Network& network, const Cluster& cluster, const Scenario& scenario,
                      Engine engine);

}  // namespace strata::study

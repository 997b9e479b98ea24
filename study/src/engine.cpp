#include "strata/study/engine.h"

#include "strata/model/error.h"
#include "strata/model/estimate.h"
#include "strata/sim/simulator.h"

namespace strata::study {

std::string_view toString(Engine engine) {
  switch (engine) {
    case Engine::kModel:
      return "model";
    case Engine::kSimulator:
      return "sim";
    case Engine::kExecutor:
      return "executor";
  }
  return "?";
}

Engine engineOf(const StepEstimate& estimate) {
  const std::string& label = estimate.engine;
  if (label == toString(Engine::kModel) || label == "model-profile")
    return Engine::kModel;
  if (label == toString(Engine::kSimulator))
    return Engine::kSimulator;
  if (label == toString(Engine::kExecutor))
    return Engine::kExecutor;
  throw InvariantError("an estimate with engine '" + label + "', which no engine writes");
}

Engine parsePredictingEngine(std::string_view text, const std::string& option) {
  for (auto engine : {Engine::kModel, Engine::kSimulator})
    if (text == toString(engine))
      return engine;
  throw OptionError(option, "must be model or sim, got '" + std::string(text) + "'");
}

StepEstimate evaluate(const Network& network, const Cluster& cluster, const Scenario& scenario,
                      Engine engine) {
  STRATA_ENFORCE(engine != Engine::kExecutor);
  if (engine == Engine::kSimulator)
    return sim::simulateScenario(network, cluster, scenario, sim::Options{}).estimate;
  return estimate(network, cluster, scenario);
}

}  // namespace strata::study

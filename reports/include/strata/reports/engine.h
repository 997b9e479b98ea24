// One step estimate from the engine a command names: the closed-form model or
// the simulator playing the strategy's Plan (contention on).
#pragma once

#include <string>

#include "strata/model/cluster.h"
#include "strata/model/network.h"
#include "strata/model/strategy.h"

namespace strata::reports {

// `engine` is "model" or "sim"; anything else is OptionError("--engine").
StepEstimate evaluate(const Network& net, const Cluster& cl, const Scenario& sc,
                      const std::string& engine);

}  // namespace strata::reports

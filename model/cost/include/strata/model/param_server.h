#pragma once

// The steady state of the asynchronous parameter server, shared by the closed
// form (cost/src/param_server.cpp), its Plan, the simulator and the executor.

#include <vector>

#include "strata/model/strategy.h"

namespace strata {

// Steps a ps plan plays by default to reach its steady state (every other
// strategy's plan, and ps on one worker, is one step): the steady state needs the first step (no
// pulls to wait for) and a few after it; each step of staleness adds two.
int defaultPlanIterations(const Scenario& scenario);
inline constexpr int kPsSteadySteps = 6;

// The steady-state period of steps back to back from the end of each step's
// compute (the last compute task of any worker): the mean over the second
// half of the steps, so the first steps' start-up is left out and a
// schedule that repeats every few steps gives its mean.
double psPeriod(const std::vector<double>& computeEnd);

}  // namespace strata

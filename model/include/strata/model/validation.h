// Predicted against measured: the error arithmetic of `strata validate`.
#pragma once

#include <string>
#include <vector>

#include "strata/model/strategy.h"

namespace strata {

// (predicted - measured) / measured: +0.05 means 5 % slower than measured.
double relativeError(Seconds predicted, Seconds measured);

// One strategy x K: the executor's measured step against the model's and the
// simulator's predictions of the same scenario.
struct ValidationRow {
  StepEstimate measured;
  StepEstimate model;
  StepEstimate sim;
  // False when the row is outside what the model claims to predict (e.g.
  // more workers than cores with no calibrated sharing entry for them).
  bool withinClaims = true;
  std::string note;

  double modelError() const { return relativeError(model.step, measured.step); }
  double simError() const { return relativeError(sim.step, measured.step); }
};

struct ValidationSummary {
  int rows = 0;
  int rowsWithinClaims = 0;
  // Over the rows within claims, of |error|.
  double medianModelError = 0;
  double worstModelError = 0;
  double medianSimError = 0;
  double worstSimError = 0;
};

ValidationSummary summarize(const std::vector<ValidationRow>& rows);

// Mean over workers of a per-worker figure (compute, communication, exposed).
Seconds meanCompute(const StepEstimate& e);
Seconds meanCommunication(const StepEstimate& e);
Seconds meanExposed(const StepEstimate& e);

}  // namespace strata

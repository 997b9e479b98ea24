#include "strata/model/validation.h"

#include <algorithm>
#include <cmath>

#include "strata/model/error.h"

namespace strata {

double relativeError(Seconds predicted, Seconds measured) {
  STRATA_ENFORCE(measured.value() > 0);
  return (predicted.value() - measured.value()) / measured.value();
}

namespace {
// The median of |values| (the upper one of an even count), 0 when empty.
double medianAbs(std::vector<double> v) {
  if (v.empty())
    return 0;
  for (auto& x : v)
    x = std::fabs(x);
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}
double maxAbs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v)
    m = std::max(m, std::fabs(x));
  return m;
}
template <class F>
Seconds meanOver(const StepEstimate& e, F f) {
  if (e.workers.empty())
    return Seconds(0);
  Seconds s;
  for (const auto& w : e.workers)
    s += f(w);
  return s / double(e.workers.size());
}
}  // namespace

ValidationSummary summarize(const std::vector<ValidationRow>& rows) {
  ValidationSummary s;
  s.rows = static_cast<int>(rows.size());
  std::vector<double> model, sim;
  for (const auto& r : rows) {
    if (!r.withinClaims)
      continue;
    ++s.rowsWithinClaims;
    model.push_back(r.modelError());
    sim.push_back(r.simError());
  }
  s.medianModelError = medianAbs(model);
  s.worstModelError = maxAbs(model);
  s.medianSimError = medianAbs(sim);
  s.worstSimError = maxAbs(sim);
  return s;
}

Seconds meanCompute(const StepEstimate& e) {
  return meanOver(e, [](const WorkerEstimate& w) { return w.compute.total(); });
}
Seconds meanCommunication(const StepEstimate& e) {
  return meanOver(e, [](const WorkerEstimate& w) { return w.communication; });
}
Seconds meanExposed(const StepEstimate& e) {
  return meanOver(e, [](const WorkerEstimate& w) { return w.exposedCommunication; });
}

}  // namespace strata

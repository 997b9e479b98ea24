#include "strata/study/validation.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include "strata/model/error.h"

namespace strata {

double relativeError(Seconds predicted, Seconds measured) {
  STRATA_ENFORCE(measured.value() > 0);
  return (predicted.value() - measured.value()) / measured.value();
}

Seconds medianOf(std::vector<Seconds> v) {
  if (v.empty())
    return Seconds(0);
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2.0;
}

namespace {
// The median of |values| (the mean of the two middle ones of an even count), 0 when empty.
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

Seconds ValidationRow::spreadMin() const {
  if (repeats.empty())
    return measured.step;
  return *std::min_element(repeats.begin(), repeats.end());
}

Seconds ValidationRow::spreadMax() const {
  if (repeats.empty())
    return measured.step;
  return *std::max_element(repeats.begin(), repeats.end());
}

double ValidationRow::spreadFraction() const {
  if (measured.step.value() <= 0)
    return 0;
  const double below = measured.step.value() - spreadMin().value();
  const double above = spreadMax().value() - measured.step.value();
  return std::max(below, above) / measured.step.value();
}

bool ValidationRow::withinSpread(Seconds predicted) const {
  return predicted >= spreadMin() && predicted <= spreadMax();
}

double ValidationRow::rawSpreadFraction() const {
  if (rawRepeats.empty())
    return spreadFraction();
  const double mid = rawStep().value();
  if (mid <= 0)
    return 0;
  const auto [lo, hi] = std::minmax_element(rawRepeats.begin(), rawRepeats.end());
  return std::max(mid - lo->value(), hi->value() - mid) / mid;
}

Seconds ValidationRow::rawStep() const {
  return rawRepeats.empty() ? measured.step : medianOf(rawRepeats);
}

double ValidationRow::measurementError() const {
  const double spread = repeats.size() > 1 ? spreadFraction() : 0.0;
  return std::hypot(spread, 0.5 * referenceSwing);
}

double ValidationRow::explainedShare(double error) const {
  const double e = std::fabs(error);
  const double m = measurementError();
  return e <= m ? 1.0 : m / e;
}

Seconds normalisedStep(Seconds raw, double speed) {
  STRATA_ENFORCE(speed > 0);
  // A machine running at `speed` takes 1 / speed times as long as the
  // calibrated one for the same work.
  return raw * speed;
}

std::vector<int> roundOrder(int n, int round) {
  STRATA_ENFORCE(n >= 0 && round >= 0);
  std::vector<int> order(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i)
    order[static_cast<size_t>(i)] = (i + round) % n;
  return order;
}

std::optional<double> ValidationRow::profileModelError() const {
  if (!profileModel)
    return std::nullopt;
  return relativeError(profileModel->step, measured.step);
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
Seconds meanIdle(const StepEstimate& e) {
  return meanOver(e, [](const WorkerEstimate& w) { return w.idle; });
}
Bytes peakMemory(const StepEstimate& e) {
  Bytes m(0);
  for (const auto& w : e.workers)
    m = std::max(m, w.memory.total());
  return m;
}

std::optional<double> computeError(const StepEstimate& predicted, const StepEstimate& measured) {
  const Seconds compute = meanCompute(measured);
  if (compute.value() <= 0)
    return std::nullopt;
  return relativeError(meanCompute(predicted), compute);
}

Seconds leastCommunication(const StepEstimate& e) {
  if (e.workers.empty())
    return Seconds(0);
  Seconds least = e.workers.front().communication;
  for (const auto& w : e.workers)
    least = min(least, w.communication);
  return least;
}

std::optional<double> communicationError(const StepEstimate& predicted,
                                         const StepEstimate& measured) {
  const Seconds comm = leastCommunication(measured);
  if (comm.value() <= 0 || comm.value() < kNegligibleCommunicationShare * measured.step.value())
    return std::nullopt;
  return relativeError(leastCommunication(predicted), comm);
}

RankingCheck checkRanking(const std::vector<ValidationRow>& rows) {
  // Rows grouped by (network, batch, K), in input order within a group.
  std::map<std::tuple<std::string, int, int>, std::vector<const ValidationRow*>> groups;
  for (const auto& r : rows) {
    const auto& sc = r.measured.scenario;
    groups[{r.measured.network, sc.batchPerWorker, sc.workers}].push_back(&r);
  }
  RankingCheck check;
  for (const auto& entry : groups) {
    // Not a structured binding: clang 14 (the fuzz build) cannot capture one
    // in the lambda below.
    const auto& key = entry.first;
    const auto& group = entry.second;
    for (size_t i = 0; i < group.size(); ++i) {
      for (size_t j = i + 1; j < group.size(); ++j) {
        const ValidationRow* a = group[i];
        const ValidationRow* b = group[j];
        if (a->measured.scenario.strategy == b->measured.scenario.strategy)
          continue;
        const Seconds gap =
            max(a->measured.step - b->measured.step, b->measured.step - a->measured.step);
        const Seconds spreadA = a->spreadMax() - a->spreadMin();
        const Seconds spreadB = b->spreadMax() - b->spreadMin();
        if (!(gap > spreadA && gap > spreadB))
          continue;  // a tie as measured: no order to reproduce
        ++check.measurablePairs;
        if (b->measured.step < a->measured.step)
          std::swap(a, b);  // a: measured faster
        auto pair = [&](const StepEstimate& pa, const StepEstimate& pb) {
          return RankedPair{std::get<0>(key),
                            std::get<1>(key),
                            std::get<2>(key),
                            a->measured.scenario.strategy,
                            b->measured.scenario.strategy,
                            a->measured.step,
                            b->measured.step,
                            pa.step,
                            pb.step};
        };
        if (a->model.step < b->model.step)
          ++check.modelOrdered;
        else
          check.modelMisordered.push_back(pair(a->model, b->model));
        if (a->sim.step < b->sim.step)
          ++check.simOrdered;
        else
          check.simMisordered.push_back(pair(a->sim, b->sim));
      }
    }
  }
  return check;
}

ValidationSummary summarize(const std::vector<ValidationRow>& rows) {
  ValidationSummary s;
  s.rows = static_cast<int>(rows.size());
  for (const auto& r : rows) {
    s.rowsWithinClaims += r.withinClaims ? 1 : 0;
    s.rowsHeldOut += r.withinClaims && r.heldOut() ? 1 : 0;
  }
  s.countedHeldOut = s.rowsHeldOut > 0;
  std::vector<ValidationRow> counted;
  for (const auto& r : rows)
    if (r.withinClaims && (r.heldOut() || !s.countedHeldOut))
      counted.push_back(r);
  s.rowsCounted = static_cast<int>(counted.size());

  std::vector<double> model, sim, profile, modelCompute, simCompute, modelComm, simComm;
  std::vector<double> spread, rawSpread, clock;
  for (const auto& r : counted) {
    model.push_back(r.modelError());
    sim.push_back(r.simError());
    if (auto p = r.profileModelError())
      profile.push_back(*p);
    if (auto c = computeError(r.model, r.measured))
      modelCompute.push_back(*c);
    if (auto c = computeError(r.sim, r.measured))
      simCompute.push_back(*c);
    const auto mc = communicationError(r.model, r.measured);
    const auto sc = communicationError(r.sim, r.measured);
    if (mc && sc) {
      modelComm.push_back(*mc);
      simComm.push_back(*sc);
    }
    s.modelWithinSpread += r.withinSpread(r.model.step) ? 1 : 0;
    s.simWithinSpread += r.withinSpread(r.sim.step) ? 1 : 0;
    if (r.repeats.size() > 1) {
      spread.push_back(r.spreadFraction());
      rawSpread.push_back(r.rawSpreadFraction());
    }
    s.modelExplained += r.explainedShare(r.modelError()) >= 1.0 ? 1 : 0;
    if (r.clockCheck)
      clock.push_back(*r.clockCheck);
  }
  s.rowsWithSpread = static_cast<int>(spread.size());
  s.medianSpread = medianAbs(spread);
  s.medianRawSpread = medianAbs(rawSpread);
  s.rowsClockChecked = static_cast<int>(clock.size());
  s.medianClockCheck = medianAbs(clock);
  s.worstClockCheck = maxAbs(clock);
  s.medianModelError = medianAbs(model);
  s.worstModelError = maxAbs(model);
  s.medianSimError = medianAbs(sim);
  s.worstSimError = maxAbs(sim);
  s.rowsWithProfile = static_cast<int>(profile.size());
  s.medianProfileModelError = medianAbs(profile);
  s.worstProfileModelError = maxAbs(profile);
  s.medianModelComputeError = medianAbs(modelCompute);
  s.medianSimComputeError = medianAbs(simCompute);
  s.rowsWithCommunication = static_cast<int>(modelComm.size());
  s.medianModelCommunicationError = medianAbs(modelComm);
  s.medianSimCommunicationError = medianAbs(simComm);
  s.ranking = checkRanking(counted);
  return s;
}

double othersCores(const CpuSample& before, const CpuSample& after) {
  const double wall = after.wallSeconds - before.wallSeconds;
  if (wall <= 0)
    return 0;
  const double others = (after.machineBusySeconds - before.machineBusySeconds) -
                        (after.selfSeconds - before.selfSeconds);
  return std::max(0.0, others / wall);
}

bool busyBeforeStart(double loadAverage, double othersCoresBefore, int cores) {
  return othersCoresBefore > kBusyOthersCores ||
         loadAverage > kBusyLoadPerCore * std::max(1, cores);
}

}  // namespace strata

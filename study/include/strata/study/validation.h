// Predicted against measured: the error arithmetic of `strata validate`.
//
// DESIGN.md, "Fidelity": a prediction counts only on work the calibration
// never saw (held-out rows); every row gives the measured median and its
// run-to-run spread; a figure inside the spread is a tie, not a win; and the
// strategies must rank as measured wherever the measured gap exceeds the spread.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "strata/model/compute_cost.h"
#include "strata/model/strategy.h"

namespace strata {

// (predicted - measured) / measured: +0.05 means 5 % slower than measured.
double relativeError(Seconds predicted, Seconds measured);

// The median of `values` (the mean of the two middle ones of an even count);
// 0 s when empty.
Seconds medianOf(std::vector<Seconds> values);

// Communication below this share of the measured step is not compared: its
// relative error would be dominated by timer resolution and thread hand-offs
// (tens of microseconds each; docs/validation.md, "What the model misses").
inline constexpr double kNegligibleCommunicationShare = 0.01;

// One network x batch x strategy x K: the executor's measured step (the median
// over repeated runs) against the model's and the simulator's predictions of
// the same scenario.
struct ValidationRow {
  // The run whose step is the median of `repeats` (its per-worker phases are
  // the ones compared); `measured.step` is the median of `repeats`.
  StepEstimate measured;
  // Each executor run's measured step (the median of its steps after the
  // warm-up). Empty means one run: measured.step.
  std::vector<Seconds> repeats;
  StepEstimate model;  // kernel tables of the calibrated cluster (the full prediction)
  StepEstimate sim;
  // The model priced from a per-op profile of this network (model/profile.h):
  // it has seen the network, so its error measures composition only.
  std::optional<StepEstimate> profileModel;
  // False when the row is outside what the model claims to predict (e.g.
  // more workers than cores with no calibrated sharing entry for them).
  bool withinClaims = true;
  // The calibration timed this network's layers (cluster `fitted_on`, or
  // validate --fit-on-network): the row is not held-out.
  bool fittedOnNetwork = false;
  // Other processes' CPU use during this row's runs, in cores; < 0: not measured.
  double othersCores = -1;
  bool busy = false;  // othersCores above kBusyOthersCores
  // The machine's speed while the row ran against its calibration (the
  // reference GEMM and copy re-timed before and after each run, combined by
  // rowSpeed; the run furthest off): -0.2 is 20 % slower. 0 when not measured.
  double speedDrift = 0;
  // The predicted share of the row's compute in memory-bound kernels
  // (memoryBoundShare): the weight of the copy reference in rowSpeed.
  double memoryShare = 0;
  // Drift normalisation (docs/validation.md, "Measurement that cancels
  // drift"): each run's step as the executor timed it, before it was scaled
  // to the calibrated speed (same order as `repeats`, which hold the
  // normalised steps). Empty when no reference was timed (a GPU row): then
  // `repeats` are the raw steps.
  std::vector<Seconds> rawRepeats;
  // The largest change of the row's speed (rowSpeed of the references)
  // across one of its runs, |after - before| / their mean: how much the
  // machine's speed moved while the row ran, which a normalisation by the
  // round's speed cannot undo.
  double referenceSwing = 0;
  // The median run's trace span (first task start to last task end over the
  // workers) against the step the executor timed, minus 1: the step timing
  // checked against a second clock. nullopt where not comparable (ps: its
  // steps overlap, so one step's tasks span more than its period).
  std::optional<double> clockCheck;
  std::string note;

  bool heldOut() const { return !fittedOnNetwork; }
  Seconds spreadMin() const;
  Seconds spreadMax() const;
  // The largest distance of a repeat from the median, as a share of the
  // median: the measurement is median +/- this.
  double spreadFraction() const;
  // True when `predicted` lies within [spreadMin, spreadMax]: a tie with the
  // measurement, neither right nor wrong by more than the machine's noise.
  bool withinSpread(Seconds predicted) const;
  // The raw runs' spread as spreadFraction is of the normalised ones (around
  // the raw median); spreadFraction() when nothing was normalised.
  double rawSpreadFraction() const;
  Seconds rawStep() const;  // the median raw run; measured.step when not normalised
  // How large a relative error the measurement itself could explain: the
  // normalised spread and half the reference's swing, in quadrature.
  double measurementError() const;
  // The share of an |error| the measurement could explain: 1 when |error| is
  // within measurementError(), else measurementError() / |error|.
  double explainedShare(double error) const;

  double modelError() const { return relativeError(model.step, measured.step); }
  double simError() const { return relativeError(sim.step, measured.step); }
  std::optional<double> profileModelError() const;
};

// Mean over workers of a per-worker figure (compute, communication, exposed).
Seconds meanCompute(const StepEstimate& e);
Seconds meanCommunication(const StepEstimate& e);
Seconds meanExposed(const StepEstimate& e);
// Mean idle time over workers: for each worker compute + exposed + idle =
// step, so the three means add up to the step too (the report's bars).
Seconds meanIdle(const StepEstimate& e);
// The largest peak memory over workers.
Bytes peakMemory(const StepEstimate& e);

// The communication of the worker that spent least time communicating. A
// measured transfer lasts from when this worker reaches it until the data has
// moved, so it includes waiting for a peer that arrives later (a straggler's
// compute); the engines price a collective from when all have arrived. The
// worker that arrives last waits least: its time is the comparable one.
Seconds leastCommunication(const StepEstimate& e);

// Per-phase errors of a prediction against the measured run: mean compute
// over workers (nullopt when nothing was measured), and the least
// communication over workers (nullopt when the measured communication is
// below kNegligibleCommunicationShare of the step).
std::optional<double> computeError(const StepEstimate& predicted, const StepEstimate& measured);
std::optional<double> communicationError(const StepEstimate& predicted,
                                         const StepEstimate& measured);

// Two strategies of one (network, batch, K) whose measured medians differ by
// more than both rows' spreads (max - min), in measured order.
struct RankedPair {
  std::string network;
  int batchPerWorker = 0;
  int workers = 0;
  Strategy faster = Strategy::kRing;  // as measured
  Strategy slower = Strategy::kRing;
  Seconds measuredFaster;
  Seconds measuredSlower;
  Seconds predictedFaster;  // by the engine whose ordering failed
  Seconds predictedSlower;
};

struct RankingCheck {
  int measurablePairs = 0;
  int modelOrdered = 0;  // pairs the model orders as measured (a predicted tie is not)
  int simOrdered = 0;
  std::vector<RankedPair> modelMisordered;
  std::vector<RankedPair> simMisordered;
};

// The ranking check over `rows` (callers pass the rows that count): pairs
// whose measured gap is inside either row's spread are ties and not counted.
RankingCheck checkRanking(const std::vector<ValidationRow>& rows);

struct ValidationSummary {
  int rows = 0;
  int rowsWithinClaims = 0;
  int rowsHeldOut = 0;  // within claims and held-out
  // The rows the figures below are over: the held-out rows within claims, or,
  // when there are none, every row within claims (then countedHeldOut is false
  // and the figures are fitted, not predictions). With no row within claims
  // nothing is counted and countedHeldOut is false: no claim is made.
  int rowsCounted = 0;
  bool countedHeldOut = false;
  // Over the counted rows, of |error|.
  double medianModelError = 0;
  double worstModelError = 0;
  double medianSimError = 0;
  double worstSimError = 0;
  int rowsWithProfile = 0;  // counted rows with a profile-based prediction
  double medianProfileModelError = 0;
  double worstProfileModelError = 0;
  // Per phase: median |error| of mean compute and of mean communication (the
  // latter over rowsWithCommunication rows, see communicationError).
  double medianModelComputeError = 0;
  double medianSimComputeError = 0;
  int rowsWithCommunication = 0;
  double medianModelCommunicationError = 0;
  double medianSimCommunicationError = 0;
  // Counted rows whose prediction lies within the measured spread (ties).
  int modelWithinSpread = 0;
  int simWithinSpread = 0;
  // The measurement's own quality over the counted rows with more than one
  // run: median spread after drift normalisation and before it (fractions),
  // and the rows whose model error the measurement could explain whole.
  int rowsWithSpread = 0;
  double medianSpread = 0;
  double medianRawSpread = 0;
  int modelExplained = 0;
  // The step timing against the trace's span (clockCheck), over counted rows
  // where it was checked: median and worst |clockCheck|.
  int rowsClockChecked = 0;
  double medianClockCheck = 0;
  double worstClockCheck = 0;
  RankingCheck ranking;  // over the counted rows
};

ValidationSummary summarize(const std::vector<ValidationRow>& rows);

// ---- machine load ---------------------------------------------------------

// Other processes using more than this many cores during a row (10 % of one
// core: a build or a benchmark, not the kernel's housekeeping) make it busy.
inline constexpr double kBusyOthersCores = 0.10;
// A 1-minute load average above this many runnable tasks per core before the
// start means the machine was busy when validate began (0.5 on 2 cores).
inline constexpr double kBusyLoadPerCore = 0.25;
// The rule by which a measured row leaves the claims (docs/validation.md,
// "Measurement that cancels drift"), besides more workers than the calibrated
// sharing rows cover. Runs are normalised to the calibrated speed by a
// reference GEMM timed before and after each, so a machine uniformly slower
// than at calibration is corrected; what is not:
// - the machine ran more than kMaxSpeedDrift off its calibrated speed in one
//   of the row's runs: too far for a proportional correction to be trusted
//   (a slowdown that large changes how compute and communication overlap);
inline constexpr double kMaxSpeedDrift = 0.25;
// - the reference moved by more than kMaxReferenceSwing across one of the
//   row's runs: the machine changed speed during the run, and its round's
//   speed normalises it by a figure up to that far off. One timing moves by
//   ~2 % on its own (median swing between consecutive timings on the idle
//   2-core VM, 132 rows, 2026-11-26; 5 % there left out 32 rows, most of them
//   for the reference's own noise): 10 % is a real change of speed.
inline constexpr double kMaxReferenceSwing = 0.10;
// rowSpeed (strata/model/compute_cost.h): a row's speed against its
// calibration from the two references' speeds.
// A run's step normalised to the calibrated speed: `raw` measured while the
// machine ran at `speed` (rowSpeed of its round's references).
Seconds normalisedStep(Seconds raw, double speed);
// The order of `n` rows in round `round` (0-based) of an interleaved
// measurement: 0, 1, ..., n-1 rotated left by `round`, so each row runs in
// every position once over n rounds.
std::vector<int> roundOrder(int n, int round);

// CPU time at one instant: the whole machine's busy time (all cores, from
// /proc/stat) and this process's own (getrusage), in seconds.
struct CpuSample {
  double wallSeconds = 0;
  double machineBusySeconds = 0;
  double selfSeconds = 0;
};

// Cores other processes kept busy between two samples: (machine busy - own
// CPU time) / wall time, never below 0.
double othersCores(const CpuSample& before, const CpuSample& after);

// The machine's load around a validation run.
struct LoadReport {
  bool measured = false;  // false where /proc is missing
  int cores = 0;
  double loadAverageBefore = 0;  // 1-minute load average before the start
  double othersCoresBefore = 0;  // other processes' CPU use over a short window before the start
  bool busyBefore = false;
  std::vector<std::string> busyRows;      // rows during which other processes were busy
  std::vector<std::string> driftRows;     // rows measured too far off the calibrated speed
  std::vector<std::string> unsteadyRows;  // rows whose reference swung in a run
  // The reference rate (FLOP/s) the runs are normalised to: re-timed right
  // after calibrating (the same function as every round's), or the 256^3 GEMM
  // of a --cluster file's tables; 0 when nothing is normalised (a GPU).
  double referenceCalibrated = 0;
  // The copy reference's calibrated rate (floats per second: the tables'
  // `copy` at exec::kReferenceCopy); 0 when the tables have no copy row, and
  // then the GEMM alone normalises.
  double referenceCopyCalibrated = 0;
};

// Whether the machine was busy before the start, by either measure.
bool busyBeforeStart(double loadAverage, double othersCoresBefore, int cores);

}  // namespace strata

// `strata validate`'s printer: the table of measured against predicted rows,
// the error figures and the machine's load. JSON and CSV are the schema of
// study/validation_schema.h.
#include <fmt/format.h>

#include "output.h"
#include "strata/model/quantity_text.h"
#include "strata/study/validation_schema.h"
#include "table.h"

namespace strata::cli {

namespace {

std::string rankedPairText(const RankedPair& p) {
  return fmt::format("{} b={} K={}: {} ({}) measured faster than {} ({}), predicted {} vs {}",
                     p.network, p.batchPerWorker, p.workers, toString(p.faster),
                     formatSeconds(p.measuredFaster), toString(p.slower),
                     formatSeconds(p.measuredSlower), formatSeconds(p.predictedFaster),
                     formatSeconds(p.predictedSlower));
}

// "ring (14.2 ms), owt-b (15.1 ms)": the engines whose prediction is a tie.
std::string tiesText(const ValidationRow& r) {
  std::string s;
  auto add = [&](const char* name, Seconds predicted) {
    if (r.withinSpread(predicted))
      s += (s.empty() ? "" : ", ") + std::string(name);
  };
  add("model", r.model.step);
  add("sim", r.sim.step);
  if (r.profileModel)
    add("profile", r.profileModel->step);
  return s;
}

// "a, b, c": the rows a warning names.
std::string joined(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names)
    s += (s.empty() ? "" : ", ") + n;
  return s;
}

// The error, spread and ranking figures over the counted rows.
void printErrorFigures(std::ostream& out, const ValidationSummary& summary,
                       const std::string& which) {
  const auto& rk = summary.ranking;
  out << fmt::format(
      "step time |error| over {} {} rows (kernel tables): model median {:.1f} %, worst {:.1f} %; "
      "simulator median {:.1f} %, worst {:.1f} %\n",
      summary.rowsCounted, which, 100 * summary.medianModelError, 100 * summary.worstModelError,
      100 * summary.medianSimError, 100 * summary.worstSimError);
  if (summary.rowsWithProfile > 0)
    out << fmt::format(
        "composition |error| (profile-based model, has seen each network's ops) over {} rows: "
        "median {:.1f} %, worst {:.1f} %\n",
        summary.rowsWithProfile, 100 * summary.medianProfileModelError,
        100 * summary.worstProfileModelError);
  out << fmt::format("per phase, median |error|: compute model {:.1f} %, sim {:.1f} %; ",
                     100 * summary.medianModelComputeError, 100 * summary.medianSimComputeError);
  if (summary.rowsWithCommunication > 0)
    out << fmt::format("communication ({} rows) model {:.1f} %, sim {:.1f} %\n",
                       summary.rowsWithCommunication, 100 * summary.medianModelCommunicationError,
                       100 * summary.medianSimCommunicationError);
  else
    out << "communication not compared (no row with measurable communication)\n";
  out << fmt::format(
      "within the measured spread (a tie): model {} of {} rows, simulator {} of {}\n",
      summary.modelWithinSpread, summary.rowsCounted, summary.simWithinSpread, summary.rowsCounted);
  if (summary.rowsWithSpread > 0)
    out << fmt::format(
        "measurement: run-to-run spread median ±{:.1f} % after drift normalisation (±{:.1f} % "
        "raw) over {} rows; the measurement's own error covers the model's whole error in {} "
        "of {} rows\n",
        100 * summary.medianSpread, 100 * summary.medianRawSpread, summary.rowsWithSpread,
        summary.modelExplained, summary.rowsCounted);
  if (summary.rowsClockChecked > 0)
    out << fmt::format(
        "step timing against the trace's span: median |difference| {:.2f} %, worst {:.2f} % "
        "over {} rows\n",
        100 * summary.medianClockCheck, 100 * summary.worstClockCheck, summary.rowsClockChecked);
  out << fmt::format(
      "ranking: {} of {} measurable pairs ordered as measured by the model (simulator: {} of "
      "{}); pairs within the spread are ties and not counted\n",
      rk.modelOrdered, rk.measurablePairs, rk.simOrdered, rk.measurablePairs);
  for (const auto& p : rk.modelMisordered)
    out << "  misordered by the model: " << rankedPairText(p) << "\n";
  for (const auto& p : rk.simMisordered)
    out << "  misordered by the simulator: " << rankedPairText(p) << "\n";
}

}  // namespace

void printValidation(std::ostream& out, const std::vector<ValidationRow>& rows,
                     const ValidationSummary& summary, Format format, const LoadReport& load) {
  if (format == Format::kJson) {
    out << study::validationJson(rows, summary, load).dump(2) << "\n";
    return;
  }
  if (format == Format::kCsv) {
    out << study::validationCsv(rows);
    return;
  }

  Table t({"network", "b", "K", "strategy", "measured", "spread (raw)", "meas. error", "model",
           "error", "sim", "error", "profile", "error", "compute error (model / sim)",
           "comm error (model / sim)", "tie", "note"},
          4);
  for (const auto& r : rows) {
    const auto& sc = r.measured.scenario;
    t.add({r.measured.network, std::to_string(sc.batchPerWorker), std::to_string(sc.workers),
           std::string(toString(sc.strategy)), formatSeconds(r.measured.step),
           r.repeats.size() > 1 ? fmt::format("±{:.1f} % (±{:.1f} %)", 100 * r.spreadFraction(),
                                              100 * r.rawSpreadFraction())
                                : "-",
           r.repeats.size() > 1 || r.referenceSwing > 0
               ? fmt::format("±{:.1f} %", 100 * r.measurementError())
               : "-",
           formatSeconds(r.model.step), signedPercent(r.modelError()), formatSeconds(r.sim.step),
           signedPercent(r.simError()), r.profileModel ? formatSeconds(r.profileModel->step) : "-",
           signedPercent(r.profileModelError()),
           signedPercent(computeError(r.model, r.measured)) + " / " +
               signedPercent(computeError(r.sim, r.measured)),
           signedPercent(communicationError(r.model, r.measured)) + " / " +
               signedPercent(communicationError(r.sim, r.measured)),
           tiesText(r), r.withinClaims ? r.note : fmt::format("outside claims: {}", r.note)});
  }
  t.print(out);

  out << "\n";
  const int fitted = summary.rowsWithinClaims - summary.rowsHeldOut;
  const std::string which = summary.countedHeldOut ? "held-out" : "fitted (not held-out)";
  out << fmt::format("rows: {} of {} within claims, {} held-out, {} fitted on their network\n",
                     summary.rowsWithinClaims, summary.rows, summary.rowsHeldOut, fitted);
  if (summary.rowsCounted == 0) {
    out << "no row within claims (see each row's note): no error figures are claimed\n";
  } else {
    if (!summary.countedHeldOut)
      out << "no held-out rows: the calibration timed every network validated here, so the "
             "errors below are fits, not predictions\n";
    printErrorFigures(out, summary, which);
  }
  if (!load.measured) {
    out << "load not measured (no /proc on this system)\n";
    return;
  }
  out << fmt::format(
      "load: 1-minute load average {:.2f} before the start, other processes used {:.2f} cores "
      "(of {})\n",
      load.loadAverageBefore, load.othersCoresBefore, load.cores);
  if (load.busyBefore)
    out << fmt::format(
        "warning: the machine was busy before the start (load average {:.2f}, others {:.2f} "
        "cores); measurements may be skewed\n",
        load.loadAverageBefore, load.othersCoresBefore);
  if (!load.busyRows.empty()) {
    out << fmt::format(
        "warning: other processes used more than {:.2f} cores during {} row(s): {}\n",
        kBusyOthersCores, load.busyRows.size(), joined(load.busyRows));
  }
  if (!load.driftRows.empty()) {
    out << fmt::format(
        "warning: the machine ran more than {:.0f} % off its calibrated speed (a reference GEMM "
        "re-timed around each run) during {} row(s), left out of the summary: {}\n",
        100 * kMaxSpeedDrift, load.driftRows.size(), joined(load.driftRows));
  }
  if (!load.unsteadyRows.empty()) {
    out << fmt::format(
        "warning: the machine's speed moved more than {:.0f} % during a run (the reference GEMM "
        "before and after it) in {} row(s), left out of the summary: {}\n",
        100 * kMaxReferenceSwing, load.unsteadyRows.size(), joined(load.unsteadyRows));
  }
}

}  // namespace strata::cli

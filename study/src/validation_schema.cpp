#include "strata/study/validation_schema.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "strata/model/error.h"
#include "strata/study/csv.h"

namespace strata::study {

using nlohmann::ordered_json;

namespace {

// An optional figure as JSON: the value, or null where it does not apply.
ordered_json orNull(const std::optional<double>& v) {
  return v ? ordered_json(*v) : ordered_json(nullptr);
}

std::string readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

ordered_json rankedPairJson(const RankedPair& p) {
  return {{"network", p.network},
          {"batch_per_worker", p.batchPerWorker},
          {"workers", p.workers},
          {"measured_faster", std::string(toString(p.faster))},
          {"measured_slower", std::string(toString(p.slower))},
          {"measured_faster_step_s", p.measuredFaster.value()},
          {"measured_slower_step_s", p.measuredSlower.value()},
          {"predicted_faster_step_s", p.predictedFaster.value()},
          {"predicted_slower_step_s", p.predictedSlower.value()}};
}

}  // namespace

ordered_json validationJson(const std::vector<ValidationRow>& rows,
                            const ValidationSummary& summary, const LoadReport& load) {
  const auto& rk = summary.ranking;
  auto four = [](const ValidationRow& r, Seconds (*f)(const StepEstimate&)) {
    ordered_json j{{"measured", f(r.measured).value()},
                   {"model", f(r.model).value()},
                   {"sim", f(r.sim).value()}};
    j["profile_model"] = r.profileModel ? ordered_json(f(*r.profileModel).value()) : nullptr;
    return j;
  };
  ordered_json j;
  ordered_json rs = ordered_json::array();
  for (const auto& r : rows) {
    ordered_json repeats = ordered_json::array();
    for (auto t : r.repeats)
      repeats.push_back(t.value());
    const auto profileErr = r.profileModelError();
    ordered_json row;
    row["network"] = r.measured.network;
    row["strategy"] = std::string(toString(r.measured.scenario.strategy));
    row["workers"] = r.measured.scenario.workers;
    row["batch_per_worker"] = r.measured.scenario.batchPerWorker;
    row["tp"] = r.measured.scenario.options.tp;
    row["sequence_parallel"] = r.measured.scenario.options.sequenceParallel;
    row["zero"] = r.measured.scenario.options.zero;
    row["recompute"] = std::string(toString(r.measured.scenario.options.recompute));
    row["step_s"] = four(r, [](const StepEstimate& e) { return e.step; });
    row["repeats_step_s"] = repeats;
    row["spread_s"] = {{"min", r.spreadMin().value()}, {"max", r.spreadMax().value()}};
    row["spread_fraction"] = r.spreadFraction();
    // Before drift normalisation (docs/validation.md): absent figures are
    // the normalised ones when nothing was normalised (a GPU row).
    ordered_json raw = ordered_json::array();
    for (auto t : r.rawRepeats)
      raw.push_back(t.value());
    row["raw_step_s"] = r.rawStep().value();
    row["raw_repeats_step_s"] = r.rawRepeats.empty() ? repeats : raw;
    row["raw_spread_fraction"] = r.rawSpreadFraction();
    row["reference_swing"] = r.referenceSwing;
    row["measurement_error"] = r.measurementError();
    row["model_error_explained"] = r.explainedShare(r.modelError());
    row["clock_check"] = orNull(r.clockCheck);
    row["model_error"] = r.modelError();
    row["sim_error"] = r.simError();
    row["profile_model_error"] = orNull(profileErr);
    row["within_spread"] = {
        {"model", r.withinSpread(r.model.step)},
        {"sim", r.withinSpread(r.sim.step)},
        {"profile_model", r.profileModel ? ordered_json(r.withinSpread(r.profileModel->step))
                                         : ordered_json(nullptr)}};
    row["compute_s"] = four(r, meanCompute);
    row["compute_error"] = {
        {"model", orNull(computeError(r.model, r.measured))},
        {"sim", orNull(computeError(r.sim, r.measured))},
        {"profile_model", r.profileModel ? orNull(computeError(*r.profileModel, r.measured))
                                         : ordered_json(nullptr)}};
    row["communication_s"] = four(r, meanCommunication);
    row["communication_error"] = {{"model", orNull(communicationError(r.model, r.measured))},
                                  {"sim", orNull(communicationError(r.sim, r.measured))}};
    row["exposed_communication_s"] = four(r, meanExposed);
    row["held_out"] = r.heldOut();
    row["fitted_on_network"] = r.fittedOnNetwork;
    row["within_claims"] = r.withinClaims;
    row["busy"] = r.busy;
    row["others_cpu_cores"] = r.othersCores >= 0 ? ordered_json(r.othersCores) : nullptr;
    row["speed_drift"] = r.speedDrift;
    row["memory_share"] = r.memoryShare;
    row["note"] = r.note;
    rs.push_back(std::move(row));
  }
  j["rows"] = rs;
  ordered_json misModel = ordered_json::array(), misSim = ordered_json::array();
  for (const auto& p : rk.modelMisordered)
    misModel.push_back(rankedPairJson(p));
  for (const auto& p : rk.simMisordered)
    misSim.push_back(rankedPairJson(p));
  j["summary"] = {
      {"rows", summary.rows},
      {"rows_within_claims", summary.rowsWithinClaims},
      {"rows_held_out", summary.rowsHeldOut},
      {"rows_counted", summary.rowsCounted},
      {"counted_held_out", summary.countedHeldOut},
      {"median_model_error", summary.medianModelError},
      {"worst_model_error", summary.worstModelError},
      {"median_sim_error", summary.medianSimError},
      {"worst_sim_error", summary.worstSimError},
      {"rows_with_profile", summary.rowsWithProfile},
      {"median_profile_model_error", summary.medianProfileModelError},
      {"worst_profile_model_error", summary.worstProfileModelError},
      {"median_compute_error",
       {{"model", summary.medianModelComputeError}, {"sim", summary.medianSimComputeError}}},
      {"rows_with_communication", summary.rowsWithCommunication},
      {"median_communication_error",
       {{"model", summary.medianModelCommunicationError},
        {"sim", summary.medianSimCommunicationError}}},
      {"within_spread", {{"model", summary.modelWithinSpread}, {"sim", summary.simWithinSpread}}},
      {"rows_with_spread", summary.rowsWithSpread},
      {"spread_median", summary.medianSpread},
      {"raw_spread_median", summary.medianRawSpread},
      {"model_errors_explained", summary.modelExplained},
      {"clock_check",
       {{"rows", summary.rowsClockChecked},
        {"median", summary.medianClockCheck},
        {"worst", summary.worstClockCheck}}},
      {"ranking",
       {{"measurable_pairs", rk.measurablePairs},
        {"model_ordered", rk.modelOrdered},
        {"sim_ordered", rk.simOrdered},
        {"model_misordered", misModel},
        {"sim_misordered", misSim}}}};
  ordered_json busyRows = ordered_json::array(), driftRows = ordered_json::array();
  for (const auto& b : load.busyRows)
    busyRows.push_back(b);
  for (const auto& b : load.driftRows)
    driftRows.push_back(b);
  ordered_json unsteadyRows = ordered_json::array();
  for (const auto& b : load.unsteadyRows)
    unsteadyRows.push_back(b);
  j["load"] = {{"measured", load.measured},
               {"cores", load.cores},
               {"load_average_before",
                load.measured ? ordered_json(load.loadAverageBefore) : ordered_json(nullptr)},
               {"others_cpu_cores_before",
                load.measured ? ordered_json(load.othersCoresBefore) : ordered_json(nullptr)},
               {"busy_before", load.busyBefore},
               {"busy_rows", busyRows},
               {"speed_drift_rows", driftRows},
               {"unsteady_rows", unsteadyRows},
               {"reference_rate_flop_per_s", load.referenceCalibrated > 0
                                                 ? ordered_json(load.referenceCalibrated)
                                                 : ordered_json(nullptr)},
               {"reference_copy_rate_floats_per_s", load.referenceCopyCalibrated > 0
                                                        ? ordered_json(load.referenceCopyCalibrated)
                                                        : ordered_json(nullptr)},
               {"busy", load.busyBefore || !load.busyRows.empty()}};
  return j;
}

std::string validationCsv(const std::vector<ValidationRow>& rows) {
  auto num = [](const std::optional<double>& v) {
    return v ? fmt::format("{:.9g}", *v) : std::string();
  };
  std::string out =
      "network,batch_per_worker,workers,strategy,measured_step_s,spread_min_s,spread_max_s,"
      "spread_fraction,repeats,model_step_s,model_error,sim_step_s,sim_error,"
      "profile_model_step_s,profile_model_error,model_compute_error,sim_compute_error,"
      "model_communication_error,sim_communication_error,model_within_spread,"
      "sim_within_spread,held_out,within_claims,busy,others_cpu_cores,raw_step_s,"
      "raw_spread_fraction,reference_swing,measurement_error,clock_check,note\n";
  for (const auto& r : rows) {
    const auto& sc = r.measured.scenario;
    std::optional<double> profileStep;
    if (r.profileModel)
      profileStep = r.profileModel->step.value();
    out += fmt::format(
        "{},{},{},{},{:.9g},{:.9g},{:.9g},{:.6g},{},{:.9g},{:.6g},{:.9g},{:.6g},{},{},{},"
        "{},{},{},{},{},{},{},{},{},{:.9g},{:.6g},{:.6g},{:.6g},{},{}\n",
        csvField(r.measured.network), sc.batchPerWorker, sc.workers, toString(sc.strategy),
        r.measured.step.value(), r.spreadMin().value(), r.spreadMax().value(), r.spreadFraction(),
        std::max<size_t>(1, r.repeats.size()), r.model.step.value(), r.modelError(),
        r.sim.step.value(), r.simError(), num(profileStep), num(r.profileModelError()),
        num(computeError(r.model, r.measured)), num(computeError(r.sim, r.measured)),
        num(communicationError(r.model, r.measured)), num(communicationError(r.sim, r.measured)),
        r.withinSpread(r.model.step) ? "yes" : "no", r.withinSpread(r.sim.step) ? "yes" : "no",
        r.heldOut() ? "yes" : "no", r.withinClaims ? "yes" : "no", r.busy ? "yes" : "no",
        r.othersCores >= 0 ? fmt::format("{:.3g}", r.othersCores) : "", r.rawStep().value(),
        r.rawSpreadFraction(), r.referenceSwing, r.measurementError(), num(r.clockCheck),
        csvField(r.note));
  }
  return out;
}

std::vector<MeasuredPoint> loadValidationJson(const std::string& path, const std::string& option) {
  if (!std::filesystem::is_regular_file(path))
    throw OptionError(option, "no such file '" + path + "'");
  ordered_json j;
  try {
    j = ordered_json::parse(readFile(path));
  } catch (const nlohmann::json::exception& e) {
    throw OptionError(option, path + ": not JSON (" + std::string(e.what()) +
                                  "): give the output of strata validate --format json");
  }
  if (!j.is_object() || !j.contains("rows") || !j["rows"].is_array())
    throw OptionError(option, path +
                                  ": no \"rows\" array: give the output of strata validate "
                                  "--format json");
  std::vector<MeasuredPoint> out;
  for (size_t i = 0; i < j["rows"].size(); ++i) {
    const auto& r = j["rows"][i];
    const std::string where = fmt::format("{}: rows[{}]", path, i);
    auto need = [&](const ordered_json& parent, const std::string& key,
                    const std::string& at) -> const ordered_json& {
      if (!parent.is_object() || !parent.contains(key))
        throw OptionError(option, fmt::format("{}.{}: missing", at, key));
      return parent[key];
    };
    auto seconds = [&](const ordered_json& parent, const std::string& key, const std::string& at) {
      const auto& v = need(parent, key, at);
      if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < 0)
        throw OptionError(
            option,
            fmt::format("{}.{}: must be a finite time in seconds >= 0, got {}", at, key, v.dump()));
      return Seconds(v.get<double>());
    };
    auto positive = [&](const std::string& key) {
      const auto& v = need(r, key, where);
      if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > (1 << 30))
        throw OptionError(
            option, fmt::format("{}.{}: must be a positive integer, got {}", where, key, v.dump()));
      return int(v.get<int64_t>());
    };
    MeasuredPoint m;
    m.source =
        std::filesystem::path(path).filename().string();  // the full path is in the provenance
    const auto& net = need(r, "network", where);
    const auto& strategy = need(r, "strategy", where);
    if (!net.is_string() || !strategy.is_string())
      throw OptionError(option, where + ": network and strategy must be strings");
    m.network = net.get<std::string>();
    m.strategy = parseStrategy(strategy.get<std::string>(), option + " (" + where + ".strategy)");
    m.workers = positive("workers");
    m.batchPerWorker = positive("batch_per_worker");
    const char* engines[] = {"measured", "model", "sim"};
    for (size_t e = 0; e < 3; ++e) {
      m.step[e] = seconds(need(r, "step_s", where), engines[e], where + ".step_s");
      m.compute[e] = seconds(need(r, "compute_s", where), engines[e], where + ".compute_s");
      m.communication[e] =
          seconds(need(r, "communication_s", where), engines[e], where + ".communication_s");
    }
    auto flag = [&](const std::string& key) {
      const auto& v = need(r, key, where);
      if (!v.is_boolean())
        throw OptionError(
            option, fmt::format("{}.{}: must be true or false, got {}", where, key, v.dump()));
      return v.get<bool>();
    };
    m.heldOut = flag("held_out");
    m.withinClaims = flag("within_claims");
    m.busy = flag("busy");
    const auto& spread = need(r, "spread_s", where);
    m.spreadMin = seconds(spread, "min", where + ".spread_s");
    m.spreadMax = seconds(spread, "max", where + ".spread_s");
    if (m.spreadMin > m.step[0] || m.spreadMax < m.step[0])
      throw OptionError(option, where + ".spread_s: the measured median lies outside [min, max]");
    out.push_back(std::move(m));
  }
  if (out.empty())
    throw OptionError(option, path + ": no rows");
  return out;
}

}  // namespace strata::study

// `strata validate --format json|csv`: measured rows beside the model's, the
// simulator's and the profile-based model's predictions, the summary and the
// machine's load, in the one schema of estimate_schema.h (units in the keys;
// "compute_s" and "communication_s" are means over workers there as here).
// The report reads this JSON back (loadValidationJson): writer and reader of
// one schema, in one place.
#pragma once

#include <array>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "strata/study/validation.h"

namespace strata::study {

// {"rows": [...], "summary": {...}, "load": {...}}.
nlohmann::ordered_json validationJson(const std::vector<ValidationRow>& rows,
                                      const ValidationSummary& summary, const LoadReport& load);

// The CSV: a header line, then one line per row (each ends in a newline).
std::string validationCsv(const std::vector<ValidationRow>& rows);

// One measured row of `strata validate --format json`: the executor's median
// step and spread beside the model's and the simulator's predictions.
struct MeasuredPoint {
  std::string source;  // the name of the file it was read from
  std::string network;
  Strategy strategy = Strategy::kRing;
  int workers = 1;
  int batchPerWorker = 1;
  // Index 0 measured, 1 model, 2 simulator.
  std::array<Seconds, 3> step, compute, communication;
  Seconds spreadMin, spreadMax;  // the measured repeats' range
  // As validate judged the row: held out of calibration, within what the
  // model claims (both: a prediction that counts), run on a busy machine.
  bool heldOut = true;
  bool withinClaims = true;
  bool busy = false;
};

// Reads every row of a `strata validate --format json` output. Throws
// UserError naming `option`, the file and the key when it is not one.
std::vector<MeasuredPoint> loadValidationJson(const std::string& path, const std::string& option);

}  // namespace strata::study

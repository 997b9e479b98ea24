// `strata validate --format json|csv`: measured rows beside the model's, the
// simulator's and the profile-based model's predictions, the summary and the
// machine's load, in the one schema of estimate_schema.h (units in the keys;
// "compute_s" and "communication_s" are means over workers there as here).
// The report reads this JSON back (reports::loadValidationJson).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "strata/model/validation.h"

namespace strata::study {

// {"rows": [...], "summary": {...}, "load": {...}}.
nlohmann::ordered_json validationJson(const std::vector<ValidationRow>& rows,
                                      const ValidationSummary& summary, const LoadReport& load);

// The CSV: a header line, then one line per row (each ends in a newline).
std::string validationCsv(const std::vector<ValidationRow>& rows);

}  // namespace strata::study

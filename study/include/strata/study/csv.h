// CSV as every CSV strata writes it (`--format csv`, the report's data/*.csv):
// RFC 4180 quoting, one cell per value of a flat JSON row.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace strata::study {

// One CSV field: as is, or double-quoted with quotes doubled when it holds a
// comma, a quote or a newline.
std::string csvField(const std::string& text);

// One cell for a JSON value: text as csvField, true/false as yes/no, a
// floating-point number to 9 significant digits, an integer as is, null as an
// empty cell (a quantity that does not apply), anything else as its JSON text.
std::string csvCell(const nlohmann::ordered_json& value);

// The header line of a flat JSON object (its keys, in order) and the line of
// its values (csvCell each); neither ends in a newline.
std::string csvHeader(const nlohmann::ordered_json& row);
std::string csvLine(const nlohmann::ordered_json& row);

}  // namespace strata::study

#include "strata/study/csv.h"

#include <fmt/format.h>

namespace strata::study {

std::string csvField(const std::string& text) {
  if (text.find_first_of(",\"\n") == std::string::npos)
    return text;
  std::string out = "\"";
  for (char c : text)
    out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

std::string csvCell(const nlohmann::ordered_json& v) {
  if (v.is_string())
    return csvField(v.get<std::string>());
  if (v.is_boolean())
    return v.get<bool>() ? "yes" : "no";
  if (v.is_number_float())
    return fmt::format("{:.9g}", v.get<double>());
  if (v.is_null())
    return "";
  return v.dump();
}

std::string csvHeader(const nlohmann::ordered_json& row) {
  std::string out;
  for (const auto& [key, v] : row.items()) {
    if (!out.empty())
      out += ',';  // appends: GCC 12 warns (-Wrestrict) on "," + s
    out += csvField(key);
  }
  return out;
}

std::string csvLine(const nlohmann::ordered_json& row) {
  std::string out;
  bool first = true;
  for (const auto& [key, v] : row.items()) {
    if (!first)
      out += ',';
    out += csvCell(v);
    first = false;
  }
  return out;
}

}  // namespace strata::study

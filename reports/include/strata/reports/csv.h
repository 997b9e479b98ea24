// One CSV field (RFC 4180): as is, or double-quoted with quotes doubled when
// it holds a comma, a quote or a newline. Shared by the CLI's CSV output and
// the report's data files.
#pragma once

#include <string>

namespace strata::reports {

inline std::string csvField(const std::string& text) {
  if (text.find_first_of(",\"\n") == std::string::npos)
    return text;
  std::string out = "\"";
  for (char c : text)
    out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

}  // namespace strata::reports

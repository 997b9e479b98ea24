// The cells of one CSV line as strata writes CSV (RFC 4180 quoting; a
// trailing newline ignored), for tests that read CSV back.
#pragma once

#include <string>
#include <vector>

inline std::vector<std::string> csvCells(std::string line) {
  if (!line.empty() && line.back() == '\n')
    line.pop_back();
  std::vector<std::string> out;
  std::string cell;
  bool quoted = false;
  for (char c : line) {
    if (c == '"')
      quoted = !quoted;
    else if (c == ',' && !quoted) {
      out.push_back(cell);
      cell.clear();
    } else
      cell += c;
  }
  out.push_back(cell);
  return out;
}

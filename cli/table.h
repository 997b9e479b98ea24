// What the CLI's tables share: a plain text table and the few ways a number
// is written for people (counts with separators, percentages).
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace strata::cli {

// A plain text table: left-aligned first columns, right-aligned numbers.
class Table {
 public:
  explicit Table(std::vector<std::string> header, size_t leftColumns = 1)
      : header_(std::move(header)), left_(leftColumns) {}
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  void print(std::ostream& out) const {
    std::vector<size_t> width(header_.size(), 0);
    auto measure = [&](const std::vector<std::string>& r) {
      for (size_t i = 0; i < r.size(); ++i)
        width[i] = std::max(width[i], r[i].size());
    };
    measure(header_);
    for (const auto& r : rows_)
      measure(r);
    auto line = [&](const std::vector<std::string>& r) {
      std::string s;
      for (size_t i = 0; i < r.size(); ++i) {
        if (i)
          s += "  ";
        s += i < left_ ? fmt::format("{:<{}}", r[i], width[i])
                       : fmt::format("{:>{}}", r[i], width[i]);
      }
      while (!s.empty() && s.back() == ' ')
        s.pop_back();
      out << s << "\n";
    };
    line(header_);
    std::string rule;
    for (size_t i = 0; i < width.size(); ++i)
      rule += (i ? "  " : "") + std::string(width[i], '-');
    out << rule << "\n";
    for (const auto& r : rows_)
      line(r);
  }

 private:
  std::vector<std::string> header_;
  size_t left_;
  std::vector<std::vector<std::string>> rows_;
};

// 61100840 -> "61,100,840".
std::string count(double n);
// 0.123 -> "12.3 %".
std::string percent(double fraction);
// 0.05 -> "+5.0 %"; nullopt -> "-".
std::string signedPercent(double fraction);
std::string signedPercent(const std::optional<double>& fraction);

}  // namespace strata::cli

#include "table.h"

namespace strata::cli {

std::string count(double n) {
  std::string digits = fmt::format("{:.0f}", n);
  std::string out;
  const size_t start = digits[0] == '-' ? 1 : 0;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > start && (digits.size() - i) % 3 == 0)
      out += ',';
    out += digits[i];
  }
  return out;
}

std::string percent(double fraction) {
  return fmt::format("{:.1f} %", 100 * fraction);
}

std::string signedPercent(double fraction) {
  return fmt::format("{:+.1f} %", 100 * fraction);
}
std::string signedPercent(const std::optional<double>& fraction) {
  return fraction ? signedPercent(*fraction) : "-";
}

}  // namespace strata::cli

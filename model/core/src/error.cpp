#include "strata/model/error.h"

namespace strata {

namespace {
std::string formatConfigError(const std::string& file, int line, const std::string& key,
                              const std::string& message) {
  std::ostringstream out;
  out << file;
  if (line > 0)
    out << ":" << line;
  out << ": ";
  if (!key.empty())
    out << key << ": ";
  out << message;
  return out.str();
}
}  // namespace

ConfigError::ConfigError(std::string file, int line, std::string key, const std::string& message)
    : UserError(formatConfigError(file, line, key, message)),
      file_(std::move(file)),
      line_(line),
      key_(std::move(key)) {}

namespace detail {
void enforceFailed(const char* file, int line, const char* expr) {
  throw InvariantError(std::string(file) + ":" + std::to_string(line) + ": STRATA_ENFORCE(" + expr +
                       ") failed");
}
}  // namespace detail

}  // namespace strata

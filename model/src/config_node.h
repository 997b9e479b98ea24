// A YAML node that knows where it came from (file, line, key path), so every
// mistake in a config is reported as "file:line: key: message".
//
// Internal to model/: public headers never include yaml-cpp.
#pragma once

#include <yaml-cpp/yaml.h>

#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "strata/model/error.h"
#include "strata/model/quantity_text.h"
#include "strata/model/units.h"

namespace strata {

class ConfigNode {
 public:
  ConfigNode(YAML::Node node, std::shared_ptr<const std::string> file, std::string path, int line);

  // Parses a whole file; a syntax error becomes a ConfigError with its line.
  static ConfigNode loadFile(const std::string& path);

  const std::string& file() const { return *file_; }
  const std::string& path() const { return path_; }
  int line() const { return line_; }

  // Throws ConfigError at this node.
  [[noreturn]] void fail(const std::string& message) const;

  bool isMap() const { return node_.IsMap(); }
  bool isSequence() const { return node_.IsSequence(); }
  bool isScalar() const { return node_.IsScalar(); }

  // Map access. require() fails when the key is missing; get() returns nullopt.
  bool has(std::string_view key) const;
  ConfigNode require(std::string_view key) const;
  std::optional<ConfigNode> get(std::string_view key) const;
  // Fails naming the first key that is not in `allowed` (typos are errors).
  void allowOnly(std::initializer_list<std::string_view> allowed) const;
  // (key, value) pairs of a map, in file order.
  std::vector<std::pair<std::string, ConfigNode>> entries() const;

  // Sequence access (a scalar is read as a one-element sequence when
  // `scalarAsList` is true).
  std::vector<ConfigNode> items(bool scalarAsList = false) const;

  std::string asString() const;
  bool asBool() const;
  double asDouble() const;
  int asPositiveInt() const;
  int asNonNegativeInt() const;
  double asPositiveDouble() const;
  // A fraction in (0, 1].
  double asFraction() const;
  // Quantities with optional units; must be > 0 unless allowZero.
  double asQuantity(QuantityKind kind, bool allowZero) const;
  Seconds asSeconds(bool allowZero = true) const;
  Bytes asBytes(bool allowZero = false) const;
  BytesPerSecond asBandwidth() const;
  FlopsPerSecond asFlopRate() const;

  // Convenience: optional values with defaults.
  int positiveIntOr(std::string_view key, int fallback) const;
  int nonNegativeIntOr(std::string_view key, int fallback) const;
  bool boolOr(std::string_view key, bool fallback) const;
  std::string stringOr(std::string_view key, std::string fallback) const;

 private:
  ConfigNode child(YAML::Node node, std::string childPath) const;
  // yaml-cpp keeps the first of two equal keys; strata rejects the second.
  void checkDuplicateKeys() const;
  std::string scalarText() const;
  int asIntAtLeast(int minimum, const char* what) const;

  YAML::Node node_;
  std::shared_ptr<const std::string> file_;
  std::string path_;
  int line_;
};

}  // namespace strata

// A YAML node that knows where it came from (file, line, key path), so every
// mistake in a config is reported as "file:line: key: message".
//
// Internal to model/: public headers never include yaml-cpp.
#pragma once

#include <yaml-cpp/yaml.h>

#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
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

  // "file:line: key", as fail() names this node (for errors raised later,
  // once the value is in use).
  std::string where() const;
  // Throws ConfigError at this node.
  [[noreturn]] void fail(const std::string& message) const;
  std::string keyOf(const YAML::Node& key) const;

  bool isMap() const { return node_.IsMap(); }
  bool isSequence() const { return node_.IsSequence(); }
  bool isScalar() const { return node_.IsScalar(); }

  // Map access. require() fails when the key is missing; get() returns nullopt.
  // Both fail when the key is present without a value (`pad:`, `rate: ~`): an
  // empty value is a mistake, never a request for the default.
  bool has(std::string_view key) const;
  ConfigNode require(std::string_view key) const;
  std::optional<ConfigNode> get(std::string_view key) const;
  // As get(), but a present null (JSON's `null`, Hugging Face's "use the
  // default") is nullopt too: for formats where null means the default.
  std::optional<ConfigNode> getUnlessNull(std::string_view key) const;
  // Fails naming the first key that is not in `allowed` (typos are errors).
  void allowOnly(std::initializer_list<std::string_view> allowed) const;
  void allowOnly(std::span<const std::string_view> allowed) const;
  // (key, value) pairs of a map, in file order.
  std::vector<std::pair<std::string, ConfigNode>> entries() const;

  // Sequence access (a scalar is read as a one-element sequence when
  // `scalarAsList` is true).
  std::vector<ConfigNode> items(bool scalarAsList = false) const;

  std::string asString() const;
  bool asBool() const;
  // A finite, normal (not denormal) number.
  double asDouble() const;
  int asPositiveInt() const;
  int asNonNegativeInt() const;
  // asDouble() in [minimum, maximum]; `why` says where the bounds come from.
  double asDoubleIn(double minimum, double maximum, const char* why) const;
  // A fraction of a peak in [kMinFraction, 1] (efficiencies).
  double asFraction() const;
  // Quantities with units (quantity_text.h: a unit is required unless `rule`
  // says the key's name implies it; finite; in the kind's physical range);
  // must be > 0 unless allowZero. Errors name the accepted units.
  double asQuantity(QuantityKind kind, bool allowZero, UnitRule rule = UnitRule::kRequired) const;
  Seconds asSeconds(bool allowZero = true) const;
  Bytes asBytes(bool allowZero = false, UnitRule rule = UnitRule::kRequired) const;
  BytesPerSecond asBandwidth() const;
  FlopsPerSecond asFlopRate() const;

  // The smallest efficiency accepted: a millionth of the peak (below it one
  // layer of a small network takes hours; it is a typo, not a measurement).
  static constexpr double kMinFraction = 1e-6;

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
  // Fails with "has no value" when the node is null (`key:` or `key: ~`).
  void requireValue() const;
  int asIntAtLeast(int minimum, const char* what) const;

  YAML::Node node_;
  std::shared_ptr<const std::string> file_;
  std::string path_;
  int line_;
};

}  // namespace strata

#include "config_node.h"

#include <fmt/format.h>

#include <cfloat>
#include <charconv>
#include <cmath>
#include <fstream>
#include <sstream>

namespace strata {

namespace {
int lineOf(const YAML::Node& node, int fallback) {
  const auto mark = node.Mark();
  return mark.line >= 0 ? mark.line + 1 : fallback;
}
}  // namespace

std::string ConfigNode::keyOf(const YAML::Node& key) const {
  // A key must be a plain name: `[a, b]: 1`, `{a: 1}: 2`, `? - x` and an empty
  // key are YAML, but name nothing strata reads.
  if (!key.IsScalar())
    throw ConfigError(*file_, lineOf(key, line_), path_,
                      "a key must be a plain name, not a list, a map or empty");
  return key.Scalar();
}

ConfigNode::ConfigNode(YAML::Node node, std::shared_ptr<const std::string> file, std::string path,
                       int line)
    : node_(std::move(node)), file_(std::move(file)), path_(std::move(path)), line_(line) {}

ConfigNode ConfigNode::loadFile(const std::string& path) {
  auto file = std::make_shared<const std::string>(path);
  std::ifstream in(path);
  if (!in)
    throw ConfigError(path, 0, "", "cannot open file");
  std::stringstream buffer;
  buffer << in.rdbuf();
  YAML::Node root;
  try {
    root = YAML::Load(buffer.str());
  } catch (const YAML::Exception& e) {
    throw ConfigError(path, e.mark.line >= 0 ? e.mark.line + 1 : 0, "",
                      "YAML syntax error: " + e.msg);
  }
  if (!root.IsMap())
    throw ConfigError(path, 1, "", "the file must be a YAML map of keys");
  return ConfigNode(root, file, "", 1);
}

std::string ConfigNode::where() const {
  // ConfigError's own format, message left out.
  const std::string text = ConfigError(*file_, line_, path_, "").what();
  return text.substr(0, text.size() - 2);
}

void ConfigNode::fail(const std::string& message) const {
  throw ConfigError(*file_, line_, path_, message);
}

ConfigNode ConfigNode::child(YAML::Node node, std::string childPath) const {
  const int line = lineOf(node, line_);
  return ConfigNode(std::move(node), file_, std::move(childPath), line);
}

bool ConfigNode::has(std::string_view key) const {
  if (!node_.IsMap())
    return false;
  return static_cast<bool>(node_[std::string(key)]);
}

void ConfigNode::requireValue() const {
  if (!node_.IsDefined() || node_.IsNull())
    fail("has no value (write one, or leave the key out for its default)");
}

std::optional<ConfigNode> ConfigNode::get(std::string_view key) const {
  requireValue();
  if (!node_.IsMap())
    fail("expected a map of keys");
  const std::string k(key);
  YAML::Node n = node_[k];
  if (!n)
    return std::nullopt;
  // Present but empty (`pad:`, `rate: ~`): an error, never the default. The
  // line is the key's (yaml-cpp gives a null value no position).
  auto c = child(n, path_.empty() ? k : path_ + "." + k);
  if (n.IsNull()) {
    for (const auto& kv : node_)
      if (keyOf(kv.first) == k)
        c = ConfigNode(n, file_, c.path(), lineOf(kv.first, line_));
    c.requireValue();
  }
  return c;
}

std::optional<ConfigNode> ConfigNode::getUnlessNull(std::string_view key) const {
  requireValue();
  if (!node_.IsMap())
    fail("expected a map of keys");
  const YAML::Node n = node_[std::string(key)];
  if (!n || n.IsNull())
    return std::nullopt;
  return get(key);
}

ConfigNode ConfigNode::require(std::string_view key) const {
  auto n = get(key);
  if (!n) {
    const std::string k(key);
    throw ConfigError(*file_, line_, path_.empty() ? k : path_ + "." + k, "missing required key");
  }
  return *n;
}

void ConfigNode::checkDuplicateKeys() const {
  std::vector<std::string> seen;
  for (const auto& kv : node_) {
    const std::string key = keyOf(kv.first);
    for (const auto& s : seen)
      if (s == key)
        throw ConfigError(*file_, lineOf(kv.first, line_), path_.empty() ? key : path_ + "." + key,
                          "duplicate key (each key may appear once)");
    seen.push_back(key);
  }
}

void ConfigNode::allowOnly(std::initializer_list<std::string_view> allowed) const {
  allowOnly(std::span<const std::string_view>(allowed.begin(), allowed.size()));
}

void ConfigNode::allowOnly(std::span<const std::string_view> allowed) const {
  requireValue();
  if (!node_.IsMap())
    fail("expected a map of keys");
  checkDuplicateKeys();
  for (const auto& kv : node_) {
    const std::string key = keyOf(kv.first);
    bool ok = false;
    for (auto a : allowed)
      ok = ok || a == key;
    if (!ok) {
      std::string list;
      for (auto a : allowed)
        list += (list.empty() ? "" : ", ") + std::string(a);
      throw ConfigError(*file_, lineOf(kv.first, line_), path_.empty() ? key : path_ + "." + key,
                        "unknown key (expected one of: " + list + ")");
    }
  }
}

std::vector<std::pair<std::string, ConfigNode>> ConfigNode::entries() const {
  requireValue();
  if (!node_.IsMap())
    fail("expected a map of keys");
  checkDuplicateKeys();
  std::vector<std::pair<std::string, ConfigNode>> out;
  for (const auto& kv : node_) {
    const std::string key = keyOf(kv.first);
    const std::string childPath = path_.empty() ? key : path_ + "." + key;
    // A null value has no position of its own: it is on its key's line.
    out.emplace_back(key, kv.second.IsNull()
                              ? ConfigNode(kv.second, file_, childPath, lineOf(kv.first, line_))
                              : child(kv.second, childPath));
  }
  return out;
}

std::vector<ConfigNode> ConfigNode::items(bool scalarAsList) const {
  requireValue();
  std::vector<ConfigNode> out;
  if (scalarAsList && node_.IsScalar()) {
    out.push_back(*this);
    return out;
  }
  if (!node_.IsSequence())
    fail("expected a list");
  for (size_t i = 0; i < node_.size(); ++i)
    out.push_back(child(node_[i], path_ + "[" + std::to_string(i) + "]"));
  return out;
}

std::string ConfigNode::scalarText() const {
  requireValue();
  if (!node_.IsScalar())
    fail("expected a single value");
  return node_.Scalar();
}

std::string ConfigNode::asString() const {
  auto s = scalarText();
  if (s.empty())
    fail("must not be empty");
  return s;
}

bool ConfigNode::asBool() const {
  const auto s = scalarText();
  if (s == "true" || s == "on" || s == "yes")
    return true;
  if (s == "false" || s == "off" || s == "no")
    return false;
  fail("must be true or false, got '" + s + "'");
}

double ConfigNode::asDouble() const {
  const auto s = scalarText();
  double v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec == std::errc::result_out_of_range)
    fail("is out of range (too large or too small for a number), got '" + s + "'");
  if (ec != std::errc() || ptr != s.data() + s.size())
    fail("must be a number, got '" + s + "'");
  if (!std::isfinite(v))
    fail("must be a finite number, got '" + s + "'");
  if (std::fpclassify(v) == FP_SUBNORMAL)
    fail("is too small to compute with (a denormal number), got '" + s + "'");
  return v == 0 ? 0.0 : v;
}

int ConfigNode::asIntAtLeast(int minimum, const char* what) const {
  const auto s = scalarText();
  long long v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  // Counts of layers, devices, examples: a billion is beyond any real one, and
  // products of them are checked (checked.h).
  constexpr long long kMaxInt = 1'000'000'000;
  const bool digits = ptr == s.data() + s.size() && !s.empty();
  if (digits && (ec == std::errc::result_out_of_range || (ec == std::errc() && v > kMaxInt)))
    fail(fmt::format("is too large: at most {}, got {}", kMaxInt, s));
  if (ec != std::errc() || !digits)
    fail(std::string("must be ") + what + ", got '" + s + "'");
  if (v < minimum)
    fail(std::string("must be ") + what + ", got " + s);
  return static_cast<int>(v);
}

int ConfigNode::asNonNegativeInt() const {
  return asIntAtLeast(0, "a non-negative integer");
}
int ConfigNode::asPositiveInt() const {
  return asIntAtLeast(1, "a positive integer");
}

double ConfigNode::asDoubleIn(double minimum, double maximum, const char* why) const {
  const double v = asDouble();
  if (v < minimum || v > maximum)
    fail(fmt::format("must be in [{:g}, {:g}] ({}), got {}", minimum, maximum, why, scalarText()));
  return v;
}

double ConfigNode::asFraction() const {
  const double v = asDouble();
  if (v <= 0 || v > 1)
    fail("must be a fraction in (0, 1], got " + scalarText());
  if (v < kMinFraction)
    fail(
        fmt::format("is below {:g}, a millionth of the peak: not a measurement (check the "
                    "number), got {}",
                    kMinFraction, scalarText()));
  return v;
}

double ConfigNode::asQuantity(QuantityKind kind, bool allowZero, UnitRule rule) const {
  const auto s = scalarText();
  const auto r = readQuantity(s, kind, rule);
  if (!r.value)
    fail(r.error + ", got '" + s + "'");
  if (!allowZero && *r.value == 0)
    fail("must be positive, got '" + s + "'");
  return *r.value;
}

Seconds ConfigNode::asSeconds(bool allowZero) const {
  return Seconds(asQuantity(QuantityKind::kTime, allowZero));
}
Bytes ConfigNode::asBytes(bool allowZero, UnitRule rule) const {
  return Bytes(asQuantity(QuantityKind::kBytes, allowZero, rule));
}
BytesPerSecond ConfigNode::asBandwidth() const {
  return BytesPerSecond(asQuantity(QuantityKind::kBandwidth, false));
}
FlopsPerSecond ConfigNode::asFlopRate() const {
  return FlopsPerSecond(asQuantity(QuantityKind::kFlopRate, false));
}

int ConfigNode::positiveIntOr(std::string_view key, int fallback) const {
  auto n = get(key);
  return n ? n->asPositiveInt() : fallback;
}
int ConfigNode::nonNegativeIntOr(std::string_view key, int fallback) const {
  auto n = get(key);
  return n ? n->asNonNegativeInt() : fallback;
}
bool ConfigNode::boolOr(std::string_view key, bool fallback) const {
  auto n = get(key);
  return n ? n->asBool() : fallback;
}
std::string ConfigNode::stringOr(std::string_view key, std::string fallback) const {
  auto n = get(key);
  return n ? n->asString() : fallback;
}

}  // namespace strata

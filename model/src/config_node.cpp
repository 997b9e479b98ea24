#include "config_node.h"

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

std::optional<ConfigNode> ConfigNode::get(std::string_view key) const {
  if (!node_.IsMap())
    fail("expected a map of keys");
  const std::string k(key);
  YAML::Node n = node_[k];
  if (!n || n.IsNull())
    return std::nullopt;
  return child(n, path_.empty() ? k : path_ + "." + k);
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
    const std::string key = kv.first.as<std::string>();
    for (const auto& s : seen)
      if (s == key)
        throw ConfigError(*file_, lineOf(kv.first, line_), path_.empty() ? key : path_ + "." + key,
                          "duplicate key (each key may appear once)");
    seen.push_back(key);
  }
}

void ConfigNode::allowOnly(std::initializer_list<std::string_view> allowed) const {
  if (!node_.IsMap())
    fail("expected a map of keys");
  checkDuplicateKeys();
  for (const auto& kv : node_) {
    const std::string key = kv.first.as<std::string>();
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
  if (!node_.IsMap())
    fail("expected a map of keys");
  checkDuplicateKeys();
  std::vector<std::pair<std::string, ConfigNode>> out;
  for (const auto& kv : node_) {
    const std::string key = kv.first.as<std::string>();
    out.emplace_back(key, child(kv.second, path_.empty() ? key : path_ + "." + key));
  }
  return out;
}

std::vector<ConfigNode> ConfigNode::items(bool scalarAsList) const {
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
  if (ec != std::errc() || ptr != s.data() + s.size() || !std::isfinite(v))
    fail("must be a number, got '" + s + "'");
  return v;
}

int ConfigNode::asIntAtLeast(int minimum, const char* what) const {
  const auto s = scalarText();
  long long v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || ptr != s.data() + s.size())
    fail(std::string("must be ") + what + ", got '" + s + "'");
  if (v < minimum)
    fail(std::string("must be ") + what + ", got " + s);
  if (v > 1'000'000'000)
    fail("is too large, got " + s);
  return static_cast<int>(v);
}

int ConfigNode::asNonNegativeInt() const {
  return asIntAtLeast(0, "a non-negative integer");
}
int ConfigNode::asPositiveInt() const {
  return asIntAtLeast(1, "a positive integer");
}

double ConfigNode::asPositiveDouble() const {
  const double v = asDouble();
  if (v <= 0)
    fail("must be positive, got " + scalarText());
  return v;
}

double ConfigNode::asFraction() const {
  const double v = asDouble();
  if (v <= 0 || v > 1)
    fail("must be a fraction in (0, 1], got " + scalarText());
  return v;
}

double ConfigNode::asQuantity(QuantityKind kind, bool allowZero) const {
  const auto s = scalarText();
  const auto v = parseQuantity(s, kind);
  if (!v)
    fail("cannot read '" + s + "' (a number, optionally with a unit: " + acceptedUnits(kind) + ")");
  if (*v < 0 || (!allowZero && *v == 0))
    fail(std::string("must be ") + (allowZero ? "non-negative" : "positive") + ", got '" + s + "'");
  return *v;
}

Seconds ConfigNode::asSeconds(bool allowZero) const {
  return Seconds(asQuantity(QuantityKind::kTime, allowZero));
}
Bytes ConfigNode::asBytes(bool allowZero) const {
  return Bytes(asQuantity(QuantityKind::kBytes, allowZero));
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

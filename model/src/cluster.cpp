#include "strata/model/cluster.h"

#include <filesystem>

#include "config_node.h"
#include "strata/model/error.h"

namespace strata {

std::string_view toString(ElementType type) {
  switch (type) {
    case ElementType::kFp32:
      return "fp32";
    case ElementType::kFp16:
      return "fp16";
    case ElementType::kBf16:
      return "bf16";
  }
  return "?";
}

double elementBytes(ElementType type) {
  return type == ElementType::kFp32 ? 4.0 : 2.0;
}

ElementType parseElementType(std::string_view text, const std::string& option) {
  if (text == "fp32")
    return ElementType::kFp32;
  if (text == "fp16")
    return ElementType::kFp16;
  if (text == "bf16")
    return ElementType::kBf16;
  throw OptionError(
      option, "unknown element type '" + std::string(text) + "' (expected fp32, fp16 or bf16)");
}

FlopsPerSecond DeviceSpec::peakFor(ElementType type, const std::string& clusterFile) const {
  const auto p = peak[static_cast<size_t>(type)];
  if (p.value() <= 0)
    throw OptionError("--element", std::string(toString(type)) + ": the device of " + clusterFile +
                                       " has no peak for it (device.peak." +
                                       std::string(toString(type)) + ")");
  return p;
}

double DeviceSpec::sharingSpeed(int workers) const {
  if (sharing.empty() || workers <= sharing.front().first)
    return sharing.empty() ? 1.0 : sharing.front().second;
  for (size_t i = 1; i < sharing.size(); ++i) {
    const auto [k1, s1] = sharing[i];
    if (workers <= k1) {
      const auto [k0, s0] = sharing[i - 1];
      return s0 + (s1 - s0) * double(workers - k0) / double(k1 - k0);
    }
  }
  const auto [kn, sn] = sharing.back();
  return sn * double(kn) / double(workers);
}

int64_t Cluster::capacity() const {
  int64_t n = 1;
  for (const auto& l : levels) {
    if (l.group == 0)
      return -1;
    n *= l.group;
  }
  return n;
}

namespace {

constexpr LayerKind kAllKinds[] = {LayerKind::kConv,    LayerKind::kPool,      LayerKind::kFc,
                                   LayerKind::kRnn,     LayerKind::kRelu,      LayerKind::kLrn,
                                   LayerKind::kDropout, LayerKind::kBatchNorm, LayerKind::kAdd,
                                   LayerKind::kSoftmax};

DeviceSpec readDevice(const ConfigNode& n) {
  n.allowOnly({"name", "peak", "memory_bandwidth", "memory_capacity", "memory_efficiency",
               "efficiency", "reduce_bandwidth", "sharing"});
  DeviceSpec d;
  d.name = n.require("name").asString();
  const auto peak = n.require("peak");
  peak.allowOnly({"fp32", "fp16", "bf16"});
  for (auto t : {ElementType::kFp32, ElementType::kFp16, ElementType::kBf16})
    if (auto p = peak.get(toString(t)))
      d.peak[static_cast<size_t>(t)] = p->asFlopRate();
  if (d.peak[0].value() <= 0)
    peak.require("fp32");
  d.memoryBandwidth = n.require("memory_bandwidth").asBandwidth();
  d.memoryCapacity = n.require("memory_capacity").asBytes();
  d.memoryEfficiency = n.require("memory_efficiency").asFraction();
  const auto eff = n.require("efficiency");
  const double fallback = eff.require("default").asFraction();
  d.efficiency.fill(fallback);
  for (const auto& [key, value] : eff.entries()) {
    if (key == "default")
      continue;
    bool known = false;
    for (auto kind : kAllKinds) {
      if (toString(kind) == key) {
        d.efficiency[static_cast<size_t>(kind)] = value.asFraction();
        known = true;
      }
    }
    if (!known)
      value.fail(
          "unknown layer kind (expected default or one of conv, pool, fc, rnn, relu, lrn, "
          "dropout, batchnorm, add, softmax)");
  }
  if (auto sharing = n.get("sharing")) {
    for (const auto& row : sharing->items()) {
      row.allowOnly({"workers", "speed"});
      const int workers = row.require("workers").asPositiveInt();
      if (!d.sharing.empty() && workers <= d.sharing.back().first)
        row.require("workers").fail("worker counts must increase down the list");
      d.sharing.push_back({workers, row.require("speed").asPositiveDouble()});
    }
  }
  if (auto r = n.get("reduce_bandwidth")) {
    d.reduceBandwidth = r->asBandwidth();
  } else {
    // Summing n bytes into an accumulator reads 2n and writes n bytes.
    d.reduceBandwidth = BytesPerSecond(d.memoryBandwidth.value() * d.memoryEfficiency / 3.0);
  }
  return d;
}

TopologyLevel readLevel(const ConfigNode& n, bool outermost) {
  n.allowOnly({"name", "group", "link"});
  TopologyLevel level;
  level.name = n.require("name").asString();
  const auto g = n.require("group");
  if (g.isScalar() && g.asString() == "any") {
    if (!outermost)
      g.fail("'any' is allowed only on the outermost level");
    level.group = 0;
  } else {
    level.group = g.asPositiveInt();
  }
  const auto link = n.require("link");
  link.allowOnly({"bandwidth", "latency", "duplex", "lanes", "bandwidth_table"});
  level.link.bandwidth = link.require("bandwidth").asBandwidth();
  level.link.latency = link.require("latency").asSeconds(true);
  const auto duplex = link.stringOr("duplex", "full");
  if (duplex == "full") {
    level.link.fullDuplex = true;
  } else if (duplex == "half") {
    level.link.fullDuplex = false;
  } else {
    link.require("duplex").fail("must be full or half, got '" + duplex + "'");
  }
  level.link.lanes = link.positiveIntOr("lanes", 1);
  if (auto table = link.get("bandwidth_table")) {
    for (const auto& row : table->items()) {
      row.allowOnly({"bytes", "bandwidth"});
      const Bytes bytes = row.require("bytes").asBytes();
      if (!level.link.bandwidthTable.empty() && bytes <= level.link.bandwidthTable.back().bytes)
        row.require("bytes").fail("sizes must increase down the table");
      level.link.bandwidthTable.push_back({bytes, row.require("bandwidth").asBandwidth()});
    }
    if (level.link.bandwidthTable.empty())
      table->fail("needs at least one row");
  }
  return level;
}

}  // namespace

Cluster loadCluster(const std::string& path) {
  const auto root = ConfigNode::loadFile(path);
  root.allowOnly({"name", "description", "fitted_on", "device", "topology"});
  Cluster c;
  c.sourceFile = path;
  const auto nameNode = root.require("name");
  c.name = nameNode.asString();
  const auto stem = std::filesystem::path(path).stem().string();
  if (c.name != stem)
    nameNode.fail("name '" + c.name + "' must equal the file name '" + stem + "'");
  c.description = root.stringOr("description", "");
  c.fittedOn = root.stringOr("fitted_on", "");
  c.device = readDevice(root.require("device"));
  const auto topo = root.require("topology");
  const auto levels = topo.items();
  if (levels.empty())
    topo.fail("a cluster needs at least one topology level");
  for (size_t i = 0; i < levels.size(); ++i)
    c.levels.push_back(readLevel(levels[i], i + 1 == levels.size()));
  return c;
}

}  // namespace strata

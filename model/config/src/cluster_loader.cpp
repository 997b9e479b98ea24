#include "strata/model/cluster_loader.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>

#include "config_node.h"
#include "strata/model/checked.h"
#include "strata/model/error.h"
#include "strata/model/layer_kinds.h"
#include "strata/model/limits.h"
#include "strata/model/quantity_text.h"

namespace strata {

namespace {

// A rate given in giga-units per second (the key says the unit: gflop_per_s,
// gunits_per_s), within the compute-rate range of quantity_text.h.
double readRate(const ConfigNode& v) {
  const auto range = quantityRange(QuantityKind::kFlopRate);
  return v.asDoubleIn(range.min / 1e9, range.max / 1e9,
                      "giga-units per second: 1 to 1e18 per second, the compute-rate range") *
         1e9;
}

// Whether `key` names an element type ("bf16"), which it sets `out` to.
bool elementTypeNamed(std::string_view key, ElementType& out) {
  for (auto e : kAllElementTypes)
    if (key == toString(e)) {
      out = e;
      return true;
    }
  return false;
}

// A rate grid (`gemm` or `conv`): dims, then one row per (table, m, n) with
// the rates over k; `key` names the table column ("op" or "pass"), `names`
// its three values in table order and `what` what they are ("GEMM op").
// `accumulates`: where the grid may say how it was timed (`timed`: the CPU
// backend's fp32 GEMMs), set from it; elsewhere `timed` is refused. Each
// row's figures are under `valueKey`, each read by `readValue` (a rate in
// GFLOP/s, or gemm_cold's slowdown).
void readGrid(const ConfigNode& g, GemmTable& table, const char* key, const char* what,
              const std::array<std::string_view, 3>& names, bool* accumulates = nullptr,
              const char* valueKey = "gflop_per_s",
              double (*readValue)(const ConfigNode&) = readRate) {
  g.allowOnly({"dims", "rates", "timed"});
  if (auto timed = g.get("timed")) {
    if (accumulates == nullptr)
      timed->fail("only the CPU backend's fp32 gemm table says how it was timed");
    const std::string how = timed->asString();
    if (how != "accumulate" && how != "assign")
      timed->fail("unknown '" + how + "' (expected accumulate: C += A B, or assign: C = A B)");
    *accumulates = how == "accumulate";
  }
  const auto dims = g.require("dims");
  const auto dimItems = dims.items();
  // The rate tables hold 3 d^3 figures: 64 grid values are 786,432 (calibrate writes 15).
  if (dimItems.size() > kMaxGridDims)
    dims.fail(fmt::format("has {} grid values; at most {} (the tables grow as the cube)",
                          dimItems.size(), kMaxGridDims));
  for (const auto& d : dimItems) {
    const int v = d.asPositiveInt();
    if (!table.dims.empty() && v <= table.dims.back())
      d.fail("dims must increase");
    table.dims.push_back(v);
  }
  if (table.dims.size() < 2)
    dims.fail("needs at least two grid values");
  const size_t d = table.dims.size();
  auto indexOf = [&](const ConfigNode& v) {
    const int x = v.asPositiveInt();
    const auto it = std::find(table.dims.begin(), table.dims.end(), int64_t{x});
    if (it == table.dims.end())
      v.fail("not one of the grid's dims");
    return static_cast<size_t>(it - table.dims.begin());
  };
  for (auto& r : table.rate)
    r.assign(d * d * d, 0.0);
  const auto rates = g.require("rates");
  // The line of the row that set each (table, m, n): a second row for the
  // same cell would silently set every price of that cell.
  std::vector<int> rowLine(3 * d * d, 0);
  for (const auto& row : rates.items()) {
    row.allowOnly({key, "m", "n", valueKey});
    const auto whichNode = row.require(key);
    const auto name = whichNode.asString();
    int which = -1;
    for (size_t i = 0; i < names.size(); ++i)
      if (names[i] == name)
        which = static_cast<int>(i);
    if (which < 0)
      whichNode.fail(fmt::format("unknown {} '{}' (expected {}, {} or {})", what, name, names[0],
                                 names[1], names[2]));
    const size_t im = indexOf(row.require("m")), in = indexOf(row.require("n"));
    int& first = rowLine[(static_cast<size_t>(which) * d + im) * d + in];
    if (first > 0)
      row.fail(
          fmt::format("a second row for {} {} m {} n {} (the first is at line {}): each "
                      "cell of the grid has one row",
                      key, name, table.dims[im], table.dims[in], first));
    first = row.line();
    const auto values = row.require(valueKey);
    const auto items = values.items();
    if (items.size() != d)
      values.fail(fmt::format("needs {} {} (one per k in dims), got {}", d,
                              std::string_view(valueKey) == "gflop_per_s" ? "rates" : "figures",
                              items.size()));
    for (size_t ik = 0; ik < d; ++ik)
      table.rate[static_cast<size_t>(which)][(im * d + in) * d + ik] = readValue(items[ik]);
  }
  for (size_t w = 0; w < 3; ++w)
    for (size_t i = 0; i < d * d * d; ++i)
      if (table.rate[w][i] <= 0)
        rates.fail(fmt::format("no row for {} {} m {} n {}", key, names[w], table.dims[i / (d * d)],
                               table.dims[(i / d) % d]));
}

KernelTables readKernels(const ConfigNode& n) {
  n.allowOnly({"backend", "call_overhead", "reference", "last_level_cache", "effective_cache",
               "gemm", "conv", "gemm_cold", "by_element", "memory", "memory_cold", "core_cache",
               "memory_warm", "gemm_warm"});
  KernelTables t;
  const auto backend = n.require("backend");
  t.backend = backend.asString();
  if (t.backend != "cpu" && t.backend != "cuda")
    backend.fail("unknown backend '" + t.backend + "' (expected cpu or cuda)");
  if (auto overhead = n.get("call_overhead"))
    t.callOverhead = overhead->asSeconds(true);
  if (auto reference = n.get("reference")) {
    reference->allowOnly({"gemm_gflop_per_s", "copy_gunits_per_s"});
    t.referenceGemmRate = readRate(reference->require("gemm_gflop_per_s"));
    t.referenceCopyRate = readRate(reference->require("copy_gunits_per_s"));
  }
  // A block's `gemm` grid and its `conv` grid (when it has one);
  // `accumulates`: where the gemm grid may say how it was timed.
  auto readGemmAndConv = [](const ConfigNode& block, GemmTable& gemm, GemmTable& conv,
                            bool* accumulates = nullptr) {
    readGrid(block.require("gemm"), gemm, "op", "GEMM op",
             {toString(GemmOp::kNN), toString(GemmOp::kNT), toString(GemmOp::kTN)}, accumulates);
    if (auto c = block.get("conv"))
      readGrid(
          *c, conv, "pass", "convolution pass",
          {toString(ConvPass::kFwd), toString(ConvPass::kBwdData), toString(ConvPass::kBwdFilter)});
  };
  if (auto conv = n.get("conv"); conv && t.backend != "cuda")
    conv->fail("a conv table is for backend cuda (the CPU lowers convolutions to GEMMs)");
  readGemmAndConv(n, t.gemm, t.conv, t.backend == "cpu" ? &t.gemmAccumulates : nullptr);
  // by_element: tf32 and bf16 GEMM (and conv) tables, as calibrate
  // --device cuda measures them through the phases in that precision.
  if (auto byElement = n.get("by_element")) {
    if (t.backend != "cuda")
      byElement->fail(
          "tables by element type are for backend cuda (the CPU backend computes in fp32 only)");
    for (const auto& [key, block] : byElement->entries()) {
      ElementType type = ElementType::kFp32;
      const bool known = elementTypeNamed(key, type);
      if (!known || type == ElementType::kFp32 || type == ElementType::kFp16)
        block.fail(!known ? "unknown element type '" + key + "' (expected tf32 or bf16)"
                   : type == ElementType::kFp32
                       ? std::string("fp32's tables are `gemm` and `conv` beside by_element")
                       : std::string("the CUDA backend does not run fp16 (no loss scaling): "
                                     "expected tf32 or bf16"));
      block.allowOnly({"gemm", "conv"});
      ElementTables& e = t.byElement[type];
      readGemmAndConv(block, e.gemm, e.conv);
    }
  }
  // One {units, gunits_per_s} row: units per call -> rates.
  auto readSizeTable = [](const ConfigNode& row, SizeTable& table) {
    row.allowOnly({"units", "gunits_per_s"});
    for (const auto& u : row.require("units").items()) {
      const double x =
          u.asDoubleIn(1, 9007199254740992.0, "units per call: at least one, at most 2^53");
      if (!table.units.empty() && x <= table.units.back())
        u.fail("units must increase");
      table.units.push_back(x);
    }
    for (const auto& r : row.require("gunits_per_s").items())
      table.rate.push_back(readRate(r));
    if (table.units.empty() || table.rate.size() != table.units.size())
      row.require("gunits_per_s").fail("needs one rate per entry of units");
  };
  // memory and memory_cold: a row per kernel.
  auto readSizeTables = [&](const ConfigNode& block,
                            std::array<SizeTable, kMemKernelCount>& tables) {
    for (const auto& [name, row] : block.entries()) {
      MemKernel kernel;
      if (!parseMemKernel(name, kernel))
        row.fail("unknown kernel '" + name + "'");
      readSizeTable(row, tables[static_cast<size_t>(kernel)]);
    }
  };
  if (auto memory = n.get("memory"))
    readSizeTables(*memory, t.memory);
  // A cold or warm table: beside the cache its operands were flushed of,
  // each kernel beside its own hot row.
  auto readFlushed = [&](const char* key, const char* cache, const char* what,
                         std::array<SizeTable, kMemKernelCount>& tables) {
    auto flushed = n.get(key);
    if (!flushed)
      return;
    if (!n.get(cache))
      flushed->fail(
          fmt::format("needs {} beside it (the cache its operands were flushed of)", cache));
    readSizeTables(*flushed, tables);
    for (const auto& [name, row] : flushed->entries()) {
      MemKernel kernel;
      if (parseMemKernel(name, kernel) && t.memory[static_cast<size_t>(kernel)].empty())
        row.fail(fmt::format("a {} table needs the kernel's own (hot) table under memory", what));
    }
  };
  readFlushed("memory_cold", "last_level_cache", "cold", t.memoryCold);
  readFlushed("memory_warm", "core_cache", "warm", t.memoryWarm);
  if (auto core = n.get("core_cache")) {
    t.coreCache = core->asBytes();
    if (t.coreCache.value() < 1024 || t.coreCache.value() > 1e10)
      core->fail("a core's own cache of 1 KiB to 10 GB");
    if (auto cache = n.get("last_level_cache"); cache && cache->asBytes() < t.coreCache)
      core->fail("at most last_level_cache (the core's own cache is the smaller level)");
  }
  if (auto gemmWarm = n.get("gemm_warm")) {
    if (t.backend != "cpu")
      gemmWarm->fail("is for backend cpu (calibrate times it through the CPU backend's GEMMs)");
    if (!n.get("core_cache"))
      gemmWarm->fail("needs core_cache beside it (the cache its operands were flushed of)");
    readGrid(*gemmWarm, t.gemmWarm, "op", "GEMM op",
             {toString(GemmOp::kNN), toString(GemmOp::kNT), toString(GemmOp::kTN)}, nullptr,
             "slowdown", [](const ConfigNode& v) {
               return v.asDoubleIn(0.1, 1e4, "warm time over hot time: 0.1 to 10,000");
             });
  }
  if (auto cache = n.get("last_level_cache")) {
    t.lastLevelCache = cache->asBytes();
    if (t.lastLevelCache.value() < 1024 || t.lastLevelCache.value() > 1e12)
      cache->fail("a last-level cache of 1 KiB to 1 TB");
  }
  if (auto gemmCold = n.get("gemm_cold")) {
    if (t.backend != "cpu")
      gemmCold->fail("is for backend cpu (calibrate times it through the CPU backend's GEMMs)");
    if (!n.get("last_level_cache"))
      gemmCold->fail("needs last_level_cache beside it (the cache its operands were flushed of)");
    if (gemmCold->has("nn") || gemmCold->has("nt") || gemmCold->has("tn"))
      gemmCold->fail(
          "rows per op ({units, gunits_per_s}: strata calibrate of 2026-12-03) were replaced by "
          "a grid of slowdowns (dims, rates with slowdown per k); run strata calibrate again");
    readGrid(*gemmCold, t.gemmCold, "op", "GEMM op",
             {toString(GemmOp::kNN), toString(GemmOp::kNT), toString(GemmOp::kTN)}, nullptr,
             "slowdown", [](const ConfigNode& v) {
               return v.asDoubleIn(0.1, 1e4, "cold time over hot time: 0.1 to 10,000");
             });
  }
  if (auto effective = n.get("effective_cache")) {
    if (!n.get("last_level_cache"))
      effective->fail("needs last_level_cache beside it (the cache it is a share of)");
    t.effectiveCache = effective->asBytes();
    if (t.effectiveCache.value() < 1024 || t.effectiveCache > t.lastLevelCache)
      effective->fail("an effective cache of at least 1 KiB and at most last_level_cache");
  }
  return t;
}

// One column of the sharing rows: (workers, value) for the rows that have
// `key`, the value read by `read`.
std::vector<std::pair<int, double>> readSharing(const ConfigNode& list, const char* key,
                                                double (*read)(const ConfigNode&)) {
  std::vector<std::pair<int, double>> out;
  for (const auto& row : list.items()) {
    row.allowOnly({"workers", "speed", "memory_speed", "memory_speed_by_size",
                   "overlap_compute_speed", "overlap_comm_speed", "overlap_comm_rate",
                   "overlap_comm_speed_by_duty", "lane_handoff"});
    if (!row.has(key))
      continue;
    const int workers = row.require("workers").asPositiveInt();
    if (!out.empty() && workers <= out.back().first)
      row.require("workers").fail("worker counts must increase down the list");
    out.push_back({workers, read(row.require(key))});
  }
  return out;
}

// One table of fractions of a peak per layer kind: `default` for every kind,
// then the kinds named.
// `core`: the table's attention_core, 0 without one.
std::array<double, kLayerKindCount> readEfficiency(const ConfigNode& eff, double& core) {
  std::array<double, kLayerKindCount> out{};
  core = 0;
  const double fallback = eff.require("default").asFraction();
  out.fill(fallback);
  // Attention is GEMMs like fc: without its own figure it takes fc's.
  if (auto fc = eff.get("fc"))
    out[static_cast<size_t>(LayerKind::kAttention)] = fc->asFraction();
  for (const auto& [key, value] : eff.entries()) {
    if (key == "default")
      continue;
    if (key == "attention_core") {
      core = value.asFraction();
      continue;
    }
    const auto kind = parseLayerKind(key);
    if (!kind)
      value.fail("unknown layer kind (expected default, attention_core or one of " +
                 layerKindNames() + ")");
    out[static_cast<size_t>(*kind)] = value.asFraction();
  }
  return out;
}

DeviceSpec readDevice(const ConfigNode& n) {
  n.allowOnly({"name", "peak", "memory_bandwidth", "memory_capacity", "memory_efficiency",
               "efficiency", "efficiency_by_element", "reduce_bandwidth", "sharing", "kernels",
               "lane_handoff"});
  DeviceSpec d;
  d.name = n.require("name").asString();
  const auto peak = n.require("peak");
  peak.allowOnly({"fp32", "tf32", "fp16", "bf16"});
  for (auto t : kAllElementTypes)
    if (auto p = peak.get(toString(t)))
      d.peak[static_cast<size_t>(t)] = p->asFlopRate();
  if (d.peak[0].value() <= 0)
    peak.require("fp32");
  d.memoryBandwidth = n.require("memory_bandwidth").asBandwidth();
  d.memoryCapacity = n.require("memory_capacity").asBytes();
  d.memoryEfficiency = n.require("memory_efficiency").asFraction();
  d.efficiency = readEfficiency(n.require("efficiency"), d.attentionCore[0]);
  if (auto byElement = n.get("efficiency_by_element")) {
    for (const auto& [key, table] : byElement->entries()) {
      ElementType type = ElementType::kFp32;
      const bool known = elementTypeNamed(key, type);
      if (!known || type == ElementType::kFp32)
        table.fail(known ? "fp32's table is `efficiency` (efficiency_by_element holds the other "
                           "types: tf32, fp16, bf16)"
                         : "unknown element type '" + key + "' (expected tf32, fp16 or bf16)");
      if (d.peak[static_cast<size_t>(type)].value() <= 0)
        table.fail("the device has no peak." + key + ": an efficiency table needs its peak");
      d.efficiencyByElement[static_cast<size_t>(type)] =
          readEfficiency(table, d.attentionCore[static_cast<size_t>(type)]);
      d.hasEfficiency[static_cast<size_t>(type)] = true;
    }
  }
  if (auto sharing = n.get("sharing")) {
    for (const auto& row : sharing->items())
      row.require("speed");
    // Speeds relative to one worker alone: sharing slows a worker down, and
    // never makes it ten times faster.
    auto speed = [](const ConfigNode& v) {
      return v.asDoubleIn(ConfigNode::kMinFraction, 10,
                          "a speed relative to one worker alone, 1e-6 to 10");
    };
    auto time = [](const ConfigNode& v) { return v.asSeconds(true).value(); };
    d.sharing = readSharing(*sharing, "speed", speed);
    d.sharingMemory = readSharing(*sharing, "memory_speed", speed);
    // memory_speed_by_size: {256 KiB: 0.99, 16 MiB: 0.6}, sizes increasing,
    // in a row with memory_speed; a row without it (workers: 1, which is
    // never slowed) keeps memory_speed at every size.
    bool anyBySize = false;
    std::vector<std::pair<int, std::vector<std::pair<double, double>>>> bySizeRows;
    for (const auto& row : sharing->items()) {
      if (!row.has("memory_speed")) {
        if (auto bySize = row.get("memory_speed_by_size"))
          bySize->fail("needs memory_speed in the same row (the figure beyond the sizes)");
        continue;
      }
      std::vector<std::pair<double, double>> table;
      if (auto bySize = row.get("memory_speed_by_size")) {
        anyBySize = true;
        for (const auto& [key, value] : bySize->entries()) {
          double bytes = 0;
          try {
            bytes = parseSizeOption(key, "memory_speed_by_size", false).value();
          } catch (const UserError&) {
            value.fail("'" + key + "' is not a size with its unit (e.g. 256 KiB)");
          }
          if (!table.empty() && bytes <= table.back().first)
            value.fail("sizes must be positive and increase along the map");
          table.push_back({bytes, speed(value)});
        }
        if (table.empty())
          bySize->fail("needs at least one size: speed entry");
      } else {
        table.push_back({1.0, speed(row.require("memory_speed"))});
      }
      bySizeRows.push_back({row.require("workers").asPositiveInt(), table});
    }
    if (anyBySize)
      d.sharingMemoryBySize = std::move(bySizeRows);
    d.overlapCompute = readSharing(*sharing, "overlap_compute_speed", speed);
    d.overlapComm = readSharing(*sharing, "overlap_comm_speed", speed);
    // overlap_comm_speed_by_duty: [[0, 1.0], [0.5, 0.8], [1, 0.44]], the
    // communication lane's speed against the compute lane's duty cycle, in a
    // row with overlap_comm_speed (the figure at duty 1).
    for (const auto& row : sharing->items()) {
      auto curve = row.get("overlap_comm_speed_by_duty");
      if (!curve)
        continue;
      if (!row.has("overlap_comm_speed"))
        curve->fail("needs overlap_comm_speed in the same row (the speed at duty 1)");
      if (!curve->isSequence())
        curve->fail(
            "must be a list of [duty, speed] pairs, e.g. [[0, 1.0], [0.5, 0.8], [1, 0.44]]");
      std::vector<std::pair<double, double>> points;
      for (const auto& point : curve->items()) {
        const auto pair = point.items();
        if (!point.isSequence() || pair.size() != 2)
          point.fail("must be a [duty, speed] pair, e.g. [0.5, 0.8]");
        const double duty =
            pair[0].asDoubleIn(0, 1, "a fraction of the window the compute lane is busy");
        if (!points.empty() && duty <= points.back().first)
          pair[0].fail("duties must increase strictly along the list");
        const double s = pair[1].asDouble();
        if (s <= 0 || s > 1)
          pair[1].fail("must be a speed relative to the lane alone in (0, 1], got " +
                       fmt::format("{:g}", s));
        if (duty == 0 && s != 1)
          pair[1].fail("at duty 0 the compute lane is idle: the lane runs alone, speed 1");
        if (duty == 1 && std::abs(s - row.require("overlap_comm_speed").asDouble()) > 1e-9)
          pair[1].fail(
              "at duty 1 the speed is the row's overlap_comm_speed (both lanes "
              "saturated), got " +
              fmt::format("{:g}", s));
        points.push_back({duty, s});
      }
      if (points.empty())
        curve->fail("needs at least one [duty, speed] pair");
      const int workers = row.require("workers").asPositiveInt();
      if (!d.overlapCommByDuty.empty() && workers <= d.overlapCommByDuty.back().first)
        row.require("workers").fail("worker counts must increase down the list");
      d.overlapCommByDuty.push_back({workers, std::move(points)});
    }
    d.handoffs = readSharing(*sharing, "lane_handoff", time);
    auto rate = [](const ConfigNode& v) { return v.asBandwidth().value(); };
    d.overlapCommRate = readSharing(*sharing, "overlap_comm_rate", rate);
  }
  if (auto handoff = n.get("lane_handoff"))
    d.laneHandoff = handoff->asSeconds(true);
  if (auto kernels = n.get("kernels"))
    d.kernels = readKernels(*kernels);
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
  link.allowOnly({"bandwidth", "latency", "latency_per", "duplex", "lanes", "bandwidth_table",
                  "exchange_bandwidth_table"});
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
  const auto per = link.stringOr("latency_per", "message");
  if (per == "step") {
    level.link.latencyPerStep = true;
  } else if (per != "message") {
    link.require("latency_per").fail("must be message or step, got '" + per + "'");
  }
  level.link.lanes = link.positiveIntOr("lanes", 1);
  if (level.link.lanes > kMaxLanes)
    link.require("lanes").fail(fmt::format(
        "at most {} parallel links per unit (the simulator keeps every lane's load), got {}",
        kMaxLanes, level.link.lanes));
  auto readTable = [&](const char* key, std::vector<BandwidthPoint>& out) {
    auto table = link.get(key);
    if (!table)
      return;
    for (const auto& row : table->items()) {
      row.allowOnly({"bytes", "bandwidth"});
      // The key says the unit: a bare number is bytes (strata calibrate writes them so).
      const Bytes bytes = row.require("bytes").asBytes(false, UnitRule::kImplied);
      if (!out.empty() && bytes <= out.back().bytes)
        row.require("bytes").fail("sizes must increase down the table");
      out.push_back({bytes, row.require("bandwidth").asBandwidth()});
    }
    if (out.empty())
      table->fail("needs at least one row");
  };
  readTable("bandwidth_table", level.link.bandwidthTable);
  readTable("exchange_bandwidth_table", level.link.exchangeTable);
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
  int64_t devices = 1;
  for (size_t i = 0; i < levels.size(); ++i) {
    c.levels.push_back(readLevel(levels[i], i + 1 == levels.size()));
    // Workers are ints: a finite cluster holds at most 2^31 - 1 devices.
    const int64_t group = c.levels.back().group;
    if (group > 0 && !checkedMul(devices, group, devices, kMaxClusterDevices))
      levels[i].require("group").fail(fmt::format(
          "the cluster would hold more than {} devices (the product of the groups); use "
          "`group: any` on the outermost level for an unbounded number",
          kMaxClusterDevices));
  }
  return c;
}

}  // namespace strata

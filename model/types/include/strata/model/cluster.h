// Clusters: the device every worker runs on and the hierarchy of links
// between devices (switch groups, NVLink/NVSwitch, nodes, NICs).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "strata/model/fit.h"
#include "strata/model/kernels.h"
#include "strata/model/network.h"
#include "strata/model/profile.h"
#include "strata/model/units.h"

namespace strata {

// tf32: fp32 tensors (4 bytes in memory and on the wire) multiplied on tensor
// cores with a 10-bit mantissa (NVIDIA A100/H100); fp32 is the plain FFMA path.
// kTf32 comes last so the indices of the older types (peak[0] = fp32) stay.
enum class ElementType { kFp32, kFp16, kBf16, kTf32 };
inline constexpr int kElementTypeCount = 4;
inline constexpr ElementType kAllElementTypes[] = {ElementType::kFp32, ElementType::kTf32,
                                                   ElementType::kFp16, ElementType::kBf16};

std::string_view toString(ElementType type);
// Size of one element: 4 bytes for fp32 and tf32, 2 for fp16 and bf16.
double elementBytes(ElementType type);
// Whether training in `type` keeps fp32 master weights beside the 2-byte
// working copy (mixed precision: fp16, bf16).
bool isMixedPrecision(ElementType type);
// Parses "fp32", "tf32", "fp16", "bf16"; throws OptionError(option) otherwise.
ElementType parseElementType(std::string_view text, const std::string& option);

// One device (a GPU, or a CPU core used as a worker).
struct DeviceSpec {
  std::string name;
  // Peak FLOP/s per element type; 0 when the device has no figure for it.
  std::array<FlopsPerSecond, kElementTypeCount> peak{};
  BytesPerSecond memoryBandwidth;
  Bytes memoryCapacity;
  double memoryEfficiency = 1.0;  // fraction of memoryBandwidth reached
  // Fraction of the fp32 peak reached, per layer kind (index: LayerKind):
  // the cluster file's `efficiency`.
  std::array<double, kLayerKindCount> efficiency{};
  // Optional (`efficiency_by_element`): fractions of each element type's own
  // peak, per layer kind; hasEfficiency[t] says whether type t has a table.
  // A type without one falls back to `efficiency` (efficiencyFor), which
  // overestimates tensor-core types: the pricing line says so.
  std::array<std::array<double, kLayerKindCount>, kElementTypeCount> efficiencyByElement{};
  std::array<bool, kElementTypeCount> hasEfficiency{};
  // Optional (`attention_core` in `efficiency` and in each
  // `efficiency_by_element` table, index: ElementType, fp32's from
  // `efficiency`): the fraction of peak an attention layer's core (QK^T and
  // PV, per head T x T x head_dim) reaches; 0: the table's `attention`.
  std::array<double, kElementTypeCount> attentionCore{};
  // Bytes of reduction input summed per second (gamma = 1 / this).
  BytesPerSecond reduceBandwidth;
  // Optional (strata calibrate): each worker's compute speed, relative to
  // running alone, when `workers` workers share one node (its innermost
  // topology group) and so its cores and memory. Sorted by workers.
  std::vector<std::pair<int, double>> sharing;
  // Optional, the same for memory-bound kernels (GEMMs use `sharing`).
  std::vector<std::pair<int, double>> sharingMemory;
  // Optional (strata calibrate, memory_speed_by_size): per sharing row
  // (workers), the memory-bound speed by the bytes each worker's kernel
  // touches, increasing: a working set inside a core's own caches slows far
  // less than one streaming from DRAM (memory_speed is the 16 MiB figure).
  std::vector<std::pair<int, std::vector<std::pair<double, double>>>> sharingMemoryBySize;
  // Optional: while a worker's communication runs at the same time as its
  // compute, the speed of each (relative to running alone): below 1 where
  // both lanes share the cores (CPU workers), absent (1) where communication
  // has engines of its own.
  std::vector<std::pair<int, double>> overlapCompute;
  std::vector<std::pair<int, double>> overlapComm;
  // Optional (strata calibrate, overlap_comm_rate): the bytes per second each
  // worker's communication lane moved alone in the trial that measured the
  // overlap speeds (exchanges through shared memory, summed: every byte costs
  // the cores). A link slower than that leaves the lane waiting on the wire
  // for part of its time, and the cores to the compute lane (overlapSpeeds).
  std::vector<std::pair<int, double>> overlapCommRate;
  // Optional (strata calibrate, overlap_comm_speed_by_duty): per sharing row
  // (workers), the communication lane's speed (relative to alone, averaged
  // over a window) against the compute lane's duty cycle d in that window:
  // (d, speed) points, d strictly increasing in [0, 1]. overlapComm is the
  // speed at d = 1 (both lanes saturated).
  std::vector<std::pair<int, std::vector<std::pair<double, double>>>> overlapCommByDuty;
  // Optional (strata calibrate): how long a worker's lane (compute or
  // communication) takes to resume once the other lane has produced what it
  // waits for (a condition-variable wake-up in the executor); 0 elsewhere.
  Seconds laneHandoff;
  // Optional, per number of workers on the node (sharing rows' lane_handoff):
  // the hand-off while that many compute lanes keep the cores busy.
  std::vector<std::pair<int, double>> handoffs;
  // The hand-off with `workers` workers per node: from `handoffs` (linear in
  // between, the last row beyond), else laneHandoff.
  Seconds handoffFor(int workers) const;
  // Optional (strata calibrate): measured kernel costs of the compute
  // backend; when present the model and the simulator price layers from them.
  KernelTables kernels;
  // Optional (--profile): measured per-op times of one network on this
  // device. When set and the network priced is the profile's, every layer
  // phase is priced from it instead of tables or roofline.
  std::shared_ptr<const OpProfile> profile;
  // What-if questions (strata report, "compute x2"): every compute and update
  // task runs this many times faster than the tables, profile or roofline
  // say. Never read from a config file: 1 there.
  double computeScale = 1.0;

  // Speed factor for `workers` workers on one node: 1 without a table;
  // interpolated linearly; beyond the table the last entry's total throughput
  // is shared (speed x last / workers).
  double sharingSpeed(int workers) const;
  // The same for memory-bound kernels; sharingSpeed when there is no figure.
  double sharingMemorySpeed(int workers) const;
  // The same for a kernel touching `bytes` per worker: from
  // sharingMemoryBySize where rows have it (log-linear in bytes, the ends
  // beyond them), else sharingMemorySpeed(workers).
  double sharingMemorySpeed(int workers, double bytes) const;
  // Speeds of compute and of communication while both run on a worker (1, 1
  // without figures).
  double overlapComputeSpeed(int workers) const;
  double overlapCommSpeed(int workers) const;
  // overlapCommRate at `workers` (linear in between); 0 when not measured.
  double overlapCommRateFor(int workers) const;
  // The communication lane's speed averaged over a window in which the
  // compute lane is busy a fraction `duty` (clamped to [0, 1]) of the time,
  // with `workers` workers per node. From overlapCommByDuty: each row's curve
  // with (0, 1) and (1, its overlap_comm_speed) as its ends, linear in duty;
  // as a share h(d) = (1 - speed(d)) / (1 - overlapCommSpeed) of the saturated
  // slowdown, interpolated between rows by workers (the last row's beyond
  // it), so that duty 1 is overlapCommSpeed(workers) exactly. Without a
  // curve: 1 - duty (1 - overlapCommSpeed(workers)), the time-average of the
  // saturated speed while compute runs and 1 while it does not.
  double overlapCommSpeedAt(int workers, double duty) const;
  // Whether overlapCommByDuty has a curve.
  bool hasOverlapCommCurve() const { return !overlapCommByDuty.empty(); }
  // The duties at which overlapCommSpeedAt bends: 0, every row's points, 1,
  // increasing.
  std::vector<double> overlapCommDutyBreaks() const;

  // Peak for an element type; throws OptionError("--element") naming the
  // cluster file when the device has no figure for it.
  FlopsPerSecond peakFor(ElementType type, const std::string& clusterFile) const;
  // Fraction of peakFor(element) a layer of `kind` reaches: the element
  // type's own table, else the fp32 table (ownEfficiency tells which).
  double efficiencyFor(LayerKind kind, ElementType element = ElementType::kFp32) const {
    return element != ElementType::kFp32 && hasEfficiency[static_cast<size_t>(element)]
               ? efficiencyByElement[static_cast<size_t>(element)][static_cast<size_t>(kind)]
               : efficiency[static_cast<size_t>(kind)];
  }
  // The attention core's fraction of peakFor(element), from the same table
  // as efficiencyFor: its attention_core, else its attention.
  double attentionCoreEfficiency(ElementType element = ElementType::kFp32) const {
    const auto table = ownEfficiency(element) ? static_cast<size_t>(element) : 0;
    return attentionCore[table] > 0 ? attentionCore[table]
                                    : efficiencyFor(LayerKind::kAttention, element);
  }
  // Whether `element` has a table of its own (fp32 always has).
  bool ownEfficiency(ElementType element) const {
    return element == ElementType::kFp32 || hasEfficiency[static_cast<size_t>(element)];
  }
};

// The link from each unit of a level to that level's switch.
struct LinkSpec {
  BytesPerSecond bandwidth;  // beta, per direction
  Seconds latency;           // alpha of a message whose endpoints meet at this level
  bool fullDuplex = true;
  int lanes = 1;  // parallel links per unit; device i inside the unit uses lane i % lanes
  // `latency_per: step`: the segments of one pipelined step pay the latency
  // once (NCCL keeps several chunks of a step in flight, and its tuning model
  // charges its per-step latency once per step); `message` (default): every
  // segment pays it (blocking sends, as strata's executor does).
  bool latencyPerStep = false;
  // Optional: effective bandwidth by message size (strata calibrate). When
  // present, n bytes cross the link at beta(n) (fit.h) instead of `bandwidth`.
  std::vector<BandwidthPoint> bandwidthTable;
  // Optional: each direction's rate by message size while two endpoints send
  // to each other at once (scripts/testbed cluster). Some transports move a
  // pair's two directions slower than one alone: Open MPI's TCP transport
  // carries both over one connection, large messages at about half the rate.
  std::vector<BandwidthPoint> exchangeTable;

  // The bandwidth a message of `bytes` gets on this link; `exchange`: its
  // reverse flow (same two endpoints) runs at the same time.
  BytesPerSecond bandwidthFor(Bytes bytes, bool exchange = false) const {
    if (exchange && !exchangeTable.empty())
      return interpolateBandwidth(exchangeTable, bytes);
    return bandwidthTable.empty() ? bandwidth : interpolateBandwidth(bandwidthTable, bytes);
  }
  bool pricesBySize() const { return !bandwidthTable.empty() || !exchangeTable.empty(); }
  // Seconds per byte of one flow of `bytes`-byte messages when a share
  // `exchangeShare` of them travel beside their reverse (PatternCost).
  double secondsPerByte(Bytes bytes, double exchangeShare) const {
    return (1 - exchangeShare) / bandwidthFor(bytes, false).value() +
           exchangeShare / bandwidthFor(bytes, true).value();
  }
};

// One level of the hierarchy: `group` units of the level below share a switch.
struct TopologyLevel {
  std::string name;
  int group = 1;  // 0: any number (outermost level only)
  LinkSpec link;
};

struct Cluster {
  std::string name;
  std::string description;
  std::string sourceFile;
  // Set when `strata calibrate --network NET` fitted per-kind efficiencies on
  // NET's own layers: predictions of NET then are not held-out ("" otherwise).
  std::string fittedOn;
  DeviceSpec device;
  std::vector<TopologyLevel> levels;  // innermost first

  // Number of devices, or -1 when the outermost level allows any number.
  int64_t capacity() const;
};

}  // namespace strata

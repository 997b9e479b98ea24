// Alpha-beta-gamma costs of collectives on a Topology.
//
// Each function returns the time of the whole collective and the bytes every
// rank sends and receives. alpha and beta come from the topology's bottleneck
// link for each step's pattern (topology.h); gamma is the device's reduction
// cost per byte. Segmented collectives pipeline their stages:
//
//   T = sum of stage times + (segments - 1) * slowest stage time
//
// The table of steps, bytes per worker and time formulas is in
// docs/cost-model.md; each function's comment repeats its row.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "strata/model/allreduce_algorithm.h"
#include "strata/model/ring.h"
#include "strata/model/topology.h"
#include "strata/model/units.h"

namespace strata {

// What the collectives need besides the topology.
struct CommParams {
  Bytes segment;       // pipelining granularity; 0 = unsegmented
  double gamma = 0.0;  // seconds per byte reduced (1 / reduce bandwidth)
  // false: the group collectives leave CollectiveCost::sent and received
  // empty (estimate's countBytes).
  bool countBytes = true;
};

struct CollectiveCost {
  Seconds time;
  std::string algorithm;         // allReduce: the algorithm run (auto: the one it picked)
  int steps = 0;                 // sequential communication steps (not counting segments)
  std::vector<double> sent;      // bytes sent per rank
  std::vector<double> received;  // bytes received per rank
  int bottleneckLink = -1;       // the link that limits the costliest step
  bool bottleneckUp = true;
};

// What `auto` chooses among, in order of preference on a tie: the Baidu ring,
// the hierarchical ring (only where it differs from the ring: whole nodes,
// two or more), the double binary tree and recursive halving-doubling. The
// naive reducer and the direct all-to-all are never picked (NCCL has neither).
// Returns the candidate whose allReduce time is least for n bytes.
AllreduceAlgorithm chooseAllreduce(const Topology& topo, Bytes n, const CommParams& p);

// "ring" or, for auto, what it picked: "auto: tree for 3 buffers of 25.0 MiB,
// ring for 1 of 7.6 MiB" (each algorithm with its count and mean size).
// `picks`: the algorithm run and the bytes of each buffer.
std::string describeAllreduce(AllreduceAlgorithm requested,
                              const std::vector<std::pair<std::string, double>>& picks);

// Pipelined time of `segments` equal segments through stages of the given times.
Seconds pipelineTime(int segments, std::initializer_list<Seconds> stageTimes);
Seconds pipelineTime(int segments, std::span<const Seconds> stageTimes);
// Number of segments for a buffer of `bytes` (>= 1); throws
// OptionError("--segment") when it would not fit an int.
int segmentCount(Bytes bytes, Bytes segment);

// Times alone (no per-rank byte counts) of broadcast and reduce, for callers
// that run K of them (owt-b's rounds) and count bytes in closed form.
Seconds broadcastTime(const Topology& topo, int root, Bytes n);
Seconds reduceTime(const Topology& topo, int root, Bytes n, const CommParams& p);

// src -> dst: alpha + n beta.
CollectiveCost pointToPoint(const Topology& topo, int src, int dst, Bytes n);
// Flat broadcast, root -> each other rank: alpha + n (K-1) beta_root when the
// root's link is the bottleneck.
CollectiveCost broadcast(const Topology& topo, int root, Bytes n);
// Each rank -> root, n bytes each.
CollectiveCost gather(const Topology& topo, int root, Bytes perRank);
// Each rank -> root, streamed and summed at the root segment by segment.
CollectiveCost reduce(const Topology& topo, int root, Bytes n, const CommParams& p);
// Every rank's n bytes to every rank: ring (K-1 steps) or direct (1 step).
CollectiveCost allGather(const Topology& topo, Bytes perRank, bool ring);
// Reduce n bytes so rank i holds the sum of chunk i: ring or direct.
CollectiveCost reduceScatter(const Topology& topo, Bytes n, const CommParams& p, bool ring);
// Every rank sends n distinct bytes to every other rank.
CollectiveCost allToAll(const Topology& topo, Bytes perPair);
// Collectives inside groups of ranks, every group at once: the groups are
// the rings of Topology::ringStep(span, stride). Span t, stride 1: the
// consecutive t-rank groups of tensor parallelism; span K, stride t: the
// ranks equal mod t, the data-parallel groups across them. n is the whole
// buffer of one rank: a reduce-scatter leaves each rank n/size summed, an
// all-gather gathers n from size pieces of n/size, an allreduce is the two.
//
// `algorithm` says how each group runs them (--allreduce with --tp, --pp or
// --zero): kRing, one ring per group; kHierarchical, two levels (see
// hierarchicalLevels): inside each node among the group's members there,
// then across the nodes one ring per rail, and back; kAuto: whichever of the
// two is cheaper for the buffer (ring where hierarchical does not apply).
struct RankGroups {
  int span = 1;
  int stride = 1;
  AllreduceAlgorithm algorithm = AllreduceAlgorithm::kRing;
  int size() const { return span / stride; }
};
enum class GroupOp { kReduceScatter, kAllGather, kAllReduce };

// The hierarchical levels of data-parallel groups of stride s on nodes of G
// devices, K = span workers:
//
//   G = 8, s = 2 (tp 2): node 0: r0 r2 r4 r6 | r1 r3 r5 r7   node 1: r8 ...
//     inner {G, s}: each node's G/s members of a group, a ring of G/s (NVLink)
//     outer {K, G}: the ranks equal mod G, one per node, a ring per rail
//   s a multiple of G (tp x pp fills nodes): a group has one member per node;
//     inner is empty (size 1), outer the groups themselves (the rails' rings)
//   span dividing G (--placement tp,dp,pp, span tp x dp): each group inside
//     one node; inner the groups themselves, outer empty
//
// Reduce-scatter: inner on n, then outer on n / (G/s), leaving n / dp on each
// rank; all-gather: the reverse; allreduce: reduce-scatter then all-gather.
// Throws OptionError when K is not whole nodes or neither of s and G divides
// the other.
struct GroupLevels {
  RankGroups inner, outer;
};
GroupLevels hierarchicalLevels(const Topology& topo, RankGroups groups);

// kAuto resolved for one buffer: kHierarchical where it applies and is
// strictly cheaper than the ring, else kRing. Other algorithms are returned
// as they are.
AllreduceAlgorithm chooseGroupAlgorithm(const Topology& topo, RankGroups groups, GroupOp op,
                                        Bytes n, const CommParams& p);

// `groups.algorithm`'s collective (CollectiveCost::algorithm: what ran, "ring"
// or "hierarchical").
CollectiveCost groupCollective(const Topology& topo, RankGroups groups, GroupOp op, Bytes n,
                               const CommParams& p);
CollectiveCost groupReduceScatter(const Topology& topo, RankGroups groups, Bytes n,
                                  const CommParams& p);
CollectiveCost groupAllGather(const Topology& topo, RankGroups groups, Bytes n,
                              const CommParams& p);
CollectiveCost groupAllReduce(const Topology& topo, RankGroups groups, Bytes n,
                              const CommParams& p);

// Sum n bytes across ranks, result on every rank (kAuto: chooseAllreduce's
// pick). kHierarchical throws UserError when K is not whole nodes.
CollectiveCost allReduce(const Topology& topo, AllreduceAlgorithm algorithm, Bytes n,
                         const CommParams& p);

}  // namespace strata

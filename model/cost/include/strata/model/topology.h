// A cluster with K workers placed on it: which links each transfer crosses,
// and the alpha-beta cost of a transfer pattern on its bottleneck link.
//
// A pattern is a set of flows that run at the same time, each carrying the same
// number of bytes (every collective step in strata is such a pattern). Its time
// for n bytes per flow is
//
//   T(n) = alpha + n * max over links l of (flows crossing l in its busier
//                                           direction) / beta_l
//
// (both directions added on a half-duplex link), where alpha is the latency of
// the highest level any flow crosses. Switches are non-blocking; only links
// limit bandwidth. Patterns depend only on K, so their costs are cached.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "strata/model/cluster.h"
#include "strata/model/units.h"

namespace strata {

struct Flow {
  int src = 0;
  int dst = 0;
};

// NCCL's double binary tree (Sanders, Speck & Traff 2009; NCCL 2.4): tree A
// is the in-order binary tree on positions 1..K (rank r at position r+1, a
// position's height the number of its trailing zero bits, a parent past K
// replaced by its own parent); tree B is A mirrored (rank r at position K-r)
// when K is even, shifted by one rank when K is odd, so that most ranks are
// a leaf in one tree and inside the other. Each tree carries half the buffer.
//
//      tree A (K = 8)              tree B (rank r at position K - r)
//            r7                          r0
//            r3                          r4
//        r1      r5                  r6      r2
//      r0  r2  r4  r6              r7  r5  r3  r1
//
// A stage is every flow child -> parent whose child has one height, in both
// trees at once (the reduce goes up stage by stage, lowest height first; the
// broadcast comes down the same flows reversed, in reverse order).
struct TreeStage {
  std::vector<Flow> flows;  // child -> parent
  std::vector<int> tree;    // per flow: 0 (A) or 1 (B)
  int inputs = 0;           // the most flows into one parent
};
std::vector<TreeStage> doubleBinaryTree(int workers);
// The double binary trees of the groups of ringNext(span, stride) among
// `workers` ranks, every group's flows in each stage: position j of the
// group at `base` (block + offset) is rank base + j stride.
std::vector<TreeStage> groupTrees(int workers, int span, int stride);

// A pattern's latency is the largest of its flows' meet levels' (a tie goes
// to a level that pays it once per step): folds in a flow that meets at `met`.
inline void raiseLatency(Seconds& latency, bool& perStep, const LinkSpec& met) {
  if (met.latency > latency || (met.latency == latency && met.latencyPerStep)) {
    latency = met.latency;
    perStep = met.latencyPerStep;
  }
}

// True when every flow between two different workers has its reverse among
// `flows` (pairs exchanging both ways at once).
bool allExchanges(std::span<const Flow> flows);
// PatternCost::exchangeShare of an all-to-all of K workers as the executor
// runs it (K-1 shifted rounds; round K/2 pairs both ways when K is even).
double allToAllExchangeShare(int workers);

// Cost of a pattern as a function of the bytes each flow carries.
struct PatternCost {
  Seconds latency;
  double secondsPerByte = 0;       // on the bottleneck link, per byte of one flow
  int bottleneckLink = -1;         // -1: no flow crosses any link
  bool bottleneckUp = true;        // direction on the bottleneck link (up: towards the switch)
  const LinkSpec* link = nullptr;  // the bottleneck link's spec
  // Share of the pattern's bytes that pairs send to each other at once (a
  // flow and its reverse together), priced by the link's exchange table when
  // it has one: 1 for a 2-worker ring step or pairs swapping, 0 for a ring of
  // 3 or more; an all-to-all runs as K-1 shifted rounds (send to i+r, receive
  // from i-r), of which only r = K/2 (K even) pairs both ways: 1/(K-1).
  double exchangeShare = 0;
  // The latency is that of a level whose segments pay it once per step
  // (LinkSpec::latencyPerStep): a segment issued right behind another of
  // its step moves its bytes without it.
  bool latencyPerStep = false;

  // alpha + n x (flows / beta) on the bottleneck link, with beta taken for a
  // message of n bytes when the link has a bandwidth table.
  Seconds time(Bytes perFlow) const {
    double perByte = secondsPerByte;
    if (link && link->pricesBySize())
      perByte *= link->bandwidth.value() * link->secondsPerByte(perFlow, exchangeShare);
    return latency + Seconds(perFlow.value() * perByte);
  }
};

// The workers whose traffic a link carries: workers first..last (one unit of
// its level) whose position in the unit modulo `lanes` is `lane`.
struct LinkUsers {
  int first = 0;
  int last = -1;
  int lanes = 1;
  int lane = 0;
  bool uses(int worker) const {
    return worker >= first && worker <= last && (worker - first) % lanes == lane;
  }
};

// The double binary trees of groups of ranks, every group at once (the
// groups of Topology::ringStep(span, stride)): each stage's flows of every
// group, the cost of each stage up (child -> parent) and down, and per
// transfer stage in order (up 0..S-1, then down S-1..0: position p) the
// positions of the other stages whose flows load a link direction it loads
// too (bit q set).
struct TreeView {
  std::vector<TreeStage> stages;
  std::vector<PatternCost> up, down;
  std::vector<uint64_t> conflicts;
};

class Topology {
 public:
  // Places workers 0..K-1 on devices 0..K-1. Throws UserError when K < 1 or
  // K exceeds the cluster's capacity.
  Topology(const Cluster& cluster, int workers);

  int workers() const { return workers_; }
  // True when every level's links are full duplex.
  bool allFullDuplex() const;
  const Cluster& cluster() const { return *cluster_; }

  // Level at which a and b first share a switch; -1 when a == b.
  int meetLevel(int a, int b) const;
  // Latency of a message from a to b (0 when a == b).
  Seconds latency(int a, int b) const;

  // Cost of any set of concurrent flows of equal size.
  PatternCost cost(std::span<const Flow> flows) const;
  // The same for a pattern named `key` (one per K: its flows are built by
  // `flows` the first time only), kept for the topology's life.
  const PatternCost& cost(const std::string& key,
                          const std::function<std::vector<Flow>()>& flows) const;

  // Cached patterns used by the collectives.
  const PatternCost& ringStep() const;  // every i sends to (i + 1) mod K
  // Every i sends to ringNext(i, span, stride) (collectives.h): rings inside
  // nodes, or one ring per rail across them. span must divide K.
  const PatternCost& ringStep(int span, int stride) const;
  // Devices of a node (the innermost level's group), at most K.
  int nodeSize() const;
  // The double binary trees of the groups of ringStep(span, stride) (span
  // must divide K); treeOf(K, 1) is the tree of all K ranks.
  const TreeView& treeOf(int span, int stride) const;
  // treeOf(K, 1)'s stages, stage i's cost up or down, and its conflicts.
  const std::vector<TreeStage>& tree() const;
  const PatternCost& treeCost(int stage, bool down) const;
  const std::vector<uint64_t>& treeConflicts() const;
  const PatternCost& allToAll() const;         // every i sends to every j != i
  const PatternCost& gather(int root) const;   // every i != root sends to root
  const PatternCost& scatter(int root) const;  // root sends to every i != root

  // "pcie-switch link of device 3 (up)" for reports.
  std::string describeLink(int link, bool up) const;
  // The workers that use `link` (linkIndex(level, w) == link exactly for those).
  LinkUsers linkUsers(int link) const;

  // Links: every unit's uplink (lane) at every level, numbered 0..linkCount()-1.
  int linkCount() const { return linkCount_; }
  // The link worker `worker` uses at `level` (its unit's uplink, its lane).
  int linkIndex(int level, int worker) const;
  int levelOfLink(int link) const;
  const LinkSpec& linkSpec(int link) const {
    return cluster_->levels[static_cast<size_t>(levelOfLink(link))].link;
  }

 private:
  // Latency of a pattern among all workers (root < 0) or into/out of a root.
  Seconds patternLatency(int root) const;
  // Gather into (intoRoot) or scatter out of `root`, from closed-form link loads.
  PatternCost rootPattern(int root, bool intoRoot) const;

  const Cluster* cluster_;
  int workers_;
  std::vector<int64_t> span_;      // devices per unit at each level (span_[0] = 1)
  std::vector<int> levelOffset_;   // first link index of each level
  std::vector<int> unitsAtLevel_;  // units (of the level below) at each level
  int linkCount_ = 0;
  mutable std::vector<int> up_, down_;  // scratch: flows per link and direction
  mutable std::optional<PatternCost> ringStep_, allToAll_;
  mutable std::map<std::pair<int, int>, PatternCost> rings_;
  mutable std::map<std::pair<int, int>, TreeView> trees_;
  mutable std::map<std::string, PatternCost> named_;
  mutable std::vector<std::optional<PatternCost>> gather_, scatter_;
};

}  // namespace strata

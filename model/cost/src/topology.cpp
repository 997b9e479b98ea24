#include "strata/model/topology.h"

#include <fmt/format.h>

#include <algorithm>

#include "strata/model/error.h"
#include "strata/model/ring.h"

namespace strata {

Topology::Topology(const Cluster& cluster, int workers) : cluster_(&cluster), workers_(workers) {
  if (workers < 1)
    throw OptionError("--workers", fmt::format("must be at least 1, got {}", workers));
  const auto cap = cluster.capacity();
  if (cap >= 0 && workers > cap)
    throw OptionError("--workers", fmt::format("cluster '{}' ({}) has {} devices; cannot place {} "
                                               "workers",
                                               cluster.name, cluster.sourceFile, cap, workers));
  const size_t levels = cluster.levels.size();
  span_.assign(levels + 1, 1);
  for (size_t l = 0; l < levels; ++l) {
    const int g = cluster.levels[l].group;
    span_[l + 1] = g == 0 ? int64_t{1} << 40 : span_[l] * g;
  }
  levelOffset_.resize(levels);
  unitsAtLevel_.resize(levels);
  for (size_t l = 0; l < levels; ++l) {
    levelOffset_[l] = linkCount_;
    unitsAtLevel_[l] = static_cast<int>((workers + span_[l] - 1) / span_[l]);
    linkCount_ += unitsAtLevel_[l] * cluster.levels[l].link.lanes;
  }
  up_.assign(static_cast<size_t>(linkCount_), 0);
  down_.assign(static_cast<size_t>(linkCount_), 0);
  gather_.resize(static_cast<size_t>(workers));
  scatter_.resize(static_cast<size_t>(workers));
}

bool Topology::allFullDuplex() const {
  for (const auto& l : cluster_->levels)
    if (!l.link.fullDuplex)
      return false;
  return true;
}

int Topology::meetLevel(int a, int b) const {
  if (a == b)
    return -1;
  const int levels = static_cast<int>(cluster_->levels.size());
  for (int l = 0; l < levels; ++l)
    if (a / span_[static_cast<size_t>(l) + 1] == b / span_[static_cast<size_t>(l) + 1])
      return l;
  return levels - 1;
}

Seconds Topology::latency(int a, int b) const {
  const int l = meetLevel(a, b);
  return l < 0 ? Seconds(0) : cluster_->levels[static_cast<size_t>(l)].link.latency;
}

int Topology::levelOfLink(int link) const {
  int level = 0;
  for (size_t l = 0; l < levelOffset_.size(); ++l)
    if (link >= levelOffset_[l])
      level = static_cast<int>(l);
  return level;
}

int Topology::linkIndex(int level, int worker) const {
  const auto l = static_cast<size_t>(level);
  const int lanes = cluster_->levels[l].link.lanes;
  const auto unit = static_cast<int>(worker / span_[l]);
  const auto lane = static_cast<int>((worker % span_[l]) % lanes);
  return levelOffset_[l] + unit * lanes + lane;
}

bool allExchanges(std::span<const Flow> flows) {
  // Flows grouped by source (a counting sort, O(flows + ranks): patterns of
  // every rank at 10^5 workers are checked often), then each looked up in
  // its destination's group.
  int ranks = 0;
  size_t pairs = 0;
  for (const auto& f : flows)
    if (f.src != f.dst) {
      ranks = std::max({ranks, f.src + 1, f.dst + 1});
      ++pairs;
    }
  if (pairs == 0)
    return false;
  std::vector<uint32_t> begin(static_cast<size_t>(ranks) + 1, 0);
  for (const auto& f : flows)
    if (f.src != f.dst)
      ++begin[static_cast<size_t>(f.src) + 1];
  for (size_t i = 1; i < begin.size(); ++i)
    begin[i] += begin[i - 1];
  std::vector<int> to(pairs);
  auto next = begin;
  for (const auto& f : flows)
    if (f.src != f.dst)
      to[next[static_cast<size_t>(f.src)]++] = f.dst;
  for (size_t r = 0; r + 1 < begin.size(); ++r)
    std::sort(to.begin() + begin[r], to.begin() + begin[r + 1]);
  return std::all_of(flows.begin(), flows.end(), [&](const Flow& f) {
    return f.src == f.dst ||
           std::binary_search(to.begin() + begin[static_cast<size_t>(f.dst)],
                              to.begin() + begin[static_cast<size_t>(f.dst) + 1], f.src);
  });
}

double allToAllExchangeShare(int workers) {
  return workers >= 2 && workers % 2 == 0 ? 1.0 / (workers - 1) : 0.0;
}

PatternCost Topology::cost(std::span<const Flow> flows) const {
  PatternCost result;
  result.exchangeShare = allExchanges(flows) ? 1.0 : 0.0;
  std::vector<int> touched;
  touched.reserve(flows.size() * 4);
  for (const auto& f : flows) {
    STRATA_ENFORCE_OP(f.src, <, workers_);
    STRATA_ENFORCE_OP(f.dst, <, workers_);
    const int meet = meetLevel(f.src, f.dst);
    if (meet < 0)
      continue;
    raiseLatency(result.latency, result.latencyPerStep,
                 cluster_->levels[static_cast<size_t>(meet)].link);
    for (int l = 0; l <= meet; ++l) {
      const int a = linkIndex(l, f.src);
      const int b = linkIndex(l, f.dst);
      if (up_[static_cast<size_t>(a)]++ == 0 && down_[static_cast<size_t>(a)] == 0)
        touched.push_back(a);
      if (down_[static_cast<size_t>(b)]++ == 0 && up_[static_cast<size_t>(b)] == 0)
        touched.push_back(b);
    }
  }
  // Level of each link: found by scanning offsets (few levels).
  auto levelOf = [&](int link) {
    int level = 0;
    for (size_t l = 0; l < levelOffset_.size(); ++l)
      if (link >= levelOffset_[l])
        level = static_cast<int>(l);
    return level;
  };
  for (int link : touched) {
    const auto i = static_cast<size_t>(link);
    const auto& spec = cluster_->levels[static_cast<size_t>(levelOf(link))].link;
    const double beta = spec.bandwidth.value();
    double perByte = 0;
    bool up = true;
    if (spec.fullDuplex) {
      up = up_[i] >= down_[i];
      perByte = (up ? up_[i] : down_[i]) / beta;
    } else {
      perByte = (up_[i] + down_[i]) / beta;
    }
    if (perByte > result.secondsPerByte) {
      result.secondsPerByte = perByte;
      result.bottleneckLink = link;
      result.bottleneckUp = up;
    }
    up_[i] = 0;
    down_[i] = 0;
  }
  if (result.bottleneckLink >= 0)
    result.link = &linkSpec(result.bottleneckLink);
  return result;
}

const PatternCost& Topology::ringStep() const {
  if (!ringStep_) {
    std::vector<Flow> flows;
    if (workers_ > 1)
      for (int i = 0; i < workers_; ++i)
        flows.push_back({i, (i + 1) % workers_});
    ringStep_ = cost(flows);
  }
  return *ringStep_;
}

const PatternCost& Topology::cost(const std::string& key,
                                  const std::function<std::vector<Flow>()>& flows) const {
  auto it = named_.find(key);
  if (it == named_.end())
    it = named_.emplace(key, cost(flows())).first;
  return it->second;
}

const PatternCost& Topology::ringStep(int span, int stride) const {
  STRATA_ENFORCE(span >= 1 && stride >= 1 && workers_ % span == 0 && span % stride == 0);
  if (span == workers_ && stride == 1)
    return ringStep();
  auto it = rings_.find({span, stride});
  if (it == rings_.end()) {
    std::vector<Flow> flows;
    if (span > stride)
      for (int i = 0; i < workers_; ++i)
        flows.push_back({i, ringNext(i, span, stride)});
    it = rings_.emplace(std::pair{span, stride}, cost(flows)).first;
  }
  return it->second;
}

std::vector<TreeStage> groupTrees(int workers, int span, int stride) {
  STRATA_ENFORCE(span >= 1 && stride >= 1 && workers % span == 0 && span % stride == 0);
  std::vector<TreeStage> out;
  for (const auto& st : doubleBinaryTree(span / stride)) {
    TreeStage all;
    all.inputs = st.inputs;
    for (int block = 0; block < workers; block += span)
      for (int offset = 0; offset < stride; ++offset)
        for (size_t f = 0; f < st.flows.size(); ++f) {
          const int base = block + offset;
          all.flows.push_back({base + st.flows[f].src * stride, base + st.flows[f].dst * stride});
          all.tree.push_back(st.tree[f]);
        }
    out.push_back(std::move(all));
  }
  return out;
}

const TreeView& Topology::treeOf(int span, int stride) const {
  STRATA_ENFORCE(span >= 1 && stride >= 1 && workers_ % span == 0 && span % stride == 0);
  auto it = trees_.find({span, stride});
  if (it != trees_.end())
    return it->second;
  TreeView v;
  v.stages = groupTrees(workers_, span, stride);
  for (const auto& st : v.stages) {
    v.up.push_back(cost(st.flows));
    std::vector<Flow> back;
    back.reserve(st.flows.size());
    for (const auto& f : st.flows)
      back.push_back({f.dst, f.src});
    v.down.push_back(cost(back));
  }
  // Per transfer stage p (up 0..S-1, then down S-1..0), the other stages
  // whose flows load a link direction it loads too.
  const size_t count = v.stages.size();
  STRATA_ENFORCE(2 * count <= 64);
  // Channel (link, direction; one per half-duplex link) -> stages loading it.
  std::vector<uint64_t> users(2 * static_cast<size_t>(linkCount_), 0);
  auto forEachChannel = [&](size_t p, auto&& visit) {
    const bool down = p >= count;
    for (const auto& f : v.stages[down ? 2 * count - 1 - p : p].flows) {
      const int src = down ? f.dst : f.src, dst = down ? f.src : f.dst;
      const int meet = meetLevel(src, dst);
      for (int l = 0; l <= meet; ++l)
        for (const auto& [w, up] : {std::pair{src, true}, std::pair{dst, false}}) {
          const int link = linkIndex(l, w);
          visit(2 * static_cast<size_t>(link) + (linkSpec(link).fullDuplex && !up ? 1 : 0));
        }
    }
  };
  for (size_t p = 0; p < 2 * count; ++p)
    forEachChannel(p, [&](size_t c) { users[c] |= uint64_t{1} << p; });
  v.conflicts.assign(2 * count, 0);
  for (size_t p = 0; p < 2 * count; ++p) {
    forEachChannel(p, [&](size_t c) { v.conflicts[p] |= users[c]; });
    v.conflicts[p] &= ~(uint64_t{1} << p);
  }
  return trees_.emplace(std::pair{span, stride}, std::move(v)).first->second;
}

const std::vector<TreeStage>& Topology::tree() const {
  return treeOf(workers_, 1).stages;
}

const PatternCost& Topology::treeCost(int stage, bool down) const {
  const auto& v = treeOf(workers_, 1);
  return (down ? v.down : v.up).at(static_cast<size_t>(stage));
}

const std::vector<uint64_t>& Topology::treeConflicts() const {
  return treeOf(workers_, 1).conflicts;
}

int Topology::nodeSize() const {
  const int group = cluster_->levels.front().group;
  return group == 0 ? workers_ : std::min(workers_, group);
}

// The patterns below have closed-form link loads, so their cost is O(levels)
// instead of O(flows) (an all-to-all of K = 10^5 would be 10^10 flows). A flow
// a -> b crosses the level-l link of a (up) and of b (down) exactly when a and
// b lie in different units of span_[l] devices. Inside a unit of n devices,
// lane j carries ceil(n / lanes) flows' worth of senders at most (lane 0).
// Equality with the flow-by-flow cost() is tested.

namespace {
int64_t laneMax(int64_t n, int lanes) {
  return (n + lanes - 1) / lanes;
}
}  // namespace

Seconds Topology::patternLatency(int root) const {
  // The largest latency of any level where two of the pattern's endpoints
  // first meet: level l is met when a unit of span_[l+1] devices (the root's,
  // or the largest) holds more than one unit of span_[l].
  Seconds alpha;
  const size_t levels = unitsAtLevel_.size();
  auto unitSize = [&](size_t l) -> int64_t {
    if (l >= levels)
      return workers_;
    if (root < 0)
      return std::min<int64_t>(span_[l], workers_);
    const int64_t full = workers_ / span_[l];
    return root / span_[l] < full ? span_[l] : workers_ % span_[l];
  };
  for (size_t l = 0; l < levels; ++l)
    if (unitSize(l + 1) > unitSize(l))
      alpha = max(alpha, cluster_->levels[l].link.latency);
  return alpha;
}

const PatternCost& Topology::allToAll() const {
  if (!allToAll_) {
    PatternCost pc;
    pc.exchangeShare = allToAllExchangeShare(workers_);
    if (workers_ > 1)
      pc.latency = patternLatency(-1);
    for (size_t l = 0; l < unitsAtLevel_.size(); ++l) {
      const auto& link = cluster_->levels[l].link;
      const int64_t fullUnits = workers_ / span_[l];
      const int64_t partial = workers_ % span_[l];
      for (int64_t n : {fullUnits > 0 ? span_[l] : int64_t{0}, partial}) {
        if (n == 0)
          continue;
        // Each of the unit's senders on the busiest lane sends to every worker outside it.
        const double flows = double(laneMax(n, link.lanes)) * double(workers_ - n);
        const double perByte = flows * (link.fullDuplex ? 1.0 : 2.0) / link.bandwidth.value();
        if (perByte > pc.secondsPerByte) {
          pc.secondsPerByte = perByte;
          const int64_t unit = n == span_[l] && fullUnits > 0 ? 0 : fullUnits;
          pc.bottleneckLink = levelOffset_[l] + static_cast<int>(unit) * link.lanes;
          pc.bottleneckUp = true;
        }
      }
    }
    if (pc.bottleneckLink >= 0)
      pc.link = &linkSpec(pc.bottleneckLink);
    allToAll_ = pc;
  }
  return *allToAll_;
}

PatternCost Topology::rootPattern(int root, bool intoRoot) const {
  PatternCost pc;
  if (workers_ == 1)
    return pc;
  pc.latency = patternLatency(root);
  for (size_t l = 0; l < unitsAtLevel_.size(); ++l) {
    const auto& link = cluster_->levels[l].link;
    const int64_t fullUnits = workers_ / span_[l];
    const int64_t partial = workers_ % span_[l];
    const int64_t rootUnit = root / span_[l];
    const int64_t rootUnitSize = rootUnit < fullUnits ? span_[l] : partial;
    const double beta = link.bandwidth.value();
    // The root's own link carries every flow from (to) outside its unit.
    const double rootPerByte = double(workers_ - rootUnitSize) / beta;
    if (rootPerByte > pc.secondsPerByte) {
      pc.secondsPerByte = rootPerByte;
      pc.bottleneckLink = linkIndex(static_cast<int>(l), root);
      pc.bottleneckUp = !intoRoot;
    }
    // Every other unit's busiest lane carries its senders (receivers) there.
    int64_t other = -1, otherSize = 0;
    if (rootUnit < fullUnits && fullUnits >= 2) {
      other = rootUnit == 0 ? 1 : 0;
      otherSize = span_[l];
    } else if (rootUnit >= fullUnits && fullUnits >= 1) {
      other = 0;
      otherSize = span_[l];
    } else if (partial > 0 && rootUnit < fullUnits) {
      other = fullUnits;
      otherSize = partial;
    }
    if (other >= 0) {
      const double perByte = double(laneMax(otherSize, link.lanes)) / beta;
      if (perByte > pc.secondsPerByte) {
        pc.secondsPerByte = perByte;
        pc.bottleneckLink = levelOffset_[l] + static_cast<int>(other) * link.lanes;
        pc.bottleneckUp = intoRoot;
      }
    }
  }
  if (pc.bottleneckLink >= 0)
    pc.link = &linkSpec(pc.bottleneckLink);
  return pc;
}

const PatternCost& Topology::gather(int root) const {
  auto& slot = gather_.at(static_cast<size_t>(root));
  if (!slot)
    slot = rootPattern(root, true);
  return *slot;
}

const PatternCost& Topology::scatter(int root) const {
  auto& slot = scatter_.at(static_cast<size_t>(root));
  if (!slot)
    slot = rootPattern(root, false);
  return *slot;
}

std::string Topology::describeLink(int link, bool up) const {
  if (link < 0)
    return "none";
  size_t level = 0;
  for (size_t l = 0; l < levelOffset_.size(); ++l)
    if (link >= levelOffset_[l])
      level = l;
  const auto& spec = cluster_->levels[level];
  const int lanes = spec.link.lanes;
  const int unit = (link - levelOffset_[level]) / lanes;
  const int lane = (link - levelOffset_[level]) % lanes;
  std::string who;
  if (level == 0) {
    who = fmt::format("device {}", unit);
  } else {
    const auto first = unit * span_[level];
    const auto last = std::min<int64_t>((unit + 1) * span_[level], workers_) - 1;
    who = fmt::format("devices {}-{}", first, last);
  }
  if (lanes > 1)
    who += fmt::format(" lane {}", lane);
  const char* dir = spec.link.fullDuplex ? (up ? " (up)" : " (down)") : " (half duplex)";
  return fmt::format("{} link of {}{}", spec.name, who, dir);
}

LinkUsers Topology::linkUsers(int link) const {
  STRATA_ENFORCE_OP(link, >=, 0);
  STRATA_ENFORCE_OP(link, <, linkCount_);
  const int level = levelOfLink(link);
  const auto l = static_cast<size_t>(level);
  LinkUsers u;
  u.lanes = cluster_->levels[l].link.lanes;
  const int unit = (link - levelOffset_[l]) / u.lanes;
  u.lane = (link - levelOffset_[l]) % u.lanes;
  u.first = static_cast<int>(unit * span_[l]);
  u.last = static_cast<int>(std::min<int64_t>((unit + 1) * span_[l], workers_) - 1);
  return u;
}

namespace {

// Position of rank r in tree A, and the rank at a position of tree `t`.
int positionIn(int tree, int rank, int k) {
  if (tree == 0)
    return rank + 1;
  return k % 2 == 0 ? k - rank : (rank + 1) % k + 1;
}
int rankAt(int tree, int position, int k) {
  if (tree == 0)
    return position - 1;
  return k % 2 == 0 ? k - position : (position - 2 + k) % k;
}

int heightOf(int position) {
  int h = 0;
  while ((position >> h & 1) == 0)
    ++h;
  return h;
}

// The parent of a position in the in-order tree on 1..K; 0 for the root.
int parentOf(int position, int k) {
  int root = 1;
  while (root * 2 <= k)
    root *= 2;
  int q = position;
  do {
    if (q == root)
      return 0;
    const int h = heightOf(q);
    q = (q >> (h + 1) & 1) ? q - (1 << h) : q + (1 << h);
  } while (q > k);
  return q;
}

}  // namespace

std::vector<TreeStage> doubleBinaryTree(int workers) {
  std::vector<TreeStage> byHeight;
  if (workers < 2)
    return byHeight;
  for (int tree = 0; tree < 2; ++tree)
    for (int r = 0; r < workers; ++r) {
      const int pos = positionIn(tree, r, workers);
      const int parent = parentOf(pos, workers);
      if (parent == 0)
        continue;
      const auto h = static_cast<size_t>(heightOf(pos));
      if (byHeight.size() <= h)
        byHeight.resize(h + 1);
      byHeight[h].flows.push_back({r, rankAt(tree, parent, workers)});
      byHeight[h].tree.push_back(tree);
    }
  std::vector<TreeStage> stages;
  std::vector<int> into(static_cast<size_t>(workers), 0);
  for (auto& st : byHeight) {
    if (st.flows.empty())
      continue;
    for (const auto& f : st.flows)
      st.inputs = std::max(st.inputs, ++into[static_cast<size_t>(f.dst)]);
    for (const auto& f : st.flows)
      into[static_cast<size_t>(f.dst)] = 0;
    stages.push_back(std::move(st));
  }
  return stages;
}

}  // namespace strata

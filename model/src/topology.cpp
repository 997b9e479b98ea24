#include "strata/model/topology.h"

#include <fmt/format.h>

#include "strata/model/error.h"

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

int Topology::linkIndex(int level, int worker) const {
  const auto l = static_cast<size_t>(level);
  const int lanes = cluster_->levels[l].link.lanes;
  const auto unit = static_cast<int>(worker / span_[l]);
  const auto lane = static_cast<int>((worker % span_[l]) % lanes);
  return levelOffset_[l] + unit * lanes + lane;
}

PatternCost Topology::cost(std::span<const Flow> flows) const {
  PatternCost result;
  std::vector<int> touched;
  touched.reserve(flows.size() * 4);
  for (const auto& f : flows) {
    STRATA_ENFORCE_OP(f.src, <, workers_);
    STRATA_ENFORCE_OP(f.dst, <, workers_);
    const int meet = meetLevel(f.src, f.dst);
    if (meet < 0)
      continue;
    result.latency = max(result.latency, cluster_->levels[static_cast<size_t>(meet)].link.latency);
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

const PatternCost& Topology::allToAll() const {
  if (!allToAll_) {
    std::vector<Flow> flows;
    for (int i = 0; i < workers_; ++i)
      for (int j = 0; j < workers_; ++j)
        if (i != j)
          flows.push_back({i, j});
    allToAll_ = cost(flows);
  }
  return *allToAll_;
}

const PatternCost& Topology::gather(int root) const {
  auto& slot = gather_.at(static_cast<size_t>(root));
  if (!slot) {
    std::vector<Flow> flows;
    for (int i = 0; i < workers_; ++i)
      if (i != root)
        flows.push_back({i, root});
    slot = cost(flows);
  }
  return *slot;
}

const PatternCost& Topology::scatter(int root) const {
  auto& slot = scatter_.at(static_cast<size_t>(root));
  if (!slot) {
    std::vector<Flow> flows;
    for (int i = 0; i < workers_; ++i)
      if (i != root)
        flows.push_back({root, i});
    slot = cost(flows);
  }
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

}  // namespace strata

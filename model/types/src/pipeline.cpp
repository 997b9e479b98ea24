#include "strata/model/pipeline.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "strata/model/error.h"

namespace strata {

std::vector<PipeTask> pipelineOrder(PipelineSchedule schedule, int stages, int virtualStages,
                                    int microbatches, int stage) {
  const int p = stages, m = microbatches;
  STRATA_ENFORCE(p >= 1 && m >= 1 && stage >= 0 && stage < p);
  std::vector<PipeTask> order;
  if (schedule == PipelineSchedule::kGpipe) {
    for (int i = 0; i < m; ++i)
      order.push_back({false, 0, i});
    for (int i = m - 1; i >= 0; --i)
      order.push_back({true, 0, i});
    return order;
  }
  const int v = schedule == PipelineSchedule::kInterleaved ? virtualStages : 1;
  STRATA_ENFORCE(v >= 1);
  const int total = m * v;
  // The k-th forward (backward) of the stage: its micro-batch and chunk.
  // Interleaved: groups of P micro-batches through chunk 0, 1, ... (forward)
  // or V - 1, ... 0 (backward); 1f1b is the case V = 1.
  auto task = [&](int k, bool backward) {
    const int inGroup = k % (p * v);
    int chunk = inGroup / p;
    if (backward)
      chunk = v - 1 - chunk;
    return PipeTask{backward, chunk, (k / (p * v)) * p + inGroup % p};
  };
  int warmup = 0;
  if (v == 1)
    warmup = std::min(p - stage - 1, m);
  else
    warmup = m == p ? total : std::min((p - stage - 1) * 2 + (v - 1) * p, total);
  for (int k = 0; k < warmup; ++k)
    order.push_back(task(k, false));
  const int steady = total - warmup;
  for (int i = 0; i < steady; ++i) {
    order.push_back(task(warmup + i, false));
    order.push_back(task(i, true));
  }
  for (int k = steady; k < total; ++k)
    order.push_back(task(k, true));
  return order;
}

double peakInFlight(const std::vector<PipeTask>& order, const std::vector<double>& perChunk) {
  double held = 0, peak = 0;
  for (const auto& t : order) {
    const double x = perChunk.at(static_cast<size_t>(t.chunk));
    held += t.backward ? -x : x;
    peak = std::max(peak, held);
  }
  return peak;
}

double PipelinePlay::bubble() const {
  return busy.empty() ? 0.0 : span - *std::max_element(busy.begin(), busy.end());
}

PipelinePlay playPipeline(PipelineSchedule schedule, int stages, int virtualStages,
                          int microbatches, const std::vector<double>& fwd,
                          const std::vector<double>& bwd, const std::vector<double>& sendF,
                          const std::vector<double>& sendB) {
  const int p = stages, m = microbatches;
  const int v = schedule == PipelineSchedule::kInterleaved ? virtualStages : 1;
  const int q = p * v;
  STRATA_ENFORCE_OP(static_cast<int>(fwd.size()), ==, q);
  STRATA_ENFORCE_OP(static_cast<int>(bwd.size()), ==, q);
  STRATA_ENFORCE_OP(static_cast<int>(sendF.size()), ==, q - 1);
  STRATA_ENFORCE_OP(static_cast<int>(sendB.size()), ==, q - 1);
  std::vector<std::vector<PipeTask>> order;
  for (int s = 0; s < p; ++s)
    order.push_back(pipelineOrder(schedule, p, v, m, s));
  // End of each chunk's forward and backward per micro-batch (-1: not yet).
  std::vector<std::vector<double>> fEnd(size_t(q), std::vector<double>(size_t(m), -1.0));
  auto bEnd = fEnd;
  std::vector<size_t> next(size_t(p), 0);
  std::vector<double> freeAt(size_t(p), 0.0);
  PipelinePlay play;
  play.busy.assign(size_t(p), 0.0);
  play.lastStart.assign(size_t(p), 0.0);
  // Sweep the stages, each as far as its next task's input has arrived,
  // until none moves: a task starts at max(stage free, input arrived).
  for (bool moved = true; moved;) {
    moved = false;
    for (int s = 0; s < p; ++s)
      for (auto& k = next[size_t(s)]; k < order[size_t(s)].size(); ++k) {
        const auto& task = order[size_t(s)][k];
        const int j = task.chunk * p + s;
        const auto mi = static_cast<size_t>(task.micro);
        double ready = 0;
        if (!task.backward && j > 0) {
          if (fEnd[size_t(j) - 1][mi] < 0)
            break;
          ready = fEnd[size_t(j) - 1][mi] + sendF[size_t(j) - 1];
        } else if (task.backward && j + 1 < q) {
          if (bEnd[size_t(j) + 1][mi] < 0)
            break;
          ready = bEnd[size_t(j) + 1][mi] + sendB[size_t(j)];
        }
        const double start = std::max(freeAt[size_t(s)], ready);
        const double d = (task.backward ? bwd : fwd)[size_t(j)];
        (task.backward ? bEnd : fEnd)[size_t(j)][mi] = start + d;
        freeAt[size_t(s)] = start + d;
        play.busy[size_t(s)] += d;
        play.lastStart[size_t(s)] = start;
        moved = true;
      }
  }
  for (int s = 0; s < p; ++s)
    STRATA_ENFORCE_OP(next[size_t(s)], ==, order[size_t(s)].size());  // no schedule deadlocks
  play.span = *std::max_element(freeAt.begin(), freeAt.end());
  for (const auto& o : order)
    play.last.push_back(o.back());
  return play;
}

std::vector<int> pipelineCutPoints(const Network& network) {
  const int n = static_cast<int>(network.layers.size());
  // Per c: the lowest layer read by a layer from c on.
  std::vector<int> lowest(static_cast<size_t>(n) + 1, n);
  for (int j = n - 1; j >= 0; --j) {
    int low = lowest[static_cast<size_t>(j) + 1];
    for (int in : network.layers[static_cast<size_t>(j)].inputs)
      if (in >= 0)
        low = std::min(low, in);
    lowest[static_cast<size_t>(j)] = low;
  }
  std::vector<int> cuts;
  for (int c = 1; c < n; ++c)
    if (lowest[static_cast<size_t>(c)] >= c - 1)
      cuts.push_back(c);
  return cuts;
}

std::string pipelineObstacle(const Network& network, int chunks) {
  if (chunks <= 1)
    return "";
  const auto cuts = pipelineCutPoints(network);
  if (static_cast<int>(cuts.size()) + 1 >= chunks)
    return "";
  return fmt::format(
      "network '{}' can be cut into at most {} pipeline chunks (it is cut only "
      "where one tensor crosses: between blocks, or anywhere in a chain), not {}",
      network.name, cuts.size() + 1, chunks);
}

std::vector<int> chunkStartsByName(const Network& network, int chunks,
                                   const std::vector<std::string>& names) {
  const int n = static_cast<int>(network.layers.size());
  if (static_cast<int>(names.size()) != chunks - 1)
    throw OptionError("--stage-starts",
                      fmt::format("gives {} start{} for {} chunks; give the first layer of each "
                                  "chunk after the first: {} names",
                                  names.size(), names.size() == 1 ? "" : "s", chunks, chunks - 1));
  const auto cuts = pipelineCutPoints(network);
  std::vector<int> starts{0};
  for (const auto& name : names) {
    int at = -1;
    for (int i = 0; i < n && at < 0; ++i)
      if (network.layers[static_cast<size_t>(i)].name == name)
        at = i;
    // A repeated block's name: its first layer ("h.7" for h.7.ln1).
    for (int i = 0; i < n && at < 0; ++i)
      if (network.layers[static_cast<size_t>(i)].name.rfind(name + ".", 0) == 0)
        at = i;
    if (at < 0)
      throw OptionError("--stage-starts",
                        fmt::format("'{}' is no layer or block of network '{}' (strata describe "
                                    "{} lists them)",
                                    name, network.name, network.name));
    if (at <= starts.back())
      throw OptionError(
          "--stage-starts",
          fmt::format("'{}' (layer {}) does not come after the chunk before it starts (layer {}): "
                      "give the starts in the network's order, each chunk one layer or more",
                      name, at, starts.back()));
    if (!std::binary_search(cuts.begin(), cuts.end(), at)) {
      const auto after = std::lower_bound(cuts.begin(), cuts.end(), at);
      std::vector<std::string> near;
      if (after != cuts.begin())
        near.push_back(network.layers[static_cast<size_t>(*std::prev(after))].name);
      if (after != cuts.end())
        near.push_back(network.layers[static_cast<size_t>(*after)].name);
      throw OptionError(
          "--stage-starts",
          fmt::format(
              "network '{}' cannot be cut before '{}' (more than one tensor crosses "
              "there); the nearest places it can: {}",
              network.name, network.layers[static_cast<size_t>(at)].name,
              near.empty() ? std::string("none") : fmt::format("{}", fmt::join(near, ", "))));
    }
    starts.push_back(at);
  }
  starts.push_back(n);
  return starts;
}

std::vector<int> balancedChunks(const Network& network, int chunks,
                                const std::vector<double>& cost) {
  const int n = static_cast<int>(network.layers.size());
  STRATA_ENFORCE_OP(static_cast<int>(cost.size()), ==, n);
  STRATA_ENFORCE(pipelineObstacle(network, chunks).empty());
  std::vector<double> prefix(static_cast<size_t>(n) + 1, 0.0);
  for (int i = 0; i < n; ++i)
    prefix[static_cast<size_t>(i) + 1] = prefix[static_cast<size_t>(i)] + cost[size_t(i)];
  const auto cuts = pipelineCutPoints(network);
  const int q = chunks;
  // Greedy under a limit: each chunk ends at the furthest cut keeping it
  // within `limit` and leaving a cut for each chunk after it; empty when the
  // limit cannot be kept.
  auto split = [&](double limit) {
    std::vector<int> starts{0};
    size_t next = 0;  // first cut after the current chunk's start
    for (int k = 0; k + 1 < q; ++k) {
      const int start = starts.back();
      while (next < cuts.size() && cuts[next] <= start)
        ++next;
      const size_t needAfter = static_cast<size_t>(q - k - 2);  // cuts still needed later
      int best = -1;
      size_t bestAt = 0;
      for (size_t c = next; c < cuts.size() && cuts.size() - c - 1 >= needAfter; ++c) {
        if (prefix[static_cast<size_t>(cuts[c])] - prefix[static_cast<size_t>(start)] > limit)
          break;
        best = cuts[c];
        bestAt = c;
      }
      if (best < 0)
        return std::vector<int>{};
      starts.push_back(best);
      next = bestAt + 1;
    }
    if (prefix[static_cast<size_t>(n)] - prefix[static_cast<size_t>(starts.back())] > limit)
      return std::vector<int>{};
    starts.push_back(n);
    return starts;
  };
  double lo = 0, hi = prefix[static_cast<size_t>(n)];
  auto best = split(hi);
  STRATA_ENFORCE(!best.empty());
  for (int it = 0; it < 100 && hi - lo > 1e-12 * std::max(1.0, hi); ++it) {
    const double mid = 0.5 * (lo + hi);
    if (auto s = split(mid); !s.empty()) {
      best = std::move(s);
      hi = mid;
    } else {
      lo = mid;
    }
  }
  return best;
}

}  // namespace strata

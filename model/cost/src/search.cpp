#include "strata/model/search.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>

#include "strata/model/collectives.h"
#include "strata/model/error.h"
#include "strata/model/estimate.h"
#include "strata/model/pipeline.h"
#include "strata/model/quantity_text.h"
#include "strata/model/tensor_parallel.h"

namespace strata {

namespace {

template <typename T>
std::vector<T> either(const std::optional<T>& fixed, std::vector<T> all) {
  return fixed ? std::vector<T>{*fixed} : all;
}

std::vector<int> divisors(int n) {
  std::vector<int> out;
  for (int d = 1; d <= n; ++d)
    if (n % d == 0)
      out.push_back(d);
  return out;
}

// The slowest worker's compute and exposed communication.
struct StepParts {
  double compute = 0, exposed = 0, bubble = 0;
};
StepParts partsOf(const StepEstimate& e) {
  StepParts p;
  for (const auto& w : e.workers) {
    p.compute = std::max(p.compute, w.compute.total().value());
    p.exposed = std::max(p.exposed, w.exposedCommunication.value());
  }
  p.bubble = e.pipelineBubble.value();
  return p;
}

std::string whyBest(const SearchRow& best, const SearchRow& next) {
  const auto a = partsOf(best.estimate), b = partsOf(next.estimate);
  struct Diff {
    const char* what;
    double d;  // next - best: positive where the best is faster
  };
  std::vector<Diff> diffs{{"compute", b.compute - a.compute},
                          {"exposed communication", b.exposed - a.exposed},
                          {"pipeline bubble", b.bubble - a.bubble}};
  std::sort(diffs.begin(), diffs.end(),
            [](const Diff& x, const Diff& y) { return std::abs(x.d) > std::abs(y.d); });
  std::vector<std::string> parts;
  for (const auto& d : diffs)
    if (std::abs(d.d) > 1e-3 * next.estimate.step.value())
      parts.push_back(fmt::format("{} {} {}", d.what, formatSeconds(Seconds(std::abs(d.d))),
                                  d.d > 0 ? "less" : "more"));
  std::string text =
      fmt::format("{} beats {}: step {} against {} ({:+.1f} %)", describeLayout(best.scenario),
                  describeLayout(next.scenario), formatSeconds(best.estimate.step),
                  formatSeconds(next.estimate.step),
                  100.0 * (next.estimate.step.value() / best.estimate.step.value() - 1.0));
  if (!parts.empty())
    text += fmt::format(": {}", fmt::join(parts, ", "));
  text += fmt::format("; memory {} against {} per worker", formatBytes(best.peakMemory),
                      formatBytes(next.peakMemory));
  return text;
}

}  // namespace

std::string describeLayout(const Scenario& sc) {
  const auto& o = sc.options;
  std::string s = fmt::format("dp {} x tp {} x pp {}", dataParallelSize(sc), o.tp, o.pp);
  if (o.pp > 1)
    s += o.schedule == PipelineSchedule::kInterleaved
             ? fmt::format(", interleaved x {}", o.virtualStages)
             : fmt::format(", {}", toString(o.schedule));
  s += fmt::format(", b {} x M {}", sc.batchPerWorker, o.microbatches);
  if (o.zero > 0)
    s += fmt::format(", ZeRO-{}", o.zero);
  if (o.recompute != Recompute::kNone)
    s += fmt::format(", recompute {}", toString(o.recompute));
  if (o.sequenceParallel)
    s += ", sp";
  return s;
}

SearchResult searchLayouts(const Network& net, const Cluster& cluster, const SearchSpace& space,
                           const std::function<void(int, int)>& progress) {
  const int k = space.workers, batch = space.globalBatch;
  const std::string workersOption = space.keywordNames ? "workers" : "--workers";
  const std::string batchOption = space.keywordNames ? "global_batch" : "--global-batch";
  auto optionName = [&](OptionKey key) {
    return std::string(space.keywordNames ? optionFileKey(key) : optionFlag(key));
  };
  if (k < 1)
    throw OptionError(workersOption, fmt::format("must be at least 1, got {}", k));
  if (batch < 1)
    throw OptionError(batchOption, fmt::format("must be at least 1, got {}", batch));
  if (!space.base.stageStarts.empty())
    throw OptionError(optionName(OptionKey::kStageStarts),
                      "search balances each layout's stages itself (the cut depends on pp and "
                      "the chunks); price a cut of your own with strata predict --pp");
  const bool attention = std::any_of(net.layers.begin(), net.layers.end(), [](const Layer& l) {
    return l.kind == LayerKind::kAttention;
  });
  const bool blocks = std::any_of(net.layers.begin(), net.layers.end(),
                                  [](const Layer& l) { return l.block >= 0; });
  const int node = workersPerNode(cluster, k);
  const int maxChunks = static_cast<int>(pipelineCutPoints(net).size()) + 1;

  const auto sync = space.base.gradientSync;
  if (sync != AllreduceAlgorithm::kRing && sync != AllreduceAlgorithm::kHierarchical &&
      sync != AllreduceAlgorithm::kAuto && sync != AllreduceAlgorithm::kTree)
    throw OptionError(
        optionName(OptionKey::kAllreduce),
        fmt::format("search tries tensor, pipeline and ZeRO layouts, whose "
                    "data-parallel groups synchronise by ring, hierarchical, tree or "
                    "auto; {} would leave plain data parallelism alone (price it with "
                    "strata predict)",
                    toString(sync)));
  // --allreduce hierarchical: K must be whole nodes (else no layout can
  // run it: the one error); a layout whose data-parallel groups straddle the
  // nodes unevenly (hierarchicalLevels) cannot, and is skipped as any other
  // combination K cannot take.
  std::optional<Topology> topo;
  if (space.base.gradientSync == AllreduceAlgorithm::kHierarchical) {
    topo.emplace(cluster, k);
    (void)hierarchicalLevels(*topo, RankGroups{k, 1, AllreduceAlgorithm::kHierarchical});
  }

  std::vector<Scenario> layouts;
  std::vector<int> tps;
  for (int t = 1; t <= std::min(node, kMaxTensorParallel); t *= 2)
    if (k % t == 0 && tensorParallelObstacle(net, t, false).empty())
      tps.push_back(t);
  std::vector<Recompute> recomputes{Recompute::kNone};
  if (attention)
    recomputes.push_back(Recompute::kSelective);
  if (blocks)
    recomputes.push_back(Recompute::kFull);
  for (int t : either(space.tp, tps))
    for (bool sp : either(space.sequenceParallel, {false, true})) {
      if (sp && (t == 1 || !tensorParallelObstacle(net, t, true).empty()))
        continue;
      for (int p : either(space.pp, divisors(k / std::max(1, t)))) {
        if (p > maxChunks || k % (int64_t{t} * p) != 0)
          continue;
        const int dp = k / (t * p);
        if (batch % dp != 0)
          continue;
        const int perReplica = batch / dp;
        std::vector<int> bs;
        for (int b = 1; b <= perReplica; b *= 2)
          if (perReplica % b == 0)
            bs.push_back(b);
        for (int b : either(space.microBatch, bs)) {
          if (perReplica % b != 0)
            continue;
          const int m = perReplica / b;
          std::vector<std::pair<PipelineSchedule, int>> schedules{{PipelineSchedule::k1f1b, 1}};
          if (p > 1 && m % p == 0)
            for (int v : {2, 4, 8})
              if (p * v <= maxChunks)
                schedules.push_back({PipelineSchedule::kInterleaved, v});
          for (auto [schedule, v] : schedules) {
            if (space.schedule && *space.schedule != schedule)
              continue;
            if (space.virtualStages && *space.virtualStages != v)
              continue;
            const bool pipelined = p > 1 || m > 1;
            for (int z : either(space.zero,
                                pipelined ? std::vector<int>{0, 1} : std::vector<int>{0, 1, 2, 3}))
              for (Recompute r : either(space.recompute, recomputes)) {
                Scenario sc;
                sc.strategy = Strategy::kRing;
                sc.workers = k;
                sc.batchPerWorker = b;
                sc.options = space.base;
                sc.options.tp = t;
                sc.options.sequenceParallel = sp;
                sc.options.pp = p;
                sc.options.microbatches = m;
                sc.options.schedule = schedule;
                sc.options.virtualStages = v;
                sc.options.zero = z;
                sc.options.recompute = r;
                // The user's rank order orders the stages; without them
                // there is nothing to order.
                if (p == 1)
                  sc.options.placement = Placement::kTpPpDp;
                try {
                  checkScenario(net, sc);
                  if (const auto lay = rankLayoutOf(sc); topo && dp > 1)
                    (void)hierarchicalLevels(
                        *topo, RankGroups{lay.dpSpan(), lay.dpStride(), sc.options.gradientSync});
                } catch (const UserError&) {
                  continue;  // a combination this network or K cannot take
                }
                layouts.push_back(sc);
              }
          }
        }
      }
    }
  if (layouts.empty())
    throw OptionError(batchOption,
                      fmt::format("no layout of {} workers runs network '{}' with a global batch "
                                  "of {}: the data-parallel replicas (K / (tp x pp)) must divide "
                                  "it",
                                  k, net.name, batch));

  SearchResult result;
  result.enumerated = static_cast<int>(layouts.size());
  const int total = result.enumerated;
  // Each layout is an independent evaluation (its own Context): threads
  // take the next one until none is left; the rows keep the layouts' order.
  result.rows.resize(layouts.size());
  std::atomic<int> next{0}, done{0};
  std::exception_ptr failure;
  std::mutex failureMutex;
  auto work = [&] {
    for (int i = next++; i < total; i = next++) {
      try {
        auto& row = result.rows[static_cast<size_t>(i)];
        row.scenario = layouts[static_cast<size_t>(i)];
        row.estimate = estimate(net, cluster, row.scenario, false);
        for (const auto& w : row.estimate.workers)
          row.peakMemory = max(row.peakMemory, w.memory.total());
        row.fits = row.estimate.fitsInMemory;
      } catch (...) {
        const std::lock_guard lock(failureMutex);
        if (!failure)
          failure = std::current_exception();
        next = total;
      }
      ++done;
    }
  };
  const int threads = std::clamp(static_cast<int>(std::thread::hardware_concurrency()), 1, 16);
  std::vector<std::thread> pool;
  for (int i = 1; i < threads; ++i)
    pool.emplace_back(work);
  std::thread reporter;
  std::atomic<bool> finished{false};
  if (progress)
    reporter = std::thread([&] {
      while (!finished) {
        progress(done.load(), total);
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
      }
    });
  work();
  for (auto& t : pool)
    t.join();
  finished = true;
  if (reporter.joinable())
    reporter.join();
  if (failure)
    std::rethrow_exception(failure);
  if (progress)
    progress(total, total);
  for (const auto& row : result.rows)
    result.fitting += row.fits;
  std::stable_sort(result.rows.begin(), result.rows.end(),
                   [](const SearchRow& a, const SearchRow& b) {
                     if (a.fits != b.fits)
                       return a.fits;
                     return a.estimate.step < b.estimate.step;
                   });
  if (result.fitting >= 2)
    result.why = whyBest(result.rows[0], result.rows[1]);
  return result;
}

}  // namespace strata

// `strata search`: every way to lay a network out on K workers of a cluster
// for one global batch, priced by the closed form, best first.
//
// A layout is (dp, tp, pp, schedule and virtual stages, micro-batch size b,
// ZeRO stage, recomputation, sequence parallelism) with dp x tp x pp = K and
// dp x M x b = the global batch (M micro-batches per step). The space:
//   tp   powers of two up to the workers of a node (tensor parallelism stays
//        inside the node, Narayanan et al. 2021, takeaway 1) that the
//        network splits over (tensorParallelObstacle);
//   sp   off, and on where tp > 1 and the positions split;
//   pp   every divisor of K / tp the network can be cut into;
//   b    powers of two dividing the global batch / dp;
//   schedule  1f1b, and interleaved with V in {2, 4, 8} where M is a
//        multiple of pp and the network has the chunks (pp > 1);
//   zero 0..3 without a pipeline or accumulation, 0..1 with them;
//   recompute none, selective (attention) and full (repeated blocks).
// Dimensions the caller fixes (SearchSpace) take only their value.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "strata/model/cluster.h"
#include "strata/model/network.h"
#include "strata/model/strategy.h"

namespace strata {

struct SearchSpace {
  int workers = 1;
  int globalBatch = 1;
  // Options every layout shares (element, optimizer, overlap, buckets...).
  StrategyOptions base;
  // Fixed dimensions (nullopt: searched).
  std::optional<int> tp, pp, microBatch, zero, virtualStages;
  std::optional<bool> sequenceParallel;
  std::optional<Recompute> recompute;
  std::optional<PipelineSchedule> schedule;
  // How errors name the options: the CLI's flags ("--workers", "--allreduce")
  // or, for a front end that takes keywords, "workers", "global_batch" and
  // the options' file keys ("allreduce").
  bool keywordNames = false;
};

// One layout, priced.
struct SearchRow {
  Scenario scenario;  // workers K, batchPerWorker b, the layout in its options
  StepEstimate estimate;
  Bytes peakMemory;  // the fullest worker's
  bool fits = false;
};

struct SearchResult {
  std::vector<SearchRow> rows;  // every layout, the fitting ones first, fastest first
  int enumerated = 0;           // layouts priced
  int fitting = 0;
  // Why the best beats the runner-up, in words ("" with fewer than two that fit).
  std::string why;
};

// Throws OptionError for a K or global batch that cannot be laid out
// (naming --workers or --global-batch). The layouts are priced on the
// machine's cores; `progress(done, total)` is called from another thread
// about every 0.2 s, and once at the end with done = total.
SearchResult searchLayouts(const Network& network, const Cluster& cluster, const SearchSpace& space,
                           const std::function<void(int, int)>& progress = {});

// "dp 8 x tp 8 x pp 16, 1f1b, b 1 x M 12, ZeRO-1, recompute full, sp on".
std::string describeLayout(const Scenario& scenario);

}  // namespace strata

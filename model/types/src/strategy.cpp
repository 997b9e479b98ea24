#include "strata/model/strategy.h"

#include <fmt/format.h>

#include <algorithm>

#include "strata/model/error.h"

namespace strata {

std::string_view toString(Strategy strategy) {
  switch (strategy) {
    case Strategy::kNaive:
      return "naive";
    case Strategy::kRing:
      return "ring";
    case Strategy::kOwtA:
      return "owt-a";
    case Strategy::kOwtB:
      return "owt-b";
    case Strategy::kOwtC:
      return "owt-c";
    case Strategy::kPs:
      return "ps";
  }
  return "?";
}

std::string_view toString(PsPriority priority) {
  switch (priority) {
    case PsPriority::kFirstNeeded:
      return "first-needed";
    case PsPriority::kFifo:
      return "fifo";
    case PsPriority::kLastReady:
      return "last-ready";
  }
  return "?";
}

PsPriority parsePsPriority(std::string_view text, const std::string& option) {
  for (auto p : {PsPriority::kFirstNeeded, PsPriority::kFifo, PsPriority::kLastReady})
    if (toString(p) == text)
      return p;
  throw OptionError(option, "unknown ps priority '" + std::string(text) +
                                "' (expected first-needed, fifo or last-ready)");
}

std::string_view toString(Optimizer optimizer) {
  switch (optimizer) {
    case Optimizer::kSgd:
      return "sgd";
    case Optimizer::kMomentum:
      return "momentum";
    case Optimizer::kAdam:
      return "adam";
    case Optimizer::kAdamW:
      return "adamw";
  }
  return "?";
}

Optimizer parseOptimizer(std::string_view text, const std::string& option) {
  for (auto o : {Optimizer::kSgd, Optimizer::kMomentum, Optimizer::kAdam, Optimizer::kAdamW})
    if (toString(o) == text)
      return o;
  throw OptionError(option, "unknown optimizer '" + std::string(text) +
                                "' (expected sgd, momentum, adam or adamw)");
}

double optimizerStatesPerParam(Optimizer optimizer) {
  switch (optimizer) {
    case Optimizer::kSgd:
      return 0;
    case Optimizer::kMomentum:
      return 1;
    case Optimizer::kAdam:
    case Optimizer::kAdamW:
      return 2;
  }
  return 0;
}

std::string_view toString(Recompute recompute) {
  switch (recompute) {
    case Recompute::kNone:
      return "none";
    case Recompute::kSelective:
      return "selective";
    case Recompute::kFull:
      return "full";
  }
  return "?";
}

Recompute parseRecompute(std::string_view text, const std::string& option) {
  for (auto r : {Recompute::kNone, Recompute::kSelective, Recompute::kFull})
    if (toString(r) == text)
      return r;
  throw OptionError(option, "unknown recomputation '" + std::string(text) +
                                "' (expected none, selective or full)");
}

std::string_view toString(PipelineSchedule schedule) {
  switch (schedule) {
    case PipelineSchedule::kGpipe:
      return "gpipe";
    case PipelineSchedule::k1f1b:
      return "1f1b";
    case PipelineSchedule::kInterleaved:
      return "interleaved";
  }
  return "?";
}

PipelineSchedule parsePipelineSchedule(std::string_view text, const std::string& option) {
  for (auto s : {PipelineSchedule::kGpipe, PipelineSchedule::k1f1b, PipelineSchedule::kInterleaved})
    if (toString(s) == text)
      return s;
  throw OptionError(option, "unknown pipeline schedule '" + std::string(text) +
                                "' (expected gpipe, 1f1b or interleaved)");
}

std::string_view toString(Placement placement) {
  return placement == Placement::kTpPpDp ? "tp,pp,dp" : "tp,dp,pp";
}

Placement parsePlacement(std::string_view text, const std::string& option) {
  for (auto p : {Placement::kTpPpDp, Placement::kTpDpPp})
    if (toString(p) == text)
      return p;
  throw OptionError(option, "unknown placement '" + std::string(text) +
                                "' (expected tp,pp,dp or tp,dp,pp, innermost first: the "
                                "tensor-parallel groups are always consecutive ranks)");
}

namespace {

// `list`: the option takes a list, where "all" is also accepted.
Strategy findStrategy(std::string_view text, const std::string& option, bool list) {
  for (auto s : kAllStrategies)
    if (toString(s) == text)
      return s;
  throw OptionError(option, "unknown strategy '" + std::string(text) + "' (expected " +
                                (list ? "naive, ring, owt-a, owt-b, owt-c, ps or all"
                                      : "one of naive, ring, owt-a, owt-b, owt-c or ps") +
                                ")");
}

}  // namespace

Strategy parseStrategy(std::string_view text, const std::string& option) {
  return findStrategy(text, option, false);
}

std::vector<Strategy> parseStrategies(std::string_view text, const std::string& option) {
  if (text == "all")
    return {std::begin(kAllStrategies), std::end(kAllStrategies)};
  std::vector<Strategy> out;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = text.find(',', start);
    const auto item =
        text.substr(start, comma == std::string_view::npos ? text.npos : comma - start);
    if (item.empty())
      throw OptionError(option, "empty strategy name in '" + std::string(text) + "'");
    out.push_back(findStrategy(item, option, true));
    if (comma == std::string_view::npos)
      break;
    start = comma + 1;
  }
  std::vector<std::string> names;
  for (auto s : out)
    names.emplace_back(toString(s));
  refuseRepeats(names, option, text);
  return out;
}

void checkThreadsPerWorker(int threads) {
  if (threads < 1 || threads > kMaxThreadsPerWorker)
    throw OptionError("--threads-per-worker",
                      fmt::format("must be a whole number of threads in [1, {}], got {}",
                                  kMaxThreadsPerWorker, threads));
}

std::string_view optionFlag(OptionKey key) {
  switch (key) {
    case OptionKey::kOverlap:
      return "--overlap";
    case OptionKey::kFcUpdate:
      return "--fc-update";
    case OptionKey::kSegment:
      return "--segment";
    case OptionKey::kBucket:
      return "--bucket";
    case OptionKey::kElement:
      return "--element";
    case OptionKey::kOptimizer:
      return "--optimizer";
    case OptionKey::kAllreduce:
      return "--allreduce";
    case OptionKey::kConvSync:
      return "--conv-sync";
    case OptionKey::kPsPriority:
      return "--ps-priority";
    case OptionKey::kStaleness:
      return "--staleness";
    case OptionKey::kPsServers:
      return "--ps-servers";
    case OptionKey::kPsNode:
      return "--ps-node";
    case OptionKey::kThreadsPerWorker:
      return "--threads-per-worker";
    case OptionKey::kTensorParallel:
      return "--tp";
    case OptionKey::kSequenceParallel:
      return "--sequence-parallel";
    case OptionKey::kZero:
      return "--zero";
    case OptionKey::kRecompute:
      return "--recompute";
    case OptionKey::kPipelineParallel:
      return "--pp";
    case OptionKey::kMicrobatches:
      return "--microbatches";
    case OptionKey::kSchedule:
      return "--schedule";
    case OptionKey::kVirtualStages:
      return "--virtual-stages";
    case OptionKey::kStageStarts:
      return "--stage-starts";
    case OptionKey::kPlacement:
      return "--placement";
  }
  return "?";
}

std::string_view optionFileKey(OptionKey key) {
  switch (key) {
    case OptionKey::kOverlap:
      return "overlap";
    case OptionKey::kFcUpdate:
      return "fc_update";
    case OptionKey::kSegment:
      return "segment";
    case OptionKey::kBucket:
      return "bucket";
    case OptionKey::kElement:
      return "element";
    case OptionKey::kOptimizer:
      return "optimizer";
    case OptionKey::kAllreduce:
      return "allreduce";
    case OptionKey::kConvSync:
      return "conv_sync";
    case OptionKey::kPsPriority:
      return "ps_priority";
    case OptionKey::kStaleness:
      return "staleness";
    case OptionKey::kPsServers:
      return "ps_servers";
    case OptionKey::kPsNode:
      return "ps_node";
    case OptionKey::kThreadsPerWorker:
      return "threads_per_worker";
    case OptionKey::kTensorParallel:
      return "tp";
    case OptionKey::kSequenceParallel:
      return "sequence_parallel";
    case OptionKey::kZero:
      return "zero";
    case OptionKey::kRecompute:
      return "recompute";
    case OptionKey::kPipelineParallel:
      return "pp";
    case OptionKey::kMicrobatches:
      return "microbatches";
    case OptionKey::kSchedule:
      return "schedule";
    case OptionKey::kVirtualStages:
      return "virtual_stages";
    case OptionKey::kStageStarts:
      return "stage_starts";
    case OptionKey::kPlacement:
      return "placement";
  }
  return "?";
}

std::string optionIgnoredBy(OptionKey key, Strategy strategy, const StrategyOptions& o) {
  const bool mp = isModelParallel(strategy);
  switch (key) {
    case OptionKey::kOverlap:
    case OptionKey::kSegment:
    case OptionKey::kElement:
    case OptionKey::kOptimizer:
    case OptionKey::kThreadsPerWorker:
      return "";  // every strategy: compute, memory, and every transfer
    case OptionKey::kFcUpdate:
      // owt-a runs its FC layers once on K b examples: one update per step.
      return strategy == Strategy::kOwtB || strategy == Strategy::kOwtC
                 ? ""
                 : "applies to owt-b and owt-c only (owt-a and the data-parallel strategies "
                   "update once per step)";
    case OptionKey::kBucket:
      if (strategy == Strategy::kPs)
        return "applies to naive, ring and owt-* only (ps pushes one key per layer)";
      // Without overlap every gradient leaves in one bucket (gradientBuckets).
      return o.overlap ? ""
                       : "applies with overlap on only (with overlap off all gradients "
                         "are synchronised as one buffer)";
    case OptionKey::kAllreduce:
      return strategy == Strategy::kRing
                 ? ""
                 : "applies to ring only (naive is the naive reducer, owt-* synchronise their "
                   "conv gradients by conv sync, ps pushes and pulls)";
    case OptionKey::kConvSync:
      return mp ? "" : "applies to owt-a, owt-b and owt-c only (their conv-gradient sync)";
    case OptionKey::kPsPriority:
    case OptionKey::kStaleness:
    case OptionKey::kPsServers:
    case OptionKey::kPsNode:
      return strategy == Strategy::kPs ? "" : "applies to ps only";
    case OptionKey::kTensorParallel:
    case OptionKey::kZero:
      // The data-parallel groups reduce-scatter and all-gather over rings.
      return strategy == Strategy::kRing
                 ? ""
                 : "applies to ring only (its data-parallel groups synchronise over rings; owt-* "
                   "split their fc layers their own way, ps shards through its servers)";
    case OptionKey::kSequenceParallel:
      if (strategy != Strategy::kRing)
        return "applies to ring with --tp 2 or more only";
      return o.tp > 1 ? ""
                      : "applies with --tp 2 or more only (it splits the positions of the layers "
                        "between a tensor-parallel group's split ones)";
    case OptionKey::kRecompute:
      return strategy == Strategy::kNaive || strategy == Strategy::kRing
                 ? ""
                 : "applies to naive and ring only";
    case OptionKey::kPipelineParallel:
    case OptionKey::kMicrobatches:
      return strategy == Strategy::kRing
                 ? ""
                 : "applies to ring only (its data-parallel groups synchronise each stage's "
                   "accumulated gradients)";
    case OptionKey::kSchedule:
      if (strategy != Strategy::kRing)
        return "applies to ring with --pp 2 or more only";
      return o.pp > 1 ? "" : "applies with --pp 2 or more only (the order of a stage's work)";
    case OptionKey::kVirtualStages:
      if (strategy != Strategy::kRing)
        return "applies to ring with --schedule interleaved only";
      return o.pp > 1 && o.schedule == PipelineSchedule::kInterleaved
                 ? ""
                 : "applies with --pp 2 or more and --schedule interleaved only (chunks of layers "
                   "per stage)";
    case OptionKey::kStageStarts:
      if (strategy != Strategy::kRing)
        return "applies to ring with --pp 2 or more only";
      return o.pp > 1 ? "" : "applies with --pp 2 or more only (where the stages start)";
    case OptionKey::kPlacement:
      if (strategy != Strategy::kRing)
        return "applies to ring with --pp 2 or more only";
      return o.pp > 1 ? ""
                      : "applies with --pp 2 or more only (the order of the stages and the "
                        "data-parallel replicas among the ranks)";
  }
  return "";
}

std::optional<UnusedOption> optionUnused(const std::vector<OptionKey>& given,
                                         const std::vector<Strategy>& strategies,
                                         const StrategyOptions& o) {
  for (auto key : given) {
    std::string why;
    bool used = false;
    for (auto s : strategies) {
      const auto reason = optionIgnoredBy(key, s, o);
      used = used || reason.empty();
      if (why.empty())
        why = reason;
    }
    if (!used && !strategies.empty()) {
      std::vector<std::string_view> names;
      for (auto s : strategies)
        names.push_back(toString(s));
      return UnusedOption{key, fmt::format("{}; {} {}", why,
                                           names.size() == 1 ? "the strategy asked for is"
                                                             : "the strategies asked for are",
                                           fmt::join(names, ", "))};
    }
  }
  return std::nullopt;
}

void refuseRepeats(const std::vector<std::string>& items, const std::string& option,
                   std::string_view text) {
  for (size_t i = 0; i < items.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (items[i] == items[j])
        throw OptionError(option,
                          fmt::format("lists '{}' twice in '{}' (give each once)", items[i], text));
}

std::vector<GradientBucket> gradientBuckets(const Network& network, int first, int last,
                                            const StrategyOptions& options) {
  std::vector<GradientBucket> buckets;
  const double e = elementBytes(options.element);
  bool open = false;
  for (int l = last - 1; l >= first; --l) {
    const auto& layer = network.layers[static_cast<size_t>(l)];
    if (!layer.hasWeights())
      continue;
    if (!open) {
      buckets.push_back({l, l, 0});
      open = true;
    }
    auto& b = buckets.back();
    b.firstLayer = l;
    b.params += double(layer.params);
    if (options.overlap && b.params * e >= options.bucket.value())
      open = false;
  }
  return buckets;
}

bool isModelParallel(Strategy strategy) {
  return strategy == Strategy::kOwtA || strategy == Strategy::kOwtB || strategy == Strategy::kOwtC;
}

std::string_view toString(FcUpdate update) {
  return update == FcUpdate::kStep ? "step" : "round";
}

std::vector<GradientBucket> psKeys(const Network& network, const StrategyOptions& options) {
  StrategyOptions perLayer = options;
  perLayer.bucket = Bytes(0);
  return gradientBuckets(network, 0, static_cast<int>(network.layers.size()), perLayer);
}

FcUpdate parseFcUpdate(std::string_view text, const std::string& option) {
  if (text == "step")
    return FcUpdate::kStep;
  if (text == "round")
    return FcUpdate::kRound;
  throw OptionError(option,
                    "unknown FC update '" + std::string(text) + "' (expected step or round)");
}

}  // namespace strata

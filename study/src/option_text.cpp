#include "strata/study/option_text.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <sstream>

#include "strata/model/error.h"
#include "strata/model/limits.h"
#include "strata/model/quantity_text.h"

namespace strata::study {

std::vector<std::string> splitList(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ','))
    out.push_back(item);
  if (!text.empty() && text.back() == ',')
    out.emplace_back();
  return out;
}

std::vector<std::string> splitItems(const std::string& text, const std::string& option) {
  auto list = splitList(text);
  if (list.empty())
    throw OptionError(option, "needs at least one value");
  refuseRepeats(list, option, text);
  return list;
}

std::vector<int> parsePositiveList(const std::string& text, const std::string& option) {
  return parseCountListOption(text, option);
}

int parsePositive(const std::string& text, const std::string& option) {
  if (text.find(',') != std::string::npos)
    throw OptionError(option, "takes one value, got '" + text + "' (compare and sweep take lists)");
  return parseCountOption(text, option);
}

Bytes parseSize(const std::string& text, const std::string& option) {
  return parseSizeOption(text, option, /*zeroMeansOff=*/true);
}

uint64_t parseSeed(const std::string& text, const std::string& option) {
  uint64_t v = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size())
    throw OptionError(option, "must be an integer in [0, 2^64), got '" + text + "'");
  return v;
}

bool parseOnOff(const std::string& text, const std::string& option) {
  if (text == "on" || text == "true")
    return true;
  if (text == "off" || text == "false")
    return false;
  throw OptionError(option, "must be on or off, got '" + text + "'");
}

double checkRange(double value, double low, double high, bool highIncluded,
                  const std::string& option) {
  const bool ok =
      std::isfinite(value) && value >= low && (highIncluded ? value <= high : value < high);
  if (!ok)
    throw OptionError(option, fmt::format("must be a number in [{}, {}{}, got {}", low, high,
                                          highIncluded ? "]" : ")", value));
  return value;
}

void parseStraggler(const std::string& text, std::vector<double>& slowdown, int workers,
                    const std::string& option) {
  // A straggler slower than this is a dead worker, not a slow one.
  constexpr double kMaxSlowdown = 1000;
  const auto colon = text.find(':');
  int w = -1;
  double f = 0;
  bool ok = colon != std::string::npos;
  if (ok) {
    const auto ws = text.substr(0, colon), fs = text.substr(colon + 1);
    auto [p1, e1] = std::from_chars(ws.data(), ws.data() + ws.size(), w);
    auto [p2, e2] = std::from_chars(fs.data(), fs.data() + fs.size(), f);
    ok = e1 == std::errc() && p1 == ws.data() + ws.size() && e2 == std::errc() &&
         p2 == fs.data() + fs.size() && w >= 0 && std::isfinite(f) && f > 0 && f <= kMaxSlowdown;
  }
  if (!ok)
    throw OptionError(option,
                      fmt::format("must be WORKER:FACTOR with FACTOR in (0, {}], e.g. 3:1.5, got "
                                  "'{}'",
                                  kMaxSlowdown, text));
  if (w >= workers)
    throw OptionError(option, fmt::format("worker {} does not exist (K = {})", w, workers));
  if (slowdown.size() <= static_cast<size_t>(w))
    slowdown.resize(static_cast<size_t>(w) + 1, 1.0);
  slowdown[static_cast<size_t>(w)] = f;
}

std::vector<double> parseStragglers(const std::vector<std::string>& texts, int workers,
                                    const std::string& option) {
  std::vector<double> slowdown;
  std::vector<std::string> named;  // the workers given, to refuse one given twice
  for (const auto& text : texts) {
    parseStraggler(text, slowdown, workers, option);
    named.push_back(text.substr(0, text.find(':')));
  }
  for (size_t i = 0; i < named.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (std::stoi(named[i]) == std::stoi(named[j]))
        throw OptionError(option, fmt::format("worker {} is given twice ('{}' and '{}'; give each "
                                              "straggler once)",
                                              std::stoi(named[i]), texts[j], texts[i]));
  return slowdown;
}

namespace {

// A whole number in [least, most] (no sign, no fraction, no garbage).
int wholeNumber(const std::string& text, const std::string& option, int least, int most,
                const char* what) {
  int v = -1;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || ptr != text.data() + text.size() || v < least || v > most)
    throw OptionError(option, fmt::format("must be a whole number of {} in [{}, {}], got '{}'",
                                          what, least, most, text));
  return v;
}

}  // namespace

void applyOptionText(OptionKey key, const std::string& text, const std::string& option,
                     StrategyOptions& o) {
  switch (key) {
    case OptionKey::kOverlap:
      o.overlap = parseOnOff(text, option);
      return;
    case OptionKey::kFcUpdate:
      o.fcUpdate = parseFcUpdate(text, option);
      return;
    case OptionKey::kSegment:
      o.segment = parseSize(text, option);
      return;
    case OptionKey::kBucket:
      o.bucket = parseSize(text, option);
      return;
    case OptionKey::kElement:
      o.element = parseElementType(text, option);
      return;
    case OptionKey::kOptimizer:
      o.optimizer = parseOptimizer(text, option);
      return;
    case OptionKey::kAllreduce:
      o.gradientSync = parseAllreduceAlgorithm(text, option);
      return;
    case OptionKey::kConvSync:
      o.convSync = parseAllreduceAlgorithm(text, option);
      return;
    case OptionKey::kPsPriority:
      o.psPriority = parsePsPriority(text, option);
      return;
    case OptionKey::kStaleness:
      o.staleness = wholeNumber(text, option, 0, kMaxStaleness, "steps");
      return;
    case OptionKey::kPsServers:
      o.psServers = wholeNumber(text, option, 0, kMaxPsServers, "server nodes");
      return;
    case OptionKey::kPsNode:
      o.psNode = wholeNumber(text, option, 0, kMaxPsServers, "workers per node");
      return;
    case OptionKey::kThreadsPerWorker:
      o.threadsPerWorker = wholeNumber(text, option, 1, kMaxThreadsPerWorker, "threads");
      return;
    case OptionKey::kTensorParallel:
      o.tp = wholeNumber(text, option, 1, kMaxTensorParallel, "workers per tensor-parallel group");
      return;
    case OptionKey::kSequenceParallel:
      o.sequenceParallel = parseOnOff(text, option);
      return;
    case OptionKey::kZero:
      o.zero = wholeNumber(text, option, 0, kMaxZeroStage, "ZeRO stage");
      return;
    case OptionKey::kRecompute:
      o.recompute = parseRecompute(text, option);
      return;
    case OptionKey::kPipelineParallel:
      o.pp = wholeNumber(text, option, 1, kMaxPipelineStages, "pipeline stages");
      return;
    case OptionKey::kMicrobatches:
      o.microbatches = wholeNumber(text, option, 1, kMaxMicrobatches, "micro-batches");
      return;
    case OptionKey::kSchedule:
      o.schedule = parsePipelineSchedule(text, option);
      return;
    case OptionKey::kVirtualStages:
      o.virtualStages = wholeNumber(text, option, 1, kMaxVirtualStages, "chunks per stage");
      return;
    case OptionKey::kStageStarts:
      o.stageStarts = splitItems(text, option);
      if (o.stageStarts.size() >= static_cast<size_t>(kMaxPipelineStages) * kMaxVirtualStages)
        throw OptionError(option, fmt::format("gives {} starts, more than any pipeline has",
                                              o.stageStarts.size()));
      return;
    case OptionKey::kPlacement:
      o.placement = parsePlacement(text, option);
      return;
  }
  throw InvariantError("applyOptionText: an option key without a reader");
}

}  // namespace strata::study

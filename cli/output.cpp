// The printers of estimates: predict and run (printEstimate), compare and
// sweep (printComparison), simulate (printSimulation). Tables are written
// here; JSON and CSV are the one schema of study/estimate_schema.h.
#include "output.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <tuple>

#include "strata/model/quantity_text.h"
#include "strata/study/engine.h"
#include "strata/study/estimate_schema.h"
#include "table.h"

namespace strata::cli {

namespace {

using nlohmann::ordered_json;

const WorkerEstimate& busiest(const StepEstimate& e) {
  return *std::max_element(e.workers.begin(), e.workers.end(), [](const auto& a, const auto& b) {
    return a.sent.value() + a.received.value() < b.sent.value() + b.received.value();
  });
}

// A long time in the unit a person reads it in (days, hours, minutes),
// with seconds beside it.
std::string formatDuration(Seconds t) {
  const double s = t.value();
  if (s < 60)
    return formatSeconds(t);
  const double minutes = s / 60, hours = s / 3600, days = s / 86400;
  const std::string unit = days >= 2    ? fmt::format("{:.1f} days", days)
                           : hours >= 2 ? fmt::format("{:.1f} h", hours)
                                        : fmt::format("{:.1f} min", minutes);
  return fmt::format("{} = {:.4g} s", unit, s);
}

// How the training run's steps were counted, for the table.
std::string trainingRunText(const StepEstimate& e) {
  const auto& r = e.training;
  const bool ps = e.scenario.strategy == Strategy::kPs && e.steadySteps > 1;
  std::string s = ps ? fmt::format("{:.0f} steps: the first {}, then {} each", r.steps,
                                   formatSeconds(e.firstStep), formatSeconds(e.step))
                     : fmt::format("{:.0f} steps x {}", r.steps, formatSeconds(e.step));
  if (r.epochs > 0)
    s += fmt::format(
        "; {:g} epoch{} x ceil({:.0f} examples / global batch {}) = {:.0f} steps "
        "per epoch{}",
        r.epochs, r.epochs == 1 ? "" : "s", r.dataset, examplesPerStep(e.scenario), r.stepsPerEpoch,
        r.epochs * r.stepsPerEpoch == r.steps ? "" : ", rounded up to a whole step");
  return s;
}

}  // namespace

std::string countText(double n) {
  return n >= 1e6   ? fmt::format("{:.3g} M", n / 1e6)
         : n >= 1e3 ? fmt::format("{:.3g} k", n / 1e3)
                    : fmt::format("{:.3g}", n);
}

namespace {

std::string dimensionsText(const StrategyOptions& o);

std::string optionsLine(const StepEstimate& e) {
  const auto& o = e.scenario.options;
  const std::string overlap = !o.overlap ? "off"
                              : o.bucket.value() > 0 && e.scenario.strategy != Strategy::kPs
                                  ? fmt::format("on (buckets of {})", formatBytes(o.bucket))
                                  : "on (per layer)";
  std::string s = fmt::format("{}, optimizer {}, overlap {}, segment {}", toString(o.element),
                              toString(o.optimizer), overlap,
                              o.segment.value() > 0 ? formatBytes(o.segment) : "off");
  if (o.threadsPerWorker != 1)
    s += fmt::format(", {} threads per worker", o.threadsPerWorker);
  if (e.scenario.strategy == Strategy::kRing && o.gradientSync != AllreduceAlgorithm::kRing)
    s += fmt::format(", allreduce {}", toString(o.gradientSync));
  s += dimensionsText(o);
  if (isModelParallel(e.scenario.strategy))
    s +=
        fmt::format(", FC update per {}, conv sync {}", toString(o.fcUpdate), toString(o.convSync));
  if (e.scenario.strategy == Strategy::kPs)
    s += fmt::format(", ps priority {}, staleness {}, {}", toString(o.psPriority), o.staleness,
                     o.psNode > 0      ? fmt::format("two levels, nodes of {}", o.psNode)
                     : o.psServers > 0 ? fmt::format("{} dedicated servers", o.psServers)
                                       : std::string("servers on the workers"));
  return s;
}

std::string optionValueText(OptionKey key, const StrategyOptions& o) {
  switch (key) {
    case OptionKey::kOverlap:
      return o.overlap ? "on" : "off";
    case OptionKey::kFcUpdate:
      return fmt::format("per {}", toString(o.fcUpdate));
    case OptionKey::kSegment:
      return o.segment.value() > 0 ? formatBytes(o.segment) : "off";
    case OptionKey::kBucket:
      return o.bucket.value() > 0 ? formatBytes(o.bucket) : "per layer";
    case OptionKey::kElement:
      return std::string(toString(o.element));
    case OptionKey::kOptimizer:
      return std::string(toString(o.optimizer));
    case OptionKey::kAllreduce:
      return std::string(toString(o.gradientSync));
    case OptionKey::kConvSync:
      return std::string(toString(o.convSync));
    case OptionKey::kPsPriority:
      return std::string(toString(o.psPriority));
    case OptionKey::kStaleness:
      return std::to_string(o.staleness);
    case OptionKey::kPsServers:
      return std::to_string(o.psServers);
    case OptionKey::kPsNode:
      return std::to_string(o.psNode);
    case OptionKey::kThreadsPerWorker:
      return std::to_string(o.threadsPerWorker);
    case OptionKey::kTensorParallel:
      return std::to_string(o.tp);
    case OptionKey::kSequenceParallel:
      return o.sequenceParallel ? "on" : "off";
    case OptionKey::kZero:
      return std::to_string(o.zero);
    case OptionKey::kRecompute:
      return std::string(toString(o.recompute));
    case OptionKey::kPipelineParallel:
      return std::to_string(o.pp);
    case OptionKey::kMicrobatches:
      return std::to_string(o.microbatches);
    case OptionKey::kSchedule:
      return std::string(toString(o.schedule));
    case OptionKey::kVirtualStages:
      return std::to_string(o.virtualStages);
    case OptionKey::kStageStarts:
      return fmt::format("{}", fmt::join(o.stageStarts, ","));
    case OptionKey::kPlacement:
      return std::string(toString(o.placement));
  }
  return "?";
}

}  // namespace

std::string nonDefaultOptionsText(Strategy strategy, const StrategyOptions& o) {
  const StrategyOptions defaults;
  std::vector<std::string> parts;
  for (auto key : kAllOptionKeys) {
    const auto value = optionValueText(key, o);
    if (optionIgnoredBy(key, strategy, o).empty() && value != optionValueText(key, defaults))
      parts.push_back(fmt::format("{} {}", optionFileKey(key), value));
  }
  return fmt::format("{}", fmt::join(parts, ", "));
}

namespace {

// The header of a comparison: the options every row shares, then each
// strategy-specific option that is not its strategy's default, named with the
// strategies it applies to (a ring row whose allreduce is forced says so).
// ", tp 8 with sequence parallelism, ZeRO-1, recompute selective, pp 16
// (1f1b), 128 micro-batches": the dimensions beyond data parallelism, each
// only when set.
std::string dimensionsText(const StrategyOptions& o) {
  std::string s;
  if (o.tp > 1)
    s += fmt::format(", tp {}{}", o.tp, o.sequenceParallel ? " with sequence parallelism" : "");
  if (o.zero > 0)
    s += fmt::format(", ZeRO-{}", o.zero);
  if (o.recompute != Recompute::kNone)
    s += fmt::format(", recompute {}", toString(o.recompute));
  if (o.pp > 1)
    s += fmt::format(", pp {} ({}{})", o.pp, toString(o.schedule),
                     o.schedule == PipelineSchedule::kInterleaved
                         ? fmt::format(" x {} chunks", o.virtualStages)
                         : std::string());
  if (o.microbatches > 1)
    s += fmt::format(", {} micro-batches", o.microbatches);
  return s;
}

std::string comparisonOptionsLine(const std::vector<StepEstimate>& rows) {
  const auto& o = rows.front().scenario.options;
  bool bucketed = false, ring = false, owt = false, owtRounds = false, ps = false;
  for (const auto& e : rows) {
    const auto s = e.scenario.strategy;
    bucketed = bucketed || s != Strategy::kPs;
    ring = ring || s == Strategy::kRing;
    owt = owt || isModelParallel(s);
    owtRounds = owtRounds || s == Strategy::kOwtB || s == Strategy::kOwtC;
    ps = ps || s == Strategy::kPs;
  }
  const StrategyOptions defaults;
  // ps pushes one key per layer whatever the bucket size (psKeys).
  const bool buckets = o.overlap && o.bucket.value() > 0 && bucketed;
  std::string s = fmt::format(
      "{}, optimizer {}, overlap {}, segment {}", toString(o.element), toString(o.optimizer),
      !o.overlap ? "off"
      : buckets
          ? fmt::format("on (buckets of {}{})", formatBytes(o.bucket), ps ? "; ps per layer" : "")
          : "on (per layer)",
      o.segment.value() > 0 ? formatBytes(o.segment) : "off");
  if (o.threadsPerWorker != defaults.threadsPerWorker)
    s += fmt::format(", {} threads per worker", o.threadsPerWorker);
  if (ring && o.gradientSync != defaults.gradientSync)
    s += fmt::format(", ring allreduce {}", toString(o.gradientSync));
  if (ring || o.recompute != Recompute::kNone)
    s += dimensionsText(o);
  if (owt && o.convSync != defaults.convSync)
    s += fmt::format(", owt-* conv sync {}", toString(o.convSync));
  if (owtRounds && o.fcUpdate != defaults.fcUpdate)
    s += fmt::format(", owt-b/c FC update per {}", toString(o.fcUpdate));
  if (ps) {
    std::vector<std::string> parts;
    if (o.psPriority != defaults.psPriority)
      parts.push_back(fmt::format("priority {}", toString(o.psPriority)));
    if (o.staleness != defaults.staleness)
      parts.push_back(fmt::format("staleness {}", o.staleness));
    if (o.psNode > 0)
      parts.push_back(fmt::format("two levels, nodes of {}", o.psNode));
    else if (o.psServers > 0)
      parts.push_back(fmt::format("{} dedicated servers", o.psServers));
    if (!parts.empty())
      s += fmt::format(", ps {}", fmt::join(parts, ", "));
  }
  return s;
}

}  // namespace

void printEstimate(std::ostream& out, const StepEstimate& e, Format format) {
  if (format == Format::kJson) {
    out << study::estimateJson(e).dump(2) << "\n";
    return;
  }
  if (format == Format::kCsv) {
    out << study::estimateCsvHeader() << study::estimateCsvRow(e);
    return;
  }
  const auto& sc = e.scenario;
  out << fmt::format("{} on {}: {}, {} workers x {} examples (global batch {}), {} [{}]\n\n",
                     e.network, e.cluster, toString(sc.strategy), sc.workers, sc.batchPerWorker,
                     examplesPerStep(sc), optionsLine(e), e.engine);
  out << fmt::format("step time     {}\n", formatSeconds(e.step));
  if (sc.strategy == Strategy::kPs && e.steadySteps > 1)
    out << fmt::format(
        "first step    {} (steps run back to back: the step time is the steady "
        "period over {} steps)\n",
        formatSeconds(e.firstStep), e.steadySteps);
  out << fmt::format("throughput    {:.1f} examples/s\n", e.throughput);
  if (e.tokensPerSecond > 0)
    out << fmt::format("tokens        {} tokens/s ({:.0f} per example)\n",
                       countText(e.tokensPerSecond), e.tokensPerSecond / e.throughput);
  if (e.modelFlopsUtilisation > 0)
    out << fmt::format(
        "MFU           {} of peak {} (model FLOPs: 3 x the forward matmuls, Narayanan et al. "
        "2021){}\n",
        percent(e.modelFlopsUtilisation), toString(sc.options.element),
        sc.options.recompute == Recompute::kNone
            ? std::string()
            : fmt::format("; {} counting the recomputed forward (hardware FLOPs)",
                          percent(e.hardwareFlopsUtilisation)));
  if (e.training.steps > 0)
    out << fmt::format("time to train {} ({})\n", formatDuration(e.training.time),
                       trainingRunText(e));
  // Measured steps have no single-worker reference, bottleneck or memory model.
  if (!study::isMeasured(e)) {
    out << fmt::format("speedup       {:.2f}x over one worker ({} per step of {} examples)\n",
                       e.speedup, formatSeconds(e.singleWorkerStep), sc.batchPerWorker);
    out << fmt::format("efficiency    {}\n", percent(e.efficiency));
    out << fmt::format("bottleneck    {}\n", e.bottleneck);
    if (!e.allreduce.empty())
      out << fmt::format("allreduce     {}{}\n", e.allreduce,
                         isModelParallel(sc.strategy) ? " (conv gradients; FC layers are model "
                                                        "parallel)"
                                                      : "");
    if (!e.placement.empty())
      out << fmt::format("placement     {}\n", e.placement);
    if (!e.pipeline.empty())
      out << fmt::format("pipeline      {}; bubble {} ({:.1f} % of the step)\n", e.pipeline,
                         formatSeconds(e.pipelineBubble),
                         100.0 * e.pipelineBubble.value() / e.step.value());
    if (!e.computeSource.empty())
      out << fmt::format("pricing       {}\n", e.computeSource);
    const auto& w0 = e.workers.front();
    out << fmt::format(
        "memory        {} per worker (weights {}, gradients {}, optimizer {}, "
        "activations {}, buffers {}){}\n",
        formatBytes(peakMemory(e)), formatBytes(w0.memory.weights),
        formatBytes(w0.memory.gradients), formatBytes(w0.memory.optimizer),
        formatBytes(w0.memory.activations), formatBytes(busiest(e).memory.buffers),
        e.fitsInMemory ? "" : "  DOES NOT FIT in device memory");
    if (!e.fitsWith.empty())
      out << fmt::format("fits with     {}\n", e.fitsWith);
  }
  if (e.rounds.rounds > 0) {
    const auto& r = e.rounds;
    out << fmt::format(
        "FC rounds     {} x {} examples; per round: activations in {}, FC compute {}, "
        "inner exchange {}, gradients back {}; {} of {} transfers hidden; busiest egress {} per "
        "round\n",
        r.rounds, r.batchPerRound, formatSeconds(r.transfer), formatSeconds(r.compute),
        formatSeconds(r.innerComm), formatSeconds(r.gradientReturn), r.hiddenTransfers, r.rounds,
        formatBytes(r.egressPerRound));
  }
  out << "\n";
  Table t({"rank", "fwd", "bwd_data", "bwd_weights", "update", "compute", "comm", "exposed comm",
           "idle", "sent", "received"});
  // Consecutive ranks with identical rows print once, as a range ("1-7").
  std::vector<std::string> previous;
  int firstRank = 0;
  auto flush = [&](int lastRank) {
    if (previous.empty())
      return;
    auto row = previous;
    row.insert(row.begin(), firstRank == lastRank ? std::to_string(firstRank)
                                                  : fmt::format("{}-{}", firstRank, lastRank));
    t.add(row);
  };
  for (const auto& w : e.workers) {
    std::vector<std::string> row = {formatSeconds(w.compute.fwd),
                                    formatSeconds(w.compute.bwdData),
                                    formatSeconds(w.compute.bwdWeights),
                                    formatSeconds(w.compute.update),
                                    formatSeconds(w.compute.total()),
                                    formatSeconds(w.communication),
                                    formatSeconds(w.exposedCommunication),
                                    formatSeconds(w.idle),
                                    formatBytes(w.sent),
                                    formatBytes(w.received)};
    if (row != previous) {
      flush(w.rank - 1);
      previous = row;
      firstRank = w.rank;
    }
  }
  flush(e.workers.back().rank);
  t.print(out);
}

void printComparison(std::ostream& out, const std::vector<StepEstimate>& estimates, Format format) {
  if (format == Format::kJson) {
    ordered_json j = ordered_json::array();
    for (const auto& e : estimates)
      j.push_back(study::estimateJson(e));
    out << j.dump(2) << "\n";
    return;
  }
  if (format == Format::kCsv) {
    out << study::estimateCsvHeader();
    for (const auto& e : estimates)
      out << study::estimateCsvRow(e);
    return;
  }
  if (estimates.empty())
    return;
  // Fastest strategy per (network, cluster, K).
  std::map<std::tuple<std::string, std::string, int>, double> best;
  for (const auto& e : estimates) {
    auto key = std::make_tuple(e.network, e.cluster, e.scenario.workers);
    auto it = best.find(key);
    if (it == best.end() || e.step.value() < it->second)
      best[key] = e.step.value();
  }
  const auto& first = estimates.front();
  out << fmt::format("{} on {}, {} examples per worker, {} [{}]\n\n", first.network, first.cluster,
                     first.scenario.batchPerWorker, comparisonOptionsLine(estimates), first.engine);
  Table t({"K", "strategy", "step", "throughput", "speedup", "efficiency", "sent/worker",
           "exposed comm", "memory/worker", "best"},
          2);
  int lastK = -1;
  std::string lastNet;
  for (const auto& e : estimates) {
    const bool newGroup = e.scenario.workers != lastK || e.network != lastNet;
    lastK = e.scenario.workers;
    lastNet = e.network;
    const bool isBest =
        e.step.value() == best[std::make_tuple(e.network, e.cluster, e.scenario.workers)];
    const auto& w = busiest(e);
    Seconds exposed;
    for (const auto& x : e.workers)
      exposed = max(exposed, x.exposedCommunication);
    std::string mem = formatBytes(peakMemory(e));
    if (!e.fitsInMemory)
      mem += " (!)";
    t.add({newGroup ? std::to_string(e.scenario.workers) : "",
           std::string(toString(e.scenario.strategy)), formatSeconds(e.step),
           fmt::format("{:.0f} ex/s", e.throughput), fmt::format("{:.2f}x", e.speedup),
           percent(e.efficiency), formatBytes(w.sent), formatSeconds(exposed), mem,
           isBest ? "*" : ""});
  }
  t.print(out);
  out << "\n* fastest strategy for that worker count; (!) exceeds device memory\n";
}

void printSimulation(std::ostream& out, const sim::Result& r, Format format) {
  if (format == Format::kJson) {
    const auto j = study::simulationJson(r);
    out << j.dump(2) << "\n";
    return;
  }
  printEstimate(out, r.estimate, format);
  if (format == Format::kCsv)
    return;
  if (!r.detail.empty())
    out << fmt::format("\nsimulated     {}\n", r.detail);
  out << fmt::format("\nbusiest links ({} of {} carried data; {} events)\n",
                     std::min<size_t>(8, r.links.size()), r.links.size(), r.events);
  Table t({"link", "bandwidth", "bytes", "busy", "utilisation"});
  for (size_t i = 0; i < r.links.size() && i < 8; ++i) {
    const auto& l = r.links[i];
    t.add({l.name, formatBandwidth(l.bandwidth), formatBytes(l.bytes), formatSeconds(l.busy),
           percent(l.utilisation)});
  }
  t.print(out);
}

}  // namespace strata::cli

#include "output.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "strata/model/compute_cost.h"
#include "strata/model/presets.h"
#include "strata/model/quantity_text.h"
#include "strata/model/validation_suite.h"
#include "strata/reports/csv.h"
#include "strata/reports/options_json.h"

namespace strata::cli {

namespace {

using nlohmann::ordered_json;

// A plain text table: left-aligned first columns, right-aligned numbers.
class Table {
 public:
  explicit Table(std::vector<std::string> header, size_t leftColumns = 1)
      : header_(std::move(header)), left_(leftColumns) {}
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  void print(std::ostream& out) const {
    std::vector<size_t> width(header_.size(), 0);
    auto measure = [&](const std::vector<std::string>& r) {
      for (size_t i = 0; i < r.size(); ++i)
        width[i] = std::max(width[i], r[i].size());
    };
    measure(header_);
    for (const auto& r : rows_)
      measure(r);
    auto line = [&](const std::vector<std::string>& r) {
      std::string s;
      for (size_t i = 0; i < r.size(); ++i) {
        if (i)
          s += "  ";
        s += i < left_ ? fmt::format("{:<{}}", r[i], width[i])
                       : fmt::format("{:>{}}", r[i], width[i]);
      }
      while (!s.empty() && s.back() == ' ')
        s.pop_back();
      out << s << "\n";
    };
    line(header_);
    std::string rule;
    for (size_t i = 0; i < width.size(); ++i)
      rule += (i ? "  " : "") + std::string(width[i], '-');
    out << rule << "\n";
    for (const auto& r : rows_)
      line(r);
  }

 private:
  std::vector<std::string> header_;
  size_t left_;
  std::vector<std::vector<std::string>> rows_;
};

std::string count(double n) {
  // 61100840 -> "61,100,840"
  std::string digits = fmt::format("{:.0f}", n);
  std::string out;
  const size_t start = digits[0] == '-' ? 1 : 0;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > start && (digits.size() - i) % 3 == 0)
      out += ',';
    out += digits[i];
  }
  return out;
}

std::string percent(double fraction) {
  return fmt::format("{:.1f} %", 100 * fraction);
}
std::string shape(const Shape& s) {
  return fmt::format("{}x{}x{}", s.c, s.h, s.w);
}

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
        r.epochs, r.epochs == 1 ? "" : "s", r.dataset,
        e.scenario.workers * e.scenario.batchPerWorker, r.stepsPerEpoch,
        r.epochs * r.stepsPerEpoch == r.steps ? "" : ", rounded up to a whole step");
  return s;
}

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

ordered_json phasesJson(const PhaseTimes& p) {
  return {{"fwd_s", p.fwd.value()},
          {"bwd_data_s", p.bwdData.value()},
          {"bwd_weights_s", p.bwdWeights.value()},
          {"update_s", p.update.value()},
          {"total_s", p.total().value()}};
}

ordered_json estimateJson(const StepEstimate& e) {
  const auto& o = e.scenario.options;
  ordered_json j;
  j["engine"] = e.engine;
  j["network"] = e.network;
  j["cluster"] = e.cluster;
  j["strategy"] = std::string(toString(e.scenario.strategy));
  j["workers"] = e.scenario.workers;
  j["batch_per_worker"] = e.scenario.batchPerWorker;
  j["options"] = reports::optionsJson(o);
  j["step_s"] = e.step.value();
  if (e.scenario.strategy == Strategy::kPs) {
    // Steps back to back: step_s is the steady-state period.
    j["first_step_s"] = e.firstStep.value();
    j["steady_steps"] = e.steadySteps;
  }
  j["throughput_examples_per_s"] = e.throughput;
  if (e.training.steps > 0) {
    ordered_json t;
    // Counts are whole (at most 10^12 steps, 2^53 examples): JSON integers.
    t["steps"] = static_cast<int64_t>(e.training.steps);
    if (e.training.epochs > 0) {
      t["epochs"] = e.training.epochs;
      t["dataset_examples"] = static_cast<int64_t>(e.training.dataset);
      t["steps_per_epoch"] = static_cast<int64_t>(e.training.stepsPerEpoch);
    }
    t["time_s"] = e.training.time.value();
    j["training"] = t;
  }
  // A measured step has no single-worker reference, bottleneck or memory
  // model: those keys are left out rather than filled with placeholders.
  const bool measured = e.engine == "executor";
  if (!measured) {
    j["single_worker_step_s"] = e.singleWorkerStep.value();
    j["speedup"] = e.speedup;
    j["efficiency"] = e.efficiency;
    j["bottleneck"] = e.bottleneck;
  }
  if (!e.allreduce.empty())
    j["allreduce"] = e.allreduce;
  if (!e.computeSource.empty())
    j["compute_source"] = e.computeSource;
  if (!measured)
    j["fits_in_memory"] = e.fitsInMemory;
  if (e.rounds.rounds > 0) {
    j["rounds"] = {{"rounds", e.rounds.rounds},
                   {"batch_per_round", e.rounds.batchPerRound},
                   {"transfer_s", e.rounds.transfer.value()},
                   {"compute_s", e.rounds.compute.value()},
                   {"inner_communication_s", e.rounds.innerComm.value()},
                   {"gradient_return_s", e.rounds.gradientReturn.value()},
                   {"hidden_transfers", e.rounds.hiddenTransfers},
                   {"egress_bytes_per_round", e.rounds.egressPerRound.value()}};
  }
  ordered_json workers = ordered_json::array();
  for (const auto& w : e.workers) {
    ordered_json wj{{"rank", w.rank},
                    {"compute", phasesJson(w.compute)},
                    {"communication_s", w.communication.value()},
                    {"exposed_communication_s", w.exposedCommunication.value()},
                    {"idle_s", w.idle.value()},
                    {"sent_bytes", w.sent.value()},
                    {"received_bytes", w.received.value()}};
    if (!measured)
      wj["memory"] = {{"weights_bytes", w.memory.weights.value()},
                      {"gradients_bytes", w.memory.gradients.value()},
                      {"optimizer_bytes", w.memory.optimizer.value()},
                      {"activations_bytes", w.memory.activations.value()},
                      {"buffers_bytes", w.memory.buffers.value()},
                      {"total_bytes", w.memory.total().value()}};
    workers.push_back(std::move(wj));
  }
  j["per_worker"] = workers;
  return j;
}

const char* kCsvHeader =
    "engine,network,cluster,strategy,workers,batch_per_worker,element,optimizer,overlap,fc_update,"
    "segment_bytes,conv_sync,step_s,throughput_examples_per_s,speedup,efficiency,compute_s,"
    "communication_s,exposed_communication_s,sent_bytes_per_worker,received_bytes_per_worker,"
    "memory_bytes_per_worker,fits_in_memory,bottleneck,allreduce,training_steps,training_time_s\n";

void csvRow(std::ostream& out, const StepEstimate& e) {
  const auto& o = e.scenario.options;
  const auto& w = busiest(e);
  out << fmt::format(
      "{},{},{},{},{},{},{},{},{},{},{},{},{:.9g},{:.9g},{:.6g},{:.6g},{:.9g},{:.9g},{:.9g},"
      "{:.9g},{:.9g},{:.9g},{},{},{},{},{}\n",
      e.engine, e.network, e.cluster, toString(e.scenario.strategy), e.scenario.workers,
      e.scenario.batchPerWorker, toString(o.element), toString(o.optimizer),
      o.overlap ? "on" : "off", toString(o.fcUpdate), o.segment.value(), toString(o.convSync),
      e.step.value(), e.throughput, e.speedup, e.efficiency, w.compute.total().value(),
      w.communication.value(), w.exposedCommunication.value(), w.sent.value(), w.received.value(),
      peakMemory(e).value(), e.fitsInMemory ? "yes" : "no", reports::csvField(e.bottleneck),
      reports::csvField(e.allreduce),
      e.training.steps > 0 ? fmt::format("{:.0f}", e.training.steps) : std::string(),
      e.training.steps > 0 ? fmt::format("{:.9g}", e.training.time.value()) : std::string());
}

}  // namespace

void printPresetList(std::ostream& out, Format format) {
  // configs/experiments/ holds comparisons (strata compare) and validation
  // suites (strata validate --suite); each is listed under its own kind.
  std::vector<std::string> experiments, suites;
  for (const auto& n : listPresets(ConfigKind::kExperiment))
    (isValidationSuite(resolveConfig(ConfigKind::kExperiment, n, "experiment")) ? suites
                                                                                : experiments)
        .push_back(n);
  const std::vector<std::pair<std::string, std::vector<std::string>>> kinds = {
      {"network", listPresets(ConfigKind::kNetwork)},
      {"cluster", listPresets(ConfigKind::kCluster)},
      {"experiment", experiments},
      {"validation-suite", suites}};
  if (format == Format::kJson) {
    ordered_json j;
    j["networks"] = kinds[0].second;
    j["clusters"] = kinds[1].second;
    j["experiments"] = kinds[2].second;
    j["validation_suites"] = kinds[3].second;
    j["config_dirs"] = configDirs();
    out << j.dump(2) << "\n";
    return;
  }
  if (format == Format::kCsv) {
    out << "kind,name\n";
    for (const auto& [kind, names] : kinds)
      for (const auto& n : names)
        out << kind << "," << n << "\n";
    return;
  }
  std::string dirs;
  for (const auto& d : configDirs())
    dirs += (dirs.empty() ? "" : ", ") + d;
  out << "presets in " << dirs << "\n";
  const char* titles[] = {"networks:", "clusters:", "experiments (strata compare NAME):",
                          "validation suites (strata validate --suite NAME):"};
  for (size_t i = 0; i < kinds.size(); ++i) {
    out << "\n" << titles[i] << "\n";
    for (const auto& n : kinds[i].second)
      out << "  " << n << "\n";
  }
}

void printNetwork(std::ostream& out, const Network& net, ElementType element, Format format) {
  const double e = elementBytes(element);
  const double convFlops = net.fwdFlopsOfKind(LayerKind::kConv);
  const double fcFlops = net.fwdFlopsOfKind(LayerKind::kFc);
  const double rnnFlops = net.fwdFlopsOfKind(LayerKind::kRnn);
  const double totalFlops = net.totalFwdFlops();
  const double params = double(net.totalParams());
  const double convParams = double(net.paramsOfKind(LayerKind::kConv));
  const double fcParams = double(net.paramsOfKind(LayerKind::kFc));
  const double rnnParams = double(net.paramsOfKind(LayerKind::kRnn));
  const double attnParams = double(net.paramsOfKind(LayerKind::kAttention));
  const double attnFlops = net.fwdFlopsOfKind(LayerKind::kAttention);
  // Saved for backward per example: each output, and what attention keeps
  // besides (Q, K, V, context, probabilities).
  auto savedBytes = [&](const Layer& l) {
    return (double(l.outShape.elements()) + l.savedElems) * e;
  };
  double activations = 0;
  for (const auto& l : net.layers)
    activations += savedBytes(l);

  if (format == Format::kJson) {
    ordered_json j;
    j["network"] = net.name;
    j["description"] = net.description;
    j["input"] = {{"channels", net.input.c}, {"height", net.input.h}, {"width", net.input.w}};
    j["element"] = std::string(toString(element));
    ordered_json layers = ordered_json::array();
    for (const auto& l : net.layers) {
      // What a framework needs to build the same layer (scripts/gpu/torch_step.py).
      ordered_json inputs = ordered_json::array();
      for (int p : l.inputs)
        inputs.push_back(p < 0 ? std::string("input") : net.layers[static_cast<size_t>(p)].name);
      ordered_json spec = ordered_json::object();
      const auto& sp = l.spec;
      switch (l.kind) {
        case LayerKind::kConv:
          spec = {{"filters", sp.filters}, {"kernel", {sp.kernelH, sp.kernelW}},
                  {"stride", sp.stride},   {"pad", sp.pad},
                  {"groups", sp.groups},   {"bias", sp.bias}};
          break;
        case LayerKind::kPool:
          spec = {{"mode", sp.poolMode == PoolMode::kMax ? "max" : "avg"},
                  {"global", sp.global},
                  {"kernel", {sp.kernelH, sp.kernelW}},
                  {"stride", sp.stride},
                  {"pad", sp.pad}};
          break;
        case LayerKind::kFc:
          spec = {{"outputs", sp.outputs}, {"flatten", sp.flatten}, {"bias", sp.bias}};
          if (sp.tiedTo >= 0)
            spec["tied"] = net.layers[static_cast<size_t>(sp.tiedTo)].name;
          break;
        case LayerKind::kEmbedding:
          spec = {{"vocab", sp.vocab}, {"outputs", sp.outputs}, {"positions", sp.positions}};
          break;
        case LayerKind::kAttention:
          spec = {{"heads", sp.heads}, {"causal", sp.causal}, {"bias", sp.bias}};
          break;
        case LayerKind::kLrn:
          spec = {{"size", sp.lrnSize}};
          break;
        case LayerKind::kDropout:
          spec = {{"rate", sp.dropoutRate}};
          break;
        default:
          break;
      }
      layers.push_back({{"name", l.name},
                        {"kind", std::string(toString(l.kind))},
                        {"inputs", inputs},
                        {"spec", spec},
                        {"input_shape", {l.inShape.c, l.inShape.h, l.inShape.w}},
                        {"output", {l.outShape.c, l.outShape.h, l.outShape.w}},
                        {"params", l.params},
                        {"fwd_flops_per_example", l.fwdFlops},
                        {"bwd_data_flops_per_example", l.bwdDataFlops},
                        {"bwd_weights_flops_per_example", l.bwdWeightsFlops},
                        {"activation_bytes_per_example", savedBytes(l)},
                        {"model_parallel", net.modelParallelFrom >= 0 &&
                                               &l - net.layers.data() >= net.modelParallelFrom}});
    }
    j["layers"] = layers;
    j["totals"] = {{"params", net.totalParams()},
                   {"weight_bytes", params * e},
                   {"fwd_flops_per_example", totalFlops},
                   {"train_flops_per_example", net.totalTrainFlops()},
                   {"activation_bytes_per_example", activations},
                   {"conv_params_fraction", convParams / params},
                   {"fc_params_fraction", fcParams / params},
                   {"rnn_params_fraction", rnnParams / params},
                   {"conv_fwd_flops_fraction", convFlops / totalFlops},
                   {"fc_fwd_flops_fraction", fcFlops / totalFlops},
                   {"rnn_fwd_flops_fraction", rnnFlops / totalFlops},
                   {"attention_params_fraction", attnParams / params},
                   {"attention_fwd_flops_fraction", attnFlops / totalFlops}};
    if (net.modelParallelFrom < 0)
      j["no_model_parallel_part"] = net.noModelParallelWhy;
    out << j.dump(2) << "\n";
    return;
  }
  if (format == Format::kCsv) {
    out << "name,kind,output_c,output_h,output_w,params,fwd_flops_per_example,"
           "bwd_data_flops_per_example,bwd_weights_flops_per_example,activation_bytes_per_"
           "example\n";
    for (const auto& l : net.layers)
      out << fmt::format("{},{},{},{},{},{},{:.0f},{:.0f},{:.0f},{:.0f}\n", l.name,
                         toString(l.kind), l.outShape.c, l.outShape.h, l.outShape.w, l.params,
                         l.fwdFlops, l.bwdDataFlops, l.bwdWeightsFlops, savedBytes(l));
    return;
  }
  out << net.name << ": " << net.description << "\n";
  out << fmt::format("input {}, element {} ({} bytes)\n\n", shape(net.input), toString(element), e);
  Table t({"layer", "kind", "output", "params", "fwd FLOPs/example", "activation/example"}, 3);
  for (size_t i = 0; i < net.layers.size(); ++i) {
    const auto& l = net.layers[i];
    std::string name = l.name;
    if (static_cast<int>(i) == net.modelParallelFrom)
      name += " *";
    t.add({name, std::string(toString(l.kind)), shape(l.outShape), count(double(l.params)),
           formatFlops(Flops(l.fwdFlops)), formatBytes(Bytes(savedBytes(l)))});
  }
  t.add({"total", "", "", count(params), formatFlops(Flops(totalFlops)),
         formatBytes(Bytes(activations))});
  t.print(out);
  out << "\n";
  out << fmt::format("parameters  {} ({} of weights)\n", count(params),
                     formatBytes(Bytes(params * e)));
  out << fmt::format("compute     {} fwd, {} fwd+bwd per example\n", formatFlops(Flops(totalFlops)),
                     formatFlops(Flops(net.totalTrainFlops())));
  out << fmt::format("conv layers {} of parameters, {} of fwd FLOPs\n",
                     percent(convParams / params), percent(convFlops / totalFlops));
  out << fmt::format("fc layers   {} of parameters, {} of fwd FLOPs\n", percent(fcParams / params),
                     percent(fcFlops / totalFlops));
  if (rnnParams > 0)
    out << fmt::format("rnn layers  {} of parameters, {} of fwd FLOPs\n",
                       percent(rnnParams / params), percent(rnnFlops / totalFlops));
  if (attnParams > 0 || attnFlops > 0)
    out << fmt::format("attention   {} of parameters, {} of fwd FLOPs\n",
                       percent(attnParams / params), percent(attnFlops / totalFlops));
  if (net.modelParallelFrom >= 0)
    out << "* owt-a/b/c run this layer and the ones after it model-parallel\n";
  else
    out << "owt-a/b/c do not apply: " << net.noModelParallelWhy << "\n";
}

void printEstimate(std::ostream& out, const StepEstimate& e, Format format) {
  if (format == Format::kJson) {
    out << estimateJson(e).dump(2) << "\n";
    return;
  }
  if (format == Format::kCsv) {
    out << kCsvHeader;
    csvRow(out, e);
    return;
  }
  const auto& sc = e.scenario;
  out << fmt::format("{} on {}: {}, {} workers x {} examples (global batch {}), {} [{}]\n\n",
                     e.network, e.cluster, toString(sc.strategy), sc.workers, sc.batchPerWorker,
                     sc.workers * sc.batchPerWorker, optionsLine(e), e.engine);
  out << fmt::format("step time     {}\n", formatSeconds(e.step));
  if (sc.strategy == Strategy::kPs && e.steadySteps > 1)
    out << fmt::format(
        "first step    {} (steps run back to back: the step time is the steady "
        "period over {} steps)\n",
        formatSeconds(e.firstStep), e.steadySteps);
  out << fmt::format("throughput    {:.1f} examples/s\n", e.throughput);
  if (e.training.steps > 0)
    out << fmt::format("time to train {} ({})\n", formatDuration(e.training.time),
                       trainingRunText(e));
  // Measured steps have no single-worker reference, bottleneck or memory model.
  if (e.engine != "executor") {
    out << fmt::format("speedup       {:.2f}x over one worker ({} per step of {} examples)\n",
                       e.speedup, formatSeconds(e.singleWorkerStep), sc.batchPerWorker);
    out << fmt::format("efficiency    {}\n", percent(e.efficiency));
    out << fmt::format("bottleneck    {}\n", e.bottleneck);
    if (!e.allreduce.empty())
      out << fmt::format("allreduce     {}{}\n", e.allreduce,
                         isModelParallel(sc.strategy) ? " (conv gradients; FC layers are model "
                                                        "parallel)"
                                                      : "");
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
      j.push_back(estimateJson(e));
    out << j.dump(2) << "\n";
    return;
  }
  if (format == Format::kCsv) {
    out << kCsvHeader;
    for (const auto& e : estimates)
      csvRow(out, e);
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
    auto j = estimateJson(r.estimate);
    ordered_json links = ordered_json::array();
    for (const auto& l : r.links)
      links.push_back({{"link", l.name},
                       {"bandwidth_bytes_per_s", l.bandwidth.value()},
                       {"bytes", l.bytes.value()},
                       {"busy_s", l.busy.value()},
                       {"utilisation", l.utilisation}});
    j["links"] = links;
    j["events"] = r.events;
    if (!r.detail.empty())
      j["simulated"] = r.detail;
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

void printPlan(std::ostream& out, const Plan& plan, const Network& net, Format format) {
  checkPlanPrintable(plan, limits());  // every task and flow is held in memory first
  const auto& sc = plan.scenario;
  auto layerName = [&](int l) {
    return l >= 0 ? net.layers[static_cast<size_t>(l)].name : std::string();
  };
  if (format == Format::kJson) {
    ordered_json j;
    j["network"] = plan.network;
    j["strategy"] = std::string(toString(sc.strategy));
    j["workers"] = sc.workers;
    j["batch_per_worker"] = sc.batchPerWorker;
    ordered_json collectives = ordered_json::array();
    for (const auto& c : plan.collectives)
      collectives.push_back({{"algorithm", c.algorithm},
                             {"buffer", std::string(toString(c.buffer))},
                             {"bytes", c.bytes.value()},
                             {"first_layer", layerName(c.firstLayer)},
                             {"last_layer", layerName(c.lastLayer)},
                             {"parts", c.parts},
                             {"segments", c.segments},
                             {"round", c.round},
                             {"tasks", {c.firstTask, c.lastTask}}});
    j["collectives"] = collectives;
    if (plan.iterations > 1) {
      // ps: steps back to back; a job is one key's push, server updates and pull.
      j["steps"] = plan.iterations;
      ordered_json jobs = ordered_json::array();
      for (const auto& pj : plan.jobs)
        jobs.push_back({{"step", pj.iteration},
                        {"priority", pj.priority},
                        {"first_layer", layerName(pj.firstLayer)},
                        {"last_layer", layerName(pj.lastLayer)},
                        {"tasks", {pj.firstTask, pj.lastTask}}});
      j["jobs"] = jobs;
    }
    ordered_json tasks = ordered_json::array();
    for (size_t i = 0; i < plan.tasks.size(); ++i) {
      const auto& t = plan.tasks[i];
      ordered_json task{{"id", i}, {"kind", std::string(toString(t.kind))}};
      if (plan.iterations > 1)
        task["step"] = t.iteration;
      if (t.kind == TaskKind::kUpdate && t.part >= 0)
        task["server_shard"] = t.part;
      if (t.kind == TaskKind::kCompute || t.kind == TaskKind::kUpdate) {
        task["worker"] = t.worker;
        if (t.kind == TaskKind::kCompute) {
          task["layer"] = layerName(t.layer);
          task["phase"] = std::string(toString(t.phase));
          task["examples"] = t.examples;
          task["fraction"] = t.fraction;
        } else {
          task["params"] = t.params;
        }
      } else {
        task["collective"] = t.collective;
        task["step"] = t.step;
        task["segment"] = t.segment;
        task["pattern"] = std::string(toString(t.pattern));
        if (t.root >= 0)
          task["root"] = t.root;
        task["bytes"] = t.bytes.value();
        if (t.kind == TaskKind::kReduce)
          task["chunks_summed"] = t.inputs;
        ordered_json flows = ordered_json::array();
        for (const auto& f : plan.flowsOf(t))
          flows.push_back({f.src, f.dst, f.part});
        task["flows"] = flows;  // [src, dst, part]
      }
      task["deps"] = std::vector<int>(plan.depsOf(t).begin(), plan.depsOf(t).end());
      tasks.push_back(task);
    }
    j["tasks"] = tasks;
    out << j.dump(1) << "\n";
    return;
  }
  out << fmt::format(
      "plan of {}: {}, {} workers x {} examples; {} tasks ({} compute, {} transfer, "
      "{} reduce, {} update), {} collectives\n\n",
      plan.network, toString(sc.strategy), sc.workers, sc.batchPerWorker, plan.tasks.size(),
      plan.count(TaskKind::kCompute), plan.count(TaskKind::kTransfer),
      plan.count(TaskKind::kReduce), plan.count(TaskKind::kUpdate), plan.collectives.size());
  if (plan.iterations > 1)
    out << fmt::format(
        "{} steps back to back; {} ps jobs (a layer's push, server updates and pull), served "
        "one at a time, {} first\n\n",
        plan.iterations, plan.jobs.size(),
        sc.options.psPriority == PsPriority::kFirstNeeded ? "the earliest layer"
        : sc.options.psPriority == PsPriority::kFifo      ? "the earliest ready"
                                                          : "the latest ready");
  if (!plan.collectives.empty()) {
    Table c({"#", "collective", "buffer", "layers", "size", "parts x segments", "round", "tasks"},
            4);
    for (size_t i = 0; i < plan.collectives.size(); ++i) {
      const auto& x = plan.collectives[i];
      const std::string layers = x.firstLayer == x.lastLayer
                                     ? layerName(x.firstLayer)
                                     : layerName(x.lastLayer) + ".." + layerName(x.firstLayer);
      c.add({std::to_string(i), x.algorithm, std::string(toString(x.buffer)), layers,
             formatBytes(x.bytes), fmt::format("{} x {}", x.parts, x.segments),
             x.round >= 0 ? std::to_string(x.round) : "",
             fmt::format("{}-{}", x.firstTask, x.lastTask)});
    }
    c.print(out);
    out << "\n";
  }
  Table t({"id", "kind", "who", "what", "size", "after"}, 4);
  for (size_t i = 0; i < plan.tasks.size(); ++i) {
    const auto& task = plan.tasks[i];
    std::string who, what, size;
    switch (task.kind) {
      case TaskKind::kCompute:
        who = fmt::format("worker {}", task.worker);
        what = fmt::format("{} {}", toString(task.phase), layerName(task.layer));
        size = task.fraction < 1 ? fmt::format("{:g} ex x 1/{:g}", task.examples, 1 / task.fraction)
                                 : fmt::format("{:g} ex", task.examples);
        break;
      case TaskKind::kUpdate:
        who = fmt::format("worker {}", task.worker);
        what = "update";
        size = fmt::format("{} params", count(task.params));
        break;
      case TaskKind::kTransfer:
      case TaskKind::kReduce: {
        const auto flows = plan.flowsOf(task);
        who = task.pattern == PatternKind::kGather    ? fmt::format("all -> {}", task.root)
              : task.pattern == PatternKind::kScatter ? fmt::format("{} -> all", task.root)
                                                      : std::string(toString(task.pattern));
        if (task.pattern == PatternKind::kPairs ||
            (task.pattern == PatternKind::kRing && flows.size() <= 4)) {
          who.clear();
          for (size_t f = 0; f < flows.size() && f < 4; ++f)
            who += fmt::format("{}{}->{}", f ? " " : "", flows[f].src, flows[f].dst);
          if (flows.size() > 4)
            who += " ...";
        }
        what = fmt::format(
            "#{} {} {} {}", task.collective,
            plan.collectives[static_cast<size_t>(task.collective)].algorithm,
            task.kind == TaskKind::kReduce ? "sum" : "send",
            fmt::format("step {}{}", task.step,
                        task.segment > 0 ||
                                plan.collectives[static_cast<size_t>(task.collective)].segments > 1
                            ? fmt::format(" seg {}", task.segment)
                            : ""));
        size = task.kind == TaskKind::kReduce
                   ? fmt::format("{} x {}", task.inputs, formatBytes(task.bytes))
                   : fmt::format("{} per flow", formatBytes(task.bytes));
        break;
      }
    }
    std::string after;
    const auto deps = plan.depsOf(task);
    for (size_t d = 0; d < deps.size() && d < 6; ++d)
      after += fmt::format("{}{}", d ? "," : "", deps[d]);
    if (deps.size() > 6)
      after += fmt::format(",... ({})", deps.size());
    t.add({std::to_string(i), std::string(toString(task.kind)), who, what, size, after});
  }
  t.print(out);
}

namespace {

// An optional figure as JSON: the value, or null where it does not apply.
ordered_json orNull(const std::optional<double>& v) {
  return v ? ordered_json(*v) : ordered_json(nullptr);
}

std::string signedPercent(double e) {
  return fmt::format("{:+.1f} %", 100 * e);
}
std::string signedPercent(const std::optional<double>& e) {
  return e ? signedPercent(*e) : "-";
}

std::string rankedPairText(const RankedPair& p) {
  return fmt::format("{} b={} K={}: {} ({}) measured faster than {} ({}), predicted {} vs {}",
                     p.network, p.batchPerWorker, p.workers, toString(p.faster),
                     formatSeconds(p.measuredFaster), toString(p.slower),
                     formatSeconds(p.measuredSlower), formatSeconds(p.predictedFaster),
                     formatSeconds(p.predictedSlower));
}

ordered_json rankedPairJson(const RankedPair& p) {
  return {{"network", p.network},
          {"batch_per_worker", p.batchPerWorker},
          {"workers", p.workers},
          {"measured_faster", std::string(toString(p.faster))},
          {"measured_slower", std::string(toString(p.slower))},
          {"measured_faster_step_s", p.measuredFaster.value()},
          {"measured_slower_step_s", p.measuredSlower.value()},
          {"predicted_faster_step_s", p.predictedFaster.value()},
          {"predicted_slower_step_s", p.predictedSlower.value()}};
}

// "ring (14.2 ms), owt-b (15.1 ms)": the engines whose prediction is a tie.
std::string tiesText(const ValidationRow& r) {
  std::string s;
  auto add = [&](const char* name, Seconds predicted) {
    if (r.withinSpread(predicted))
      s += (s.empty() ? "" : ", ") + std::string(name);
  };
  add("model", r.model.step);
  add("sim", r.sim.step);
  if (r.profileModel)
    add("profile", r.profileModel->step);
  return s;
}

// The error, spread and ranking figures over the counted rows.
void printErrorFigures(std::ostream& out, const ValidationSummary& summary,
                       const std::string& which) {
  const auto& rk = summary.ranking;
  out << fmt::format(
      "step time |error| over {} {} rows (kernel tables): model median {:.1f} %, worst {:.1f} %; "
      "simulator median {:.1f} %, worst {:.1f} %\n",
      summary.rowsCounted, which, 100 * summary.medianModelError, 100 * summary.worstModelError,
      100 * summary.medianSimError, 100 * summary.worstSimError);
  if (summary.rowsWithProfile > 0)
    out << fmt::format(
        "composition |error| (profile-based model, has seen each network's ops) over {} rows: "
        "median {:.1f} %, worst {:.1f} %\n",
        summary.rowsWithProfile, 100 * summary.medianProfileModelError,
        100 * summary.worstProfileModelError);
  out << fmt::format("per phase, median |error|: compute model {:.1f} %, sim {:.1f} %; ",
                     100 * summary.medianModelComputeError, 100 * summary.medianSimComputeError);
  if (summary.rowsWithCommunication > 0)
    out << fmt::format("communication ({} rows) model {:.1f} %, sim {:.1f} %\n",
                       summary.rowsWithCommunication, 100 * summary.medianModelCommunicationError,
                       100 * summary.medianSimCommunicationError);
  else
    out << "communication not compared (no row with measurable communication)\n";
  out << fmt::format(
      "within the measured spread (a tie): model {} of {} rows, simulator {} of {}\n",
      summary.modelWithinSpread, summary.rowsCounted, summary.simWithinSpread, summary.rowsCounted);
  out << fmt::format(
      "ranking: {} of {} measurable pairs ordered as measured by the model (simulator: {} of "
      "{}); pairs within the spread are ties and not counted\n",
      rk.modelOrdered, rk.measurablePairs, rk.simOrdered, rk.measurablePairs);
  for (const auto& p : rk.modelMisordered)
    out << "  misordered by the model: " << rankedPairText(p) << "\n";
  for (const auto& p : rk.simMisordered)
    out << "  misordered by the simulator: " << rankedPairText(p) << "\n";
}

}  // namespace

void printValidation(std::ostream& out, const std::vector<ValidationRow>& rows,
                     const ValidationSummary& summary, Format format, const LoadReport& load) {
  const auto& rk = summary.ranking;
  if (format == Format::kJson) {
    auto four = [](const ValidationRow& r, Seconds (*f)(const StepEstimate&)) {
      ordered_json j{{"measured", f(r.measured).value()},
                     {"model", f(r.model).value()},
                     {"sim", f(r.sim).value()}};
      j["profile_model"] = r.profileModel ? ordered_json(f(*r.profileModel).value()) : nullptr;
      return j;
    };
    ordered_json j;
    ordered_json rs = ordered_json::array();
    for (const auto& r : rows) {
      ordered_json repeats = ordered_json::array();
      for (auto t : r.repeats)
        repeats.push_back(t.value());
      const auto profileErr = r.profileModelError();
      ordered_json row;
      row["network"] = r.measured.network;
      row["strategy"] = std::string(toString(r.measured.scenario.strategy));
      row["workers"] = r.measured.scenario.workers;
      row["batch_per_worker"] = r.measured.scenario.batchPerWorker;
      row["step_s"] = four(r, [](const StepEstimate& e) { return e.step; });
      row["repeats_step_s"] = repeats;
      row["spread_s"] = {{"min", r.spreadMin().value()}, {"max", r.spreadMax().value()}};
      row["spread_fraction"] = r.spreadFraction();
      row["model_error"] = r.modelError();
      row["sim_error"] = r.simError();
      row["profile_model_error"] = orNull(profileErr);
      row["within_spread"] = {
          {"model", r.withinSpread(r.model.step)},
          {"sim", r.withinSpread(r.sim.step)},
          {"profile_model", r.profileModel ? ordered_json(r.withinSpread(r.profileModel->step))
                                           : ordered_json(nullptr)}};
      row["compute_s"] = four(r, meanCompute);
      row["compute_error"] = {
          {"model", orNull(computeError(r.model, r.measured))},
          {"sim", orNull(computeError(r.sim, r.measured))},
          {"profile_model", r.profileModel ? orNull(computeError(*r.profileModel, r.measured))
                                           : ordered_json(nullptr)}};
      row["communication_s"] = four(r, meanCommunication);
      row["communication_error"] = {{"model", orNull(communicationError(r.model, r.measured))},
                                    {"sim", orNull(communicationError(r.sim, r.measured))}};
      row["exposed_communication_s"] = four(r, meanExposed);
      row["held_out"] = r.heldOut();
      row["fitted_on_network"] = r.fittedOnNetwork;
      row["within_claims"] = r.withinClaims;
      row["busy"] = r.busy;
      row["others_cpu_cores"] = r.othersCores >= 0 ? ordered_json(r.othersCores) : nullptr;
      row["speed_drift"] = r.speedDrift;
      row["note"] = r.note;
      rs.push_back(std::move(row));
    }
    j["rows"] = rs;
    ordered_json misModel = ordered_json::array(), misSim = ordered_json::array();
    for (const auto& p : rk.modelMisordered)
      misModel.push_back(rankedPairJson(p));
    for (const auto& p : rk.simMisordered)
      misSim.push_back(rankedPairJson(p));
    j["summary"] = {
        {"rows", summary.rows},
        {"rows_within_claims", summary.rowsWithinClaims},
        {"rows_held_out", summary.rowsHeldOut},
        {"rows_counted", summary.rowsCounted},
        {"counted_held_out", summary.countedHeldOut},
        {"median_model_error", summary.medianModelError},
        {"worst_model_error", summary.worstModelError},
        {"median_sim_error", summary.medianSimError},
        {"worst_sim_error", summary.worstSimError},
        {"rows_with_profile", summary.rowsWithProfile},
        {"median_profile_model_error", summary.medianProfileModelError},
        {"worst_profile_model_error", summary.worstProfileModelError},
        {"median_compute_error",
         {{"model", summary.medianModelComputeError}, {"sim", summary.medianSimComputeError}}},
        {"rows_with_communication", summary.rowsWithCommunication},
        {"median_communication_error",
         {{"model", summary.medianModelCommunicationError},
          {"sim", summary.medianSimCommunicationError}}},
        {"within_spread", {{"model", summary.modelWithinSpread}, {"sim", summary.simWithinSpread}}},
        {"ranking",
         {{"measurable_pairs", rk.measurablePairs},
          {"model_ordered", rk.modelOrdered},
          {"sim_ordered", rk.simOrdered},
          {"model_misordered", misModel},
          {"sim_misordered", misSim}}}};
    ordered_json busyRows = ordered_json::array(), driftRows = ordered_json::array();
    for (const auto& b : load.busyRows)
      busyRows.push_back(b);
    for (const auto& b : load.driftRows)
      driftRows.push_back(b);
    j["load"] = {{"measured", load.measured},
                 {"cores", load.cores},
                 {"load_average_before",
                  load.measured ? ordered_json(load.loadAverageBefore) : ordered_json(nullptr)},
                 {"others_cpu_cores_before",
                  load.measured ? ordered_json(load.othersCoresBefore) : ordered_json(nullptr)},
                 {"busy_before", load.busyBefore},
                 {"busy_rows", busyRows},
                 {"speed_drift_rows", driftRows},
                 {"busy", load.busyBefore || !load.busyRows.empty()}};
    out << j.dump(2) << "\n";
    return;
  }
  if (format == Format::kCsv) {
    auto num = [](const std::optional<double>& v) {
      return v ? fmt::format("{:.9g}", *v) : std::string();
    };
    out << "network,batch_per_worker,workers,strategy,measured_step_s,spread_min_s,spread_max_s,"
           "spread_fraction,repeats,model_step_s,model_error,sim_step_s,sim_error,"
           "profile_model_step_s,profile_model_error,model_compute_error,sim_compute_error,"
           "model_communication_error,sim_communication_error,model_within_spread,"
           "sim_within_spread,held_out,within_claims,busy,others_cpu_cores,note\n";
    for (const auto& r : rows) {
      const auto& sc = r.measured.scenario;
      std::optional<double> profileStep;
      if (r.profileModel)
        profileStep = r.profileModel->step.value();
      out << fmt::format(
          "{},{},{},{},{:.9g},{:.9g},{:.9g},{:.6g},{},{:.9g},{:.6g},{:.9g},{:.6g},{},{},{},"
          "{},{},{},{},{},{},{},{},{},{}\n",
          reports::csvField(r.measured.network), sc.batchPerWorker, sc.workers,
          toString(sc.strategy), r.measured.step.value(), r.spreadMin().value(),
          r.spreadMax().value(), r.spreadFraction(), std::max<size_t>(1, r.repeats.size()),
          r.model.step.value(), r.modelError(), r.sim.step.value(), r.simError(), num(profileStep),
          num(r.profileModelError()), num(computeError(r.model, r.measured)),
          num(computeError(r.sim, r.measured)), num(communicationError(r.model, r.measured)),
          num(communicationError(r.sim, r.measured)), r.withinSpread(r.model.step) ? "yes" : "no",
          r.withinSpread(r.sim.step) ? "yes" : "no", r.heldOut() ? "yes" : "no",
          r.withinClaims ? "yes" : "no", r.busy ? "yes" : "no",
          r.othersCores >= 0 ? fmt::format("{:.3g}", r.othersCores) : "",
          reports::csvField(r.note));
    }
    return;
  }

  Table t({"network", "b", "K", "strategy", "measured", "spread", "model", "error", "sim", "error",
           "profile", "error", "compute error (model / sim)", "comm error (model / sim)", "tie",
           "note"},
          4);
  for (const auto& r : rows) {
    const auto& sc = r.measured.scenario;
    t.add({r.measured.network, std::to_string(sc.batchPerWorker), std::to_string(sc.workers),
           std::string(toString(sc.strategy)), formatSeconds(r.measured.step),
           r.repeats.size() > 1 ? fmt::format("±{:.1f} %", 100 * r.spreadFraction()) : "-",
           formatSeconds(r.model.step), signedPercent(r.modelError()), formatSeconds(r.sim.step),
           signedPercent(r.simError()), r.profileModel ? formatSeconds(r.profileModel->step) : "-",
           signedPercent(r.profileModelError()),
           signedPercent(computeError(r.model, r.measured)) + " / " +
               signedPercent(computeError(r.sim, r.measured)),
           signedPercent(communicationError(r.model, r.measured)) + " / " +
               signedPercent(communicationError(r.sim, r.measured)),
           tiesText(r), r.withinClaims ? r.note : fmt::format("outside claims: {}", r.note)});
  }
  t.print(out);

  out << "\n";
  const int fitted = summary.rowsWithinClaims - summary.rowsHeldOut;
  const std::string which = summary.countedHeldOut ? "held-out" : "fitted (not held-out)";
  out << fmt::format("rows: {} of {} within claims, {} held-out, {} fitted on their network\n",
                     summary.rowsWithinClaims, summary.rows, summary.rowsHeldOut, fitted);
  if (summary.rowsCounted == 0) {
    out << "no row within claims (see each row's note): no error figures are claimed\n";
  } else {
    if (!summary.countedHeldOut)
      out << "no held-out rows: the calibration timed every network validated here, so the "
             "errors below are fits, not predictions\n";
    printErrorFigures(out, summary, which);
  }
  if (!load.measured) {
    out << "load not measured (no /proc on this system)\n";
    return;
  }
  out << fmt::format(
      "load: 1-minute load average {:.2f} before the start, other processes used {:.2f} cores "
      "(of {})\n",
      load.loadAverageBefore, load.othersCoresBefore, load.cores);
  if (load.busyBefore)
    out << fmt::format(
        "warning: the machine was busy before the start (load average {:.2f}, others {:.2f} "
        "cores); measurements may be skewed\n",
        load.loadAverageBefore, load.othersCoresBefore);
  if (!load.busyRows.empty()) {
    std::string names;
    for (const auto& b : load.busyRows)
      names += (names.empty() ? "" : ", ") + b;
    out << fmt::format(
        "warning: other processes used more than {:.2f} cores during {} row(s): {}\n",
        kBusyOthersCores, load.busyRows.size(), names);
  }
  if (!load.driftRows.empty()) {
    std::string names;
    for (const auto& b : load.driftRows)
      names += (names.empty() ? "" : ", ") + b;
    out << fmt::format(
        "warning: the machine ran more than {:.0f} % off its calibrated speed (a reference GEMM "
        "re-timed around each row) during {} row(s), left out of the summary: {}\n",
        100 * kMaxSpeedDrift, load.driftRows.size(), names);
  }
}

namespace {
// The rate each layer kind reaches in each phase: the network's FLOPs of
// that kind and phase over the measured time (kinds with FLOPs only).
void printProfileRates(std::ostream& out, const Network& net, const OpProfile& profile) {
  struct Sum {
    double flops[3] = {0, 0, 0};
    double seconds[3] = {0, 0, 0};
  };
  std::vector<std::pair<LayerKind, Sum>> kinds;
  for (size_t i = 0; i < net.layers.size(); ++i) {
    const Layer& l = net.layers[i];
    const double f[3] = {l.fwdFlops, l.readsNetworkInput() ? 0.0 : l.bwdDataFlops,
                         l.bwdWeightsFlops};
    if (f[0] + f[1] + f[2] <= 0)
      continue;
    auto it =
        std::find_if(kinds.begin(), kinds.end(), [&](const auto& k) { return k.first == l.kind; });
    if (it == kinds.end())
      it = kinds.insert(kinds.end(), {l.kind, Sum{}});
    const auto& m = profile.layers[i];
    const double s[3] = {m.fwd.value(), m.bwdData.value(), m.bwdWeights.value()};
    for (int p = 0; p < 3; ++p) {
      it->second.flops[p] += f[p] * profile.batch;
      it->second.seconds[p] += s[p];
    }
  }
  if (kinds.empty())
    return;
  out << "\nrate by layer kind (the model's FLOPs / measured time):\n";
  Table t({"kind", "fwd", "bwd_data", "bwd_weights"}, 1);
  for (const auto& [kind, sum] : kinds) {
    std::vector<std::string> row{std::string(toString(kind))};
    for (int p = 0; p < 3; ++p)
      row.push_back(sum.flops[p] > 0 && sum.seconds[p] > 0
                        ? fmt::format("{:.1f} GFLOP/s", sum.flops[p] / sum.seconds[p] / 1e9)
                        : std::string("-"));
    t.add(row);
  }
  t.print(out);
}
}  // namespace

void printProfile(std::ostream& out, const Network& net, const OpProfile& profile,
                  const Cluster* cluster, Format format) {
  std::optional<ComputeCosts> costs;
  if (cluster)
    costs.emplace(net, *cluster, ElementType::kFp32, 1);
  const Phase phases[] = {Phase::kFwd, Phase::kBwdData, Phase::kBwdWeights, Phase::kUpdate};
  auto measured = [&](size_t i, Phase p) {
    const auto& l = profile.layers[i];
    return p == Phase::kFwd          ? l.fwd
           : p == Phase::kBwdData    ? l.bwdData
           : p == Phase::kBwdWeights ? l.bwdWeights
                                     : l.update;
  };
  auto priced = [&](size_t i, Phase p) {
    const auto& l = net.layers[i];
    if (p == Phase::kUpdate)
      return l.hasWeights() ? costs->update(double(l.params)) : Seconds(0);
    if (p == Phase::kBwdData && l.readsNetworkInput())
      return Seconds(0);
    return costs->layer(static_cast<int>(i), p, profile.batch, 1.0);
  };
  if (format == Format::kJson) {
    ordered_json j;
    j["network"] = profile.network;
    j["batch"] = profile.batch;
    j["repeats"] = profile.repeats;
    j["provenance"] = profile.provenance;
    if (cluster)
      j["cluster"] = cluster->name;
    for (size_t i = 0; i < net.layers.size(); ++i) {
      ordered_json row;
      row["layer"] = net.layers[i].name;
      row["kind"] = std::string(toString(net.layers[i].kind));
      for (auto p : phases) {
        row[std::string(toString(p)) + "_s"] = measured(i, p).value();
        if (costs)
          row[std::string(toString(p)) + "_priced_s"] = priced(i, p).value();
      }
      j["layers"].push_back(row);
    }
    if (costs)
      j["pricing"] = costs->describe();
    out << j.dump(2) << "\n";
    return;
  }
  if (format == Format::kCsv) {
    out << "layer,kind,phase,measured_s" << (costs ? ",priced_s" : "") << "\n";
    for (size_t i = 0; i < net.layers.size(); ++i)
      for (auto p : phases) {
        out << net.layers[i].name << "," << toString(net.layers[i].kind) << "," << toString(p)
            << "," << fmt::format("{:.9g}", measured(i, p).value());
        if (costs)
          out << "," << fmt::format("{:.9g}", priced(i, p).value());
        out << "\n";
      }
    return;
  }
  out << fmt::format("{}: each phase on one worker, batch {}, median of {} passes", net.name,
                     profile.batch, profile.repeats);
  if (cluster)
    out << fmt::format("; priced by {} ({})", cluster->name,
                       costs->source() == ComputeSource::kTables ? "kernel tables" : "roofline");
  out << "\n\n";
  std::vector<std::string> header{"layer", "kind"};
  for (auto p : phases) {
    header.push_back(std::string(toString(p)));
    if (costs) {
      header.push_back("priced");
      header.push_back("diff");
    }
  }
  Table t(header, 2);
  Seconds sumMeasured, sumPriced;
  auto diff = [](Seconds p, Seconds m) {
    return m.value() > 0 ? fmt::format("{:+.0f} %", 100 * (p / m - 1)) : std::string("-");
  };
  for (size_t i = 0; i < net.layers.size(); ++i) {
    std::vector<std::string> row{net.layers[i].name, std::string(toString(net.layers[i].kind))};
    for (auto p : phases) {
      const Seconds m = measured(i, p);
      row.push_back(formatSeconds(m));
      sumMeasured += m;
      if (costs) {
        const Seconds q = priced(i, p);
        sumPriced += q;
        row.push_back(formatSeconds(q));
        row.push_back(diff(q, m));
      }
    }
    t.add(row);
  }
  t.print(out);
  printProfileRates(out, net, profile);
  out << fmt::format("\ntotal {} measured", formatSeconds(sumMeasured));
  if (costs)
    out << fmt::format(", {} priced ({})\n{}", formatSeconds(sumPriced),
                       diff(sumPriced, sumMeasured), costs->describe());
  out << "\n";
}

}  // namespace strata::cli

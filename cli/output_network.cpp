// `strata list` and `strata describe`: the presets, and one network layer by
// layer.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "output.h"
#include "strata/model/presets.h"
#include "strata/model/quantity_text.h"
#include "strata/model/validation_suite.h"
#include "table.h"

namespace strata::cli {

namespace {

using nlohmann::ordered_json;

std::string shape(const Shape& s) {
  return fmt::format("{}x{}x{}", s.c, s.h, s.w);
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
          spec = {{"heads", sp.heads},
                  {"kv_heads", l.kvHeads()},
                  {"causal", sp.causal},
                  {"bias", sp.bias},
                  {"rotary", sp.rotary}};
          if (sp.rotary)
            spec["rotary_base"] = sp.rotaryBase;
          break;
        case LayerKind::kRmsNorm:
          spec = {{"eps", sp.eps}};
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

}  // namespace strata::cli

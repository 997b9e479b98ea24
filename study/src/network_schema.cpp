#include "strata/study/network_schema.h"

#include "strata/model/presets.h"
#include "strata/model/validation_suite.h"

namespace strata::study {

using nlohmann::ordered_json;

PresetLists presetLists() {
  PresetLists lists;
  lists.networks = listPresets(ConfigKind::kNetwork);
  lists.clusters = listPresets(ConfigKind::kCluster);
  // configs/experiments/ holds comparisons (strata compare) and validation
  // suites (strata validate --suite); each is listed under its own kind.
  for (const auto& n : listPresets(ConfigKind::kExperiment))
    (isValidationSuite(resolveConfig(ConfigKind::kExperiment, n, "experiment"))
         ? lists.validationSuites
         : lists.experiments)
        .push_back(n);
  return lists;
}

ordered_json presetsJson() {
  const auto lists = presetLists();
  ordered_json j;
  j["networks"] = lists.networks;
  j["clusters"] = lists.clusters;
  j["experiments"] = lists.experiments;
  j["validation_suites"] = lists.validationSuites;
  j["config_dirs"] = configDirs();
  return j;
}

double savedBytesPerExample(const Layer& l, ElementType element) {
  return (double(l.outShape.elements()) + l.savedElems) * elementBytes(element);
}

NetworkTotals networkTotals(const Network& net, ElementType element) {
  NetworkTotals t;
  t.params = double(net.totalParams());
  t.convParams = double(net.paramsOfKind(LayerKind::kConv));
  t.fcParams = double(net.paramsOfKind(LayerKind::kFc));
  t.rnnParams = double(net.paramsOfKind(LayerKind::kRnn));
  t.attentionParams = double(net.paramsOfKind(LayerKind::kAttention));
  t.fwdFlops = net.totalFwdFlops();
  t.convFlops = net.fwdFlopsOfKind(LayerKind::kConv);
  t.fcFlops = net.fwdFlopsOfKind(LayerKind::kFc);
  t.rnnFlops = net.fwdFlopsOfKind(LayerKind::kRnn);
  t.attentionFlops = net.fwdFlopsOfKind(LayerKind::kAttention);
  for (const auto& l : net.layers)
    t.activationBytes += savedBytesPerExample(l, element);
  return t;
}

ordered_json networkJson(const Network& net, ElementType element) {
  const double e = elementBytes(element);
  const auto t = networkTotals(net, element);
  auto savedBytes = [&](const Layer& l) { return savedBytesPerExample(l, element); };
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
        spec = {{"filters", sp.filters},  {"kernel", {sp.kernelH, sp.kernelW}},
                {"stride", sp.stride},    {"pad", sp.pad},
                {"pad_w", sp.padWidth()}, {"dilation", sp.dilation},
                {"groups", sp.groups},    {"bias", sp.bias}};
        break;
      case LayerKind::kPool:
        spec = {{"mode", sp.poolMode == PoolMode::kMax ? "max" : "avg"},
                {"global", sp.global},
                {"kernel", {sp.kernelH, sp.kernelW}},
                {"stride", sp.stride},
                {"pad", sp.pad},
                {"ceil_mode", sp.ceilMode}};
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
        spec = {{"heads", sp.heads}, {"kv_heads", l.kvHeads()}, {"causal", sp.causal},
                {"bias", sp.bias},   {"qkv_bias", sp.qkvBias},  {"rotary", sp.rotary}};
        if (sp.rotary) {
          spec["rotary_base"] = sp.rotaryBase;
          spec["rotary_dims"] = l.rotaryFeatures();
        }
        if (sp.window > 0) {
          spec["window"] = sp.window;
          spec["shift"] = sp.shift;
        }
        if (sp.grid > 0)
          spec["grid"] = sp.grid;
        if (l.partitionSide() > 0)
          spec["position_bias"] = std::string(toString(sp.positionBias));
        if (sp.cosine)
          spec["cosine"] = true;
        break;
      case LayerKind::kSpaceToDepth:
        spec = {{"block_size", sp.blockSize}};
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
      case LayerKind::kSlice:
        spec = {{"offset", sp.offset}, {"channels", sp.channels}};
        break;
      case LayerKind::kShuffle:
        spec = {{"groups", sp.groups}};
        break;
      case LayerKind::kClassToken:
        spec = {{"tokens", sp.tokens}};
        break;
      case LayerKind::kToken:
        spec = {{"index", sp.index}};
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
                 {"weight_bytes", t.params * e},
                 {"fwd_flops_per_example", t.fwdFlops},
                 {"train_flops_per_example", net.totalTrainFlops()},
                 {"activation_bytes_per_example", t.activationBytes},
                 {"conv_params_fraction", t.convParams / t.params},
                 {"fc_params_fraction", t.fcParams / t.params},
                 {"rnn_params_fraction", t.rnnParams / t.params},
                 {"conv_fwd_flops_fraction", t.convFlops / t.fwdFlops},
                 {"fc_fwd_flops_fraction", t.fcFlops / t.fwdFlops},
                 {"rnn_fwd_flops_fraction", t.rnnFlops / t.fwdFlops},
                 {"attention_params_fraction", t.attentionParams / t.params},
                 {"attention_fwd_flops_fraction", t.attentionFlops / t.fwdFlops}};
  if (net.modelParallelFrom < 0)
    j["no_model_parallel_part"] = net.noModelParallelWhy;
  return j;
}

}  // namespace strata::study

// One network, and the presets strata knows, as `strata describe --format
// json` and `strata list --format json` write them (and the Python module
// returns them): each layer's kind, shapes, parameters, FLOPs and saved
// activations, and the network's totals. Every number carries its unit in
// its key ("fwd_flops_per_example", "activation_bytes_per_example").
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "strata/model/cluster.h"
#include "strata/model/network.h"

namespace strata::study {

// The presets under the config directories, by kind: the experiments that
// strata compare takes, and the validation suites of strata validate.
struct PresetLists {
  std::vector<std::string> networks, clusters, experiments, validationSuites;
};
PresetLists presetLists();
// The lists and the directories searched ("config_dirs").
nlohmann::ordered_json presetsJson();

// What a layer saves for its backward pass per example, in `element` bytes:
// its output, and what attention keeps besides (Q, K, V, context,
// probabilities).
double savedBytesPerExample(const Layer& layer, ElementType element);

// A network's totals by kind, which describe's table and JSON both print.
struct NetworkTotals {
  double params = 0, convParams = 0, fcParams = 0, rnnParams = 0, attentionParams = 0;
  double fwdFlops = 0, convFlops = 0, fcFlops = 0, rnnFlops = 0, attentionFlops = 0;
  double activationBytes = 0;  // per example, in `element` bytes
};
NetworkTotals networkTotals(const Network& network, ElementType element);

// `network` layer by layer, its sizes in `element` bytes.
nlohmann::ordered_json networkJson(const Network& network, ElementType element);

}  // namespace strata::study

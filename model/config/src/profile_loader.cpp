#include "strata/model/profile_loader.h"

#include <fmt/format.h>

#include "config_node.h"
#include "strata/model/error.h"

namespace strata {

OpProfile loadProfile(const std::string& path, const Network& network) {
  const auto root = ConfigNode::loadFile(path);
  root.allowOnly({"network", "batch", "repeats", "provenance", "layers"});
  OpProfile p;
  p.sourceFile = path;
  p.network = root.require("network").asString();
  p.batch = root.require("batch").asPositiveInt();
  p.repeats = root.positiveIntOr("repeats", 1);
  p.provenance = root.stringOr("provenance", "");
  const auto layers = root.require("layers");
  for (const auto& row : layers.items()) {
    row.allowOnly({"name", "fwd", "bwd_data", "bwd_weights", "update"});
    LayerProfile l;
    l.name = row.require("name").asString();
    l.fwd = row.require("fwd").asSeconds(true);
    l.bwdData = row.require("bwd_data").asSeconds(true);
    l.bwdWeights = row.require("bwd_weights").asSeconds(true);
    l.update = row.require("update").asSeconds(true);
    p.layers.push_back(l);
  }
  if (p.network != network.name)
    root.require("network").fail(fmt::format("profile of '{}' cannot price network '{}' ({})",
                                             p.network, network.name, network.sourceFile));
  if (p.layers.size() != network.layers.size())
    layers.fail(fmt::format("{} layers, but network '{}' has {}", p.layers.size(), network.name,
                            network.layers.size()));
  const auto rows = layers.items();
  for (size_t i = 0; i < rows.size(); ++i)
    if (p.layers[i].name != network.layers[i].name)
      rows[i].require("name").fail(fmt::format("'{}', but layer {} of '{}' is '{}'",
                                               p.layers[i].name, i, network.name,
                                               network.layers[i].name));
  return p;
}

}  // namespace strata

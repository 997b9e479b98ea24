// Config files that name other configs (experiments, validation suites).
//
// Internal to model/.
#pragma once

#include <string>
#include <vector>

#include "config_node.h"
#include "strata/model/presets.h"

namespace strata {

// The file a network/cluster reference names: a preset name, or a path
// relative to the current directory or to the file holding the reference.
// An unknown preset or a missing file fails at the node (file, line, key).
std::string resolveReference(ConfigKind kind, const ConfigNode& node);

// A `strategies:` list (or one name): each item a strategy or `all`. An
// unknown name, or a strategy named twice (`[ring, ring]`, `[all, ps]`),
// fails at the item, the second naming the first's line.
std::vector<Strategy> readStrategyList(const ConfigNode& list);

}  // namespace strata

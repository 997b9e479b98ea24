// Config files that name other configs (experiments, validation suites).
//
// Internal to model/.
#pragma once

#include <string>

#include "config_node.h"
#include "strata/model/presets.h"

namespace strata {

// The file a network/cluster reference names: a preset name, or a path
// relative to the current directory or to the file holding the reference.
// An unknown preset or a missing file fails at the node (file, line, key).
std::string resolveReference(ConfigKind kind, const ConfigNode& node);

}  // namespace strata

#pragma once

#include <string>

#include "strata/model/network.h"
#include "strata/model/profile.h"

namespace strata {

// Loads a profile YAML file (as written by profileYaml) and checks it against
// `network`; every mistake is a ConfigError naming file, line and key.
OpProfile loadProfile(const std::string& path, const Network& network);

}  // namespace strata

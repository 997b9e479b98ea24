// Per-op profiles: the measured time of each layer phase of one network on one
// worker (`strata profile`), the way FlexFlow- and Proteus-style tools price
// compute. A prediction priced from a profile has seen the network it
// predicts, so its error measures composition only (how the engines put ops
// together into a step), never the kernel costs; validate reports it apart.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "strata/model/network.h"
#include "strata/model/units.h"

namespace strata {

// One layer's measured phases at the profile's batch (whole layer, one worker).
struct LayerProfile {
  std::string name;
  Seconds fwd;
  Seconds bwdData;
  Seconds bwdWeights;
  Seconds update;
};

struct OpProfile {
  std::string network;               // the network's name: a profile prices that network only
  std::string sourceFile;            // where it was loaded from ("" when measured in this process)
  std::string provenance;            // who measured it, where and when
  int batch = 0;                     // examples per timed pass
  int repeats = 0;                   // timed passes after a warm-up; each figure is their median
  std::vector<LayerProfile> layers;  // in network order, one per layer

  // Time of `phase` of layer `index` for `examples` examples of which this
  // worker computes `fraction` (1/K of a model-parallel layer): the measured
  // figure scaled linearly in examples and fraction (update: in fraction).
  Seconds time(int index, Phase phase, double examples, double fraction) const;
};

// Throws UserError naming the profile and the network when `profile` was not
// measured on `network` (another name, another number or order of layers).
void checkProfileMatches(const OpProfile& profile, const Network& network);

// The profile as YAML, every figure with its unit and the provenance comment.
std::string profileYaml(const OpProfile& profile);

}  // namespace strata

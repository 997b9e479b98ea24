// `strata profile`: each layer phase of one network timed on one worker of
// this machine, for pricing that network (model/profile.h).
#pragma once

#include "strata/model/network.h"
#include "strata/model/profile.h"

namespace strata::exec {

// Times fwd, bwd_data, bwd_weights and update of every layer of `network` on
// one worker (the CPU backend, this thread) at `batch` examples: a warm-up
// pass, then `repeats` passes; each figure is the median. Throws UserError
// (OptionError for batch and repeats) for what the executor cannot run.
OpProfile profileNetwork(const Network& network, int batch, int repeats = 5);

}  // namespace strata::exec

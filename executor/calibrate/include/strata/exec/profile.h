// `strata profile`: each layer phase of one network timed on one worker of
// this machine, for pricing that network (model/profile.h).
#pragma once

#include <functional>

#include "strata/exec/device.h"
#include "strata/exec/runtime.h"
#include "strata/model/network.h"
#include "strata/model/profile.h"

namespace strata::exec {

// Times fwd, bwd_data, bwd_weights and update of every layer of `network` on
// one worker of `device` (the CPU backend on this thread and threads - 1
// helpers, or GPU 0: GPU time from CUDA events) at `batch` examples: a
// warm-up pass, then `repeats` passes; each figure is the median. `element`:
// the precision of the CUDA backend's GEMMs and convolutions (fp32, tf32,
// bf16; the CPU: fp32 only). The update runs `optimizer`'s kernel (sgd and
// momentum: SGD with momentum; adam and adamw: Adam), whose states the memory
// check counts. Throws UserError (OptionError for batch, repeats, device,
// threads and element) for what the executor cannot run.
// `progress(done, total)` after each pass, the warm-up one included.
OpProfile profileNetwork(const Network& network, int batch, int repeats = 5,
                         Device device = Device::kCpu, int threads = 1,
                         ElementType element = ElementType::kFp32,
                         Optimizer optimizer = Optimizer::kMomentum,
                         const std::function<void(int, int)>& progress = {});

}  // namespace strata::exec

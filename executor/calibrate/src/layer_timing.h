// Timing every layer phase of a network on one worker (shared by calibrate and
// profile). Internal to executor/calibrate.
#pragma once

#include <functional>
#include <vector>

#include "strata/exec/device.h"
#include "strata/model/network.h"
#include "strata/model/strategy.h"

namespace strata::exec::detail {

// Seconds of each (layer, phase) of `net` at batch b on one worker of
// `device` (GPU time on CUDA): the median of `repeats` passes after a warm-up
// pass. bwdData is 0 for layers that read the network
// input, bwdWeights 0 for layers without weights. update runs `optimizer`'s
// kernel (learning rate 0: the weights stay as they are).
struct LayerTimes {
  std::vector<double> fwd, bwdData, bwdWeights, update;  // per layer
  double updateAll = 0;                                  // one update over every parameter at once
};
// `element`: the precision of the CUDA backend's GEMMs and convolutions
// (makeBackend).
// `progress(done, total)` after each pass (the warm-up one included).
LayerTimes timeLayers(const Network& net, int b, int repeats, Device device = Device::kCpu,
                      int threads = 1, ElementType element = ElementType::kFp32,
                      Optimizer optimizer = Optimizer::kMomentum,
                      const std::function<void(int, int)>& progress = {});

}  // namespace strata::exec::detail

// A batch of synthetic examples (SyntheticDataset's) as data, so that a
// backend can make it where the input lives: on the host, or with a kernel on
// the GPU (the host's double-precision Box-Muller costs ~0.2 s for an
// ImageNet batch of 64, more than an H100's whole training step).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "strata/exec/nn/tensor.h"

namespace strata::nn {

// Element e = (c*h + y)*w + x of example i is
//   means[(classes[i]*c + c')*cells + (y*gridH/h)*gridW + x*gridW/w]
//     + noise * normalFloat(hashOf(keys[i], e))      (kernels/counter_rng.h)
// with cells = gridH*gridW, or `values` when it is not empty. `means` belongs to the dataset (it
// outlives the batch and does not change).
struct SyntheticBatch {
  std::span<const float> means;  // classes x c x gridH x gridW
  std::vector<int32_t> classes;  // per example
  std::vector<uint64_t> keys;    // per example: the key of its noise
  int gridH = 1, gridW = 1;
  float noise = 0;
  // Non-empty: the batch's elements themselves (n x c*h*w), written as they
  // are instead of the above.
  std::vector<float> values;
  // vocab > 0: a language model's token ids instead of the above, a pure
  // function of the dataset's seed, the example's index (firstIndex + i)
  // and the position (kernels::element::syntheticToken), so that a backend
  // makes them where the input lives (no host loop, no upload).
  struct Tokens {
    uint64_t seed = 0;
    int32_t vocab = 0;
    int64_t firstIndex = 0;
  } tokens;
};

// Writes the batch into x (host memory, dims (classes.size(), c, h, w)): the
// reference, and how the CPU backend makes it.
void syntheticFill(const SyntheticBatch& batch, TensorView x);

}  // namespace strata::nn

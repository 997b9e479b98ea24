// Model FLOPs and the utilisation figures of a training step: what every
// transformer output reports beside the step (strata predict, simulate,
// compare, run).
//
// Model FLOPs of one example's training step, as Narayanan et al. ("Efficient
// Large-Scale Language Model Training on GPU Clusters Using Megatron-LM", SC
// 2021, eq. 3 without its recomputation term) and Chowdhery et al. ("PaLM",
// 2022, appendix B: 6N + 12 L H Q T per token) count them: three times the
// forward FLOPs of the matrix multiplies (fc and conv layers, attention's
// projections and its T^2 scores and context: 2 per multiply-accumulate),
// whatever the run recomputes; normalisations, activations, softmax and
// rotary turns are not counted. Hardware FLOPs add what recomputation runs
// again: every repeated block's forward matmuls with full recomputation
// (Narayanan's 4 instead of 3), each attention's scores and context with
// selective (Korthikanti et al. 2023).
#pragma once

#include <cstdint>

#include "strata/model/cluster.h"
#include "strata/model/network.h"
#include "strata/model/strategy.h"

namespace strata {

struct TrainFlops {
  double model = 0;     // per example: 3 x the forward matmuls
  double hardware = 0;  // model + the recomputed forward matmuls
};
TrainFlops trainFlopsPerExample(const Network& network, Recompute recompute);

// The forward FLOPs of a layer's matrix multiplies, per example (0 for a
// layer without any).
double matmulFwdFlops(const Layer& layer);

// Tokens per example: the positions an embedding reads from the network's
// input (a sequence model); 0 for any other network.
int64_t tokensPerExample(const Network& network);

// Sets e.tokensPerSecond (a sequence model) and, when `cluster` gives the
// element type's peak, the model and hardware FLOPs utilisation, from
// e.throughput and e.scenario.
void setUtilisation(StepEstimate& e, const Network& network, const Cluster* cluster);

}  // namespace strata

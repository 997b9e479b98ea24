// Megatron tensor parallelism over a group of t workers: which layers split,
// what each worker of the group holds and computes of them, and the
// collectives inside the group that keep the split exact.
//
// The splits (Shoeybi et al., "Megatron-LM", arXiv:1909.08053, section 3;
// Korthikanti et al., "Reducing Activation Recomputation in Large Transformer
// Models", MLSys 2023, section 4):
//   attention   Q, K, V by heads (column-parallel; grouped-query attention by
//               whole key/value groups) and the output projection
//               by its input rows (row-parallel): H / t heads per worker;
//   MLP         fc -> gelu|relu|swiglu -> fc: the first fc by output columns (before
//               swiglu each half, gate and value, by its columns), the
//               second by input rows; the activation between them on 1/t;
//   vocabulary  the embedding's token table by rows, an fc that feeds the
//               loss softmax (the output layer, tied or not) by its outputs,
//               and the loss over its 1/t of the vocabulary (Megatron pads
//               the vocabulary to a multiple of t: ceil(V / t) rows each).
// Every other layer (layernorm, dropout, add, ...) is replicated: each worker
// of the group runs it whole, or, with sequence parallelism, on T / t of the
// positions of each example.
//
// A split region's collectives, on b x T x c elements per worker (the
// region's output or input gradient):
//                   without sequence parallelism    with it
//   forward         allreduce after the row layer    all-gather before the column layer,
//                                                     reduce-scatter after the row layer
//   backward        allreduce after the column       all-gather before the row layer's
//                   layer's bwd_data                  backward, reduce-scatter after the
//                                                     column layer's bwd_data
// The vocabulary-parallel embedding sums its output (allreduce, or
// reduce-scatter with sequence parallelism, whose backward all-gathers the
// output gradient: each worker scatters every position's gradient into its
// rows) and the output layer is a column layer; the loss adds an allreduce of
// 3 values per position (the maxima, the sums of exponentials and the target
// logits). With sequence parallelism a replicated layer's weight gradient
// (layernorm's gain and bias) covers only its T / t positions: the group
// sums it (an allreduce beside the backward, before the data-parallel sync;
// Megatron-LM's allreduce of the sequence-parallel layernorm gradients).
#pragma once

#include <string>
#include <vector>

#include "strata/model/network.h"

namespace strata {

// A collective inside the tensor-parallel group.
enum class TpCollective { kNone, kAllReduce, kReduceScatter, kAllGather };

struct TpComm {
  TpCollective op = TpCollective::kNone;
  // Elements per example of the whole (gathered, or summed) tensor.
  double elems = 0;
};

// A layer's part in the split (the header comment's regions).
enum class TpRole {
  kReplicated,  // every worker runs it whole (or on T / t positions with sequence parallelism)
  kAttention,   // Q, K, V by heads, the output projection by its input rows
  kColumn,      // the MLP's first fc, by its outputs
  kBetween,     // the activation between the MLP's fcs, on the column fc's share
  kRow,         // the MLP's second fc, by its inputs
  kEmbedding,   // the token table by rows of the vocabulary
  kOutput,      // the fc feeding the loss, by its outputs (the vocabulary)
  kLoss,        // the loss softmax over the output fc's share
};

// What one worker of a tensor-parallel group does of one layer.
struct TpLayer {
  TpRole role = TpRole::kReplicated;
  bool split = false;  // heads, MLP columns/rows or the vocabulary split over the group
  // Share of the layer's FLOPs and memory traffic this worker runs, and of
  // its saved activations it keeps: 1/t (or ceil(V/t)/V) for a split layer,
  // 1/t for a replicated one with sequence parallelism, else 1.
  double work = 1;
  // Parameters this worker holds of the layer (a row layer's bias is
  // replicated: it is added after the sum).
  double params = 0;
  TpComm fwdBefore, fwdAfter;  // around its forward
  TpComm bwdBefore, bwdAfter;  // before its backward, after its bwd_data
  // With sequence parallelism, a replicated layer with weights: its weight
  // gradient (params elements, not per example) is summed over the group
  // after its bwd_weights.
  bool sumsGradient = false;
};

struct TpLayout {
  int t = 1;
  bool sequenceParallel = false;
  std::vector<TpLayer> layers;  // one per network layer
  int splitRegions = 0;         // attention layers and MLP pairs split
};

// Rows [begin, end) of a vocabulary of `vocab` that worker `rank` of a group
// of `t` holds: ceil(vocab / t) each, the last ones fewer (Megatron pads the
// vocabulary instead; strata prices ceil(vocab / t) rows for every worker).
struct VocabRows {
  int begin = 0, end = 0;
};
VocabRows vocabRows(int vocab, int t, int rank);

// Why `network` cannot run with tensor-parallel groups of `t` (no layer
// splits, heads or an MLP width or the positions not divisible by t), naming
// the layer; "" when it can. t = 1 always can.
std::string tensorParallelObstacle(const Network& network, int t, bool sequenceParallel);

// The layout of `network` over groups of `t` (t = 1: every layer whole, no
// collectives). Requires tensorParallelObstacle to be "".
TpLayout tensorParallelLayout(const Network& network, int t, bool sequenceParallel);

// The units whose weights ZeRO-3 gathers at once: a repeated block's layers
// together (FSDP wraps each transformer block), every other layer with
// weights (in `layout`) alone.
struct GatherUnits {
  std::vector<int> unitOf;     // per layer, in network order; -1: in no unit
  std::vector<double> params;  // per unit: the parameters a worker holds of it
};
GatherUnits zeroGatherUnits(const Network& network, const TpLayout& layout);

// The attention core's share of an attention layer's forward FLOPs: the
// scores and the context, 4 T^2 d of 8 T d^2 + 4 T^2 d (deriveAttention).
// Selective recomputation reruns this part of the forward.
double attentionCoreShare(const Layer& attention);

}  // namespace strata

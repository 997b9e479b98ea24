// Pipeline parallelism: where a network's layers split into stages, the order
// each stage runs its micro-batches in, and what that order keeps in flight.
//
// P stages x V chunks per stage (V = 1 but for the interleaved schedule):
// the network's layers split into P V chunks of consecutive layers, chunk j
// on stage j mod P (Narayanan et al., SC 2021, section 2.2.2: stage s holds
// chunks s, s + P, ...). A cut between chunks passes one tensor, the output
// of the layer before it: strata cuts only where no other tensor crosses
// (between transformer or residual blocks, anywhere in a chain). A stage
// reads the network's input itself (the token ids).
//
// The schedules (strategy.h, PipelineSchedule), for M micro-batches:
//   gpipe        F0 .. F(M-1), then B(M-1) .. B0;
//   1f1b         min(P - s - 1, M) forwards, then F and B in turn, then the
//                remaining backwards (Megatron-LM's non-interleaved
//                schedule): stage s holds at most min(P - s, M) micro-batches;
//   interleaved  Megatron-LM's interleaved schedule: the micro-batches in
//                groups of P, each group through chunk 0, 1, ... of the
//                stage forward and V - 1, ... 0 backward;
//                (P - s - 1) 2 + (V - 1) P warm-up forwards (at most M V),
//                then F and B in turn. It needs M a multiple of P.
// With balanced stages of tf + tb per micro-batch (all its chunks) and free
// transfers, a step is (M + (P - 1) / V)(tf + tb): the bubble (P - 1)(tf +
// tb) / V (Narayanan et al. 2021, section 2.2). tests/model/pipeline_test.cpp
// holds the closed forms.
#pragma once

#include <string>
#include <vector>

#include "strata/model/network.h"
#include "strata/model/strategy.h"

namespace strata {

// One unit of a stage's work: the forward or backward of one micro-batch
// through one of the stage's chunks (0 .. V - 1, local to the stage).
struct PipeTask {
  bool backward = false;
  int chunk = 0;
  int micro = 0;
  bool operator==(const PipeTask&) const = default;
};

// Stage `stage`'s tasks in the order it runs them: every (chunk, micro-batch)
// forward and backward once, each backward after its forward.
std::vector<PipeTask> pipelineOrder(PipelineSchedule schedule, int stages, int virtualStages,
                                    int microbatches, int stage);

// The most of `perChunk` (what one micro-batch leaves in a chunk until its
// backward) that `order` holds at once: a forward adds its chunk's share, a
// backward frees it.
double peakInFlight(const std::vector<PipeTask>& order, const std::vector<double>& perChunk);

// A schedule played: P stages, V chunks each, M micro-batches; chunk j
// (stage j mod P) takes fwd[j] and bwd[j] seconds per micro-batch, and a
// micro-batch's activation takes sendF[j] to cross from chunk j to j + 1,
// its gradient sendB[j] back (P V - 1 entries each; 0 on one stage). Each
// stage runs pipelineOrder's tasks one at a time, each once the stage is
// free and its input has arrived.
struct PipelinePlay {
  double span = 0;                // the last task's end
  std::vector<double> busy;       // per stage: its tasks' seconds
  std::vector<double> lastStart;  // per stage: its last task's start
  std::vector<PipeTask> last;     // per stage: its last task
  // span - max(busy): (P - 1)(tf + tb) / V balanced, transfers free.
  double bubble() const;
};
PipelinePlay playPipeline(PipelineSchedule schedule, int stages, int virtualStages,
                          int microbatches, const std::vector<double>& fwd,
                          const std::vector<double>& bwd, const std::vector<double>& sendF,
                          const std::vector<double>& sendB);

// The positions a pipeline may cut `network` at: cut c (1 <= c < layers)
// splits before layer c, and is allowed when no layer from c on reads a
// layer before c - 1. Sorted.
std::vector<int> pipelineCutPoints(const Network& network);

// Why `network` cannot split into `chunks` chunks (fewer places to cut),
// naming the network; "" when it can.
std::string pipelineObstacle(const Network& network, int chunks);

// The first layer of each of `chunks` chunks, plus the layer count at the
// end (chunks + 1 entries): consecutive chunks, cut only at
// pipelineCutPoints, each non-empty, the largest chunk's sum of `cost` (one
// entry per layer) as small as it can be. Requires pipelineObstacle "".
std::vector<int> balancedChunks(const Network& network, int chunks,
                                const std::vector<double>& cost);

// The chunks the user gives (StrategyOptions::stageStarts): the first layer
// of each chunk after the first, by name — a layer's, or a repeated block's
// ("h.7": its first layer) — as balancedChunks returns them (chunks + 1
// entries). Throws OptionError naming --stage-starts when there are not
// chunks - 1 names, a name is no layer or block of the network, the starts
// do not ascend, or one is not a place the network can be cut (naming the
// nearest that are).
std::vector<int> chunkStartsByName(const Network& network, int chunks,
                                   const std::vector<std::string>& names);

}  // namespace strata

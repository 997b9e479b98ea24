// One schema for a StepEstimate in JSON and CSV, whoever writes it: the CLI
// (predict, compare, sweep, simulate, run) and the report (data/estimates.csv,
// data/report.json). Every number carries its unit in its key ("step_s",
// "sent_bytes_per_worker"), and every key means one thing wherever it appears
// (docs/architecture.md, "One schema").
#pragma once

#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "strata/model/strategy.h"
#include "strata/sim/simulator.h"

namespace strata::study {

// A scenario's options: the same object in every JSON strata writes (each
// estimate's "options", the report's option sets).
nlohmann::ordered_json optionsJson(const StrategyOptions& options);

// The whole estimate, as predict, compare, simulate and run write it: the
// scenario, the step, the training run, and per worker the phases, the
// communication, the bytes and (predictions only) the memory. A measured
// step (executor) has no single-worker reference, speedup, bottleneck or
// memory model: those keys are left out rather than filled with placeholders.
nlohmann::ordered_json estimateJson(const StepEstimate& estimate);

// The columns of a flat estimate row (one CSV line, one object of the
// report's "estimates"). Each is one quantity with one definition; a per-step
// figure over workers says in its definition whether it is the mean or the
// largest.
enum class EstimateColumn {
  kEngine,                    // engine: the engine's label ("model", "sim", "executor", ...)
  kNetwork,                   // network
  kCluster,                   // cluster
  kStrategy,                  // strategy
  kWorkers,                   // workers: K
  kBatchPerWorker,            // batch_per_worker: b
  kGlobalBatch,               // global_batch: dp x b (K x b without tensor parallelism)
  kElement,                   // element
  kOptimizer,                 // optimizer
  kOverlap,                   // overlap: on|off
  kFcUpdate,                  // fc_update
  kSegmentBytes,              // segment_bytes
  kConvSync,                  // conv_sync
  kStep,                      // step_s
  kThroughput,                // throughput_examples_per_s
  kSpeedup,                   // speedup over one worker (none for a measured step)
  kEfficiency,                // efficiency: speedup / K (none for a measured step)
  kCompute,                   // compute_s: mean over workers of the compute phases
  kCommunication,             // communication_s: mean over workers
  kExposedCommunication,      // exposed_communication_s: mean over workers
  kIdle,                      // idle_s: mean over workers (compute + exposed + idle = step)
  kSentBytesPerWorker,        // sent_bytes_per_worker: the most one worker sends
  kReceivedBytesPerWorker,    // received_bytes_per_worker: the most one worker receives
  kMemoryBytesPerWorker,      // memory_bytes_per_worker: the largest peak (none measured)
  kFitsInMemory,              // fits_in_memory (none for a measured step)
  kBottleneck,                // bottleneck (none for a measured step)
  kAllreduce,                 // allreduce: the gradient allreduce run ("" when none)
  kTrainingSteps,             // training_steps (none without a training run)
  kTrainingTime,              // training_time_s (none without a training run)
  kTokensPerSecond,           // tokens_per_s (none but for a sequence model)
  kModelFlopsUtilisation,     // mfu: model FLOPs / peak (none without a peak: a run)
  kHardwareFlopsUtilisation,  // hfu: the same counting the recomputed forward
};

// The key of a column ("compute_s").
std::string_view columnName(EstimateColumn column);
// The column's value for `estimate`; null where the quantity does not apply
// (a measured step's speedup, a training run that was not asked for).
nlohmann::ordered_json columnValue(EstimateColumn column, const StepEstimate& estimate);
// A flat row of `columns`, in order.
nlohmann::ordered_json estimateRow(const StepEstimate& estimate,
                                   std::initializer_list<EstimateColumn> columns);

// The columns of `--format csv` as one flat object, for tools that take
// records (the Python module's compare and sweep, pandas.DataFrame).
nlohmann::ordered_json estimateRecord(const StepEstimate& estimate);

// `--format csv` of predict, compare and sweep: the header line and one line
// per estimate (each ends in a newline).
std::string estimateCsvHeader();
std::string estimateCsvRow(const StepEstimate& estimate);

// A simulated step, as `strata simulate --format json` writes it: the
// estimate, then every link that carried data ("links"), the events played
// and, when the simulator played a representative plan, what it stands for
// ("simulated").
nlohmann::ordered_json simulationJson(const sim::Result& result);

}  // namespace strata::study

#include "strata/study/estimate_schema.h"

#include <algorithm>

#include "strata/study/csv.h"
#include "strata/study/engine.h"
#include "strata/study/validation.h"  // meanCompute, meanExposed, meanIdle, peakMemory

namespace strata::study {

using nlohmann::ordered_json;

ordered_json optionsJson(const StrategyOptions& o) {
  ordered_json j = {{"overlap", o.overlap},
                    {"fc_update", std::string(toString(o.fcUpdate))},
                    {"segment_bytes", o.segment.value()},
                    {"bucket_bytes", o.bucket.value()},
                    {"element", std::string(toString(o.element))},
                    {"optimizer", std::string(toString(o.optimizer))},
                    {"allreduce", std::string(toString(o.gradientSync))},
                    {"conv_sync", std::string(toString(o.convSync))},
                    {"ps_priority", std::string(toString(o.psPriority))},
                    {"staleness", o.staleness},
                    {"ps_servers", o.psServers},
                    {"ps_node", o.psNode},
                    {"threads_per_worker", o.threadsPerWorker},
                    {"tp", o.tp},
                    {"sequence_parallel", o.sequenceParallel},
                    {"zero", o.zero},
                    {"recompute", std::string(toString(o.recompute))},
                    {"pp", o.pp},
                    {"microbatches", o.microbatches},
                    {"schedule", std::string(toString(o.schedule))},
                    {"virtual_stages", o.virtualStages}};
  // Only when given: the cut the user chose.
  if (!o.stageStarts.empty())
    j["stage_starts"] = o.stageStarts;
  // Only where it is not the default order.
  if (o.placement != Placement::kTpPpDp)
    j["placement"] = std::string(toString(o.placement));
  return j;
}

namespace {

ordered_json phasesJson(const PhaseTimes& p) {
  return {{"fwd_s", p.fwd.value()},
          {"bwd_data_s", p.bwdData.value()},
          {"bwd_weights_s", p.bwdWeights.value()},
          {"update_s", p.update.value()},
          {"total_s", p.total().value()}};
}

Bytes largest(const StepEstimate& e, Bytes WorkerEstimate::*field) {
  Bytes m(0);
  for (const auto& w : e.workers)
    m = std::max(m, w.*field);
  return m;
}

}  // namespace

ordered_json estimateJson(const StepEstimate& e) {
  const auto& o = e.scenario.options;
  ordered_json j;
  j["engine"] = e.engine;
  j["network"] = e.network;
  j["cluster"] = e.cluster;
  j["strategy"] = std::string(toString(e.scenario.strategy));
  j["workers"] = e.scenario.workers;
  j["batch_per_worker"] = e.scenario.batchPerWorker;
  j["options"] = optionsJson(o);
  j["step_s"] = e.step.value();
  if (e.scenario.strategy == Strategy::kPs) {
    // Steps back to back: step_s is the steady-state period.
    j["first_step_s"] = e.firstStep.value();
    j["steady_steps"] = e.steadySteps;
  }
  j["throughput_examples_per_s"] = e.throughput;
  // A sequence model's tokens a second, and the model (hardware) FLOPs
  // utilisation against the cluster's peak (model_flops.h); null where
  // they do not apply.
  for (auto c : {EstimateColumn::kTokensPerSecond, EstimateColumn::kModelFlopsUtilisation,
                 EstimateColumn::kHardwareFlopsUtilisation})
    j[std::string(columnName(c))] = columnValue(c, e);
  if (e.training.steps > 0) {
    ordered_json t;
    // Counts are whole (at most 10^12 steps, 2^53 examples): JSON integers.
    t["steps"] = static_cast<int64_t>(e.training.steps);
    if (e.training.epochs > 0) {
      t["epochs"] = e.training.epochs;
      t["dataset_examples"] = static_cast<int64_t>(e.training.dataset);
      t["steps_per_epoch"] = static_cast<int64_t>(e.training.stepsPerEpoch);
    }
    t["time_s"] = e.training.time.value();
    j["training"] = t;
  }
  const bool measured = isMeasured(e);
  if (!measured) {
    j["single_worker_step_s"] = e.singleWorkerStep.value();
    j["speedup"] = e.speedup;
    j["efficiency"] = e.efficiency;
    j["bottleneck"] = e.bottleneck;
  }
  if (!e.allreduce.empty())
    j["allreduce"] = e.allreduce;
  if (!e.computeSource.empty())
    j["compute_source"] = e.computeSource;
  if (!measured)
    j["fits_in_memory"] = e.fitsInMemory;
  if (!e.fitsWith.empty())
    j["fits_with"] = e.fitsWith;
  if (!e.placement.empty())
    j["placement"] = e.placement;
  if (!e.pipeline.empty()) {
    j["pipeline"] = e.pipeline;
    j["pipeline_bubble_s"] = e.pipelineBubble.value();
  }
  if (e.rounds.rounds > 0) {
    j["rounds"] = {{"rounds", e.rounds.rounds},
                   {"batch_per_round", e.rounds.batchPerRound},
                   {"transfer_s", e.rounds.transfer.value()},
                   {"compute_s", e.rounds.compute.value()},
                   {"inner_communication_s", e.rounds.innerComm.value()},
                   {"gradient_return_s", e.rounds.gradientReturn.value()},
                   {"hidden_transfers", e.rounds.hiddenTransfers},
                   {"egress_bytes_per_round", e.rounds.egressPerRound.value()}};
  }
  ordered_json workers = ordered_json::array();
  for (const auto& w : e.workers) {
    ordered_json wj{
        {"rank", w.rank},
        {"compute", phasesJson(w.compute)},
        {"communication_s", w.communication.value()},
        {"exposed_communication_s", w.exposedCommunication.value()},
        {"idle_s", w.idle.value()},
        {"sent_bytes", e.bytesCounted ? ordered_json(w.sent.value()) : nullptr},
        {"received_bytes", e.bytesCounted ? ordered_json(w.received.value()) : nullptr}};
    if (!measured)
      wj["memory"] = {{"weights_bytes", w.memory.weights.value()},
                      {"gradients_bytes", w.memory.gradients.value()},
                      {"optimizer_bytes", w.memory.optimizer.value()},
                      {"activations_bytes", w.memory.activations.value()},
                      {"buffers_bytes", w.memory.buffers.value()},
                      {"total_bytes", w.memory.total().value()}};
    workers.push_back(std::move(wj));
  }
  j["per_worker"] = workers;
  return j;
}

std::string_view columnName(EstimateColumn column) {
  using C = EstimateColumn;
  switch (column) {
    case C::kEngine:
      return "engine";
    case C::kNetwork:
      return "network";
    case C::kCluster:
      return "cluster";
    case C::kStrategy:
      return "strategy";
    case C::kWorkers:
      return "workers";
    case C::kBatchPerWorker:
      return "batch_per_worker";
    case C::kGlobalBatch:
      return "global_batch";
    case C::kElement:
      return "element";
    case C::kOptimizer:
      return "optimizer";
    case C::kOverlap:
      return "overlap";
    case C::kFcUpdate:
      return "fc_update";
    case C::kSegmentBytes:
      return "segment_bytes";
    case C::kConvSync:
      return "conv_sync";
    case C::kStep:
      return "step_s";
    case C::kThroughput:
      return "throughput_examples_per_s";
    case C::kTokensPerSecond:
      return "tokens_per_s";
    case C::kModelFlopsUtilisation:
      return "mfu";
    case C::kHardwareFlopsUtilisation:
      return "hfu";
    case C::kSpeedup:
      return "speedup";
    case C::kEfficiency:
      return "efficiency";
    case C::kCompute:
      return "compute_s";
    case C::kCommunication:
      return "communication_s";
    case C::kExposedCommunication:
      return "exposed_communication_s";
    case C::kIdle:
      return "idle_s";
    case C::kSentBytesPerWorker:
      return "sent_bytes_per_worker";
    case C::kReceivedBytesPerWorker:
      return "received_bytes_per_worker";
    case C::kMemoryBytesPerWorker:
      return "memory_bytes_per_worker";
    case C::kFitsInMemory:
      return "fits_in_memory";
    case C::kBottleneck:
      return "bottleneck";
    case C::kAllreduce:
      return "allreduce";
    case C::kTrainingSteps:
      return "training_steps";
    case C::kTrainingTime:
      return "training_time_s";
  }
  return "?";
}

ordered_json columnValue(EstimateColumn column, const StepEstimate& e) {
  using C = EstimateColumn;
  const auto& sc = e.scenario;
  const auto& o = sc.options;
  // What a measured step has no model of (estimateJson leaves these keys out).
  const bool predicted = !isMeasured(e);
  const bool training = e.training.steps > 0;
  switch (column) {
    case C::kEngine:
      return e.engine;
    case C::kNetwork:
      return e.network;
    case C::kCluster:
      return e.cluster;
    case C::kStrategy:
      return std::string(toString(sc.strategy));
    case C::kWorkers:
      return sc.workers;
    case C::kBatchPerWorker:
      return sc.batchPerWorker;
    case C::kGlobalBatch:
      return int64_t(examplesPerStep(sc));
    case C::kElement:
      return std::string(toString(o.element));
    case C::kOptimizer:
      return std::string(toString(o.optimizer));
    case C::kOverlap:
      return o.overlap ? "on" : "off";
    case C::kFcUpdate:
      return std::string(toString(o.fcUpdate));
    case C::kSegmentBytes:
      return o.segment.value();
    case C::kConvSync:
      return std::string(toString(o.convSync));
    case C::kStep:
      return e.step.value();
    case C::kThroughput:
      return e.throughput;
    case C::kTokensPerSecond:
      return e.tokensPerSecond > 0 ? ordered_json(e.tokensPerSecond) : ordered_json(nullptr);
    case C::kModelFlopsUtilisation:
      return e.modelFlopsUtilisation > 0 ? ordered_json(e.modelFlopsUtilisation)
                                         : ordered_json(nullptr);
    case C::kHardwareFlopsUtilisation:
      return e.hardwareFlopsUtilisation > 0 ? ordered_json(e.hardwareFlopsUtilisation)
                                            : ordered_json(nullptr);
    case C::kSpeedup:
      return predicted ? ordered_json(e.speedup) : ordered_json(nullptr);
    case C::kEfficiency:
      return predicted ? ordered_json(e.efficiency) : ordered_json(nullptr);
    case C::kCompute:
      return meanCompute(e).value();
    case C::kCommunication:
      return meanCommunication(e).value();
    case C::kExposedCommunication:
      return meanExposed(e).value();
    case C::kIdle:
      return meanIdle(e).value();
    case C::kSentBytesPerWorker:
      return e.bytesCounted ? ordered_json(largest(e, &WorkerEstimate::sent).value()) : nullptr;
    case C::kReceivedBytesPerWorker:
      return e.bytesCounted ? ordered_json(largest(e, &WorkerEstimate::received).value()) : nullptr;
    case C::kMemoryBytesPerWorker:
      return predicted ? ordered_json(peakMemory(e).value()) : ordered_json(nullptr);
    case C::kFitsInMemory:
      return predicted ? ordered_json(e.fitsInMemory) : ordered_json(nullptr);
    case C::kBottleneck:
      return predicted ? ordered_json(e.bottleneck) : ordered_json(nullptr);
    case C::kAllreduce:
      return e.allreduce;
    case C::kTrainingSteps:
      // A whole count (at most 10^12 steps): a JSON integer.
      return training ? ordered_json(static_cast<int64_t>(e.training.steps))
                      : ordered_json(nullptr);
    case C::kTrainingTime:
      return training ? ordered_json(e.training.time.value()) : ordered_json(nullptr);
  }
  return nullptr;
}

ordered_json estimateRow(const StepEstimate& e, std::initializer_list<EstimateColumn> columns) {
  ordered_json row = ordered_json::object();
  for (auto c : columns)
    row[std::string(columnName(c))] = columnValue(c, e);
  return row;
}

namespace {

using C = EstimateColumn;
// The columns of `--format csv` (predict, compare, sweep), in order.
constexpr EstimateColumn kCsvColumns[] = {C::kEngine,
                                          C::kNetwork,
                                          C::kCluster,
                                          C::kStrategy,
                                          C::kWorkers,
                                          C::kBatchPerWorker,
                                          C::kElement,
                                          C::kOptimizer,
                                          C::kOverlap,
                                          C::kFcUpdate,
                                          C::kSegmentBytes,
                                          C::kConvSync,
                                          C::kStep,
                                          C::kThroughput,
                                          C::kSpeedup,
                                          C::kEfficiency,
                                          C::kCompute,
                                          C::kCommunication,
                                          C::kExposedCommunication,
                                          C::kSentBytesPerWorker,
                                          C::kReceivedBytesPerWorker,
                                          C::kMemoryBytesPerWorker,
                                          C::kFitsInMemory,
                                          C::kBottleneck,
                                          C::kAllreduce,
                                          C::kTrainingSteps,
                                          C::kTrainingTime,
                                          C::kTokensPerSecond,
                                          C::kModelFlopsUtilisation,
                                          C::kHardwareFlopsUtilisation};

}  // namespace

std::string estimateCsvHeader() {
  std::string out;
  for (auto c : kCsvColumns) {
    if (!out.empty())
      out += ',';  // appends: GCC 12 warns (-Wrestrict) on "," + s
    out += columnName(c);
  }
  return out + "\n";
}

ordered_json estimateRecord(const StepEstimate& e) {
  ordered_json row = ordered_json::object();
  for (auto c : kCsvColumns)
    row[std::string(columnName(c))] = columnValue(c, e);
  return row;
}

std::string estimateCsvRow(const StepEstimate& e) {
  return csvLine(estimateRecord(e)) + "\n";
}

ordered_json simulationJson(const sim::Result& r) {
  auto j = estimateJson(r.estimate);
  ordered_json links = ordered_json::array();
  for (const auto& l : r.links)
    links.push_back({{"link", l.name},
                     {"bandwidth_bytes_per_s", l.bandwidth.value()},
                     {"bytes", l.bytes.value()},
                     {"busy_s", l.busy.value()},
                     {"utilisation", l.utilisation}});
  j["links"] = links;
  j["events"] = r.events;
  if (!r.detail.empty())
    j["simulated"] = r.detail;
  return j;
}

}  // namespace strata::study

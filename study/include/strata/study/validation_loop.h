// The product's central loop (DESIGN.md): for every row of a validation
// suite, predict (model, profile-based model), simulate, run for real, and
// compare. `strata validate` is this loop with a command line and a printer
// around it; the loop itself prints nothing and reports its progress through
// ValidationProgress.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "strata/exec/device.h"
#include "strata/model/validation_suite.h"
#include "strata/study/validation.h"

namespace strata::study {

// Steps of every run left out of its median: the first touches cold memory
// and caches, the second still settles the allocator.
inline constexpr int kWarmupSteps = 2;

struct ValidationOptions {
  std::string clusterPath;  // empty: calibrate now (kernel tables only, held-out)
  std::string outDir = "validate";
  // Calibrate with the validated network's layers: rows are then flagged
  // "fitted on this network" and do not count as held-out.
  bool fitOnNetwork = false;
  // Sweeps over the CPU kernel tables when validate calibrates (calibrate's
  // --sweeps: each point the median over them); 0 = calibrate's default.
  int sweeps = 0;
  // Trace files are named <network>-b<batch>-<strategy>-k<K> (a suite), else
  // <strategy>-k<K> (one network).
  bool suite = false;
  // Where the runs compute: the CPU's threads, or CUDA (K workers on the
  // GPUs round-robin, the device communicator between them).
  exec::Device device = exec::Device::kCpu;
  // The precision every row runs, profiles and is predicted in (--element;
  // CUDA: fp32, tf32 or bf16 on the backend's GEMMs and convolutions, the
  // model pricing them from the calibrated file's peak and
  // efficiency_by_element of that type; the CPU: fp32 only).
  ElementType element = ElementType::kFp32;
  // The update rule every row is predicted, simulated, profiled and run with
  // (learning rate and weight decay: exec::defaultLearningRate and
  // defaultWeightDecay of it).
  Optimizer optimizer = Optimizer::kMomentum;
  // ZeRO stage of every ring row (--zero 1|2: the executor runs them; the
  // other strategies' rows are as without it).
  int zero = 0;
  // Workers per tensor-parallel group of every ring row (--tp N: K = dp x N;
  // the executor runs it on the cpu).
  int tp = 1;
  bool sequenceParallel = false;  // with tp > 1: Megatron's sequence parallelism
  // Recomputation of every ring and naive row (--recompute full: the
  // executor reruns each block's forward before its backward).
  Recompute recompute = Recompute::kNone;
  // Pipeline stages and micro-batches of every ring row (--pp P, K = dp x tp
  // x P; --microbatches M: a row's step trains dp M b examples), the schedule
  // and its chunks per stage (interleaved).
  int pp = 1;
  int microbatches = 1;
  PipelineSchedule schedule = PipelineSchedule::k1f1b;
  int virtualStages = 1;
};

// What the loop is doing, for a front end to show (each may be left empty).
struct ValidationProgress {
  // Before calibrating this machine into `path`; `fittedOn` is the network
  // the calibration times ("" for kernels only, held-out).
  std::function<void(const std::string& path, const std::string& fittedOn)> calibrating;
  std::function<void(const std::string& line)> calibrationLine;  // calibrate's own progress
  // Once the cluster is ready: `rows` rows of `repeats` runs of `steps` steps.
  std::function<void(int rows, int repeats, int steps)> started;
  // Before timing each op of `network` at `batch` for the profile-based model.
  std::function<void(const std::string& network, int batch)> profiling;
  // Before running row `index` (1-based) of `rows`, named "net b=B strategy K=K".
  std::function<void(int index, int rows, const std::string& row)> running;
};

struct ValidationResult {
  std::vector<ValidationRow> rows;
  ValidationSummary summary;
  LoadReport load;  // before the start, and the rows measured busy or off speed
  std::string clusterName;
  std::string clusterPath;             // the calibrated cluster used
  std::vector<std::string> skipped;    // "owt-a on NET: no model-parallel part"
  std::vector<std::string> unwritten;  // traces that could not be written, and why
};

// Runs every row of `suite` (a one-entry suite for `validate --network`):
// checks every row first (before calibration, which takes a minute), measures
// the machine's load, calibrates when no cluster is given, then per row
// predicts, simulates, runs suite.repeats times and writes the measured and
// simulated traces into options.outDir. User mistakes throw UserError /
// OptionError (naming the option, or a suite file's file:line:key); a trace
// that cannot be written costs no measurement and is listed in `unwritten`.
ValidationResult runValidation(const ValidationSuite& suite, const ValidationOptions& options,
                               const ValidationProgress& progress = {});

}  // namespace strata::study

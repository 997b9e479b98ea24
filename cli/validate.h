// `strata validate`: strategies run for real beside the model's and the
// simulator's predictions, on one network or over a validation suite.
#pragma once

#include <optional>
#include <string>

#include "output.h"
#include "strata/exec/device.h"
#include "strata/model/validation_suite.h"

namespace strata::cli {

struct ValidateOptions {
  std::string clusterPath;  // empty: calibrate now (kernel tables only, held-out)
  std::string outDir = "validate";
  // Calibrate with the validated network's layers (the old default): rows are
  // then flagged "fitted on this network" and do not count as held-out.
  bool fitOnNetwork = false;
  // True for --suite: trace files are named <network>-b<batch>-<strategy>-k<K>.
  bool suite = false;
  Format format = Format::kTable;
  // Where the runs compute: the CPU's threads, or CUDA (K workers on the
  // GPUs round-robin, the device communicator between them).
  exec::Device device = exec::Device::kCpu;
};

// Runs every row of `suite` (a one-entry suite for `validate --network`),
// prints the comparison and returns the exit status. User mistakes throw
// UserError / OptionError.
int runValidation(const ValidationSuite& suite, const ValidateOptions& options);

}  // namespace strata::cli

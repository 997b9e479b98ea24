// `strata validate`: strategies run for real beside the model's and the
// simulator's predictions, on one network or over a validation suite. The
// loop is study::runValidation; this prints it.
#pragma once

#include "output.h"
#include "strata/model/validation_suite.h"
#include "strata/study/validation_loop.h"

namespace strata::cli {

// The loop's options (cluster, output folder, --fit-on-network, device) and
// how to print the result.
struct ValidateOptions : study::ValidationOptions {
  Format format = Format::kTable;
};

// Runs every row of `suite` (a one-entry suite for `validate --network`),
// prints its progress (table format only) and the comparison, and returns the
// exit status. User mistakes throw UserError / OptionError.
int runValidation(const ValidationSuite& suite, const ValidateOptions& options);

}  // namespace strata::cli

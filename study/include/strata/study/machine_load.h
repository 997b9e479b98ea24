// How busy the machine is around a validation run (Linux: /proc), so validate
// can say when other processes may have skewed its measurements.
#pragma once

#include <optional>

#include "strata/study/validation.h"

namespace strata::study {

// The machine's and this process's CPU time now; nullopt where /proc/stat is
// missing (not Linux).
std::optional<CpuSample> sampleCpu();

// The 1-minute load average; nullopt where /proc/loadavg is missing.
std::optional<double> loadAverage();

// Load before the start: the load average, and other processes' CPU use over
// `window` seconds of this process sleeping. `measured` is false where /proc
// is missing.
LoadReport measureLoadBefore(double windowSeconds, int cores);

}  // namespace strata::study

// What the report's parts share inside the library.
#pragma once

#include <string>

#include "strata/model/strategy.h"
#include "strata/reports/engine.h"
#include "strata/reports/report.h"

namespace strata::reports {

// Mean over workers of the idle time: compute + exposed + idle = step.
Seconds meanIdle(const StepEstimate& e);
// The largest peak memory over workers.
Bytes peakMemory(const StepEstimate& e);

}  // namespace strata::reports

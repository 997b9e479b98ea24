// What the report's parts share inside the library.
#pragma once

#include <string>

#include "strata/model/strategy.h"
#include "strata/model/validation.h"  // meanCompute, meanExposed, meanIdle, peakMemory
#include "strata/reports/report.h"
#include "strata/study/engine.h"

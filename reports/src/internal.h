// What the report's parts share inside the library.
#pragma once

#include <string>

#include "strata/model/strategy.h"
#include "strata/reports/report.h"
#include "strata/study/engine.h"
#include "strata/study/validation.h"  // meanCompute, meanExposed, meanIdle, peakMemory

// Printing strata's answers as a table (for people), JSON or CSV (for tools).
// Every number carries its unit: in the cell for tables, in the key or column
// name for JSON and CSV (e.g. "step_s", "sent_bytes").
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "strata/model/cluster.h"
#include "strata/model/network.h"
#include "strata/model/strategy.h"

namespace strata::cli {

enum class Format { kTable, kJson, kCsv };

void printPresetList(std::ostream& out, Format format);
void printNetwork(std::ostream& out, const Network& network, ElementType element, Format format);
void printEstimate(std::ostream& out, const StepEstimate& estimate, Format format);
// Strategies x worker counts; the fastest strategy per worker count is marked.
void printComparison(std::ostream& out, const std::vector<StepEstimate>& estimates, Format format);

}  // namespace strata::cli

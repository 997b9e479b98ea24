// Printing strata's answers as a table (for people), JSON or CSV (for tools).
// Every number carries its unit: in the cell for tables, in the key or column
// name for JSON and CSV (e.g. "step_s", "sent_bytes"). The tables are cli/'s
// (output*.cpp, by what they print); estimates and validation results in JSON
// and CSV are study/'s one schema (strata/study/estimate_schema.h,
// validation_schema.h).
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "strata/model/cluster.h"
#include "strata/model/network.h"
#include "strata/model/plan.h"
#include "strata/model/strategy.h"
#include "strata/sim/simulator.h"
#include "strata/study/validation.h"

namespace strata::cli {

enum class Format { kTable, kJson, kCsv };

// 2130000 -> "2.13 M", 80600 -> "80.6 k", 512 -> "512": three digits, for
// rates (tokens a second).
std::string countText(double n);

// The options `strategy` uses whose values are not the defaults, as
// "allreduce tree, staleness 1" (file keys), "" when none: what a header
// says so a forced choice never hides.
std::string nonDefaultOptionsText(Strategy strategy, const StrategyOptions& options);

void printPresetList(std::ostream& out, Format format);
void printNetwork(std::ostream& out, const Network& network, ElementType element, Format format);
void printEstimate(std::ostream& out, const StepEstimate& estimate, Format format);
// Strategies x worker counts; the fastest strategy per worker count is marked.
void printComparison(std::ostream& out, const std::vector<StepEstimate>& estimates, Format format);
// A simulated step: the estimate, then the busiest links.
void printSimulation(std::ostream& out, const sim::Result& result, Format format);
// Measured (median and spread) against model, simulator and profile-based
// model, per network x batch x strategy x K, then the summary: errors over the
// held-out rows, per-phase errors, the ranking check and the machine's load.
void printValidation(std::ostream& out, const std::vector<ValidationRow>& rows,
                     const ValidationSummary& summary, Format format, const LoadReport& load = {});

// A per-op profile, one row per layer; with a cluster, each phase also as
// that cluster prices it (and the relative difference).
void printProfile(std::ostream& out, const Network& network, const OpProfile& profile,
                  const Cluster* cluster, Format format);

// The tasks of a Plan, for a person to read (table) or a tool (JSON).
// `placement`: where the layout's groups run (describePlacement; "" without
// a cluster or a layout).
void printPlan(std::ostream& out, const Plan& plan, const Network& network, Format format,
               const std::string& placement = "");

}  // namespace strata::cli

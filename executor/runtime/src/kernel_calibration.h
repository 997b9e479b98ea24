// Measuring the CPU backend's kernel tables (model/kernels.h) and how kernels
// slow down when workers share the machine. Internal to executor/runtime.
#pragma once

#include <functional>
#include <string>
#include <utility>

#include "strata/model/kernels.h"

namespace strata::exec::detail {

// Times every GEMM variant on the grid of dims and every memory-bound kernel
// over a range of sizes, on this thread. `say` gets one line per table.
KernelTables measureKernelTables(const std::function<void(const std::string&)>& say);

// The tables as the YAML block under `device:` (indented by 2), with the
// provenance of every table.
std::string kernelTablesYaml(const KernelTables& tables, const std::string& where);

// Speed of each of `workers` threads running GEMMs (first) and memory-bound
// kernels (second) at once, relative to one thread alone.
std::pair<double, double> measureSharing(int workers);

}  // namespace strata::exec::detail

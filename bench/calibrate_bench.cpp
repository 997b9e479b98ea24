// How long `strata calibrate` takes on this machine: the whole calibration as
// the command runs it (kernel tables, memory and summing bandwidth, the link,
// sharing for 1, 2 and 4 workers; no network), and its kernel tables alone.
// Each run takes most of a minute, so each benchmark runs once (Iterations(1))
// and reports wall time. Run: build/bench/calibrate_bench (nothing else busy).
#include <benchmark/benchmark.h>

#include <string>

#include "kernel_calibration.h"  // executor/calibrate/src: detail::measureKernelTables
#include "strata/exec/calibrate.h"

namespace {

using namespace strata;

// exec::calibrate with the defaults of `strata calibrate --out f` (--sharing-up-to 4).
void BM_Calibrate(benchmark::State& state) {
  exec::CalibrationOptions o;
  o.name = "bench-calibrated";
  o.maxWorkers = 4;
  for (auto _ : state) {
    const std::string yaml = exec::calibrate(o);
    benchmark::DoNotOptimize(yaml.data());
    state.counters["yaml_kB"] = double(yaml.size()) / 1e3;
  }
}
BENCHMARK(BM_Calibrate)->Iterations(1)->Unit(benchmark::kMillisecond)->UseRealTime();

// The kernel tables alone: every GEMM variant on the grid and every
// memory-bound kernel over its sizes, on this thread.
void BM_MeasureKernelTables(benchmark::State& state) {
  for (auto _ : state) {
    const KernelTables t = exec::detail::measureKernelTables([](const std::string&) {});
    benchmark::DoNotOptimize(t.gemm.rate[0].data());
    state.counters["gemm_points"] = double(t.gemm.rate[0].size()) * 3;
  }
}
BENCHMARK(BM_MeasureKernelTables)->Iterations(1)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();

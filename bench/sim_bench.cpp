// Simulator speed: events per second, and the scale case of the simulator
// issue: one resnet50 step with ring on 128 dgx-h100 nodes (1024 GPUs), target
// <= 1 s on one core. The K sweep shows the cost growing with the number of
// tasks (tasks/s stays about constant).
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <ostream>
#include <streambuf>

#include "strata/model/cluster_loader.h"
#include "strata/model/estimate.h"
#include "strata/model/network_loader.h"
#include "strata/model/plan.h"
#include "strata/model/presets.h"
#include "strata/sim/simulator.h"
#include "strata/study/trace.h"

namespace {

using namespace strata;

const Network& resnet50() {
  static const Network n = [] {
    setenv("STRATA_CONFIG_DIR", STRATA_BENCH_CONFIG_DIR, 0);
    return loadNetwork(resolveConfig(ConfigKind::kNetwork, "resnet50", "bench"));
  }();
  return n;
}
const Cluster& dgxH100() {
  static const Cluster c = [] {
    setenv("STRATA_CONFIG_DIR", STRATA_BENCH_CONFIG_DIR, 0);
    return loadCluster(resolveConfig(ConfigKind::kCluster, "dgx-h100", "bench"));
  }();
  return c;
}

// Lowering + simulation of one resnet50 ring step on K H100s, contention on.
void BM_SimulateResnet50Ring(benchmark::State& state) {
  Scenario sc;
  sc.strategy = Strategy::kRing;
  sc.workers = static_cast<int>(state.range(0));
  sc.batchPerWorker = 64;
  double events = 0, tasks = 0;
  for (auto _ : state) {
    const auto plan = lowerToPlan(resnet50(), sc);
    const auto r = sim::simulate(plan, resnet50(), dgxH100(), sim::Options{});
    events += double(r.events);
    tasks += double(plan.tasks.size());
    benchmark::DoNotOptimize(r.estimate.step);
  }
  state.counters["tasks"] = tasks / double(state.iterations());
  state.counters["events/s"] = benchmark::Counter(events, benchmark::Counter::kIsRate);
  state.counters["tasks/s"] = benchmark::Counter(tasks, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_SimulateResnet50Ring)
    ->Arg(8)
    ->Arg(64)
    ->Arg(256)
    ->Arg(1024)
    ->Unit(benchmark::kMillisecond);

// The simulation alone (the Plan built once).
void BM_SimulateOnlyResnet50Ring1024(benchmark::State& state) {
  Scenario sc;
  sc.strategy = Strategy::kRing;
  sc.workers = 1024;
  sc.batchPerWorker = 64;
  const auto plan = lowerToPlan(resnet50(), sc);
  double events = 0;
  for (auto _ : state) {
    const auto r = sim::simulate(plan, resnet50(), dgxH100(), sim::Options{});
    events += double(r.events);
  }
  state.counters["events/s"] = benchmark::Counter(events, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_SimulateOnlyResnet50Ring1024)->Unit(benchmark::kMillisecond);

// A streambuf that counts what it is given and drops it: the trace writer's
// cost without the disk's.
class CountingBuffer : public std::streambuf {
 public:
  double bytes = 0;

 protected:
  std::streamsize xsputn(const char*, std::streamsize n) override {
    bytes += double(n);
    return n;
  }
  int overflow(int c) override {
    bytes += 1;
    return c;
  }
};

Scenario resnet50Ring(int k) {
  Scenario sc;
  sc.strategy = Strategy::kRing;
  sc.workers = k;
  sc.batchPerWorker = 128;
  return sc;
}

// The trace case of the hardening issue: one resnet50 ring step on 1024 H100s
// with a timeline of ranks 0-7 (strata simulate ... --trace-ranks 0-7).
void BM_SimulateTimelineResnet50Ring1024Ranks0to7(benchmark::State& state) {
  const auto plan = lowerToPlan(resnet50(), resnet50Ring(1024));
  sim::Options o;
  o.timeline = true;
  o.timelineRanks = parseRankList("0-7", 1024);
  for (auto _ : state) {
    const auto r = sim::simulate(plan, resnet50(), dgxH100(), o);
    benchmark::DoNotOptimize(r.timeline.slices.data());
  }
}
BENCHMARK(BM_SimulateTimelineResnet50Ring1024Ranks0to7)->Unit(benchmark::kMillisecond);

// Writing that trace (simulated once): bytes/s of JSON.
void BM_WriteTraceResnet50Ring1024Ranks0to7(benchmark::State& state) {
  const auto plan = lowerToPlan(resnet50(), resnet50Ring(1024));
  TraceOptions opt;
  opt.ranks = parseRankList("0-7", 1024);
  sim::Options o;
  o.timeline = true;
  o.timelineRanks = opt.ranks;
  const auto r = sim::simulate(plan, resnet50(), dgxH100(), o);
  CountingBuffer sink;
  std::ostream out(&sink);
  for (auto _ : state)
    writeTrace(out, plan, resnet50(), r.estimate, r.timeline, opt);
  state.counters["bytes/s"] = benchmark::Counter(sink.bytes, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_WriteTraceResnet50Ring1024Ranks0to7)->Unit(benchmark::kMillisecond);

// Every worker's trace at K = 64 (0.25 M events, under the default limit).
void BM_WriteTraceResnet50Ring64(benchmark::State& state) {
  const auto plan = lowerToPlan(resnet50(), resnet50Ring(64));
  sim::Options o;
  o.timeline = true;
  const auto r = sim::simulate(plan, resnet50(), dgxH100(), o);
  CountingBuffer sink;
  std::ostream out(&sink);
  for (auto _ : state)
    writeTrace(out, plan, resnet50(), r.estimate, r.timeline, TraceOptions{});
  state.counters["bytes/s"] = benchmark::Counter(sink.bytes, benchmark::Counter::kIsRate);
  state.counters["events"] = double(estimateTrace(plan, r.timeline, {}).events);
}
BENCHMARK(BM_WriteTraceResnet50Ring64)->Unit(benchmark::kMillisecond);

// The scale cases of the at-scale issue: one resnet50 step (b = 64) on 1k,
// 4k, 16k and 128k H100s as `strata simulate` runs it (simulateScenario:
// lowering with the cluster, a representative plan, the simulation), with
// the flat ring and with auto (per bucket the least predicted time among
// ring, hierarchical, tree and halving-doubling). Targets: 16,384 GPUs in
// <= 1 s, 131,072 in <= 10 s and <= 2 GB (max RSS, /usr/bin/time -v).
void BM_SimulateResnet50AtScale(benchmark::State& state) {
  Scenario sc;
  sc.strategy = Strategy::kRing;
  sc.workers = static_cast<int>(state.range(0));
  sc.batchPerWorker = 64;
  sc.options.gradientSync =
      state.range(1) == 0 ? AllreduceAlgorithm::kRing : AllreduceAlgorithm::kAuto;
  double events = 0;
  for (auto _ : state) {
    const auto r = sim::simulateScenario(resnet50(), dgxH100(), sc, sim::Options{});
    events += double(r.events);
    benchmark::DoNotOptimize(r.estimate.step);
  }
  state.SetLabel(std::string(toString(sc.options.gradientSync)));
  state.counters["events"] = events / double(state.iterations());
}
BENCHMARK(BM_SimulateResnet50AtScale)
    ->ArgsProduct({{1024, 4096, 16384, 131072}, {0, 1}})
    ->ArgNames({"K", "auto"})
    ->Unit(benchmark::kMillisecond)
    ->MeasureProcessCPUTime()
    ->UseRealTime();

// The model alone at the same scales (auto prices every candidate per bucket).
void BM_EstimateResnet50AtScale(benchmark::State& state) {
  Scenario sc;
  sc.strategy = Strategy::kRing;
  sc.workers = static_cast<int>(state.range(0));
  sc.batchPerWorker = 64;
  sc.options.gradientSync = AllreduceAlgorithm::kAuto;
  for (auto _ : state)
    benchmark::DoNotOptimize(estimate(resnet50(), dgxH100(), sc).step);
}
BENCHMARK(BM_EstimateResnet50AtScale)
    ->Arg(1024)
    ->Arg(16384)
    ->Arg(131072)
    ->Unit(benchmark::kMillisecond);

}  // namespace

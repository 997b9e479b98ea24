// Strategy evaluations per second: one full step estimate of alexnet-owt per
// evaluation (every layer's roofline, every collective on the topology, the
// single-worker reference and the per-worker breakdown). Target: >= 1e5/s on
// one core of the development machine. Run side by side, compare ratios.
#include <benchmark/benchmark.h>

#include <cstdlib>

#include "strata/model/cluster_loader.h"
#include "strata/model/estimate.h"
#include "strata/model/network_loader.h"
#include "strata/model/presets.h"

namespace {

using namespace strata;

struct Presets {
  Network alexnet;
  Network resnet;
  Network gpt2;
  Network gpt3xl;
  Cluster k20;
  Cluster h100;
  Presets() {
    setenv("STRATA_CONFIG_DIR", STRATA_BENCH_CONFIG_DIR, 0);
    alexnet = loadNetwork(resolveConfig(ConfigKind::kNetwork, "alexnet-owt", "bench"));
    resnet = loadNetwork(resolveConfig(ConfigKind::kNetwork, "resnet50", "bench"));
    gpt2 = loadNetwork(resolveConfig(ConfigKind::kNetwork, "gpt2-small", "bench"));
    gpt3xl = loadNetwork(resolveConfig(ConfigKind::kNetwork, "gpt3-xl", "bench"));
    k20 = loadCluster(resolveConfig(ConfigKind::kCluster, "k20x8-pcie", "bench"));
    h100 = loadCluster(resolveConfig(ConfigKind::kCluster, "dgx-h100", "bench"));
  }
};

const Presets& presets() {
  static const Presets p;
  return p;
}

// alexnet-owt on k20x8-pcie, K = 8, b = 128: one strategy per benchmark.
void BM_EstimateAlexnetOwtK20(benchmark::State& state) {
  const auto& p = presets();
  Scenario sc;
  sc.strategy = kAllStrategies[state.range(0)];
  sc.workers = 8;
  sc.batchPerWorker = 128;
  for (auto _ : state)
    benchmark::DoNotOptimize(estimate(p.alexnet, p.k20, sc).step);
  state.SetLabel(std::string(toString(sc.strategy)));
  state.counters["evaluations/s"] =
      benchmark::Counter(double(state.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_EstimateAlexnetOwtK20)->DenseRange(0, 5);

// Scale: resnet50 with ring on K dgx-h100 GPUs (the pattern cost is O(K) flows).
void BM_EstimateResnet50RingH100(benchmark::State& state) {
  const auto& p = presets();
  Scenario sc;
  sc.strategy = Strategy::kRing;
  sc.workers = static_cast<int>(state.range(0));
  sc.batchPerWorker = 64;
  for (auto _ : state)
    benchmark::DoNotOptimize(estimate(p.resnet, p.h100, sc).step);
  state.counters["evaluations/s"] =
      benchmark::Counter(double(state.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_EstimateResnet50RingH100)->Arg(8)->Arg(64)->Arg(1024);

// Transformers: ring on 64 dgx-h100 GPUs in bf16 with Adam (per-element
// efficiencies, optimizer memory); argument 0 gpt2-small (125 layers), 1
// gpt3-xl (196 layers). On the 2-core VM: 90k and 39k evaluations/s.
void BM_EstimateGptH100(benchmark::State& state) {
  const auto& p = presets();
  const Network& net = state.range(0) == 0 ? p.gpt2 : p.gpt3xl;
  Scenario sc;
  sc.strategy = Strategy::kRing;
  sc.workers = 64;
  sc.batchPerWorker = 4;
  sc.options.element = ElementType::kBf16;
  sc.options.optimizer = Optimizer::kAdam;
  for (auto _ : state)
    benchmark::DoNotOptimize(estimate(net, p.h100, sc).step);
  state.SetLabel(net.name);
  state.counters["evaluations/s"] =
      benchmark::Counter(double(state.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_EstimateGptH100)->Arg(0)->Arg(1);

}  // namespace

BENCHMARK_MAIN();

// ComputeCosts from kernel tables (tests/data/kernel-cluster.yaml): a layer's
// modelled time is its kernels' table entries plus the call overhead, and the
// estimate adds those up; and every mistake in a `kernels:` block is a
// ConfigError naming the file, the line and the key.
#include "strata/model/compute_cost.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "helpers.h"
#include "strata/model/cluster_loader.h"
#include "strata/model/error.h"
#include "strata/model/estimate.h"
#include "strata/model/lowering.h"
#include "strata/model/network_loader.h"

using namespace strata;

namespace {

// kernel-cluster.yaml's GEMM rate: 10 (op + 1) + i_m + 2 i_n + 4 i_k GFLOP/s,
// i_x the index of x in its grid {1, 4, 16}; log-space trilinear in between.
double tableRate(GemmOp op, double m, double n, double k) {
  auto at = [](double x) { return std::log(x) / std::log(4.0); };
  return 1e9 * (10.0 * (static_cast<int>(op) + 1) + at(m) + 2 * at(n) + 4 * at(k));
}

constexpr double kCallOverhead = 2e-6;  // kernel-cluster.yaml's call_overhead

}  // namespace

TEST_CASE("kernel tables load as written: every (op, m, n, k) at its place", "[kernels][cluster]") {
  const auto cl = loadCluster(test::dataFile("kernel-cluster.yaml"));
  const auto& t = cl.device.kernels;
  CHECK(t.backend == "cpu");
  CHECK(t.callOverhead.value() == Approx(kCallOverhead).epsilon(1e-12));
  REQUIRE(t.gemm.dims == std::vector<int64_t>{1, 4, 16});
  for (auto op : kAllGemmOps)
    for (size_t im = 0; im < 3; ++im)
      for (size_t in = 0; in < 3; ++in)
        for (size_t ik = 0; ik < 3; ++ik)
          CHECK(t.gemm.rate[static_cast<size_t>(op)][(im * 3 + in) * 3 + ik] ==
                1e9 * double(10 * (static_cast<int>(op) + 1) + im + 2 * in + 4 * ik));
  CHECK(t.memory[static_cast<size_t>(MemKernel::kZero)].units ==
        std::vector<double>{16, 256, 4096});
  CHECK(t.memory[static_cast<size_t>(MemKernel::kZero)].rate ==
        std::vector<double>{0.5e9, 1e9, 2e9});
  CHECK(t.memory[static_cast<size_t>(MemKernel::kCopy)].empty());
  // No `reference:` (a file from before calibrate recorded it): 0, not a guess.
  CHECK(t.referenceGemmRate == 0);
  CHECK(t.referenceCopyRate == 0);
}

TEST_CASE("kernels.reference: the speed the tables stand for loads in its units",
          "[kernels][cluster]") {
  std::ifstream in(test::dataFile("kernel-cluster.yaml"));
  std::stringstream text;
  text << in.rdbuf();
  std::string yaml = text.str();
  const auto at = yaml.find("call_overhead: 2 us");
  REQUIRE(at != std::string::npos);
  yaml.insert(
      yaml.find('\n', at) + 1,
      "    reference: {gemm_gflop_per_s: 108.5, copy_gunits_per_s: 4.25}   # test values\n");
  const auto dir = std::filesystem::temp_directory_path() /
                   ("strata-kernels-reference-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto path = dir / "kernel-cluster.yaml";  // a cluster's name is its file's stem
  std::ofstream(path) << yaml;
  const auto cl = loadCluster(path.string());
  std::filesystem::remove_all(dir);
  CHECK(cl.device.kernels.referenceGemmRate == Approx(108.5e9));
  CHECK(cl.device.kernels.referenceCopyRate == Approx(4.25e9));
}

TEST_CASE("a layer's modelled time equals its table entries plus the call overhead",
          "[kernels][cost]") {
  const auto cl = loadCluster(test::dataFile("kernel-cluster.yaml"));
  const auto net = loadNetwork(test::dataFile("kernel-fc.yaml"));  // fc 16 -> 4, no bias
  const ComputeCosts costs(net, cl, ElementType::kFp32, 1);
  REQUIRE(costs.source() == ComputeSource::kTables);
  for (int b : {1, 4, 16}) {
    INFO("batch " << b);
    // fwd: one GEMM nt (b, 4, 16), on the grid.
    const double rate = 1e9 * (20 + std::log2(b) / 2 + 2 * 1 + 4 * 2);
    CHECK(costs.layer(0, Phase::kFwd, b, 1.0).value() ==
          Approx(2.0 * b * 4 * 16 / rate + kCallOverhead).epsilon(1e-12));
  }
  // nt 4x4x16 runs at 20 + 1 + 2 + 8 = 31 GFLOP/s.
  CHECK(costs.layer(0, Phase::kFwd, 4, 1.0).value() ==
        Approx(2.0 * 4 * 4 * 16 / 31e9 + kCallOverhead).epsilon(1e-12));
  // bwd_data at 4: zero 64 values (half-way in log size from 16 to 256: 1.5 ns
  // per value), then nn (4, 16, 4) at 10 + 1 + 4 + 4 = 19 GFLOP/s.
  CHECK(costs.layer(0, Phase::kBwdData, 4, 1.0).value() ==
        Approx(64 * 1.5e-9 + 2.0 * 4 * 16 * 4 / 19e9 + kCallOverhead).epsilon(1e-12));
  // bwd_weights at 4: tn (4, 16, 4) at 30 + 1 + 4 + 4 = 39 GFLOP/s.
  CHECK(costs.layer(0, Phase::kBwdWeights, 4, 1.0).value() ==
        Approx(2.0 * 4 * 16 * 4 / 39e9 + kCallOverhead).epsilon(1e-12));
  // Update: sgd over 64 parameters, half-way from 16 to 256: 3 ns each; no overhead.
  CHECK(costs.update(64).value() == Approx(64 * 3e-9).epsilon(1e-12));
  // Half the outputs: nt (4, 2, 16), n = 2 half-way from 1 to 4.
  CHECK(costs.layer(0, Phase::kFwd, 4, 0.5).value() ==
        Approx(2.0 * 4 * 2 * 16 / tableRate(GemmOp::kNT, 4, 2, 16) + kCallOverhead).epsilon(1e-12));
  // A fractional batch is the mean of its whole neighbours.
  CHECK(costs.layer(0, Phase::kFwd, 2.5, 1.0).value() ==
        Approx((costs.layer(0, Phase::kFwd, 2, 1.0) + costs.layer(0, Phase::kFwd, 3, 1.0)).value() /
               2)
            .epsilon(1e-12));
  CHECK(costs.outsideGrid().empty());
  CHECK(costs.describe() == "compute from kernel tables (backend cpu)");
}

TEST_CASE("workers sharing a node slow GEMMs and memory kernels by their own speeds",
          "[kernels][cost]") {
  auto cl = loadCluster(test::dataFile("kernel-cluster.yaml"));
  cl.device.sharing = {{1, 1.0}, {2, 0.5}};
  cl.device.sharingMemory = {{1, 1.0}, {2, 0.25}};
  const auto net = loadNetwork(test::dataFile("kernel-fc.yaml"));
  const ComputeCosts costs(net, cl, ElementType::kFp32, 2);
  // bwd_data at 4: the GEMM at half speed, the zero fill at a quarter, the
  // overhead (the Model's bookkeeping, compute) at half.
  CHECK(costs.layer(0, Phase::kBwdData, 4, 1.0).value() ==
        Approx(64 * 1.5e-9 / 0.25 + 2.0 * 4 * 16 * 4 / 19e9 / 0.5 + kCallOverhead / 0.5)
            .epsilon(1e-12));
  CHECK(costs.update(64).value() == Approx(64 * 3e-9 / 0.25).epsilon(1e-12));
}

TEST_CASE("a worker on T threads computes at T times the speed of T x workers busy cores",
          "[kernels][cost]") {
  auto cl = loadCluster(test::dataFile("kernel-cluster.yaml"));
  cl.device.sharing = {{1, 1.0}, {2, 0.8}, {4, 0.5}};
  cl.device.sharingMemory = {{1, 1.0}, {2, 0.6}, {4, 0.25}};
  const auto net = loadNetwork(test::dataFile("kernel-fc.yaml"));
  const ComputeCosts one(net, cl, ElementType::kFp32, 1);
  // One worker, 2 threads: 2 cores busy, each at 0.8 (GEMMs) and 0.6 (memory).
  const ComputeCosts two(net, cl, ElementType::kFp32, 1, Optimizer::kMomentum, 2);
  CHECK(two.layer(0, Phase::kBwdData, 4, 1.0).value() ==
        Approx(64 * 1.5e-9 / (2 * 0.6) + 2.0 * 4 * 16 * 4 / 19e9 / (2 * 0.8) +
               kCallOverhead / (2 * 0.8))
            .epsilon(1e-12));
  CHECK(two.update(64).value() == Approx(one.update(64).value() / (2 * 0.6)).epsilon(1e-12));
  // Two workers of 2 threads on a node: 4 cores busy, each worker at 2 x 0.5.
  const ComputeCosts shared(net, cl, ElementType::kFp32, 2, Optimizer::kMomentum, 2);
  CHECK(shared.update(64).value() == Approx(one.update(64).value() / (2 * 0.25)).epsilon(1e-12));
  // estimate takes the threads from the scenario.
  Scenario sc;
  sc.strategy = Strategy::kNaive;
  sc.workers = 1;
  sc.batchPerWorker = 4;
  const auto base = estimate(net, cl, sc);
  sc.options.threadsPerWorker = 2;
  const auto threaded = estimate(net, cl, sc);
  CHECK(threaded.workers[0].compute.fwd.value() ==
        Approx(base.workers[0].compute.fwd.value() / 1.6).epsilon(1e-12));
  sc.options.threadsPerWorker = 0;
  CHECK_THROWS_WITH(estimate(net, cl, sc), Catch::Contains("--threads-per-worker"));
}

TEST_CASE("memory-bound kernels slow by the bytes they touch when workers share a node",
          "[kernels][cost]") {
  auto cl = loadCluster(test::dataFile("kernel-cluster.yaml"));
  cl.device.sharing = {{1, 1.0}, {2, 0.5}};
  cl.device.sharingMemory = {{1, 1.0}, {2, 0.25}};
  // In a core's caches (up to 1 KiB here) no slowdown; 0.25 from 16 KiB up.
  cl.device.sharingMemoryBySize = {{1, {{1024, 1.0}, {16384, 1.0}}},
                                   {2, {{1024, 1.0}, {16384, 0.25}}}};
  CHECK(cl.device.sharingMemorySpeed(2, 512) == Approx(1.0));
  CHECK(cl.device.sharingMemorySpeed(2, 4096) == Approx(1.0 - 0.75 * 0.5));  // log-midway
  CHECK(cl.device.sharingMemorySpeed(2, 1e9) == Approx(0.25));
  CHECK(cl.device.sharingMemorySpeed(1, 1e9) == Approx(1.0));
  const auto net = loadNetwork(test::dataFile("kernel-fc.yaml"));
  const ComputeCosts alone(net, cl, ElementType::kFp32, 1);
  const ComputeCosts shared(net, cl, ElementType::kFp32, 2);
  // sgd over 64 parameters touches 512 bytes: in cache, no slowdown; over
  // 4096 parameters (32 KiB), the DRAM figure.
  CHECK(shared.update(64).value() == Approx(alone.update(64).value()).epsilon(1e-12));
  CHECK(shared.update(4096).value() == Approx(alone.update(4096).value() / 0.25).epsilon(1e-12));
}

TEST_CASE("estimate prices compute from the kernel tables", "[kernels][cost]") {
  const auto cl = loadCluster(test::dataFile("kernel-cluster.yaml"));
  const auto net = loadNetwork(test::dataFile("kernel-fc.yaml"));
  const ComputeCosts costs(net, cl, ElementType::kFp32, 1);
  Scenario sc;
  sc.strategy = Strategy::kRing;
  sc.workers = 1;
  sc.batchPerWorker = 4;
  const auto est = estimate(net, cl, sc);
  REQUIRE(est.workers.size() == 1);
  Seconds fwd, bwdWeights;
  for (int i = 0; i < static_cast<int>(net.layers.size()); ++i) {
    fwd += costs.layer(i, Phase::kFwd, 4, 1.0);
    bwdWeights += costs.layer(i, Phase::kBwdWeights, 4, 1.0);
  }
  CHECK(est.workers[0].compute.fwd.value() == Approx(fwd.value()).epsilon(1e-12));
  CHECK(est.workers[0].compute.fwd.value() ==
        Approx(2.0 * 4 * 4 * 16 / 31e9 + kCallOverhead).epsilon(1e-12));
  CHECK(est.workers[0].compute.bwdWeights.value() == Approx(bwdWeights.value()).epsilon(1e-12));
  CHECK(est.computeSource.find("kernel tables") != std::string::npos);
}

TEST_CASE("shapes outside the grid are listed and described", "[kernels][cost]") {
  const auto cl = loadCluster(test::dataFile("kernel-cluster.yaml"));
  const auto net = loadNetwork(test::dataFile("kernel-fc.yaml"));
  const ComputeCosts costs(net, cl, ElementType::kFp32, 1);
  // Batch 32: nt (32, 4, 16), m beyond 16, priced at m = 16's rate.
  CHECK(
      costs.layer(0, Phase::kFwd, 32, 1.0).value() ==
      Approx(2.0 * 32 * 4 * 16 / tableRate(GemmOp::kNT, 16, 4, 16) + kCallOverhead).epsilon(1e-12));
  CHECK(costs.outsideGrid() == std::set<std::string>{"gemm nt 32x4x16 (fc)"});
  // Memory kernels beyond their sizes and kernels without a table are listed too.
  costs.layer(0, Phase::kBwdData, 512, 1.0);  // zero of 8192 values > 4096
  CHECK(costs.outsideGrid().count("zero of 8192 (fc)") == 1);
  const auto d = costs.describe();
  INFO(d);
  CHECK(d.rfind("compute from kernel tables (backend cpu); ", 0) == 0);
  CHECK(d.find("outside the tables' grid") != std::string::npos);
  CHECK(d.find("gemm nt 32x4x16 (fc)") != std::string::npos);
  // Through estimate: computeSource carries the list.
  Scenario sc;
  sc.strategy = Strategy::kRing;
  sc.workers = 1;
  sc.batchPerWorker = 32;
  const auto est = estimate(net, cl, sc);
  CHECK(est.computeSource.find("gemm nt 32x4x16 (fc)") != std::string::npos);
}

// ---- loader errors ----------------------------------------------------------------

namespace {

std::string readText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

int lineOf(const std::string& text, const std::string& what) {
  const auto at = text.find(what);
  REQUIRE(at != std::string::npos);
  return 1 + static_cast<int>(std::count(text.begin(), text.begin() + at, '\n'));
}

struct BadCase {
  const char* name;  // file stem (and the cluster's name)
  const char* from;  // text of kernel-cluster.yaml replaced ...
  const char* to;    // ... by this ("" deletes the line)
  const char* key;   // expected key
  // Expected line: where this text is in the new file (a block list is
  // reported at its first item, the line where its value starts).
  const char* lineAt;
  const char* message;  // expected part of the message
};

}  // namespace

TEST_CASE("tables timed as C += price a GEMM writing C = with the zero fill of C",
          "[kernels][cost]") {
  const std::string base = readText(test::dataFile("kernel-cluster.yaml"));
  const auto dir = std::filesystem::temp_directory_path() /
                   ("strata-accumulate-test-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::string text = base;
  const auto at = text.find("    gemm:\n");
  REQUIRE(at != std::string::npos);
  text.insert(at + std::string("    gemm:\n").size(), "      timed: accumulate\n");
  const auto nameAt = text.find("name: kernel-cluster");
  REQUIRE(nameAt != std::string::npos);
  text.replace(nameAt, std::string("name: kernel-cluster").size(), "name: kernel-accumulate");
  const auto path = (dir / "kernel-accumulate.yaml").string();
  std::ofstream(path) << text;
  const auto timedAssign = loadCluster(test::dataFile("kernel-cluster.yaml"));
  const auto timedAccumulate = loadCluster(path);
  std::filesystem::remove_all(dir);
  CHECK_FALSE(timedAssign.device.kernels.gemmAccumulates);
  REQUIRE(timedAccumulate.device.kernels.gemmAccumulates);
  const auto net = loadNetwork(test::dataFile("kernel-fc.yaml"));  // fc 16 -> 4, no bias
  const ComputeCosts assign(net, timedAssign, ElementType::kFp32, 1);
  const ComputeCosts accumulate(net, timedAccumulate, ElementType::kFp32, 1);
  // fwd at 4 writes y = x W^T (nt 4x4x16 at 31 GFLOP/s): with tables of the
  // product alone, plus the zero fill of its 16 outputs (zero's first row,
  // 0.5 G values/s: 32 ns).
  const double product = 2.0 * 4 * 4 * 16 / 31e9;
  CHECK(assign.layer(0, Phase::kFwd, 4, 1.0).value() ==
        Approx(product + kCallOverhead).epsilon(1e-12));
  CHECK(accumulate.layer(0, Phase::kFwd, 4, 1.0).value() ==
        Approx(product + 16 / 0.5e9 + kCallOverhead).epsilon(1e-12));
  // bwd_weights adds into dW (tn, C +=): the same either way.
  CHECK(accumulate.layer(0, Phase::kBwdWeights, 4, 1.0).value() ==
        Approx(assign.layer(0, Phase::kBwdWeights, 4, 1.0).value()).epsilon(1e-12));
}

TEST_CASE("kernels: mistakes name the file, line and key", "[kernels][cluster][errors]") {
  const std::string base = readText(test::dataFile("kernel-cluster.yaml"));
  const auto dir = std::filesystem::temp_directory_path() /
                   ("strata-kernels-test-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const BadCase cases[] = {
      {"unknown-backend", "backend: cpu ", "backend: gpu ", "device.kernels.backend",
       "backend: gpu", "unknown backend 'gpu'"},
      {"dims-not-increasing", "dims: [1, 4, 16]", "dims: [1, 16, 4]", "device.kernels.gemm.dims[2]",
       "dims: [1, 16, 4]", "dims must increase"},
      {"missing-row", "        - {op: tn, m: 16, n: 4, gflop_per_s: [34, 38, 42]}\n", "",
       "device.kernels.gemm.rates", "- {op: nn, m: 1, n: 1,", "no row for op tn m 16 n 4"},
      {"rate-count", "{op: nn, m: 1, n: 4, gflop_per_s: [12, 16, 20]}",
       "{op: nn, m: 1, n: 4, gflop_per_s: [12, 16]}", "device.kernels.gemm.rates[1].gflop_per_s",
       "gflop_per_s: [12, 16]", "needs 3 rates"},
      {"unknown-memory-kernel", "zero: {", "zeros: {", "device.kernels.memory.zeros", "zeros: {",
       "unknown kernel 'zeros'"},
      {"units-not-increasing", "units: [16, 256, 4096], gunits_per_s: [0.5,",
       "units: [16, 256, 256], gunits_per_s: [0.5,", "device.kernels.memory.zero.units[2]",
       "units: [16, 256, 256]", "units must increase"},
      {"lengths", "gunits_per_s: [0.5, 1, 2]", "gunits_per_s: [0.5, 1]",
       "device.kernels.memory.zero.gunits_per_s", "gunits_per_s: [0.5, 1]",
       "one rate per entry of units"},
      {"zero-rate", "{op: nt, m: 4, n: 4, gflop_per_s: [23, 27, 31]}",
       "{op: nt, m: 4, n: 4, gflop_per_s: [23, 0, 31]}",
       "device.kernels.gemm.rates[13].gflop_per_s[1]", "gflop_per_s: [23, 0, 31]", ""},
      {"negative-memory-rate", "gunits_per_s: [0.25, 0.5, 1]", "gunits_per_s: [0.25, -0.5, 1]",
       "device.kernels.memory.sgd.gunits_per_s[1]", "gunits_per_s: [0.25, -0.5, 1]", ""},
      {"unknown-op", "{op: nn, m: 1, n: 1,", "{op: nm, m: 1, n: 1,",
       "device.kernels.gemm.rates[0].op", "op: nm", "unknown GEMM op 'nm'"},
      {"off-grid-m", "{op: nn, m: 1, n: 1,", "{op: nn, m: 2, n: 1,",
       "device.kernels.gemm.rates[0].m", "m: 2, n: 1", "not one of the grid's dims"},
      {"reference-negative", "call_overhead: 2 us",
       "call_overhead: 2 us\n    reference: {gemm_gflop_per_s: -5, copy_gunits_per_s: 4}",
       "device.kernels.reference.gemm_gflop_per_s", "gemm_gflop_per_s: -5", "giga-units"},
      {"reference-missing-copy", "call_overhead: 2 us",
       "call_overhead: 2 us\n    reference: {gemm_gflop_per_s: 100}",
       "device.kernels.reference.copy_gunits_per_s", "reference: {", "missing required key"},
      {"timed-unknown", "    gemm:\n", "    gemm:\n      timed: sometimes\n",
       "device.kernels.gemm.timed", "timed: sometimes", "expected accumulate"},
      {"reference-unknown-key", "call_overhead: 2 us",
       "call_overhead: 2 us\n    reference: {gemm_gflop_per_s: 100, copy_gunits_per_s: 4, "
       "copy_gbps: 3}",
       "device.kernels.reference.copy_gbps", "reference: {", "copy_gbps"},
  };
  for (const auto& c : cases) {
    INFO(c.name);
    std::string text = base;
    const auto at = text.find(c.from);
    REQUIRE(at != std::string::npos);
    text.replace(at, std::string(c.from).size(), c.to);
    const auto nameAt = text.find("name: kernel-cluster");
    REQUIRE(nameAt != std::string::npos);
    text.replace(nameAt, std::string("name: kernel-cluster").size(),
                 std::string("name: ") + c.name);
    const auto path = (dir / (std::string(c.name) + ".yaml")).string();
    std::ofstream(path) << text;
    try {
      loadCluster(path);
      FAIL("expected a ConfigError");
    } catch (const ConfigError& e) {
      INFO(e.what());
      CHECK(e.file() == path);
      CHECK(e.key() == c.key);
      CHECK(e.line() == lineOf(text, c.lineAt));
      const std::string what = e.what();
      CHECK(what.rfind(path + ":" + std::to_string(e.line()) + ": " + c.key + ": ", 0) == 0);
      CHECK(what.find(c.message) != std::string::npos);
    }
  }
  std::filesystem::remove_all(dir);
}

// The CUDA backend's lowering (model/kernels.h, lowerCuda): a convolution is
// one cuDNN call per pass at its implicit-GEMM shape, priced from the conv
// table or, without one, as the GEMM an fc phase would run; the kernels of
// kernels/ apply beta themselves, so no zero fills.
TEST_CASE("lowerCuda: one cuDNN call per conv pass, no im2col, no zero fills", "[kernels][cuda]") {
  const auto net = loadNetwork(test::dataFile("residual-add.yaml"));
  for (size_t i = 0; i < net.layers.size(); ++i) {
    const Layer& l = net.layers[i];
    for (Phase phase : {Phase::kFwd, Phase::kBwdData, Phase::kBwdWeights}) {
      INFO(l.name << " " << toString(phase));
      const auto calls = lowerCuda(net, static_cast<int>(i), phase, 4, 0);
      for (const auto& c : calls) {
        CHECK((c.gemm || c.conv || c.kernel != MemKernel::kIm2col));
        CHECK((c.gemm || c.conv || c.kernel != MemKernel::kCol2im));
        if (phase != Phase::kFwd)
          CHECK((c.gemm || c.conv || c.kernel != MemKernel::kZero));
        if (!c.gemm && !c.conv)
          CHECK(c.count == 1);  // one launch over the whole batch
      }
      if (l.kind != LayerKind::kConv || (phase == Phase::kBwdWeights && !l.hasWeights()))
        continue;
      const auto conv = std::count_if(calls.begin(), calls.end(), [](auto& c) { return c.conv; });
      CHECK(conv == 1);
      const auto& c = *std::find_if(calls.begin(), calls.end(), [](auto& x) { return x.conv; });
      const int groups = std::max(1, l.spec.groups);
      CHECK(c.m == 4 * int64_t{l.outShape.h} * l.outShape.w);
      CHECK(c.n == l.spec.filters / groups);
      CHECK(c.k == int64_t{l.inShape.c / groups} * l.spec.kernelH * l.spec.kernelW);
      CHECK(c.count == groups);
      CHECK(c.pass == (phase == Phase::kFwd       ? ConvPass::kFwd
                       : phase == Phase::kBwdData ? ConvPass::kBwdData
                                                  : ConvPass::kBwdFilter));
    }
  }
  // Non-conv layers keep the CPU's GEMMs.
  const auto fc = loadNetwork(test::dataFile("kernel-fc.yaml"));
  const auto cpu = lowerCpu(fc, 0, Phase::kFwd, 4, 0);
  const auto gpu = lowerCuda(fc, 0, Phase::kFwd, 4, 0);
  REQUIRE(cpu.size() == gpu.size());
  CHECK((gpu[0].gemm && gpu[0].op == GemmOp::kNT && gpu[0].m == 4 && gpu[0].n == 4 &&
         gpu[0].k == 16));
  // bwd_data: the CPU zeroes dx first, cuBLAS applies beta.
  CHECK(lowerCpu(fc, 0, Phase::kBwdData, 4, 0).size() == 2);
  CHECK(lowerCuda(fc, 0, Phase::kBwdData, 4, 0).size() == 1);
}

namespace {
// Writes `text` with `from` replaced by `to` to `path` and requires loading
// it to fail with `message`, naming the file.
void requireClusterError(const std::string& path, const std::string& text, const std::string& from,
                         const std::string& to, const std::string& message) {
  std::string bad = text;
  bad.replace(bad.find(from), from.size(), to);
  std::ofstream(path) << bad;
  INFO(message);
  try {
    loadCluster(path);
    FAIL("expected a ConfigError");
  } catch (const ConfigError& e) {
    CHECK_THAT(e.what(), Catch::Contains(message));
    CHECK(e.file() == path);
  }
}
}  // namespace

TEST_CASE("kernel tables of backend cuda: conv table loaded, convolutions priced from it",
          "[kernels][cuda][cluster]") {
  std::string text = readText(test::dataFile("kernel-cluster.yaml"));
  const auto replace = [&](const std::string& from, const std::string& to) {
    const auto at = text.find(from);
    REQUIRE(at != std::string::npos);
    text.replace(at, from.size(), to);
  };
  replace("name: kernel-cluster", "name: kernel-cuda");
  replace("backend: cpu ", "backend: cuda");
  // A conv table: rate = 100 (pass + 1) GFLOP/s everywhere.
  std::string conv = "    conv:\n      dims: [1, 16]\n      rates:\n";
  for (const char* pass : {"fwd", "bwd_data", "bwd_filter"})
    for (int m : {1, 16})
      for (int n : {1, 16}) {
        const int r = 100 * (std::string(pass) == "fwd"        ? 1
                             : std::string(pass) == "bwd_data" ? 2
                                                               : 3);
        conv += "        - {pass: " + std::string(pass) + ", m: " + std::to_string(m) +
                ", n: " + std::to_string(n) + ", gflop_per_s: [" + std::to_string(r) + ", " +
                std::to_string(r) + "]}\n";
      }
  replace("    memory:\n", conv + "    memory:\n");
  const auto dir = std::filesystem::temp_directory_path() /
                   ("strata-kernels-cuda-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto path = (dir / "kernel-cuda.yaml").string();
  std::ofstream(path) << text;
  const auto cl = loadCluster(path);
  const auto& t = cl.device.kernels;
  CHECK(t.backend == "cuda");
  REQUIRE(!t.conv.empty());
  CHECK(t.convTime(ConvPass::kFwd, 16, 16, 16).value() ==
        Approx(2.0 * 16 * 16 * 16 / 100e9).epsilon(1e-12));
  CHECK(t.convTime(ConvPass::kBwdFilter, 4, 4, 4).value() ==
        Approx(2.0 * 4 * 4 * 4 / 300e9).epsilon(1e-12));
  // Without a conv table: the implicit GEMM as an fc phase runs it.
  KernelTables noConv = t;
  noConv.conv = GemmTable{};
  CHECK(noConv.convTime(ConvPass::kFwd, 4, 16, 1).value() ==
        Approx(noConv.gemmTime(GemmOp::kNT, 4, 16, 1).value()).epsilon(1e-12));
  CHECK(noConv.convTime(ConvPass::kBwdData, 4, 16, 1).value() ==
        Approx(noConv.gemmTime(GemmOp::kNN, 4, 1, 16).value()).epsilon(1e-12));
  CHECK(noConv.convTime(ConvPass::kBwdFilter, 4, 16, 1).value() ==
        Approx(noConv.gemmTime(GemmOp::kTN, 16, 1, 4).value()).epsilon(1e-12));

  // A conv table under backend cpu, and an unknown pass, are mistakes.
  for (const auto& [from, to, message] :
       {std::tuple{"backend: cuda", "backend: cpu ", "a conv table is for backend cuda"},
        std::tuple{"{pass: fwd, m: 1, n: 1,", "{pass: fwd2, m: 1, n: 1,",
                   "unknown convolution pass 'fwd2'"}}) {
    requireClusterError(path, text, from, to, message);
  }
  std::filesystem::remove_all(dir);
}

// ---- precision and optimizer ---------------------------------------------------

TEST_CASE("update time per optimizer on the roofline: closed forms", "[cost][optimizer]") {
  // 1e11 B/s at efficiency 1, fp32 peak 1e12 FLOP/s: memory-bound.
  const auto cl = test::flatCluster(1e9, 0);
  const double p = 1e6;
  struct Row {
    Optimizer o;
    ElementType e;
    double bytes;  // per parameter, by hand
    double flops;
  };
  const Row rows[] = {
      // g (4) + w read and written (8) + each state read and written (8).
      {Optimizer::kSgd, ElementType::kFp32, 12, 2},
      {Optimizer::kMomentum, ElementType::kFp32, 20, 4},
      {Optimizer::kAdam, ElementType::kFp32, 28, 12},
      {Optimizer::kAdam, ElementType::kTf32, 28, 12},
      // g (2) + fp32 master read and written (8) + states (8 each) + the
      // 2-byte working copy written (2).
      {Optimizer::kSgd, ElementType::kFp16, 12, 2},
      {Optimizer::kMomentum, ElementType::kBf16, 20, 4},
      {Optimizer::kAdam, ElementType::kFp16, 28, 12},
  };
  for (const auto& r : rows) {
    INFO(toString(r.o) << " " << toString(r.e));
    const auto c = updateCostPerParam(r.o, r.e);
    CHECK(c.bytes == r.bytes);
    CHECK(c.flops == r.flops);
    CHECK(updateTime(p, cl.device, r.e, r.o).value() == Approx(r.bytes * p / 1e11));
  }
  // Momentum in fp32 is the old formula: 5 x 4 bytes per parameter.
  CHECK(updateTime(p, cl.device, ElementType::kFp32).value() == Approx(5 * 4 * p / 1e11));
  // A slow fp32 peak makes adam compute-bound: 12 FLOPs per parameter.
  auto slow = cl;
  slow.device.peak[0] = FlopsPerSecond(1e9);
  CHECK(updateTime(p, slow.device, ElementType::kFp32, Optimizer::kAdam).value() ==
        Approx(12 * p / 1e9));
  // The same through ComputeCosts (no tables: roofline).
  const auto net = test::presetNetwork("alexnet-owt");
  CHECK(ComputeCosts(net, cl, ElementType::kFp32, 1, Optimizer::kAdam).update(p).value() ==
        Approx(28 * p / 1e11));
}

TEST_CASE("kernel tables price sgd and momentum from the sgd row, adam from its own",
          "[kernels][cost][optimizer]") {
  const auto net = loadNetwork(test::dataFile("kernel-fc.yaml"));
  const auto cl = loadCluster(test::dataFile("kernel-cluster.yaml"));
  const double p = 256;
  const Seconds sgdRow = cl.device.kernels.memoryTime(MemKernel::kSgd, p);
  for (auto o : {Optimizer::kSgd, Optimizer::kMomentum})
    CHECK(ComputeCosts(net, cl, ElementType::kFp32, 1, o).update(p).value() == sgdRow.value());
  // No adam row in the tables: the roofline's adam.
  CHECK(ComputeCosts(net, cl, ElementType::kFp32, 1, Optimizer::kAdam).update(p).value() ==
        Approx(updateTime(p, cl.device, ElementType::kFp32, Optimizer::kAdam).value()));
  // With an adam row, that row.
  auto withAdam = cl;
  auto& adam = withAdam.device.kernels.memory[static_cast<size_t>(MemKernel::kAdam)];
  adam.units = {16, 256, 4096};
  adam.rate = {0.1e9, 0.2e9, 0.4e9};
  CHECK(ComputeCosts(net, withAdam, ElementType::kFp32, 1, Optimizer::kAdam).update(p).value() ==
        Approx(p / 0.2e9));
  // The lowering of the update phase calls the kernel asked for.
  for (auto kernel : {MemKernel::kSgd, MemKernel::kAdam}) {
    const auto calls = lowerCpu(net, 0, Phase::kUpdate, 1, 0, kernel);
    REQUIRE(calls.size() == 1);
    CHECK(calls[0].kernel == kernel);
  }
  CHECK(lowerCpu(net, 0, Phase::kUpdate, 1, 0)[0].kernel == MemKernel::kSgd);
}

TEST_CASE("tf32: peak and per-element efficiency lookup, fp32 fallback said", "[cost][element]") {
  CHECK(parseElementType("tf32", "--element") == ElementType::kTf32);
  CHECK(toString(ElementType::kTf32) == "tf32");
  CHECK(elementBytes(ElementType::kTf32) == 4);
  CHECK(elementBytes(ElementType::kBf16) == 2);
  CHECK_FALSE(isMixedPrecision(ElementType::kTf32));
  CHECK(isMixedPrecision(ElementType::kFp16));

  auto cl = test::flatCluster(1e9, 0);
  cl.device.efficiency.fill(0.5);
  cl.device.peak[static_cast<size_t>(ElementType::kTf32)] = FlopsPerSecond(8e12);
  cl.device.peak[static_cast<size_t>(ElementType::kFp16)] = FlopsPerSecond(16e12);
  cl.device.efficiencyByElement[static_cast<size_t>(ElementType::kTf32)].fill(0.25);
  cl.device.hasEfficiency[static_cast<size_t>(ElementType::kTf32)] = true;
  const auto& d = cl.device;
  CHECK(d.peakFor(ElementType::kTf32, "x.yaml").value() == 8e12);
  CHECK(d.efficiencyFor(LayerKind::kFc, ElementType::kTf32) == 0.25);
  CHECK(d.efficiencyFor(LayerKind::kFc, ElementType::kFp32) == 0.5);
  CHECK(d.efficiencyFor(LayerKind::kFc, ElementType::kFp16) == 0.5);  // fallback
  CHECK(d.ownEfficiency(ElementType::kTf32));
  CHECK_FALSE(d.ownEfficiency(ElementType::kFp16));
  CHECK(d.ownEfficiency(ElementType::kFp32));
  CHECK_THROWS_AS(d.peakFor(ElementType::kBf16, "x.yaml"), OptionError);

  // A compute-bound fc phase: FLOPs / (peak x the type's efficiency).
  const auto net = loadNetwork(test::dataFile("one-fc.yaml"));  // 1000 -> 1000
  const Layer& fc = net.layers[0];
  const double examples = 4096;
  const double work = fc.fwdFlops * examples;
  CHECK(layerTime(fc, Phase::kFwd, examples, 1, d, FlopsPerSecond(8e12), ElementType::kTf32)
            .value() == Approx(work / (8e12 * 0.25)));

  // The pricing line names the type's peak and whose efficiencies it used.
  Scenario sc;
  sc.workers = 1;
  sc.batchPerWorker = 32;
  CHECK(estimate(net, cl, sc).computeSource == "compute from roofline x per-kind efficiency");
  sc.options.element = ElementType::kTf32;
  CHECK(estimate(net, cl, sc).computeSource ==
        "compute from roofline x per-kind efficiency (tf32 peak, tf32 efficiencies)");
  sc.options.element = ElementType::kFp16;
  const auto fallback = estimate(net, cl, sc).computeSource;
  CHECK(fallback.find("fp16 peak; flat.yaml has no efficiency_by_element.fp16: the fp32 "
                      "efficiencies are used") != std::string::npos);
}

TEST_CASE("presets: tf32 and per-element efficiencies where the GPU has them",
          "[cluster][element]") {
  const auto h100 = test::presetCluster("dgx-h100");
  CHECK(h100.device.peakFor(ElementType::kTf32, "").value() == Approx(494.7e12));
  for (auto t : {ElementType::kTf32, ElementType::kFp16, ElementType::kBf16})
    CHECK(h100.device.ownEfficiency(t));
  CHECK(h100.device.efficiencyFor(LayerKind::kFc, ElementType::kBf16) == Approx(0.55));
  CHECK(h100.device.efficiencyFor(LayerKind::kFc, ElementType::kFp32) == Approx(0.75));
  const auto v100 = test::presetCluster("dgx1-v100");
  CHECK(v100.device.ownEfficiency(ElementType::kFp16));
  try {
    (void)v100.device.peakFor(ElementType::kTf32, "dgx1-v100.yaml");
    FAIL("expected an OptionError");
  } catch (const OptionError& e) {
    const std::string what = e.what();
    CHECK(what.find("--element: tf32: the device of dgx1-v100.yaml has no peak for it") == 0);
  }
  for (const char* name : {"k20x8-pcie", "baidu-5x8-ib"})
    CHECK_THROWS_AS(test::presetCluster(name).device.peakFor(ElementType::kTf32, name),
                    OptionError);
}

// What `strata calibrate --device cuda` writes for tf32 and bf16
// (executor/calibrate/src/gpu_calibration.cpp): each type's measured peak
// (its fastest cuBLAS GEMM) beside fp32's in `peak`, and its efficiencies as
// fractions of that peak in `efficiency_by_element`, lines and comments as
// written. The model prices fp32 from the kernel tables and tf32 and bf16 by
// roofline with their own peak and efficiencies.
TEST_CASE("a calibrated cuda file's tf32 and bf16 peaks and efficiencies load and price",
          "[cluster][element][cuda]") {
  std::string text = readText(test::dataFile("kernel-cluster.yaml"));
  const auto replace = [&](const std::string& from, const std::string& to) {
    const auto at = text.find(from);
    REQUIRE(at != std::string::npos);
    text.replace(at, from.size(), to);
  };
  replace("name: kernel-cluster", "name: calibrated-cuda");
  replace("backend: cpu ", "backend: cuda");
  replace("memory_bandwidth: 100 GB/s", "memory_bandwidth: 100000 GB/s");
  replace("  peak: {fp32: 1 TFLOP/s}",
          "  peak: {fp32: 50000 GFLOP/s, tf32: 400000 GFLOP/s, bf16: 800000 GFLOP/s}   # fp32: "
          "fastest cuBLAS SGEMM shape of the tables below (no TF32); tf32, bf16: fastest cuBLAS "
          "GEMM in that precision through the fc phases (nn, nt, tn at m = n = k = 2048, 4096, "
          "8192; bf16: bf16 operands, fp32 accumulation and result)\n  #");
  replace("  efficiency: {default: 1.0}       # test value\n",
          "  efficiency: {default: 1.0}       # test value\n"
          "  efficiency_by_element:   # fractions of each type's own peak above, measured as the "
          "fp32 ones (the model prices tf32 and bf16 by roofline with these; fp32 by the kernel "
          "tables)\n"
          "    tf32:\n"
          "      conv: 0.5   # cuDNN 3x3 forward, implicit GEMM 65536 x 256 x 2304, tf32\n"
          "      fc: 0.25   # nt GEMM 64 x 1024 x 1024 (an fc layer, batch 64), tf32\n"
          "      default: 0.1   # estimate: memory-bound kinds; their time comes from bandwidth\n"
          "    bf16:\n"
          "      conv: 0.4   # cuDNN 3x3 forward, implicit GEMM 65536 x 256 x 2304, bf16\n"
          "      fc: 0.125   # nt GEMM 64 x 1024 x 1024 (an fc layer, batch 64), bf16\n"
          "      default: 0.1   # estimate: memory-bound kinds; their time comes from bandwidth\n");
  const auto dir = std::filesystem::temp_directory_path() /
                   ("strata-calibrated-cuda-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto path = (dir / "calibrated-cuda.yaml").string();
  std::ofstream(path) << text;
  const auto cl = loadCluster(path);
  const auto& d = cl.device;
  CHECK(d.peakFor(ElementType::kFp32, path).value() == Approx(50e12));
  CHECK(d.peakFor(ElementType::kTf32, path).value() == Approx(400e12));
  CHECK(d.peakFor(ElementType::kBf16, path).value() == Approx(800e12));
  CHECK_THROWS_AS(d.peakFor(ElementType::kFp16, path), OptionError);  // not measured: refused
  CHECK(d.ownEfficiency(ElementType::kTf32));
  CHECK(d.ownEfficiency(ElementType::kBf16));
  CHECK_FALSE(d.ownEfficiency(ElementType::kFp16));
  CHECK(d.efficiencyFor(LayerKind::kConv, ElementType::kTf32) == 0.5);
  CHECK(d.efficiencyFor(LayerKind::kFc, ElementType::kTf32) == 0.25);
  CHECK(d.efficiencyFor(LayerKind::kConv, ElementType::kBf16) == 0.4);
  CHECK(d.efficiencyFor(LayerKind::kFc, ElementType::kBf16) == 0.125);
  CHECK(d.efficiencyFor(LayerKind::kAttention, ElementType::kBf16) == 0.125);  // fc's
  CHECK(d.efficiencyFor(LayerKind::kRelu, ElementType::kBf16) == 0.1);
  CHECK(d.efficiencyFor(LayerKind::kFc, ElementType::kFp32) == 1.0);

  // fp32 from the tables, bf16 by roofline: an fc forward of 4096 examples,
  // 1000 -> 1000, is 8.192 GFLOP at 800 x 0.125 TFLOP/s = 81.92 us (its
  // 10.2 MB of bf16 traffic take 0.1 us at 100 TB/s).
  const auto net = loadNetwork(test::dataFile("one-fc.yaml"));
  const ComputeCosts fp32(net, cl, ElementType::kFp32, 1);
  CHECK(fp32.source() == ComputeSource::kTables);
  const ComputeCosts bf16(net, cl, ElementType::kBf16, 1);
  CHECK(bf16.source() == ComputeSource::kRoofline);
  CHECK(bf16.layer(0, Phase::kFwd, 4096, 1).value() ==
        Approx(2.0 * 1000 * 1000 * 4096 / (800e12 * 0.125)));
  CHECK(bf16.describe() ==
        "compute from roofline x per-kind efficiency (bf16 peak, bf16 efficiencies)");
  const ComputeCosts tf32(net, cl, ElementType::kTf32, 1);
  CHECK(tf32.layer(0, Phase::kFwd, 4096, 1).value() ==
        Approx(2.0 * 1000 * 1000 * 4096 / (400e12 * 0.25)));

  // With bf16's own tables (kernels.by_element, as calibrate writes them
  // since 2026-11-27): bf16 is priced from them like fp32 from its own, the
  // lowering the same (the table's calls include their casts) and the memory
  // kernels fp32's; tf32, without tables, stays on the roofline.
  std::string rates;
  for (const char* op : {"nn", "nt", "tn"})
    for (int m : {1, 16})
      for (int n : {1, 16})
        rates += fmt::format(
            "            - {{op: {}, m: {}, n: {}, gflop_per_s: [250000, 250000]}}\n", op, m, n);
  std::string withTables = text;
  const std::string memoryLine = "    memory:\n";
  const auto at = withTables.find(memoryLine);
  REQUIRE(at != std::string::npos);
  withTables.insert(at,
                    "    by_element:\n      bf16:\n        gemm:\n          dims: [1, 16]\n"
                    "          rates:\n" +
                        rates);
  std::ofstream(path) << withTables;
  const auto tabled = loadCluster(path);
  REQUIRE(tabled.device.kernels.pricesElement(ElementType::kBf16));
  CHECK_FALSE(tabled.device.kernels.pricesElement(ElementType::kTf32));
  CHECK(tabled.device.kernels.pricesElement(ElementType::kFp32));
  const ComputeCosts fp32Tables(net, tabled, ElementType::kFp32, 1);
  const ComputeCosts bf16Tables(net, tabled, ElementType::kBf16, 1);
  CHECK(bf16Tables.source() == ComputeSource::kTables);
  CHECK(ComputeCosts(net, tabled, ElementType::kTf32, 1).source() == ComputeSource::kRoofline);
  // The forward's GEMM (nt 4096 x 1000 x 1000, beyond the grid: the edge's
  // 250 TFLOP/s) in place of fp32's; its bias kernel and the call overhead
  // as fp32's.
  const double flops = 2.0 * 4096 * 1000 * 1000;
  const auto& t32 = tabled.device.kernels;
  CHECK(bf16Tables.layer(0, Phase::kFwd, 4096, 1).value() ==
        Approx(fp32Tables.layer(0, Phase::kFwd, 4096, 1).value() -
               t32.gemmTime(GemmOp::kNT, 4096, 1000, 1000).value() + flops / 250e12)
            .epsilon(1e-9));
  CHECK(bf16Tables.describe().rfind(
            "compute from kernel tables (backend cuda; bf16 GEMM and conv tables)", 0) == 0);
  // A table under another element, or for fp32 or fp16, is refused.
  for (const auto& [from, to, message] :
       {std::tuple{"      bf16:\n", "      fp32:\n", "fp32's tables are `gemm` and `conv`"},
        std::tuple{"      bf16:\n", "      fp16:\n", "does not run fp16"},
        std::tuple{"      bf16:\n", "      bf17:\n", "unknown element type 'bf17'"}}) {
    requireClusterError(path, withTables, from, to, message);
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("efficiency_by_element: mistakes name the file, line and key",
          "[cluster][element][errors]") {
  // The cluster's name is its file's: `name: ` + the case's name + `head`.
  const std::string head =
      "\ndescription: test\ndevice:\n  name: d\n"
      "  peak: {fp32: 1 TFLOP/s, bf16: 8 TFLOP/s}\n"
      "  memory_bandwidth: 100 GB/s\n  memory_capacity: 16 GB\n  memory_efficiency: 1\n"
      "  efficiency: {default: 0.5}\n";
  const std::string tail =
      "topology:\n  - name: switch\n    group: any\n"
      "    link: {bandwidth: 1 GB/s, latency: 1 us}\n";
  const auto dir =
      std::filesystem::temp_directory_path() / ("strata-eff-test-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  struct Case {
    const char* name;
    const char* block;    // the device's efficiency_by_element lines
    const char* key;      // expected key
    const char* message;  // expected part of the message
  };
  const Case cases[] = {
      {"unknown-type", "  efficiency_by_element:\n    fp8: {default: 0.3}\n",
       "device.efficiency_by_element.fp8",
       "unknown element type 'fp8' (expected tf32, fp16 or "
       "bf16)"},
      {"fp32", "  efficiency_by_element:\n    fp32: {default: 0.3}\n",
       "device.efficiency_by_element.fp32", "fp32's table is `efficiency`"},
      {"no-peak", "  efficiency_by_element:\n    fp16: {default: 0.3}\n",
       "device.efficiency_by_element.fp16", "no peak.fp16"},
      {"unknown-kind", "  efficiency_by_element:\n    bf16: {default: 0.3, convv: 0.4}\n",
       "device.efficiency_by_element.bf16.convv", "unknown layer kind"},
      {"over-one", "  efficiency_by_element:\n    bf16: {default: 1.5}\n",
       "device.efficiency_by_element.bf16.default", ""},
      {"no-default", "  efficiency_by_element:\n    bf16: {fc: 0.4}\n",
       "device.efficiency_by_element.bf16", "default"},
  };
  for (const auto& c : cases) {
    INFO(c.name);
    const auto path = (dir / (std::string(c.name) + ".yaml")).string();
    std::ofstream(path) << "name: " << c.name << head << c.block << tail;
    try {
      loadCluster(path);
      FAIL("expected a ConfigError");
    } catch (const ConfigError& e) {
      INFO(e.what());
      CHECK(e.file() == path);
      CHECK(e.key().rfind(c.key, 0) == 0);
      CHECK(std::string(e.what()).find(c.message) != std::string::npos);
    }
  }
  // A good table loads, attention taking fc's figure as in `efficiency`.
  const auto path = (dir / "good.yaml").string();
  std::ofstream(path) << "name: good" << head
                      << "  efficiency_by_element:\n    bf16: {default: 0.3, fc: 0.6}\n"
                      << tail;
  const auto cl = loadCluster(path);
  CHECK(cl.device.efficiencyFor(LayerKind::kFc, ElementType::kBf16) == 0.6);
  CHECK(cl.device.efficiencyFor(LayerKind::kAttention, ElementType::kBf16) == 0.6);
  CHECK(cl.device.efficiencyFor(LayerKind::kConv, ElementType::kBf16) == 0.3);
  CHECK(cl.device.efficiencyFor(LayerKind::kConv, ElementType::kFp32) == 0.5);
  std::filesystem::remove_all(dir);
}

TEST_CASE("dramPart and dramBoundShare: the memory-bound calls' traffic beyond the caches",
          "[kernels][cost]") {
  const auto cl = loadCluster(test::dataFile("kernel-cluster.yaml"));
  const auto net = loadNetwork(test::dataFile("kernel-fc.yaml"));  // fc 16 -> 4, no bias
  const ComputeCosts costs(net, cl, ElementType::kFp32, 1);
  // bwd_data zeroes b x 16 values (8 bytes each counted) before its GEMM;
  // forward and bwd_weights are one GEMM each. The zero table's rate is
  // 2 G values/s from 4096 values on.
  CHECK(costs.dramPart(0, Phase::kFwd, 262144, 1.0).value() == 0.0);
  CHECK(costs.dramPart(0, Phase::kBwdWeights, 262144, 1.0).value() == 0.0);
  // 4096 x 16 values = 512 KiB: in a core's cache, no DRAM share.
  CHECK(costs.dramPart(0, Phase::kBwdData, 4096, 1.0).value() == 0.0);
  // 16384 x 16 = 2 MiB: a quarter of the way (in log size) from 1 to 16 MiB.
  CHECK(costs.dramPart(0, Phase::kBwdData, 16384, 1.0).value() ==
        Approx(0.25 * 16384 * 16 / 2e9).epsilon(1e-9));
  // 262144 x 16 = 32 MiB: all of it.
  CHECK(costs.dramPart(0, Phase::kBwdData, 262144, 1.0).value() ==
        Approx(262144.0 * 16 / 2e9).epsilon(1e-9));
  Scenario sc;
  sc.strategy = Strategy::kRing;
  sc.workers = 1;
  sc.batchPerWorker = 262144;
  // The update (64 parameters, 512 B) is in cache: the share is the zero
  // fill's time over the step's.
  const double total = costs.layer(0, Phase::kFwd, 262144, 1.0).value() +
                       costs.layer(0, Phase::kBwdData, 262144, 1.0).value() +
                       costs.layer(0, Phase::kBwdWeights, 262144, 1.0).value() +
                       costs.update(64).value();
  CHECK(dramBoundShare(net, cl, sc) == Approx(262144.0 * 16 / 2e9 / total).epsilon(1e-9));
  sc.batchPerWorker = 4;  // everything in cache
  CHECK(dramBoundShare(net, cl, sc) == 0.0);
  // No kernel tables (a roofline preset): no split, share 0.
  Cluster plain = cl;
  plain.device.kernels = KernelTables{};
  sc.batchPerWorker = 262144;
  CHECK(dramBoundShare(net, plain, sc) == 0.0);
}

namespace {
// kernel-cluster.yaml with relu tables, a cold table per kernel and a
// last-level cache of `cache`, written as kernel-cluster.yaml in a folder of
// its own (a cluster's name is its file's stem).
std::string coldCluster(const std::string& cache, const std::filesystem::path& dir) {
  std::ifstream in(test::dataFile("kernel-cluster.yaml"));
  std::stringstream text;
  text << in.rdbuf();
  std::string yaml = text.str();
  const std::string sgd = "      sgd: {units: [16, 256, 4096], gunits_per_s: [0.25, 0.5, 1]}";
  const auto at = yaml.find(sgd);
  REQUIRE(at != std::string::npos);
  yaml.insert(
      yaml.find('\n', at) + 1,
      "      relu_fwd: {units: [16, 256, 4096], gunits_per_s: [1, 1, 1]}   # test values\n"
      "      relu_bwd: {units: [16, 256, 4096], gunits_per_s: [1, 1, 1]}   # test values\n"
      "    last_level_cache: " +
          cache +
          "   # test value\n"
          "    memory_cold:\n"
          "      zero: {units: [16, 256, 4096], gunits_per_s: [0.25, 0.25, 0.25]}   # test\n"
          "      relu_fwd: {units: [16, 256, 4096], gunits_per_s: [0.25, 0.25, 0.25]}  # test\n");
  std::filesystem::create_directories(dir);
  const auto path = dir / "kernel-cluster.yaml";
  std::ofstream(path) << yaml;
  return path.string();
}

// Writes `base` with `from` replaced by `to` to `path` and checks that
// loading it fails naming the file, `key` (and, given `lineAt`, the line
// holding that text) and saying `says`.
void checkLoadFails(const std::string& path, const std::string& base, const std::string& from,
                    const std::string& to, const std::string& key, const std::string& says,
                    const std::string& lineAt = "") {
  std::string yaml = base;
  const auto at = yaml.find(from);
  REQUIRE(at != std::string::npos);
  yaml.replace(at, from.size(), to);
  std::ofstream(path) << yaml;
  try {
    loadCluster(path);
    FAIL("expected a ConfigError");
  } catch (const ConfigError& e) {
    INFO(e.what());
    CHECK(e.file() == path);
    CHECK(e.key() == key);
    if (!lineAt.empty())
      CHECK(e.line() == lineOf(yaml, lineAt));
    CHECK(std::string(e.what()).find(says) != std::string::npos);
  }
}

// fc 16 -> 16, relu, fc 16 -> 4, no biases.
Network chainNetwork(const std::filesystem::path& dir) {
  const auto path = dir / "chain.yaml";
  std::ofstream(path) << "name: chain\n"
                         "input: {channels: 16, height: 1, width: 1}\n"
                         "layers:\n"
                         "  - {name: fc1, kind: fc, outputs: 16, bias: false}\n"
                         "  - {name: relu, kind: relu}\n"
                         "  - {name: fc2, kind: fc, outputs: 4, bias: false}\n";
  return loadNetwork(path.string());
}

// Two fc 64 -> 64, no biases: 16 KiB of weights each.
Network wideNetwork(const std::filesystem::path& dir) {
  const auto path = dir / "wide.yaml";
  std::ofstream(path) << "name: wide\n"
                         "input: {channels: 64, height: 1, width: 1}\n"
                         "layers:\n"
                         "  - {name: fc1, kind: fc, outputs: 64, bias: false}\n"
                         "  - {name: fc2, kind: fc, outputs: 64, bias: false}\n";
  return loadNetwork(path.string());
}

// The bytes a layer phase touches, as the CPU backend lowers it (a GEMM's
// operands at 4 bytes, a memory-bound kernel's units at 8).
double phaseTraffic(const Network& net, int layer, Phase phase, double examples) {
  double b = 0;
  for (const auto& c : lowerCpu(net, layer, phase, examples, 0))
    b += c.count * (c.gemm ? 4.0 * double(c.m * c.k + c.k * c.n + c.m * c.n) : c.units * 8);
  return b;
}
}  // namespace

TEST_CASE(
    "operand residency: an operand last touched D bytes ago stays with min(1, C / (D + size))",
    "[kernels][cost]") {
  const auto dir =
      std::filesystem::temp_directory_path() / ("strata-cold-" + std::to_string(::getpid()));
  const auto cl = loadCluster(coldCluster("4 KiB", dir));
  REQUIRE(cl.device.kernels.hasCold());
  CHECK(cl.device.kernels.lastLevelCache.value() == 4096);
  const Network net = chainNetwork(dir);
  const ComputeCosts costs(net, cl, ElementType::kFp32, 1);
  constexpr double C = 4096;
  // The bytes each phase touches, as the CPU backend lowers it.
  auto traffic = [&](int layer, Phase phase, double ex) {
    double b = 0;
    for (const auto& c : lowerCpu(net, layer, phase, ex, 0))
      b += c.count * (c.gemm ? 4.0 * double(c.m * c.k + c.k * c.n + c.m * c.n) : c.units * 8);
    return b;
  };
  auto bwd = [&](int layer, double ex) {
    return traffic(layer, Phase::kBwdData, ex) + (net.layers[size_t(layer)].computesWeightGradient()
                                                      ? traffic(layer, Phase::kBwdWeights, ex)
                                                      : 0.0);
  };
  auto coldOf = [&](double size, double distance) {
    return 1.0 - std::min(1.0, C / (distance + size));
  };
  for (double ex : {4.0, 64.0, 256.0}) {
    INFO("examples " << ex);
    const double in = ex * 16 * 4, hidden = ex * 16 * 4, out = ex * 4 * 4;
    // fc1's forward reads the network's input, touched at the step's start.
    CHECK(costs.coldShare(0, Phase::kFwd, ex) == Approx(coldOf(in, 0)));
    // relu's forward reads fc1's output, written by the phase just before,
    // and writes its own over what fc2's backward read last in the step
    // before: since then relu's and fc1's backward (fc1 reads the network
    // input: no backward data), both updates and fc1's forward.
    const double updates = traffic(0, Phase::kUpdate, ex) + traffic(2, Phase::kUpdate, ex);
    const double reluOut =
        bwd(1, ex) + traffic(0, Phase::kBwdWeights, ex) + updates + traffic(0, Phase::kFwd, ex);
    CHECK(costs.coldShare(1, Phase::kFwd, ex) ==
          Approx((coldOf(hidden, 0) + coldOf(hidden, reluOut)) / 2));
    // fc2's backward: its output's gradient comes from the loss (made just
    // now), its saved input was read by its own forward, just before.
    CHECK(costs.coldShare(2, Phase::kBwdData, ex) ==
          Approx((out * coldOf(out, 0) + hidden * coldOf(hidden, 0)) / (out + hidden)));
    // fc1's backward: its output's gradient was made by relu's backward just
    // before; its saved input was last read by its own forward, and since
    // then relu and fc2 ran forward and fc2 and relu backward.
    const double since =
        traffic(1, Phase::kFwd, ex) + traffic(2, Phase::kFwd, ex) + bwd(2, ex) + bwd(1, ex);
    CHECK(costs.coldShare(0, Phase::kBwdWeights, ex) ==
          Approx((hidden * coldOf(hidden, 0) + in * coldOf(in, since)) / (hidden + in)));
    CHECK(costs.coldShare(0, Phase::kUpdate, ex) == 0.0);
    // A memory-bound call is priced hot x (1 - share) + cold x share: relu's
    // forward, at 1 and 0.25 G units per second.
    const double c = costs.coldShare(1, Phase::kFwd, ex);
    CHECK(costs.layer(1, Phase::kFwd, ex, 1.0).value() ==
          Approx(ex * 16 * ((1 - c) / 1e9 + c / 0.25e9) + kCallOverhead).epsilon(1e-12));
  }
  // At 256 examples fc1's input (16 KiB) is 4x the cache: 3/4 cold.
  CHECK(costs.coldShare(0, Phase::kFwd, 256) == Approx(1 - 4096.0 / 16384));
  // Two workers on the node share the cache: each has half. fc1's forward
  // at 64 examples: its 4 KiB input half out.
  const ComputeCosts shared(net, cl, ElementType::kFp32, 2);
  CHECK(shared.coldShare(0, Phase::kFwd, 64) == Approx(1 - 2048.0 / (64 * 64)));
  // Without cold tables (or a cache size) nothing is cold.
  const auto hot = loadCluster(test::dataFile("kernel-cluster.yaml"));
  CHECK(ComputeCosts(net, hot, ElementType::kFp32, 1).coldShare(0, Phase::kFwd, 256) == 0.0);
  std::filesystem::remove_all(dir);
}

TEST_CASE("memory_cold: needs last_level_cache and the kernel's hot table", "[kernels][cluster]") {
  const auto dir =
      std::filesystem::temp_directory_path() / ("strata-cold-errors-" + std::to_string(::getpid()));
  const std::string good = coldCluster("4 KiB", dir);
  std::ifstream in(good);
  std::stringstream text;
  text << in.rdbuf();
  const std::string base = text.str();
  auto check = [&](const std::string& from, const std::string& to, const std::string& key,
                   const std::string& says) { checkLoadFails(good, base, from, to, key, says); };
  check("    last_level_cache: 4 KiB   # test value\n", "", "device.kernels.memory_cold",
        "last_level_cache");
  check("last_level_cache: 4 KiB", "last_level_cache: 100 B", "device.kernels.last_level_cache",
        "1 KiB");
  check("last_level_cache: 4 KiB", "last_level_cache: 4096", "device.kernels.last_level_cache",
        "unit");
  check("      zero: {units: [16, 256, 4096], gunits_per_s: [0.25, 0.25, 0.25]}",
        "      lrn_fwd: {units: [16, 256, 4096], gunits_per_s: [0.25, 0.25, 0.25]}",
        "device.kernels.memory_cold.lrn_fwd", "hot");
  std::filesystem::remove_all(dir);
}

namespace {
// `path`'s text with `added` after its line `after`, written as
// kernel-cluster.yaml in `dir`/`sub` (a cluster's name is its file's stem).
std::string insertedCluster(const std::string& path, const std::string& after,
                            const std::string& added, const std::filesystem::path& dir,
                            const std::string& sub) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  std::string yaml = text.str();
  const auto at = yaml.find(after);
  REQUIRE(at != std::string::npos);
  yaml.insert(at + after.size(), added);
  std::filesystem::create_directories(dir / sub);
  const auto file = dir / sub / "kernel-cluster.yaml";
  std::ofstream(file) << yaml;
  return file.string();
}

// coldCluster's file (64 KiB reported) with an effective cache of 8 KiB
// and, with `gemmCold`, a gemm_cold grid over dims 4 and 64: nn slows 2x
// everywhere, tn 1.5x, nt 2x at k = 4 and 4x at k = 64 (3x at k = 16, half-way
// in log size).
std::string gemmColdCluster(const std::filesystem::path& dir, bool gemmCold) {
  std::string grid;
  if (gemmCold) {
    grid = "    gemm_cold:   # test values\n      dims: [4, 64]\n      rates:\n";
    for (const char* op : {"nn", "nt", "tn"})
      for (int m : {4, 64})
        for (int n : {4, 64})
          grid += fmt::format("        - {{op: {}, m: {}, n: {}, slowdown: {}}}\n", op, m, n,
                              std::string(op) == "nn"   ? "[2, 2]"
                              : std::string(op) == "nt" ? "[2, 4]"
                                                        : "[1.5, 1.5]");
  }
  return insertedCluster(coldCluster("64 KiB", dir),
                         "    last_level_cache: 64 KiB   # test value\n",
                         "    effective_cache: 8 KiB   # test value\n" + grid, dir,
                         gemmCold ? "gemm-cold" : "effective-cache");
}
}  // namespace

TEST_CASE("gemm_cold: a GEMM call slows by the share of its operands the step evicted",
          "[kernels][cost]") {
  const auto dir =
      std::filesystem::temp_directory_path() / ("strata-gemm-cold-" + std::to_string(::getpid()));
  const auto cl = loadCluster(gemmColdCluster(dir, true));
  const auto hotGemms = loadCluster(gemmColdCluster(dir, false));
  const auto& t = cl.device.kernels;
  CHECK(t.effectiveCache.value() == 8192);
  CHECK(t.residencyCache().value() == 8192);
  REQUIRE(t.hasGemmCold());
  REQUIRE(t.gemmCold.dims == std::vector<int64_t>{4, 64});
  // The slowdown: trilinear in log size, the edges' beyond.
  CHECK(t.gemmColdSlowdown(GemmOp::kNN, 10, 20, 30) == Approx(2));
  CHECK(t.gemmColdSlowdown(GemmOp::kNT, 8, 8, 4) == Approx(2));
  CHECK(t.gemmColdSlowdown(GemmOp::kNT, 8, 8, 16) == Approx(3));
  CHECK(t.gemmColdSlowdown(GemmOp::kNT, 8, 8, 64) == Approx(4));
  CHECK(t.gemmColdSlowdown(GemmOp::kNT, 8, 8, 4096) == Approx(4));
  CHECK(t.gemmColdSlowdown(GemmOp::kTN, 1, 1, 1) == Approx(1.5));
  CHECK(KernelTables{}.gemmColdSlowdown(GemmOp::kNT, 8, 8, 16) == 1);

  const Network net = chainNetwork(dir);  // fc1 16 -> 16, relu, fc2 16 -> 4
  const ComputeCosts costs(net, cl, ElementType::kFp32, 1);
  const ComputeCosts hot(net, hotGemms, ElementType::kFp32, 1);
  constexpr double C = 8192;  // the effective cache, not the 64 KiB reported
  // The step's traffic of one phase (every call's operands; a memory
  // kernel's units at 8 bytes).
  auto traffic = [&](int layer, Phase phase, double ex) {
    double b = 0;
    for (const auto& c : lowerCpu(net, layer, phase, ex, 0))
      b += c.count * (c.gemm ? 4.0 * double(c.m * c.k + c.k * c.n + c.m * c.n) : c.units * 8);
    return b;
  };
  auto coldOf = [&](double size, double distance) {
    return size * (1.0 - std::min(1.0, C / (distance + size)));
  };
  auto extra = [&](int layer, Phase phase, double ex) {
    return costs.layer(layer, phase, ex, 1.0).value() - hot.layer(layer, phase, ex, 1.0).value();
  };
  // The share beyond what the table had out of the cache (a call timed back
  // to back keeps min(1, C / its operands) cached).
  auto beyondTable = [&](double cold, double operands) {
    const double tableCold = 1 - std::min(1.0, C / operands);
    return std::max(0.0, (cold / operands - tableCold) / (1 - tableCold));
  };
  const double ex = 64;
  const double x = ex * 16 * 4, h = ex * 16 * 4, y = ex * 4 * 4;  // bytes: 4, 4 and 1 KiB
  const double w1 = 16 * 16 * 4, w2 = 16 * 4 * 4;
  const double fwd0 = traffic(0, Phase::kFwd, ex), fwd1 = traffic(1, Phase::kFwd, ex),
               fwd2 = traffic(2, Phase::kFwd, ex);
  const double bwd2 = traffic(2, Phase::kBwdData, ex) + traffic(2, Phase::kBwdWeights, ex),
               bwd1 = traffic(1, Phase::kBwdData, ex), bwd0 = traffic(0, Phase::kBwdWeights, ex);
  const double update1 = traffic(0, Phase::kUpdate, ex), update2 = traffic(2, Phase::kUpdate, ex);
  CHECK(update2 == 64 * 8);  // 64 parameters, 8 bytes each
  // fc1 forward, y = x W^T (nt 64 x 16 x 16, 3x at k = 16): its input, the
  // network's, read first (in the cache); its weights since its update, then
  // fc2's (in the cache); its output written over what relu's backward of
  // the step before read last: since then fc1's backward and both updates.
  const double out1 = coldOf(h, bwd0 + update1 + update2);
  REQUIRE(out1 > 0);
  const double share1 = beyondTable(out1, x + w1 + h);
  REQUIRE(share1 > 0);
  const double gemm1 = t.gemmTime(GemmOp::kNT, 64, 16, 16).value();
  CHECK(extra(0, Phase::kFwd, ex) == Approx(gemm1 * (3 - 1) * share1).epsilon(1e-9));
  // fc1's weight gradient, dW += dy^T x (tn 16 x 16 x 64, 1.5x): dW since the
  // update of the step before (the whole step); dy made by relu's backward
  // just now; x since fc1's forward.
  const double step = update1 + update2 + fwd0 + fwd1 + fwd2 + bwd2 + bwd1;
  const double cold1 = coldOf(h, 0) + coldOf(x, fwd1 + fwd2 + bwd2 + bwd1) + coldOf(w1, step);
  const double gemmW = t.gemmTime(GemmOp::kTN, 16, 16, 64).value();
  CHECK(extra(0, Phase::kBwdWeights, ex) ==
        Approx(gemmW * 0.5 * beyondTable(cold1, h + x + w1)).epsilon(1e-9));
  // fc2's backward data, dx = dy W (nn 64 x 16 x 4, 2x), after a zero fill
  // of dx (fc1's output's gradient, relu's input): the fill writes over what
  // relu's backward read in the step before, since then fc1's backward, the
  // updates, this step's forward and fc2's weight gradient (a step computes
  // it first), at that share between the zero kernel's hot and cold rates;
  // the GEMM then finds dx cached. Its dy was made by the loss just now; W
  // read by fc2's forward, then its weight gradient ran.
  const double wg2 = traffic(2, Phase::kBwdWeights, ex);
  const double fillCold = coldOf(h, bwd0 + update1 + update2 + fwd0 + fwd1 + fwd2 + wg2) / h;
  REQUIRE(fillCold > 0);
  const double zeroHot = t.memoryTime(MemKernel::kZero, 64 * 16).value();
  const double zeroCold =
      t.memoryTime(MemKernel::kZero, 64 * 16, nullptr, Residence::kCold).value();
  const double gemmD = t.gemmTime(GemmOp::kNN, 64, 16, 4).value();
  CHECK(hot.layer(2, Phase::kBwdData, ex, 1.0).value() ==
        Approx(gemmD + zeroHot * (1 - fillCold) + zeroCold * fillCold + 2e-6).epsilon(1e-9));
  CHECK(coldOf(y, 0) + coldOf(w2, wg2) == 0);
  CHECK(extra(2, Phase::kBwdData, ex) == 0);
  // Weights larger than the cache: two fc 64 -> 64 (16 KiB of weights
  // each) at 4 examples. fc1's forward (nt 4 x 64 x 64, 4x at k = 64) reads
  // its input in the cache, its weights last touched by its update, then
  // fc2's (32 KiB: 4096 parameters x 8 bytes), and writes its output over
  // what fc2's backward read in the step before (since then fc1's weight
  // gradient and both updates). The table, timed back to back, had
  // 1 - C / 18 KiB of them out of the cache already.
  const Network wide = wideNetwork(dir);
  auto wideTraffic = [&](int layer, Phase phase) { return phaseTraffic(wide, layer, phase, 4); };
  const double w = 64 * 64 * 4, act = 4 * 64 * 4;
  const double wideUpdate = wideTraffic(1, Phase::kUpdate);
  CHECK(wideUpdate == 2 * w);
  const double wideCold =
      coldOf(act, 0) + coldOf(w, wideUpdate) +
      coldOf(act, wideTraffic(0, Phase::kBwdWeights) + wideTraffic(0, Phase::kUpdate) + wideUpdate);
  const double wideShare = beyondTable(wideCold, w + 2 * act);
  REQUIRE(wideShare > 0);
  const ComputeCosts wideCosts(wide, cl, ElementType::kFp32, 1);
  const ComputeCosts wideHot(wide, hotGemms, ElementType::kFp32, 1);
  CHECK(wideCosts.layer(0, Phase::kFwd, 4, 1.0).value() -
            wideHot.layer(0, Phase::kFwd, 4, 1.0).value() ==
        Approx(t.gemmTime(GemmOp::kNT, 4, 64, 64).value() * 3 * wideShare).epsilon(1e-9));
  // No GEMM: relu costs the same.
  CHECK(extra(1, Phase::kFwd, ex) == 0);
  std::filesystem::remove_all(dir);
}

TEST_CASE("gemm_cold and effective_cache: mistakes name the key", "[kernels][cluster][errors]") {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("strata-gemm-cold-errors-" + std::to_string(::getpid()));
  const std::string good = gemmColdCluster(dir, true);
  std::ifstream in(good);
  std::stringstream text;
  text << in.rdbuf();
  const std::string base = text.str();
  auto check = [&](const std::string& from, const std::string& to, const std::string& key,
                   const std::string& says, const std::string& lineAt = "") {
    checkLoadFails(good, base, from, to, key, says, lineAt.empty() ? to : lineAt);
  };
  check("    effective_cache: 8 KiB", "    effective_cache: 80 KiB",
        "device.kernels.effective_cache", "at most last_level_cache");
  check("    effective_cache: 8 KiB", "    effective_cache: 8192", "device.kernels.effective_cache",
        "unit");
  check("      dims: [4, 64]\n      rates:", "      dims: [64, 4]\n      rates:",
        "device.kernels.gemm_cold.dims[1]", "dims must increase");
  check("        - {op: tn, m: 64, n: 64, slowdown: [1.5, 1.5]}",
        "        - {op: tn, m: 64, n: 64, slowdown: [1.5]}",
        "device.kernels.gemm_cold.rates[11].slowdown", "needs 2 figures");
  check("        - {op: nn, m: 4, n: 4, slowdown: [2, 2]}",
        "        - {op: nn, m: 4, n: 4, slowdown: [2, 1e5]}",
        "device.kernels.gemm_cold.rates[0].slowdown[1]", "0.1 to 10,000");
  check("        - {op: nn, m: 4, n: 4, slowdown", "        - {op: mm, m: 4, n: 4, slowdown",
        "device.kernels.gemm_cold.rates[0].op", "mm");
  // The per-op rows calibrate wrote on 2026-12-03: one message, recalibrate.
  check("    gemm_cold:   # test values\n      dims: [4, 64]",
        "    gemm_cold:   # test values\n      nt: {units: [64], gunits_per_s: [1]}\n"
        "      dims: [4, 64]",
        "device.kernels.gemm_cold", "run strata calibrate again",
        "      nt: {units: [64], gunits_per_s: [1]}");
  std::filesystem::remove_all(dir);
}

namespace {
// coldCluster's file (last-level cache 64 KiB) with a core's own cache of
// 4 KiB, warm tables for zero and relu_fwd at 0.5 G units per second and,
// with `gemmWarm`, a gemm_warm grid that slows every product 2x (no
// gemm_cold: only the core's cache's misses cost a GEMM anything).
std::string warmCluster(const std::filesystem::path& dir, bool gemmWarm) {
  std::string added =
      "    core_cache: 4 KiB   # test value\n"
      "    memory_warm:\n"
      "      zero: {units: [16, 256, 4096], gunits_per_s: [0.5, 0.5, 0.5]}   # test\n"
      "      relu_fwd: {units: [16, 256, 4096], gunits_per_s: [0.5, 0.5, 0.5]}   # test\n";
  if (gemmWarm) {
    added += "    gemm_warm:   # test values\n      dims: [4, 64]\n      rates:\n";
    for (const char* op : {"nn", "nt", "tn"})
      for (int m : {4, 64})
        for (int n : {4, 64})
          added += fmt::format("        - {{op: {}, m: {}, n: {}, slowdown: [2, 2]}}\n", op, m, n);
  }
  return insertedCluster(coldCluster("64 KiB", dir),
                         "    last_level_cache: 64 KiB   # test value\n", added, dir,
                         gemmWarm ? "gemm-warm" : "warm");
}
}  // namespace

TEST_CASE("memory_warm and gemm_warm: operands out of the core's cache, in the last-level one",
          "[kernels][cost]") {
  const auto dir =
      std::filesystem::temp_directory_path() / ("strata-warm-" + std::to_string(::getpid()));
  const auto cl = loadCluster(warmCluster(dir, false));
  const auto& t = cl.device.kernels;
  REQUIRE(t.hasWarm());
  CHECK_FALSE(t.hasGemmWarm());
  CHECK(t.coreCache.value() == 4096);
  // The three residencies pick three tables; a kernel without a warm table
  // is priced hot there.
  CHECK(t.memoryTime(MemKernel::kReluFwd, 1000).value() == Approx(1e-6));
  CHECK(t.memoryTime(MemKernel::kReluFwd, 1000, nullptr, Residence::kWarm).value() == Approx(2e-6));
  CHECK(t.memoryTime(MemKernel::kReluFwd, 1000, nullptr, Residence::kCold).value() == Approx(4e-6));
  CHECK(t.memoryTime(MemKernel::kReluBwd, 1000, nullptr, Residence::kWarm).value() == Approx(1e-6));

  const Network net = chainNetwork(dir);  // fc1 16 -> 16, relu, fc2 16 -> 4
  auto traffic = [&](int layer, Phase phase, double ex) {
    return phaseTraffic(net, layer, phase, ex);
  };
  auto bwd = [&](int layer, double ex) {
    return traffic(layer, Phase::kBwdData, ex) + (net.layers[size_t(layer)].computesWeightGradient()
                                                      ? traffic(layer, Phase::kBwdWeights, ex)
                                                      : 0.0);
  };
  auto outOf = [](double cache, double size, double distance) {
    return 1.0 - std::min(1.0, cache / (distance + size));
  };
  for (int threads : {1, 2}) {
    const ComputeCosts costs(net, cl, ElementType::kFp32, 1, Optimizer::kMomentum, threads);
    // Each thread has a core and its cache.
    const double core = 4096.0 * threads, llc = 65536;
    for (double ex : {4.0, 64.0, 256.0}) {
      INFO("threads " << threads << ", examples " << ex);
      // relu's forward reads fc1's output (written just before) and writes
      // its own over what it read in the step before (coldShare's test).
      const double hidden = ex * 16 * 4;
      const double updates = traffic(0, Phase::kUpdate, ex) + traffic(2, Phase::kUpdate, ex);
      const double since =
          bwd(1, ex) + traffic(0, Phase::kBwdWeights, ex) + updates + traffic(0, Phase::kFwd, ex);
      auto evicted = [&](double cache) {
        return (outOf(cache, hidden, 0) + outOf(cache, hidden, since)) / 2;
      };
      const double cold = evicted(llc), warm = evicted(core) - evicted(llc);
      CHECK(costs.coldShare(1, Phase::kFwd, ex) == Approx(cold));
      CHECK(costs.warmShare(1, Phase::kFwd, ex) == Approx(warm));
      // Priced hot x (1 - cold - warm) + warm x warm + cold x cold, at 1,
      // 0.5 and 0.25 G units per second (each thread a share of the call).
      CHECK(costs.layer(1, Phase::kFwd, ex, 1.0).value() ==
            Approx((ex * 16 * ((1 - cold - warm) / 1e9 + warm / 0.5e9 + cold / 0.25e9) +
                    kCallOverhead) /
                   threads)
                .epsilon(1e-12));
    }
  }
  // At 256 examples relu's 16 KiB input is 4x the core's cache and a
  // quarter of the last-level one: 3/4 out of the core's, all in the LLC.
  const ComputeCosts costs(net, cl, ElementType::kFp32, 1);
  CHECK(costs.coldShare(0, Phase::kFwd, 256) == 0.0);
  CHECK(costs.warmShare(0, Phase::kFwd, 256) == Approx(1 - 4096.0 / 16384));
  // Without warm tables no share is warm.
  const auto cold = loadCluster(coldCluster("64 KiB", dir / "cold"));
  CHECK(ComputeCosts(net, cold, ElementType::kFp32, 1).warmShare(0, Phase::kFwd, 256) == 0.0);

  // gemm_warm: two fc 64 -> 64 (16 KiB of weights each) at 4 examples.
  // fc1's forward (nt 4 x 64 x 64) reads its input (the network's, first)
  // and its weights, last touched by its update, then fc2's (32 KiB), and
  // writes its output over what fc2's backward read in the step before. The
  // table, timed back to back, had 1 - core / operands of them out of the
  // core's cache already; the GEMM is priced 2x for the share beyond that.
  const auto gw = loadCluster(warmCluster(dir, true));
  REQUIRE(gw.device.kernels.hasGemmWarm());
  CHECK(gw.device.kernels.gemmWarmSlowdown(GemmOp::kNT, 10, 20, 30) == Approx(2));
  const Network wide = wideNetwork(dir);
  auto wideTraffic = [&](int layer, Phase phase) { return phaseTraffic(wide, layer, phase, 4); };
  constexpr double C = 4096, w = 64 * 64 * 4, act = 4 * 64 * 4;
  const double update2 = wideTraffic(1, Phase::kUpdate);
  CHECK(update2 == 2 * w);
  const double outCold =
      act * outOf(C, act, 0) + w * outOf(C, w, update2) +
      act * outOf(C, act,
                  wideTraffic(0, Phase::kBwdWeights) + wideTraffic(0, Phase::kUpdate) + update2);
  const double operands = w + 2 * act, tableCold = 1 - C / operands;
  const double share = (outCold / operands - tableCold) / (1 - tableCold);
  REQUIRE(share > 0);
  const ComputeCosts wideWarm(wide, gw, ElementType::kFp32, 1);
  const ComputeCosts wideHot(wide, cl, ElementType::kFp32, 1);
  CHECK(wideWarm.layer(0, Phase::kFwd, 4, 1.0).value() -
            wideHot.layer(0, Phase::kFwd, 4, 1.0).value() ==
        Approx(gw.device.kernels.gemmTime(GemmOp::kNT, 4, 64, 64).value() * share).epsilon(1e-9));
  std::filesystem::remove_all(dir);
}

TEST_CASE("core_cache, memory_warm and gemm_warm: mistakes name the key",
          "[kernels][cluster][errors]") {
  const auto dir =
      std::filesystem::temp_directory_path() / ("strata-warm-errors-" + std::to_string(::getpid()));
  const std::string good = warmCluster(dir, true);
  std::ifstream in(good);
  std::stringstream text;
  text << in.rdbuf();
  const std::string base = text.str();
  REQUIRE_NOTHROW(loadCluster(good));
  auto check = [&](const std::string& from, const std::string& to, const std::string& key,
                   const std::string& says) { checkLoadFails(good, base, from, to, key, says); };
  check("    core_cache: 4 KiB   # test value\n", "", "device.kernels.memory_warm", "core_cache");
  check("core_cache: 4 KiB", "core_cache: 128 KiB", "device.kernels.core_cache",
        "at most last_level_cache");
  check("core_cache: 4 KiB", "core_cache: 100 B", "device.kernels.core_cache", "1 KiB");
  check("core_cache: 4 KiB", "core_cache: 4096", "device.kernels.core_cache", "unit");
  check("      relu_fwd: {units: [16, 256, 4096], gunits_per_s: [0.5, 0.5, 0.5]}",
        "      lrn_fwd: {units: [16, 256, 4096], gunits_per_s: [0.5, 0.5, 0.5]}",
        "device.kernels.memory_warm.lrn_fwd", "hot");
  check("        - {op: nn, m: 4, n: 4, slowdown: [2, 2]}",
        "        - {op: nn, m: 4, n: 4, slowdown: [2, 0.01]}",
        "device.kernels.gemm_warm.rates[0].slowdown[1]", "0.1 to 10,000");
  std::filesystem::remove_all(dir);
}

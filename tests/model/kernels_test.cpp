// Kernel tables (model/kernels.h): interpolation of hand-made tables against
// closed forms, and the CPU lowering of layer phases into kernel calls,
// computed by hand from executor/nn/src/cpu_*.cpp and model_phases.cpp.
#include "strata/model/kernels.h"

#include <fmt/format.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <string>
#include <vector>

#include "helpers.h"
#include "strata/model/lowering.h"
#include "strata/model/network_loader.h"

using namespace strata;

namespace {

constexpr double kGiga = 1e9;

size_t cell(size_t im, size_t in, size_t ik) {
  return (im * 3 + in) * 3 + ik;
}

// Grid {1, 4, 16}: equally spaced in log space (log4 x = 0, 1, 2), and a rate
// linear in the grid indices: 10 (op + 1) + i_m + 2 i_n + 4 i_k GFLOP/s. The
// log-space trilinear interpolation of a linear function is that function, so
// every rate inside the grid has the closed form linearRate below.
KernelTables linearTables() {
  KernelTables t;
  t.backend = "cpu";
  t.gemm.dims = {1, 4, 16};
  for (size_t op = 0; op < 3; ++op) {
    t.gemm.rate[op].assign(27, 0.0);
    for (size_t im = 0; im < 3; ++im)
      for (size_t in = 0; in < 3; ++in)
        for (size_t ik = 0; ik < 3; ++ik)
          t.gemm.rate[op][cell(im, in, ik)] = kGiga * double(10 * (op + 1) + im + 2 * in + 4 * ik);
  }
  // copy: 1, 2, 4 G units/s at 1 Ki, 4 Ki, 16 Ki units.
  t.memory[size_t(MemKernel::kCopy)] = {{1024, 4096, 16384}, {1 * kGiga, 2 * kGiga, 4 * kGiga}};
  // Pool window reads: 3 G/s with 3x3 windows, 1 G/s with 2x2 ones (flat in size).
  t.memory[size_t(MemKernel::kPoolMaxFwd)] = {{1024, 16384}, {3 * kGiga, 3 * kGiga}};
  t.memory[size_t(MemKernel::kPoolMaxFwd2)] = {{1024, 16384}, {1 * kGiga, 1 * kGiga}};
  // Avg forward has no 2x2 table: its windows are all priced by the 3x3 one.
  t.memory[size_t(MemKernel::kPoolAvgFwd)] = {{1024, 16384}, {5 * kGiga, 5 * kGiga}};
  return t;
}

double linearRate(GemmOp op, double m, double n, double k) {
  auto at = [](double x) { return std::log(x) / std::log(4.0); };
  return kGiga * (10.0 * (static_cast<int>(op) + 1) + at(m) + 2 * at(n) + 4 * at(k));
}

// Not monotone across the grid (a peak at the middle of k, a dip in n), so that
// "between its neighbours" is not implied by a global trend.
KernelTables bumpyTables() {
  KernelTables t = linearTables();
  const double ks[3] = {2, 9, 5}, ns[3] = {7, 3, 6}, ms[3] = {1, 2, 4};
  for (size_t op = 0; op < 3; ++op)
    for (size_t im = 0; im < 3; ++im)
      for (size_t in = 0; in < 3; ++in)
        for (size_t ik = 0; ik < 3; ++ik)
          t.gemm.rate[op][cell(im, in, ik)] = kGiga * (ms[im] + ns[in] * ks[ik] + double(op));
  return t;
}

}  // namespace

TEST_CASE("gemmRate returns the table's rate on the grid, time is 2mnk / rate", "[kernels]") {
  const auto t = linearTables();
  for (auto op : kAllGemmOps)
    for (size_t im = 0; im < 3; ++im)
      for (size_t in = 0; in < 3; ++in)
        for (size_t ik = 0; ik < 3; ++ik) {
          const double m = double(t.gemm.dims[im]), n = double(t.gemm.dims[in]),
                       k = double(t.gemm.dims[ik]);
          INFO(fmt::format("{} {}x{}x{}", toString(op), m, n, k));
          bool outside = false;
          const double rate = t.gemm.rate[size_t(op)][cell(im, in, ik)];
          CHECK(t.gemmRate(op, m, n, k, &outside) == rate);
          CHECK_FALSE(outside);
          CHECK(t.gemmTime(op, m, n, k, &outside).value() == 2 * m * n * k / rate);
          CHECK_FALSE(outside);
        }
  // An empty GEMM costs nothing.
  CHECK(t.gemmTime(GemmOp::kNN, 0, 4, 4).value() == 0);
}

TEST_CASE("gemmRate between grid points: log-space trilinear", "[kernels]") {
  SECTION("a linear table is reproduced exactly inside the grid") {
    const auto t = linearTables();
    for (auto op : kAllGemmOps)
      for (double m : {1.0, 2.0, 3.0, 8.0, 12.0})
        for (double n : {1.5, 4.0, 10.0})
          for (double k : {2.0, 7.0, 16.0}) {
            INFO(fmt::format("{} {}x{}x{}", toString(op), m, n, k));
            bool outside = false;
            CHECK(t.gemmRate(op, m, n, k, &outside) ==
                  Approx(linearRate(op, m, n, k)).epsilon(1e-12));
            CHECK_FALSE(outside);
            CHECK(t.gemmTime(op, m, n, k).value() ==
                  Approx(2 * m * n * k / linearRate(op, m, n, k)).epsilon(1e-12));
          }
    // Half-way in log space between 1 and 4 (m = 2) and between 4 and 16 (n = 8):
    // nt at 2x8x1 = 20 + 0.5 + 2 x 1.5 + 0 = 23.5 GFLOP/s.
    CHECK(t.gemmRate(GemmOp::kNT, 2, 8, 1) == Approx(23.5e9).epsilon(1e-12));
  }
  SECTION("along one dimension the rate is monotone and between its neighbours") {
    const auto t = bumpyTables();
    const std::vector<double> dims = {1, 4, 16};
    for (auto op : kAllGemmOps)
      for (int axis = 0; axis < 3; ++axis)
        for (size_t seg = 0; seg < 2; ++seg)
          for (double a : dims)
            for (double b : dims) {
              auto rateAt = [&](double x) {
                return axis == 0   ? t.gemmRate(op, x, a, b)
                       : axis == 1 ? t.gemmRate(op, a, x, b)
                                   : t.gemmRate(op, a, b, x);
              };
              const double lo = rateAt(dims[seg]), hi = rateAt(dims[seg + 1]);
              INFO(fmt::format("{} axis {} segment {} others {} {}: {} .. {}", toString(op), axis,
                               seg, a, b, lo, hi));
              double previous = lo;
              for (int step = 1; step < 16; ++step) {
                const double x = dims[seg] * std::pow(4.0, step / 16.0);
                const double r = rateAt(x);
                CHECK(r >= std::min(lo, hi) * (1 - 1e-12));
                CHECK(r <= std::max(lo, hi) * (1 + 1e-12));
                if (hi >= lo)
                  CHECK(r >= previous * (1 - 1e-12));
                else
                  CHECK(r <= previous * (1 + 1e-12));
                previous = r;
              }
            }
  }
  SECTION("off-grid in every dimension: within the 8 corners of its cell") {
    const auto t = bumpyTables();
    for (auto op : kAllGemmOps) {
      const double r = t.gemmRate(op, 2, 8, 10);
      double lo = 1e300, hi = 0;
      for (size_t im : {0, 1})
        for (size_t in : {1, 2})
          for (size_t ik : {1, 2}) {
            lo = std::min(lo, t.gemm.rate[size_t(op)][cell(im, in, ik)]);
            hi = std::max(hi, t.gemm.rate[size_t(op)][cell(im, in, ik)]);
          }
      CHECK(r > lo);
      CHECK(r < hi);
    }
  }
}

TEST_CASE("gemmRate beyond the grid uses the edge rate and flags it", "[kernels]") {
  const auto t = linearTables();
  bool outside = false;
  CHECK(t.gemmRate(GemmOp::kNN, 64, 4, 4, &outside) == t.gemmRate(GemmOp::kNN, 16, 4, 4));
  CHECK(outside);
  outside = false;
  CHECK(t.gemmRate(GemmOp::kTN, 4, 0.5, 4, &outside) == t.gemmRate(GemmOp::kTN, 4, 1, 4));
  CHECK(outside);
  outside = false;
  CHECK(t.gemmRate(GemmOp::kNT, 8, 2, 1000, &outside) ==
        Approx(linearRate(GemmOp::kNT, 8, 2, 16)).epsilon(1e-12));
  CHECK(outside);
  // Time is still 2mnk over that edge rate.
  outside = false;
  CHECK(t.gemmTime(GemmOp::kNN, 64, 4, 4, &outside).value() ==
        2.0 * 64 * 4 * 4 / t.gemm.rate[0][cell(2, 1, 1)]);
  CHECK(outside);
  // The grid's own ends are inside.
  outside = false;
  t.gemmRate(GemmOp::kNN, 1, 16, 1, &outside);
  CHECK_FALSE(outside);
}

TEST_CASE("memoryRate: exact on a size point, between its neighbours, clamped beyond",
          "[kernels]") {
  const auto t = linearTables();
  bool outside = false;
  CHECK(t.memoryRate(MemKernel::kCopy, 1024, &outside) == 1e9);
  CHECK(t.memoryRate(MemKernel::kCopy, 4096, &outside) == 2e9);
  CHECK(t.memoryRate(MemKernel::kCopy, 16384, &outside) == 4e9);
  CHECK_FALSE(outside);
  CHECK(t.memoryTime(MemKernel::kCopy, 4096).value() == 4096 / 2e9);
  // Half-way in log size (2048): time per unit is the mean of 1 ns and 0.5 ns.
  CHECK(t.memoryRate(MemKernel::kCopy, 2048, &outside) == Approx(1 / 0.75e-9).epsilon(1e-12));
  CHECK(t.memoryTime(MemKernel::kCopy, 2048).value() == Approx(2048 * 0.75e-9).epsilon(1e-12));
  double previous = 1e9;
  for (double u = 1100; u < 4096; u *= 1.1) {
    const double r = t.memoryRate(MemKernel::kCopy, u, &outside);
    CHECK(r > previous);
    CHECK(r < 2e9);
    previous = r;
  }
  CHECK_FALSE(outside);
  CHECK(t.memoryRate(MemKernel::kCopy, 1e6, &outside) == 4e9);
  CHECK(outside);
  outside = false;
  CHECK(t.memoryRate(MemKernel::kCopy, 100, &outside) == 1e9);
  CHECK(outside);
  CHECK(t.memoryTime(MemKernel::kCopy, 0).value() == 0);
}

TEST_CASE("windowTime interpolates by window area between the 2x2 and 3x3 tables", "[kernels]") {
  const auto t = linearTables();
  const double units = 4096;
  const double t2 = units / 1e9, t3 = units / 3e9;
  bool outside = false;
  CHECK(t.windowTime(MemKernel::kPoolMaxFwd, units, 4, &outside).value() == Approx(t2));
  CHECK(t.windowTime(MemKernel::kPoolMaxFwd, units, 9, &outside).value() == Approx(t3));
  // Area 6.5 is half-way from 4 to 9.
  CHECK(t.windowTime(MemKernel::kPoolMaxFwd, units, 6.5, &outside).value() ==
        Approx((t2 + t3) / 2).epsilon(1e-12));
  for (double w = 4.5; w < 9; w += 0.5) {
    const double s = t.windowTime(MemKernel::kPoolMaxFwd, units, w, &outside).value();
    CHECK(s < t2);
    CHECK(s > t3);
  }
  CHECK_FALSE(outside);
  // Beyond 2x2..3x3 the nearest table prices it, flagged.
  CHECK(t.windowTime(MemKernel::kPoolMaxFwd, units, 16, &outside).value() == Approx(t3));
  CHECK(outside);
  outside = false;
  CHECK(t.windowTime(MemKernel::kPoolMaxFwd, units, 1, &outside).value() == Approx(t2));
  CHECK(outside);
  // Without a 2x2 table the 3x3 one prices every window.
  CHECK(t.windowTime(MemKernel::kPoolAvgFwd, units, 4).value() == Approx(units / 5e9));
}

TEST_CASE("columnsTime: a cost per element and per row, and one by stride", "[kernels]") {
  auto t = linearTables();
  const double units = 4096;
  // Time per unit (ns): rows of 64 at stride 1 0.25, rows of 8 0.95, rows of
  // 64 at stride 2 0.40 and at stride 4 0.85. t(W) = e + r / W: r = 0.7 /
  // (1/8 - 1/64) = 6.4 ns a row, e = 0.25 - 6.4 / 64 = 0.15 ns a unit;
  // strides 2 and 4 add 0.15 and 0.60 ns a unit.
  auto flat = [](double perUnitNs) {
    return SizeTable{{1024, 16384}, {1e9 / perUnitNs, 1e9 / perUnitNs}};
  };
  t.memory[size_t(MemKernel::kIm2col)] = flat(0.25);
  // Without the other tables (a file from before them): the plain table,
  // whatever the geometry.
  CHECK(t.columnsTime(MemKernel::kIm2col, units, 8, 4).value() == Approx(units * 0.25e-9));
  t.memory[size_t(MemKernel::kIm2colShort)] = flat(0.95);
  t.memory[size_t(MemKernel::kIm2colStride2)] = flat(0.40);
  t.memory[size_t(MemKernel::kIm2colStride4)] = flat(0.85);
  bool outside = false;
  auto ns = [&](int row, int stride) {
    return t.columnsTime(MemKernel::kIm2col, units, row, stride, &outside).value() / units * 1e9;
  };
  CHECK(ns(64, 1) == Approx(0.25));
  CHECK(ns(8, 1) == Approx(0.95));
  CHECK(ns(64, 2) == Approx(0.40));
  CHECK(ns(64, 4) == Approx(0.85));
  CHECK(ns(16, 1) == Approx(0.15 + 6.4 / 16));
  CHECK(ns(7, 1) == Approx(0.15 + 6.4 / 7));  // beyond the short rows: the same line
  CHECK(ns(112, 1) == Approx(0.25));          // past the long rows: their rate
  CHECK(ns(55, 4) == Approx(0.15 + 6.4 / 55 + 0.60));
  CHECK(ns(28, 2) == Approx(0.15 + 6.4 / 28 + 0.15));
  // Stride 3: log2 3 - 1 = 0.585 of the way from stride 2's extra to 4's.
  CHECK(ns(64, 3) == Approx(0.25 + 0.15 + (std::log2(3.0) - 1) * 0.45));
  CHECK_FALSE(outside);
  // Past stride 4: its extra, flagged.
  CHECK(ns(64, 8) == Approx(0.85));
  CHECK(outside);
  // No geometry: the plain table.
  CHECK(ns(0, 0) == Approx(0.25));
  // Noise that makes short rows or strides look cheaper never makes them
  // cheaper than the long rows at stride 1, nor stride 4 cheaper than 2.
  t.memory[size_t(MemKernel::kIm2colShort)] = flat(0.20);
  t.memory[size_t(MemKernel::kIm2colStride2)] = flat(0.10);
  CHECK(ns(8, 2) == Approx(0.25));
  CHECK(ns(8, 4) == Approx(0.25 + 0.60));
  t.memory[size_t(MemKernel::kIm2colStride2)] = flat(0.50);
  t.memory[size_t(MemKernel::kIm2colStride4)] = flat(0.30);
  CHECK(ns(64, 4) == Approx(0.50));
}

// ---- lowering ------------------------------------------------------------------

namespace {

// "gemm nn 4x64x27 x2", "im2col 1728 x2": one text per call, for readable diffs.
std::vector<std::string> lowered(const Network& net, int index, Phase phase, double examples,
                                 int outputs = 0) {
  std::vector<std::string> out;
  for (const auto& c : lowerCpu(net, index, phase, examples, outputs)) {
    if (c.gemm)
      out.push_back(fmt::format("gemm {} {}x{}x{}{} x{}", toString(c.op), c.m, c.n, c.k,
                                c.accumulate ? " +=" : "", c.count));
    else if (c.window > 0)
      out.push_back(
          fmt::format("{} {} x{} window {}", toString(c.kernel), c.units, c.count, c.window));
    else if (c.rowWidth > 0)
      out.push_back(fmt::format("{} {} x{} rows {} stride {}", toString(c.kernel), c.units, c.count,
                                c.rowWidth, c.stride));
    else
      out.push_back(fmt::format("{} {} x{}", toString(c.kernel), c.units, c.count));
  }
  return out;
}

// One layer reading the network input (channels x size x size), shapes derived.
Network oneLayer(int channels, int size, Layer layer) {
  Network net;
  net.name = "one-layer";
  net.sourceFile = "test";
  net.input = {channels, size, size};
  layer.inputs = {-1};
  deriveLayer(layer, {net.input}, net.sourceFile, 0);
  net.layers.push_back(layer);
  return net;
}

Layer conv(int filters, int kernel, int stride, int pad, int groups, bool bias = true) {
  Layer l;
  l.name = "conv";
  l.kind = LayerKind::kConv;
  l.spec.filters = filters;
  l.spec.kernelH = l.spec.kernelW = kernel;
  l.spec.stride = stride;
  l.spec.pad = pad;
  l.spec.groups = groups;
  l.spec.bias = bias;
  return l;
}

Layer fc(int outputs) {
  Layer l;
  l.name = "fc";
  l.kind = LayerKind::kFc;
  l.spec.outputs = outputs;
  return l;
}

using Calls = std::vector<std::string>;

}  // namespace

TEST_CASE("lowerCpu: a 3x3 conv is im2col + GEMM per example and group", "[kernels][lowering]") {
  SECTION("groups 1: 3x8x8 in, 4 filters 3x3 pad 1, 2 examples") {
    // k = 3 x 3 x 3 = 27 column rows, p = 8 x 8 = 64 positions, fg = 4.
    const auto net = oneLayer(3, 8, conv(4, 3, 1, 1, 1));
    REQUIRE(net.layers[0].outShape == Shape{4, 8, 8});
    CHECK(lowered(net, 0, Phase::kFwd, 2) ==
          Calls{"im2col 1728 x2 rows 8 stride 1", "gemm nn 4x64x27 x2", "bias 256 x2"});
    // dx (2 x 3 x 64 = 384 values) is zeroed, then each column matrix is added back.
    CHECK(lowered(net, 0, Phase::kBwdData, 2) ==
          Calls{"zero 384 x1", "gemm tn 27x64x4 x2", "col2im 1728 x2 rows 8 stride 1"});
    CHECK(lowered(net, 0, Phase::kBwdWeights, 2) ==
          Calls{"im2col 1728 x2 rows 8 stride 1", "gemm nt 4x27x64 += x2", "bias_grad 256 x2"});
    // 4 x 27 weights + 4 biases.
    CHECK(lowered(net, 0, Phase::kUpdate, 2) == Calls{"sgd 112 x1"});
    // Examples are whole: 2.4 runs 2, and at least 1 runs.
    CHECK(lowered(net, 0, Phase::kFwd, 2.4) == lowered(net, 0, Phase::kFwd, 2));
    CHECK(lowered(net, 0, Phase::kFwd, 0.3) == lowered(net, 0, Phase::kFwd, 1));
  }
  SECTION("groups 2: 4x8x8 in, 4 filters: 2 channels and 2 filters per group") {
    // k = 2 x 9 = 18, p = 64, fg = 2; n x groups = 4 calls.
    const auto net = oneLayer(4, 8, conv(4, 3, 1, 1, 2));
    CHECK(lowered(net, 0, Phase::kFwd, 2) ==
          Calls{"im2col 1152 x4 rows 8 stride 1", "gemm nn 2x64x18 x4", "bias 128 x4"});
    CHECK(lowered(net, 0, Phase::kBwdData, 2) ==
          Calls{"zero 512 x1", "gemm tn 18x64x2 x4", "col2im 1152 x4 rows 8 stride 1"});
    CHECK(lowered(net, 0, Phase::kBwdWeights, 2) ==
          Calls{"im2col 1152 x4 rows 8 stride 1", "gemm nt 2x18x64 += x4", "bias_grad 128 x4"});
    CHECK(lowered(net, 0, Phase::kUpdate, 2) == Calls{"sgd 76 x1"});  // 4 x 18 + 4
  }
  SECTION("a strided 3x3 conv without bias: 3x8x8 -> 4x4x4") {
    const auto net = oneLayer(3, 8, conv(4, 3, 2, 1, 1, false));
    REQUIRE(net.layers[0].outShape == Shape{4, 4, 4});
    // Output rows of 4 at stride 2 (columnsTime's geometry).
    CHECK(lowered(net, 0, Phase::kFwd, 2) ==
          Calls{"im2col 432 x2 rows 4 stride 2", "gemm nn 4x16x27 x2"});
    CHECK(lowered(net, 0, Phase::kBwdWeights, 2) ==
          Calls{"im2col 432 x2 rows 4 stride 2", "gemm nt 4x27x16 += x2"});
  }
}

TEST_CASE("lowerCpu: a pointwise conv reads its input as the column matrix",
          "[kernels][lowering]") {
  // 1x1, stride 1, pad 0: k = 3 input channels, p = 64, no im2col or col2im.
  const auto net = oneLayer(3, 8, conv(4, 1, 1, 0, 1));
  CHECK(lowered(net, 0, Phase::kFwd, 2) == Calls{"gemm nn 4x64x3 x2", "bias 256 x2"});
  CHECK(lowered(net, 0, Phase::kBwdData, 2) == Calls{"zero 384 x1", "gemm tn 3x64x4 += x2"});
  CHECK(lowered(net, 0, Phase::kBwdWeights, 2) ==
        Calls{"gemm nt 4x3x64 += x2", "bias_grad 256 x2"});
  // A 1x1 conv with stride 2 is not pointwise: it copies its strided columns.
  const auto strided = oneLayer(3, 8, conv(4, 1, 2, 0, 1));
  CHECK(lowered(strided, 0, Phase::kFwd, 2) ==
        Calls{"im2col 48 x2 rows 4 stride 2", "gemm nn 4x16x3 x2", "bias 64 x2"});
}

TEST_CASE("lowerCpu: a flattening fc is one GEMM over the batch", "[kernels][lowering]") {
  // 3x4x4 = 48 features in, 10 out, 2 examples.
  const auto net = oneLayer(3, 4, fc(10));
  CHECK(lowered(net, 0, Phase::kFwd, 2) == Calls{"gemm nt 2x10x48 x1", "bias 20 x1"});
  CHECK(lowered(net, 0, Phase::kBwdData, 2) == Calls{"zero 96 x1", "gemm nn 2x48x10 += x1"});
  CHECK(lowered(net, 0, Phase::kBwdWeights, 2) ==
        Calls{"gemm tn 10x48x2 += x1", "bias_grad 20 x1"});
  CHECK(lowered(net, 0, Phase::kUpdate, 2) == Calls{"sgd 490 x1"});  // 10 x 48 + 10
  SECTION("a model-parallel slice of 3 of the 10 outputs") {
    CHECK(lowered(net, 0, Phase::kFwd, 2, 3) == Calls{"gemm nt 2x3x48 x1", "bias 6 x1"});
    CHECK(lowered(net, 0, Phase::kBwdData, 2, 3) == Calls{"zero 96 x1", "gemm nn 2x48x3 += x1"});
    CHECK(lowered(net, 0, Phase::kBwdWeights, 2, 3) ==
          Calls{"gemm tn 3x48x2 += x1", "bias_grad 6 x1"});
    CHECK(lowered(net, 0, Phase::kUpdate, 2, 3) == Calls{"sgd 147 x1"});  // 490 x 3 / 10
  }
}

TEST_CASE("lowerCpu: a value read by two layers is summed into, zeroed by its first reader",
          "[kernels][lowering]") {
  // conv1 (3x3, 3x4x4 -> 4x4x4), relu1, conv2 (1x1) reading relu1, add(conv2, relu1).
  const auto net = loadNetwork(test::dataFile("residual-add.yaml"));
  REQUIRE(net.layers.size() == 4);
  REQUIRE(net.layers[3].inputs == std::vector<int>{2, 1});
  // relu1's gradient (2 x 64 values) gets both readers' sums: conv2, its first
  // reader, clears it in forward; neither reader zero-fills it in backward.
  CHECK(lowered(net, 2, Phase::kFwd, 2) == Calls{"zero 128 x1", "gemm nn 4x16x4 x2"});
  CHECK(lowered(net, 2, Phase::kBwdData, 2) == Calls{"gemm tn 4x16x4 += x2"});
  CHECK(lowered(net, 3, Phase::kFwd, 2) == Calls{"add 128 x1"});
  CHECK(lowered(net, 3, Phase::kBwdData, 2) == Calls{"copy 128 x1", "accumulate 128 x1"});
  // Values read once: no zero in forward, and the usual fill in backward.
  CHECK(lowered(net, 1, Phase::kFwd, 2) == Calls{"relu_fwd 128 x1"});
  CHECK(lowered(net, 0, Phase::kFwd, 2) ==
        Calls{"im2col 432 x2 rows 4 stride 1", "gemm nn 4x16x27 x2", "bias 64 x2"});
  CHECK(lowered(net, 0, Phase::kBwdData, 2) ==
        Calls{"zero 96 x1", "gemm tn 27x16x4 x2", "col2im 432 x2 rows 4 stride 1"});
  // Layers without weights do nothing in bwd_weights and update.
  CHECK(lowered(net, 3, Phase::kBwdWeights, 2).empty());
  CHECK(lowered(net, 1, Phase::kUpdate, 2).empty());
}

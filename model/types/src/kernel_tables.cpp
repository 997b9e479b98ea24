#include <algorithm>
#include <cmath>

#include "strata/model/cluster.h"
#include "strata/model/error.h"
#include "strata/model/kernels.h"

namespace strata {

std::string_view toString(GemmOp op) {
  switch (op) {
    case GemmOp::kNN:
      return "nn";
    case GemmOp::kNT:
      return "nt";
    case GemmOp::kTN:
      return "tn";
  }
  return "?";
}

std::string_view toString(ConvPass pass) {
  switch (pass) {
    case ConvPass::kFwd:
      return "fwd";
    case ConvPass::kBwdData:
      return "bwd_data";
    case ConvPass::kBwdFilter:
      return "bwd_filter";
  }
  return "?";
}

namespace {

// clang-format off
constexpr std::string_view kMemNames[kMemKernelCount] = {
    "im2col",        "col2im",             "zero",                  "copy",         "accumulate",
    "add",           "bias",               "bias_grad",             "relu_fwd",     "relu_bwd",
    "dropout_fwd",   "dropout_bwd",        "pool_max_fwd",          "pool_max_bwd", "pool_avg_fwd",
    "pool_avg_bwd",  "lrn_fwd",            "lrn_bwd",               "softmax_fwd",  "softmax_bwd",
    "batchnorm_fwd", "batchnorm_bwd_data", "batchnorm_bwd_weights", "sgd",          "reduce",
    "pool_max_fwd_2x2", "pool_avg_fwd_2x2", "pool_avg_bwd_2x2",
    "layernorm_fwd", "layernorm_bwd_data", "layernorm_bwd_weights", "gelu_fwd",     "gelu_bwd",
    "attn_softmax_fwd", "attn_softmax_bwd", "embedding_fwd",        "embedding_bwd", "adam",
    "cast_bf16",     "cast_fp32",
    "rmsnorm_fwd",   "rmsnorm_bwd_data",   "rmsnorm_bwd_weights",   "swiglu_fwd",   "swiglu_bwd",
    "rotary",        "sigmoid_fwd",      "sigmoid_bwd",         "hard_act_fwd", "hard_act_bwd",
    "mul_fwd",       "mul_bwd",         "scale_fwd",       "scale_grad",
    "im2col_rows8",  "col2im_rows8",       "im2col_stride2",        "col2im_stride2",
    "im2col_stride4", "col2im_stride4"};
// clang-format on

// Position of x among increasing grid values, in log space: index i and
// weight t of grid[i + 1] (t in [0, 1]); *outside when x lies beyond an end.
std::pair<size_t, double> locate(const std::vector<double>& logGrid, double x, bool* outside) {
  const double lx = std::log(std::max(x, 1e-300));
  const size_t n = logGrid.size();
  if (n == 1) {
    if (outside && std::fabs(lx - logGrid[0]) > 1e-9)
      *outside = true;
    return {0, 0.0};
  }
  if (lx <= logGrid.front()) {
    if (outside && lx < logGrid.front() - 1e-9)
      *outside = true;
    return {0, 0.0};
  }
  if (lx >= logGrid.back()) {
    if (outside && lx > logGrid.back() + 1e-9)
      *outside = true;
    return {n - 2, 1.0};
  }
  const size_t i =
      static_cast<size_t>(std::upper_bound(logGrid.begin(), logGrid.end(), lx) - logGrid.begin()) -
      1;
  return {i, (lx - logGrid[i]) / (logGrid[i + 1] - logGrid[i])};
}

std::vector<double> logsOf(const std::vector<double>& v) {
  std::vector<double> out;
  out.reserve(v.size());
  for (double x : v)
    out.push_back(std::log(x));
  return out;
}

}  // namespace

std::string_view toString(MemKernel kernel) {
  return kMemNames[static_cast<size_t>(kernel)];
}

bool parseMemKernel(std::string_view name, MemKernel& out) {
  for (int i = 0; i < kMemKernelCount; ++i)
    if (kMemNames[i] == name) {
      out = static_cast<MemKernel>(i);
      return true;
    }
  return false;
}

namespace {

// Rate of table `which` of a grid at (m, n, k): trilinear in log size.
double gridRate(const GemmTable& table, size_t which, double m, double n, double k, bool* outside) {
  STRATA_ENFORCE(!table.empty());
  std::vector<double> grid(table.dims.begin(), table.dims.end());
  const auto lg = logsOf(grid);
  const auto [im, tm] = locate(lg, m, outside);
  const auto [in, tn] = locate(lg, n, outside);
  const auto [ik, tk] = locate(lg, k, outside);
  const size_t d = table.dims.size();
  const auto& r = table.rate[which];
  auto at = [&](size_t a, size_t b, size_t c) {
    return r[(std::min(a, d - 1) * d + std::min(b, d - 1)) * d + std::min(c, d - 1)];
  };
  double sum = 0;
  for (int a = 0; a < 2; ++a)
    for (int b = 0; b < 2; ++b)
      for (int c = 0; c < 2; ++c) {
        const double w = (a ? tm : 1 - tm) * (b ? tn : 1 - tn) * (c ? tk : 1 - tk);
        if (w > 0)
          sum += w * at(im + size_t(a), in + size_t(b), ik + size_t(c));
      }
  return sum;
}

}  // namespace

double KernelTables::gemmRate(GemmOp op, double m, double n, double k, bool* outside) const {
  return gridRate(gemm, static_cast<size_t>(op), m, n, k, outside);
}

Seconds KernelTables::convTime(ConvPass pass, double m, double n, double k, bool* outside) const {
  if (m <= 0 || n <= 0 || k <= 0)
    return Seconds(0);
  if (!conv.empty())
    return Seconds(2.0 * m * n * k / gridRate(conv, static_cast<size_t>(pass), m, n, k, outside));
  // The implicit GEMM as an fc layer's phase runs it.
  switch (pass) {
    case ConvPass::kFwd:
      return gemmTime(GemmOp::kNT, m, n, k, outside);
    case ConvPass::kBwdData:
      return gemmTime(GemmOp::kNN, m, k, n, outside);
    case ConvPass::kBwdFilter:
      return gemmTime(GemmOp::kTN, n, k, m, outside);
  }
  return Seconds(0);
}

Seconds KernelTables::gemmTime(GemmOp op, double m, double n, double k, bool* outside) const {
  if (m <= 0 || n <= 0 || k <= 0)
    return Seconds(0);
  return Seconds(2.0 * m * n * k / gemmRate(op, m, n, k, outside));
}

namespace {
// A size table's rate at `units`: per unit time log-linear in size between
// its points, the ends' beyond (*outside set there).
double rateAt(const SizeTable& t, double units, bool* outside) {
  STRATA_ENFORCE(!t.empty());
  const auto [i, w] = locate(logsOf(t.units), units, outside);
  if (t.units.size() == 1)
    return t.rate[0];
  // On a size point (or clamped to an end) the table's own figure, exactly.
  if (w <= 0)
    return t.rate[i];
  if (w >= 1)
    return t.rate[i + 1];
  // Interpolate time per unit (the reciprocal of the rate) in log size.
  return 1.0 / ((1 - w) / t.rate[i] + w / t.rate[i + 1]);
}
}  // namespace

double KernelTables::memoryRate(MemKernel kernel, double units, bool* outside, Residence at) const {
  const auto k = static_cast<size_t>(kernel);
  const auto& flushed = memoryTables(at)[k];
  return rateAt(flushed.empty() ? memory[k] : flushed, units, outside);
}

double KernelTables::gemmColdSlowdown(GemmOp op, double m, double n, double k) const {
  if (gemmCold.empty() || m <= 0 || n <= 0 || k <= 0)
    return 1.0;
  return std::max(1.0, gridRate(gemmCold, static_cast<size_t>(op), m, n, k, nullptr));
}

double KernelTables::gemmWarmSlowdown(GemmOp op, double m, double n, double k) const {
  if (gemmWarm.empty() || m <= 0 || n <= 0 || k <= 0)
    return 1.0;
  return std::max(1.0, gridRate(gemmWarm, static_cast<size_t>(op), m, n, k, nullptr));
}

Seconds KernelTables::memoryTime(MemKernel kernel, double units, bool* outside,
                                 Residence at) const {
  if (units <= 0)
    return Seconds(0);
  return Seconds(units / memoryRate(kernel, units, outside, at));
}

bool KernelTables::pricesElement(ElementType element) const {
  if (empty())
    return false;
  if (element == ElementType::kFp32)
    return true;
  const auto it = byElement.find(element);
  return it != byElement.end() && !it->second.gemm.empty();
}

KernelTables KernelTables::forElement(ElementType element) const {
  STRATA_ENFORCE(pricesElement(element));
  KernelTables t = *this;
  if (element != ElementType::kFp32) {
    const ElementTables& e = byElement.at(element);
    t.gemm = e.gemm;
    // Without its own conv table a convolution is priced as the element's
    // implicit GEMM (convTime), not from fp32's conv table.
    t.conv = e.conv;
  }
  t.byElement.clear();
  return t;
}

Seconds KernelTables::columnsTime(MemKernel kernel, double units, int rowWidth, int stride,
                                  bool* outside, Residence at) const {
  STRATA_ENFORCE(kernel == MemKernel::kIm2col || kernel == MemKernel::kCol2im);
  const bool im2col = kernel == MemKernel::kIm2col;
  const MemKernel shortRows = im2col ? MemKernel::kIm2colShort : MemKernel::kCol2imShort;
  const MemKernel stride2 = im2col ? MemKernel::kIm2colStride2 : MemKernel::kCol2imStride2;
  const MemKernel stride4 = im2col ? MemKernel::kIm2colStride4 : MemKernel::kCol2imStride4;
  if (units <= 0)
    return Seconds(0);
  auto has = [&](MemKernel k) { return !memory[static_cast<size_t>(k)].empty(); };
  if (rowWidth <= 0 || stride <= 0 || !has(shortRows) || !has(stride2) || !has(stride4))
    return memoryTime(kernel, units, outside, at);
  auto perUnit = [&](MemKernel k) { return 1.0 / memoryRate(k, units, outside, at); };
  const double longRows = perUnit(kernel);
  // Per-row cost r from t(W) = e + r / W at the two widths; neither it nor
  // a stride's extra is taken below zero (a timing's noise).
  const double perRow = std::max(
      0.0, (perUnit(shortRows) - longRows) / (1.0 / kColumnsShortRow - 1.0 / kColumnsLongRow));
  const double w = std::min(rowWidth, kColumnsLongRow);
  const double extra2 = std::max(0.0, perUnit(stride2) - longRows);
  const double extra4 = std::max(extra2, perUnit(stride4) - longRows);
  const double octaves = std::log2(double(stride));
  if (outside && octaves > 2 + 1e-9)
    *outside = true;
  const double extra =
      octaves <= 1 ? extra2 * octaves : extra2 + (extra4 - extra2) * (std::min(octaves, 2.0) - 1);
  return Seconds(units * (longRows + perRow * (1.0 / w - 1.0 / kColumnsLongRow) + extra));
}

bool KernelTables::hasCold() const {
  return std::any_of(memoryCold.begin(), memoryCold.end(),
                     [](const SizeTable& t) { return !t.empty(); });
}

bool KernelTables::hasWarm() const {
  return std::any_of(memoryWarm.begin(), memoryWarm.end(),
                     [](const SizeTable& t) { return !t.empty(); });
}

Seconds KernelTables::windowTime(MemKernel kernel, double units, double window, bool* outside,
                                 Residence at) const {
  const MemKernel small = kernel == MemKernel::kPoolMaxFwd   ? MemKernel::kPoolMaxFwd2
                          : kernel == MemKernel::kPoolAvgFwd ? MemKernel::kPoolAvgFwd2
                                                             : MemKernel::kPoolAvgBwd2;
  if (memory[static_cast<size_t>(small)].empty())
    return memoryTime(kernel, units, outside, at);
  if (outside && (window < 4 - 1e-9 || window > 9 + 1e-9))
    *outside = true;
  const double w = std::clamp((window - 4) / 5, 0.0, 1.0);
  return memoryTime(small, units, outside, at) * (1 - w) +
         memoryTime(kernel, units, outside, at) * w;
}

}  // namespace strata

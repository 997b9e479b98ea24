#include "strata/model/kernels.h"

#include <algorithm>
#include <cmath>

#include "strata/model/error.h"

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
    "attn_softmax_fwd", "attn_softmax_bwd", "embedding_fwd",        "embedding_bwd", "adam"};
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

double KernelTables::memoryRate(MemKernel kernel, double units, bool* outside) const {
  const auto& t = memory[static_cast<size_t>(kernel)];
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

Seconds KernelTables::memoryTime(MemKernel kernel, double units, bool* outside) const {
  if (units <= 0)
    return Seconds(0);
  return Seconds(units / memoryRate(kernel, units, outside));
}

Seconds KernelTables::windowTime(MemKernel kernel, double units, double window,
                                 bool* outside) const {
  const MemKernel small = kernel == MemKernel::kPoolMaxFwd   ? MemKernel::kPoolMaxFwd2
                          : kernel == MemKernel::kPoolAvgFwd ? MemKernel::kPoolAvgFwd2
                                                             : MemKernel::kPoolAvgBwd2;
  if (memory[static_cast<size_t>(small)].empty())
    return memoryTime(kernel, units, outside);
  if (outside && (window < 4 - 1e-9 || window > 9 + 1e-9))
    *outside = true;
  const double w = std::clamp((window - 4) / 5, 0.0, 1.0);
  return memoryTime(small, units, outside) * (1 - w) + memoryTime(kernel, units, outside) * w;
}

namespace {

int readersOf(const Network& net, int producer) {
  int n = 0;
  for (const auto& l : net.layers)
    n += static_cast<int>(std::count(l.inputs.begin(), l.inputs.end(), producer));
  return n;
}

int firstReaderOf(const Network& net, int producer) {
  for (size_t i = 0; i < net.layers.size(); ++i)
    for (int p : net.layers[i].inputs)
      if (p == producer)
        return static_cast<int>(i);
  return -1;
}

}  // namespace

std::vector<KernelCall> lowerCpu(const Network& net, int index, Phase phase, double examples,
                                 int outputs, MemKernel update) {
  STRATA_ENFORCE(index >= 0 && index < static_cast<int>(net.layers.size()));
  const Layer& l = net.layers[static_cast<size_t>(index)];
  const int64_t n = std::max<int64_t>(1, std::llround(examples));
  const bool sliced = outputs > 0 && l.kind == LayerKind::kFc;
  const int64_t channels = outputs > 0 ? outputs : l.outShape.c;
  const int64_t area = int64_t{l.outShape.h} * l.outShape.w;
  const double outElems = double(n) * double(channels) * double(area);
  const double inElems = double(n) * double(l.inShape.elements());
  std::vector<KernelCall> calls;
  auto gemm = [&](GemmOp op, int64_t m, int64_t nn, int64_t k, double count) {
    KernelCall c;
    c.gemm = true;
    c.op = op;
    c.m = m;
    c.n = nn;
    c.k = k;
    c.count = count;
    calls.push_back(c);
  };
  auto mem = [&](MemKernel kernel, double units, double count = 1, double window = 0) {
    if (units <= 0 || count <= 0)
      return;
    KernelCall c;
    c.kernel = kernel;
    c.units = units;
    c.window = window;
    c.count = count;
    calls.push_back(c);
  };
  // The gradient into input `which` is summed (beta 1) when several layers
  // read that input; else it is overwritten, after a zero fill for the
  // kernels that accumulate.
  auto summedInto = [&](size_t which) { return !sliced && readersOf(net, l.inputs[which]) > 1; };
  const int cg = l.kind == LayerKind::kConv ? l.inShape.c / std::max(1, l.spec.groups) : 0;
  const int fg = l.kind == LayerKind::kConv ? l.spec.filters / std::max(1, l.spec.groups) : 0;
  const int64_t ck = int64_t{cg} * l.spec.kernelH * l.spec.kernelW;  // column rows
  const bool pointwise =
      l.spec.kernelH == 1 && l.spec.kernelW == 1 && l.spec.stride == 1 && l.spec.pad == 0;
  const int64_t fcIn = l.spec.flatten ? l.inShape.elements() : l.inShape.c;
  const int64_t inArea = int64_t{l.inShape.h} * l.inShape.w;
  const int poolH = l.spec.global ? l.inShape.h : l.spec.kernelH;
  const int poolW = l.spec.global ? l.inShape.w : l.spec.kernelW;
  // attention: d features, T positions, dh features per head
  const int64_t d = l.inShape.c;
  const int64_t t = inArea;
  const int64_t dh = l.spec.heads > 0 ? d / l.spec.heads : 0;

  switch (phase) {
    case Phase::kUpdate: {
      const double share = outputs > 0 ? double(outputs) / double(l.outShape.c) : 1.0;
      mem(update, double(l.params) * share);
      break;
    }
    case Phase::kFwd:
      // The first reader of a value several layers read clears its gradient.
      if (!sliced)
        for (int p : l.inputs)
          if (p >= 0 && readersOf(net, p) > 1 && firstReaderOf(net, p) == index)
            mem(MemKernel::kZero,
                double(n) * double(net.layers[static_cast<size_t>(p)].outShape.elements()));
      switch (l.kind) {
        case LayerKind::kConv: {
          const double count = double(n) * l.spec.groups;
          if (!pointwise)
            mem(MemKernel::kIm2col, double(ck * area), count);
          gemm(GemmOp::kNN, fg, area, ck, count);
          if (l.spec.bias)
            mem(MemKernel::kBias, double(fg) * double(area), count);
          break;
        }
        case LayerKind::kPool:
          mem(l.spec.poolMode == PoolMode::kMax ? MemKernel::kPoolMaxFwd : MemKernel::kPoolAvgFwd,
              outElems * poolH * poolW, 1, double(poolH) * poolW);
          break;
        case LayerKind::kFc:
          if (l.spec.flatten) {
            gemm(GemmOp::kNT, n, channels, fcIn, 1);
            if (l.spec.bias)
              mem(MemKernel::kBias, double(n) * double(channels));
          } else {
            gemm(GemmOp::kNN, channels, inArea, fcIn, double(n));
            if (l.spec.bias)
              mem(MemKernel::kBias, double(channels) * double(inArea), double(n));
          }
          break;
        case LayerKind::kRelu:
          mem(MemKernel::kReluFwd, outElems);
          break;
        case LayerKind::kDropout:
          mem(l.spec.dropoutRate > 0 ? MemKernel::kDropoutFwd : MemKernel::kCopy, outElems);
          break;
        case LayerKind::kLrn:
          mem(MemKernel::kLrnFwd, outElems);
          break;
        case LayerKind::kBatchNorm:
          mem(MemKernel::kBatchNormFwd, outElems);
          break;
        case LayerKind::kAdd:
          mem(MemKernel::kAdd, outElems);
          mem(MemKernel::kAccumulate, outElems, double(l.inputs.size()) - 2);
          break;
        case LayerKind::kSoftmax:
          mem(MemKernel::kSoftmaxFwd, outElems);
          break;
        case LayerKind::kEmbedding:
          mem(MemKernel::kEmbeddingFwd, outElems);
          break;
        case LayerKind::kAttention: {
          // Per example (x: d x T), per head (Q, K, V: dh x T):
          //   QKV = Wqkv x; S = Q^T K; P = softmax(S / sqrt(dh), causal);
          //   C = V P^T; y = Wo C.
          const double heads = double(n) * l.spec.heads;
          gemm(GemmOp::kNN, 3 * d, t, d, double(n));
          if (l.spec.bias)
            mem(MemKernel::kBias, 3 * double(d) * double(t), double(n));
          gemm(GemmOp::kTN, t, t, dh, heads);
          mem(MemKernel::kAttnSoftmaxFwd, heads * double(t) * double(t));
          gemm(GemmOp::kNT, dh, t, t, heads);
          gemm(GemmOp::kNN, d, t, d, double(n));
          if (l.spec.bias)
            mem(MemKernel::kBias, double(d) * double(t), double(n));
          break;
        }
        case LayerKind::kLayerNorm:
          mem(MemKernel::kLayerNormFwd, outElems);
          break;
        case LayerKind::kGelu:
          mem(MemKernel::kGeluFwd, outElems);
          break;
        case LayerKind::kRnn:
          break;
      }
      break;
    case Phase::kBwdData: {
      const bool summed = summedInto(0);
      switch (l.kind) {
        case LayerKind::kConv: {
          const double count = double(n) * l.spec.groups;
          if (!summed)
            mem(MemKernel::kZero, inElems);
          gemm(GemmOp::kTN, ck, area, fg, count);
          if (!pointwise)
            mem(MemKernel::kCol2im, double(ck * area), count);
          break;
        }
        case LayerKind::kPool:
          if (!summed)
            mem(MemKernel::kZero, inElems);
          if (l.spec.poolMode == PoolMode::kMax)
            mem(MemKernel::kPoolMaxBwd, outElems);
          else
            mem(MemKernel::kPoolAvgBwd, outElems * poolH * poolW, 1, double(poolH) * poolW);
          break;
        case LayerKind::kFc:
          if (!summed)
            mem(MemKernel::kZero, inElems);
          if (l.spec.flatten)
            gemm(GemmOp::kNN, n, fcIn, channels, 1);
          else
            gemm(GemmOp::kTN, fcIn, inArea, channels, double(n));
          break;
        case LayerKind::kRelu:
          mem(MemKernel::kReluBwd, outElems);
          break;
        case LayerKind::kDropout:
          if (l.spec.dropoutRate > 0) {
            if (!summed)
              mem(MemKernel::kZero, outElems);
            mem(MemKernel::kDropoutBwd, outElems);
          } else {
            mem(summed ? MemKernel::kAccumulate : MemKernel::kCopy, outElems);
          }
          break;
        case LayerKind::kLrn:
          mem(MemKernel::kLrnBwd, outElems);
          break;
        case LayerKind::kBatchNorm:
          mem(MemKernel::kBatchNormBwdData, outElems);
          break;
        case LayerKind::kAdd:
          for (size_t i = 0; i < l.inputs.size(); ++i)
            mem(summedInto(i) ? MemKernel::kAccumulate : MemKernel::kCopy, outElems);
          break;
        case LayerKind::kSoftmax:
          mem(MemKernel::kSoftmaxBwd, outElems);
          break;
        case LayerKind::kEmbedding:
          break;  // token ids take no gradient
        case LayerKind::kAttention:
          // dx = Wqkv^T dQKV, from the dQKV its bwd_weights left.
          if (!summed)
            mem(MemKernel::kZero, inElems);
          gemm(GemmOp::kTN, d, t, 3 * d, double(n));
          break;
        case LayerKind::kLayerNorm:
          mem(MemKernel::kLayerNormBwdData, outElems);
          break;
        case LayerKind::kGelu:
          mem(MemKernel::kGeluBwd, outElems);
          break;
        case LayerKind::kRnn:
          break;
      }
      break;
    }
    case Phase::kBwdWeights:
      switch (l.kind) {
        case LayerKind::kConv: {
          const double count = double(n) * l.spec.groups;
          if (!pointwise)
            mem(MemKernel::kIm2col, double(ck * area), count);
          gemm(GemmOp::kNT, fg, ck, area, count);
          if (l.spec.bias)
            mem(MemKernel::kBiasGrad, double(fg) * double(area), count);
          break;
        }
        case LayerKind::kFc:
          if (l.spec.flatten) {
            gemm(GemmOp::kTN, channels, fcIn, n, 1);
            if (l.spec.bias)
              mem(MemKernel::kBiasGrad, double(n) * double(channels));
          } else {
            gemm(GemmOp::kNT, channels, fcIn, inArea, double(n));
            if (l.spec.bias)
              mem(MemKernel::kBiasGrad, double(channels) * double(inArea), double(n));
          }
          break;
        case LayerKind::kBatchNorm:
          mem(MemKernel::kBatchNormBwdWeights, outElems);
          break;
        case LayerKind::kLayerNorm:
          mem(MemKernel::kLayerNormBwdWeights, outElems);
          break;
        case LayerKind::kEmbedding:
          mem(MemKernel::kEmbeddingBwd, outElems);
          break;
        case LayerKind::kAttention: {
          // Runs before bwd_data (as every layer's), so it carries the
          // backward through the heads that both need, leaving dQKV:
          //   dWo += dy C^T; dC = Wo^T dy; per head dP = dC^T V, dV = dC P;
          //   dS = softmax'(dP); dQ = K dS^T, dK = Q dS; dWqkv += dQKV x^T.
          const double heads = double(n) * l.spec.heads;
          gemm(GemmOp::kNT, d, d, t, double(n));
          if (l.spec.bias)
            mem(MemKernel::kBiasGrad, double(d) * double(t), double(n));
          gemm(GemmOp::kTN, d, t, d, double(n));
          gemm(GemmOp::kTN, t, t, dh, heads);
          gemm(GemmOp::kNN, dh, t, t, heads);
          mem(MemKernel::kAttnSoftmaxBwd, heads * double(t) * double(t));
          gemm(GemmOp::kNT, dh, t, t, heads);
          gemm(GemmOp::kNN, dh, t, t, heads);
          gemm(GemmOp::kNT, 3 * d, d, t, double(n));
          if (l.spec.bias)
            mem(MemKernel::kBiasGrad, 3 * double(d) * double(t), double(n));
          break;
        }
        default:
          break;
      }
      break;
  }
  return calls;
}

std::vector<KernelCall> lowerCuda(const Network& net, int index, Phase phase, double examples,
                                  int outputs, MemKernel update) {
  STRATA_ENFORCE(index >= 0 && index < static_cast<int>(net.layers.size()));
  const Layer& l = net.layers[static_cast<size_t>(index)];
  std::vector<KernelCall> calls;
  if (l.kind == LayerKind::kConv && phase != Phase::kUpdate) {
    // One cuDNN call per pass over the whole batch and every group, and the
    // bias kernels of kernels/ (one launch each).
    const int64_t n = std::max<int64_t>(1, std::llround(examples));
    const int64_t area = int64_t{l.outShape.h} * l.outShape.w;
    const int groups = std::max(1, l.spec.groups);
    KernelCall c;
    c.conv = true;
    c.m = n * area;
    c.n = l.spec.filters / groups;
    c.k = int64_t{l.inShape.c / groups} * l.spec.kernelH * l.spec.kernelW;
    c.count = groups;
    auto bias = [&](MemKernel kernel) {
      KernelCall b;
      b.kernel = kernel;
      b.units = double(n) * double(l.spec.filters) * double(area);
      calls.push_back(b);
    };
    if (phase == Phase::kFwd) {
      // The first reader of a value several layers read clears its gradient.
      for (const auto& z : lowerCpu(net, index, phase, examples, outputs))
        if (!z.gemm && z.kernel == MemKernel::kZero)
          calls.push_back(z);
      c.pass = ConvPass::kFwd;
      calls.push_back(c);
      if (l.spec.bias)
        bias(MemKernel::kBias);
    } else if (phase == Phase::kBwdData) {
      c.pass = ConvPass::kBwdData;  // cuDNN applies beta: no zero fill
      calls.push_back(c);
    } else {
      c.pass = ConvPass::kBwdFilter;
      calls.push_back(c);
      if (l.spec.bias)
        bias(MemKernel::kBiasGrad);
    }
    return calls;
  }
  // Everything else calls what the CPU calls, but each kernel covers the
  // whole batch in one launch, and applies beta itself: the zero fills before
  // overwriting gradients go, except the Model's own clearing of a summed
  // gradient in forward.
  for (KernelCall c : lowerCpu(net, index, phase, examples, outputs, update)) {
    if (!c.gemm) {
      if (c.kernel == MemKernel::kZero && phase != Phase::kFwd)
        continue;
      c.units *= c.count;
      c.count = 1;
    }
    calls.push_back(c);
  }
  return calls;
}

std::vector<KernelCall> lower(std::string_view backend, const Network& network, int index,
                              Phase phase, double examples, int outputs, MemKernel update) {
  if (backend == "cuda")
    return lowerCuda(network, index, phase, examples, outputs, update);
  return lowerCpu(network, index, phase, examples, outputs, update);
}

}  // namespace strata

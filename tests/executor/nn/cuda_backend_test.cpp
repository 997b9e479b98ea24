// CudaBackend against CpuBackend: every Backend operation on the same inputs
// must give the same result within 1e-4 of the result's largest magnitude
// (TF32 off: both compute in FP32 and differ only in the order of sums).
// Destinations of beta-0 calls start as NaN on both sides (beta 0 must not
// read them), weight gradients start non-zero (they accumulate).
//
// Without a usable CUDA device (no driver, no GPU) the program prints why and
// exits 77, which CTest counts as skipped. Listing the tests (CTest's
// discovery at build time) works without a device.
#define CATCH_CONFIG_RUNNER
#include "strata/exec/nn/cuda_backend.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "bf16_reference.h"
#include "helpers.h"
#include "strata/exec/nn/cpu_backend.h"
#include "strata/exec/nn/dataset.h"
#include "strata/exec/nn/memory.h"
#include "strata/exec/nn/model.h"
#include "strata/kernels/precision.h"
#include "strata/model/error.h"

namespace strata::nn {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// One backend per configuration for the whole program (creating the cuBLAS
// and cuDNN handles costs a good part of a second), released by main before
// it returns: CUDA objects must not outlive the CUDA runtime's own teardown.
std::unique_ptr<CudaBackend> sharedDefault, sharedHeuristic, sharedBf16;

CudaBackend& defaultGpu() {
  if (!sharedDefault)
    sharedDefault = std::make_unique<CudaBackend>();
  return *sharedDefault;
}

// Convolution algorithms from cuDNN's heuristics instead of timing.
CudaBackend& heuristicGpu() {
  if (!sharedHeuristic)
    sharedHeuristic =
        std::make_unique<CudaBackend>(CudaBackendOptions{.benchmarkConvolutions = false});
  return *sharedHeuristic;
}

// GEMMs and convolutions in bf16 with fp32 accumulation (--element bf16).
CudaBackend& bf16Gpu() {
  if (!sharedBf16)
    sharedBf16 = std::make_unique<CudaBackend>(CudaBackendOptions{.element = ElementType::kBf16});
  return *sharedBf16;
}

// The same array for both backends: a host vector for the CPU and a buffer
// in the GPU's device memory (defaultGpu()'s, read by the other backends
// too), filled alike (uploads: the host never touches device memory).
template <class T>
struct Twin {
  std::vector<T> cpu;
  Buffer<T> gpu;

  explicit Twin(size_t count) : cpu(count), gpu(defaultGpu().memory(), count) {}
  void fill(T value) {
    std::fill(cpu.begin(), cpu.end(), value);
    copyToGpu();
  }
  // The upload is ordered on defaultGpu()'s stream only; heuristicGpu() and
  // bf16Gpu() compute on streams of their own, so it is waited for here (on
  // an H100 their kernels read half-uploaded operands: 2026-11-27).
  void copyToGpu() {
    test::deviceCopy(gpu.memory(), gpu.data(), std::span<const T>(cpu));
    defaultGpu().synchronize();
  }
  // The GPU's values on the host (waits for the kernels before).
  std::vector<T> fromGpu() const { return gpu.toHost(); }
};

using TwinArray = Twin<float>;

TwinArray randomArray(size_t count, uint32_t seed, float lo = -1, float hi = 1) {
  TwinArray a(count);
  test::fillUniform(a.cpu, seed, lo, hi);
  a.copyToGpu();
  return a;
}

// An NCHW tensor on both sides.
struct TwinTensor : TwinArray {
  Dims dims;
  explicit TwinTensor(Dims d) : TwinArray(static_cast<size_t>(d.elements())), dims(d) {}
  TensorView onCpu() { return {cpu.data(), dims}; }
  TensorView onGpu() { return {gpu.data(), dims}; }
};

TwinTensor randomTensor(Dims dims, uint32_t seed, float lo = -1, float hi = 1) {
  TwinTensor t(dims);
  test::fillUniform(t.cpu, seed, lo, hi);
  t.copyToGpu();
  return t;
}

TwinTensor nanTensor(Dims dims) {
  TwinTensor t(dims);
  t.fill(kNaN);
  return t;
}

// Requires every element of the GPU's result to be within rel x (largest
// |CPU value|) of the CPU's (a NaN never is). `gpu` must have been read after
// `backend` finished its kernels (the twin overload below waits first).
void requireClose(CudaBackend& backend, std::span<const float> cpu, std::span<const float> gpu,
                  double rel = 1e-4) {
  backend.synchronize();
  REQUIRE(cpu.size() == gpu.size());
  const double tolerance = rel * std::max(test::maxAbs(cpu), 1e-30);
  size_t worst = 0;
  double worstDiff = 0;
  for (size_t i = 0; i < cpu.size(); ++i) {
    const double diff = std::abs(double(cpu[i]) - double(gpu[i]));
    if (!(diff <= worstDiff)) {  // also catches NaN
      worst = i;
      worstDiff = std::isnan(diff) ? std::numeric_limits<double>::infinity() : diff;
    }
  }
  INFO("element " << worst << " of " << cpu.size() << ": cpu " << cpu[worst] << ", gpu "
                  << gpu[worst] << ", tolerance " << tolerance);
  REQUIRE(worstDiff <= tolerance);
}

// As above for a twin, whose GPU values it reads once `backend` is done: the
// twin's memory is defaultGpu()'s, whose stream does not wait for another
// backend's kernels (read first, heuristicGpu()'s and bf16Gpu()'s results
// were stale on an H100: 2026-11-27). On a mismatch it waits for the whole
// device, reads again and says whether the values changed (a kernel outside
// the backend's stream order would show as a change).
void requireClose(CudaBackend& backend, const TwinArray& a, double rel = 1e-4) {
  backend.synchronize();
  const std::vector<float> gpu = a.fromGpu();
  const double tolerance = rel * std::max(test::maxAbs(a.cpu), 1e-30);
  bool close = true;
  for (size_t i = 0; i < gpu.size() && close; ++i)
    close = std::abs(double(a.cpu[i]) - double(gpu[i])) <= tolerance;
  if (!close) {
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    const std::vector<float> again = a.fromGpu();
    size_t changed = 0;
    for (size_t i = 0; i < gpu.size(); ++i)
      changed += std::memcmp(&gpu[i], &again[i], sizeof(float)) != 0 ? 1 : 0;
    bool closeAgain = true;
    for (size_t i = 0; i < again.size() && closeAgain; ++i)
      closeAgain = std::abs(double(a.cpu[i]) - double(again[i])) <= tolerance;
    INFO("after cudaDeviceSynchronize " << changed << " of " << gpu.size()
                                        << " elements read differently, and they are "
                                        << (closeAgain ? "close" : "still not close"));
    requireClose(backend, a.cpu, gpu, rel);
  }
  requireClose(backend, a.cpu, gpu, rel);
}

// ---- convolution ----------------------------------------------------------------------

ConvDesc convDesc(int inC, int inH, int inW, int filters, int kh, int kw, int stride, int pad,
                  int groups) {
  ConvDesc d{inC, inH, inW, filters, kh, kw, stride, pad, groups, 0, 0};
  d.outH = (inH + 2 * pad - kh) / stride + 1;
  d.outW = (inW + 2 * pad - kw) / stride + 1;
  return d;
}

// Forward (with and without bias, on the batch and on a sub-batch), backward
// data with beta 0 and 1, backward weights accumulating.
void compareConv(CudaBackend& g, const ConvDesc& d, int n) {
  CAPTURE(d.inC, d.inH, d.inW, d.filters, d.kernelH, d.kernelW, d.stride, d.pad, d.groups, n);
  CpuBackend cpu;
  const Dims xDims{n, d.inC, d.inH, d.inW}, yDims{n, d.filters, d.outH, d.outW};
  const auto weights = static_cast<size_t>(d.filters) * (d.inC / d.groups) * d.kernelH * d.kernelW;
  TwinTensor x = randomTensor(xDims, 1);
  TwinArray w = randomArray(weights, 2);
  TwinArray bias = randomArray(static_cast<size_t>(d.filters), 3);
  TwinTensor dy = randomTensor(yDims, 4);

  TwinTensor y = nanTensor(yDims);
  cpu.convForward(d, x.onCpu(), w.cpu.data(), bias.cpu.data(), y.onCpu());
  g.convForward(d, x.onGpu(), w.gpu.data(), bias.gpu.data(), y.onGpu());
  {
    INFO("forward with bias");
    requireClose(g, y);
  }
  // No bias; then the last n-1 examples alone (another batch, another plan).
  cpu.convForward(d, x.onCpu(), w.cpu.data(), nullptr, y.onCpu());
  g.convForward(d, x.onGpu(), w.gpu.data(), nullptr, y.onGpu());
  {
    INFO("forward without bias");
    requireClose(g, y);
  }
  if (n > 1) {
    const ExampleRange tail{1, n};
    cpu.convForward(d, x.onCpu().examples(tail), w.cpu.data(), bias.cpu.data(),
                    y.onCpu().examples(tail));
    g.convForward(d, x.onGpu().examples(tail), w.gpu.data(), bias.gpu.data(),
                  y.onGpu().examples(tail));
    INFO("forward of examples 1..n with bias");
    requireClose(g, y);
  }

  TwinTensor dx = nanTensor(xDims);
  cpu.convBackwardData(d, dy.onCpu(), w.cpu.data(), dx.onCpu(), 0.0f);
  g.convBackwardData(d, dy.onGpu(), w.gpu.data(), dx.onGpu(), 0.0f);
  {
    INFO("backward data, beta 0");
    requireClose(g, dx);
  }
  cpu.convBackwardData(d, dy.onCpu(), w.cpu.data(), dx.onCpu(), 1.0f);
  g.convBackwardData(d, dy.onGpu(), w.gpu.data(), dx.onGpu(), 1.0f);
  {
    INFO("backward data, beta 1");
    requireClose(g, dx);
  }

  TwinArray dw = randomArray(weights, 5);
  TwinArray db = randomArray(static_cast<size_t>(d.filters), 6);
  cpu.convBackwardWeights(d, x.onCpu(), dy.onCpu(), dw.cpu.data(), db.cpu.data());
  g.convBackwardWeights(d, x.onGpu(), dy.onGpu(), dw.gpu.data(), db.gpu.data());
  requireClose(g, dw);
  requireClose(g, db);
  cpu.convBackwardWeights(d, x.onCpu(), dy.onCpu(), dw.cpu.data(), nullptr);
  g.convBackwardWeights(d, x.onGpu(), dy.onGpu(), dw.gpu.data(), nullptr);
  requireClose(g, dw);
}

const ConvDesc kConvCases[] = {
    convDesc(3, 9, 8, 5, 3, 3, 1, 1, 1),       // "same" 3x3
    convDesc(3, 11, 11, 4, 5, 3, 2, 2, 1),     // rectangular kernel, stride 2
    convDesc(4, 7, 6, 6, 3, 2, 3, 0, 2),       // groups 2, stride 3, no pad
    convDesc(8, 5, 5, 16, 1, 1, 1, 0, 1),      // 1x1
    convDesc(6, 5, 5, 6, 1, 1, 1, 0, 3),       // 1x1 grouped
    convDesc(3, 35, 35, 16, 11, 11, 4, 2, 1),  // conv1 of AlexNet, scaled down
    convDesc(4, 6, 6, 4, 3, 3, 1, 1, 4),       // depthwise
    convDesc(16, 13, 13, 24, 3, 3, 1, 1, 2),   // conv4 of AlexNet's two towers, scaled down
};

TEST_CASE("conv on cuDNN (algorithms timed) equals the CPU's", "[conv]") {
  for (const ConvDesc& d : kConvCases)
    compareConv(defaultGpu(), d, 3);
}

TEST_CASE("conv on cuDNN (heuristic algorithms) equals the CPU's", "[conv]") {
  for (const ConvDesc& d : kConvCases)
    compareConv(heuristicGpu(), d, 3);
}

// A column pad of its own (padW) and dilation, as cudnnSetConvolution2dDescriptor
// takes them; outH and outW from a dilated kernel's span.
ConvDesc convDesc(int inC, int inH, int inW, int filters, int kh, int kw, int stride, int pad,
                  int padW, int dilation, int groups) {
  ConvDesc d{inC, inH, inW, filters, kh, kw, stride, pad, groups, 0, 0};
  d.padW = padW;
  d.dilation = dilation;
  d.outH = (inH + 2 * pad - (dilation * (kh - 1) + 1)) / stride + 1;
  d.outW = (inW + 2 * padW - (dilation * (kw - 1) + 1)) / stride + 1;
  return d;
}

TEST_CASE("conv with a column pad and dilation on cuDNN equals the CPU's", "[conv][vision]") {
  for (const ConvDesc& d : {
           convDesc(3, 6, 9, 4, 1, 7, 1, 0, 3, 1, 1),   // Inception-v3's 1x7, pad 0 x 3
           convDesc(3, 9, 6, 4, 7, 1, 1, 3, 0, 1, 1),   // and its 7x1
           convDesc(3, 9, 8, 5, 3, 3, 1, 2, 2, 2, 1),   // dilation 2, "same"
           convDesc(4, 11, 9, 6, 3, 3, 2, 1, 3, 3, 2),  // dilation 3, stride 2, groups 2
           convDesc(4, 5, 5, 4, 1, 1, 1, 0, 1, 1, 1),   // 1x1 with a column pad
       })
    compareConv(defaultGpu(), d, 3);
}

TEST_CASE("a conv shape seen again reuses its plan and gives the same result", "[conv]") {
  const ConvDesc d = kConvCases[0];
  compareConv(defaultGpu(), d, 4);
  compareConv(defaultGpu(), d, 4);
  compareConv(defaultGpu(), d, 1);
}

// ---- pooling ----------------------------------------------------------------------------

PoolDesc poolDesc(PoolMode mode, int c, int inH, int inW, int kernel, int stride, int pad) {
  PoolDesc d{mode, c, inH, inW, kernel, kernel, stride, pad, 0, 0};
  d.outH = (inH + 2 * pad - kernel) / stride + 1;
  d.outW = (inW + 2 * pad - kernel) / stride + 1;
  return d;
}

// PyTorch's ceil_mode: the output rounded up, a last window that starts
// beyond the input and its left padding dropped; the kernels clamp the
// windows that hang over the input's bottom and right edges.
PoolDesc ceilPool(PoolMode mode, int c, int inH, int inW, int kernel, int stride, int pad) {
  PoolDesc d{mode, c, inH, inW, kernel, kernel, stride, pad, 0, 0};
  const auto size = [&](int in) {
    int out = (in + 2 * pad - kernel + stride - 1) / stride + 1;
    if ((out - 1) * stride >= in + pad)
      --out;
    return out;
  };
  d.outH = size(inH);
  d.outW = size(inW);
  return d;
}

TEST_CASE("pooling equals the CPU's, argmax and ties included", "[pool]") {
  CpuBackend cpu;
  CudaBackend& g = defaultGpu();
  for (const PoolMode mode : {PoolMode::kMax, PoolMode::kAvg}) {
    for (const PoolDesc& d : {poolDesc(mode, 3, 13, 13, 3, 2, 0),   // AlexNet's overlapping
                              poolDesc(mode, 2, 8, 6, 2, 2, 0),     // tiling
                              poolDesc(mode, 2, 7, 7, 3, 1, 1),     // padded, stride 1
                              poolDesc(mode, 1, 5, 4, 2, 1, 2),     // windows wholly in padding
                              ceilPool(mode, 2, 6, 8, 3, 2, 0),     // ceil_mode: last windows cut
                              ceilPool(mode, 2, 5, 5, 2, 2, 1)}) {  // ceil_mode, padded
      CAPTURE(static_cast<int>(mode), d.c, d.inH, d.inW, d.kernelH, d.stride, d.pad);
      const int n = 3;
      const Dims xDims{n, d.c, d.inH, d.inW}, yDims{n, d.c, d.outH, d.outW};
      // Values on a coarse grid, so that windows hold ties.
      TwinTensor x = randomTensor(xDims, 11);
      for (float& v : x.cpu)
        v = std::round(v * 2) / 2;
      x.copyToGpu();
      const bool isMax = mode == PoolMode::kMax;
      Twin<int32_t> argmax(static_cast<size_t>(yDims.elements()));
      argmax.fill(-7);
      TwinTensor y = nanTensor(yDims);
      cpu.poolForward(d, x.onCpu(), y.onCpu(), isMax ? argmax.cpu.data() : nullptr);
      g.poolForward(d, x.onGpu(), y.onGpu(), isMax ? argmax.gpu.data() : nullptr);
      requireClose(g, y);
      if (isMax)
        REQUIRE(argmax.fromGpu() == argmax.cpu);

      TwinTensor dy = randomTensor(yDims, 12);
      TwinTensor dx = nanTensor(xDims);
      for (const float beta : {0.0f, 1.0f}) {
        cpu.poolBackward(d, dy.onCpu(), isMax ? argmax.cpu.data() : nullptr, dx.onCpu(), beta);
        g.poolBackward(d, dy.onGpu(), isMax ? argmax.gpu.data() : nullptr, dx.onGpu(), beta);
        requireClose(g, dx);
      }
    }
  }
}

// ---- fully connected -----------------------------------------------------------------------

struct FcCase {
  bool flatten;
  Dims x;  // the input; per position: c = inFeatures
  int outputs;
};

// Forward, backward data (beta 0 and 1) and backward weights of the whole
// layer, then of model-parallel slices of its rows: slice outputs are the
// whole layer's channels, partial input gradients sum to the whole layer's,
// slice weight gradients are its rows.
void compareFc(const FcCase& fc) {
  CAPTURE(fc.flatten, fc.x.n, fc.x.c, fc.x.h, fc.x.w, fc.outputs);
  CpuBackend cpu;
  CudaBackend& g = defaultGpu();
  const int inFeatures = fc.flatten ? static_cast<int>(fc.x.perExample()) : fc.x.c;
  const FcDesc d{fc.flatten, inFeatures, fc.outputs};
  const Dims yDims =
      fc.flatten ? Dims{fc.x.n, fc.outputs, 1, 1} : Dims{fc.x.n, fc.outputs, fc.x.h, fc.x.w};
  const auto weights = static_cast<size_t>(fc.outputs) * inFeatures;
  TwinTensor x = randomTensor(fc.x, 21);
  TwinArray w = randomArray(weights, 22);
  TwinArray bias = randomArray(static_cast<size_t>(fc.outputs), 23);
  TwinTensor dy = randomTensor(yDims, 24);

  TwinTensor y = nanTensor(yDims);
  cpu.fcForward(d, x.onCpu(), w.cpu.data(), bias.cpu.data(), y.onCpu());
  g.fcForward(d, x.onGpu(), w.gpu.data(), bias.gpu.data(), y.onGpu());
  requireClose(g, y);

  TwinTensor dx = nanTensor(fc.x);
  for (const float beta : {0.0f, 1.0f}) {
    cpu.fcBackwardData(d, dy.onCpu(), w.cpu.data(), dx.onCpu(), beta);
    g.fcBackwardData(d, dy.onGpu(), w.gpu.data(), dx.onGpu(), beta);
    requireClose(g, dx);
  }

  TwinArray dw = randomArray(weights, 25);
  TwinArray db = randomArray(static_cast<size_t>(fc.outputs), 26);
  cpu.fcBackwardWeights(d, x.onCpu(), dy.onCpu(), dw.cpu.data(), db.cpu.data());
  g.fcBackwardWeights(d, x.onGpu(), dy.onGpu(), dw.gpu.data(), db.gpu.data());
  requireClose(g, dw);
  requireClose(g, db);

  // Model-parallel: rows [r0, r1) of the layer on the GPU, the whole layer on
  // the CPU (y, dx and dwWhole above hold the whole layer's results).
  const std::vector<int> bounds = {0, fc.outputs / 3, fc.outputs / 3 + (fc.outputs + 1) / 2,
                                   fc.outputs};
  TwinArray dwWhole = randomArray(weights, 27);
  cpu.fcBackwardWeights(d, x.onCpu(), dy.onCpu(), dwWhole.cpu.data(), nullptr);
  TwinTensor dxSum = nanTensor(fc.x);
  for (size_t s = 0; s + 1 < bounds.size(); ++s) {
    const int r0 = bounds[s], rows = bounds[s + 1] - bounds[s];
    CAPTURE(r0, rows);
    const FcDesc slice{fc.flatten, inFeatures, rows};
    const Dims sliceDims{yDims.n, rows, yDims.h, yDims.w};
    const float* wSlice = w.gpu.data() + static_cast<size_t>(r0) * inFeatures;
    TwinTensor ySlice = nanTensor(sliceDims);
    g.fcForward(slice, x.onGpu(), wSlice, bias.gpu.data() + r0, ySlice.onGpu());
    copyFromChannels(y.onCpu(), r0, ySlice.onCpu());
    requireClose(g, ySlice);

    TwinTensor dySlice(sliceDims);
    copyFromChannels(dy.onCpu(), r0, dySlice.onCpu());
    dySlice.copyToGpu();
    g.fcBackwardData(slice, dySlice.onGpu(), wSlice, dxSum.onGpu(), s == 0 ? 0.0f : 1.0f);

    TwinArray dwSlice(static_cast<size_t>(rows) * inFeatures);
    const size_t first = static_cast<size_t>(r0) * inFeatures;
    g.memory().copy(dwSlice.gpu.data(), dwWhole.gpu.data() + first,
                    dwSlice.cpu.size() * sizeof(float));
    g.fcBackwardWeights(slice, x.onGpu(), dySlice.onGpu(), dwSlice.gpu.data(), nullptr);
    std::copy_n(dwWhole.cpu.begin() + static_cast<std::ptrdiff_t>(first), dwSlice.cpu.size(),
                dwSlice.cpu.begin());
    requireClose(g, dwSlice);
  }
  // The slices' partial input gradients (the first overwriting, the rest
  // adding) sum to the whole layer's.
  cpu.fcBackwardData(d, dy.onCpu(), w.cpu.data(), dxSum.onCpu(), 0.0f);
  requireClose(g, dxSum);
}

TEST_CASE("fc on cuBLAS equals the CPU's: flatten, per position, model-parallel slices", "[fc]") {
  compareFc({true, Dims{5, 4, 3, 2}, 7});      // flatten 24 -> 7
  compareFc({true, Dims{9, 64, 1, 1}, 33});    // a classifier layer
  compareFc({false, Dims{5, 6, 3, 4}, 7});     // 12 positions, 6 -> 7 each
  compareFc({false, Dims{4, 6, 1, 1}, 5});     // one position: the flatten path
  compareFc({false, Dims{3, 10, 1, 80}, 12});  // lm-300m's fc8, scaled down
}

// ---- elementwise, lrn, batchnorm
// -----------------------------------------------------------------

TEST_CASE("relu, dropout, fill, add and accumulate equal the CPU's", "[elementwise]") {
  CpuBackend cpu;
  CudaBackend& g = defaultGpu();
  const Dims dims{3, 5, 4, 6};
  TwinTensor x = randomTensor(dims, 31), dy = randomTensor(dims, 32);

  TwinTensor y = nanTensor(dims);
  cpu.reluForward(x.onCpu(), y.onCpu());
  g.reluForward(x.onGpu(), y.onGpu());
  requireClose(g, y);
  TwinTensor dx = nanTensor(dims);
  for (const float beta : {0.0f, 1.0f}) {
    cpu.reluBackward(y.onCpu(), dy.onCpu(), dx.onCpu(), beta);
    g.reluBackward(y.onGpu(), dy.onGpu(), dx.onGpu(), beta);
    requireClose(g, dx);
  }

  // A model-parallel slice: channels 2..6 of a 12-channel layer, examples
  // from row 4 of the layer's batch.
  DropoutDesc drop;
  drop.rate = 0.4f;
  drop.seed = 17;
  drop.step = 3;
  drop.layer = 5;
  drop.firstRow = 4;
  drop.channelOffset = 2;
  drop.totalChannels = 12;
  cpu.dropoutForward(drop, x.onCpu(), y.onCpu());
  g.dropoutForward(drop, x.onGpu(), y.onGpu());
  requireClose(g, y);
  dx.fill(kNaN);
  for (const float beta : {0.0f, 1.0f}) {
    cpu.dropoutBackward(drop, dy.onCpu(), dx.onCpu(), beta);
    g.dropoutBackward(drop, dy.onGpu(), dx.onGpu(), beta);
    requireClose(g, dx);
  }

  y.fill(kNaN);
  cpu.fill(y.cpu, 0.75f);
  g.fill(y.gpu, 0.75f);
  requireClose(g, y);
  y.fill(kNaN);
  cpu.add(x.onCpu(), dy.onCpu(), y.onCpu());
  g.add(x.onGpu(), dy.onGpu(), y.onGpu());
  requireClose(g, y);
  dx.fill(kNaN);
  for (const float beta : {0.0f, 1.0f, 0.5f}) {
    cpu.accumulate(x.onCpu(), dx.onCpu(), beta);
    g.accumulate(x.onGpu(), dx.onGpu(), beta);
    requireClose(g, dx);
  }
}

TEST_CASE("lrn equals the CPU's, odd and even sizes", "[lrn]") {
  CpuBackend cpu;
  CudaBackend& g = defaultGpu();
  const Dims dims{2, 9, 5, 4};
  TwinTensor x = randomTensor(dims, 41, -3, 3), dy = randomTensor(dims, 42);
  for (const int size : {5, 4, 1}) {
    CAPTURE(size);
    const LrnDesc d{size, 2.0f, 1e-2f, 0.75f};  // alpha large enough to matter
    TwinTensor y = nanTensor(dims), scale = nanTensor(dims);
    cpu.lrnForward(d, x.onCpu(), y.onCpu(), scale.onCpu());
    g.lrnForward(d, x.onGpu(), y.onGpu(), scale.onGpu());
    requireClose(g, y);
    requireClose(g, scale);
    TwinTensor dx = nanTensor(dims);
    for (const float beta : {0.0f, 1.0f}) {
      cpu.lrnBackward(d, x.onCpu(), y.onCpu(), scale.onCpu(), dy.onCpu(), dx.onCpu(), beta);
      g.lrnBackward(d, x.onGpu(), y.onGpu(), scale.onGpu(), dy.onGpu(), dx.onGpu(), beta);
      requireClose(g, dx);
    }
  }
}

TEST_CASE("batchnorm equals the CPU's", "[batchnorm]") {
  CpuBackend cpu;
  CudaBackend& g = defaultGpu();
  const Dims dims{4, 3, 7, 5};
  TwinTensor x = randomTensor(dims, 51, 2, 5);  // a mean far from 0
  TwinTensor dy = randomTensor(dims, 52);
  TwinArray gamma = randomArray(3, 53, 0.5f, 2), shift = randomArray(3, 54);
  const float eps = 1e-5f;
  TwinTensor y = nanTensor(dims);
  cpu.batchNormForward(x.onCpu(), gamma.cpu.data(), shift.cpu.data(), eps, y.onCpu());
  g.batchNormForward(x.onGpu(), gamma.gpu.data(), shift.gpu.data(), eps, y.onGpu());
  requireClose(g, y);
  TwinTensor dx = nanTensor(dims);
  for (const float beta : {0.0f, 1.0f}) {
    cpu.batchNormBackwardData(x.onCpu(), dy.onCpu(), gamma.cpu.data(), eps, dx.onCpu(), beta);
    g.batchNormBackwardData(x.onGpu(), dy.onGpu(), gamma.gpu.data(), eps, dx.onGpu(), beta);
    requireClose(g, dx);
  }
  TwinArray dgamma = randomArray(3, 55), dshift = randomArray(3, 56);
  cpu.batchNormBackwardWeights(x.onCpu(), dy.onCpu(), eps, dgamma.cpu.data(), dshift.cpu.data());
  g.batchNormBackwardWeights(x.onGpu(), dy.onGpu(), eps, dgamma.gpu.data(), dshift.gpu.data());
  requireClose(g, dgamma);
  requireClose(g, dshift);
}

// ---- softmax ------------------------------------------------------------------------------------

TEST_CASE("softmax statistics, probabilities, loss and gradient equal the CPU's", "[softmax]") {
  CpuBackend cpu;
  CudaBackend& g = defaultGpu();
  const int classes = 10;
  const Dims whole{4, classes, 2, 3};  // 6 positions per example
  const auto positions = static_cast<size_t>(whole.n) * whole.h * whole.w;
  TwinTensor logits = randomTensor(whole, 61, -4, 4);
  Twin<int32_t> labels(positions);
  for (size_t q = 0; q < positions; ++q)
    labels.cpu[q] = static_cast<int32_t>((q * 7 + 3) % classes);
  labels.copyToGpu();

  // The whole layer, then a model-parallel slice of classes [3, 8).
  for (const int offset : {0, 3}) {
    const int held = offset == 0 ? classes : 5;
    CAPTURE(offset, held);
    const Dims dims{whole.n, held, whole.h, whole.w};
    TwinTensor z(dims);
    copyFromChannels(logits.onCpu(), offset, z.onCpu());
    z.copyToGpu();

    TwinArray stats(2 * positions);
    stats.fill(kNaN);
    cpu.softmaxStats(z.onCpu(), stats.cpu.data());
    g.softmaxStats(z.onGpu(), stats.gpu.data());
    requireClose(g, stats);

    TwinTensor p = nanTensor(dims);
    cpu.softmaxProbabilities(z.onCpu(), stats.cpu.data(), p.onCpu());
    g.softmaxProbabilities(z.onGpu(), stats.gpu.data(), p.onGpu());
    requireClose(g, p);

    const SoftmaxLossSum lossCpu =
        cpu.softmaxLoss(z.onCpu(), stats.cpu.data(), labels.cpu.data(), offset);
    const SoftmaxLossSum lossGpu =
        g.softmaxLoss(z.onGpu(), stats.gpu.data(), labels.gpu.data(), offset);
    CHECK(lossGpu.loss == Approx(lossCpu.loss).epsilon(1e-5));
    CHECK(lossGpu.correct == lossCpu.correct);

    TwinTensor dz = nanTensor(dims);
    for (const float beta : {0.0f, 1.0f}) {
      cpu.softmaxBackward(z.onCpu(), stats.cpu.data(), labels.cpu.data(), offset, 0.25f, dz.onCpu(),
                          beta);
      g.softmaxBackward(z.onGpu(), stats.gpu.data(), labels.gpu.data(), offset, 0.25f, dz.onGpu(),
                        beta);
      requireClose(g, dz);
    }
  }
}

// ---- optimiser
// ------------------------------------------------------------------------------------

TEST_CASE("sgd with momentum equals the CPU's", "[update]") {
  CpuBackend cpu;
  CudaBackend& g = defaultGpu();
  const size_t count = 1000;
  TwinArray w = randomArray(count, 71), v = randomArray(count, 72), grad = randomArray(count, 73);
  for (int step = 0; step < 2; ++step) {
    cpu.sgdMomentum(w.cpu, v.cpu, grad.cpu, 0.01f, 0.9f, 5e-4f);
    g.sgdMomentum(w.gpu, v.gpu, grad.gpu, 0.01f, 0.9f, 5e-4f);
  }
  requireClose(g, w);
  requireClose(g, v);
}

TEST_CASE("adam and adamw equal the CPU's", "[update]") {
  // One element function on both (kernels/elementwise.h), the bias
  // corrections taken on the host: the same bits (held here to 1e-6).
  CpuBackend cpu;
  CudaBackend& g = defaultGpu();
  for (bool decoupled : {false, true}) {
    INFO((decoupled ? "adamw" : "adam"));
    const size_t count = 4099;  // not a multiple of a block
    TwinArray w = randomArray(count, 81), m = randomArray(count, 82, -0.1f, 0.1f),
              v = randomArray(count, 83, 0.0f, 0.2f), grad = randomArray(count, 84);
    AdamParams p;
    p.weightDecay = decoupled ? kAdamWWeightDecay : 1e-4f;
    p.decoupled = decoupled;
    for (int64_t step = 1; step <= 3; ++step) {
      p.step = step;
      cpu.adam(w.cpu, m.cpu, v.cpu, grad.cpu, p);
      g.adam(w.gpu, m.gpu, v.gpu, grad.gpu, p);
    }
    requireClose(g, w, 1e-6);
    requireClose(g, m, 1e-6);
    requireClose(g, v, 1e-6);
  }
}

// ---- whole models -------------------------------------------------------------------------------

// Requires every layer's block of `gpu` within 1e-4 of the block's largest
// |value| in `cpu` (blocks are per layer: gradients of different layers
// differ in scale by orders of magnitude).
void requireSameBlocks(Model& model, std::span<const float> cpu, std::span<const float> gpu) {
  REQUIRE(cpu.size() == gpu.size());
  for (int l = 0; l < model.layerCount(); ++l) {
    const ParamBlock b = model.paramBlock(l);
    if (b.size() == 0)
      continue;
    INFO("layer " << model.network().layers[static_cast<size_t>(l)].name);
    requireClose(defaultGpu(),
                 cpu.subspan(static_cast<size_t>(b.offset), static_cast<size_t>(b.size())),
                 gpu.subspan(static_cast<size_t>(b.offset), static_cast<size_t>(b.size())));
  }
}

// Writes examples [first, first + batch) of `data` into the model's input:
// made on the host, then uploaded (the input may be device memory).
void fillInput(Model& m, const SyntheticDataset& data, int64_t first, int batch,
               std::span<int32_t> labels, int positions = 1) {
  Tensor examples(m.input(batch).dims());
  data.fill(first, examples.view(), labels, positions);
  m.input(batch).upload(examples.span());
}

std::vector<float> copyOf(std::span<const float> s) {
  return {s.begin(), s.end()};
}

// Trains `preset` on both backends from the same weights for `steps` steps
// (dropout on: its masks are a function of coordinates, the same on both):
// every layer's output, the loss, the gradients and the updated weights
// agree within rounding.
void trainAlike(const std::string& preset, uint64_t seed, int batch, int steps, float lr,
                float weightDecay) {
  const Network net = test::presetNetwork(preset);
  CpuBackend cpuBackend;
  Model cpu(net, ModelOptions{.backend = &cpuBackend});
  Model gpu(net, ModelOptions{.backend = &defaultGpu()});
  REQUIRE(copyOf(cpu.allParameters()) == gpu.parametersToHost());
  const auto data = SyntheticDataset::forNetwork(net, seed);
  const int positions = net.input.h * net.input.w;
  const bool tokens = net.layers.front().kind == LayerKind::kEmbedding;
  for (int step = 0; step < steps; ++step) {
    CAPTURE(step);
    for (Model* m : {&cpu, &gpu}) {
      std::vector<int32_t> labels(size_t(batch) * (tokens ? positions : 1));
      fillInput(*m, data, int64_t{step} * batch, batch, labels, tokens ? positions : 1);
      m->setLabels(labels);
      m->setStep(static_cast<uint64_t>(step));
      m->zeroGradients();
      m->forwardAll();
      m->backwardAll();
    }
    for (int l = 0; l < cpu.layerCount(); ++l) {
      INFO("output of " << net.layers[static_cast<size_t>(l)].name);
      requireClose(defaultGpu(), cpu.output(l).span(), gpu.output(l).toHost());
    }
    CHECK(gpu.loss() == Approx(cpu.loss()).epsilon(1e-5));
    if (!tokens)  // a classifier's few logits; a language model's near-ties may flip
      CHECK(gpu.correctCount() == cpu.correctCount());
    requireSameBlocks(cpu, copyOf(cpu.allGradients()), gpu.gradientsToHost());
    cpu.updateAll(lr, 0.9f, weightDecay);
    gpu.updateAll(lr, 0.9f, weightDecay);
    requireSameBlocks(cpu, copyOf(cpu.allParameters()), gpu.parametersToHost());
  }
}

TEST_CASE("a Model on CudaBackend computes what it computes on CpuBackend (tiny-cnn)", "[model]") {
  trainAlike("tiny-cnn", 5, 8, 2, 0.01f, 5e-4f);
}

TEST_CASE("a Model updated by Adam on CudaBackend equals the CPU's (tiny-cnn)", "[model][update]") {
  // The same gradients on both (one batch, copied), then two Adam steps per
  // layer: the moments and the step counts live in each Model.
  const Network net = test::presetNetwork("tiny-cnn");
  CpuBackend cpuBackend;
  Model cpu(net, ModelOptions{.backend = &cpuBackend});
  Model gpu(net, ModelOptions{.backend = &defaultGpu()});
  const auto data = SyntheticDataset::forNetwork(net, 5);
  const int batch = 8;
  for (Model* m : {&cpu, &gpu}) {
    std::vector<int32_t> labels(batch);
    fillInput(*m, data, 0, batch, labels);
    m->setLabels(labels);
    m->zeroGradients();
    m->forwardAll();
    m->backwardAll();
  }
  const std::vector<float> grads = copyOf(cpu.allGradients());
  gpu.uploadGradients(0, gpu.layerCount() - 1, grads);
  for (Optimizer o : {Optimizer::kAdam, Optimizer::kAdamW}) {
    UpdateRule rule{o, 1e-3f};
    rule.weightDecay = 0.01f;
    for (int step = 0; step < 2; ++step)
      for (int l = 0; l < cpu.layerCount(); ++l) {
        cpu.update(l, rule);
        gpu.update(l, rule);
      }
    requireSameBlocks(cpu, copyOf(cpu.allParameters()), gpu.parametersToHost());
  }
  CHECK(gpu.updateCount(0) == 4);
}

// Forward only: in backward, max pooling routes a gradient to the first
// largest input of a window, and two inputs equal within rounding may then
// be picked differently by the two backends; a network of this size has
// such near-ties. The forward values do not depend on which one wins.
TEST_CASE("a Model on CudaBackend: alexnet forward (lrn, groups, 11x11) equals the CPU's",
          "[model]") {
  const Network net = test::presetNetwork("alexnet");
  CpuBackend cpuBackend;
  Model cpu(net, ModelOptions{.dropout = false, .backend = &cpuBackend});
  Model gpu(net, ModelOptions{.dropout = false, .backend = &defaultGpu()});
  const auto data = SyntheticDataset::forNetwork(net, 7);
  const int batch = 2;
  for (Model* m : {&cpu, &gpu}) {
    std::vector<int32_t> labels(batch);
    fillInput(*m, data, 0, batch, labels);
    m->setLabels(labels);
    m->forwardAll();
  }
  for (int l = 0; l < cpu.layerCount(); ++l) {
    INFO("output of " << net.layers[static_cast<size_t>(l)].name);
    requireClose(defaultGpu(), cpu.output(l).span(), gpu.output(l).toHost(), 1e-3);
  }
  CHECK(gpu.loss() == Approx(cpu.loss()).epsilon(1e-4));
}

// ---- memory, options, timing -------------------------------------------------------------------

TEST_CASE("copyIntoChannels on the GPU places a slice as the host does", "[data]") {
  CudaBackend& g = defaultGpu();
  // 3 examples, a slice of 2 channels of 5x7 into 6 channels at offset 3.
  const Dims from{3, 2, 5, 7}, into{3, 6, 5, 7};
  Buffer<float> src(g.memory()), dst(g.memory());
  std::vector<float> hostSrc(static_cast<size_t>(from.elements())),
      hostDst(static_cast<size_t>(into.elements()), -1.0f);
  for (size_t i = 0; i < hostSrc.size(); ++i)
    hostSrc[i] = static_cast<float>(i) + 0.5f;
  src.assign(hostSrc);
  dst.assign(hostDst);
  copyIntoChannels(ConstTensorView(hostSrc.data(), from), TensorView{hostDst.data(), into}, 3);
  g.copyIntoChannels(ConstTensorView(src.data(), from), TensorView{dst.data(), into}, 3);
  CHECK(dst.toHost() == hostDst);
  CHECK_THROWS_AS(
      g.copyIntoChannels(ConstTensorView(src.data(), from), TensorView{dst.data(), into}, 5),
      InvariantError);
}

TEST_CASE("a synthetic batch made on the GPU equals the host's", "[data]") {
  CudaBackend& g = defaultGpu();
  // Odd sizes: a grid that does not divide h or w, 3 channels, 5 examples
  // from an index that is not a multiple of the batch; then a second dataset
  // (new means) and a smaller batch into the same buffer.
  for (const auto& [shape, classes, grid, first, n] :
       {std::tuple{Shape{3, 13, 11}, 7, 4, int64_t{37}, 5},
        std::tuple{Shape{1, 1, 1}, 2, 4, int64_t{0}, 3},
        std::tuple{Shape{3, 224, 224}, 1000, 4, int64_t{123456}, 2}}) {
    const SyntheticDataset data(shape, classes, 20261125, SyntheticOptions{0.5f, 1.0f, grid});
    const SyntheticBatch batch = data.batch(first, n);
    const Dims dims{n, shape.c, shape.h, shape.w};
    std::vector<float> host(static_cast<size_t>(dims.elements()));
    syntheticFill(batch, TensorView{host.data(), dims});
    Buffer<float> x(g.memory(), host.size());
    g.writeSynthetic(batch, TensorView{x.data(), dims});
    const std::vector<float> made = x.toHost();
    // The device's double log/cos may differ from glibc's in the last bit.
    for (size_t i = 0; i < host.size(); ++i)
      REQUIRE(std::abs(made[i] - host[i]) <= 1e-6f * (1.0f + std::abs(host[i])));
    // example() is the same function.
    std::vector<float> one(static_cast<size_t>(shape.elements()));
    data.example(first + n - 1, one);
    CHECK(std::equal(one.begin(), one.end(), host.end() - static_cast<int64_t>(one.size())));
  }
}

TEST_CASE("a language model's synthetic token ids made on the GPU equal the host's", "[data]") {
  CudaBackend& g = defaultGpu();
  // Token sequences of 1 x 129 x 1 (positions past a multiple of the warp),
  // 5 examples from index 37; made by a kernel, nothing uploaded: bit for
  // bit the ids the host writes.
  const SyntheticDataset data(Shape{1, 129, 1}, 4096, 20261126,
                              SyntheticOptions{1.0f, 0.5f, 4, 4096});
  const SyntheticBatch batch = data.batch(37, 5);
  REQUIRE(batch.tokens.vocab == 4096);
  REQUIRE(batch.values.empty());
  const Dims dims{5, 1, 129, 1};
  std::vector<float> host(static_cast<size_t>(dims.elements()));
  syntheticFill(batch, TensorView{host.data(), dims});
  Buffer<float> x(g.memory(), host.size());
  g.writeSynthetic(batch, TensorView{x.data(), dims});
  CHECK(x.toHost() == host);
}

TEST_CASE("cuda-managed memory is zero-filled, host-addressable and keeps data when it grows",
          "[memory]") {
  CudaBackend& g = defaultGpu();
  CudaManagedMemory managed(0, g.stream());
  CHECK(managed.hostAccessible());
  Buffer<float> b(managed, 1000);
  CHECK(std::all_of(b.data(), b.data() + b.size(), [](float v) { return v == 0.0f; }));
  for (size_t i = 0; i < b.size(); ++i)
    b[i] = static_cast<float>(i);
  b.resize(5000);  // a new allocation: the first 1000 copied, the rest zero
  for (size_t i = 0; i < b.size(); ++i)
    REQUIRE(b[i] == (i < 1000 ? static_cast<float>(i) : 0.0f));
  // Kernels read and write it: accumulate (beta 1) doubles it.
  g.accumulate(ConstTensorView(b.data(), Dims{1, 1, 1, 5000}),
               TensorView{b.data(), {1, 1, 1, 5000}}, 1.0f);
  g.synchronize();
  CHECK(b[999] == 2.0f * 999);
}

TEST_CASE("the backend's device memory: zero-filled, copies through pinned staging, pooled",
          "[memory]") {
  CudaBackend& g = defaultGpu();
  CHECK(g.name() == "cuda");
  Memory& m = g.memory();
  CHECK(std::string(m.name()) == "cuda-device");
  CHECK_FALSE(m.hostAccessible());
  Buffer<float> b(m, 1000);
  CHECK(b.toHost() == std::vector<float>(1000, 0.0f));
  CHECK_THROWS_AS(b.hostSpan("a test"), InvariantError);
  std::vector<float> values(1000);
  for (size_t i = 0; i < values.size(); ++i)
    values[i] = static_cast<float>(i);
  b.assign(values);
  b.resize(5000);  // a new block: the first 1000 copied on the device, the rest zero
  const std::vector<float> grown = b.toHost();
  for (size_t i = 0; i < grown.size(); ++i)
    REQUIRE(grown[i] == (i < 1000 ? static_cast<float>(i) : 0.0f));
  // Kernels read and write it: accumulate (beta 1) doubles it; the download
  // is ordered after the kernel.
  g.accumulate(ConstTensorView(b.data(), Dims{1, 1, 1, 5000}),
               TensorView{b.data(), {1, 1, 1, 5000}}, 1.0f);
  CHECK(b.toHost()[999] == 2.0f * 999);
  // Longer than the staging: chunked, in order; many uploads back to back
  // (ring regions reused) land where they should.
  const size_t big = CudaDeviceMemory::kStagingBytes / sizeof(float) * 2 + 123;
  std::vector<float> many(big);
  for (size_t i = 0; i < big; ++i)
    many[i] = static_cast<float>(i % 65536);
  Buffer<float> c(m);
  c.assign(many);
  CHECK(c.toHost() == many);
  Buffer<int32_t> small(m, 64);
  for (int round = 0; round < 200; ++round) {
    std::vector<int32_t> v(64, round);
    small.assign(v);
    g.accumulate(ConstTensorView(b.data(), Dims{1, 1, 1, 16}), TensorView{b.data(), {1, 1, 1, 16}},
                 1.0f);
  }
  CHECK(small.toHost() == std::vector<int32_t>(64, 199));
  // Given values go up as they are.
  SyntheticBatch ids;
  ids.values = {3, 1, 4, 1, 5, 9};
  Buffer<float> x(m, 6);
  g.writeSynthetic(ids, TensorView{x.data(), Dims{2, 1, 3, 1}});
  CHECK(x.toHost() == ids.values);
}

TEST_CASE("the free memory a run is sized against is cudaMemGetInfo's", "[memory]") {
  const CudaMemoryInfo info = cudaMemoryInfo(0);
  CHECK(double(info.totalBytes) == Approx(double(cudaDeviceMemoryBytes(0))).epsilon(0.01));
  CHECK(info.freeBytes > 0);
  CHECK(info.freeBytes <= info.totalBytes);
  CHECK_FALSE(info.name.empty());
}

TEST_CASE("TF32 on: conv and fc stay within TF32's precision of the CPU's", "[tf32]") {
  CudaBackend tf32(CudaBackendOptions{.element = ElementType::kTf32});
  CpuBackend cpu;
  const ConvDesc d = convDesc(16, 13, 13, 24, 3, 3, 1, 1, 1);
  const Dims xDims{2, d.inC, d.inH, d.inW}, yDims{2, d.filters, d.outH, d.outW};
  TwinTensor x = randomTensor(xDims, 81);
  TwinArray w = randomArray(static_cast<size_t>(d.filters) * d.inC * 9, 82);
  TwinTensor y = nanTensor(yDims);
  cpu.convForward(d, x.onCpu(), w.cpu.data(), nullptr, y.onCpu());
  tf32.convForward(d, x.onGpu(), w.gpu.data(), nullptr, y.onGpu());
  requireClose(tf32, y, 1e-2);

  const FcDesc fc{true, static_cast<int>(xDims.perExample()), 10};
  TwinArray wf = randomArray(static_cast<size_t>(fc.outputs) * fc.inFeatures, 83);
  TwinTensor yf = nanTensor(Dims{2, fc.outputs, 1, 1});
  cpu.fcForward(fc, x.onCpu(), wf.cpu.data(), nullptr, yf.onCpu());
  tf32.fcForward(fc, x.onGpu(), wf.gpu.data(), nullptr, yf.onGpu());
  requireClose(tf32, yf, 1e-2);
}

// ---- mixed precision: bf16 ------------------------------------------------------------------
//
// The reference of a bf16 GEMM or convolution is the fp32 one of operands
// rounded to bf16 (tests/bf16_reference.h): products of two bf16 values are
// exact in fp32, so CpuBackend on rounded operands computes what cuBLAS and
// cuDNN do with bf16 operands and fp32 accumulation, up to the order of the
// sums. Tolerances, relative to the result's largest |value|:
//  - fc (cuBLAS writes fp32): 1e-3. Only the order of fp32 sums and the
//    tensor cores' fp32 accumulation (which truncates, a few ulps over k
//    terms) separate the two; a result or partial sums rounded to bf16 would
//    be off by up to 2^-9 = 2e-3 of the largest element and fail.
//  - conv (cuDNN's legacy API writes bf16, cast back): 4e-3 = 2^-8, one
//    bf16 rounding of each element (at most 2^-9 of it) plus the sums' order.

// A twin's CPU side rounded through bf16, for CpuBackend (the GPU side keeps
// its fp32 values: the bf16 backend rounds them itself).
std::vector<float> rounded(const TwinArray& a) {
  return strata::test::roundedThroughBf16(a.cpu);
}

TEST_CASE("bf16 fc: cublasGemmEx equals the bf16 reference GEMM", "[bf16][fc]") {
  CudaBackend& g = bf16Gpu();
  const int n = 6, k = 300, o = 37;
  const FcDesc d{true, k, o};
  TwinTensor x = randomTensor(Dims{n, k, 1, 1}, 301);
  TwinArray w = randomArray(static_cast<size_t>(o) * k, 302);
  TwinTensor y = nanTensor(Dims{n, o, 1, 1});
  g.fcForward(d, x.onGpu(), w.gpu.data(), nullptr, y.onGpu());
  const std::vector<float> reference = strata::test::bf16GemmNt(x.cpu, w.cpu, n, o, k);
  const std::vector<float> yGpu = y.fromGpu();
  requireClose(g, reference, yGpu, 1e-3);
  // The GPU did round its operands: the fp32 product differs by more than
  // fp32's rounding (so this test tells bf16 from fp32).
  CpuBackend cpu;
  TwinTensor exact = nanTensor(Dims{n, o, 1, 1});
  cpu.fcForward(d, x.onCpu(), w.cpu.data(), nullptr, exact.onCpu());
  double largest = 0;
  for (size_t i = 0; i < exact.cpu.size(); ++i)
    largest = std::max(largest, std::abs(double(exact.cpu[i]) - double(yGpu[i])));
  CHECK(largest > 1e-5 * test::maxAbs(exact.cpu));
}

// Per position and flattened, every phase, beta 0 and 1: CpuBackend on the
// rounded operands is the reference.
void compareFcBf16(bool flatten, Dims xDims, int outputs) {
  CAPTURE(flatten, xDims.n, xDims.c, xDims.h, xDims.w, outputs);
  CudaBackend& g = bf16Gpu();
  CpuBackend cpu;
  const int inFeatures = flatten ? static_cast<int>(xDims.perExample()) : xDims.c;
  const FcDesc d{flatten, inFeatures, outputs};
  const Dims yDims =
      flatten ? Dims{xDims.n, outputs, 1, 1} : Dims{xDims.n, outputs, xDims.h, xDims.w};
  const auto weights = static_cast<size_t>(outputs) * inFeatures;
  TwinTensor x = randomTensor(xDims, 311);
  TwinArray w = randomArray(weights, 312);
  TwinArray bias = randomArray(static_cast<size_t>(outputs), 313);
  TwinTensor dy = randomTensor(yDims, 314);
  std::vector<float> xr = rounded(x), wr = rounded(w), dyr = rounded(dy);
  const ConstTensorView xrv{xr.data(), xDims}, dyrv{dyr.data(), yDims};

  TwinTensor y = nanTensor(yDims);
  cpu.fcForward(d, xrv, wr.data(), bias.cpu.data(), y.onCpu());
  g.fcForward(d, x.onGpu(), w.gpu.data(), bias.gpu.data(), y.onGpu());
  requireClose(g, y, 1e-3);
  for (float beta : {0.0f, 1.0f}) {
    CAPTURE(beta);
    TwinTensor dx = beta == 0.0f ? nanTensor(xDims) : randomTensor(xDims, 315);
    cpu.fcBackwardData(d, dyrv, wr.data(), dx.onCpu(), beta);
    g.fcBackwardData(d, dy.onGpu(), w.gpu.data(), dx.onGpu(), beta);
    requireClose(g, dx, 1e-3);
  }
  TwinArray dw = randomArray(weights, 316);
  TwinArray db = randomArray(static_cast<size_t>(outputs), 317);
  cpu.fcBackwardWeights(d, xrv, dyrv, dw.cpu.data(), db.cpu.data());
  g.fcBackwardWeights(d, x.onGpu(), dy.onGpu(), dw.gpu.data(), db.gpu.data());
  requireClose(g, dw, 1e-3);
  // The bias gradient is fp32 throughout (kernels/, on unrounded dy).
  TwinArray dbExact = randomArray(static_cast<size_t>(outputs), 317);
  cpu.fcBackwardWeights(d, x.onCpu(), dy.onCpu(), dw.cpu.data(), dbExact.cpu.data());
  requireClose(g, dbExact.cpu, db.fromGpu());
}

TEST_CASE("bf16 fc: every phase equals CpuBackend on bf16-rounded operands", "[bf16][fc]") {
  compareFcBf16(true, Dims{5, 4, 3, 2}, 7);
  compareFcBf16(true, Dims{9, 64, 1, 1}, 33);
  compareFcBf16(false, Dims{5, 6, 3, 4}, 7);  // strided-batched GemmEx, per-example weight GEMMs
  compareFcBf16(false, Dims{4, 6, 1, 1}, 5);  // one position: the flatten path
}

void compareConvBf16(const ConvDesc& d, int n) {
  CAPTURE(d.inC, d.inH, d.inW, d.filters, d.kernelH, d.kernelW, d.stride, d.pad, d.groups, n);
  CudaBackend& g = bf16Gpu();
  CpuBackend cpu;
  constexpr double kTolerance = 4e-3;  // 2^-8: the bf16 result, rounded once
  const Dims xDims{n, d.inC, d.inH, d.inW}, yDims{n, d.filters, d.outH, d.outW};
  const auto weights = static_cast<size_t>(d.filters) * (d.inC / d.groups) * d.kernelH * d.kernelW;
  TwinTensor x = randomTensor(xDims, 321);
  TwinArray w = randomArray(weights, 322);
  TwinArray bias = randomArray(static_cast<size_t>(d.filters), 323);
  TwinTensor dy = randomTensor(yDims, 324);
  std::vector<float> xr = rounded(x), wr = rounded(w), dyr = rounded(dy);
  const ConstTensorView xrv{xr.data(), xDims}, dyrv{dyr.data(), yDims};

  TwinTensor y = nanTensor(yDims);
  cpu.convForward(d, xrv, wr.data(), bias.cpu.data(), y.onCpu());
  g.convForward(d, x.onGpu(), w.gpu.data(), bias.gpu.data(), y.onGpu());
  requireClose(g, y, kTolerance);
  // Backward data: cuDNN's bf16 algorithms do not all round once. On an H100
  // (cuDNN 9.19, 2026-11-27) the algorithm the timed search picked, which
  // varies from run to run, was off by up to 2.2 bf16 steps (8.4e-3 of the
  // largest |value|) in 5 of 8 runs, as if partial sums were rounded to bf16
  // on the way; 2^-6 is twice that, and a wrong result is off by the order of
  // the values themselves.
  constexpr double kDataTolerance = 1.0 / 64;
  for (float beta : {0.0f, 1.0f}) {
    CAPTURE(beta);
    TwinTensor dx = beta == 0.0f ? nanTensor(xDims) : randomTensor(xDims, 325);
    cpu.convBackwardData(d, dyrv, wr.data(), dx.onCpu(), beta);
    g.convBackwardData(d, dy.onGpu(), w.gpu.data(), dx.onGpu(), beta);
    requireClose(g, dx, kDataTolerance);
  }
  // dw starts non-zero: the bf16 result is added to it in fp32.
  TwinArray dw = randomArray(weights, 326);
  cpu.convBackwardWeights(d, xrv, dyrv, dw.cpu.data(), nullptr);
  g.convBackwardWeights(d, x.onGpu(), dy.onGpu(), dw.gpu.data(), nullptr);
  requireClose(g, dw, kTolerance);
}

TEST_CASE("bf16 conv: cuDNN with bf16 tensors equals CpuBackend on bf16-rounded operands",
          "[bf16][conv]") {
  compareConvBf16(convDesc(16, 13, 13, 24, 3, 3, 1, 1, 1), 2);
  compareConvBf16(convDesc(3, 31, 31, 8, 11, 11, 4, 2, 1), 3);  // AlexNet's conv1, small
  compareConvBf16(convDesc(8, 9, 9, 12, 5, 5, 1, 2, 2), 2);     // groups
}

// A whole step in bf16 against the same step in fp32 on the CPU. Every conv
// and fc rounds its operands to bf16 (unit roundoff 2^-9 = 2e-3), and the
// errors pass through the layers; a max-pooling window whose two largest
// inputs are within that of each other may route its gradient to the other
// one. So the comparison is normwise per parameter block (|a - b| / |b| over
// the block), against the step's own sensitivity: the fp32 step from the
// weights and input rounded through bf16 once. The bf16 step rounds those and
// every intermediate, so it may be off by twice that (or 5e-2, ten times what
// a few roundings of 2e-3 give, where the step is well conditioned), while a
// wrong GEMM (a transposed operand, a lost accumulation, a result in the
// wrong scratch) is off by the order of 1. On an H100 (2026-11-27) tiny-cnn's
// conv1 and conv2 gradients moved 0.097 and 0.062 from the rounding alone
// (batch 8: sums that largely cancel), the bf16 step 0.117 and 0.071; fc3
// and fc4 0.003 and 0.004.
double relativeNorm(std::span<const float> reference, std::span<const float> other) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < reference.size(); ++i) {
    diff += (double(reference[i]) - double(other[i])) * (double(reference[i]) - double(other[i]));
    norm += double(reference[i]) * double(reference[i]);
  }
  return std::sqrt(diff / std::max(norm, 1e-300));
}

TEST_CASE("a bf16 Model step stays within bf16's tolerance of the fp32 step (tiny-cnn)",
          "[bf16][model]") {
  const Network net = test::presetNetwork("tiny-cnn");
  CpuBackend cpuBackend;
  Model cpu(net, ModelOptions{.backend = &cpuBackend});
  Model gpu(net, ModelOptions{.backend = &bf16Gpu()});
  // The step's own sensitivity: fp32 on the CPU from the weights and input
  // rounded through bf16 once (what the bf16 step does to them first).
  Model rounded(net, ModelOptions{.backend = &cpuBackend});
  REQUIRE(copyOf(cpu.allParameters()) == gpu.parametersToHost());
  for (float& v : rounded.allParameters())
    v = kernels::element::roundThroughBf16(v);
  const auto data = SyntheticDataset::forNetwork(net, 5);
  const int batch = 8;
  for (Model* m : {&cpu, &gpu, &rounded}) {
    std::vector<int32_t> labels(batch);
    fillInput(*m, data, 0, batch, labels);
    if (m == &rounded)
      for (float& v : m->input(batch).span())
        v = kernels::element::roundThroughBf16(v);
    m->setLabels(labels);
    m->setStep(0);
    m->zeroGradients();
    m->forwardAll();
    m->backwardAll();
  }
  bf16Gpu().synchronize();
  CHECK(gpu.loss() == Approx(cpu.loss()).epsilon(1e-2));
  const auto gc = copyOf(cpu.allGradients()), gg = gpu.gradientsToHost(),
             gr = copyOf(rounded.allGradients());
  for (int l = 0; l < cpu.layerCount(); ++l) {
    const ParamBlock b = cpu.paramBlock(l);
    if (b.size() == 0)
      continue;
    const auto at = static_cast<size_t>(b.offset), size = static_cast<size_t>(b.size());
    const double bf16Error =
        relativeNorm(std::span(gc).subspan(at, size), std::span(gg).subspan(at, size));
    const double sensitivity =
        relativeNorm(std::span(gc).subspan(at, size), std::span(gr).subspan(at, size));
    WARN("gradients of " << net.layers[static_cast<size_t>(l)].name << ": bf16 step " << bf16Error
                         << " from fp32's, inputs and weights rounded once " << sensitivity);
    INFO("gradients of " << net.layers[static_cast<size_t>(l)].name);
    CHECK(bf16Error < std::max(5e-2, 2 * sensitivity));
  }
  cpu.updateAll(0.01f, 0.9f, 5e-4f);
  gpu.updateAll(0.01f, 0.9f, 5e-4f);
  bf16Gpu().synchronize();
  // Master weights stay fp32: the updated weights are not bf16 values (a
  // bf16 copy kept as the weights would have the low 16 bits all zero).
  const auto pg = gpu.parametersToHost(), pc = copyOf(cpu.allParameters());
  size_t beyondBf16 = 0;
  for (float v : pg)
    beyondBf16 += kernels::element::roundThroughBf16(v) != v ? 1 : 0;
  CHECK(beyondBf16 > pg.size() / 2);
  // And the step moved them as fp32's did, within the gradients' tolerance.
  const auto p0 = copyOf(Model(net, ModelOptions{.backend = &cpuBackend}).allParameters());
  std::vector<float> stepCpu(pc.size()), stepGpu(pc.size());
  for (size_t i = 0; i < pc.size(); ++i) {
    stepCpu[i] = pc[i] - p0[i];
    stepGpu[i] = pg[i] - p0[i];
  }
  CHECK(relativeNorm(stepCpu, stepGpu) < 5e-2);
}

// fp16 needs loss scaling, which is not built: refused with the reason.
TEST_CASE("the CUDA backend refuses fp16, naming bf16 instead", "[bf16]") {
  try {
    CudaBackend fp16(CudaBackendOptions{.element = ElementType::kFp16});
    FAIL("no error");
  } catch (const RunFailure& e) {
    const std::string what = e.what();
    CHECK(what.find("loss scaling") != std::string::npos);
    CHECK(what.find("use bf16") != std::string::npos);
  }
}

TEST_CASE("timeline marks are GPU times in order from the origin", "[timing]") {
  CudaBackend& g = defaultGpu();
  const ConvDesc d = convDesc(64, 27, 27, 192, 5, 5, 1, 2, 1);  // AlexNet's conv2
  const Dims xDims{16, d.inC, d.inH, d.inW}, yDims{16, d.filters, d.outH, d.outW};
  TwinTensor x = randomTensor(xDims, 91);
  TwinArray w = randomArray(static_cast<size_t>(d.filters) * d.inC * 25, 92);
  TwinTensor y(yDims);
  g.convForward(d, x.onGpu(), w.gpu.data(), nullptr, y.onGpu());  // algorithm chosen here

  const auto before = CudaBackend::Clock::now();
  const auto origin = g.startTimeline();
  const int a = g.markTime();
  for (int i = 0; i < 5; ++i)
    g.convForward(d, x.onGpu(), w.gpu.data(), nullptr, y.onGpu());
  const int b = g.markTime();
  g.synchronize();
  const auto after = CudaBackend::Clock::now();
  CHECK(before <= origin);
  CHECK(g.markSeconds(a) >= 0.0);
  CHECK(g.markSeconds(b) > g.markSeconds(a));
  // The marks lie within the host's view of the same interval.
  CHECK(g.markSeconds(b) <= std::chrono::duration<double>(after - origin).count() + 1e-3);
  // A new timeline reuses the events.
  g.startTimeline();
  CHECK(g.markTime() == 0);
  g.synchronize();
}

// ---- transformer layers -------------------------------------------------------------------

TEST_CASE("layer normalisation and gelu equal the CPU's", "[transformer]") {
  CpuBackend cpu;
  CudaBackend& g = defaultGpu();
  for (const Dims dims : {Dims{3, 7, 5, 1}, Dims{2, 64, 33, 1}, Dims{1, 1, 1, 1}}) {
    INFO("dims " << dims.n << "x" << dims.c << "x" << dims.h << "x" << dims.w);
    TwinTensor x = randomTensor(dims, 61, -2, 3);
    TwinTensor dy = randomTensor(dims, 62);
    TwinArray gain = randomArray(size_t(dims.c), 63, 0.5f, 2),
              bias = randomArray(size_t(dims.c), 64);
    const float eps = 1e-5f;
    TwinTensor y = nanTensor(dims);
    cpu.layerNormForward(x.onCpu(), gain.cpu.data(), bias.cpu.data(), eps, y.onCpu());
    g.layerNormForward(x.onGpu(), gain.gpu.data(), bias.gpu.data(), eps, y.onGpu());
    requireClose(g, y);
    TwinTensor dx = nanTensor(dims);
    for (const float beta : {0.0f, 1.0f}) {
      cpu.layerNormBackwardData(x.onCpu(), dy.onCpu(), gain.cpu.data(), eps, dx.onCpu(), beta);
      g.layerNormBackwardData(x.onGpu(), dy.onGpu(), gain.gpu.data(), eps, dx.onGpu(), beta);
      requireClose(g, dx);
    }
    TwinArray dgain = randomArray(size_t(dims.c), 65), dbias = randomArray(size_t(dims.c), 66);
    cpu.layerNormBackwardWeights(x.onCpu(), dy.onCpu(), eps, dgain.cpu.data(), dbias.cpu.data());
    g.layerNormBackwardWeights(x.onGpu(), dy.onGpu(), eps, dgain.gpu.data(), dbias.gpu.data());
    requireClose(g, dgain);
    requireClose(g, dbias);

    TwinTensor gy = nanTensor(dims);
    cpu.geluForward(x.onCpu(), gy.onCpu());
    g.geluForward(x.onGpu(), gy.onGpu());
    requireClose(g, gy);
    TwinTensor gdx = nanTensor(dims);
    for (const float beta : {0.0f, 1.0f}) {
      cpu.geluBackward(x.onCpu(), dy.onCpu(), gdx.onCpu(), beta);
      g.geluBackward(x.onGpu(), dy.onGpu(), gdx.onGpu(), beta);
      requireClose(g, gdx);
    }
  }
}

struct AttentionCase {
  int n, features, positions, heads;
  bool causal, bias;
};

AttentionDesc descOf(const AttentionCase& c) {
  AttentionDesc d;
  d.features = c.features;
  d.positions = c.positions;
  d.heads = c.heads;
  d.causal = c.causal;
  return d;
}

// Every saved value and every gradient of an attention layer, both backends.
void compareAttention(const AttentionCase& c) {
  CpuBackend cpu;
  CudaBackend& g = defaultGpu();
  const AttentionDesc d = descOf(c);
  const int f = c.features, t = c.positions;
  const Dims xd{c.n, f, t, 1}, qkvd{c.n, 3 * f, t, 1};
  TwinTensor x = randomTensor(xd, 71);
  TwinArray w = randomArray(size_t(4) * f * f, 72, -0.5f, 0.5f);
  TwinArray bias = randomArray(size_t(4) * f, 73);
  TwinTensor qkv = nanTensor(qkvd), dqkv = nanTensor(qkvd), context = nanTensor(xd);
  TwinArray probs(size_t(c.n) * c.heads * t * t);
  probs.fill(kNaN);
  const AttentionSaved onCpu{qkv.onCpu(), probs.cpu.data(), context.onCpu(), dqkv.onCpu()};
  const AttentionSaved onGpu{qkv.onGpu(), probs.gpu.data(), context.onGpu(), dqkv.onGpu()};
  TwinTensor y = nanTensor(xd);
  const float* biasCpu = c.bias ? bias.cpu.data() : nullptr;
  const float* biasGpu = c.bias ? bias.gpu.data() : nullptr;
  cpu.attentionForward(d, x.onCpu(), w.cpu.data(), biasCpu, onCpu, y.onCpu());
  g.attentionForward(d, x.onGpu(), w.gpu.data(), biasGpu, onGpu, y.onGpu());
  requireClose(g, qkv);
  requireClose(g, probs);
  requireClose(g, context);
  requireClose(g, y);

  TwinTensor dy = randomTensor(xd, 74);
  TwinArray dw = randomArray(w.cpu.size(), 75), dbias = randomArray(bias.cpu.size(), 76);
  cpu.attentionBackwardWeights(d, x.onCpu(), dy.onCpu(), w.cpu.data(), onCpu, dw.cpu.data(),
                               c.bias ? dbias.cpu.data() : nullptr);
  g.attentionBackwardWeights(d, x.onGpu(), dy.onGpu(), w.gpu.data(), onGpu, dw.gpu.data(),
                             c.bias ? dbias.gpu.data() : nullptr);
  requireClose(g, dqkv);
  requireClose(g, dw);
  requireClose(g, dbias);
  TwinTensor dx = nanTensor(xd);
  for (const float beta : {0.0f, 1.0f}) {
    cpu.attentionBackwardData(d, dqkv.onCpu(), w.cpu.data(), dx.onCpu(), beta);
    g.attentionBackwardData(d, dqkv.onGpu(), w.gpu.data(), dx.onGpu(), beta);
    requireClose(g, dx);
  }
  // Selective recomputation: the core again from each side's saved qkv,
  // after its probabilities and context were poisoned.
  REQUIRE(g.runsAttentionCore());
  probs.fill(kNaN);
  context.fill(kNaN);
  cpu.attentionCoreForward(d, onCpu);
  g.attentionCoreForward(d, onGpu);
  requireClose(g, probs);
  requireClose(g, context);
}

TEST_CASE("attention equals the CPU's: causal and not, heads batched and looped", "[transformer]") {
  // heads >= n: batched over heads, a call per example; else the reverse.
  for (const AttentionCase& c :
       {AttentionCase{3, 6, 5, 3, true, true}, AttentionCase{2, 8, 7, 4, false, true},
        AttentionCase{5, 4, 3, 1, true, false}, AttentionCase{5, 12, 9, 2, false, true},
        AttentionCase{1, 64, 33, 4, true, true}}) {
    INFO("n " << c.n << ", d " << c.features << ", T " << c.positions << ", heads " << c.heads
              << (c.causal ? ", causal" : "") << (c.bias ? ", bias" : ""));
    compareAttention(c);
  }
}

// bf16 attention (every GEMM on bf16 copies of its operands, fp32 results,
// the softmax fp32) against CpuBackend on the bf16-rounded inputs x, w and
// dy. The QKV projection reads exactly those operands (1e-3, as fc's); every
// later GEMM reads an intermediate rounded once more on the GPU only, so
// those results are held to 3e-2 of the largest |value| (attention_plan_test
// runs the same rounding on the CPU within the same bound; its reasoning is
// there), while a wrong or stale bf16 operand is off by the order of 1.
void compareAttentionBf16(const AttentionCase& c) {
  constexpr double kTolerance = 3e-2;
  CpuBackend cpu;
  CudaBackend& g = bf16Gpu();
  const AttentionDesc d = descOf(c);
  const int f = c.features, t = c.positions;
  const Dims xd{c.n, f, t, 1}, qkvd{c.n, 3 * f, t, 1};
  TwinTensor x = randomTensor(xd, 81);
  TwinArray w = randomArray(size_t(4) * f * f, 82, -0.5f, 0.5f);
  TwinArray bias = randomArray(size_t(4) * f, 83);
  TwinTensor dy = randomTensor(xd, 84);
  std::vector<float> xr = rounded(x), wr = rounded(w), dyr = rounded(dy);
  TwinTensor qkv = nanTensor(qkvd), dqkv = nanTensor(qkvd), context = nanTensor(xd);
  TwinArray probs(size_t(c.n) * c.heads * t * t);
  probs.fill(kNaN);
  const AttentionSaved onCpu{qkv.onCpu(), probs.cpu.data(), context.onCpu(), dqkv.onCpu()};
  const AttentionSaved onGpu{qkv.onGpu(), probs.gpu.data(), context.onGpu(), dqkv.onGpu()};
  TwinTensor y = nanTensor(xd);
  const float* biasCpu = c.bias ? bias.cpu.data() : nullptr;
  const float* biasGpu = c.bias ? bias.gpu.data() : nullptr;
  cpu.attentionForward(d, {xr.data(), xd}, wr.data(), biasCpu, onCpu, y.onCpu());
  g.attentionForward(d, x.onGpu(), w.gpu.data(), biasGpu, onGpu, y.onGpu());
  requireClose(g, qkv, 1e-3);
  requireClose(g, probs, kTolerance);
  requireClose(g, context, kTolerance);
  requireClose(g, y, kTolerance);

  // dw starts non-zero: the GEMMs accumulate into it in fp32.
  TwinArray dw = randomArray(w.cpu.size(), 85), dbias = randomArray(bias.cpu.size(), 86);
  cpu.attentionBackwardWeights(d, {xr.data(), xd}, {dyr.data(), xd}, wr.data(), onCpu,
                               dw.cpu.data(), c.bias ? dbias.cpu.data() : nullptr);
  g.attentionBackwardWeights(d, x.onGpu(), dy.onGpu(), w.gpu.data(), onGpu, dw.gpu.data(),
                             c.bias ? dbias.gpu.data() : nullptr);
  requireClose(g, dqkv, kTolerance);
  requireClose(g, dw, kTolerance);
  if (c.bias) {
    // dbo sums the unrounded dy in fp32; dbqkv sums dQKV (fp32 on both
    // sides, from operands rounded on the GPU): the same tolerance.
    TwinArray dbExact = randomArray(bias.cpu.size(), 86);
    cpu.attentionBackwardWeights(d, x.onCpu(), dy.onCpu(), wr.data(), onCpu, dw.cpu.data(),
                                 dbExact.cpu.data());
    requireClose(g, dbExact.cpu, dbias.fromGpu(), kTolerance);
  }
  // dx from the GPU's own dQKV on both sides: one GEMM on its rounded copy.
  const std::vector<float> dqkvGpu = dqkv.fromGpu();
  const std::vector<float> dqkvr = strata::test::roundedThroughBf16(dqkvGpu);
  TwinTensor dx = nanTensor(xd);
  for (const float beta : {0.0f, 1.0f}) {
    CAPTURE(beta);
    cpu.attentionBackwardData(d, {dqkvr.data(), qkvd}, wr.data(), dx.onCpu(), beta);
    g.attentionBackwardData(d, dqkv.onGpu(), w.gpu.data(), dx.onGpu(), beta);
    requireClose(g, dx, 1e-3);
  }
}

TEST_CASE("bf16 attention: GemmEx on bf16 copies equals CpuBackend on bf16-rounded inputs",
          "[bf16][transformer]") {
  for (const AttentionCase& c :
       {AttentionCase{3, 6, 5, 3, true, true}, AttentionCase{5, 12, 9, 2, false, true},
        AttentionCase{1, 64, 33, 4, true, true}, AttentionCase{2, 32, 17, 1, false, false}}) {
    INFO("n " << c.n << ", d " << c.features << ", T " << c.positions << ", heads " << c.heads
              << (c.causal ? ", causal" : "") << (c.bias ? ", bias" : ""));
    compareAttentionBf16(c);
  }
}

TEST_CASE("embedding equals the CPU's bit for bit, position tables on and off", "[transformer]") {
  CpuBackend cpu;
  CudaBackend& g = defaultGpu();
  for (const bool positions : {true, false}) {
    const EmbeddingDesc d{11, 6, positions};
    const Dims idd{4, 1, 9, 1}, yd{4, 6, 9, 1};
    TwinTensor ids(idd);
    for (size_t i = 0; i < ids.cpu.size(); ++i)
      ids.cpu[i] = static_cast<float>((i * 7) % 5);  // 5 of 11 tokens: repeats
    ids.copyToGpu();
    TwinArray table = randomArray(size_t(11 + (positions ? 9 : 0)) * 6, 81);
    TwinTensor y = nanTensor(yd);
    cpu.embeddingForward(d, ids.onCpu(), table.cpu.data(), y.onCpu());
    g.embeddingForward(d, ids.onGpu(), table.gpu.data(), y.onGpu());
    requireClose(g, y, 0.0);
    TwinTensor dy = randomTensor(yd, 82);
    TwinArray dtable = randomArray(table.cpu.size(), 83);
    cpu.embeddingBackwardWeights(d, ids.onCpu(), dy.onCpu(), dtable.cpu.data());
    g.embeddingBackwardWeights(d, ids.onGpu(), dy.onGpu(), dtable.gpu.data());
    requireClose(g, dtable, 0.0);
  }
}

TEST_CASE("a bad token id on the GPU is CpuBackend's error at the next synchronize",
          "[transformer]") {
  CudaBackend& g = defaultGpu();
  const EmbeddingDesc d{8, 2, false};
  TwinTensor ids(Dims{1, 1, 3, 1});
  ids.cpu = {1, 9, 2};
  ids.copyToGpu();
  TwinArray table = randomArray(16, 91);
  TwinTensor y = nanTensor(Dims{1, 2, 3, 1});
  g.embeddingForward(d, ids.onGpu(), table.gpu.data(), y.onGpu());
  CHECK_THROWS_WITH(g.synchronize(),
                    Catch::Contains("embedding: token id 9 is not an integer in [0, 8)"));
  g.synchronize();  // reported once, then cleared
}

TEST_CASE("a Model of tiny-gpt (tied output fc) trains on CudaBackend as on CpuBackend",
          "[model][transformer]") {
  trainAlike("tiny-gpt", 7, 4, 4, 0.05f, 0.0f);
}

}  // namespace
}  // namespace strata::nn

// Lists tests without a device (CTest discovers them at build time); runs
// them only where a device is usable, else exits 77 (skipped).
int main(int argc, char** argv) {
  Catch::Session session;
  if (const int rc = session.applyCommandLine(argc, argv); rc != 0)
    return rc;
  const Catch::ConfigData& config = session.configData();
  const bool listing = config.listTests || config.listTestNamesOnly || config.listTags ||
                       config.listReporters || config.showHelp;
  if (!listing) {
    if (const std::string why = strata::nn::cudaUnavailableReason(); !why.empty()) {
      // What can be checked without a device: the backend refuses to start,
      // with that reason.
      try {
        strata::nn::CudaBackend backend;
        std::printf("nn cuda: CudaBackend started without a device (%s)\n", why.c_str());
        return 1;
      } catch (const strata::RunFailure& e) {
        if (std::string(e.what()) != "no CUDA device: " + why) {
          std::printf("nn cuda: unexpected refusal: %s\n", e.what());
          return 1;
        }
      }
      std::printf("nn cuda: skipped, no usable CUDA device: %s\n", why.c_str());
      return 77;
    }
  }
  const int failed = session.run();
  strata::nn::sharedBf16.reset();
  strata::nn::sharedHeuristic.reset();
  strata::nn::sharedDefault.reset();
  return failed;
}

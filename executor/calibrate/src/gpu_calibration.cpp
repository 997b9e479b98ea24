// `strata calibrate --device cuda`: GPU 0 as a one-device cluster, its
// kernel tables measured through the CUDA backend exactly as a run calls it
// (cuBLAS GEMMs through the fc phases, cuDNN convolutions, the kernels/ of
// every other layer), each timed by CUDA events (WorkTimer).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "kernel_calibration.h"
#include "strata/exec/calibrate.h"
#include "strata/exec/device.h"
#include "strata/model/error.h"
#include "strata/model/kernels.h"
#include "strata/model/quantity_text.h"
#include "timing.h"

#if STRATA_HAVE_CUDA
#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "strata/exec/comm/local_communicator.h"
#include "strata/exec/nn/cuda_backend.h"
#include "strata/exec/nn/model.h"
#include "strata/kernels/kernels.h"
#include "strata/kernels/precision.h"
#include "strata/kernels/transformer.h"
#endif

namespace strata::exec::detail {

#if STRATA_HAVE_CUDA

namespace {

// Seconds per call of fn on the backend: a warm-up call (cuDNN chooses its
// algorithm there), one timed call to size the groups, then 3 groups of at
// least 1 ms of GPU time each; the median group.
template <class F>
double gpuPerCall(WorkTimer& timer, F&& fn) {
  timer.start();
  fn();
  const int a = timer.mark();
  fn();
  const int b = timer.mark();
  timer.finish();
  const double one = timer.seconds(b) - timer.seconds(a);
  const int calls = std::clamp(static_cast<int>(1e-3 / std::max(one, 1e-7)), 1, 10000);
  std::vector<double> g;
  for (int group = 0; group < 3; ++group) {
    timer.start();
    const int s = timer.mark();
    for (int c = 0; c < calls; ++c)
      fn();
    const int e = timer.mark();
    timer.finish();
    g.push_back((timer.seconds(e) - timer.seconds(s)) / calls);
  }
  std::sort(g.begin(), g.end());
  return g[1];
}

// The GEMM grid of the CPU's tables; points over 2^34 multiply-adds (~1 ms
// at FP32 speed on an H100) or with an operand over 2^26 floats (256 MiB)
// take the rate of the point with the largest dimension one step smaller.
const std::vector<int64_t> kGemmDims = {1, 2, 4, 8, 16, 32, 64, 128, 256, 1024, 4096, 16384};
constexpr double kMaxMacs = double(int64_t{1} << 34);
constexpr double kMaxOperand = double(int64_t{1} << 26);

// The convolution grid (implicit-GEMM m, n and k; kernels 3x3, stride 1,
// pad 1); points over kMaxMacs or with a tensor over 2^26 floats are filled
// like the GEMM grid's.
const std::vector<int64_t> kConvDims = {16, 64, 256, 1024, 4096, 16384, 65536, 262144};

// Points of a grid over `dims` in m, n and k.
size_t cube(const std::vector<int64_t>& dims) {
  return dims.size() * dims.size() * dims.size();
}

struct GpuTables {
  KernelTables tables;
  double copyBandwidth = 0;  // device-to-device copy, bytes read + written per second
  double reduceBandwidth = 0;
};

// Seconds of one GEMM (m x n, depth k) through the fc phase that runs it, as
// lowerCuda prices them: forward nt (m x k) (n x k)^T, backward data nn,
// backward weights tn; a, b and c hold at least the operands.
double gemmSeconds(nn::CudaBackend& be, WorkTimer& timer, GemmOp op, int m, int n, int k, float* a,
                   float* b, float* c) {
  switch (op) {
    case GemmOp::kNT: {  // y (m x n) = x (m x k) W^T, W (n x k)
      const nn::FcDesc fd{true, k, n};
      return gpuPerCall(timer, [&] {
        be.fcForward(fd, nn::ConstTensorView{a, {m, k, 1, 1}}, b, nullptr,
                     nn::TensorView{c, {m, n, 1, 1}});
      });
    }
    case GemmOp::kNN: {  // dx (m x n) = dy (m x k) W, W (k x n)
      const nn::FcDesc fd{true, n, k};
      return gpuPerCall(timer, [&] {
        be.fcBackwardData(fd, nn::ConstTensorView{a, {m, k, 1, 1}}, b,
                          nn::TensorView{c, {m, n, 1, 1}}, 0.0f);
      });
    }
    case GemmOp::kTN: {  // dW (m x n) += dy^T x, dy (k x m), x (k x n)
      const nn::FcDesc fd{true, n, m};
      return gpuPerCall(timer, [&] {
        be.fcBackwardWeights(fd, nn::ConstTensorView{a, {k, n, 1, 1}},
                             nn::ConstTensorView{b, {k, m, 1, 1}}, c, nullptr);
      });
    }
  }
  return 0;
}

// The GEMM grid over `dims` through the fc phases (forward nt, backward data
// nn, backward weights tn), as lowerCuda prices them, on `be` (its element
// type: a bf16 backend's calls include the casts of their operands); points
// over kMaxMacs or with an operand over kMaxOperand floats filled from the
// point one step smaller (fillOverCap). a, b and c hold kMaxOperand floats.
GemmTable gemmGrid(nn::CudaBackend& be, WorkTimer& timer, const std::vector<int64_t>& dims,
                   float* a, float* b, float* c) {
  GemmTable g;
  const size_t d = dims.size();
  g.dims = dims;
  for (auto op : kAllGemmOps) {
    auto& rate = g.rate[static_cast<size_t>(op)];
    rate.assign(d * d * d, 0.0);
    std::vector<char> measured(d * d * d, 0);
    for (size_t im = 0; im < d; ++im)
      for (size_t in = 0; in < d; ++in)
        for (size_t ik = 0; ik < d; ++ik) {
          const int m = int(dims[im]), n = int(dims[in]), k = int(dims[ik]);
          if (double(m) * n * k > kMaxMacs ||
              std::max({double(m) * k, double(k) * n, double(m) * n}) > kMaxOperand)
            continue;
          const double s = gemmSeconds(be, timer, op, m, n, k, a, b, c);
          rate[(im * d + in) * d + ik] = 2.0 * m * n * k / s;
          measured[(im * d + in) * d + ik] = 1;
        }
    fillOverCap(rate, measured, d);
  }
  return g;
}

// The convolution grid over `dims` (implicit-GEMM m, n, k), cuDNN 3x3 stride
// 1 pad 1 on `be`: m = examples x positions (planes of 64 x 64 from 4096 on,
// one example below), n = filters, k = 9 x channels (channels = k / 9, at
// least 1: the rate is of the real k); over the caps as gemmGrid. a, b, c
// and d4 hold kMaxOperand floats.
GemmTable convGrid(nn::CudaBackend& be, WorkTimer& timer, const std::vector<int64_t>& dims,
                   float* a, float* b, float* c, float* d4) {
  GemmTable g;
  const size_t d = dims.size();
  g.dims = dims;
  for (auto& r : g.rate)
    r.assign(d * d * d, 0.0);
  std::vector<std::vector<char>> measured(3, std::vector<char>(d * d * d, 0));
  for (size_t im = 0; im < d; ++im)
    for (size_t in = 0; in < d; ++in)
      for (size_t ik = 0; ik < d; ++ik) {
        const int64_t m = dims[im], n = dims[in];
        const int channels = std::max<int>(1, int(dims[ik] / 9));
        const int side = m >= 4096 ? 64 : int(std::lround(std::sqrt(double(m))));
        const int examples = int(m / (int64_t{side} * side));
        const double k = 9.0 * channels;
        const double x = double(examples) * channels * side * side;
        if (double(m) * double(n) * k > kMaxMacs || x > kMaxOperand ||
            double(m) * double(n) > kMaxOperand || double(n) * k > kMaxOperand)
          continue;
        nn::ConvDesc cd;
        cd.inC = channels;
        cd.inH = cd.inW = cd.outH = cd.outW = side;
        cd.filters = int(n);
        cd.kernelH = cd.kernelW = 3;
        cd.pad = 1;
        const nn::Dims xd{examples, channels, side, side}, yd{examples, int(n), side, side};
        const double flops = 2.0 * double(m) * double(n) * k;
        const size_t at = (im * d + in) * d + ik;
        g.rate[0][at] =
            flops / gpuPerCall(timer, [&] {
              be.convForward(cd, nn::ConstTensorView{a, xd}, b, nullptr, nn::TensorView{c, yd});
            });
        g.rate[1][at] =
            flops / gpuPerCall(timer, [&] {
              be.convBackwardData(cd, nn::ConstTensorView{c, yd}, b, nn::TensorView{d4, xd}, 0.0f);
            });
        g.rate[2][at] = flops / gpuPerCall(timer, [&] {
                          be.convBackwardWeights(cd, nn::ConstTensorView{a, xd},
                                                 nn::ConstTensorView{c, yd}, d4, nullptr);
                        });
        for (auto& mm : measured)
          mm[at] = 1;
      }
  for (size_t p = 0; p < 3; ++p)
    fillOverCap(g.rate[p], measured[p], d);
  return g;
}

// The shapes behind the efficiencies a calibrated file writes, for every
// precision: an fc layer's forward at batch 64 (nt 64 x 1024 x 1024) and a
// 3x3 convolution's forward at implicit GEMM 65536 x 256 x 2304 (16 examples
// of 256 channels of 64 x 64, 256 filters).
constexpr int kFcM = 64, kFcN = 1024, kFcK = 1024;
nn::ConvDesc efficiencyConv() {
  nn::ConvDesc cd;
  cd.inC = 256;
  cd.inH = cd.inW = cd.outH = cd.outW = 64;
  cd.filters = 256;
  cd.kernelH = cd.kernelW = 3;
  cd.pad = 1;
  return cd;
}
constexpr int kConvExamples = 16;

// What calibrate measures of tf32 and bf16 (CudaBackendOptions::element) for
// the roofline the model prices those types with: the fastest GEMM of the
// three fc phases at m = n = k in kPeakDims (the type's peak in the file),
// and the fc and conv shapes above (their efficiencies: fractions of it).
struct PrecisionRates {
  ElementType element = ElementType::kFp32;
  double peak = 0, fc = 0, conv = 0;  // FLOP/s
  // The type's own GEMM and conv tables (kernels.by_element), on the coarser
  // grids below; empty where a table could not be measured (`missing` says
  // why): the model then prices that type's GEMMs by roofline, or its
  // convolutions as its implicit GEMMs.
  ElementTables tables;
  std::string missing;
};
constexpr int kPeakDims[] = {2048, 4096, 8192};
// The grids of the tf32 and bf16 tables: every other point of fp32's (the
// rate's dependence on shape, at a third of the time).
const std::vector<int64_t> kElementGemmDims = {1, 4, 16, 64, 256, 1024, 4096, 16384};
const std::vector<int64_t> kElementConvDims = {16, 256, 4096, 65536, 262144};

PrecisionRates measurePrecision(ElementType element,
                                const std::function<void(const std::string&)>& say) {
  nn::CudaBackendOptions o;
  o.element = element;
  nn::CudaBackend be(o);
  WorkTimer timer(be);
  const size_t top = size_t{8192} * 8192;  // the largest operand: 256 MiB (kMaxOperand)
  nn::Buffer<float> a(be.memory(), top), b(be.memory(), top), c(be.memory(), top),
      d4(be.memory(), top);
  be.fill(a.span(), 0.01f);
  be.fill(b.span(), 0.02f);
  PrecisionRates r;
  r.element = element;
  for (const int s : kPeakDims)
    for (auto op : kAllGemmOps)
      r.peak =
          std::max(r.peak, 2.0 * s * s * double(s) /
                               gemmSeconds(be, timer, op, s, s, s, a.data(), b.data(), c.data()));
  r.fc = 2.0 * kFcM * kFcN * kFcK /
         gemmSeconds(be, timer, GemmOp::kNT, kFcM, kFcN, kFcK, a.data(), b.data(), c.data());
  const nn::ConvDesc cd = efficiencyConv();
  const nn::Dims xd{kConvExamples, cd.inC, cd.inH, cd.inW},
      yd{kConvExamples, cd.filters, cd.outH, cd.outW};
  r.conv = 2.0 * kConvExamples * cd.outH * cd.outW * double(cd.filters) * 9.0 * cd.inC /
           gpuPerCall(timer, [&] {
             be.convForward(cd, nn::ConstTensorView{a.data(), xd}, b.data(), nullptr,
                            nn::TensorView{c.data(), yd});
           });
  say(fmt::format("{:<16} peak {:.4g} TFLOP/s (fastest GEMM), fc {:.4g}, conv {:.4g} TFLOP/s",
                  std::string(toString(element)) + " GEMMs", r.peak / 1e12, r.fc / 1e12,
                  r.conv / 1e12));
  // Its own tables, through the same phases in this precision (a bf16 call
  // includes its casts, as the backend runs it). A shape cuDNN or cuBLAS
  // refuses in this type leaves the table out, said in the file.
  const auto type = std::string(toString(element));
  try {
    r.tables.gemm = gemmGrid(be, timer, kElementGemmDims, a.data(), b.data(), c.data());
  } catch (const RunFailure& e) {
    r.missing = fmt::format("no {} GEMM table: {}", type, e.what());
  }
  if (!r.tables.gemm.empty()) {
    try {
      r.tables.conv =
          convGrid(be, timer, kElementConvDims, a.data(), b.data(), c.data(), d4.data());
    } catch (const RunFailure& e) {
      r.missing = fmt::format("no {} conv table: {}", type, e.what());
    }
  }
  say(fmt::format("{:<16} {}", type + " tables",
                  r.missing.empty() ? fmt::format("3 x {} GEMM and 3 x {} conv shapes",
                                                  cube(kElementGemmDims), cube(kElementConvDims))
                                    : r.missing));
  return r;
}

GpuTables measure(nn::CudaBackend& be, const std::function<void(const std::string&)>& say) {
  GpuTables out;
  KernelTables& t = out.tables;
  t.backend = "cuda";
  WorkTimer timer(be);
  nn::Memory& mem = be.memory();
  const auto top = static_cast<size_t>(kMaxOperand);
  nn::Buffer<float> a(mem, top), b(mem, top), c(mem, top), d4(mem, top);
  be.fill(a.span(), 0.01f);
  be.fill(b.span(), 0.02f);
  // Adam's second moment (non-negative: the step takes its square root), as
  // the CPU's table (kernel_calibration.cpp) fills it.
  nn::Buffer<float> adamV(mem, top);
  be.fill(adamV.span(), 0.5f);

  // GEMMs through the fc phases, as lowerCuda prices them: forward nt
  // (m x k) (n x k)^T, backward data nn, backward weights tn.
  t.gemm = gemmGrid(be, timer, kGemmDims, a.data(), b.data(), c.data());
  say(fmt::format("GEMM tables      3 x {} shapes through cuBLAS (fc phases)", cube(kGemmDims)));
  // cuDNN convolutions, 3x3 stride 1 pad 1 (convGrid).
  t.conv = convGrid(be, timer, kConvDims, a.data(), b.data(), c.data(), d4.data());
  say(fmt::format("conv tables      3 x {} shapes through cuDNN (3x3, stride 1, pad 1)",
                  cube(kConvDims)));

  // Memory-bound kernels of kernels/ (one launch each), 1 Ki..64 Mi units by
  // factors of 4, with the layouts of the CPU's tables; backward kernels with
  // beta 0 (they overwrite: lowerCuda has no zero fills).
  {
    std::vector<double> sizes;
    for (double u = 1024; u <= 64.0 * 1024 * 1024; u *= 4)
      sizes.push_back(u);
    nn::Buffer<int32_t> argmax(mem, top), labels(mem);
    {
      // Made on the host and uploaded: device memory.
      std::vector<int32_t> host(top);
      for (size_t i = 0; i < top; ++i)
        host[i] = static_cast<int32_t>(i % 10);
      labels.assign(host);
    }
    // The transformer kernels' layouts, as the CPU's tables (kernel_calibration.cpp):
    // sequences of 64 features (tiny-gpt's width) and up to 256 positions,
    // token ids spread over a 4096-token table (+ 256 position rows); made on
    // the host and uploaded.
    const size_t tokens = top / 64;
    nn::Buffer<float> tokenIds(mem);
    {
      std::vector<float> host(tokens);
      for (size_t i = 0; i < tokens; ++i)
        host[i] = static_cast<float>((i * 2654435761u) % kCalibrationVocab);
      tokenIds.assign(host);
    }
    nn::Buffer<float> embedTable(mem, size_t{kCalibrationVocab + 256} * 64);
    nn::Buffer<float> tableGrad(mem, embedTable.size());
    auto record = [&](MemKernel kernel, double units, double seconds) {
      auto& table = t.memory[static_cast<size_t>(kernel)];
      if (!table.units.empty() && units <= table.units.back())
        return;
      table.units.push_back(units);
      table.rate.push_back(units / seconds);
    };
    float* x = a.data();
    float* y = b.data();
    float* dy = c.data();
    float* dx = d4.data();
    for (double u : sizes) {
      const nn::Dims fd{1, 64, 1, std::max(1, int(u / 64))};
      const double n = double(fd.elements());
      const auto span = [&](float* p) { return std::span<float>(p, size_t(n)); };
      nn::ConstTensorView cx{x, fd}, cy{y, fd}, cdy{dy, fd};
      nn::TensorView vy{y, fd}, vdx{dx, fd};
      record(MemKernel::kZero, n, gpuPerCall(timer, [&] { be.fill(span(dx), 0.0f); }));
      record(MemKernel::kCopy, n, gpuPerCall(timer, [&] { be.accumulate(cx, vdx, 0.0f); }));
      record(MemKernel::kAccumulate, n, gpuPerCall(timer, [&] { be.accumulate(cx, vdx, 1.0f); }));
      record(MemKernel::kReduce, n, gpuPerCall(timer, [&] { be.accumulate(cx, vdx, 1.0f); }));
      record(MemKernel::kAdd, n, gpuPerCall(timer, [&] { be.add(cx, cdy, vdx); }));
      record(MemKernel::kReluFwd, n, gpuPerCall(timer, [&] { be.reluForward(cx, vy); }));
      record(MemKernel::kReluBwd, n,
             gpuPerCall(timer, [&] { be.reluBackward(cy, cdy, vdx, 0.0f); }));
      const nn::Dims dr{std::max(1, int(u / 256)), 256, 1, 1};
      nn::DropoutDesc dd;
      dd.rate = 0.5f;
      dd.totalChannels = dr.c;
      record(MemKernel::kDropoutFwd, double(dr.elements()), gpuPerCall(timer, [&] {
               be.dropoutForward(dd, nn::ConstTensorView{x, dr}, nn::TensorView{y, dr});
             }));
      record(MemKernel::kDropoutBwd, double(dr.elements()), gpuPerCall(timer, [&] {
               be.dropoutBackward(dd, nn::ConstTensorView{dy, dr}, nn::TensorView{dx, dr}, 0.0f);
             }));
      record(MemKernel::kSgd, n, gpuPerCall(timer, [&] {
               be.sgdMomentum(span(y), span(dx), std::span<const float>(dy, size_t(n)), 0.0f, 0.9f,
                              0.0f);
             }));
      // Adam in the CPU table's layout: w = y, m = dx, v = adamV, g = dy.
      record(MemKernel::kAdam, n, gpuPerCall(timer, [&] {
               nn::AdamParams adam;
               adam.learningRate = 1e-4f;
               adam.step = 10;
               be.adam(span(y), span(dx), span(adamV.data()), std::span<const float>(dy, size_t(n)),
                       adam);
             }));
      // The casts of --element bf16 (device memory: dx's floats hold the bf16).
      auto* half = reinterpret_cast<uint16_t*>(dx);
      record(MemKernel::kCastBf16, n, gpuPerCall(timer, [&] {
               kernels::cuda::castToBf16(x, half, int64_t(n), be.stream());
             }));
      record(MemKernel::kCastFp32, n, gpuPerCall(timer, [&] {
               kernels::cuda::castFromBf16(half, y, int64_t(n), 0.0f, be.stream());
             }));
      const int side = std::max(1, int(std::lround(std::sqrt(u / 64))));
      const nn::Dims sq{1, 64, side, side};
      const double ns = double(sq.elements());
      nn::LrnDesc ld;
      record(MemKernel::kLrnFwd, ns, gpuPerCall(timer, [&] {
               be.lrnForward(ld, nn::ConstTensorView{x, sq}, nn::TensorView{y, sq},
                             nn::TensorView{dx, sq});
             }));
      // Backward from forward's y and a positive scale (Adam's second
      // moment, 0.5): missing until 2026-11-27, when the model priced
      // alexnet-owt's lrn1 backward at 75 us by bandwidth against 729 us
      // measured on an H100.
      record(MemKernel::kLrnBwd, ns, gpuPerCall(timer, [&] {
               be.lrnBackward(ld, nn::ConstTensorView{x, sq}, nn::ConstTensorView{y, sq},
                              nn::ConstTensorView{adamV.data(), sq}, nn::ConstTensorView{dy, sq},
                              nn::TensorView{dx, sq}, 0.0f);
             }));
      const nn::Dims bd{4, 16, side, side};
      record(MemKernel::kBatchNormFwd, ns, gpuPerCall(timer, [&] {
               be.batchNormForward(nn::ConstTensorView{x, bd}, y + top - 64, y + top - 32, 1e-5f,
                                   nn::TensorView{dx, bd});
             }));
      record(MemKernel::kBatchNormBwdData, ns, gpuPerCall(timer, [&] {
               be.batchNormBackwardData(nn::ConstTensorView{x, bd}, nn::ConstTensorView{dy, bd},
                                        y + top - 64, 1e-5f, nn::TensorView{dx, bd}, 0.0f);
             }));
      record(MemKernel::kBatchNormBwdWeights, ns, gpuPerCall(timer, [&] {
               be.batchNormBackwardWeights(nn::ConstTensorView{x, bd}, nn::ConstTensorView{dy, bd},
                                           1e-5f, y + top - 64, y + top - 32);
             }));
      const nn::Dims smd{std::max(1, int(u / 10)), 10, 1, 1};
      const double nsm = double(smd.elements());
      float* stats = dy;  // softmax reads no gradient: its buffer holds the statistics
      record(MemKernel::kSoftmaxFwd, nsm, gpuPerCall(timer, [&] {
               be.softmaxStats(nn::ConstTensorView{x, smd}, stats);
               be.softmaxProbabilities(nn::ConstTensorView{x, smd}, stats, nn::TensorView{y, smd});
             }));
      record(MemKernel::kSoftmaxBwd, nsm, gpuPerCall(timer, [&] {
               be.softmaxBackward(nn::ConstTensorView{x, smd}, stats, labels.data(), 0, 1.0f,
                                  nn::TensorView{dx, smd}, 0.0f);
             }));
      for (int win : {3, 2}) {
        const int o = calibrationPoolOut(u, win);
        nn::PoolDesc pd = calibrationPool(win, o);
        const nn::Dims in{1, 64, pd.inH, pd.inW}, od{1, 64, o, o};
        const double reads = 64.0 * o * o * win * win;
        record(
            win == 3 ? MemKernel::kPoolMaxFwd : MemKernel::kPoolMaxFwd2, reads,
            gpuPerCall(timer, [&] {
              be.poolForward(pd, nn::ConstTensorView{x, in}, nn::TensorView{y, od}, argmax.data());
            }));
        if (win == 3)
          record(MemKernel::kPoolMaxBwd, 64.0 * o * o, gpuPerCall(timer, [&] {
                   be.poolBackward(pd, nn::ConstTensorView{dy, od}, argmax.data(),
                                   nn::TensorView{dx, in}, 0.0f);
                 }));
        pd.mode = PoolMode::kAvg;
        record(win == 3 ? MemKernel::kPoolAvgFwd : MemKernel::kPoolAvgFwd2, reads,
               gpuPerCall(timer, [&] {
                 be.poolForward(pd, nn::ConstTensorView{x, in}, nn::TensorView{y, od}, nullptr);
               }));
        record(win == 3 ? MemKernel::kPoolAvgBwd : MemKernel::kPoolAvgBwd2, reads,
               gpuPerCall(timer, [&] {
                 be.poolBackward(pd, nn::ConstTensorView{dy, od}, nullptr, nn::TensorView{dx, in},
                                 0.0f);
               }));
      }
      // Transformer kernels: layer normalisation over 64 channels, GELU
      // elementwise, the attention softmax over rows of 64 keys (causal, dh
      // = 64), the embedding of one id per position.
      const int seqT = std::clamp(static_cast<int>(u / 64), 1, 256);
      const nn::Dims sd{std::max(1, static_cast<int>(u / 64 / seqT)), 64, seqT, 1};
      const double nsd = double(sd.elements());
      const float* gain = dy + top - 128;
      const float* shift = dy + top - 64;
      record(MemKernel::kLayerNormFwd, nsd, gpuPerCall(timer, [&] {
               be.layerNormForward(nn::ConstTensorView{x, sd}, gain, shift, 1e-5f,
                                   nn::TensorView{y, sd});
             }));
      record(MemKernel::kLayerNormBwdData, nsd, gpuPerCall(timer, [&] {
               be.layerNormBackwardData(nn::ConstTensorView{x, sd}, nn::ConstTensorView{dy, sd},
                                        gain, 1e-5f, nn::TensorView{dx, sd}, 0.0f);
             }));
      record(MemKernel::kLayerNormBwdWeights, nsd, gpuPerCall(timer, [&] {
               be.layerNormBackwardWeights(nn::ConstTensorView{x, sd}, nn::ConstTensorView{dy, sd},
                                           1e-5f, y + top - 128, y + top - 64);
             }));
      record(MemKernel::kGeluFwd, n, gpuPerCall(timer, [&] { be.geluForward(cx, vy); }));
      record(MemKernel::kGeluBwd, n,
             gpuPerCall(timer, [&] { be.geluBackward(cx, cdy, vdx, 0.0f); }));
      const int64_t rows = std::max<int64_t>(1, static_cast<int64_t>(u / 64));
      const double scores = double(rows) * 64;
      record(MemKernel::kAttnSoftmaxFwd, scores, gpuPerCall(timer, [&] {
               kernels::cuda::attnSoftmaxForward(x, y, rows, 64, true, 0.125f, be.stream());
             }));
      record(MemKernel::kAttnSoftmaxBwd, scores, gpuPerCall(timer, [&] {
               kernels::cuda::attnSoftmaxBackward(y, dy, dx, rows, 64, 0.125f, be.stream());
             }));
      const nn::EmbeddingDesc ed{kCalibrationVocab, 64, true};
      const nn::Dims ids{sd.n, 1, sd.h, 1};
      record(MemKernel::kEmbeddingFwd, nsd, gpuPerCall(timer, [&] {
               be.embeddingForward(ed, nn::ConstTensorView{tokenIds.data(), ids}, embedTable.data(),
                                   nn::TensorView{y, sd});
             }));
      record(MemKernel::kEmbeddingBwd, nsd, gpuPerCall(timer, [&] {
               be.embeddingBackwardWeights(ed, nn::ConstTensorView{tokenIds.data(), ids},
                                           nn::ConstTensorView{dy, sd}, tableGrad.data());
             }));
      record(MemKernel::kBias, n, gpuPerCall(timer, [&] {
               kernels::cuda::biasAdd(dx, y + top - 64, 1, 64, int64_t(fd.w), be.stream());
             }));
      record(MemKernel::kBiasGrad, n, gpuPerCall(timer, [&] {
               kernels::cuda::biasGrad(dy, y + top - 64, 1, 64, int64_t(fd.w), be.stream());
             }));
    }
    say(fmt::format("memory kernels   {} sizes (1 Ki..64 Mi units) through kernels/",
                    sizes.size()));
    // Streaming bandwidth: a copy of 256 MiB (read + write), and y += x.
    const nn::Dims big{1, 1, 1, int(top)};
    const double copy = gpuPerCall(timer, [&] {
      be.accumulate(nn::ConstTensorView{x, big}, nn::TensorView{dx, big}, 0.0f);
    });
    out.copyBandwidth = 2.0 * double(top) * sizeof(float) / copy;
    const double sum = gpuPerCall(timer, [&] {
      be.accumulate(nn::ConstTensorView{x, big}, nn::TensorView{dx, big}, 1.0f);
    });
    out.reduceBandwidth = double(top) * sizeof(float) / sum;
  }
  // The Model's cost per layer-phase call: a relu forward over one element
  // (its kernel's own time is the launch, which is what the call costs).
  {
    nn::ModelOptions mo;
    mo.backend = &be;
    nn::Model model(callOverheadNetwork(), mo);
    be.fill(model.input(1).span(), 1.0f);  // device memory: a fill kernel, not the host
    t.callOverhead = Seconds(gpuPerCall(timer, [&] { model.forward(0); }));
  }
  return out;
}

// The GEMM and the copy each sharing worker runs: an fc forward of
// 64 x 4096 x 4096 through cuBLAS (~2 GFLOP) and a copy of 16 Mi floats.
constexpr int kShareBatch = 64, kShareFeatures = 4096;
constexpr int64_t kShareCopy = int64_t{16} << 20;

// One sharing trial: `workers` threads, each with its own CudaBackend on GPU
// 0 (its own stream), run `calls` GEMMs (gemm) or copies at once; the slowest
// one's wall time from a common start to its stream's end.
double gpuSharedRun(int workers, bool gemm, int calls) {
  std::vector<std::unique_ptr<nn::CudaBackend>> backends;
  std::vector<nn::Buffer<float>> x, w, y;
  for (int i = 0; i < workers; ++i) {
    backends.push_back(std::make_unique<nn::CudaBackend>());
    auto& mem = backends.back()->memory();
    const int64_t in = gemm ? int64_t{kShareBatch} * kShareFeatures : kShareCopy;
    x.emplace_back(mem, static_cast<size_t>(in));
    w.emplace_back(mem, static_cast<size_t>(gemm ? int64_t{kShareFeatures} * kShareFeatures : 0));
    y.emplace_back(mem, static_cast<size_t>(in));
  }
  const nn::FcDesc fc{true, kShareFeatures, kShareFeatures};
  const nn::Dims xd{kShareBatch, kShareFeatures, 1, 1}, copyDims{1, 1, 1, int(kShareCopy)};
  auto work = [&](int i) {
    auto& be = *backends[size_t(i)];
    for (int c = 0; c < calls; ++c) {
      if (gemm)
        be.fcForward(fc, nn::ConstTensorView{x[size_t(i)].data(), xd}, w[size_t(i)].data(), nullptr,
                     nn::TensorView{y[size_t(i)].data(), xd});
      else
        be.accumulate(nn::ConstTensorView{x[size_t(i)].data(), copyDims},
                      nn::TensorView{y[size_t(i)].data(), copyDims}, 0.0f);
    }
    be.synchronize();
  };
  for (int i = 0; i < workers; ++i)
    work(i);  // warm-up: cuBLAS's first call sets itself up
  std::atomic<int> ready{0};
  std::vector<double> took(static_cast<size_t>(workers));
  std::vector<std::thread> pool;
  for (int i = 0; i < workers; ++i)
    pool.emplace_back([&, i] {
      ready.fetch_add(1);
      while (ready.load() < workers) {
      }
      const auto t0 = Clock::now();
      work(i);
      took[size_t(i)] = since(t0);
    });
  for (auto& t : pool)
    t.join();
  return *std::max_element(took.begin(), took.end());
}

// Speed of each of `workers` workers sharing GPU 0, relative to one alone:
// GEMMs (first) and copies (second), median of 3 trials.
std::pair<double, double> measureGpuSharing(int workers) {
  std::vector<double> g, m;
  for (int trial = 0; trial < 3; ++trial) {
    g.push_back(std::min(1.0, gpuSharedRun(1, true, 40) / gpuSharedRun(workers, true, 40)));
    m.push_back(std::min(1.0, gpuSharedRun(1, false, 200) / gpuSharedRun(workers, false, 200)));
  }
  return {median(g), median(m)};
}

// As measureOverlap on the CPU, for `workers` workers sharing GPU 0: each
// worker's compute lane runs GEMMs on its backend while its communication
// lane exchanges 4 MiB segments with its ring neighbours through the device
// communicator and sums them with the reduce-add kernel; speeds relative to
// each running alone with the same number of workers, median of 3 trials. No
// rate: the communication kernels hold their SMs for as long as they run,
// however fast the link, so the speeds hold on any link.
OverlapTrial measureGpuOverlap(int workers) {
  if (workers < 2)
    return {};
  constexpr size_t kSegment = size_t{1} << 20;  // floats
  constexpr int kExchanges = 48;
  auto run = [&](int mode) {  // 0: communication alone, 1: compute alone, 2: both
    std::vector<double> gemmRate(static_cast<size_t>(workers), 0.0),
        commTime(static_cast<size_t>(workers), 0.0);
    std::vector<std::shared_ptr<BufferOps>> ops;
    for (int i = 0; i < workers; ++i)
      ops.push_back(makeCommOps(Device::kCuda, 0));
    runLocal(
        workers,
        [&](Communicator& comm) {
          const int r = comm.rank();
          std::atomic<bool> stop{false};
          std::thread compute;
          if (mode >= 1)
            compute = std::thread([&] {
              nn::CudaBackend be;
              nn::Buffer<float> x(be.memory(), size_t(kShareBatch) * kShareFeatures),
                  w(be.memory(), size_t(kShareFeatures) * kShareFeatures),
                  y(be.memory(), size_t(kShareBatch) * kShareFeatures);
              const nn::FcDesc fc{true, kShareFeatures, kShareFeatures};
              const nn::Dims xd{kShareBatch, kShareFeatures, 1, 1};
              int done = 0;
              const auto t0 = Clock::now();
              while (mode == 2 ? !stop.load() : since(t0) < 0.1) {
                be.fcForward(fc, nn::ConstTensorView{x.data(), xd}, w.data(), nullptr,
                             nn::TensorView{y.data(), xd});
                be.synchronize();
                ++done;
              }
              gemmRate[size_t(r)] = done / since(t0);
            });
          if (mode != 1) {
            BufferOps& o = comm.ops();
            auto* out = static_cast<float*>(o.allocate(kSegment * sizeof(float)));
            auto* in = static_cast<float*>(o.allocate(kSegment * sizeof(float)));
            auto* acc = static_cast<float*>(o.allocate(kSegment * sizeof(float)));
            const int right = (r + 1) % workers, left = (r + workers - 1) % workers;
            const auto t0 = Clock::now();
            for (int i = 0; i < kExchanges; ++i) {
              comm.sendRecv(right, 1, std::span<const float>(out, kSegment), left, 1,
                            std::span<float>(in, kSegment));
              o.add(std::span<float>(acc, kSegment), std::span<const float>(in, kSegment));
            }
            commTime[size_t(r)] = since(t0);
            for (float* p : {out, in, acc})
              o.deallocate(p, kSegment * sizeof(float));
          }
          stop.store(true);
          if (compute.joinable())
            compute.join();
        },
        Seconds(Communicator::kDefaultTimeoutSeconds), ops);
    return std::pair{*std::min_element(gemmRate.begin(), gemmRate.end()),
                     *std::max_element(commTime.begin(), commTime.end())};
  };
  std::vector<double> c, m;
  for (int trial = 0; trial < 3; ++trial) {
    const double commAlone = run(0).second;
    const double gemmAlone = run(1).first;
    const auto both = run(2);
    c.push_back(std::min(1.0, both.first / gemmAlone));
    m.push_back(std::min(1.0, commAlone / both.second));
  }
  return {median(c), median(m), 0.0, {}, {}};
}

}  // namespace

std::string calibrateCuda(const CalibrationOptions& o, const std::string& where) {
  auto say = [&](const std::string& s) {
    if (o.progress)
      o.progress(s);
  };
  checkDevice(Device::kCuda, "--device");
  nn::CudaBackend be;  // FP32 arithmetic (no TF32), as `strata run --device cuda`
  const auto info = be.deviceInfo();
  say(fmt::format("device           {}, {} SMs, {}", info.name, info.multiprocessors,
                  formatBytes(Bytes(double(info.memoryBytes)))));
  const GpuTables g = measure(be, say);
  const KernelTables& t = g.tables;
  double peak = 0;
  for (const auto& r : t.gemm.rate)
    for (double x : r)
      peak = std::max(peak, x);
  // tf32 and bf16 (their peaks, efficiencies and tables), each on a backend
  // of its own.
  std::vector<PrecisionRates> precisions;
  for (auto element : {ElementType::kTf32, ElementType::kBf16})
    precisions.push_back(measurePrecision(element, say));
  const auto [h2d, d2h] = be.hostCopySeconds(size_t{256} << 20);
  const auto [h2dSmall, d2hSmall] = be.hostCopySeconds(4096);
  const double hostBw = double(size_t{256} << 20) / std::max(h2d, d2h);
  say(fmt::format("memory           {} copy, {} summed; host link {}",
                  formatBandwidth(BytesPerSecond(g.copyBandwidth)),
                  formatBandwidth(BytesPerSecond(g.reduceBandwidth)),
                  formatBandwidth(BytesPerSecond(hostBw))));

  // The device communicator between two workers on GPU 0 (device-to-device
  // copies on their own streams), as `strata run -k K --device cuda` moves
  // their data.
  std::vector<TimingSample> samples;
  runLocal(2,
           [&](Communicator& c) {
             auto s = pingPong(c);
             if (c.rank() == 0)
               samples = s;
           },
           Seconds(Communicator::kDefaultTimeoutSeconds),
           {makeCommOps(Device::kCuda, 0), makeCommOps(Device::kCuda, 0)});
  const auto link = fitLink(samples);
  say(fmt::format("link             alpha {}, beta {} (fit within {:.0f} %), two workers on GPU 0",
                  formatSeconds(link.ab.alpha), formatBandwidth(link.ab.beta),
                  100 * link.ab.maxRelativeError));
  // Workers sharing GPU 0: each with its own backend and streams.
  const auto sharing =
      measureSharingRows(o.maxWorkers, measureGpuSharing, measureGpuOverlap, say, " on GPU 0");

  std::ostringstream y;
  y << fmt::format("# GPU 0 of this machine as measured by {} --device cuda.\n", where);
  y << "# Regenerate with: strata calibrate --device cuda --out " << o.name << ".yaml\n";
  y << "name: " << o.name << "\n";
  y << fmt::format("description: {} ({} SMs), workers on GPU 0, measured by strata calibrate\n",
                   info.name, info.multiprocessors);
  y << "device:\n";
  y << "  name: " << info.name << "\n";
  y << fmt::format("  peak: {{fp32: {:.4g} GFLOP/s", peak / 1e9);
  for (const auto& p : precisions)
    y << fmt::format(", {}: {:.4g} GFLOP/s", toString(p.element), p.peak / 1e9);
  y << "}   # fp32: fastest cuBLAS SGEMM shape of the tables below (no TF32); tf32, bf16: "
       "fastest cuBLAS GEMM in that precision through the fc phases (nn, nt, tn at m = n = k = "
       "2048, 4096, 8192; bf16: bf16 operands, fp32 accumulation and result)\n";
  y << fmt::format(
      "  memory_bandwidth: {:.4g} GB/s   # device-to-device copy of 256 MiB by kernels/ "
      "(read + write), median of 3 timed groups\n",
      g.copyBandwidth / 1e9);
  y << fmt::format("  memory_capacity: {:.4g} GB   # cudaGetDeviceProperties totalGlobalMem\n",
                   double(info.memoryBytes) / 1e9);
  y << "  memory_efficiency: 1.0   # the bandwidth above is what the kernels reach\n";
  y << fmt::format(
      "  reduce_bandwidth: {:.4g} GB/s   # y += x over 256 MiB by kernels/, bytes of x "
      "per second\n",
      g.reduceBandwidth / 1e9);
  y << "  efficiency:   # roofline only (element types without tables)\n";
  y << fmt::format("    conv: {:.4g}   # cuDNN 3x3 forward, implicit GEMM 65536 x 256 x 2304\n",
                   std::clamp(2.0 * 65536 * 256 * 2304 /
                                  t.convTime(ConvPass::kFwd, 65536, 256, 2304).value() / peak,
                              1e-4, 1.0));
  y << fmt::format("    fc: {:.4g}   # nt GEMM 64 x 1024 x 1024 (an fc layer, batch 64)\n",
                   std::clamp(t.gemmRate(GemmOp::kNT, 64, 1024, 1024) / peak, 1e-4, 1.0));
  y << "    default: 0.1   # estimate: memory-bound kinds; their time comes from bandwidth\n";
  y << "  efficiency_by_element:   # fractions of each type's own peak above, measured as the "
       "fp32 ones (the model prices a type by roofline with these only where kernels.by_element "
       "has no tables of it)\n";
  for (const auto& p : precisions) {
    const auto type = std::string(toString(p.element));
    y << "    " << type << ":\n";
    y << fmt::format(
        "      conv: {:.4g}   # cuDNN 3x3 forward, implicit GEMM 65536 x 256 x 2304, {}\n",
        std::clamp(p.conv / p.peak, 1e-4, 1.0), type);
    y << fmt::format("      fc: {:.4g}   # nt GEMM 64 x 1024 x 1024 (an fc layer, batch 64), {}\n",
                     std::clamp(p.fc / p.peak, 1e-4, 1.0), type);
    y << "      default: 0.1   # estimate: memory-bound kinds; their time comes from bandwidth\n";
  }
  y << "  sharing:   # speed of each worker when this many share GPU 0, each with its own "
       "backend and streams, relative to one alone (median of 3 trials): cuBLAS fc forwards "
       "64 x 4096 x 4096 (speed) or copies of 64 MiB (memory_speed) at once; with each worker's "
       "communication lane exchanging 4 MiB segments with its ring neighbours through the device "
       "communicator and summing them while its compute lane runs those GEMMs: the compute "
       "lane's speed (overlap_compute_speed) and the exchanges' (overlap_comm_speed); "
       "lane_handoff: a host thread woken by another while this many threads run, as the "
       "executor's lanes hand tasks over\n";
  sharingRowsYaml(y, sharing);
  y << "  kernels:   # the CUDA backend's kernels, timed alone by CUDA events, " << where << "\n";
  y << "    backend: cuda   # lowering of executor/nn's CUDA backend (cuDNN, cuBLAS, kernels/)\n";
  y << fmt::format(
      "    call_overhead: {:.4g} us   # one Model layer-phase call: forward of a relu over one "
      "element, GPU time between events around it\n",
      t.callOverhead.value() * 1e6);
  y << "    gemm:   # FLOP/s of cuBLAS SGEMM through the fc phases (forward nt, backward data nn, "
       "backward weights tn), median of 3 timed groups; points over 2^34 multiply-adds or "
       "with an operand over 2^26 floats take the rate of the point with the largest "
       "dimension one step smaller\n";
  gridRowsYaml(y, "op", t.gemm, {"nn", "nt", "tn"});
  y << "    conv:   # FLOP/s of cuDNN 3x3 stride-1 pad-1 convolutions (algorithm found fastest) by "
       "implicit-GEMM shape (m = examples x positions, n = filters, k = 9 x channels), "
       "median of 3 timed groups; over the caps as gemm\n";
  gridRowsYaml(y, "pass", t.conv, {"fwd", "bwd_data", "bwd_filter"});
  y << "    by_element:   # tf32 and bf16: the same tables through the same phases in that "
       "precision (bf16: operands cast to bf16 in each call, fp32 accumulation and result), on "
       "coarser grids; the model prices those types' GEMMs and convolutions from these and "
       "every other kernel from the fp32 tables, as the backend runs it\n";
  for (const auto& p : precisions) {
    if (p.tables.gemm.empty()) {
      y << "      # " << toString(p.element) << ": " << p.missing << "\n";
      continue;
    }
    y << "      " << toString(p.element) << ":\n";
    y << "        gemm:\n";
    gridRowsYaml(y, "op", p.tables.gemm, {"nn", "nt", "tn"}, "          ");
    if (p.tables.conv.empty()) {
      y << "        # " << p.missing << "\n";
    } else {
      y << "        conv:\n";
      gridRowsYaml(y, "pass", p.tables.conv, {"fwd", "bwd_data", "bwd_filter"}, "          ");
    }
  }
  y << "    memory:   # units per call -> giga-units per second (docs/configs.md: units per "
       "kernel); kernels/ on GPU 0, median of 3 timed groups\n";
  memoryRowsYaml(y, t);
  y << "topology:\n";
  y << "  - name: gpu0-workers\n";
  y << fmt::format(
      "    group: {}   # workers sharing GPU 0 (strata run -k K --device cuda): up to the largest "
      "sharing entry\n",
      std::max(2, o.maxWorkers));
  linkYaml(y, link,
           "two workers on GPU 0 through the device communicator (cudaMemcpyAsync device to "
           "device on each worker's stream)",
           "half   # both directions are copies through the same GPU memory");
  y << fmt::format(
      "# Host link (not a level: one GPU): pinned host <-> device copy of 256 MiB, the slower "
      "direction {:.4g} GB/s (host-to-device {:.4g}, device-to-host {:.4g} GB/s, best of 5); "
      "4 KiB copy and wait {:.4g} us.\n",
      hostBw / 1e9, double(size_t{256} << 20) / h2d / 1e9, double(size_t{256} << 20) / d2h / 1e9,
      std::max(h2dSmall, d2hSmall) * 1e6);
  return y.str();
}

#else

std::string calibrateCuda(const CalibrationOptions&, const std::string&) {
  checkDevice(Device::kCuda, "--device");  // throws: built without CUDA
  return {};
}

#endif

}  // namespace strata::exec::detail

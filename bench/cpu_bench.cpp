// Where the CPU backend (strata::nn::CpuBackend) stands on this machine: each
// layer kind at the shapes of the alexnet-owt (batch 32) and resnet50 (batch
// 8) presets, forward, backward data and backward weights apart, on 1 and 2
// threads; beside them the core's single-thread GEMM ceiling (strata's own
// GEMM at 1024^3 and at the convolutions' im2col GEMM shapes) and, where they
// were found at build time, OpenBLAS's cblas_sgemm and oneDNN (dnnl_sgemm and
// its convolution, inner product, pooling, batch normalisation, eltwise and
// LRN primitives).
//
// Counters: `flops` is the closed-form count of a pass (conv: 2 * n * filters
// * outH * outW * inC/groups * kh * kw for each of fwd, bwd_data and
// bwd_weights; fc: 2 * n * in * out), per second of wall time. Memory-bound
// kinds report bytes_per_second from the bytes the strata kernel must move
// (each input read once, each output written once); oneDNN's rows use the same
// count, so the two rates compare as times.
//
// oneDNN runs as a framework would run it in steady state: its primitives
// choose their memory layouts (format `any`), the inputs are reordered into
// them from NCHW/OIHW once outside the timed loop, and the loop times the
// primitive alone. Its memory-bound primitives run on NCHW (as strata's
// kernels do) and on the blocked layout its convolutions hand them
// ("blocked"). Its threads are OpenMP's (Debian's build), set to the
// benchmark's thread count.
//
// Each row's label is the path that ran: strata's instruction set (the
// environment variable STRATA_CPU_ISA forces one) or oneDNN's implementation.
// Run on an idle machine: build/bench/cpu_bench (a few minutes); one kind:
// --benchmark_filter=Conv, one layer: --benchmark_filter=res2.1.conv2.
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <cstdint>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "strata/exec/nn/backend.h"
#include "strata/exec/nn/cpu_backend.h"
#include "strata/exec/nn/tensor.h"
#if STRATA_BENCH_HAVE_EXEC
#include "strata/exec/runtime.h"
#include "strata/model/plan.h"
#include "strata/model/presets.h"
#endif
#include "strata/model/kernels.h"
#include "strata/model/network_loader.h"

#if STRATA_BENCH_HAVE_OPENBLAS
#include <cblas.h>
// OpenBLAS's own calls (not in every cblas.h an alternatives link may pick).
extern "C" void openblas_set_num_threads(int num_threads);
extern "C" char* openblas_get_config(void);
#endif

#if STRATA_BENCH_HAVE_DNNL
#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace {

using namespace strata;
using nn::ConvDesc;
using nn::CpuBackend;
using nn::CpuOptions;
using nn::Dims;
using nn::Tensor;

// ---- shapes of the presets (`strata describe alexnet-owt`, `... resnet50`) ----

ConvDesc convDesc(int inC, int inHW, int filters, int kernel, int stride, int pad) {
  ConvDesc d;
  d.inC = inC;
  d.inH = d.inW = inHW;
  d.filters = filters;
  d.kernelH = d.kernelW = kernel;
  d.stride = stride;
  d.pad = pad;
  d.outH = d.outW = (inHW + 2 * pad - kernel) / stride + 1;
  return d;
}

struct ConvLayer {
  std::string name;  // preset.layer, as `strata describe` names it
  int batch = 0;
  ConvDesc d;
  bool bias = false;
};

std::vector<ConvLayer> convLayers() {
  return {
      {"alexnet-owt.conv1", 32, convDesc(3, 224, 64, 11, 4, 2), true},       // -> 64x55x55
      {"alexnet-owt.conv2", 32, convDesc(64, 27, 192, 5, 1, 2), true},       // -> 192x27x27
      {"alexnet-owt.conv3", 32, convDesc(192, 13, 384, 3, 1, 1), true},      // -> 384x13x13
      {"resnet50.conv1", 8, convDesc(3, 224, 64, 7, 2, 3), false},           // -> 64x112x112
      {"resnet50.res2.1.conv2", 8, convDesc(64, 56, 64, 3, 1, 1), false},    // -> 64x56x56
      {"resnet50.res2.1.conv3", 8, convDesc(64, 56, 256, 1, 1, 0), false},   // -> 256x56x56
      {"resnet50.res4.2.conv2", 8, convDesc(256, 14, 256, 3, 1, 1), false},  // -> 256x14x14
  };
}

double convFlops(const ConvLayer& l) {
  const ConvDesc& d = l.d;
  return 2.0 * l.batch * d.filters * d.outH * d.outW * (d.inC / d.groups) * d.kernelH * d.kernelW;
}

// alexnet-owt's fc6: pool5's 256x6x6 (flattened, 9216) -> 4096.
struct FcLayer {
  std::string name;
  int batch = 0;
  Dims in;  // per example: c, h, w (n ignored)
  int outputs = 0;
};
const FcLayer kFc6{"alexnet-owt.fc6", 32, Dims{1, 256, 6, 6}, 4096};

double fcFlops(const FcLayer& l) {
  return 2.0 * l.batch * static_cast<double>(l.in.perExample()) * l.outputs;
}

// Memory-bound layers: their input per batch.
struct MemLayer {
  std::string name;
  Dims x;
};
const MemLayer kBatchNorm{"resnet50.res2.1.bn3", Dims{8, 256, 56, 56}};
const MemLayer kRelu{"resnet50.res2.1.relu", Dims{8, 256, 56, 56}};
const MemLayer kLrn{"alexnet-owt.lrn1", Dims{32, 64, 55, 55}};
// Dropout on fc outputs (alexnet-owt's drop6: 4096 neurons, plane 1) and on a
// transformer's activations (tiny-gpt's h.1.drop1 at batch 32: width 64 over
// 32 positions): the same element count per example shape would cost the same.
const MemLayer kDropFc{"alexnet-owt.drop6", Dims{32, 4096, 1, 1}};
const MemLayer kDropSeq{"tiny-gpt.h.1.drop1", Dims{32, 64, 32, 1}};
// resnet50's pool1: 3x3 max, stride 2, pad 1, 64x112x112 -> 64x56x56.
const MemLayer kPool{"resnet50.pool1", Dims{8, 64, 112, 112}};

nn::PoolDesc poolDesc() {
  nn::PoolDesc d;
  d.mode = PoolMode::kMax;
  d.c = kPool.x.c;
  d.inH = kPool.x.h;
  d.inW = kPool.x.w;
  d.kernelH = d.kernelW = 3;
  d.stride = 2;
  d.pad = 1;
  d.outH = (d.inH + 2 * d.pad - d.kernelH) / d.stride + 1;
  d.outW = (d.inW + 2 * d.pad - d.kernelW) / d.stride + 1;
  return d;
}

constexpr float kBatchNormEps = 1e-5f;
constexpr double kFloat = sizeof(float);

enum class Pass { kFwd, kBwdData, kBwdWeights };

const char* passName(Pass p) {
  switch (p) {
    case Pass::kFwd:
      return "fwd";
    case Pass::kBwdData:
      return "bwd_data";
    case Pass::kBwdWeights:
      return "bwd_weights";
  }
  return "?";
}

constexpr Pass kAllPasses[] = {Pass::kFwd, Pass::kBwdData, Pass::kBwdWeights};

// ---- helpers ---------------------------------------------------------------------

// Uniform values in [-1, 1), the same for a given seed (no denormals, half of
// them negative for relu and max pooling to choose between).
void fillRandom(float* x, int64_t count, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (int64_t i = 0; i < count; ++i)
    x[i] = u(gen);
}

Tensor randomTensor(Dims dims, uint32_t seed) {
  Tensor t(dims);
  fillRandom(t.data(), t.elements(), seed);
  return t;
}

// Runs `run` once (scratch sizing, first-touch, a library's first-execution
// costs), then times it.
template <class F>
void timeLoop(benchmark::State& state, F&& run) {
  run();
  for (auto _ : state) {
    run();
    benchmark::ClobberMemory();
  }
}

void setFlops(benchmark::State& state, double flops) {
  state.counters["flops"] =
      benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate);
}

void setBytes(benchmark::State& state, double bytes) {
  state.SetBytesProcessed(static_cast<int64_t>(bytes) * state.iterations());
}

int threadsArg(const benchmark::State& state) {
  return static_cast<int>(state.range(0));
}

// Every layer benchmark: threads 1 and 2, wall time (the kernels run on
// several threads; a rate counter divides by wall time only with UseRealTime).
void registerLayer(const std::string& name, std::function<void(benchmark::State&)> fn) {
  benchmark::RegisterBenchmark(name.c_str(), std::move(fn))
      ->ArgName("threads")
      ->Arg(1)
      ->Arg(2)
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
}

// ---- GEMM ceiling: C (m x n) = A (m x k) B (k x n), row-major, one thread -----------

const std::vector<std::vector<int64_t>> kGemmShapes = {
    {1024, 1024, 1024},
    {64, 3025, 363},   // alexnet-owt.conv1 per example: filters x outH*outW x inC*kh*kw
    {192, 729, 1600},  // alexnet-owt.conv2
    {384, 169, 1728},  // alexnet-owt.conv3
    {64, 12544, 147},  // resnet50.conv1
    {64, 3136, 576},   // resnet50.res2.1.conv2
    {256, 3136, 64},   // resnet50.res2.1.conv3
    {256, 784, 1152},  // a 3x3 256-filter GEMM on 28x28
    {256, 196, 2304},  // resnet50.res4.2.conv2
    {4096, 32, 9216},  // alexnet-owt.fc6 (weights x batch)
};

struct GemmOperands {
  int m, n, k;
  std::vector<float> a, b, c;
  explicit GemmOperands(const benchmark::State& state)
      : m(static_cast<int>(state.range(0))),
        n(static_cast<int>(state.range(1))),
        k(static_cast<int>(state.range(2))),
        a(static_cast<size_t>(m) * k),
        b(static_cast<size_t>(k) * n),
        c(static_cast<size_t>(m) * n) {
    fillRandom(a.data(), static_cast<int64_t>(a.size()), 1);
    fillRandom(b.data(), static_cast<int64_t>(b.size()), 2);
  }
  double flops() const { return 2.0 * m * n * k; }
};

void registerGemm(const char* name, void (*fn)(benchmark::State&)) {
  auto* b = benchmark::RegisterBenchmark(name, fn)
                ->ArgNames({"m", "n", "k"})
                ->UseRealTime()
                ->Unit(benchmark::kMillisecond);
  for (const auto& s : kGemmShapes)
    b->Args(s);
}

void BM_Sgemm_strata(benchmark::State& state) {
  GemmOperands g(state);
  timeLoop(state, [&] {
    CpuBackend::gemm(GemmOp::kNN, g.m, g.n, g.k, g.a.data(), g.b.data(), g.c.data(), false);
  });
  setFlops(state, g.flops());
  state.SetLabel(std::string(nn::cpuIsaName(nn::selectedCpuIsa())));
}

#if STRATA_BENCH_HAVE_OPENBLAS
void BM_Sgemm_openblas(benchmark::State& state) {
  GemmOperands g(state);
  openblas_set_num_threads(1);
  timeLoop(state, [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, g.m, g.n, g.k, 1.0f, g.a.data(), g.k,
                g.b.data(), g.n, 0.0f, g.c.data(), g.n);
  });
  setFlops(state, g.flops());
}
#endif

// ---- strata: CpuBackend at the layers' shapes ----------------------------------------

void strataConv(benchmark::State& state, const ConvLayer& l, Pass pass) {
  CpuBackend cpu(CpuOptions{threadsArg(state)});
  const ConvDesc& d = l.d;
  const Dims wDims{d.filters, d.inC / d.groups, d.kernelH, d.kernelW};
  Tensor x = randomTensor(Dims{l.batch, d.inC, d.inH, d.inW}, 1);
  Tensor y = randomTensor(Dims{l.batch, d.filters, d.outH, d.outW}, 2);  // y, or dy
  Tensor w = randomTensor(wDims, 3);
  Tensor bias = randomTensor(Dims{1, d.filters, 1, 1}, 4);
  Tensor dw(wDims), dbias(Dims{1, d.filters, 1, 1});
  timeLoop(state, [&] {
    switch (pass) {
      case Pass::kFwd:
        cpu.convForward(d, x.view(), w.data(), l.bias ? bias.data() : nullptr, y.view());
        break;
      case Pass::kBwdData:
        cpu.convBackwardData(d, y.view(), w.data(), x.view(), 0.0f);
        break;
      case Pass::kBwdWeights:
        cpu.convBackwardWeights(d, x.view(), y.view(), dw.data(), l.bias ? dbias.data() : nullptr);
        break;
    }
  });
  setFlops(state, convFlops(l));
  state.SetLabel(std::string(nn::cpuIsaName(cpu.isa())));
}

void strataFc(benchmark::State& state, const FcLayer& l, Pass pass) {
  CpuBackend cpu(CpuOptions{threadsArg(state)});
  nn::FcDesc d;
  d.flatten = true;
  d.inFeatures = static_cast<int>(l.in.perExample());
  d.outputs = l.outputs;
  const Dims wDims{l.outputs, d.inFeatures, 1, 1};
  Tensor x = randomTensor(Dims{l.batch, l.in.c, l.in.h, l.in.w}, 1);
  Tensor y = randomTensor(Dims{l.batch, l.outputs, 1, 1}, 2);  // y, or dy
  Tensor w = randomTensor(wDims, 3);
  Tensor bias = randomTensor(Dims{1, l.outputs, 1, 1}, 4);
  Tensor dw(wDims), dbias(Dims{1, l.outputs, 1, 1});
  timeLoop(state, [&] {
    switch (pass) {
      case Pass::kFwd:
        cpu.fcForward(d, x.view(), w.data(), bias.data(), y.view());
        break;
      case Pass::kBwdData:
        cpu.fcBackwardData(d, y.view(), w.data(), x.view(), 0.0f);
        break;
      case Pass::kBwdWeights:
        cpu.fcBackwardWeights(d, x.view(), y.view(), dw.data(), dbias.data());
        break;
    }
  });
  setFlops(state, fcFlops(l));
  state.SetLabel(std::string(nn::cpuIsaName(cpu.isa())));
}

// Batch normalisation, training mode. Bytes per element: fwd reads x and writes
// y (8); bwd_data reads x and dy and writes dx (12); bwd_weights reads x and
// dy (8). The per-channel statistics and parameters are too small to count.
void strataBatchNorm(benchmark::State& state, Pass pass) {
  CpuBackend cpu(CpuOptions{threadsArg(state)});
  const Dims dims = kBatchNorm.x;
  const Dims perChannel{1, dims.c, 1, 1};
  Tensor x = randomTensor(dims, 1), y = randomTensor(dims, 2), dy = randomTensor(dims, 3);
  Tensor gamma = randomTensor(perChannel, 4), shift = randomTensor(perChannel, 5);
  Tensor dgamma(perChannel), dshift(perChannel);
  timeLoop(state, [&] {
    switch (pass) {
      case Pass::kFwd:
        cpu.batchNormForward(x.view(), gamma.data(), shift.data(), kBatchNormEps, y.view());
        break;
      case Pass::kBwdData:
        cpu.batchNormBackwardData(x.view(), dy.view(), gamma.data(), kBatchNormEps, y.view(), 0.0f);
        break;
      case Pass::kBwdWeights:
        cpu.batchNormBackwardWeights(x.view(), dy.view(), kBatchNormEps, dgamma.data(),
                                     dshift.data());
        break;
    }
  });
  setBytes(state, (pass == Pass::kBwdData ? 3 : 2) * kFloat * static_cast<double>(dims.elements()));
  state.SetLabel(std::string(nn::cpuIsaName(cpu.isa())));
}

// Max pooling: fwd reads x and writes y and the argmax (int32); bwd reads dy
// and the argmax and writes dx.
double poolBytes() {
  const nn::PoolDesc d = poolDesc();
  const double in = static_cast<double>(kPool.x.elements());
  const double out = static_cast<double>(kPool.x.n) * d.c * d.outH * d.outW;
  return kFloat * (in + 2 * out);
}

void strataPool(benchmark::State& state, Pass pass) {
  CpuBackend cpu(CpuOptions{threadsArg(state)});
  const nn::PoolDesc d = poolDesc();
  const Dims outDims{kPool.x.n, d.c, d.outH, d.outW};
  Tensor x = randomTensor(kPool.x, 1), y(outDims), dy = randomTensor(outDims, 2);
  std::vector<int32_t> argmax(static_cast<size_t>(outDims.elements()));
  cpu.poolForward(d, x.view(), y.view(), argmax.data());
  timeLoop(state, [&] {
    if (pass == Pass::kFwd)
      cpu.poolForward(d, x.view(), y.view(), argmax.data());
    else
      cpu.poolBackward(d, dy.view(), argmax.data(), x.view(), 0.0f);
  });
  setBytes(state, poolBytes());
  state.SetLabel(std::string(nn::cpuIsaName(cpu.isa())));
}

// relu: fwd reads x and writes y (8 bytes per element); bwd reads y and dy and
// writes dx (12).
void strataRelu(benchmark::State& state, Pass pass) {
  CpuBackend cpu(CpuOptions{threadsArg(state)});
  const Dims dims = kRelu.x;
  Tensor x = randomTensor(dims, 1), y(dims), dy = randomTensor(dims, 2);
  cpu.reluForward(x.view(), y.view());
  timeLoop(state, [&] {
    if (pass == Pass::kFwd)
      cpu.reluForward(x.view(), y.view());
    else
      cpu.reluBackward(y.view(), dy.view(), x.view(), 0.0f);
  });
  setBytes(state, (pass == Pass::kFwd ? 2 : 3) * kFloat * static_cast<double>(dims.elements()));
  state.SetLabel(std::string(nn::cpuIsaName(cpu.isa())));
}

// dropout (rate 0.5, a counter-based mask per element): fwd reads x and
// writes y (8 bytes per element); bwd reads dy and writes dx (8).
void strataDropout(benchmark::State& state, const MemLayer& l, Pass pass) {
  CpuBackend cpu(CpuOptions{threadsArg(state)});
  const Dims dims = l.x;
  Tensor x = randomTensor(dims, 1), y(dims);
  nn::DropoutDesc d;
  d.totalChannels = dims.c;
  timeLoop(state, [&] {
    if (pass == Pass::kFwd)
      cpu.dropoutForward(d, x.view(), y.view());
    else
      cpu.dropoutBackward(d, x.view(), y.view(), 0.0f);
  });
  setBytes(state, 2 * kFloat * static_cast<double>(dims.elements()));
  state.SetLabel(std::string(nn::cpuIsaName(cpu.isa())));
}

// LRN (alexnet-owt's size 5): fwd reads x and writes y and the scale (12 bytes
// per element); bwd reads x, y, scale and dy and writes dx (20).
void strataLrn(benchmark::State& state, Pass pass) {
  CpuBackend cpu(CpuOptions{threadsArg(state)});
  const Dims dims = kLrn.x;
  const nn::LrnDesc d;
  Tensor x = randomTensor(dims, 1), y(dims), scale(dims), dy = randomTensor(dims, 2), dx(dims);
  cpu.lrnForward(d, x.view(), y.view(), scale.view());
  timeLoop(state, [&] {
    if (pass == Pass::kFwd)
      cpu.lrnForward(d, x.view(), y.view(), scale.view());
    else
      cpu.lrnBackward(d, x.view(), y.view(), scale.view(), dy.view(), dx.view(), 0.0f);
  });
  setBytes(state, (pass == Pass::kFwd ? 3 : 5) * kFloat * static_cast<double>(dims.elements()));
  state.SetLabel(std::string(nn::cpuIsaName(cpu.isa())));
}

// ---- oneDNN ------------------------------------------------------------------------------

#if STRATA_BENCH_HAVE_DNNL
namespace dnn {

using dnnl::algorithm;
using dnnl::memory;
using dnnl::prop_kind;
using Args = std::unordered_map<int, memory>;
using Tag = memory::format_tag;
constexpr auto kF32 = memory::data_type::f32;

dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

// oneDNN's thread count for the calls that follow on this thread.
bool setThreads([[maybe_unused]] benchmark::State& state, int threads) {
#if DNNL_CPU_THREADING_RUNTIME == DNNL_RUNTIME_OMP
  omp_set_num_threads(threads);
  return true;
#else
  if (threads == 1 && DNNL_CPU_THREADING_RUNTIME == DNNL_RUNTIME_SEQ)
    return true;
  state.SkipWithError("this oneDNN does not thread with OpenMP: the bench cannot set its threads");
  return false;
#endif
}

memory::desc anyDesc(const memory::dims& dims) {
  return {dims, kF32, Tag::any};
}

// A memory of layout `want` holding pseudo-random values: written in the
// plain layout `plain` and reordered (outside any timed loop).
memory filled(const memory::desc& want, Tag plain, dnnl::stream& s, uint32_t seed) {
  memory user({want.dims(), kF32, plain}, engine());
  fillRandom(static_cast<float*>(user.get_data_handle()),
             static_cast<int64_t>(user.get_desc().get_size() / sizeof(float)), seed);
  if (user.get_desc() == want)
    return user;
  memory m(want, engine());
  dnnl::reorder(user, m).execute(s, user, m);
  s.wait();
  return m;
}

// Runs a oneDNN benchmark; a oneDNN error (a shape or layout this build has
// no primitive for) skips it with the message.
template <class F>
void guarded(benchmark::State& state, F&& body) {
  try {
    body();
  } catch (const dnnl::error& e) {
    state.SkipWithError(e.what());
  }
}

// Times `prim` on `args`, waiting for the stream each iteration.
void timePrimitive(benchmark::State& state, const dnnl::primitive& prim, const Args& args,
                   dnnl::stream& s, const char* impl) {
  timeLoop(state, [&] {
    prim.execute(s, args);
    s.wait();
  });
  state.SetLabel(impl);
}

void BM_Sgemm_onednn(benchmark::State& state) {
  GemmOperands g(state);
  omp_set_num_threads(1);
  const auto sgemm = [&] {
    return dnnl_sgemm('N', 'N', g.m, g.n, g.k, 1.0f, g.a.data(), g.k, g.b.data(), g.n, 0.0f,
                      g.c.data(), g.n);
  };
  if (sgemm() != dnnl_success) {
    state.SkipWithError("dnnl_sgemm failed");
    return;
  }
  timeLoop(state, sgemm);
  setFlops(state, g.flops());
}

// The right padding that gives exactly `out` outputs (oneDNN checks it; strata
// floors the division, so its right padding may be less than `pad`).
memory::dim padRight(int in, int out, int kernel, int stride, int pad) {
  return memory::dim{out - 1} * stride + kernel - in - pad;
}

void conv(benchmark::State& state, const ConvLayer& l, Pass pass) {
  if (!setThreads(state, threadsArg(state)))
    return;
  dnnl::stream s(engine());
  const ConvDesc& d = l.d;
  const memory::dims src{l.batch, d.inC, d.inH, d.inW};
  const memory::dims wei{d.filters, d.inC, d.kernelH, d.kernelW};
  const memory::dims bia{d.filters};
  const memory::dims dst{l.batch, d.filters, d.outH, d.outW};
  const memory::dims strides{d.stride, d.stride};
  const memory::dims padL{d.pad, d.pad};
  const memory::dims padR{padRight(d.inH, d.outH, d.kernelH, d.stride, d.pad),
                          padRight(d.inW, d.outW, d.kernelW, d.stride, d.pad)};
  using dnnl::convolution_forward;
  const auto fwdDesc =
      l.bias ? convolution_forward::desc(prop_kind::forward_training, algorithm::convolution_direct,
                                         anyDesc(src), anyDesc(wei), anyDesc(bia), anyDesc(dst),
                                         strides, padL, padR)
             : convolution_forward::desc(prop_kind::forward_training, algorithm::convolution_direct,
                                         anyDesc(src), anyDesc(wei), anyDesc(dst), strides, padL,
                                         padR);
  const convolution_forward::primitive_desc fwd(fwdDesc, engine());
  Args args;
  dnnl::primitive prim;
  std::string impl;
  switch (pass) {
    case Pass::kFwd: {
      args = {{DNNL_ARG_SRC, filled(fwd.src_desc(), Tag::nchw, s, 1)},
              {DNNL_ARG_WEIGHTS, filled(fwd.weights_desc(), Tag::oihw, s, 3)},
              {DNNL_ARG_DST, memory(fwd.dst_desc(), engine())}};
      if (l.bias)
        args[DNNL_ARG_BIAS] = filled(fwd.bias_desc(), Tag::x, s, 4);
      prim = convolution_forward(fwd);
      impl = fwd.impl_info_str();
      break;
    }
    case Pass::kBwdData: {
      using dnnl::convolution_backward_data;
      const convolution_backward_data::primitive_desc pd(
          convolution_backward_data::desc(algorithm::convolution_direct, anyDesc(src), anyDesc(wei),
                                          anyDesc(dst), strides, padL, padR),
          engine(), fwd);
      args = {{DNNL_ARG_DIFF_DST, filled(pd.diff_dst_desc(), Tag::nchw, s, 2)},
              {DNNL_ARG_WEIGHTS, filled(pd.weights_desc(), Tag::oihw, s, 3)},
              {DNNL_ARG_DIFF_SRC, memory(pd.diff_src_desc(), engine())}};
      prim = convolution_backward_data(pd);
      impl = pd.impl_info_str();
      break;
    }
    case Pass::kBwdWeights: {
      using dnnl::convolution_backward_weights;
      const auto desc =
          l.bias
              ? convolution_backward_weights::desc(algorithm::convolution_direct, anyDesc(src),
                                                   anyDesc(wei), anyDesc(bia), anyDesc(dst),
                                                   strides, padL, padR)
              : convolution_backward_weights::desc(algorithm::convolution_direct, anyDesc(src),
                                                   anyDesc(wei), anyDesc(dst), strides, padL, padR);
      const convolution_backward_weights::primitive_desc pd(desc, engine(), fwd);
      args = {{DNNL_ARG_SRC, filled(pd.src_desc(), Tag::nchw, s, 1)},
              {DNNL_ARG_DIFF_DST, filled(pd.diff_dst_desc(), Tag::nchw, s, 2)},
              {DNNL_ARG_DIFF_WEIGHTS, memory(pd.diff_weights_desc(), engine())}};
      if (l.bias)
        args[DNNL_ARG_DIFF_BIAS] = memory(pd.diff_bias_desc(), engine());
      prim = convolution_backward_weights(pd);
      impl = pd.impl_info_str();
      break;
    }
  }
  timePrimitive(state, prim, args, s, impl.c_str());
  setFlops(state, convFlops(l));
}

void fc(benchmark::State& state, const FcLayer& l, Pass pass) {
  if (!setThreads(state, threadsArg(state)))
    return;
  dnnl::stream s(engine());
  const memory::dims src{l.batch, l.in.c, l.in.h, l.in.w};
  const memory::dims wei{l.outputs, l.in.c, l.in.h, l.in.w};
  const memory::dims bia{l.outputs};
  const memory::dims dst{l.batch, l.outputs};
  using dnnl::inner_product_forward;
  const inner_product_forward::primitive_desc fwd(
      inner_product_forward::desc(prop_kind::forward_training, anyDesc(src), anyDesc(wei),
                                  anyDesc(bia), anyDesc(dst)),
      engine());
  Args args;
  dnnl::primitive prim;
  std::string impl;
  switch (pass) {
    case Pass::kFwd: {
      args = {{DNNL_ARG_SRC, filled(fwd.src_desc(), Tag::nchw, s, 1)},
              {DNNL_ARG_WEIGHTS, filled(fwd.weights_desc(), Tag::oihw, s, 3)},
              {DNNL_ARG_BIAS, filled(fwd.bias_desc(), Tag::x, s, 4)},
              {DNNL_ARG_DST, memory(fwd.dst_desc(), engine())}};
      prim = inner_product_forward(fwd);
      impl = fwd.impl_info_str();
      break;
    }
    case Pass::kBwdData: {
      using dnnl::inner_product_backward_data;
      const inner_product_backward_data::primitive_desc pd(
          inner_product_backward_data::desc(anyDesc(src), anyDesc(wei), anyDesc(dst)), engine(),
          fwd);
      args = {{DNNL_ARG_DIFF_DST, filled(pd.diff_dst_desc(), Tag::nc, s, 2)},
              {DNNL_ARG_WEIGHTS, filled(pd.weights_desc(), Tag::oihw, s, 3)},
              {DNNL_ARG_DIFF_SRC, memory(pd.diff_src_desc(), engine())}};
      prim = inner_product_backward_data(pd);
      impl = pd.impl_info_str();
      break;
    }
    case Pass::kBwdWeights: {
      using dnnl::inner_product_backward_weights;
      const inner_product_backward_weights::primitive_desc pd(
          inner_product_backward_weights::desc(anyDesc(src), anyDesc(wei), anyDesc(bia),
                                               anyDesc(dst)),
          engine(), fwd);
      args = {{DNNL_ARG_SRC, filled(pd.src_desc(), Tag::nchw, s, 1)},
              {DNNL_ARG_DIFF_DST, filled(pd.diff_dst_desc(), Tag::nc, s, 2)},
              {DNNL_ARG_DIFF_WEIGHTS, memory(pd.diff_weights_desc(), engine())},
              {DNNL_ARG_DIFF_BIAS, memory(pd.diff_bias_desc(), engine())}};
      prim = inner_product_backward_weights(pd);
      impl = pd.impl_info_str();
      break;
    }
  }
  timePrimitive(state, prim, args, s, impl.c_str());
  setFlops(state, fcFlops(l));
}

// The layouts the memory-bound primitives run on: NCHW, as strata's kernels,
// or the blocked layout oneDNN's own convolutions hand a layer of these
// dimensions (that of a 1x1 convolution c -> c; nChw16c with AVX-512).
enum class Layout { kNchw, kBlocked };

const char* layoutName(Layout l) {
  return l == Layout::kNchw ? "nchw" : "blocked";
}

memory::desc activationDesc(const Dims& x, Layout layout) {
  const memory::dims dims{x.n, x.c, x.h, x.w};
  if (layout == Layout::kNchw)
    return {dims, kF32, Tag::nchw};
  const dnnl::convolution_forward::primitive_desc pd(
      dnnl::convolution_forward::desc(prop_kind::forward_training, algorithm::convolution_direct,
                                      anyDesc(dims), anyDesc({x.c, x.c, 1, 1}), anyDesc(dims),
                                      {1, 1}, {0, 0}, {0, 0}),
      engine());
  return pd.dst_desc();
}

// A memory of desc `md` holding pseudo-random values (written as NCHW).
memory randomActivation(const memory::desc& md, dnnl::stream& s, uint32_t seed) {
  return filled(md, Tag::nchw, s, seed);
}

// Batch normalisation, training mode, with scale and shift. oneDNN's bwd
// computes dx, dscale and dshift at once (strata's bwd_data and bwd_weights
// together); its bytes are counted as strata's bwd_data (x, dy read; dx written).
void batchNorm(benchmark::State& state, Pass pass, Layout layout) {
  if (!setThreads(state, threadsArg(state)))
    return;
  dnnl::stream s(engine());
  const Dims dims = kBatchNorm.x;
  const memory::desc md = activationDesc(dims, layout);
  const memory::desc perChannel({dims.c}, kF32, Tag::x);
  const auto flags = dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift;
  using dnnl::batch_normalization_forward;
  const batch_normalization_forward::primitive_desc fwd(
      batch_normalization_forward::desc(prop_kind::forward_training, md, kBatchNormEps, flags),
      engine());
  const memory x = randomActivation(md, s, 1);
  Args fwdArgs = {{DNNL_ARG_SRC, x},
                  {DNNL_ARG_DST, memory(fwd.dst_desc(), engine())},
                  {DNNL_ARG_SCALE, filled(perChannel, Tag::x, s, 4)},
                  {DNNL_ARG_SHIFT, filled(perChannel, Tag::x, s, 5)},
                  {DNNL_ARG_MEAN, memory(fwd.mean_desc(), engine())},
                  {DNNL_ARG_VARIANCE, memory(fwd.variance_desc(), engine())}};
  const batch_normalization_forward fwdPrim(fwd);
  fwdPrim.execute(s, fwdArgs);  // the statistics bwd reads
  s.wait();
  if (pass == Pass::kFwd) {
    timePrimitive(state, fwdPrim, fwdArgs, s, fwd.impl_info_str());
    setBytes(state, 2 * kFloat * static_cast<double>(dims.elements()));
    return;
  }
  using dnnl::batch_normalization_backward;
  const batch_normalization_backward::primitive_desc pd(
      batch_normalization_backward::desc(prop_kind::backward, md, md, kBatchNormEps, flags),
      engine(), fwd);
  const Args args = {{DNNL_ARG_SRC, x},
                     {DNNL_ARG_MEAN, fwdArgs[DNNL_ARG_MEAN]},
                     {DNNL_ARG_VARIANCE, fwdArgs[DNNL_ARG_VARIANCE]},
                     {DNNL_ARG_SCALE, fwdArgs[DNNL_ARG_SCALE]},
                     {DNNL_ARG_SHIFT, fwdArgs[DNNL_ARG_SHIFT]},  // 2.6's NCHW bwd wants it
                     {DNNL_ARG_DIFF_DST, randomActivation(pd.diff_dst_desc(), s, 2)},
                     {DNNL_ARG_DIFF_SRC, memory(pd.diff_src_desc(), engine())},
                     {DNNL_ARG_DIFF_SCALE, memory(perChannel, engine())},
                     {DNNL_ARG_DIFF_SHIFT, memory(perChannel, engine())}};
  timePrimitive(state, batch_normalization_backward(pd), args, s, pd.impl_info_str());
  setBytes(state, 3 * kFloat * static_cast<double>(dims.elements()));
}

void pool(benchmark::State& state, Pass pass, Layout layout) {
  if (!setThreads(state, threadsArg(state)))
    return;
  dnnl::stream s(engine());
  const nn::PoolDesc d = poolDesc();
  const memory::desc src = activationDesc(kPool.x, layout);
  const memory::dims dst{kPool.x.n, d.c, d.outH, d.outW};
  const memory::dims strides{d.stride, d.stride}, kernel{d.kernelH, d.kernelW};
  const memory::dims padL{d.pad, d.pad};
  const memory::dims padR{padRight(d.inH, d.outH, d.kernelH, d.stride, d.pad),
                          padRight(d.inW, d.outW, d.kernelW, d.stride, d.pad)};
  using dnnl::pooling_forward;
  const pooling_forward::primitive_desc fwd(
      pooling_forward::desc(prop_kind::forward_training, algorithm::pooling_max, src, anyDesc(dst),
                            strides, kernel, padL, padR),
      engine());
  const Args fwdArgs = {{DNNL_ARG_SRC, randomActivation(src, s, 1)},
                        {DNNL_ARG_DST, memory(fwd.dst_desc(), engine())},
                        {DNNL_ARG_WORKSPACE, memory(fwd.workspace_desc(), engine())}};
  const pooling_forward fwdPrim(fwd);
  fwdPrim.execute(s, fwdArgs);  // the workspace (argmax) bwd reads
  s.wait();
  if (pass == Pass::kFwd) {
    timePrimitive(state, fwdPrim, fwdArgs, s, fwd.impl_info_str());
  } else {
    using dnnl::pooling_backward;
    const pooling_backward::primitive_desc pd(
        pooling_backward::desc(algorithm::pooling_max, src, fwd.dst_desc(), strides, kernel, padL,
                               padR),
        engine(), fwd);
    const Args args = {{DNNL_ARG_DIFF_DST, randomActivation(pd.diff_dst_desc(), s, 2)},
                       {DNNL_ARG_WORKSPACE, fwdArgs.at(DNNL_ARG_WORKSPACE)},
                       {DNNL_ARG_DIFF_SRC, memory(pd.diff_src_desc(), engine())}};
    timePrimitive(state, pooling_backward(pd), args, s, pd.impl_info_str());
  }
  setBytes(state, poolBytes());
}

// relu with the gradient from y, as strata's.
void relu(benchmark::State& state, Pass pass, Layout layout) {
  if (!setThreads(state, threadsArg(state)))
    return;
  dnnl::stream s(engine());
  const Dims dims = kRelu.x;
  const memory::desc md = activationDesc(dims, layout);
  const algorithm alg = algorithm::eltwise_relu_use_dst_for_bwd;
  using dnnl::eltwise_forward;
  const eltwise_forward::primitive_desc fwd(
      eltwise_forward::desc(prop_kind::forward_training, alg, md, 0.0f), engine());
  const Args fwdArgs = {{DNNL_ARG_SRC, randomActivation(md, s, 1)},
                        {DNNL_ARG_DST, memory(fwd.dst_desc(), engine())}};
  const eltwise_forward fwdPrim(fwd);
  fwdPrim.execute(s, fwdArgs);
  s.wait();
  if (pass == Pass::kFwd) {
    timePrimitive(state, fwdPrim, fwdArgs, s, fwd.impl_info_str());
    setBytes(state, 2 * kFloat * static_cast<double>(dims.elements()));
    return;
  }
  using dnnl::eltwise_backward;
  const eltwise_backward::primitive_desc pd(eltwise_backward::desc(alg, md, fwd.dst_desc(), 0.0f),
                                            engine(), fwd);
  const Args args = {{DNNL_ARG_DST, fwdArgs.at(DNNL_ARG_DST)},
                     {DNNL_ARG_DIFF_DST, randomActivation(pd.diff_dst_desc(), s, 2)},
                     {DNNL_ARG_DIFF_SRC, memory(pd.diff_src_desc(), engine())}};
  timePrimitive(state, eltwise_backward(pd), args, s, pd.impl_info_str());
  setBytes(state, 3 * kFloat * static_cast<double>(dims.elements()));
}

// LRN across channels with strata's constants; oneDNN divides alpha by the
// size and strata does not, so oneDNN gets alpha * size (the same function).
void lrn(benchmark::State& state, Pass pass, Layout layout) {
  if (!setThreads(state, threadsArg(state)))
    return;
  dnnl::stream s(engine());
  const Dims dims = kLrn.x;
  const nn::LrnDesc l;
  const memory::desc md = activationDesc(dims, layout);
  const algorithm alg = algorithm::lrn_across_channels;
  const float alpha = l.alpha * static_cast<float>(l.size);
  using dnnl::lrn_forward;
  const lrn_forward::primitive_desc fwd(
      lrn_forward::desc(prop_kind::forward_training, alg, md, l.size, alpha, l.beta, l.k),
      engine());
  const memory x = randomActivation(md, s, 1);
  const Args fwdArgs = {{DNNL_ARG_SRC, x},
                        {DNNL_ARG_DST, memory(fwd.dst_desc(), engine())},
                        {DNNL_ARG_WORKSPACE, memory(fwd.workspace_desc(), engine())}};
  const lrn_forward fwdPrim(fwd);
  fwdPrim.execute(s, fwdArgs);
  s.wait();
  if (pass == Pass::kFwd) {
    timePrimitive(state, fwdPrim, fwdArgs, s, fwd.impl_info_str());
    setBytes(state, 3 * kFloat * static_cast<double>(dims.elements()));
    return;
  }
  using dnnl::lrn_backward;
  const lrn_backward::primitive_desc pd(lrn_backward::desc(alg, md, md, l.size, alpha, l.beta, l.k),
                                        engine(), fwd);
  const Args args = {{DNNL_ARG_SRC, x},
                     {DNNL_ARG_DIFF_DST, randomActivation(pd.diff_dst_desc(), s, 2)},
                     {DNNL_ARG_WORKSPACE, fwdArgs.at(DNNL_ARG_WORKSPACE)},
                     {DNNL_ARG_DIFF_SRC, memory(pd.diff_src_desc(), engine())}};
  timePrimitive(state, lrn_backward(pd), args, s, pd.impl_info_str());
  setBytes(state, 5 * kFloat * static_cast<double>(dims.elements()));
}

std::string version() {
  const dnnl_version_t* v = dnnl_version();
  return std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
}

}  // namespace dnn
#endif

// ---- registration: per layer and pass, strata's rows then oneDNN's ------------------

// A memory-bound kind: strata's passes, then oneDNN's fwd and bwd (named
// `dnnlBwd`: "bwd_data", or "bwd" where oneDNN's pass also makes the weight
// gradients) in both layouts.
template <class StrataFn, class DnnlFn>
void registerMemoryBound(const std::string& kind, const std::string& layer,
                         const std::vector<Pass>& strataPasses,
                         [[maybe_unused]] const std::string& dnnlBwd, StrataFn strataFn,
                         [[maybe_unused]] DnnlFn dnnlFn) {
  for (const Pass p : strataPasses)
    registerLayer("BM_" + kind + "_strata/" + layer + "/" + passName(p),
                  [=](benchmark::State& st) { strataFn(st, p); });
#if STRATA_BENCH_HAVE_DNNL
  for (const Pass p : {Pass::kFwd, Pass::kBwdData})
    for (const dnn::Layout layout : {dnn::Layout::kNchw, dnn::Layout::kBlocked})
      registerLayer(
          "BM_" + kind + "_onednn/" + layer + "/" +
              (p == Pass::kFwd ? std::string("fwd") : dnnlBwd) + "/" + dnn::layoutName(layout),
          [=](benchmark::State& st) { dnn::guarded(st, [&] { dnnlFn(st, p, layout); }); });
#endif
}

void registerAll() {
  registerGemm("BM_Sgemm_strata", BM_Sgemm_strata);
#if STRATA_BENCH_HAVE_OPENBLAS
  registerGemm("BM_Sgemm_openblas", BM_Sgemm_openblas);
#endif
#if STRATA_BENCH_HAVE_DNNL
  registerGemm("BM_Sgemm_onednn", dnn::BM_Sgemm_onednn);
#endif

  for (const ConvLayer& l : convLayers())
    for (const Pass p : kAllPasses) {
      const std::string suffix = "/" + l.name + "/" + passName(p);
      registerLayer("BM_Conv_strata" + suffix, [=](benchmark::State& st) { strataConv(st, l, p); });
#if STRATA_BENCH_HAVE_DNNL
      registerLayer("BM_Conv_onednn" + suffix,
                    [=](benchmark::State& st) { dnn::guarded(st, [&] { dnn::conv(st, l, p); }); });
#endif
    }

  for (const Pass p : kAllPasses) {
    const std::string suffix = "/" + kFc6.name + "/" + passName(p);
    registerLayer("BM_Fc_strata" + suffix, [=](benchmark::State& st) { strataFc(st, kFc6, p); });
#if STRATA_BENCH_HAVE_DNNL
    registerLayer("BM_Fc_onednn" + suffix,
                  [=](benchmark::State& st) { dnn::guarded(st, [&] { dnn::fc(st, kFc6, p); }); });
#endif
  }

#if STRATA_BENCH_HAVE_DNNL
  const auto dnnBatchNorm = dnn::batchNorm;
  const auto dnnPool = dnn::pool;
  const auto dnnRelu = dnn::relu;
  const auto dnnLrn = dnn::lrn;
#else
  const int dnnBatchNorm = 0, dnnPool = 0, dnnRelu = 0, dnnLrn = 0;
#endif
  registerMemoryBound("BatchNorm", kBatchNorm.name, {Pass::kFwd, Pass::kBwdData, Pass::kBwdWeights},
                      "bwd", strataBatchNorm, dnnBatchNorm);
  registerMemoryBound("MaxPool", kPool.name, {Pass::kFwd, Pass::kBwdData}, "bwd_data", strataPool,
                      dnnPool);
  registerMemoryBound("Relu", kRelu.name, {Pass::kFwd, Pass::kBwdData}, "bwd_data", strataRelu,
                      dnnRelu);
  for (const MemLayer* l : {&kDropFc, &kDropSeq})
    for (const Pass p : {Pass::kFwd, Pass::kBwdData})
      registerLayer("BM_Dropout_strata/" + l->name + "/" + passName(p),
                    [=](benchmark::State& st) { strataDropout(st, *l, p); });
  registerMemoryBound("Lrn", kLrn.name, {Pass::kFwd, Pass::kBwdData}, "bwd_data", strataLrn,
                      dnnLrn);
}

#if STRATA_BENCH_HAVE_EXEC
// A whole training step of one worker (strata run's naive strategy at K = 1:
// forward, backward, SGD update, no communication), dropout off, on T
// threads: the executor's step time as `strata run` measures it (the median
// step of the run after one warm-up step), reported as manual time.
void registerSteps() {
  struct Step {
    const char* network;
    int batch;
  };
  for (const Step step :
       {Step{"tiny-cnn", 32}, Step{"alexnet-owt", 32}, Step{"resnet50", 8}, Step{"tiny-gpt", 8}}) {
    for (int threads : {1, 2}) {
      const std::string name =
          fmt::format("BM_Step/{}/batch:{}/threads:{}", step.network, step.batch, threads);
      benchmark::RegisterBenchmark(
          name.c_str(),
          [step, threads](benchmark::State& state) {
            const auto net = strata::loadNetwork(
                strata::resolveConfig(strata::ConfigKind::kNetwork, step.network, "BM_Step"));
            strata::Scenario sc;
            sc.strategy = strata::Strategy::kNaive;
            sc.workers = 1;
            sc.batchPerWorker = step.batch;
            const auto plan = strata::lowerToPlan(net, sc);
            strata::exec::RunOptions o;
            o.steps = 4;
            o.dropout = false;
            o.threadsPerWorker = threads;
            double flops = 0;
            for (auto _ : state) {
              const auto run = strata::exec::runThreads(plan, net, o);
              state.SetIterationTime(run.measured.step.value());
              flops += net.totalTrainFlops() * step.batch;
            }
            state.counters["flops"] =
                benchmark::Counter(flops / static_cast<double>(state.iterations()),
                                   benchmark::Counter::kIsIterationInvariantRate);
            state.SetLabel(strata::nn::cpuIsaDescription(strata::nn::selectedCpuIsa()));
          })
          ->UseManualTime()
          ->Iterations(3)
          ->Unit(benchmark::kMillisecond);
    }
  }
}
#endif

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv))
    return 1;
  benchmark::AddCustomContext("strata_cpu_isa",
                              strata::nn::cpuIsaDescription(strata::nn::selectedCpuIsa()));
#if STRATA_BENCH_HAVE_DNNL
  benchmark::AddCustomContext("onednn", dnn::version());
#endif
#if STRATA_BENCH_HAVE_OPENBLAS
  benchmark::AddCustomContext("openblas", openblas_get_config());
#endif
  registerAll();
#if STRATA_BENCH_HAVE_EXEC
  // Presets from this source tree unless the caller says otherwise.
  setenv("STRATA_CONFIG_DIR", STRATA_BENCH_CONFIG_DIR, 0);
  registerSteps();
#endif
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

// The memory-bound CUDA kernels of kernels/ beside their CPU twins, in one
// run: bytes/s is the bytes a kernel must move (each input read once, each
// output written once), so a GPU figure compares directly with the device's
// copy bandwidth (~3.0 TB/s read + written on an H100, BUILD-NOTES.md).
// GPU times are CUDA events around one launch (manual time). Without a
// usable GPU the cuda benchmarks report an error and the twins still run.
#include <benchmark/benchmark.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "strata/kernels/kernels.h"

namespace strata::kernels {
namespace {

bool gpuUsable() {
  int devices = 0;
  return cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0;
}

// `count` floats of device memory, filled with a small pattern; freed at
// the end of the benchmark.
class DeviceFloats {
 public:
  explicit DeviceFloats(int64_t count) {
    if (cudaMalloc(&data_, static_cast<size_t>(count) * sizeof(float)) != cudaSuccess)
      return;
    cuda::fill(data_, count, 0.5f, nullptr);
  }
  DeviceFloats(const DeviceFloats&) = delete;
  DeviceFloats& operator=(const DeviceFloats&) = delete;
  ~DeviceFloats() { cudaFree(data_); }
  float* get() const { return data_; }

 private:
  float* data_ = nullptr;
};

// Times `launch` (one kernel sequence on the default stream) per iteration
// with CUDA events; `bytes` moved per launch.
template <class Launch>
void timeOnGpu(benchmark::State& state, int64_t bytes, Launch launch) {
  cudaEvent_t start = nullptr, stop = nullptr;
  if (cudaEventCreate(&start) != cudaSuccess || cudaEventCreate(&stop) != cudaSuccess) {
    state.SkipWithError("cudaEventCreate failed");
    return;
  }
  launch();  // warm-up: first-launch costs, scratch pools
  if (cudaDeviceSynchronize() != cudaSuccess) {
    state.SkipWithError("the warm-up launch failed");
    return;
  }
  for (auto _ : state) {
    cudaEventRecord(start);
    launch();
    cudaEventRecord(stop);
    cudaEventSynchronize(stop);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    state.SetIterationTime(ms / 1e3);
  }
  state.SetBytesProcessed(state.iterations() * bytes);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
}

// Whether the benchmark can run; else it is marked skipped with the reason.
bool gpuReady(benchmark::State& state) {
  if (gpuUsable())
    return true;
  state.SkipWithError("no usable CUDA device");
  return false;
}

constexpr int64_t kFloat = sizeof(float);

// ---- y = relu(x): 8 bytes per element --------------------------------------------

void BM_CudaRelu(benchmark::State& state) {
  if (!gpuReady(state))
    return;
  const int64_t count = state.range(0);
  DeviceFloats x(count), y(count);
  timeOnGpu(state, 2 * kFloat * count,
            [&] { cuda::reluForward(x.get(), y.get(), count, nullptr); });
}
BENCHMARK(BM_CudaRelu)->Arg(1 << 20)->Arg(1 << 26)->UseManualTime();

void BM_TwinRelu(benchmark::State& state) {
  const int64_t count = state.range(0);
  std::vector<float> x(static_cast<size_t>(count), -0.5f), y(x.size());
  for (auto _ : state) {
    twin::reluForward(x.data(), y.data(), count);
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(state.iterations() * 2 * kFloat * count);
}
BENCHMARK(BM_TwinRelu)->Arg(1 << 20);

// ---- y += x (the executor's gradient reduction): 12 bytes per element ---------------

void BM_CudaReduceAdd(benchmark::State& state) {
  if (!gpuReady(state))
    return;
  const int64_t count = state.range(0);
  DeviceFloats x(count), y(count);
  timeOnGpu(state, 3 * kFloat * count, [&] { cuda::reduceAdd(x.get(), y.get(), count, nullptr); });
}
BENCHMARK(BM_CudaReduceAdd)->Arg(1 << 20)->Arg(1 << 26)->UseManualTime();

void BM_TwinReduceAdd(benchmark::State& state) {
  const int64_t count = state.range(0);
  std::vector<float> x(static_cast<size_t>(count), 1e-6f), y(x.size());
  for (auto _ : state) {
    twin::reduceAdd(x.data(), y.data(), count);
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(state.iterations() * 3 * kFloat * count);
}
BENCHMARK(BM_TwinReduceAdd)->Arg(1 << 20);

// ---- sgd with momentum: reads w, v, g, writes w, v: 20 bytes per element ------------

void BM_CudaSgd(benchmark::State& state) {
  if (!gpuReady(state))
    return;
  const int64_t count = state.range(0);
  DeviceFloats w(count), v(count), g(count);
  timeOnGpu(state, 5 * kFloat * count, [&] {
    cuda::sgdMomentum(w.get(), v.get(), g.get(), count, 1e-3f, 0.9f, 5e-4f, nullptr);
  });
}
BENCHMARK(BM_CudaSgd)->Arg(1 << 20)->Arg(1 << 26)->UseManualTime();

// ---- adam (adamw alike): reads w, m, v, g, writes w, m, v: 28 bytes per element -----

AdamParams benchAdam() {
  AdamParams p;
  p.learningRate = 1e-4f;
  p.weightDecay = 0.01f;
  p.decoupled = true;
  p.step = 10;
  return p;
}

void BM_CudaAdam(benchmark::State& state) {
  if (!gpuReady(state))
    return;
  const int64_t count = state.range(0);
  DeviceFloats w(count), m(count), v(count), g(count);
  const AdamParams p = benchAdam();
  timeOnGpu(state, 7 * kFloat * count,
            [&] { cuda::adam(w.get(), m.get(), v.get(), g.get(), count, p, nullptr); });
}
BENCHMARK(BM_CudaAdam)->Arg(1 << 20)->Arg(1 << 26)->UseManualTime();

void BM_TwinAdam(benchmark::State& state) {
  const int64_t count = state.range(0);
  std::vector<float> w(static_cast<size_t>(count), 0.5f), m(w.size(), 0.5f), v(w.size(), 0.5f),
      g(w.size(), 1e-3f);
  const AdamParams p = benchAdam();
  for (auto _ : state) {
    twin::adam(w.data(), m.data(), v.data(), g.data(), count, p);
    benchmark::DoNotOptimize(w.data());
  }
  state.SetBytesProcessed(state.iterations() * 7 * kFloat * count);
}
BENCHMARK(BM_TwinAdam)->Arg(1 << 20);

// ---- dropout forward (a hash per element): 8 bytes per element ----------------------

void BM_CudaDropout(benchmark::State& state) {
  if (!gpuReady(state))
    return;
  const Shape4 shape{128, static_cast<int>(state.range(0)), 1, 1};
  DeviceFloats x(shape.elements()), y(shape.elements());
  timeOnGpu(state, 2 * kFloat * shape.elements(),
            [&] { cuda::dropoutForward(DropoutParams{}, shape, x.get(), y.get(), nullptr); });
}
BENCHMARK(BM_CudaDropout)->Arg(4096)->Arg(1 << 19)->UseManualTime();

// ---- bias gradient of a conv layer and of an fc layer: 4 bytes per element ----------

void BM_CudaBiasGrad(benchmark::State& state) {
  if (!gpuReady(state))
    return;
  const int n = 128;
  const auto channels = static_cast<int>(state.range(0));
  const int64_t positions = state.range(1);
  const int64_t count = int64_t{n} * channels * positions;
  DeviceFloats dy(count), dbias(channels);
  timeOnGpu(state, kFloat * count,
            [&] { cuda::biasGrad(dy.get(), dbias.get(), n, channels, positions, nullptr); });
}
BENCHMARK(BM_CudaBiasGrad)->Args({64, 56 * 56})->Args({4096, 1})->UseManualTime();

// ---- batchnorm forward (two statistics passes and the output): x read three
// times and y written: 16 bytes per element ----------------------------------------

void BM_CudaBatchNormForward(benchmark::State& state) {
  if (!gpuReady(state))
    return;
  const Shape4 shape{128, static_cast<int>(state.range(0)), static_cast<int>(state.range(1)),
                     static_cast<int>(state.range(1))};
  DeviceFloats x(shape.elements()), y(shape.elements()), gamma(shape.c), shift(shape.c);
  timeOnGpu(state, 4 * kFloat * shape.elements(), [&] {
    cuda::batchNormForward(shape, x.get(), gamma.get(), shift.get(), 1e-5f, y.get(), nullptr);
  });
}
BENCHMARK(BM_CudaBatchNormForward)->Args({64, 56})->Args({512, 7})->UseManualTime();

// ---- softmax statistics of an fc layer's logits: 4 bytes per element ----------------

void BM_CudaSoftmaxStats(benchmark::State& state) {
  if (!gpuReady(state))
    return;
  const Shape4 shape{static_cast<int>(state.range(0)), 1000, 1, 1};
  DeviceFloats z(shape.elements()), stats(2 * int64_t{shape.n});
  timeOnGpu(state, kFloat * shape.elements(),
            [&] { cuda::softmaxStats(shape, z.get(), stats.get(), nullptr); });
}
BENCHMARK(BM_CudaSoftmaxStats)->Arg(128)->Arg(4096)->UseManualTime();

// ---- AlexNet's first max pooling (3 x 3, stride 2, 55 -> 27): reads x, writes y
// and argmax --------------------------------------------------------------------------

void BM_CudaMaxPool(benchmark::State& state) {
  if (!gpuReady(state))
    return;
  const int n = 128;
  const PoolParams p{true, 96, 55, 55, 3, 3, 2, 0, 27, 27};
  const int64_t in = int64_t{n} * p.c * p.inH * p.inW, out = int64_t{n} * p.c * p.outH * p.outW;
  DeviceFloats x(in), y(out), argmax(out);
  auto* arg = reinterpret_cast<int32_t*>(argmax.get());
  timeOnGpu(state, kFloat * (in + 2 * out),
            [&] { cuda::poolForward(p, n, x.get(), y.get(), arg, nullptr); });
}
BENCHMARK(BM_CudaMaxPool)->UseManualTime();

}  // namespace
}  // namespace strata::kernels

BENCHMARK_MAIN();

// The CUDA kernels of transformer.h. Each computes its elements with the
// element functions of transformer.h (as the twins do); how the work is split:
//  - layer normalisation, forward and backward data: a thread per position
//    (blocks of 64), summing its channels in channel order (the twin's
//    order: equal bits);
//    the channel loop reads, across a warp, 32 neighbouring positions;
//  - layer normalisation, backward weights: a statistics pass (a thread per
//    position, into the caller's scratch), then a block per channel summing
//    dy and dy xhat over every example and position in double (a fixed
//    tree, so the result does not depend on timing);
//  - GELU: grid-stride loops over the elements;
//  - attention softmax: a warp per row of scores (max, sum and dot by warp
//    shuffles);
//  - embedding forward: a thread per output element (a gather);
//  - embedding backward: keys (token row, or vocab for a bad id) and flat
//    positions, a stable CUB radix sort of the pairs by key, then a thread
//    per (key run, feature) adding the run's gradients in position order onto
//    the row, and a thread per (position, feature) adding the examples'
//    gradients in example order onto the position table. No float atomics:
//    every row's sum is CpuBackend's, in CpuBackend's order.
// Bad token ids go to the bad-token record by an integer atomicMin.
// Compiled with --fmad=false, as kernels.cu (kernels/CMakeLists.txt).
#include <cuda_runtime.h>

#include <algorithm>
#include <cub/device/device_radix_sort.cuh>
#include <stdexcept>
#include <string>

#include "launch.cuh"
#include "strata/kernels/elementwise.h"
#include "strata/kernels/transformer.h"

namespace strata::kernels::cuda {

namespace {

// ---- launch geometry ---------------------------------------------------------

constexpr int64_t kMaxBlocks = 65535 * 8;  // a grid-stride loop's blocks at most

// Blocks of `threads` for a grid-stride loop over `work` items.
unsigned gridFor(int64_t work, int threads = kThreads) {
  const int64_t needed = (work + threads - 1) / threads;
  return static_cast<unsigned>(std::max<int64_t>(1, std::min(needed, kMaxBlocks)));
}

// Threads per block of the thread-per-position layer normalisation kernels:
// a batch has few positions (gpt2-small's 8 x 1024 are 32 blocks of 256,
// a quarter of an H100's SMs), each with a long channel loop; blocks of 64
// spread them over 4x the SMs.
constexpr int kPositionThreads = 64;

__device__ int64_t firstIndex() {
  return int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
}
__device__ int64_t gridStride() {
  return int64_t{gridDim.x} * blockDim.x;
}

// Bytes of `count` objects of T rounded up to 256 (CUB's alignment).
template <class T>
size_t regionBytes(int64_t count) {
  return (static_cast<size_t>(count) * sizeof(T) + 255) / 256 * 256;
}

__device__ void noteBadToken(uint64_t* badToken, float id, int vocab) {
  atomicMin(reinterpret_cast<unsigned long long*>(badToken),
            static_cast<unsigned long long>(badTokenKey(id, vocab)));
}

// ---- layer normalisation ----------------------------------------------------------

__global__ void __launch_bounds__(kPositionThreads)
    layerNormForwardKernel(Shape4 shape, const float* x, const float* gain, const float* bias,
                           float eps, float* y) {
  const int64_t plane = shape.plane();
  const int64_t positions = int64_t{shape.n} * plane;
  for (int64_t i = firstIndex(); i < positions; i += gridStride()) {
    const int64_t e = i / plane;
    const int64_t at = e * shape.perExample() + (i - e * plane);
    const element::PositionStats st = element::positionStats(x + at, shape.c, plane, eps);
    for (int c = 0; c < shape.c; ++c)
      y[at + c * plane] = element::layerNormOutput(st, gain[c], bias[c], x[at + c * plane]);
  }
}

__global__ void __launch_bounds__(kPositionThreads)
    layerNormBackwardDataKernel(Shape4 shape, const float* x, const float* dy, const float* gain,
                                float eps, float* dx, float beta) {
  const int64_t plane = shape.plane();
  const int64_t positions = int64_t{shape.n} * plane;
  for (int64_t i = firstIndex(); i < positions; i += gridStride()) {
    const int64_t e = i / plane;
    const int64_t at = e * shape.perExample() + (i - e * plane);
    const element::PositionStats st = element::positionStats(x + at, shape.c, plane, eps);
    const element::LayerNormMeans m =
        element::layerNormMeans(st, x + at, dy + at, gain, shape.c, plane);
    for (int c = 0; c < shape.c; ++c) {
      const int64_t k = at + c * plane;
      dx[k] = element::blend(dx + k, element::layerNormGrad(st, m, gain[c], x[k], dy[k]), beta);
    }
  }
}

// stats[2i], stats[2i + 1] = mean, invStd of position i (example-major).
__global__ void __launch_bounds__(kPositionThreads)
    layerNormStatsKernel(Shape4 shape, const float* x, float eps, float* stats) {
  const int64_t plane = shape.plane();
  const int64_t positions = int64_t{shape.n} * plane;
  for (int64_t i = firstIndex(); i < positions; i += gridStride()) {
    const int64_t e = i / plane;
    const int64_t at = e * shape.perExample() + (i - e * plane);
    const element::PositionStats st = element::positionStats(x + at, shape.c, plane, eps);
    stats[2 * i] = st.mean;
    stats[2 * i + 1] = st.invStd;
  }
}

// A block per channel (grid-stride over channels): thread k sums positions
// k, k + kThreads, ... in double; the block adds its threads' sums in a
// fixed tree.
__global__ void __launch_bounds__(kThreads)
    layerNormWeightsKernel(Shape4 shape, const float* x, const float* dy, const float* stats,
                           float* dgain, float* dbias) {
  __shared__ double sumG[kThreads];
  __shared__ double sumGXhat[kThreads];
  const int64_t plane = shape.plane();
  const int64_t positions = int64_t{shape.n} * plane;
  for (int c = blockIdx.x; c < shape.c; c += gridDim.x) {
    double g = 0, gx = 0;
    for (int64_t j = threadIdx.x; j < positions; j += blockDim.x) {
      const int64_t e = j / plane;
      const int64_t k = e * shape.perExample() + int64_t{c} * plane + (j - e * plane);
      element::PositionStats st;
      st.mean = stats[2 * j];
      st.invStd = stats[2 * j + 1];
      g += dy[k];
      gx += dy[k] * (x[k] - st.mean) * st.invStd;
    }
    sumG[threadIdx.x] = g;
    sumGXhat[threadIdx.x] = gx;
    __syncthreads();
    for (int half = kThreads / 2; half > 0; half /= 2) {
      if (static_cast<int>(threadIdx.x) < half) {
        sumG[threadIdx.x] += sumG[threadIdx.x + half];
        sumGXhat[threadIdx.x] += sumGXhat[threadIdx.x + half];
      }
      __syncthreads();
    }
    if (threadIdx.x == 0) {
      dgain[c] += static_cast<float>(sumGXhat[0]);
      dbias[c] += static_cast<float>(sumG[0]);
    }
    __syncthreads();  // the shared sums are reused for the next channel
  }
}

// ---- GELU ---------------------------------------------------------------------------

__global__ void __launch_bounds__(kThreads)
    geluForwardKernel(const float* x, float* y, int64_t count) {
  for (int64_t i = firstIndex(); i < count; i += gridStride())
    y[i] = element::gelu(x[i]);
}

__global__ void __launch_bounds__(kThreads)
    geluBackwardKernel(const float* x, const float* dy, float* dx, int64_t count, float beta) {
  for (int64_t i = firstIndex(); i < count; i += gridStride())
    dx[i] = element::blend(dx + i, element::geluGrad(x[i], dy[i]), beta);
}

// ---- attention softmax -----------------------------------------------------------------

__device__ float warpMax(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// Every lane ends with the same sum (each pair adds the same two values).
__device__ float warpSum(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2)
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// A warp per row; lane l takes the row's elements l, l + 32, ...
__global__ void __launch_bounds__(kThreads)
    attnSoftmaxForwardKernel(const float* s, float* p, int64_t rows, int t, bool causal,
                             float scale) {
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  const int64_t warps = gridStride() / kWarp;
  for (int64_t r = firstIndex() / kWarp; r < rows; r += warps) {
    const float* in = s + r * t;
    float* out = p + r * t;
    const int keys = element::attnKeys(r, t, causal);
    float mx = -INFINITY;
    for (int j = lane; j < keys; j += kWarp)
      mx = fmaxf(mx, in[j]);
    mx = warpMax(mx) * scale;
    float sum = 0;
    for (int j = lane; j < keys; j += kWarp) {
      const float e = element::attnExp(in[j], scale, mx);
      out[j] = e;
      sum += e;
    }
    const float inv = 1.0f / warpSum(sum);
    for (int j = lane; j < keys; j += kWarp)
      out[j] *= inv;
    for (int j = keys + lane; j < t; j += kWarp)
      out[j] = 0.0f;
  }
}

__global__ void __launch_bounds__(kThreads)
    attnSoftmaxBackwardKernel(const float* p, const float* dp, float* ds, int64_t rows, int t,
                              float scale) {
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  const int64_t warps = gridStride() / kWarp;
  for (int64_t r = firstIndex() / kWarp; r < rows; r += warps) {
    const float* pr = p + r * t;
    const float* g = dp + r * t;
    float* out = ds + r * t;
    float dot = 0;
    for (int j = lane; j < t; j += kWarp)
      dot += g[j] * pr[j];
    dot = warpSum(dot);
    // Each lane writes only the elements it read: in place is safe.
    for (int j = lane; j < t; j += kWarp)
      out[j] = element::attnGrad(pr[j], g[j], dot, scale);
  }
}

// ---- embedding ---------------------------------------------------------------------------

// y element i = (example e, feature c, position q), q fastest.
__global__ void __launch_bounds__(kThreads)
    embeddingForwardKernel(EmbeddingParams p, const float* ids, const float* table, float* y,
                           uint64_t* badToken) {
  const int64_t t = p.positions;
  const int64_t perExample = int64_t{p.features} * t;
  const int64_t count = int64_t{p.n} * perExample;
  const float* pos =
      p.positionTable && p.addPositions ? table + int64_t{p.rows()} * p.features : nullptr;
  for (int64_t i = firstIndex(); i < count; i += gridStride()) {
    const int64_t e = i / perExample;
    const int64_t within = i - e * perExample;
    const int64_t c = within / t;
    const int64_t q = within - c * t;
    const float id = ids[e * t + q];
    const int row = element::tokenRow(id, p.vocab);
    if (row < 0 && c == 0)
      noteBadToken(badToken, id, p.vocab);
    // A row this worker does not hold gives zeros (another worker's adds it).
    const int held = row - p.firstToken;
    const float v =
        row < 0 || held < 0 || held >= p.rows() ? 0.0f : table[int64_t{held} * p.features + c];
    y[i] = pos ? v + pos[q * p.features + c] : v;
  }
}

// keys[i] = the held row of flat position i's token (rows() for a bad id or a
// token not held), index[i] = i.
__global__ void __launch_bounds__(kThreads)
    embeddingKeysKernel(EmbeddingParams p, const float* ids, int count, int32_t* keys,
                        int32_t* index, uint64_t* badToken) {
  for (int64_t i = firstIndex(); i < count; i += gridStride()) {
    const float id = ids[i];
    const int row = element::tokenRow(id, p.vocab);
    if (row < 0)
      noteBadToken(badToken, id, p.vocab);
    const int held = row - p.firstToken;
    keys[i] = row < 0 || held < 0 || held >= p.rows() ? p.rows() : held;
    index[i] = static_cast<int32_t>(i);
  }
}

// Thread (j, c), c fastest: when sorted key j starts a run of equal keys (a
// token's positions, in increasing flat position: the sort is stable), adds
// the run's gradients of feature c onto the token's row one by one.
__global__ void __launch_bounds__(kThreads)
    embeddingRowsKernel(EmbeddingParams p, const int32_t* keys, const int32_t* index,
                        const float* dy, float* dtable) {
  const int count = p.n * p.positions;
  const int64_t t = p.positions;
  const int64_t work = int64_t{count} * p.features;
  for (int64_t i = firstIndex(); i < work; i += gridStride()) {
    const int64_t j = i / p.features;
    const int64_t c = i - j * p.features;
    const int32_t key = keys[j];
    if (key >= p.rows() || (j > 0 && keys[j - 1] == key))
      continue;
    float* row = dtable + int64_t{key} * p.features + c;
    float sum = *row;
    for (int64_t k = j; k < count && keys[k] == key; ++k) {
      const int64_t flat = index[k];
      const int64_t e = flat / t;
      sum += dy[(e * p.features + c) * t + (flat - e * t)];
    }
    *row = sum;
  }
}

// Thread (c, q), q fastest: position q's row of the position table, feature
// c, gets the examples' gradients in example order.
__global__ void __launch_bounds__(kThreads)
    embeddingPositionsKernel(EmbeddingParams p, const float* dy, float* dpos) {
  const int64_t t = p.positions;
  const int64_t work = int64_t{p.features} * t;
  for (int64_t i = firstIndex(); i < work; i += gridStride()) {
    const int64_t c = i / t;
    const int64_t q = i - c * t;
    float* at = dpos + q * p.features + c;
    float sum = *at;
    for (int e = 0; e < p.n; ++e)
      sum += dy[(e * int64_t{p.features} + c) * t + q];
    *at = sum;
  }
}

// Key bits the sort needs: keys are in [0, rows held].
int keyBits(int vocab) {
  int bits = 1;
  while (bits < 31 && (int64_t{1} << bits) <= vocab)
    ++bits;
  return bits;
}

// Where each array of the embedding backward's scratch starts.
struct EmbeddingScratch {
  int32_t* keys;
  int32_t* sortedKeys;
  int32_t* index;
  int32_t* sortedIndex;
  void* sortTemp;
  size_t sortBytes;
};

size_t sortTempBytes(int count, int vocab) {
  size_t bytes = 0;
  check(cub::DeviceRadixSort::SortPairs(nullptr, bytes, static_cast<const int32_t*>(nullptr),
                                        static_cast<int32_t*>(nullptr),
                                        static_cast<const int32_t*>(nullptr),
                                        static_cast<int32_t*>(nullptr), count, 0, keyBits(vocab)),
        "cub::DeviceRadixSort::SortPairs (temporary storage size)");
  return bytes;
}

EmbeddingScratch carve(void* scratch, int count, size_t sortBytes) {
  auto* base = static_cast<char*>(scratch);
  const size_t region = regionBytes<int32_t>(count);
  EmbeddingScratch s;
  s.keys = reinterpret_cast<int32_t*>(base);
  s.sortedKeys = reinterpret_cast<int32_t*>(base + region);
  s.index = reinterpret_cast<int32_t*>(base + 2 * region);
  s.sortedIndex = reinterpret_cast<int32_t*>(base + 3 * region);
  s.sortTemp = base + 4 * region;
  s.sortBytes = sortBytes;
  return s;
}

}  // namespace

// ---- the launchers ------------------------------------------------------------------------

void layerNormForward(Shape4 shape, const float* x, const float* gain, const float* bias, float eps,
                      float* y, Stream stream) {
  const int64_t positions = int64_t{shape.n} * shape.plane();
  if (positions <= 0 || shape.c <= 0)
    return;
  layerNormForwardKernel<<<gridFor(positions, kPositionThreads), kPositionThreads, 0, stream>>>(
      shape, x, gain, bias, eps, y);
  checkLaunch("layerNormForward");
}

void layerNormBackwardData(Shape4 shape, const float* x, const float* dy, const float* gain,
                           float eps, float* dx, float beta, Stream stream) {
  const int64_t positions = int64_t{shape.n} * shape.plane();
  if (positions <= 0 || shape.c <= 0)
    return;
  layerNormBackwardDataKernel<<<gridFor(positions, kPositionThreads), kPositionThreads, 0,
                                stream>>>(shape, x, dy, gain, eps, dx, beta);
  checkLaunch("layerNormBackwardData");
}

int64_t layerNormWeightsScratch(Shape4 shape) {
  return 2 * int64_t{shape.n} * shape.plane();
}

void layerNormBackwardWeights(Shape4 shape, const float* x, const float* dy, float eps,
                              float* dgain, float* dbias, float* scratch, Stream stream) {
  const int64_t positions = int64_t{shape.n} * shape.plane();
  if (positions <= 0 || shape.c <= 0)
    return;
  layerNormStatsKernel<<<gridFor(positions, kPositionThreads), kPositionThreads, 0, stream>>>(
      shape, x, eps, scratch);
  checkLaunch("layerNormBackwardWeights (statistics)");
  const auto blocks = static_cast<unsigned>(std::min<int64_t>(shape.c, kMaxBlocks));
  layerNormWeightsKernel<<<blocks, kThreads, 0, stream>>>(shape, x, dy, scratch, dgain, dbias);
  checkLaunch("layerNormBackwardWeights");
}

void geluForward(const float* x, float* y, int64_t count, Stream stream) {
  if (count <= 0)
    return;
  geluForwardKernel<<<gridFor(count), kThreads, 0, stream>>>(x, y, count);
  checkLaunch("geluForward");
}

void geluBackward(const float* x, const float* dy, float* dx, int64_t count, float beta,
                  Stream stream) {
  if (count <= 0)
    return;
  geluBackwardKernel<<<gridFor(count), kThreads, 0, stream>>>(x, dy, dx, count, beta);
  checkLaunch("geluBackward");
}

void attnSoftmaxForward(const float* s, float* p, int64_t rows, int t, bool causal, float scale,
                        Stream stream) {
  if (rows <= 0 || t <= 0)
    return;
  attnSoftmaxForwardKernel<<<gridFor(rows * kWarp), kThreads, 0, stream>>>(s, p, rows, t, causal,
                                                                           scale);
  checkLaunch("attnSoftmaxForward");
}

void attnSoftmaxBackward(const float* p, const float* dp, float* ds, int64_t rows, int t,
                         float scale, Stream stream) {
  if (rows <= 0 || t <= 0)
    return;
  attnSoftmaxBackwardKernel<<<gridFor(rows * kWarp), kThreads, 0, stream>>>(p, dp, ds, rows, t,
                                                                            scale);
  checkLaunch("attnSoftmaxBackward");
}

void embeddingForward(const EmbeddingParams& p, const float* ids, const float* table, float* y,
                      uint64_t* badToken, Stream stream) {
  const int64_t count = int64_t{p.n} * p.features * p.positions;
  if (count <= 0)
    return;
  embeddingForwardKernel<<<gridFor(count), kThreads, 0, stream>>>(p, ids, table, y, badToken);
  checkLaunch("embeddingForward");
}

size_t embeddingBackwardScratch(const EmbeddingParams& p) {
  const int count = p.n * p.positions;
  if (count <= 0)
    return 0;
  return 4 * regionBytes<int32_t>(count) + sortTempBytes(count, p.rows());
}

void embeddingBackward(const EmbeddingParams& p, const float* ids, const float* dy, float* dtable,
                       uint64_t* badToken, void* scratch, size_t scratchBytes, Stream stream) {
  const int count = p.n * p.positions;
  if (count <= 0 || p.features <= 0)
    return;
  const size_t sortBytes = sortTempBytes(count, p.rows());
  if (scratchBytes < 4 * regionBytes<int32_t>(count) + sortBytes)
    throw std::runtime_error("strata::kernels::cuda: embeddingBackward: scratch of " +
                             std::to_string(scratchBytes) + " bytes is below the " +
                             std::to_string(embeddingBackwardScratch(p)) + " bytes it needs");
  EmbeddingScratch s = carve(scratch, count, sortBytes);
  embeddingKeysKernel<<<gridFor(count), kThreads, 0, stream>>>(p, ids, count, s.keys, s.index,
                                                               badToken);
  checkLaunch("embeddingBackward (keys)");
  // LSD radix sort: stable, so equal keys keep increasing flat positions.
  check(cub::DeviceRadixSort::SortPairs(s.sortTemp, s.sortBytes, s.keys, s.sortedKeys, s.index,
                                        s.sortedIndex, count, 0, keyBits(p.rows()), stream),
        "cub::DeviceRadixSort::SortPairs (embedding backward)");
  embeddingRowsKernel<<<gridFor(int64_t{count} * p.features), kThreads, 0, stream>>>(
      p, s.sortedKeys, s.sortedIndex, dy, dtable);
  checkLaunch("embeddingBackward (token rows)");
  if (p.positionTable) {
    embeddingPositionsKernel<<<gridFor(int64_t{p.features} * p.positions), kThreads, 0, stream>>>(
        p, dy, dtable + int64_t{p.rows()} * p.features);
    checkLaunch("embeddingBackward (position rows)");
  }
}

}  // namespace strata::kernels::cuda

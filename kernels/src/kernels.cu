// The CUDA kernels of kernels.h. Every kernel computes its elements with the
// element functions of elementwise.h (as the CPU twins do) and differs from
// its twin only in how the elements are split between threads:
//  - elementwise kernels: grid-stride loops over 64-bit flat indices, sized
//    to fill the device once (gridFor); the plain ones move 16 bytes per
//    access when every pointer allows it (flatKernel);
//  - a flat index splits into (example, channel, position) by Divider, a
//    multiply and shifts instead of the GPU's slow 64-bit division;
//  - per-channel sums (biasGrad, batchnorm): blocks over (channel, split of
//    its values) write double partial sums, and a second kernel adds a
//    channel's partials in split order, so results do not depend on timing;
//  - per-position softmax statistics: a warp per position when a position has
//    many channels close together (h*w < 32, channels >= 32: an fc layer's
//    logits), else a thread per position.
// The file is compiled with --fmad=false (kernels/CMakeLists.txt): a * b + c
// rounds twice, as on the CPU, so element results match the twins bit for
// bit; only exp, log and pow (CUDA's differ from the C library's by an ulp
// or two) and the order of the sums separate them.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <stdexcept>
#include <string>

#include "launch.cuh"
#include "strata/kernels/divider.h"
#include "strata/kernels/elementwise.h"
#include "strata/kernels/kernels.h"

namespace strata::kernels::cuda {

namespace {

// ---- launch geometry, scratch memory (errors: launch.cuh) ---------------------

constexpr int kThreadsPerSm = 2048;  // resident threads per SM on sm_90
constexpr int kMaxDevices = 64;      // devices whose SM count is cached

// Streaming multiprocessors of the current device, asked once per device.
int multiprocessors() {
  static std::atomic<int> cached[kMaxDevices];
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  int sms = device < kMaxDevices ? cached[device].load(std::memory_order_relaxed) : 0;
  if (sms == 0) {
    check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device),
          "cudaDeviceGetAttribute(multiprocessors)");
    if (device < kMaxDevices)
      cached[device].store(sms, std::memory_order_relaxed);
  }
  return sms;
}

// Blocks of kThreads the device holds at once (a grid-stride loop needs no
// more: further blocks would only queue behind the first wave).
int64_t residentBlocks() {
  return int64_t{multiprocessors()} * (kThreadsPerSm / kThreads);
}

// Blocks of kThreads for a grid-stride loop over `work` items: one per
// kThreads items, at most residentBlocks(), at least one.
unsigned gridFor(int64_t work) {
  const int64_t needed = (work + kThreads - 1) / kThreads;
  return static_cast<unsigned>(std::max<int64_t>(1, std::min(needed, residentBlocks())));
}

// The first index of this thread in a grid-stride loop over x, and the stride.
__device__ int64_t firstIndex() {
  return int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
}
__device__ int64_t gridStride() {
  return int64_t{gridDim.x} * blockDim.x;
}

// The smaller index (std::min is host-only without --expt-relaxed-constexpr).
__device__ int64_t smaller(int64_t a, int64_t b) {
  return a < b ? a : b;
}

// Device memory for a kernel sequence's intermediate results, from the
// stream-ordered allocator: allocated and freed in stream order, so it costs
// no synchronisation.
class Scratch {
 public:
  Scratch(size_t bytes, cudaStream_t stream) : stream_(stream) {
    check(cudaMallocAsync(&base_, bytes, stream), "cudaMallocAsync");
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  // Only reached with the memory still held when an exception unwinds; the
  // exception in flight is the error worth reporting.
  ~Scratch() {
    if (base_ != nullptr)
      cudaFreeAsync(base_, stream_);
  }
  // The objects of type T from byte `offset` (a multiple of 16) on.
  template <class T>
  T* at(size_t offset) const {
    return reinterpret_cast<T*>(static_cast<char*>(base_) + offset);
  }
  // Frees after the work queued so far on the stream.
  void release() {
    void* base = base_;
    base_ = nullptr;
    check(cudaFreeAsync(base, stream_), "cudaFreeAsync");
  }

 private:
  void* base_ = nullptr;
  cudaStream_t stream_;
};

// Bytes of `count` objects of T rounded up to 16 (the next region's alignment).
template <class T>
size_t regionBytes(int64_t count) {
  return (static_cast<size_t>(count) * sizeof(T) + 15) / 16 * 16;
}

// Whether a pointer allows 16-byte (float4) accesses.
bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

// ---- plain elementwise kernels ---------------------------------------------------

// W consecutive floats in registers.
template <int W>
struct Pack {
  float v[W];
};

template <int W>
__device__ Pack<W> load(const float* p, int64_t i) {
  Pack<W> r;
  if constexpr (W == 4) {
    const float4 q = *reinterpret_cast<const float4*>(p + i);
    r.v[0] = q.x;
    r.v[1] = q.y;
    r.v[2] = q.z;
    r.v[3] = q.w;
  } else {
    for (int k = 0; k < W; ++k)
      r.v[k] = p[i + k];
  }
  return r;
}

template <int W>
__device__ void store(float* p, int64_t i, const Pack<W>& r) {
  if constexpr (W == 4) {
    *reinterpret_cast<float4*>(p + i) = make_float4(r.v[0], r.v[1], r.v[2], r.v[3]);
  } else {
    for (int k = 0; k < W; ++k)
      p[i + k] = r.v[k];
  }
}

// The operations of flatKernel: apply<W>(i) computes elements [i, i + W).

struct FillOp {
  float* x;
  float value;
  template <int W>
  __device__ void apply(int64_t i) const {
    Pack<W> r;
    for (int k = 0; k < W; ++k)
      r.v[k] = value;
    store<W>(x, i, r);
  }
};

struct AccumulateOp {
  const float* src;
  float* dst;
  float beta;
  template <int W>
  __device__ void apply(int64_t i) const {
    const Pack<W> s = load<W>(src, i);
    Pack<W> d{};
    if (beta != 0.0f)
      d = load<W>(dst, i);
    Pack<W> r;
    for (int k = 0; k < W; ++k)
      r.v[k] = element::blend(&d.v[k], s.v[k], beta);
    store<W>(dst, i, r);
  }
};

struct AddOp {
  const float* a;
  const float* b;
  float* y;
  template <int W>
  __device__ void apply(int64_t i) const {
    const Pack<W> pa = load<W>(a, i), pb = load<W>(b, i);
    Pack<W> r;
    for (int k = 0; k < W; ++k)
      r.v[k] = pa.v[k] + pb.v[k];
    store<W>(y, i, r);
  }
};

struct ReduceAddOp {
  const float* x;
  float* y;
  template <int W>
  __device__ void apply(int64_t i) const {
    const Pack<W> px = load<W>(x, i), py = load<W>(y, i);
    Pack<W> r;
    for (int k = 0; k < W; ++k)
      r.v[k] = py.v[k] + px.v[k];
    store<W>(y, i, r);
  }
};

struct ReluForwardOp {
  const float* x;
  float* y;
  template <int W>
  __device__ void apply(int64_t i) const {
    const Pack<W> px = load<W>(x, i);
    Pack<W> r;
    for (int k = 0; k < W; ++k)
      r.v[k] = element::relu(px.v[k]);
    store<W>(y, i, r);
  }
};

struct ReluBackwardOp {
  const float* y;
  const float* dy;
  float* dx;
  float beta;
  template <int W>
  __device__ void apply(int64_t i) const {
    const Pack<W> py = load<W>(y, i), pg = load<W>(dy, i);
    Pack<W> d{};
    if (beta != 0.0f)
      d = load<W>(dx, i);
    Pack<W> r;
    for (int k = 0; k < W; ++k)
      r.v[k] = element::blend(&d.v[k], element::reluGrad(py.v[k], pg.v[k]), beta);
    store<W>(dx, i, r);
  }
};

struct SgdMomentumOp {
  float* w;
  float* v;
  const float* g;
  float learningRate, momentum, weightDecay;
  template <int W>
  __device__ void apply(int64_t i) const {
    Pack<W> pw = load<W>(w, i), pv = load<W>(v, i);
    const Pack<W> pg = load<W>(g, i);
    for (int k = 0; k < W; ++k)
      element::sgdMomentum(&pw.v[k], &pv.v[k], pg.v[k], learningRate, momentum, weightDecay);
    store<W>(w, i, pw);
    store<W>(v, i, pv);
  }
};

// Applies op to every element: in groups of 4 (float4 accesses) when
// `vectorized` (every pointer 16-byte aligned), the count % 4 last ones alone.
template <class Op>
__global__ void __launch_bounds__(kThreads) flatKernel(Op op, int64_t count, bool vectorized) {
  int64_t done = 0;
  if (vectorized) {
    const int64_t quads = count / 4;
    for (int64_t q = firstIndex(); q < quads; q += gridStride())
      op.template apply<4>(4 * q);
    done = 4 * quads;
  }
  for (int64_t i = done + firstIndex(); i < count; i += gridStride())
    op.template apply<1>(i);
}

template <class Op>
void launchFlat(const Op& op, int64_t count, bool vectorized, cudaStream_t stream,
                const char* name) {
  if (count <= 0)
    return;
  flatKernel<<<gridFor(vectorized ? count / 4 + 1 : count), kThreads, 0, stream>>>(op, count,
                                                                                   vectorized);
  checkLaunch(name);
}

// ---- index splitting -------------------------------------------------------------

// A flat NCHW index as (example, channel, position).
struct Nchw {
  int64_t example;
  int channel;
  int64_t position;
};

// Divides flat indices of an (n, c, positions) array into their coordinates.
struct NchwSplitter {
  Divider perExample;  // c * positions
  Divider positions;

  NchwSplitter(int channels, int64_t planePositions)
      : perExample(static_cast<uint64_t>(std::max<int64_t>(1, channels * planePositions))),
        positions(static_cast<uint64_t>(std::max<int64_t>(1, planePositions))) {}

  __device__ Nchw split(int64_t i) const {
    const uint64_t e = perExample.quotient(static_cast<uint64_t>(i));
    const uint64_t within = perExample.remainder(static_cast<uint64_t>(i), e);
    const uint64_t c = positions.quotient(within);
    return {static_cast<int64_t>(e), static_cast<int>(c),
            static_cast<int64_t>(positions.remainder(within, c))};
  }
};

// ---- dropout ------------------------------------------------------------------

// Blocks over y take examples (rows), blocks over x the elements of a row;
// thread 0 hashes the row's key once for the block.
template <bool kBackward>
__global__ void __launch_bounds__(kThreads)
    dropoutKernel(DropoutParams p, int rows, int64_t perExample, int64_t plane, float scale,
                  const float* in, float* out, float beta) {
  __shared__ uint64_t key;
  for (int row = blockIdx.y; row < rows; row += gridDim.y) {
    if (threadIdx.x == 0)
      key = element::dropoutRowKey(p, row);
    __syncthreads();
    const int64_t base = int64_t{row} * perExample;
    for (int64_t j = firstIndex(); j < perExample; j += gridStride()) {
      const float factor =
          element::dropoutFactor(key, element::dropoutIndex(p, plane, j), p.rate, scale);
      const int64_t i = base + j;
      if constexpr (kBackward)
        out[i] = element::startOfSum(out + i, beta) + in[i] * factor;
      else
        out[i] = in[i] * factor;
    }
    __syncthreads();  // every thread has used the key before it changes
  }
}

template <bool kBackward>
void launchDropout(const DropoutParams& p, Shape4 shape, const float* in, float* out, float beta,
                   cudaStream_t stream, const char* name) {
  const int64_t perExample = shape.perExample();
  if (shape.n <= 0 || perExample <= 0)
    return;
  const unsigned across = gridFor(perExample);
  const int64_t rowBlocks =
      std::min<int64_t>({shape.n, std::max<int64_t>(1, residentBlocks() / across), 65535});
  const dim3 grid(across, static_cast<unsigned>(rowBlocks));
  dropoutKernel<kBackward><<<grid, kThreads, 0, stream>>>(
      p, shape.n, perExample, shape.plane(), element::dropoutScale(p.rate), in, out, beta);
  checkLaunch(name);
}

// ---- bias ----------------------------------------------------------------------

__global__ void __launch_bounds__(kThreads)
    biasAddKernel(float* y, const float* bias, NchwSplitter at, int64_t count) {
  for (int64_t i = firstIndex(); i < count; i += gridStride())
    y[i] = y[i] + bias[at.split(i).channel];
}

// ---- block and warp sums ---------------------------------------------------------

// Two double sums carried together through the reductions ({} is zero).
struct Sums {
  double a;
  double b;
};

__device__ Sums operator+(Sums x, Sums y) {
  return {x.a + y.a, x.b + y.b};
}

__device__ Sums warpSum(Sums s) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    s.a += __shfl_down_sync(0xffffffffu, s.a, offset);
    s.b += __shfl_down_sync(0xffffffffu, s.b, offset);
  }
  return s;
}

// The sum over the block, in thread 0 (a fixed tree: the same inputs give
// the same bits). Every thread of the block must call it.
__device__ Sums blockSum(Sums s) {
  __shared__ double perWarpA[kThreads / kWarp];
  __shared__ double perWarpB[kThreads / kWarp];
  const int lane = threadIdx.x % kWarp;
  const int warp = threadIdx.x / kWarp;
  s = warpSum(s);
  if (lane == 0) {
    perWarpA[warp] = s.a;
    perWarpB[warp] = s.b;
  }
  __syncthreads();
  if (warp == 0) {
    const bool held = lane < static_cast<int>(blockDim.x / kWarp);
    s = held ? Sums{perWarpA[lane], perWarpB[lane]} : Sums{};
    s = warpSum(s);
  }
  __syncthreads();  // the caller may sum again
  return s;
}

// ---- per-channel reductions --------------------------------------------------------
//
// The values of channel c of an (n, channels, positions) array are n runs of
// `positions` contiguous floats. Two layouts:
//  - planes (positions > 1): block (c, split) sums values j in its chunk of
//    [0, n * positions), j = example * positions + position, stepping
//    through the runs, and block-reduces;
//  - columns (positions == 1, an fc layer's n x channels): thread c of block
//    column split sums the examples of its chunk (neighbouring threads read
//    neighbouring floats).
// Either writes Sums partial[split * channels + c]; finishKernel adds a
// channel's partials in split order and hands the total to a Finish.

struct ChannelLayout {
  int n = 0;
  int channels = 0;
  int64_t positions = 0;
  Divider positionsDivider;  // of `positions`
  int splits = 1;
  int64_t chunk = 0;  // values (planes) or examples (columns) per split
  bool columns = false;
};

// Splits so that the grid fills the device a few times over, with at least
// a few thousand values per block (planes) or 16 examples per thread
// (columns).
ChannelLayout channelLayout(int n, int channels, int64_t positions) {
  ChannelLayout layout;
  layout.n = n;
  layout.channels = channels;
  layout.positions = positions;
  layout.positionsDivider = Divider(static_cast<uint64_t>(std::max<int64_t>(1, positions)));
  layout.columns = positions == 1;
  const int64_t wantedBlocks = int64_t{4} * multiprocessors() * (kThreadsPerSm / kThreads);
  int64_t splits = 1;
  int64_t span = 0;  // what the splits divide
  if (layout.columns) {
    const int64_t columnBlocks = (channels + kThreads - 1) / kThreads;
    span = n;
    splits = std::min<int64_t>((wantedBlocks + columnBlocks - 1) / columnBlocks, (n + 15) / 16);
  } else {
    span = int64_t{n} * positions;
    const int64_t perBlock = int64_t{16} * kThreads;
    splits = std::min<int64_t>((wantedBlocks + channels - 1) / channels,
                               (span + perBlock - 1) / perBlock);
  }
  layout.splits = static_cast<int>(std::clamp<int64_t>(splits, 1, 65535));
  layout.chunk = (span + layout.splits - 1) / layout.splits;
  return layout;
}

template <class Term>
__global__ void __launch_bounds__(kThreads)
    channelPlanesKernel(Term term, ChannelLayout layout, Sums* partial) {
  const int c = blockIdx.x;
  const int split = blockIdx.y;
  const int64_t positions = layout.positions;
  const int64_t values = int64_t{layout.n} * positions;
  const int64_t begin = split * layout.chunk;
  const int64_t end = smaller(begin + layout.chunk, values);
  Sums sum{};
  int64_t j = begin + threadIdx.x;
  if (j < end) {
    // (example, position) of j, then of j + blockDim.x, ... without dividing.
    auto example = static_cast<int64_t>(layout.positionsDivider.quotient(static_cast<uint64_t>(j)));
    int64_t position = j - example * positions;
    const int64_t stepExamples = static_cast<int64_t>(layout.positionsDivider.quotient(blockDim.x));
    const int64_t stepPositions = blockDim.x - stepExamples * positions;
    for (; j < end; j += blockDim.x) {
      sum = sum + term(c, (example * layout.channels + c) * positions + position);
      position += stepPositions;
      example += stepExamples;
      if (position >= positions) {
        position -= positions;
        ++example;
      }
    }
  }
  sum = blockSum(sum);
  if (threadIdx.x == 0)
    partial[int64_t{split} * layout.channels + c] = sum;
}

template <class Term>
__global__ void __launch_bounds__(kThreads)
    channelColumnsKernel(Term term, ChannelLayout layout, Sums* partial) {
  const int64_t c = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (c >= layout.channels)
    return;
  const int split = blockIdx.y;
  const int64_t begin = split * layout.chunk;
  const int64_t end = smaller(begin + layout.chunk, layout.n);
  Sums sum{};
  for (int64_t e = begin; e < end; ++e)
    sum = sum + term(static_cast<int>(c), e * layout.channels + c);
  partial[int64_t{split} * layout.channels + c] = sum;
}

template <class Finish>
__global__ void __launch_bounds__(kThreads)
    channelFinishKernel(Finish finish, const Sums* partial, int channels, int splits) {
  for (int64_t c = firstIndex(); c < channels; c += gridStride()) {
    Sums total{};
    for (int s = 0; s < splits; ++s)
      total = total + partial[int64_t{s} * channels + c];
    finish(static_cast<int>(c), total);
  }
}

// Sums term(c, index) over every value of every channel and calls finish(c,
// total) once per channel; `partial` holds layout.splits * channels Sums.
template <class Term, class Finish>
void reduceChannels(const ChannelLayout& layout, const Term& term, const Finish& finish,
                    Sums* partial, cudaStream_t stream, const char* name) {
  if (layout.columns) {
    const dim3 grid(static_cast<unsigned>((layout.channels + kThreads - 1) / kThreads),
                    static_cast<unsigned>(layout.splits));
    channelColumnsKernel<<<grid, kThreads, 0, stream>>>(term, layout, partial);
  } else {
    const dim3 grid(static_cast<unsigned>(layout.channels), static_cast<unsigned>(layout.splits));
    channelPlanesKernel<<<grid, kThreads, 0, stream>>>(term, layout, partial);
  }
  checkLaunch(name);
  channelFinishKernel<<<gridFor(layout.channels), kThreads, 0, stream>>>(
      finish, partial, layout.channels, layout.splits);
  checkLaunch(name);
}

// The terms and finishes of the reductions.

struct ValueTerm {
  const float* x;
  __device__ Sums operator()(int, int64_t i) const { return {x[i], 0.0}; }
};

struct AddToBias {
  float* dbias;
  __device__ void operator()(int c, Sums total) const { dbias[c] += static_cast<float>(total.a); }
};

// The first pass of batch statistics: a channel's sum and its mean.
struct ChannelMoments {
  double sum;
  double mean;
};

struct StoreMoments {
  ChannelMoments* moments;
  double count;
  __device__ void operator()(int c, Sums total) const { moments[c] = {total.a, total.a / count}; }
};

struct SquaredDeviationTerm {
  const float* x;
  const ChannelMoments* moments;
  __device__ Sums operator()(int c, int64_t i) const {
    return {element::squaredDeviation(x[i], moments[c].mean), 0.0};
  }
};

struct StoreStats {
  const ChannelMoments* moments;
  element::ChannelStats* stats;
  double count;
  float eps;
  __device__ void operator()(int c, Sums total) const {
    stats[c] = element::channelStats(moments[c].sum, total.a, count, eps);
  }
};

// (dy, dy * xhat) of one value.
struct GradientTerm {
  const float* x;
  const float* dy;
  const element::ChannelStats* stats;
  __device__ Sums operator()(int c, int64_t i) const {
    return {dy[i], element::dyXhat(stats[c], x[i], dy[i])};
  }
};

struct StoreGradientMeans {
  element::GradientMeans* means;
  double count;
  __device__ void operator()(int c, Sums total) const {
    means[c] = element::gradientMeans(total.a, total.b, count);
  }
};

struct AddToBatchNormWeights {
  float* dgamma;
  float* dshift;
  __device__ void operator()(int c, Sums total) const {
    dgamma[c] += static_cast<float>(total.b);
    dshift[c] += static_cast<float>(total.a);
  }
};

// ---- batch normalisation -----------------------------------------------------------

// The scratch of a batchnorm call, one allocation: partial sums, then per
// channel moments, statistics and gradient means.
struct BatchNormScratch {
  BatchNormScratch(const ChannelLayout& layout, cudaStream_t stream)
      : memory(partialBytes(layout) + perChannelBytes(layout), stream) {
    size_t offset = 0;
    partial = memory.at<Sums>(offset);
    offset += partialBytes(layout);
    moments = memory.at<ChannelMoments>(offset);
    offset += regionBytes<ChannelMoments>(layout.channels);
    stats = memory.at<element::ChannelStats>(offset);
    offset += regionBytes<element::ChannelStats>(layout.channels);
    means = memory.at<element::GradientMeans>(offset);
  }

  static size_t partialBytes(const ChannelLayout& layout) {
    return regionBytes<Sums>(int64_t{layout.splits} * layout.channels);
  }
  static size_t perChannelBytes(const ChannelLayout& layout) {
    return regionBytes<ChannelMoments>(layout.channels) +
           regionBytes<element::ChannelStats>(layout.channels) +
           regionBytes<element::GradientMeans>(layout.channels);
  }

  Scratch memory;
  Sums* partial = nullptr;
  ChannelMoments* moments = nullptr;
  element::ChannelStats* stats = nullptr;
  element::GradientMeans* means = nullptr;
};

// Mean and inverse standard deviation of every channel into scratch.stats:
// two passes, as the twin takes them (mean first, then squares around it).
void batchStatistics(const ChannelLayout& layout, const float* x, float eps,
                     BatchNormScratch& scratch, cudaStream_t stream, const char* name) {
  const double count = double(layout.n) * double(layout.positions);
  reduceChannels(layout, ValueTerm{x}, StoreMoments{scratch.moments, count}, scratch.partial,
                 stream, name);
  reduceChannels(layout, SquaredDeviationTerm{x, scratch.moments},
                 StoreStats{scratch.moments, scratch.stats, count, eps}, scratch.partial, stream,
                 name);
}

__global__ void __launch_bounds__(kThreads)
    batchNormForwardKernel(NchwSplitter at, int64_t count, const float* x, const float* gamma,
                           const float* shift, const element::ChannelStats* stats, float* y) {
  for (int64_t i = firstIndex(); i < count; i += gridStride()) {
    const int c = at.split(i).channel;
    y[i] = element::batchNormOutput(stats[c], gamma[c], shift[c], x[i]);
  }
}

__global__ void __launch_bounds__(kThreads)
    batchNormBackwardDataKernel(NchwSplitter at, int64_t count, const float* x, const float* dy,
                                const float* gamma, const element::ChannelStats* stats,
                                const element::GradientMeans* means, float* dx, float beta) {
  for (int64_t i = firstIndex(); i < count; i += gridStride()) {
    const int c = at.split(i).channel;
    dx[i] = element::blend(dx + i,
                           element::batchNormGrad(stats[c], gamma[c], means[c], x[i], dy[i]), beta);
  }
}

// ---- pooling -------------------------------------------------------------------------

// Thread per output: i = (plane, oh, ow).
__global__ void __launch_bounds__(kThreads)
    poolForwardKernel(PoolParams p, Divider outPlane, Divider outW, int64_t count, const float* x,
                      float* y, int32_t* argmax) {
  const int64_t inPlane = int64_t{p.inH} * p.inW;
  for (int64_t i = firstIndex(); i < count; i += gridStride()) {
    const uint64_t plane = outPlane.quotient(static_cast<uint64_t>(i));
    const uint64_t o = outPlane.remainder(static_cast<uint64_t>(i), plane);
    const uint64_t oh = outW.quotient(o);
    const int ow = static_cast<int>(outW.remainder(o, oh));
    const float* in = x + static_cast<int64_t>(plane) * inPlane;
    if (p.max)
      y[i] = element::poolMax(p, in, static_cast<int>(oh), ow, argmax + i);
    else
      y[i] = element::poolAverage(p, in, static_cast<int>(oh), ow);
  }
}

// Thread per input, gathering the gradients of the outputs that read it.
__global__ void __launch_bounds__(kThreads)
    poolBackwardKernel(PoolParams p, Divider inPlane, Divider inW, int64_t count, const float* dy,
                       const int32_t* argmax, float* dx, float beta) {
  const int64_t outPlane = int64_t{p.outH} * p.outW;
  for (int64_t i = firstIndex(); i < count; i += gridStride()) {
    const uint64_t plane = inPlane.quotient(static_cast<uint64_t>(i));
    const uint64_t within = inPlane.remainder(static_cast<uint64_t>(i), plane);
    const uint64_t ih = inW.quotient(within);
    const int iw = static_cast<int>(inW.remainder(within, ih));
    const int64_t off = static_cast<int64_t>(plane) * outPlane;
    const float start = element::startOfSum(dx + i, beta);
    dx[i] = p.max ? element::poolMaxGrad(p, dy + off, argmax + off, static_cast<int>(ih), iw, start)
                  : element::poolAverageGrad(p, dy + off, static_cast<int>(ih), iw, start);
  }
}

// ---- local response normalisation ---------------------------------------------------

__global__ void __launch_bounds__(kThreads)
    lrnForwardKernel(LrnParams p, NchwSplitter at, int channels, int64_t plane, int64_t count,
                     const float* x, float* y, float* scale) {
  for (int64_t i = firstIndex(); i < count; i += gridStride()) {
    const Nchw e = at.split(i);
    const int64_t base = e.example * channels * plane + e.position;
    const float s = element::lrnScale(p, x + base, plane, e.channel, channels);
    scale[i] = s;
    y[i] = element::lrnOutput(p, x[i], s);
  }
}

__global__ void __launch_bounds__(kThreads)
    lrnBackwardKernel(LrnParams p, NchwSplitter at, int channels, int64_t plane, int64_t count,
                      const float* x, const float* y, const float* scale, const float* dy,
                      float* dx, float beta) {
  for (int64_t i = firstIndex(); i < count; i += gridStride()) {
    const Nchw e = at.split(i);
    const int64_t base = e.example * channels * plane + e.position;
    dx[i] = element::lrnGrad(p, x + base, y + base, scale + base, dy + base, plane, e.channel,
                             channels, dx + i, beta);
  }
}

// ---- softmax ---------------------------------------------------------------------------

// Thread per position (positions of a plane are neighbours in memory, so a
// warp reads 32 neighbouring floats per channel).
__global__ void __launch_bounds__(kThreads)
    softmaxStatsThreadKernel(Divider plane, int channels, int64_t positions, const float* logits,
                             float* stats) {
  const auto planeSize = static_cast<int64_t>(plane.divisor());
  for (int64_t q = firstIndex(); q < positions; q += gridStride()) {
    const uint64_t e = plane.quotient(static_cast<uint64_t>(q));
    const auto p = static_cast<int64_t>(plane.remainder(static_cast<uint64_t>(q), e));
    const float* z = logits + static_cast<int64_t>(e) * channels * planeSize + p;
    float max = -INFINITY;
    for (int c = 0; c < channels; ++c)
      max = element::softmaxMax(max, z[c * planeSize]);
    double sum = 0;
    for (int c = 0; c < channels; ++c)
      sum += element::softmaxTerm(z[c * planeSize], max);
    stats[2 * q] = max;
    stats[2 * q + 1] = static_cast<float>(sum);
  }
}

// Warp per position, lanes over the channels (for small planes, an fc
// layer's logits above all: a position's channels are then contiguous).
__global__ void __launch_bounds__(kThreads)
    softmaxStatsWarpKernel(Divider plane, int channels, int64_t positions, const float* logits,
                           float* stats) {
  const auto planeSize = static_cast<int64_t>(plane.divisor());
  const int lane = threadIdx.x % kWarp;
  const int64_t firstWarp = firstIndex() / kWarp;
  const int64_t warps = gridStride() / kWarp;
  for (int64_t q = firstWarp; q < positions; q += warps) {
    const uint64_t e = plane.quotient(static_cast<uint64_t>(q));
    const auto p = static_cast<int64_t>(plane.remainder(static_cast<uint64_t>(q), e));
    const float* z = logits + static_cast<int64_t>(e) * channels * planeSize + p;
    float max = -INFINITY;
    for (int c = lane; c < channels; c += kWarp)
      max = element::softmaxMax(max, z[c * planeSize]);
    for (int offset = kWarp / 2; offset > 0; offset /= 2)
      max = element::softmaxMax(max, __shfl_xor_sync(0xffffffffu, max, offset));
    double sum = 0;
    for (int c = lane; c < channels; c += kWarp)
      sum += element::softmaxTerm(z[c * planeSize], max);
    for (int offset = kWarp / 2; offset > 0; offset /= 2)
      sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    if (lane == 0) {
      stats[2 * q] = max;
      stats[2 * q + 1] = static_cast<float>(sum);
    }
  }
}

__global__ void __launch_bounds__(kThreads)
    softmaxProbabilitiesKernel(NchwSplitter at, int64_t plane, int64_t count, const float* logits,
                               const float* stats, float* y) {
  for (int64_t i = firstIndex(); i < count; i += gridStride()) {
    const Nchw e = at.split(i);
    const int64_t position = e.example * plane + e.position;
    y[i] = element::softmaxProbability(logits[i], stats + 2 * position);
  }
}

__global__ void __launch_bounds__(kThreads)
    softmaxBackwardKernel(NchwSplitter at, int64_t plane, int64_t count, const float* logits,
                          const float* stats, const int32_t* labels, int classOffset, float scale,
                          float* dlogits, float beta) {
  for (int64_t i = firstIndex(); i < count; i += gridStride()) {
    const Nchw e = at.split(i);
    const int64_t position = e.example * plane + e.position;
    const bool isLabel = labels[position] - classOffset == e.channel;
    const float g = element::softmaxGrad(logits[i], stats + 2 * position, isLabel, scale);
    dlogits[i] = element::blend(dlogits + i, g, beta);
  }
}

// Thread per position; each block writes its sums to partial[block]: a, the
// loss, and b, the correct positions (a double counts exactly below 2^53).
__global__ void __launch_bounds__(kThreads)
    softmaxLossKernel(Divider plane, int channels, int64_t positions, const float* logits,
                      const float* stats, const int32_t* labels, int classOffset, Sums* partial) {
  const auto planeSize = static_cast<int64_t>(plane.divisor());
  Sums sum{};
  for (int64_t q = firstIndex(); q < positions; q += gridStride()) {
    const int c = element::heldClass(labels[q], classOffset, channels);
    if (c < 0)
      continue;
    const uint64_t e = plane.quotient(static_cast<uint64_t>(q));
    const auto p = static_cast<int64_t>(plane.remainder(static_cast<uint64_t>(q), e));
    const float z = logits[(static_cast<int64_t>(e) * channels + c) * planeSize + p];
    sum.a += element::softmaxLossTerm(stats + 2 * q, z);
    sum.b += element::softmaxCorrect(stats + 2 * q, z) ? 1.0 : 0.0;
  }
  sum = blockSum(sum);
  if (threadIdx.x == 0)
    partial[blockIdx.x] = sum;
}

// One block adds the blocks' sums (a fixed order: same inputs, same bits).
__global__ void __launch_bounds__(kThreads)
    softmaxLossTotalKernel(const Sums* partial, int blocks, Sums* total) {
  Sums sum{};
  for (int b = threadIdx.x; b < blocks; b += blockDim.x)
    sum = sum + partial[b];
  sum = blockSum(sum);
  if (threadIdx.x == 0)
    *total = sum;
}

}  // namespace

// ---- the launchers ---------------------------------------------------------------------

void fill(float* x, int64_t count, float value, Stream stream) {
  launchFlat(FillOp{x, value}, count, aligned16(x), stream, "fill");
}

void accumulate(const float* src, float* dst, int64_t count, float beta, Stream stream) {
  launchFlat(AccumulateOp{src, dst, beta}, count, aligned16(src) && aligned16(dst), stream,
             "accumulate");
}

void add(const float* a, const float* b, float* y, int64_t count, Stream stream) {
  launchFlat(AddOp{a, b, y}, count, aligned16(a) && aligned16(b) && aligned16(y), stream, "add");
}

void reduceAdd(const float* x, float* y, int64_t count, Stream stream) {
  launchFlat(ReduceAddOp{x, y}, count, aligned16(x) && aligned16(y), stream, "reduceAdd");
}

namespace {

// One element of a synthetic batch (nn::syntheticFill's loop body).
struct SyntheticOp {
  const float* means;
  const int32_t* classes;
  const uint64_t* keys;
  float* out;
  NchwSplitter split;
  Divider width;
  int c, h, w, gridH, gridW;
  float noise;
  template <int W>
  __device__ void apply(int64_t i) const {
    for (int k = 0; k < W; ++k) {
      const Nchw p = split.split(i + k);
      const uint64_t y = width.quotient(static_cast<uint64_t>(p.position));
      const auto x = static_cast<int>(width.remainder(static_cast<uint64_t>(p.position), y));
      const int64_t cells = int64_t{gridH} * gridW;
      const float* row = means + (int64_t{classes[p.example]} * c + p.channel) * cells +
                         int64_t{static_cast<int>(y) * gridH / h} * gridW;
      const int64_t e = int64_t{p.channel} * h * w + p.position;
      // No contraction into an FMA: the host adds the rounded product.
      out[i + k] = __fadd_rn(
          row[x * gridW / w],
          __fmul_rn(noise, normalFloat(hashOf(keys[p.example], static_cast<uint64_t>(e)))));
    }
  }
};

// One token id of a token batch (twin::syntheticTokens' loop body).
struct SyntheticTokensOp {
  uint64_t seed, vocab;
  int64_t firstIndex;
  Divider positions;
  float* out;
  template <int W>
  __device__ void apply(int64_t i) const {
    for (int k = 0; k < W; ++k) {
      const auto flat = static_cast<uint64_t>(i + k);
      const uint64_t example = positions.quotient(flat);
      const auto p = static_cast<int64_t>(positions.remainder(flat, example));
      out[i + k] = static_cast<float>(
          element::syntheticToken(seed, vocab, static_cast<uint64_t>(firstIndex) + example, p));
    }
  }
};

}  // namespace

void syntheticTokens(const SyntheticTokens& batch, float* out, Stream stream) {
  const int64_t count = int64_t{batch.n} * batch.positions;
  if (count <= 0)
    return;
  if (batch.vocab < 1 || batch.firstIndex < 0)
    throw std::invalid_argument(
        "strata::kernels::cuda::syntheticTokens: vocab must be positive, firstIndex not negative");
  const SyntheticTokensOp op{batch.seed, static_cast<uint64_t>(batch.vocab), batch.firstIndex,
                             Divider(static_cast<uint64_t>(batch.positions)), out};
  launchFlat(op, count, false, stream, "syntheticTokens");
}

void syntheticExamples(const float* means, const int32_t* classes, const uint64_t* keys,
                       SyntheticShape shape, float noise, float* out, Stream stream) {
  const int64_t plane = int64_t{shape.h} * shape.w;
  const int64_t count = int64_t{shape.n} * shape.c * plane;
  if (count <= 0)
    return;
  const SyntheticOp op{means,
                       classes,
                       keys,
                       out,
                       NchwSplitter(shape.c, plane),
                       Divider(static_cast<uint64_t>(std::max(1, shape.w))),
                       shape.c,
                       shape.h,
                       shape.w,
                       shape.gridH,
                       shape.gridW,
                       noise};
  launchFlat(op, count, false, stream, "syntheticExamples");
}

void reluForward(const float* x, float* y, int64_t count, Stream stream) {
  launchFlat(ReluForwardOp{x, y}, count, aligned16(x) && aligned16(y), stream, "reluForward");
}

void reluBackward(const float* y, const float* dy, float* dx, int64_t count, float beta,
                  Stream stream) {
  launchFlat(ReluBackwardOp{y, dy, dx, beta}, count, aligned16(y) && aligned16(dy) && aligned16(dx),
             stream, "reluBackward");
}

void dropoutForward(const DropoutParams& p, Shape4 shape, const float* x, float* y, Stream stream) {
  launchDropout<false>(p, shape, x, y, 0.0f, stream, "dropoutForward");
}

void dropoutBackward(const DropoutParams& p, Shape4 shape, const float* dy, float* dx, float beta,
                     Stream stream) {
  launchDropout<true>(p, shape, dy, dx, beta, stream, "dropoutBackward");
}

void biasAdd(float* y, const float* bias, int n, int channels, int64_t positions, Stream stream) {
  const int64_t count = int64_t{n} * channels * positions;
  if (count <= 0)
    return;
  biasAddKernel<<<gridFor(count), kThreads, 0, stream>>>(y, bias, NchwSplitter(channels, positions),
                                                         count);
  checkLaunch("biasAdd");
}

void biasGrad(const float* dy, float* dbias, int n, int channels, int64_t positions,
              Stream stream) {
  if (n <= 0 || channels <= 0 || positions <= 0)
    return;
  const ChannelLayout layout = channelLayout(n, channels, positions);
  Scratch scratch(regionBytes<Sums>(int64_t{layout.splits} * channels), stream);
  reduceChannels(layout, ValueTerm{dy}, AddToBias{dbias}, scratch.at<Sums>(0), stream, "biasGrad");
  scratch.release();
}

void poolForward(const PoolParams& p, int n, const float* x, float* y, int32_t* argmax,
                 Stream stream) {
  const int64_t outPlane = int64_t{p.outH} * p.outW;
  const int64_t count = int64_t{n} * p.c * outPlane;
  if (count <= 0)
    return;
  if (p.max && argmax == nullptr)
    throw std::invalid_argument("strata::kernels::cuda::poolForward: max pooling needs argmax");
  poolForwardKernel<<<gridFor(count), kThreads, 0, stream>>>(
      p, Divider(static_cast<uint64_t>(outPlane)), Divider(static_cast<uint64_t>(p.outW)), count, x,
      y, argmax);
  checkLaunch("poolForward");
}

void poolBackward(const PoolParams& p, int n, const float* dy, const int32_t* argmax, float* dx,
                  float beta, Stream stream) {
  const int64_t inPlane = int64_t{p.inH} * p.inW;
  const int64_t count = int64_t{n} * p.c * inPlane;
  if (count <= 0)
    return;
  if (p.max && argmax == nullptr)
    throw std::invalid_argument("strata::kernels::cuda::poolBackward: max pooling needs argmax");
  poolBackwardKernel<<<gridFor(count), kThreads, 0, stream>>>(
      p, Divider(static_cast<uint64_t>(inPlane)), Divider(static_cast<uint64_t>(p.inW)), count, dy,
      argmax, dx, beta);
  checkLaunch("poolBackward");
}

void lrnForward(const LrnParams& p, Shape4 shape, const float* x, float* y, float* scale,
                Stream stream) {
  const int64_t count = shape.elements();
  if (count <= 0)
    return;
  lrnForwardKernel<<<gridFor(count), kThreads, 0, stream>>>(
      p, NchwSplitter(shape.c, shape.plane()), shape.c, shape.plane(), count, x, y, scale);
  checkLaunch("lrnForward");
}

void lrnBackward(const LrnParams& p, Shape4 shape, const float* x, const float* y,
                 const float* scale, const float* dy, float* dx, float beta, Stream stream) {
  const int64_t count = shape.elements();
  if (count <= 0)
    return;
  lrnBackwardKernel<<<gridFor(count), kThreads, 0, stream>>>(
      p, NchwSplitter(shape.c, shape.plane()), shape.c, shape.plane(), count, x, y, scale, dy, dx,
      beta);
  checkLaunch("lrnBackward");
}

void batchNormForward(Shape4 shape, const float* x, const float* gamma, const float* shift,
                      float eps, float* y, Stream stream) {
  const int64_t count = shape.elements();
  if (count <= 0)
    return;
  const ChannelLayout layout = channelLayout(shape.n, shape.c, shape.plane());
  BatchNormScratch scratch(layout, stream);
  batchStatistics(layout, x, eps, scratch, stream, "batchNormForward");
  batchNormForwardKernel<<<gridFor(count), kThreads, 0, stream>>>(
      NchwSplitter(shape.c, shape.plane()), count, x, gamma, shift, scratch.stats, y);
  checkLaunch("batchNormForward");
  scratch.memory.release();
}

void batchNormBackwardData(Shape4 shape, const float* x, const float* dy, const float* gamma,
                           float eps, float* dx, float beta, Stream stream) {
  const int64_t count = shape.elements();
  if (count <= 0)
    return;
  const ChannelLayout layout = channelLayout(shape.n, shape.c, shape.plane());
  const double m = double(shape.n) * double(shape.plane());
  BatchNormScratch scratch(layout, stream);
  batchStatistics(layout, x, eps, scratch, stream, "batchNormBackwardData");
  reduceChannels(layout, GradientTerm{x, dy, scratch.stats}, StoreGradientMeans{scratch.means, m},
                 scratch.partial, stream, "batchNormBackwardData");
  batchNormBackwardDataKernel<<<gridFor(count), kThreads, 0, stream>>>(
      NchwSplitter(shape.c, shape.plane()), count, x, dy, gamma, scratch.stats, scratch.means, dx,
      beta);
  checkLaunch("batchNormBackwardData");
  scratch.memory.release();
}

void batchNormBackwardWeights(Shape4 shape, const float* x, const float* dy, float eps,
                              float* dgamma, float* dshift, Stream stream) {
  if (shape.elements() <= 0)
    return;
  const ChannelLayout layout = channelLayout(shape.n, shape.c, shape.plane());
  BatchNormScratch scratch(layout, stream);
  batchStatistics(layout, x, eps, scratch, stream, "batchNormBackwardWeights");
  reduceChannels(layout, GradientTerm{x, dy, scratch.stats}, AddToBatchNormWeights{dgamma, dshift},
                 scratch.partial, stream, "batchNormBackwardWeights");
  scratch.memory.release();
}

void softmaxStats(Shape4 shape, const float* logits, float* stats, Stream stream) {
  const int64_t positions = int64_t{shape.n} * shape.plane();
  if (positions <= 0)
    return;
  const Divider plane(static_cast<uint64_t>(shape.plane()));
  if (shape.plane() < kWarp && shape.c >= kWarp) {
    softmaxStatsWarpKernel<<<gridFor(positions * kWarp), kThreads, 0, stream>>>(
        plane, shape.c, positions, logits, stats);
  } else {
    softmaxStatsThreadKernel<<<gridFor(positions), kThreads, 0, stream>>>(plane, shape.c, positions,
                                                                          logits, stats);
  }
  checkLaunch("softmaxStats");
}

void softmaxProbabilities(Shape4 shape, const float* logits, const float* stats, float* y,
                          Stream stream) {
  const int64_t count = shape.elements();
  if (count <= 0)
    return;
  softmaxProbabilitiesKernel<<<gridFor(count), kThreads, 0, stream>>>(
      NchwSplitter(shape.c, shape.plane()), shape.plane(), count, logits, stats, y);
  checkLaunch("softmaxProbabilities");
}

LossSum softmaxLoss(Shape4 shape, const float* logits, const float* stats, const int32_t* labels,
                    int classOffset, Stream stream) {
  const int64_t positions = int64_t{shape.n} * shape.plane();
  if (positions <= 0)
    return {};
  const unsigned blocks = gridFor(positions);
  Scratch scratch(regionBytes<Sums>(blocks + 1), stream);
  auto* partial = scratch.at<Sums>(0);
  auto* total = partial + blocks;
  softmaxLossKernel<<<blocks, kThreads, 0, stream>>>(Divider(static_cast<uint64_t>(shape.plane())),
                                                     shape.c, positions, logits, stats, labels,
                                                     classOffset, partial);
  checkLaunch("softmaxLoss");
  softmaxLossTotalKernel<<<1, kThreads, 0, stream>>>(partial, static_cast<int>(blocks), total);
  checkLaunch("softmaxLoss");
  Sums host{};
  check(cudaMemcpyAsync(&host, total, sizeof host, cudaMemcpyDeviceToHost, stream),
        "cudaMemcpyAsync(softmaxLoss)");
  scratch.release();
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize(softmaxLoss)");
  LossSum out;
  out.loss = host.a;
  out.correct = static_cast<int64_t>(host.b);
  return out;
}

void softmaxBackward(Shape4 shape, const float* logits, const float* stats, const int32_t* labels,
                     int classOffset, float scale, float* dlogits, float beta, Stream stream) {
  const int64_t count = shape.elements();
  if (count <= 0)
    return;
  softmaxBackwardKernel<<<gridFor(count), kThreads, 0, stream>>>(
      NchwSplitter(shape.c, shape.plane()), shape.plane(), count, logits, stats, labels,
      classOffset, scale, dlogits, beta);
  checkLaunch("softmaxBackward");
}

void sgdMomentum(float* w, float* v, const float* g, int64_t count, float learningRate,
                 float momentum, float weightDecay, Stream stream) {
  launchFlat(SgdMomentumOp{w, v, g, learningRate, momentum, weightDecay}, count,
             aligned16(w) && aligned16(v) && aligned16(g), stream, "sgdMomentum");
}

}  // namespace strata::kernels::cuda

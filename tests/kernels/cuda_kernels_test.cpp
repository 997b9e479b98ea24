// Every CUDA kernel of kernels.h against its CPU twin on the same inputs (in
// device memory, copied explicitly): bit for bit where the contract says so (elementwise,
// dropout, pooling, bias add, sgd, adam, the LRN scale), within stated relative
// tolerances where CUDA's exp/log/pow or the order of a sum differ. Sizes
// run from one element to millions (more than one wave of a grid-stride
// loop), pointers aligned and not (the float4 and scalar paths). Without a
// usable GPU the program exits 77: skipped (tests/gpu_skip.h).
#define CATCH_CONFIG_RUNNER
#include <cuda_runtime.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#include "cases.h"
#include "gpu_skip.h"
#include "strata/kernels/kernels.h"
#include "strata/kernels/precision.h"

namespace strata::kernels::test {
namespace {

// Tolerances, relative to the expected value (absolute near zero):
// CUDA's expf and powf are within 2 and 4 ulp of the C library's, and a
// float result of a double sum taken in another order is within an ulp.
constexpr double kTranscendental = 1e-5;  // exp or pow, then a few float ops
constexpr double kReduction = 1e-5;       // a sum in another order, rounded to float

void requireCuda(cudaError_t status, const char* what) {
  if (status != cudaSuccess)
    FAIL(what << ": " << cudaGetErrorString(status));
}

// One stream for every test, as the CUDA backend holds one per worker.
cudaStream_t testStream() {
  static cudaStream_t stream = [] {
    cudaStream_t s = nullptr;
    requireCuda(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
    return s;
  }();
  return stream;
}

// A copy of host values in device memory (cudaMalloc, as the backend's
// buffers: the host never dereferences it), `offset` elements past a
// 256-byte aligned allocation (offset 1: no float4 path). Copies go on the
// test stream and are waited for.
template <class T>
class DeviceArray {
 public:
  explicit DeviceArray(const std::vector<T>& values, int offset = 0) : count_(values.size()) {
    requireCuda(cudaMalloc(&base_, (values.size() + 4) * sizeof(T)), "cudaMalloc");
    data_ = base_ + offset;
    if (!values.empty()) {
      requireCuda(cudaMemcpyAsync(data_, values.data(), values.size() * sizeof(T),
                                  cudaMemcpyHostToDevice, testStream()),
                  "cudaMemcpyAsync (to the device)");
      requireCuda(cudaStreamSynchronize(testStream()), "cudaStreamSynchronize");
    }
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  ~DeviceArray() { cudaFree(base_); }

  T* get() { return data_; }
  // The values, copied back once the kernels before on the test stream are
  // done (the copy is ordered after them, and waited for).
  std::vector<T> host() const {
    std::vector<T> out(count_);
    if (count_ > 0) {
      requireCuda(cudaMemcpyAsync(out.data(), data_, count_ * sizeof(T), cudaMemcpyDeviceToHost,
                                  testStream()),
                  "cudaMemcpyAsync (to the host)");
      requireCuda(cudaStreamSynchronize(testStream()), "cudaStreamSynchronize");
    }
    return out;
  }

 private:
  size_t count_;
  T* base_ = nullptr;
  T* data_ = nullptr;
};

constexpr float kBetas[] = {0.0f, 1.0f, 0.5f};

// Element counts: tiny, odd, and beyond one wave of the grid (132 SMs x
// 2048 threads on an H100; each float4 thread takes 4).
const std::vector<int64_t> kCounts = {1, 3, 4, 5, 1000, 4099, (int64_t{1} << 22) + 3};

// fp32 <-> bf16 casts (precision.h): bit for bit, special values included
// (ties, NaN, infinities, denormals, the largest floats that overflow).
TEST_CASE("bf16 casts equal their twins bit for bit") {
  cudaStream_t stream = testStream();
  const uint32_t special[] = {0x3f808000u, 0x3f818000u, 0x7f7fffffu, 0x7f7f7fffu, 0x7f800000u,
                              0xff800000u, 0x7fc00000u, 0x7f800001u, 0xff800001u, 0x00000001u,
                              0x00018000u, 0x807fffffu, 0x80000000u, 0x3fffffffu};
  for (int64_t count : kCounts) {
    for (int offset : {0, 1}) {
      Random r(static_cast<uint64_t>(count * 3 + offset));
      INFO(count << " elements, offset " << offset);
      std::vector<float> x = r.floats(count);
      for (size_t i = 0; i < std::size(special) && i < x.size(); ++i)
        std::memcpy(&x[i * 7 % x.size()], &special[i], sizeof(float));
      DeviceArray<float> dx(x, offset);
      std::vector<uint16_t> expected(x.size());
      DeviceArray<uint16_t> half(expected, offset);
      twin::castToBf16(x.data(), expected.data(), count);
      cuda::castToBf16(dx.get(), half.get(), count, stream);
      REQUIRE(half.host() == expected);
      for (float beta : kBetas) {
        INFO("beta " << beta);
        const std::vector<float> start = destination(r, count, beta);
        std::vector<float> back = start;
        DeviceArray<float> out(start, offset);
        twin::castFromBf16(expected.data(), back.data(), count, beta);
        cuda::castFromBf16(half.get(), out.get(), count, beta, stream);
        // beta 0 is a pure widening (payloads kept); otherwise a NaN comes
        // out of beta * dst + value, whose payload the hardware picks.
        if (beta == 0.0f)
          requireSameBits(back, out.host(), "castFromBf16");
        else
          requireSameBitsOrNaN(back, out.host(), "castFromBf16");
      }
    }
  }
}

// A language model's synthetic token ids (twin::syntheticTokens): a pure
// function of the seed, the example's index and the position, so bit for
// bit; batches past one wave of the grid, from indices beyond 2^32.
TEST_CASE("synthetic token ids equal their twin's bit for bit") {
  cudaStream_t stream = testStream();
  for (const SyntheticTokens& batch :
       {SyntheticTokens{7, 50257, 0, 1, 1}, SyntheticTokens{20261126, 4096, 37, 5, 129},
        SyntheticTokens{3, 2, int64_t{1} << 33, 3, 64},
        SyntheticTokens{11, 1 << 24, 1000, 64, int64_t{1} << 16}}) {
    INFO(batch.n << " x " << batch.positions << " tokens of vocab " << batch.vocab);
    std::vector<float> expected(static_cast<size_t>(int64_t{batch.n} * batch.positions));
    twin::syntheticTokens(batch, expected.data());
    DeviceArray<float> made(std::vector<float>(expected.size(), -1.0f));
    cuda::syntheticTokens(batch, made.get(), stream);
    requireSameBits(expected, made.host(), "syntheticTokens");
  }
}

TEST_CASE("flat kernels equal their twins bit for bit") {
  cudaStream_t stream = testStream();
  for (int64_t count : kCounts) {
    for (int offset : {0, 1}) {
      Random r(static_cast<uint64_t>(count * 2 + offset));
      INFO(count << " elements, offset " << offset);
      const std::vector<float> x = r.coin() ? r.levels(count, -3, 3) : r.floats(count);
      const std::vector<float> other = r.floats(count);
      DeviceArray<float> dx(x, offset), dOther(other, offset);

      std::vector<float> expected(x.size());
      DeviceArray<float> out(expected, offset);
      twin::fill(expected.data(), count, 0.75f);
      cuda::fill(out.get(), count, 0.75f, stream);
      requireSameBits(expected, out.host(), "fill");

      twin::add(x.data(), other.data(), expected.data(), count);
      cuda::add(dx.get(), dOther.get(), out.get(), count, stream);
      requireSameBits(expected, out.host(), "add");

      twin::reluForward(x.data(), expected.data(), count);
      cuda::reluForward(dx.get(), out.get(), count, stream);
      requireSameBits(expected, out.host(), "reluForward");

      for (float beta : kBetas) {
        INFO("beta " << beta);
        const std::vector<float> start = destination(r, count, beta);
        expected = start;
        DeviceArray<float> acc(start, offset);
        twin::accumulate(x.data(), expected.data(), count, beta);
        cuda::accumulate(dx.get(), acc.get(), count, beta, stream);
        requireSameBits(expected, acc.host(), "accumulate");

        expected = start;
        DeviceArray<float> grad(start, offset);
        twin::reluBackward(x.data(), other.data(), expected.data(), count, beta);
        cuda::reluBackward(dx.get(), dOther.get(), grad.get(), count, beta, stream);
        requireSameBits(expected, grad.host(), "reluBackward");
      }

      expected = other;
      DeviceArray<float> sum(other, offset);
      twin::reduceAdd(x.data(), expected.data(), count);
      cuda::reduceAdd(dx.get(), sum.get(), count, stream);
      requireSameBits(expected, sum.host(), "reduceAdd");

      std::vector<float> w = r.floats(count), v = r.floats(count, -0.1f, 0.1f);
      DeviceArray<float> dw(w, offset), dv(v, offset);
      twin::sgdMomentum(w.data(), v.data(), other.data(), count, 0.01f, 0.9f, 5e-4f);
      cuda::sgdMomentum(dw.get(), dv.get(), dOther.get(), count, 0.01f, 0.9f, 5e-4f, stream);
      requireSameBits(w, dw.host(), "sgdMomentum weights");
      requireSameBits(v, dv.host(), "sgdMomentum velocity");
    }
  }
}

// Random small shapes plus a few large ones (many blocks, several splits).
std::vector<Shape4> shapesFor(Random& r, int cases, int maxChannels, std::vector<Shape4> large) {
  for (int i = 0; i < cases; ++i)
    large.push_back(randomShape(r, maxChannels));
  return large;
}

TEST_CASE("dropout kernels equal their twins bit for bit") {
  cudaStream_t stream = testStream();
  Random r(11);
  for (Shape4 s : shapesFor(r, 30, 9, {{300, 7, 5, 3}, {64, 4096, 1, 1}, {2, 3, 200, 201}})) {
    DropoutParams p = randomDropout(r);
    p.firstRow = r.integer(0, 100);
    p.channelOffset = r.integer(0, 5);
    INFO("shape " << describe(s) << ", channelOffset " << p.channelOffset);
    const std::vector<float> x = r.floats(s.elements());
    std::vector<float> expected(x.size());
    DeviceArray<float> dx(x), out(expected);
    twin::dropoutForward(p, s, x.data(), expected.data());
    cuda::dropoutForward(p, s, dx.get(), out.get(), stream);
    requireSameBits(expected, out.host(), "dropoutForward");
    for (float beta : kBetas) {
      INFO("beta " << beta);
      expected = destination(r, s.elements(), beta);
      DeviceArray<float> grad(expected);
      twin::dropoutBackward(p, s, x.data(), expected.data(), beta);
      cuda::dropoutBackward(p, s, dx.get(), grad.get(), beta, stream);
      requireSameBits(expected, grad.host(), "dropoutBackward");
    }
  }
}

TEST_CASE("bias kernels: biasAdd bit for bit, biasGrad within rounding") {
  cudaStream_t stream = testStream();
  Random r(12);
  for (Shape4 s : shapesFor(r, 30, 40, {{256, 64, 13, 13}, {1000, 300, 1, 1}, {5, 3, 1, 1}})) {
    INFO("shape " << describe(s));
    const std::vector<float> bias = r.floats(s.c);
    std::vector<float> y = r.floats(s.elements());
    DeviceArray<float> dy(y), dbias(bias);
    twin::biasAdd(y.data(), bias.data(), s.n, s.c, s.plane());
    cuda::biasAdd(dy.get(), dbias.get(), s.n, s.c, s.plane(), stream);
    requireSameBits(y, dy.host(), "biasAdd");

    const std::vector<float> g = r.floats(s.elements());
    std::vector<float> grad = r.floats(s.c);
    DeviceArray<float> dg(g), dgrad(grad);
    twin::biasGrad(g.data(), grad.data(), s.n, s.c, s.plane());
    cuda::biasGrad(dg.get(), dgrad.get(), s.n, s.c, s.plane(), stream);
    requireClose(grad, dgrad.host(), kReduction, kReduction, "biasGrad");
  }
}

TEST_CASE("pooling kernels equal their twins bit for bit") {
  cudaStream_t stream = testStream();
  Random r(13);
  for (int i = 0; i < 60; ++i) {
    const Shape4 base = i < 3 ? Shape4{32, 64, 55, 55} : randomShape(r);
    PoolParams p = randomPool(r, base.c, base.h, base.w);
    if (i < 3) {  // AlexNet's overlapping 3 x 3, stride 2 max pooling, and avg
      p = PoolParams{i != 1, base.c, 55, 55, 3, 3, 2, i == 2 ? 1 : 0, 27, 27};
      p.outH = p.outW = (55 + 2 * p.pad - 3) / 2 + 1;
    }
    const Shape4 in{base.n, p.c, p.inH, p.inW}, out{base.n, p.c, p.outH, p.outW};
    INFO("case " << i << ", " << (p.max ? "max" : "avg") << " " << p.kernelH << "x" << p.kernelW
                 << " stride " << p.stride << " pad " << p.pad << " over " << describe(in));
    const std::vector<float> x = r.levels(in.elements(), -2, 2);
    std::vector<float> expected(static_cast<size_t>(out.elements()));
    std::vector<int32_t> arg(expected.size());
    DeviceArray<float> dx(x), dy(expected);
    DeviceArray<int32_t> darg(arg);
    twin::poolForward(p, in.n, x.data(), expected.data(), p.max ? arg.data() : nullptr);
    cuda::poolForward(p, in.n, dx.get(), dy.get(), p.max ? darg.get() : nullptr, stream);
    requireSameBits(expected, dy.host(), "poolForward");
    if (p.max)
      REQUIRE(arg == darg.host());

    const std::vector<float> g = r.floats(out.elements());
    DeviceArray<float> dg(g);
    for (float beta : kBetas) {
      INFO("beta " << beta);
      expected = destination(r, in.elements(), beta);
      DeviceArray<float> grad(expected);
      twin::poolBackward(p, in.n, g.data(), arg.data(), expected.data(), beta);
      cuda::poolBackward(p, in.n, dg.get(), darg.get(), grad.get(), beta, stream);
      requireSameBits(expected, grad.host(), "poolBackward");
    }
  }
  const PoolParams noArgmax{true, 1, 2, 2, 2, 2, 1, 0, 1, 1};
  std::vector<float> one(4);
  DeviceArray<float> in(one), out(one);
  CHECK_THROWS_AS(cuda::poolForward(noArgmax, 1, in.get(), out.get(), nullptr, stream),
                  std::invalid_argument);
}

TEST_CASE("LRN kernels: scale bit for bit, output and gradient within pow's ulps") {
  cudaStream_t stream = testStream();
  Random r(14);
  for (Shape4 s : shapesFor(r, 30, 13, {{16, 96, 27, 27}})) {
    const LrnParams p = randomLrn(r);
    INFO("shape " << describe(s) << ", size " << p.size);
    const std::vector<float> x = r.floats(s.elements());
    std::vector<float> y(x.size()), scale(x.size());
    DeviceArray<float> dx(x), dy(y), dscale(scale);
    twin::lrnForward(p, s, x.data(), y.data(), scale.data());
    cuda::lrnForward(p, s, dx.get(), dy.get(), dscale.get(), stream);
    requireSameBits(scale, dscale.host(), "lrnForward scale");
    requireClose(y, dy.host(), kTranscendental, kTranscendental, "lrnForward");

    const std::vector<float> g = r.floats(s.elements());
    DeviceArray<float> dg(g), ty(y), tscale(scale);
    for (float beta : kBetas) {
      INFO("beta " << beta);
      std::vector<float> expected = destination(r, s.elements(), beta);
      DeviceArray<float> grad(expected);
      twin::lrnBackward(p, s, x.data(), y.data(), scale.data(), g.data(), expected.data(), beta);
      cuda::lrnBackward(p, s, dx.get(), ty.get(), tscale.get(), dg.get(), grad.get(), beta, stream);
      requireClose(expected, grad.host(), kTranscendental, kTranscendental, "lrnBackward");
    }
  }
}

TEST_CASE("batchnorm kernels equal their twins within rounding") {
  cudaStream_t stream = testStream();
  const float eps = 1e-5f;
  Random r(15);
  // Planes and columns layouts, one split and many.
  for (Shape4 s : shapesFor(
           r, 30, 13, {{128, 64, 28, 28}, {3, 5, 200, 300}, {1024, 512, 1, 1}, {2, 700, 1, 1}})) {
    INFO("shape " << describe(s));
    const std::vector<float> x = r.floats(s.elements(), 3.0f, 5.0f);
    const std::vector<float> gamma = r.floats(s.c), shift = r.floats(s.c);
    std::vector<float> y(x.size());
    DeviceArray<float> dx(x), dgamma(gamma), dshift(shift), dy(y);
    twin::batchNormForward(s, x.data(), gamma.data(), shift.data(), eps, y.data());
    cuda::batchNormForward(s, dx.get(), dgamma.get(), dshift.get(), eps, dy.get(), stream);
    requireClose(y, dy.host(), kReduction, kReduction, "batchNormForward");

    const std::vector<float> g = r.floats(s.elements());
    DeviceArray<float> dg(g);
    for (float beta : kBetas) {
      INFO("beta " << beta);
      std::vector<float> expected = destination(r, s.elements(), beta);
      DeviceArray<float> grad(expected);
      twin::batchNormBackwardData(s, x.data(), g.data(), gamma.data(), eps, expected.data(), beta);
      cuda::batchNormBackwardData(s, dx.get(), dg.get(), dgamma.get(), eps, grad.get(), beta,
                                  stream);
      // Cancellation (dy - mean(dy) - xhat mean(dy xhat)) magnifies the
      // rounding of the means: an absolute tolerance on the scale of dy.
      requireClose(expected, grad.host(), kReduction, 1e-4, "batchNormBackwardData");
    }

    std::vector<float> dgammaSum = r.floats(s.c), dshiftSum = r.floats(s.c);
    DeviceArray<float> ddgamma(dgammaSum), ddshift(dshiftSum);
    twin::batchNormBackwardWeights(s, x.data(), g.data(), eps, dgammaSum.data(), dshiftSum.data());
    cuda::batchNormBackwardWeights(s, dx.get(), dg.get(), eps, ddgamma.get(), ddshift.get(),
                                   stream);
    requireClose(dgammaSum, ddgamma.host(), kReduction, 1e-3, "batchNormBackwardWeights dgamma");
    requireClose(dshiftSum, ddshift.host(), kReduction, 1e-3, "batchNormBackwardWeights dshift");
  }
}

TEST_CASE("softmax kernels equal their twins within exp's ulps, class slices included") {
  cudaStream_t stream = testStream();
  Random r(16);
  // Warp per position (h*w < 32: an fc layer's logits) and thread per position.
  for (Shape4 s :
       shapesFor(r, 30, 40, {{256, 1000, 1, 1}, {3, 1000, 1, 1}, {2, 21, 64, 64}, {5, 7, 3, 11}})) {
    const int classOffset = r.coin() ? 0 : r.integer(1, 30);
    const int classes = classOffset + s.c + r.integer(0, 20);
    INFO("shape " << describe(s) << ", classes [" << classOffset << ", " << classOffset + s.c
                  << ") of " << classes);
    const int64_t positions = int64_t{s.n} * s.plane();
    const std::vector<float> z = r.floats(s.elements(), -8.0f, 8.0f);
    const std::vector<int32_t> labels = r.labels(positions, 0, classes - 1);
    std::vector<float> stats(static_cast<size_t>(2 * positions));
    DeviceArray<float> dz(z), dstats(stats);
    DeviceArray<int32_t> dlabels(labels);
    twin::softmaxStats(s, z.data(), stats.data());
    cuda::softmaxStats(s, dz.get(), dstats.get(), stream);
    requireClose(stats, dstats.host(), kReduction, 0.0, "softmaxStats");

    // The rest read the twin's statistics, so only exp and log differ.
    DeviceArray<float> tstats(stats);
    std::vector<float> prob(z.size());
    DeviceArray<float> dprob(prob);
    twin::softmaxProbabilities(s, z.data(), stats.data(), prob.data());
    cuda::softmaxProbabilities(s, dz.get(), tstats.get(), dprob.get(), stream);
    requireClose(prob, dprob.host(), kTranscendental, 1e-7, "softmaxProbabilities");

    const LossSum expected =
        twin::softmaxLoss(s, z.data(), stats.data(), labels.data(), classOffset);
    const LossSum actual =
        cuda::softmaxLoss(s, dz.get(), tstats.get(), dlabels.get(), classOffset, stream);
    CHECK(actual.loss == Approx(expected.loss).epsilon(1e-9).margin(1e-9));
    CHECK(actual.correct == expected.correct);

    for (float beta : kBetas) {
      INFO("beta " << beta);
      std::vector<float> grad = destination(r, s.elements(), beta);
      DeviceArray<float> dgrad(grad);
      twin::softmaxBackward(s, z.data(), stats.data(), labels.data(), classOffset, 0.5f,
                            grad.data(), beta);
      cuda::softmaxBackward(s, dz.get(), tstats.get(), dlabels.get(), classOffset, 0.5f,
                            dgrad.get(), beta, stream);
      requireClose(grad, dgrad.host(), kTranscendental, 1e-7, "softmaxBackward");
    }
  }
}

TEST_CASE("adam and adamw equal their twin bit for bit") {
  // The per-step scalars come from the host (adamScalars) on both sides; the
  // element's sqrt and divisions are correctly rounded on the GPU too.
  cudaStream_t stream = testStream();
  for (int64_t count : kCounts) {
    for (int offset : {0, 1}) {
      for (bool decoupled : {false, true}) {
        Random r(static_cast<uint64_t>(count * 4 + offset * 2 + (decoupled ? 1 : 0)));
        INFO(count << " elements, offset " << offset << (decoupled ? ", adamw" : ", adam"));
        std::vector<float> w = r.floats(count), m = r.floats(count, -0.1f, 0.1f),
                           v = r.floats(count, 0.0f, 0.2f);
        const std::vector<float> g = r.floats(count);
        DeviceArray<float> dw(w, offset), dm(m, offset), dv(v, offset), dg(g, offset);
        AdamParams p;
        p.learningRate = 1e-3f;
        p.weightDecay = 0.01f;
        p.decoupled = decoupled;
        for (int64_t t = 1; t <= 3; ++t) {
          p.step = t;
          twin::adam(w.data(), m.data(), v.data(), g.data(), count, p);
          cuda::adam(dw.get(), dm.get(), dv.get(), dg.get(), count, p, stream);
        }
        requireSameBits(w, dw.host(), "adam weights after 3 steps");
        requireSameBits(m, dm.host(), "adam first moment");
        requireSameBits(v, dv.host(), "adam second moment");
      }
    }
  }
}

}  // namespace
}  // namespace strata::kernels::test

int main(int argc, char** argv) {
  strata::test::exitUnlessGpu();
  return Catch::Session().run(argc, argv);
}

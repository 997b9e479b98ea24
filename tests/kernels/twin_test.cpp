// The CPU twins of kernels.h against CpuBackend, whose semantics they copy:
// hand-computed small cases for the rules (beta 0 never reads, ties, windows
// in padding, model-parallel slices), then pseudo-random shapes and values.
// The twins keep CpuBackend's order of every sum, so everything is compared
// bit for bit except biasGrad (double sum against Eigen's float sum).
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <span>
#include <vector>

#include "cases.h"
#include "nn_views.h"
#include "strata/exec/nn/cpu_backend.h"
#include "strata/kernels/kernels.h"

namespace strata::kernels::test {
namespace {

// ---- kernels.h's descriptors as executor/nn's ---------------------------------

// A flat array as a 1 x count x 1 x 1 view.
Shape4 flat(int64_t count) {
  return {1, static_cast<int>(count), 1, 1};
}

nn::DropoutDesc dropoutDesc(const DropoutParams& p, int totalChannels) {
  nn::DropoutDesc d;
  d.rate = p.rate;
  d.seed = p.seed;
  d.step = p.step;
  d.layer = p.layer;
  d.firstRow = p.firstRow;
  d.channelOffset = p.channelOffset;
  d.totalChannels = totalChannels;
  return d;
}

nn::PoolDesc poolDesc(const PoolParams& p) {
  nn::PoolDesc d;
  d.mode = p.max ? PoolMode::kMax : PoolMode::kAvg;
  d.c = p.c;
  d.inH = p.inH;
  d.inW = p.inW;
  d.kernelH = p.kernelH;
  d.kernelW = p.kernelW;
  d.stride = p.stride;
  d.pad = p.pad;
  d.outH = p.outH;
  d.outW = p.outW;
  return d;
}

nn::LrnDesc lrnDesc(const LrnParams& p) {
  return {p.size, p.k, p.alpha, p.beta};
}

// The betas every backward kernel is tried with (0 on a NaN destination).
constexpr float kBetas[] = {0.0f, 1.0f, 0.5f};
constexpr int kRandomCases = 40;
const float kNaN = std::numeric_limits<float>::quiet_NaN();

// ---- hand-computed cases ---------------------------------------------------------

TEST_CASE("relu passes -0 and NaN through, its gradient only where y > 0") {
  const std::vector<float> x = {-1.0f, -0.0f, 0.0f, 2.5f, kNaN};
  std::vector<float> y(5);
  twin::reluForward(x.data(), y.data(), 5);
  requireSameBits({0.0f, -0.0f, 0.0f, 2.5f, kNaN}, y, "relu");

  const std::vector<float> dy = {1.0f, 2.0f, 3.0f, 4.0f, 5.0f};
  std::vector<float> dx = nans(5);
  twin::reluBackward(y.data(), dy.data(), dx.data(), 5, 0.0f);
  requireSameBits({0.0f, 0.0f, 0.0f, 4.0f, 0.0f}, dx, "relu backward, beta 0 over NaN");
  twin::reluBackward(y.data(), dy.data(), dx.data(), 5, 1.0f);
  requireSameBits({0.0f, 0.0f, 0.0f, 8.0f, 0.0f}, dx, "relu backward, beta 1");
}

TEST_CASE("fill, add, accumulate and reduceAdd on hand-made values") {
  std::vector<float> x(3);
  twin::fill(x.data(), 3, 1.5f);
  requireSameBits({1.5f, 1.5f, 1.5f}, x, "fill");

  const std::vector<float> a = {1.0f, -2.0f, 0.25f}, b = {3.0f, 2.0f, 0.5f};
  std::vector<float> y(3);
  twin::add(a.data(), b.data(), y.data(), 3);
  requireSameBits({4.0f, 0.0f, 0.75f}, y, "add");

  std::vector<float> dst = nans(3);
  twin::accumulate(a.data(), dst.data(), 3, 0.0f);
  requireSameBits(a, dst, "accumulate, beta 0 over NaN");
  twin::accumulate(b.data(), dst.data(), 3, 2.0f);
  requireSameBits({5.0f, -2.0f, 1.0f}, dst, "accumulate, beta 2");

  twin::reduceAdd(a.data(), dst.data(), 3);
  requireSameBits({6.0f, -4.0f, 1.25f}, dst, "reduceAdd");
}

TEST_CASE("bias add per channel and bias gradient summed over examples and positions") {
  // n = 2, channels = 2, positions = 3.
  std::vector<float> y(12, 1.0f);
  const std::vector<float> bias = {10.0f, 20.0f};
  twin::biasAdd(y.data(), bias.data(), 2, 2, 3);
  requireSameBits({11, 11, 11, 21, 21, 21, 11, 11, 11, 21, 21, 21}, y, "biasAdd");

  const std::vector<float> dy = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  std::vector<float> dbias = {100.0f, 200.0f};
  twin::biasGrad(dy.data(), dbias.data(), 2, 2, 3);
  requireSameBits({100.0f + 1 + 2 + 3 + 7 + 8 + 9, 200.0f + 4 + 5 + 6 + 10 + 11 + 12}, dbias,
                  "biasGrad accumulates");
}

TEST_CASE("max pooling: ties pick the first input, windows in padding give -1 and 0") {
  // One 3 x 3 plane, 2 x 2 windows, stride 2, pad 2: outputs 3 x 3, and the
  // first row and column of windows lie wholly in the padding.
  PoolParams p;
  p.max = true;
  p.c = 1;
  p.inH = p.inW = 3;
  p.kernelH = p.kernelW = 2;
  p.stride = 2;
  p.pad = 2;
  p.outH = p.outW = 3;
  const std::vector<float> x = {5, 1, 5,  //
                                2, 5, 5,  //
                                0, 3, 3};
  std::vector<float> y(9);
  std::vector<int32_t> argmax(9);
  twin::poolForward(p, 1, x.data(), y.data(), argmax.data());
  // Output (1,1) reads inputs (0,0), (0,1), (1,0), (1,1): 5 twice, the first
  // wins; (1,2) reads (0,2) and (1,2), 5 twice; (2,1) and (2,2) read row 2.
  requireSameBits({0, 0, 0, 0, 5, 5, 0, 3, 3}, y, "max pooling");
  CHECK(argmax == std::vector<int32_t>{-1, -1, -1, -1, 0, 2, -1, 7, 8});

  // Backward: inputs gather the gradients of the outputs that chose them.
  const std::vector<float> dy = {9, 9, 9, 9, 1, 2, 9, 3, 4};
  std::vector<float> dx = nans(9);
  twin::poolBackward(p, 1, dy.data(), argmax.data(), dx.data(), 0.0f);
  requireSameBits({1, 0, 2, 0, 0, 0, 0, 3, 4}, dx, "max pooling backward");
}

TEST_CASE("average pooling divides by the inputs inside the window only") {
  // One 2 x 2 plane, 2 x 2 windows, stride 1, pad 1: outputs 3 x 3.
  PoolParams p;
  p.max = false;
  p.c = 1;
  p.inH = p.inW = 2;
  p.kernelH = p.kernelW = 2;
  p.stride = 1;
  p.pad = 1;
  p.outH = p.outW = 3;
  const std::vector<float> x = {1, 2, 3, 4};
  std::vector<float> y(9);
  twin::poolForward(p, 1, x.data(), y.data(), nullptr);
  requireSameBits({1.0f, 1.5f, 2.0f, 2.0f, 2.5f, 3.0f, 3.0f, 3.5f, 4.0f}, y, "average pooling");

  const std::vector<float> dy(9, 1.0f);
  std::vector<float> dx = {10, 10, 10, 10};
  twin::poolBackward(p, 1, dy.data(), nullptr, dx.data(), 1.0f);
  // Input (0,0) is read by outputs (0,0) (1 input), (0,1) and (1,0) (2) and
  // (1,1) (4): 1 + 1/2 + 1/2 + 1/4, onto 10.
  const float share = 10.0f + 1.0f + 0.5f + 0.5f + 0.25f;
  requireSameBits({share, share, share, share}, dx, "average pooling backward");
}

TEST_CASE("LRN: alpha is not divided by size and the window is clipped") {
  // One position, 3 channels, size 3: channel 0 sees channels 0-1.
  const LrnParams p{3, 2.0f, 0.5f, 0.75f};
  const Shape4 s{1, 3, 1, 1};
  const std::vector<float> x = {1.0f, 2.0f, 3.0f};
  std::vector<float> y(3), scale(3);
  twin::lrnForward(p, s, x.data(), y.data(), scale.data());
  requireSameBits({2.0f + 0.5f * 5.0f, 2.0f + 0.5f * 14.0f, 2.0f + 0.5f * 13.0f}, scale, "scale");
  CHECK(y[0] == std::pow(4.5f, -0.75f));
  CHECK(y[2] == 3.0f * std::pow(8.5f, -0.75f));
}

TEST_CASE("batchnorm normalises with the biased variance over n*h*w") {
  // One channel, values {1, 3} in two examples: mean 2, variance 1.
  const Shape4 s{2, 1, 1, 1};
  const std::vector<float> x = {1.0f, 3.0f};
  const float gamma = 2.0f, shift = 0.5f, eps = 0.0f;
  std::vector<float> y(2);
  twin::batchNormForward(s, x.data(), &gamma, &shift, eps, y.data());
  requireSameBits({-1.5f, 2.5f}, y, "batchnorm forward");

  // dy = xhat: d/dx of sum(dy * y) through the statistics vanishes.
  const std::vector<float> dy = {-1.0f, 1.0f};
  std::vector<float> dx = nans(2);
  twin::batchNormBackwardData(s, x.data(), dy.data(), &gamma, eps, dx.data(), 0.0f);
  requireSameBits({0.0f, 0.0f}, dx, "batchnorm backward data");
  float dgamma = 1.0f, dshift = 1.0f;
  twin::batchNormBackwardWeights(s, x.data(), dy.data(), eps, &dgamma, &dshift);
  CHECK(dgamma == 3.0f);  // 1 + sum(dy * xhat) = 1 + 2
  CHECK(dshift == 1.0f);  // 1 + sum(dy) = 1 + 0
}

TEST_CASE("softmax: interleaved stats, probabilities, loss of the held classes only") {
  // Two positions (n = 2), two classes 0 and log 3.
  const Shape4 s{2, 2, 1, 1};
  const float log3 = std::log(3.0f);
  const std::vector<float> z = {0.0f, log3, 0.0f, log3};
  std::vector<float> stats(4);
  twin::softmaxStats(s, z.data(), stats.data());
  CHECK(stats[0] == log3);
  CHECK(stats[1] == Approx(4.0f / 3.0f));
  std::vector<float> prob(4);
  twin::softmaxProbabilities(s, z.data(), stats.data(), prob.data());
  CHECK(prob[0] == Approx(0.25f));
  CHECK(prob[1] == Approx(0.75f));

  // Labels 1 (held, correct) and 0 (held, wrong); with classOffset 1 only the
  // first position's label (1 -> class 0 of the slice) counts.
  const std::vector<int32_t> labels = {1, 0};
  const LossSum all = twin::softmaxLoss(s, z.data(), stats.data(), labels.data(), 0);
  CHECK(all.loss == Approx(-std::log(0.75) - std::log(0.25)));
  CHECK(all.correct == 1);
  const LossSum sliced = twin::softmaxLoss(s, z.data(), stats.data(), labels.data(), 1);
  CHECK(sliced.loss == Approx(-std::log(0.25)));
  CHECK(sliced.correct == 0);

  std::vector<float> dz = nans(4);
  twin::softmaxBackward(s, z.data(), stats.data(), labels.data(), 0, 2.0f, dz.data(), 0.0f);
  CHECK(dz[0] == Approx(0.5f));
  CHECK(dz[1] == Approx(-0.5f));
  CHECK(dz[2] == Approx(-1.5f));
  CHECK(dz[3] == Approx(1.5f));
}

TEST_CASE("sgd with momentum in Krizhevsky's form") {
  std::vector<float> w = {1.0f}, v = {0.5f};
  const std::vector<float> g = {2.0f};
  twin::sgdMomentum(w.data(), v.data(), g.data(), 1, 0.25f, 0.5f, 0.5f);
  // v = 0.5 * 0.5 - 0.25 * (2 + 0.5 * 1) = -0.375; w = 0.625.
  requireSameBits({-0.375f}, v, "velocity");
  requireSameBits({0.625f}, w, "weights");
}

TEST_CASE("dropout: rate 0 keeps everything, a slice drops what the whole layer drops") {
  Random r(7);
  const Shape4 whole{3, 8, 2, 3};
  const std::vector<float> x = r.floats(whole.elements());
  DropoutParams p = randomDropout(r);

  DropoutParams keep = p;
  keep.rate = 0.0f;
  std::vector<float> y(x.size());
  twin::dropoutForward(keep, whole, x.data(), y.data());
  requireSameBits(x, y, "rate 0");

  // Channels [3, 7) of examples [1, 3) as a model-parallel, row-offset view.
  twin::dropoutForward(p, whole, x.data(), y.data());
  const Shape4 slice{2, 4, 2, 3};
  std::vector<float> xs, expected;
  for (int n = 1; n < 3; ++n)
    for (int c = 3; c < 7; ++c)
      for (int64_t q = 0; q < whole.plane(); ++q) {
        const int64_t i = (n * whole.c + c) * whole.plane() + q;
        xs.push_back(x[static_cast<size_t>(i)]);
        expected.push_back(y[static_cast<size_t>(i)]);
      }
  DropoutParams sliced = p;
  sliced.firstRow = 1;
  sliced.channelOffset = 3;
  std::vector<float> ys(xs.size());
  twin::dropoutForward(sliced, slice, xs.data(), ys.data());
  requireSameBits(expected, ys, "slice of the layer");

  int kept = 0;
  for (float v : y)
    kept += v != 0.0f ? 1 : 0;
  CHECK(kept > 0);
  CHECK(kept < static_cast<int>(y.size()));
}

// ---- pseudo-random cases against CpuBackend ----------------------------------------

TEST_CASE("elementwise twins equal CpuBackend bit for bit") {
  nn::CpuBackend cpu;
  for (int seed = 0; seed < kRandomCases; ++seed) {
    Random r(static_cast<uint64_t>(seed));
    const int64_t count = r.integer(1, 3000);
    const Shape4 s = flat(count);
    // Whole numbers half the time: exact zeros for relu's boundary.
    const std::vector<float> x = r.coin() ? r.levels(count, -3, 3) : r.floats(count);
    const std::vector<float> other = r.floats(count);
    INFO("seed " << seed << ", " << count << " elements");

    std::vector<float> expected(x.size()), actual(x.size());
    cpu.reluForward(view(x, s), view(expected, s));
    twin::reluForward(x.data(), actual.data(), count);
    requireSameBits(expected, actual, "reluForward");

    cpu.add(view(x, s), view(other, s), view(expected, s));
    twin::add(x.data(), other.data(), actual.data(), count);
    requireSameBits(expected, actual, "add");

    for (float beta : kBetas) {
      INFO("beta " << beta);
      const std::vector<float> start = destination(r, count, beta);
      expected = actual = start;
      cpu.reluBackward(view(x, s), view(other, s), view(expected, s), beta);
      twin::reluBackward(x.data(), other.data(), actual.data(), count, beta);
      requireSameBits(expected, actual, "reluBackward");

      expected = actual = start;
      cpu.accumulate(view(x, s), view(expected, s), beta);
      twin::accumulate(x.data(), actual.data(), count, beta);
      requireSameBits(expected, actual, "accumulate");
    }

    expected = actual = other;
    cpu.accumulate(view(x, s), view(expected, s), 1.0f);
    twin::reduceAdd(x.data(), actual.data(), count);
    requireSameBits(expected, actual, "reduceAdd (accumulate with beta 1)");

    expected = actual = other;
    nn::CpuBackend::zero(expected.data(), count);
    twin::fill(actual.data(), count, 0.0f);
    requireSameBits(expected, actual, "fill with 0 (zero)");

    std::vector<float> w = r.floats(count), v = r.floats(count, -0.1f, 0.1f);
    std::vector<float> w2 = w, v2 = v;
    const float lr = r.uniform(0.001f, 0.1f), momentum = r.uniform(0.0f, 0.99f),
                decay = r.uniform(0.0f, 0.01f);
    cpu.sgdMomentum(w, v, other, lr, momentum, decay);
    twin::sgdMomentum(w2.data(), v2.data(), other.data(), count, lr, momentum, decay);
    requireSameBits(w, w2, "sgdMomentum weights");
    requireSameBits(v, v2, "sgdMomentum velocity");
  }
}

TEST_CASE("dropout twins equal CpuBackend, slices and row offsets included") {
  nn::CpuBackend cpu;
  for (int seed = 0; seed < kRandomCases; ++seed) {
    Random r(static_cast<uint64_t>(seed));
    const Shape4 s = randomShape(r);
    DropoutParams p = randomDropout(r);
    p.firstRow = r.integer(0, 100);
    p.channelOffset = r.integer(0, 5);
    const int total = p.channelOffset + s.c + r.integer(0, 3);
    INFO("seed " << seed << ", shape " << describe(s) << ", rate " << p.rate << ", channelOffset "
                 << p.channelOffset);
    const std::vector<float> x = r.floats(s.elements());
    std::vector<float> expected(x.size()), actual(x.size());
    cpu.dropoutForward(dropoutDesc(p, total), view(x, s), view(expected, s));
    twin::dropoutForward(p, s, x.data(), actual.data());
    requireSameBits(expected, actual, "dropoutForward");

    for (float beta : kBetas) {
      INFO("beta " << beta);
      expected = actual = destination(r, s.elements(), beta);
      cpu.dropoutBackward(dropoutDesc(p, total), view(x, s), view(expected, s), beta);
      twin::dropoutBackward(p, s, x.data(), actual.data(), beta);
      requireSameBits(expected, actual, "dropoutBackward");
    }
  }
}

TEST_CASE("bias twins: biasAdd equals CpuBackend bit for bit, biasGrad within rounding") {
  for (int seed = 0; seed < kRandomCases; ++seed) {
    Random r(static_cast<uint64_t>(seed));
    const Shape4 s = randomShape(r, 40);
    INFO("seed " << seed << ", shape " << describe(s));
    const int64_t positions = s.plane();
    const std::vector<float> bias = r.floats(s.c);
    std::vector<float> expected = r.floats(s.elements());
    std::vector<float> actual = expected;
    for (int n = 0; n < s.n; ++n)
      nn::CpuBackend::biasAdd(expected.data() + n * s.perExample(), bias.data(), s.c, positions);
    twin::biasAdd(actual.data(), bias.data(), s.n, s.c, positions);
    requireSameBits(expected, actual, "biasAdd");

    const std::vector<float> dy = r.floats(s.elements());
    std::vector<float> dbiasCpu = r.floats(s.c), dbiasTwin = dbiasCpu;
    for (int n = 0; n < s.n; ++n)
      nn::CpuBackend::biasGrad(dy.data() + n * s.perExample(), dbiasCpu.data(), s.c, positions);
    twin::biasGrad(dy.data(), dbiasTwin.data(), s.n, s.c, positions);
    requireClose(dbiasCpu, dbiasTwin, 1e-5, 1e-5, "biasGrad");
  }
}

TEST_CASE("pooling twins equal CpuBackend bit for bit, ties and padding included") {
  nn::CpuBackend cpu;
  for (int seed = 0; seed < 2 * kRandomCases; ++seed) {
    Random r(static_cast<uint64_t>(seed));
    const Shape4 base = randomShape(r);
    const PoolParams p = randomPool(r, base.c, base.h, base.w);
    const Shape4 in{base.n, p.c, p.inH, p.inW}, out{base.n, p.c, p.outH, p.outW};
    INFO("seed " << seed << ", " << (p.max ? "max" : "avg") << " " << p.kernelH << "x" << p.kernelW
                 << " stride " << p.stride << " pad " << p.pad << " over " << describe(in));
    const std::vector<float> x = r.levels(in.elements(), -2, 2);
    std::vector<float> expected(static_cast<size_t>(out.elements()));
    std::vector<float> actual = expected;
    std::vector<int32_t> argCpu(expected.size()), argTwin(expected.size());
    cpu.poolForward(poolDesc(p), view(x, in), view(expected, out), p.max ? argCpu.data() : nullptr);
    twin::poolForward(p, in.n, x.data(), actual.data(), p.max ? argTwin.data() : nullptr);
    requireSameBits(expected, actual, "poolForward");
    if (p.max)
      REQUIRE(argCpu == argTwin);

    const std::vector<float> dy = r.floats(out.elements());
    for (float beta : kBetas) {
      INFO("beta " << beta);
      expected = actual = destination(r, in.elements(), beta);
      cpu.poolBackward(poolDesc(p), view(dy, out), argCpu.data(), view(expected, in), beta);
      twin::poolBackward(p, in.n, dy.data(), argTwin.data(), actual.data(), beta);
      requireSameBits(expected, actual, "poolBackward");
    }
  }
}

TEST_CASE("LRN twins equal CpuBackend bit for bit") {
  nn::CpuBackend cpu;
  for (int seed = 0; seed < kRandomCases; ++seed) {
    Random r(static_cast<uint64_t>(seed));
    const Shape4 s = randomShape(r, 13);
    const LrnParams p = randomLrn(r);
    INFO("seed " << seed << ", shape " << describe(s) << ", size " << p.size);
    const std::vector<float> x = r.floats(s.elements());
    std::vector<float> yCpu(x.size()), scaleCpu(x.size()), yTwin(x.size()), scaleTwin(x.size());
    cpu.lrnForward(lrnDesc(p), view(x, s), view(yCpu, s), view(scaleCpu, s));
    twin::lrnForward(p, s, x.data(), yTwin.data(), scaleTwin.data());
    requireSameBits(scaleCpu, scaleTwin, "lrnForward scale");
    requireSameBits(yCpu, yTwin, "lrnForward");

    const std::vector<float> dy = r.floats(s.elements());
    for (float beta : kBetas) {
      INFO("beta " << beta);
      std::vector<float> expected = destination(r, s.elements(), beta), actual = expected;
      cpu.lrnBackward(lrnDesc(p), view(x, s), view(yCpu, s), view(scaleCpu, s), view(dy, s),
                      view(expected, s), beta);
      twin::lrnBackward(p, s, x.data(), yCpu.data(), scaleCpu.data(), dy.data(), actual.data(),
                        beta);
      requireSameBits(expected, actual, "lrnBackward");
    }
  }
}

TEST_CASE("batchnorm twins equal CpuBackend bit for bit") {
  nn::CpuBackend cpu;
  const float eps = 1e-5f;
  for (int seed = 0; seed < kRandomCases; ++seed) {
    Random r(static_cast<uint64_t>(seed));
    const Shape4 s = randomShape(r, 13);
    INFO("seed " << seed << ", shape " << describe(s));
    // An offset mean, so the two-pass variance matters.
    const std::vector<float> x = r.floats(s.elements(), 3.0f, 5.0f);
    const std::vector<float> gamma = r.floats(s.c), shift = r.floats(s.c);
    std::vector<float> expected(x.size()), actual(x.size());
    cpu.batchNormForward(view(x, s), gamma.data(), shift.data(), eps, view(expected, s));
    twin::batchNormForward(s, x.data(), gamma.data(), shift.data(), eps, actual.data());
    requireSameBits(expected, actual, "batchNormForward");

    const std::vector<float> dy = r.floats(s.elements());
    for (float beta : kBetas) {
      INFO("beta " << beta);
      expected = actual = destination(r, s.elements(), beta);
      cpu.batchNormBackwardData(view(x, s), view(dy, s), gamma.data(), eps, view(expected, s),
                                beta);
      twin::batchNormBackwardData(s, x.data(), dy.data(), gamma.data(), eps, actual.data(), beta);
      requireSameBits(expected, actual, "batchNormBackwardData");
    }

    std::vector<float> dgammaCpu = r.floats(s.c), dshiftCpu = r.floats(s.c);
    std::vector<float> dgammaTwin = dgammaCpu, dshiftTwin = dshiftCpu;
    cpu.batchNormBackwardWeights(view(x, s), view(dy, s), eps, dgammaCpu.data(), dshiftCpu.data());
    twin::batchNormBackwardWeights(s, x.data(), dy.data(), eps, dgammaTwin.data(),
                                   dshiftTwin.data());
    requireSameBits(dgammaCpu, dgammaTwin, "batchNormBackwardWeights dgamma");
    requireSameBits(dshiftCpu, dshiftTwin, "batchNormBackwardWeights dshift");
  }
}

TEST_CASE("softmax twins equal CpuBackend bit for bit, class slices included") {
  nn::CpuBackend cpu;
  for (int seed = 0; seed < kRandomCases; ++seed) {
    Random r(static_cast<uint64_t>(seed));
    const Shape4 s = randomShape(r, 40);
    const int classOffset = r.coin() ? 0 : r.integer(1, 30);
    const int classes = classOffset + s.c + r.integer(0, 20);
    INFO("seed " << seed << ", shape " << describe(s) << ", classes [" << classOffset << ", "
                 << classOffset + s.c << ") of " << classes);
    const int64_t positions = int64_t{s.n} * s.plane();
    const std::vector<float> z = r.floats(s.elements(), -8.0f, 8.0f);
    const std::vector<int32_t> labels = r.labels(positions, 0, classes - 1);

    std::vector<float> statsCpu(static_cast<size_t>(2 * positions)), statsTwin = statsCpu;
    cpu.softmaxStats(view(z, s), statsCpu.data());
    twin::softmaxStats(s, z.data(), statsTwin.data());
    requireSameBits(statsCpu, statsTwin, "softmaxStats");

    std::vector<float> expected(z.size()), actual(z.size());
    cpu.softmaxProbabilities(view(z, s), statsCpu.data(), view(expected, s));
    twin::softmaxProbabilities(s, z.data(), statsCpu.data(), actual.data());
    requireSameBits(expected, actual, "softmaxProbabilities");

    const nn::SoftmaxLossSum lossCpu =
        cpu.softmaxLoss(view(z, s), statsCpu.data(), labels.data(), classOffset);
    const LossSum lossTwin =
        twin::softmaxLoss(s, z.data(), statsCpu.data(), labels.data(), classOffset);
    CHECK(lossCpu.loss == lossTwin.loss);
    CHECK(lossCpu.correct == lossTwin.correct);

    const float scale = r.uniform(0.01f, 1.0f);
    for (float beta : kBetas) {
      INFO("beta " << beta);
      expected = actual = destination(r, s.elements(), beta);
      cpu.softmaxBackward(view(z, s), statsCpu.data(), labels.data(), classOffset, scale,
                          view(expected, s), beta);
      twin::softmaxBackward(s, z.data(), statsCpu.data(), labels.data(), classOffset, scale,
                            actual.data(), beta);
      requireSameBits(expected, actual, "softmaxBackward");
    }
  }
}

}  // namespace
}  // namespace strata::kernels::test

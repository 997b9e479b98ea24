// Adam and AdamW: hand-computed steps (t = 1 and t = 2, so the bias
// corrections matter) against the paper's closed form, for CpuBackend and the
// twin; then the twin against CpuBackend bit for bit on pseudo-random sizes,
// values, hyper-parameters and steps (both run elementwise.h's adam()).
#include <catch2/catch.hpp>
#include <cmath>
#include <span>
#include <vector>

#include "cases.h"
#include "strata/exec/nn/cpu_backend.h"
#include "strata/kernels/kernels.h"

namespace strata::kernels::test {
namespace {

AdamParams twinParams(const nn::AdamParams& p) {
  return {p.learningRate, p.beta1, p.beta2, p.eps, p.weightDecay, p.decoupled, p.step};
}

// One step of Kingma and Ba's Algorithm 1 (Loshchilov and Hutter's
// Algorithm 2 when decoupled) in double, in the paper's form with m-hat and
// v-hat: an independent statement of what the kernel must compute.
struct Reference {
  double w, m = 0, v = 0;
  void step(double g, const nn::AdamParams& p) {
    const double lr = p.learningRate, b1 = p.beta1, b2 = p.beta2, t = double(p.step);
    if (p.decoupled)
      w -= lr * p.weightDecay * w;
    else
      g += p.weightDecay * w;
    m = b1 * m + (1 - b1) * g;
    v = b2 * v + (1 - b2) * g * g;
    const double mHat = m / (1 - std::pow(b1, t));
    const double vHat = v / (1 - std::pow(b2, t));
    w -= lr * mHat / (std::sqrt(vHat) + p.eps);
  }
};

// Runs two steps (gradients g1, g2) on one weight w0 with CpuBackend and
// the twin; both must equal the reference within float rounding (a few
// ulps: each float operation rounds once) and each other bit for bit.
void checkTwoSteps(nn::AdamParams p, float w0, float g1, float g2, float expectedW1) {
  nn::CpuBackend cpu;
  std::vector<float> w{w0}, m{0}, v{0}, tw{w0}, tm{0}, tv{0};
  Reference ref{w0};
  int t = 0;
  for (float g : {g1, g2}) {
    p.step = ++t;
    const std::vector<float> grad{g};
    cpu.adam(w, m, v, grad, p);
    twin::adam(tw.data(), tm.data(), tv.data(), grad.data(), 1, twinParams(p));
    ref.step(g, p);
    INFO("step " << t);
    CHECK(w[0] == Approx(ref.w).epsilon(1e-6));
    CHECK(m[0] == Approx(ref.m).epsilon(1e-6));
    CHECK(v[0] == Approx(ref.v).epsilon(1e-6));
    if (t == 1)
      CHECK(w[0] == Approx(expectedW1).epsilon(1e-6));
    requireSameBits(w, tw, "weight, twin against CpuBackend");
    requireSameBits(m, tm, "first moment, twin against CpuBackend");
    requireSameBits(v, tv, "second moment, twin against CpuBackend");
  }
}

}  // namespace

TEST_CASE("Adam: two hand-computed steps, bias corrections included") {
  nn::AdamParams p;
  p.learningRate = 0.1f;
  p.beta1 = 0.5f;
  p.beta2 = 0.75f;
  p.eps = 0.25f;
  // t = 1, g = 2: m = 0.5 * 2 = 1, v = 0.25 * 4 = 1; m-hat = 1 / 0.5 = 2,
  // v-hat = 1 / 0.25 = 4; w = 1 - 0.1 * 2 / (2 + 0.25) = 1 - 0.2 / 2.25.
  // t = 2, g = 1: m = 0.5 + 0.5 = 1, v = 0.75 + 0.25 = 1; m-hat = 1 / 0.75,
  // v-hat = 1 / 0.4375; w -= 0.1 (4/3) / (1.5119 + 0.25) = 0.07568.
  checkTwoSteps(p, 1.0f, 2.0f, 1.0f, 1.0f - 0.2f / 2.25f);
  nn::CpuBackend cpu;
  std::vector<float> w{1.0f}, m{0}, v{0};
  const std::vector<float> g{2.0f};
  p.step = 1;
  cpu.adam(w, m, v, g, p);
  // m and v are exact here (0.5 * 2, 0.25 * 2 * 2).
  CHECK(m[0] == 1.0f);
  CHECK(v[0] == 1.0f);
  p.step = 2;
  const std::vector<float> g2{1.0f};
  cpu.adam(w, m, v, g2, p);
  CHECK(double(w[0]) ==
        Approx(1.0 - 0.2 / 2.25 - 0.1 * (4.0 / 3) / (std::sqrt(1 / 0.4375) + 0.25)).epsilon(1e-6));
}

TEST_CASE("Adam's weight decay is L2 in the gradient") {
  nn::AdamParams p;
  p.learningRate = 0.1f;
  p.beta1 = 0.5f;
  p.beta2 = 0.75f;
  p.eps = 0.25f;
  p.weightDecay = 0.5f;
  // t = 1: g = 2 + 0.5 * 1 = 2.5; m-hat = 2.5, v-hat = 6.25;
  // w = 1 - 0.1 * 2.5 / (2.5 + 0.25).
  checkTwoSteps(p, 1.0f, 2.0f, -3.0f, 1.0f - 0.25f / 2.75f);
}

TEST_CASE("AdamW decays the weight apart from the gradient") {
  nn::AdamParams p;
  p.learningRate = 0.1f;
  p.beta1 = 0.5f;
  p.beta2 = 0.75f;
  p.eps = 0.25f;
  p.weightDecay = 0.5f;
  p.decoupled = true;
  // t = 1: w = 1 (1 - 0.1 * 0.5) = 0.95, then Adam's step of the plain
  // gradient: 0.95 - 0.2 / 2.25.
  checkTwoSteps(p, 1.0f, 2.0f, 1.0f, 0.95f - 0.2f / 2.25f);
  // PyTorch's defaults (lr 1e-3, betas 0.9 0.999, eps 1e-8, AdamW decay 0.01):
  // at t = 1 the step is lr sign(g) to within eps, after the decay.
  nn::AdamParams d;
  d.weightDecay = nn::kAdamWWeightDecay;
  d.decoupled = true;
  checkTwoSteps(d, 2.0f, -0.5f, 0.25f, 2.0f * (1 - 1e-3f * 0.01f) + 1e-3f);
}

TEST_CASE("Adam twin equals CpuBackend bit for bit on random values and steps") {
  nn::CpuBackend cpu;
  for (int seed = 0; seed < 40; ++seed) {
    Random r(static_cast<uint64_t>(seed));
    const int count = r.integer(1, 3000);
    std::vector<float> w = r.floats(count), m = r.floats(count, -0.1f, 0.1f),
                       v = r.floats(count, 0.0f, 0.2f);
    const std::vector<float> g = r.floats(count);
    std::vector<float> w2 = w, m2 = m, v2 = v;
    nn::AdamParams p;
    p.learningRate = r.uniform(1e-4f, 0.1f);
    p.beta1 = r.uniform(0.0f, 0.99f);
    p.beta2 = r.uniform(0.5f, 0.9999f);
    p.eps = r.uniform(1e-8f, 1e-3f);
    p.weightDecay = r.coin() ? 0.0f : r.uniform(0.0f, 0.1f);
    p.decoupled = r.coin();
    p.step = r.integer(1, 1000);
    INFO("seed " << seed << " count " << count << " step " << p.step);
    cpu.adam(w, m, v, g, p);
    twin::adam(w2.data(), m2.data(), v2.data(), g.data(), count, twinParams(p));
    requireSameBits(w, w2, "adam weights");
    requireSameBits(m, m2, "adam first moment");
    requireSameBits(v, v2, "adam second moment");
    // The static kernel `strata calibrate` times is the same code.
    std::vector<float> w3 = w, m3 = m, v3 = v, w4 = w, m4 = m, v4 = v;
    nn::CpuBackend::adamKernel(w3, m3, v3, g, p);
    cpu.adam(w4, m4, v4, g, p);
    requireSameBits(w4, w3, "adamKernel against adam");
  }
}

}  // namespace strata::kernels::test

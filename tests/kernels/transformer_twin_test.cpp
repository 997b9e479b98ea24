// The CPU twins of transformer.h against CpuBackend: hand-computed cases for
// the rules (the causal mask, GELU's fixed points, an embedding's repeated
// ids and bad ids), then pseudo-random odd shapes. Layer normalisation and
// the embedding keep CpuBackend's sums and compare bit for bit; GELU and the
// attention softmax take tanh and exp (Eigen's vectorised ones in
// CpuBackend, the C library's in the twins) and compare within rounding.
//
// The attention softmax twins are held against CpuBackend's whole attention
// layer: with small whole numbers as inputs and weights, every GEMM before a
// softmax (QKV, the scores, dC, dP) is exact in any order, so the scores the
// twin sees are CpuBackend's; the GEMMs after it are recomputed here in
// double from CpuBackend's own saved values.
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "cases.h"
#include "nn_views.h"
#include "strata/exec/nn/cpu_backend.h"
#include "strata/kernels/transformer.h"
#include "strata/model/error.h"

namespace strata::kernels::test {
namespace {

constexpr float kBetas[] = {0.0f, 1.0f, 0.5f};
// GELU's gradient far left of 0 takes 1 - tanh^2 with tanh within an ulp of
// -1: an ulp of tanh (6e-8) moves it by ~1e-7 absolute, times x (1 +
// 0.134 x^2) 0.4 dy, up to ~4e-6 for |x| <= 6, |dy| <= 2.
constexpr double kGeluGradAbsolute = 1e-5;
constexpr int kRandomCases = 30;
// tanh or exp, then a few float operations: Eigen's and the C library's
// differ by an ulp or two.
constexpr double kTranscendental = 2e-5;
// A float GEMM after the softmax against a double one here.
constexpr double kGemm = 1e-4;

// ---- hand-computed cases ------------------------------------------------------------

TEST_CASE("layer normalisation of one position over two channels") {
  // x = (1, 3): mean 2, variance 1; gain (2, 1), bias (0.5, 0).
  const Shape4 s{1, 2, 1, 1};
  const std::vector<float> x = {1.0f, 3.0f}, gain = {2.0f, 1.0f}, bias = {0.5f, 0.0f};
  std::vector<float> y(2);
  twin::layerNormForward(s, x.data(), gain.data(), bias.data(), 0.0f, y.data());
  requireSameBits({-1.5f, 1.0f}, y, "layernorm forward");
  // dy = (1, 1): dgain += dy xhat = (-1, 1), dbias += dy.
  const std::vector<float> dy = {1.0f, 1.0f};
  std::vector<float> dgain = {0.0f, 0.0f}, dbias = {10.0f, 20.0f};
  twin::layerNormBackwardWeights(s, x.data(), dy.data(), 0.0f, dgain.data(), dbias.data());
  requireSameBits({-1.0f, 1.0f}, dgain, "layernorm dgain");
  requireSameBits({11.0f, 21.0f}, dbias, "layernorm dbias");
  // g = gain dy = (2, 1): mean 1.5, mean(g xhat) = (-2 + 1) / 2 = -0.5;
  // dx = (2 - 1.5 - (-1)(-0.5), 1 - 1.5 - (1)(-0.5)) = (0, 0).
  std::vector<float> dx = nans(2);
  twin::layerNormBackwardData(s, x.data(), dy.data(), gain.data(), 0.0f, dx.data(), 0.0f);
  requireSameBits({0.0f, 0.0f}, dx, "layernorm backward data over NaN");
}

TEST_CASE("gelu: 0 at 0, x for large x, 0 for very negative x") {
  const std::vector<float> x = {0.0f, 10.0f, -10.0f, 1.0f};
  std::vector<float> y(4);
  twin::geluForward(x.data(), y.data(), 4);
  CHECK(y[0] == 0.0f);
  CHECK(y[1] == 10.0f);
  CHECK(y[2] == Approx(0.0f).margin(1e-6));
  // 0.5 (1 + tanh(sqrt(2/pi) 1.044715)) = 0.841192
  CHECK(y[3] == Approx(0.841192f).epsilon(1e-5));
  const std::vector<float> dy = {2.0f, 1.0f, 1.0f, 1.0f};
  std::vector<float> dx = nans(4);
  twin::geluBackward(x.data(), dy.data(), dx.data(), 4, 0.0f);
  CHECK(dx[0] == 1.0f);  // gelu'(0) = 1/2
  CHECK(dx[1] == 1.0f);
  CHECK(dx[2] == Approx(0.0f).margin(1e-6));
}

TEST_CASE("attention softmax: the causal mask leaves zeros after each query's position") {
  // One block of t = 3 rows, all scores 0: causal rows are 1, 1/2 1/2, 1/3 x3.
  std::vector<float> s(9, 0.0f), p(9);
  twin::attnSoftmaxForward(s.data(), p.data(), 3, 3, true, 0.5f);
  const float third = 1.0f / 3.0f;
  requireClose({1, 0, 0, 0.5f, 0.5f, 0, third, third, third}, p, 1e-6, 1e-7, "causal");
  twin::attnSoftmaxForward(s.data(), p.data(), 3, 3, false, 0.5f);
  requireClose(std::vector<float>(9, third), p, 1e-6, 1e-7, "not causal");
  // Row (0, log 2 / scale): probabilities 1/3, 2/3.
  const float scale = 0.5f;
  std::vector<float> s2 = {0.0f, std::log(2.0f) / scale}, p2(2);
  twin::attnSoftmaxForward(s2.data(), p2.data(), 1, 2, false, scale);
  requireClose({third, 2 * third}, p2, 1e-6, 1e-7, "scaled");
  // Backward: ds = scale p (dp - p.dp); dp = (1, 0): dot 1/3.
  const std::vector<float> dp = {1.0f, 0.0f};
  std::vector<float> ds(2);
  twin::attnSoftmaxBackward(p2.data(), dp.data(), ds.data(), 1, 2, scale);
  requireClose({scale * third * (2 * third), scale * 2 * third * (-third)}, ds, 1e-6, 1e-7,
               "softmax backward");
}

TEST_CASE("embedding: rows and positions added, repeated ids summed, a bad id recorded") {
  // vocab 3, 2 features, 2 examples of 2 positions, position table.
  const EmbeddingParams p{2, 2, 3, 2, true};
  const std::vector<float> table = {0,   1,   10,  11, 20, 21,  // tokens 0..2
                                    100, 200, 300, 400};        // positions 0, 1
  const std::vector<float> ids = {2, 0, 2, 2};
  std::vector<float> y(8);
  uint64_t bad = kNoBadToken;
  twin::embeddingForward(p, ids.data(), table.data(), y.data(), &bad);
  // y[e][c][t]: example 0: t0 = token 2 + pos 0, t1 = token 0 + pos 1.
  requireSameBits({120, 300, 221, 401, 120, 320, 221, 421}, y, "embedding forward");
  CHECK(bad == kNoBadToken);

  const std::vector<float> dy = {1, 2, 3, 4, 5, 6, 7, 8};
  std::vector<float> dtable(10, 0.0f);
  twin::embeddingBackward(p, ids.data(), dy.data(), dtable.data(), &bad);
  // token 2 at (0, t0), (1, t0), (1, t1): features (1 + 5 + 6, 3 + 7 + 8);
  // token 0 at (0, t1): (2, 4); positions: t0 (1 + 5, 3 + 7), t1 (2 + 6, 4 + 8).
  requireSameBits({2, 4, 0, 0, 12, 18, 6, 10, 8, 12}, dtable, "embedding backward");

  const std::vector<float> badIds = {1, 3, 0.5f, -1};
  twin::embeddingForward(p, badIds.data(), table.data(), y.data(), &bad);
  REQUIRE(bad != kNoBadToken);
  const BadToken b = decodeBadToken(bad);
  CHECK(b.vocab == 3);
  // The smallest key of the three bad ones (same vocabulary): the smallest
  // float bits, 0.5f (0x3f000000) below 3.0f (0x40400000) and -1 (sign bit).
  CHECK(b.id == 0.5f);
}

// ---- pseudo-random cases against CpuBackend --------------------------------------------

TEST_CASE("layer normalisation twins equal CpuBackend bit for bit") {
  nn::CpuBackend cpu;
  Random r(31);
  const float eps = 1e-5f;
  for (int i = 0; i < kRandomCases; ++i) {
    const Shape4 s = randomShape(r);
    INFO("shape " << describe(s));
    const std::vector<float> x = r.floats(s.elements());
    const std::vector<float> gain = r.floats(s.c), bias = r.floats(s.c);
    std::vector<float> expected(x.size()), actual(x.size());
    cpu.layerNormForward(view(x, s), gain.data(), bias.data(), eps, view(expected, s));
    twin::layerNormForward(s, x.data(), gain.data(), bias.data(), eps, actual.data());
    requireSameBits(expected, actual, "layerNormForward");

    const std::vector<float> dy = r.floats(s.elements());
    for (float beta : kBetas) {
      INFO("beta " << beta);
      expected = actual = destination(r, s.elements(), beta);
      cpu.layerNormBackwardData(view(x, s), view(dy, s), gain.data(), eps, view(expected, s), beta);
      twin::layerNormBackwardData(s, x.data(), dy.data(), gain.data(), eps, actual.data(), beta);
      requireSameBits(expected, actual, "layerNormBackwardData");
    }

    std::vector<float> dgainCpu = r.floats(s.c), dbiasCpu = r.floats(s.c);
    std::vector<float> dgainTwin = dgainCpu, dbiasTwin = dbiasCpu;
    cpu.layerNormBackwardWeights(view(x, s), view(dy, s), eps, dgainCpu.data(), dbiasCpu.data());
    twin::layerNormBackwardWeights(s, x.data(), dy.data(), eps, dgainTwin.data(), dbiasTwin.data());
    requireSameBits(dgainCpu, dgainTwin, "layerNormBackwardWeights dgain");
    requireSameBits(dbiasCpu, dbiasTwin, "layerNormBackwardWeights dbias");
  }
}

TEST_CASE("gelu twins equal CpuBackend within rounding") {
  nn::CpuBackend cpu;
  Random r(37);
  // Counts around the CPU's 256-element blocks (vector body and scalar tail).
  for (int64_t count : {1, 7, 255, 256, 257, 1000, 4099}) {
    INFO("count " << count);
    const Shape4 s{1, static_cast<int>(count), 1, 1};
    const std::vector<float> x = r.floats(count, -6.0f, 6.0f);
    std::vector<float> expected(x.size()), actual(x.size());
    cpu.geluForward(view(x, s), view(expected, s));
    twin::geluForward(x.data(), actual.data(), count);
    requireClose(expected, actual, kTranscendental, 1e-6, "geluForward");
    const std::vector<float> dy = r.floats(count);
    for (float beta : kBetas) {
      INFO("beta " << beta);
      expected = actual = destination(r, count, beta);
      cpu.geluBackward(view(x, s), view(dy, s), view(expected, s), beta);
      twin::geluBackward(x.data(), dy.data(), actual.data(), count, beta);
      requireClose(expected, actual, kTranscendental, kGeluGradAbsolute, "geluBackward");
    }
  }
}

TEST_CASE("embedding twins equal CpuBackend bit for bit, position tables on and off") {
  nn::CpuBackend cpu;
  Random r(41);
  for (int i = 0; i < kRandomCases; ++i) {
    EmbeddingParams p;
    p.n = r.integer(1, 4);
    p.positions = r.integer(1, 9);
    p.vocab = r.integer(1, 7);  // few tokens: repeated ids
    p.features = r.integer(1, 5);
    p.positionTable = r.coin();
    INFO("n " << p.n << ", T " << p.positions << ", vocab " << p.vocab << ", features "
              << p.features << ", positions " << p.positionTable);
    const nn::EmbeddingDesc d{p.vocab, p.features, p.positionTable};
    const int64_t rows = p.vocab + (p.positionTable ? p.positions : 0);
    const std::vector<float> table = r.floats(rows * p.features);
    const std::vector<float> ids = r.levels(int64_t{p.n} * p.positions, 0, p.vocab - 1);
    const Shape4 idShape{p.n, 1, p.positions, 1}, yShape{p.n, p.features, p.positions, 1};
    std::vector<float> expected(static_cast<size_t>(yShape.elements())), actual(expected.size());
    cpu.embeddingForward(d, view(ids, idShape), table.data(), view(expected, yShape));
    uint64_t bad = kNoBadToken;
    twin::embeddingForward(p, ids.data(), table.data(), actual.data(), &bad);
    requireSameBits(expected, actual, "embeddingForward");
    CHECK(bad == kNoBadToken);

    const std::vector<float> dy = r.floats(yShape.elements());
    std::vector<float> dCpu = r.floats(rows * p.features), dTwin = dCpu;
    cpu.embeddingBackwardWeights(d, view(ids, idShape), view(dy, yShape), dCpu.data());
    twin::embeddingBackward(p, ids.data(), dy.data(), dTwin.data(), &bad);
    requireSameBits(dCpu, dTwin, "embeddingBackward");
  }
}

TEST_CASE("a bad token id: CpuBackend's error, the twin's record naming the same id") {
  nn::CpuBackend cpu;
  const EmbeddingParams p{1, 2, 4, 1, false};
  const nn::EmbeddingDesc d{4, 1, false};
  const std::vector<float> table = {0, 1, 2, 3}, ids = {1, 7};
  std::vector<float> y(2);
  const Shape4 idShape{1, 1, 2, 1}, yShape{1, 1, 2, 1};
  CHECK_THROWS_WITH(cpu.embeddingForward(d, view(ids, idShape), table.data(), view(y, yShape)),
                    Catch::Contains("token id 7 is not an integer in [0, 4)"));
  uint64_t bad = kNoBadToken;
  twin::embeddingForward(p, ids.data(), table.data(), y.data(), &bad);
  REQUIRE(bad != kNoBadToken);
  CHECK(decodeBadToken(bad).id == 7.0f);
  CHECK(decodeBadToken(bad).vocab == 4);
  requireSameBits({1.0f, 0.0f}, y, "a bad id's output is 0");
}

// Whole attention layers of CpuBackend; the twins' softmax on exact scores.
struct AttentionCase {
  int n, f, t, heads;
  bool causal;
};

TEST_CASE("attention softmax twins equal CpuBackend's attention within rounding") {
  nn::CpuBackend cpu;
  Random r(43);
  for (int i = 0; i < kRandomCases; ++i) {
    AttentionCase c;
    c.n = r.integer(1, 3);
    c.heads = r.integer(1, 3);
    c.f = c.heads * r.integer(1, 3);
    c.t = r.integer(1, 7);
    c.causal = r.coin();
    INFO("n " << c.n << ", d " << c.f << ", T " << c.t << ", heads " << c.heads
              << (c.causal ? ", causal" : ""));
    const int f = c.f, t = c.t, dh = f / c.heads;
    const int64_t ft = int64_t{f} * t, tt = int64_t{t} * t;
    nn::AttentionDesc d;
    d.features = f;
    d.positions = t;
    d.heads = c.heads;
    d.causal = c.causal;
    const Shape4 xs{c.n, f, t, 1}, qkvShape{c.n, 3 * f, t, 1};
    // Whole numbers: the GEMMs before each softmax are exact in any order.
    const std::vector<float> x = r.levels(xs.elements(), -2, 2);
    const std::vector<float> w = r.levels(4 * int64_t{f} * f, -1, 1);
    const std::vector<float> bias = r.levels(4 * f, -1, 1);
    std::vector<float> qkv(static_cast<size_t>(qkvShape.elements())), dqkv(qkv.size());
    std::vector<float> probs(static_cast<size_t>(c.n * c.heads * tt));
    std::vector<float> context(x.size()), y(x.size());
    const nn::AttentionSaved saved{view(qkv, qkvShape), probs.data(), view(context, xs),
                                   view(dqkv, qkvShape)};
    cpu.attentionForward(d, view(x, xs), w.data(), bias.data(), saved, view(y, xs));

    // Scores from CpuBackend's (exact) QKV, then the twin's softmax.
    std::vector<float> scores(probs.size());
    for (int e = 0; e < c.n; ++e)
      for (int h = 0; h < c.heads; ++h)
        for (int q = 0; q < t; ++q)
          for (int k = 0; k < t; ++k) {
            double s = 0;
            for (int j = 0; j < dh; ++j)
              s += double(qkv[e * 3 * ft + (h * dh + j) * t + q]) *
                   qkv[e * 3 * ft + ft + (h * dh + j) * t + k];
            scores[(e * c.heads + h) * tt + q * t + k] = static_cast<float>(s);
          }
    const float scale = 1.0f / std::sqrt(static_cast<float>(dh));
    std::vector<float> twinProbs(probs.size());
    twin::attnSoftmaxForward(scores.data(), twinProbs.data(), int64_t{c.n} * c.heads * t, t,
                             c.causal, scale);
    requireClose(probs, twinProbs, kTranscendental, 1e-7, "attention probabilities");

    // Backward with whole-number dy: dC = Wo^T dy and dP = dC^T V exact.
    const std::vector<float> dy = r.levels(xs.elements(), -2, 2);
    std::vector<float> dw(w.size(), 0.0f), dbias(bias.size(), 0.0f);
    cpu.attentionBackwardWeights(d, view(x, xs), view(dy, xs), w.data(), saved, dw.data(),
                                 dbias.data());
    const float* wo = w.data() + 3 * int64_t{f} * f;
    std::vector<float> dprobs(probs.size()), dscores(probs.size());
    for (int e = 0; e < c.n; ++e) {
      std::vector<double> dc(static_cast<size_t>(ft), 0.0);
      for (int a = 0; a < f; ++a)
        for (int p = 0; p < t; ++p)
          for (int o = 0; o < f; ++o)
            dc[size_t(a * t + p)] += double(wo[o * f + a]) * dy[e * ft + o * t + p];
      for (int h = 0; h < c.heads; ++h)
        for (int q = 0; q < t; ++q)
          for (int k = 0; k < t; ++k) {
            double s = 0;
            for (int j = 0; j < dh; ++j)
              s += dc[size_t((h * dh + j) * t + q)] *
                   qkv[e * 3 * ft + 2 * ft + (h * dh + j) * t + k];
            dprobs[(e * c.heads + h) * tt + q * t + k] = static_cast<float>(s);
          }
    }
    twin::attnSoftmaxBackward(probs.data(), dprobs.data(), dscores.data(),
                              int64_t{c.n} * c.heads * t, t, scale);
    // dQ = K dS^T and dK = Q dS from the twin's dS, against CpuBackend's.
    std::vector<float> expectedDqk(static_cast<size_t>(c.n * 2 * ft));
    for (int e = 0; e < c.n; ++e)
      for (int h = 0; h < c.heads; ++h)
        for (int j = 0; j < dh; ++j)
          for (int q = 0; q < t; ++q) {
            double dq = 0, dk = 0;
            for (int k = 0; k < t; ++k) {
              const int64_t block = (e * c.heads + h) * tt;
              dq +=
                  double(qkv[e * 3 * ft + ft + (h * dh + j) * t + k]) * dscores[block + q * t + k];
              dk += double(qkv[e * 3 * ft + (h * dh + j) * t + k]) * dscores[block + k * t + q];
            }
            expectedDqk[e * 2 * ft + (h * dh + j) * t + q] = static_cast<float>(dq);
            expectedDqk[e * 2 * ft + ft + (h * dh + j) * t + q] = static_cast<float>(dk);
          }
    std::vector<float> cpuDqk(expectedDqk.size());
    for (int e = 0; e < c.n; ++e)
      for (int64_t i2 = 0; i2 < 2 * ft; ++i2)
        cpuDqk[e * 2 * ft + i2] = dqkv[e * 3 * ft + i2];
    requireClose(expectedDqk, cpuDqk, kGemm, 1e-5, "dQ and dK through the softmax backward");
  }
}

}  // namespace
}  // namespace strata::kernels::test

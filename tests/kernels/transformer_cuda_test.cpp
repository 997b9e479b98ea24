// The CUDA kernels of transformer.h against their CPU twins (part of
// kernels_cuda_test, whose main skips without a GPU): bit for bit where the
// contract says so (layer normalisation forward and backward data, the
// embedding both ways), within rounding for GELU and the attention softmax
// (CUDA's tanh and exp, the warp's order of a row sum) and layer
// normalisation's weight gradients (a double sum in another order). Sizes
// from one element to more than a wave of the grid; the embedding with
// repeated ids (short vocabularies: long runs in the sort), position tables
// on and off, and bad ids.
#include <cuda_runtime.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstring>
#include <string>
#include <vector>

#include "cases.h"
#include "strata/kernels/transformer.h"

namespace strata::kernels::test {
namespace {

constexpr double kTranscendental = 1e-5;
constexpr double kReduction = 1e-5;
constexpr float kBetas[] = {0.0f, 1.0f, 0.5f};
// GELU's gradient far left of 0 takes 1 - tanh^2 with tanh within an ulp of
// -1: an ulp of tanh (6e-8) moves it by ~1e-7 absolute, times x (1 +
// 0.134 x^2) 0.4 dy, up to ~4e-6 for |x| <= 6, |dy| <= 2.
constexpr double kGeluGradAbsolute = 1e-5;

void requireCuda(cudaError_t status, const char* what) {
  if (status != cudaSuccess)
    FAIL(what << ": " << cudaGetErrorString(status));
}

// A copy of host values in device memory, read back by host().
template <class T>
class Device {
 public:
  explicit Device(const std::vector<T>& values) : count_(values.size()) {
    requireCuda(cudaMalloc(&data_, std::max<size_t>(1, count_) * sizeof(T)), "cudaMalloc");
    if (count_ > 0)
      requireCuda(cudaMemcpy(data_, values.data(), count_ * sizeof(T), cudaMemcpyHostToDevice),
                  "cudaMemcpy to the device");
  }
  explicit Device(size_t count) : Device(std::vector<T>(count)) {}
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;
  ~Device() { cudaFree(data_); }
  T* get() { return data_; }
  std::vector<T> host() const {
    requireCuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    std::vector<T> out(count_);
    if (count_ > 0)
      requireCuda(cudaMemcpy(out.data(), data_, count_ * sizeof(T), cudaMemcpyDeviceToHost),
                  "cudaMemcpy to the host");
    return out;
  }

 private:
  size_t count_;
  T* data_ = nullptr;
};

cudaStream_t stream() {
  static cudaStream_t s = [] {
    cudaStream_t created = nullptr;
    requireCuda(cudaStreamCreateWithFlags(&created, cudaStreamNonBlocking), "cudaStreamCreate");
    return created;
  }();
  return s;
}

TEST_CASE("layer normalisation kernels equal their twins") {
  Random r(51);
  std::vector<Shape4> shapes = {{8, 768, 64, 1}, {2, 5, 3000, 1}, {3, 1, 1, 1}};
  for (int i = 0; i < 30; ++i)
    shapes.push_back(randomShape(r, 40));
  for (Shape4 s : shapes) {
    INFO("shape " << describe(s));
    const float eps = 1e-5f;
    const std::vector<float> x = r.floats(s.elements()), dy = r.floats(s.elements());
    const std::vector<float> gain = r.floats(s.c), bias = r.floats(s.c);
    Device<float> dX(x), dDy(dy), dGain(gain), dBias(bias);
    std::vector<float> expected(x.size());
    Device<float> out(expected.size());
    twin::layerNormForward(s, x.data(), gain.data(), bias.data(), eps, expected.data());
    cuda::layerNormForward(s, dX.get(), dGain.get(), dBias.get(), eps, out.get(), stream());
    requireSameBits(expected, out.host(), "layerNormForward");
    for (float beta : kBetas) {
      INFO("beta " << beta);
      expected = destination(r, s.elements(), beta);
      Device<float> grad(expected);
      twin::layerNormBackwardData(s, x.data(), dy.data(), gain.data(), eps, expected.data(), beta);
      cuda::layerNormBackwardData(s, dX.get(), dDy.get(), dGain.get(), eps, grad.get(), beta,
                                  stream());
      requireSameBits(expected, grad.host(), "layerNormBackwardData");
    }
    std::vector<float> dgain = r.floats(s.c), dbias = r.floats(s.c);
    Device<float> dDgain(dgain), dDbias(dbias);
    Device<float> scratch(static_cast<size_t>(cuda::layerNormWeightsScratch(s)));
    twin::layerNormBackwardWeights(s, x.data(), dy.data(), eps, dgain.data(), dbias.data());
    cuda::layerNormBackwardWeights(s, dX.get(), dDy.get(), eps, dDgain.get(), dDbias.get(),
                                   scratch.get(), stream());
    // Sums of up to 24k terms of either sign: relative to their size.
    requireClose(dgain, dDgain.host(), 1e-4, 1e-3, "layerNormBackwardWeights dgain");
    requireClose(dbias, dDbias.host(), 1e-4, 1e-3, "layerNormBackwardWeights dbias");
  }
}

TEST_CASE("gelu kernels equal their twins within rounding") {
  for (int64_t count : {int64_t{1}, int64_t{5}, int64_t{4099}, (int64_t{1} << 22) + 3}) {
    Random r(static_cast<uint64_t>(count));
    INFO(count << " elements");
    const std::vector<float> x = r.floats(count, -6.0f, 6.0f), dy = r.floats(count);
    Device<float> dX(x), dDy(dy);
    std::vector<float> expected(x.size());
    Device<float> out(expected.size());
    twin::geluForward(x.data(), expected.data(), count);
    cuda::geluForward(dX.get(), out.get(), count, stream());
    requireClose(expected, out.host(), kTranscendental, 1e-6, "geluForward");
    for (float beta : kBetas) {
      expected = destination(r, count, beta);
      Device<float> grad(expected);
      twin::geluBackward(x.data(), dy.data(), expected.data(), count, beta);
      cuda::geluBackward(dX.get(), dDy.get(), grad.get(), count, beta, stream());
      requireClose(expected, grad.host(), kTranscendental, kGeluGradAbsolute, "geluBackward");
    }
  }
}

TEST_CASE("attention softmax kernels equal their twins within rounding, causal and not") {
  Random r(53);
  struct Case {
    int blocks, t;
  };
  std::vector<Case> cases = {{1, 1}, {3, 5}, {7, 33}, {24, 1024}, {2, 2048}};
  for (int i = 0; i < 20; ++i)
    cases.push_back({r.integer(1, 12), r.integer(1, 70)});
  for (const Case& c : cases)
    for (bool causal : {true, false}) {
      INFO(c.blocks << " blocks of " << c.t << " x " << c.t << (causal ? ", causal" : ""));
      const int64_t rows = int64_t{c.blocks} * c.t, count = rows * c.t;
      const float scale = 0.125f;
      const std::vector<float> s = r.floats(count, -8.0f, 8.0f);
      std::vector<float> p(s.size());
      twin::attnSoftmaxForward(s.data(), p.data(), rows, c.t, causal, scale);
      Device<float> inPlace(s);
      cuda::attnSoftmaxForward(inPlace.get(), inPlace.get(), rows, c.t, causal, scale, stream());
      requireClose(p, inPlace.host(), kTranscendental, 1e-7, "attnSoftmaxForward (in place)");

      const std::vector<float> dp = r.floats(count);
      std::vector<float> ds(s.size());
      twin::attnSoftmaxBackward(p.data(), dp.data(), ds.data(), rows, c.t, scale);
      Device<float> dP(p), dDp(dp);
      cuda::attnSoftmaxBackward(dP.get(), dDp.get(), dDp.get(), rows, c.t, scale, stream());
      requireClose(ds, dDp.host(), kReduction, 1e-6, "attnSoftmaxBackward (in place)");
    }
}

TEST_CASE("embedding kernels equal their twins bit for bit, bad ids recorded") {
  Random r(57);
  std::vector<EmbeddingParams> cases = {{8, 1024, 50257, 64, true}, {4, 300, 3, 17, false}};
  for (int i = 0; i < 30; ++i)
    cases.push_back(
        {r.integer(1, 4), r.integer(1, 40), r.integer(1, 9), r.integer(1, 9), r.coin()});
  // Vocabulary-parallel shares: rows [first, first + tokens) of the table,
  // the position table added by the first worker only.
  for (int i = 0; i < 10; ++i) {
    EmbeddingParams p{r.integer(1, 4), r.integer(1, 40), r.integer(2, 9), r.integer(1, 9), true};
    p.firstToken = r.integer(0, p.vocab - 1);
    p.tokens = r.integer(1, p.vocab - p.firstToken);
    p.addPositions = r.coin();
    cases.push_back(p);
  }
  for (const EmbeddingParams& p : cases)
    for (bool withBad : {false, true}) {
      INFO("n " << p.n << ", T " << p.positions << ", vocab " << p.vocab << ", features "
                << p.features << (p.positionTable ? ", position table" : "")
                << (withBad ? ", a bad id" : "") << ", rows [" << p.firstToken << ", "
                << p.firstToken + p.rows() << ")"
                << (p.addPositions ? "" : ", positions not added"));
      const int64_t rows = p.rows() + (p.positionTable ? p.positions : 0);
      const int64_t tokens = int64_t{p.n} * p.positions;
      const std::vector<float> table = r.floats(rows * p.features);
      std::vector<float> ids = r.levels(tokens, 0, p.vocab - 1);
      if (withBad)
        ids[static_cast<size_t>(r.integer(0, static_cast<int>(tokens) - 1))] =
            static_cast<float>(p.vocab) + 0.5f;
      Device<float> dIds(ids), dTable(table);
      const int64_t outCount = tokens * p.features;
      std::vector<float> expected(static_cast<size_t>(outCount));
      Device<float> out(expected.size());
      uint64_t bad = kNoBadToken;
      Device<uint64_t> dBad(std::vector<uint64_t>{kNoBadToken});
      twin::embeddingForward(p, ids.data(), table.data(), expected.data(), &bad);
      cuda::embeddingForward(p, dIds.get(), dTable.get(), out.get(), dBad.get(), stream());
      requireSameBits(expected, out.host(), "embeddingForward");
      CHECK(dBad.host()[0] == bad);
      CHECK((bad != kNoBadToken) == withBad);

      const std::vector<float> dy = r.floats(outCount);
      std::vector<float> grad = r.floats(rows * p.features);
      Device<float> dDy(dy), dGrad(grad);
      Device<char> scratch(cuda::embeddingBackwardScratch(p));
      twin::embeddingBackward(p, ids.data(), dy.data(), grad.data(), &bad);
      cuda::embeddingBackward(p, dIds.get(), dDy.get(), dGrad.get(), dBad.get(), scratch.get(),
                              cuda::embeddingBackwardScratch(p), stream());
      requireSameBits(grad, dGrad.host(), "embeddingBackward");
      CHECK(dBad.host()[0] == bad);
    }
}

}  // namespace
}  // namespace strata::kernels::test

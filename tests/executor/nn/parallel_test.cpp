// Model parallelism of the fc part (owt-a/b/c): K workers each holding a
// slice of every fc layer's output neurons compute what one worker holding
// the whole layers computes, for K = 1..8 and layer sizes K does not divide.
#include <catch2/catch.hpp>

#include "helpers.h"
#include "strata/model/error.h"

namespace strata::nn {
namespace {

using test::NetworkBuilder;

// Float sums in a different order (a slice's GEMM blocks differently, partial
// input gradients are added worker by worker): values agree to a few ulps of
// the sum of |terms|; 1e-5 of the tensor's scale is 100x that.
void checkClose(std::span<const float> expected, std::span<const float> actual, const char* what) {
  REQUIRE(expected.size() == actual.size());
  const double tolerance = 1e-5 * std::max(1.0, test::maxAbs(expected));
  double worst = 0;
  for (size_t i = 0; i < expected.size(); ++i)
    worst = std::max(worst, std::abs(double(expected[i]) - actual[i]));
  INFO(what << ": worst difference " << worst << ", tolerance " << tolerance);
  CHECK(worst <= tolerance);
}

TEST_CASE("evenSlice splits any n into contiguous near-equal parts", "[parallel]") {
  for (int n : {1, 7, 10, 29, 4096})
    for (int k = 1; k <= 8 && k <= n; ++k) {
      int next = 0;
      for (int r = 0; r < k; ++r) {
        const NeuronRange s = evenSlice(n, k, r);
        CHECK(s.begin == next);
        CHECK(s.size() >= n / k);
        CHECK(s.size() <= n / k + 1);
        next = s.end;
      }
      CHECK(next == n);
    }
}

TEST_CASE("fc slices: outputs concatenate and partial input gradients sum to the whole layer's",
          "[parallel][fc]") {
  const int batch = 3;
  for (const bool flatten : {true, false}) {
    for (const int outputs : {29, 8, 13}) {
      NetworkBuilder b(flatten ? Shape{4, 2, 3} : Shape{5, 2, 2});
      b.add(LayerKind::kFc, test::fcSpec(outputs, flatten));
      const Network net = b.network();

      Model whole(net);
      test::fillUniform(whole.input(batch).span(), 1);
      whole.forward(0);
      Tensor dy(whole.output(0).dims());
      test::fillUniform(dy.span(), 2);
      std::copy(dy.span().begin(), dy.span().end(), whole.outputGrad(0).data());
      whole.backwardData(0);
      whole.backwardWeights(0);

      for (int k = 1; k <= 8; ++k) {
        CAPTURE(flatten, outputs, k);
        Tensor y(whole.output(0).dims());
        Tensor dx(whole.input().dims());
        dx.fill(0.0f);
        for (int r = 0; r < k; ++r) {
          Model part(net, ModelOptions{.slices = modelParallelSlices(net, k, r)});
          const NeuronRange s = part.slice(0);
          REQUIRE(s == evenSlice(outputs, k, r));
          // The slice holds exactly the whole layer's rows and bias entries.
          const ParamBlock pb = part.paramBlock(0), wb = whole.paramBlock(0);
          const int64_t in = wb.weights / outputs;
          const auto pw = part.parameters(0), ww = whole.parameters(0);
          REQUIRE(std::equal(pw.begin(), pw.begin() + pb.weights, ww.begin() + s.begin * in));
          REQUIRE(std::equal(pw.begin() + pb.weights, pw.end(), ww.begin() + wb.weights + s.begin));

          Tensor& x = part.exchangeInput(0, batch);
          std::copy(whole.input().span().begin(), whole.input().span().end(), x.data());
          part.forward(0);
          copyIntoChannels(part.output(0).view(), y.view(), s.begin);
          copyFromChannels(dy.view(), s.begin, part.outputGrad(0).view());
          part.backwardData(0);
          part.backwardWeights(0);
          const auto partial = part.exchangeInputGrad(0).span();
          for (size_t i = 0; i < partial.size(); ++i)
            dx.data()[i] += partial[i];
          // Weight gradients of the slice are the whole layer's rows.
          const auto pg = part.gradients(0), wg = whole.gradients(0);
          checkClose(
              std::span<const float>(wg.data() + s.begin * in, static_cast<size_t>(pb.weights)),
              pg.first(static_cast<size_t>(pb.weights)), "weight gradient rows");
          checkClose(std::span<const float>(wg.data() + wb.weights + s.begin,
                                            static_cast<size_t>(pb.bias)),
                     pg.subspan(static_cast<size_t>(pb.weights)), "bias gradient");
        }
        checkClose(whole.output(0).span(), y.span(), "concatenated outputs");
        checkClose(whole.inputGrad().span(), dx.span(), "summed partial input gradients");
      }
    }
  }
}

// The fc block of the owt strategies run by K workers, following the Plan:
// the first fc reads the gathered input; later fc layers read the gathered
// slices of the previous layer; softmax statistics are merged; partial input
// gradients are summed and scattered back into the producers' slices.
TEST_CASE("a model-parallel fc block on K workers equals one worker", "[parallel]") {
  NetworkBuilder b({20, 1, 1});
  const int fc1 = b.add(LayerKind::kFc, test::fcSpec(17), {-1});
  b.add(LayerKind::kRelu);
  const int drop = b.add(LayerKind::kDropout, test::dropoutSpec(0.4));
  const int fc2 = b.add(LayerKind::kFc, test::fcSpec(11));
  const int loss = b.add(LayerKind::kSoftmax);
  const Network net = b.network();
  const int batch = 5;
  const std::vector<int32_t> labels = {3, 10, 0, 7, 7};

  // Dropout stays on: masks are drawn per neuron of the whole layer, so the
  // workers' slices drop exactly what the whole layer drops.
  ModelOptions options;
  options.seed = 17;
  Model whole(net, options);
  test::fillUniform(whole.input(batch).span(), 4);
  whole.setLabels(labels);
  whole.forwardAll();
  whole.backwardAll(/*inputGradient=*/true);

  for (int k = 1; k <= 8; ++k) {
    CAPTURE(k);
    std::vector<Model> workers;
    for (int r = 0; r < k; ++r) {
      ModelOptions o = options;
      o.slices = modelParallelSlices(net, k, r);
      workers.emplace_back(net, o);
    }
    // Forward: every worker reads the whole input (the gathered boundary).
    Tensor h(Dims{batch, 17, 1, 1});
    for (Model& w : workers) {
      Tensor& x = w.exchangeInput(fc1, batch);
      std::copy(whole.input().span().begin(), whole.input().span().end(), x.data());
      w.setLabels(labels);
      for (int l = fc1; l <= drop; ++l)
        w.forward(l);
      copyIntoChannels(w.output(drop).view(), h.view(), w.slice(drop).begin);  // allgather
    }
    checkClose(whole.output(drop).span(), h.span(), "dropout output");
    std::vector<float> stats;
    for (Model& w : workers) {
      Tensor& x = w.exchangeInput(fc2, batch);
      std::copy(h.span().begin(), h.span().end(), x.data());
      w.forward(fc2);
      w.forward(loss);
      const auto s = w.softmaxStats();
      if (stats.empty())
        stats.assign(s.begin(), s.end());
      else
        mergeSoftmaxStats(stats, s);  // the "allreduce" of the statistics
    }
    double lossSum = 0;
    int64_t correct = 0;
    for (Model& w : workers) {
      std::copy(stats.begin(), stats.end(), w.softmaxStats().begin());
      lossSum += w.loss();
      correct += w.correctCount();
    }
    CHECK(lossSum == Approx(whole.loss()).epsilon(1e-6));
    CHECK(correct == whole.correctCount());

    // Backward: fc2's partial input gradients summed (reduce-scatter), each
    // worker taking its slice into the dropout layer's output gradient.
    Tensor dh(h.dims());
    dh.fill(0.0f);
    for (Model& w : workers) {
      w.backwardData(loss);
      w.backwardWeights(fc2);
      w.backwardData(fc2);
      const auto partial = w.exchangeInputGrad(fc2).span();
      for (size_t i = 0; i < partial.size(); ++i)
        dh.data()[i] += partial[i];
    }
    checkClose(whole.outputGrad(drop).span(), dh.span(), "gradient of the dropout output");
    Tensor dx(whole.input().dims());
    dx.fill(0.0f);
    for (Model& w : workers) {
      copyFromChannels(dh.view(), w.slice(drop).begin, w.outputGrad(drop).view());
      for (int l = drop; l > fc1; --l)
        w.backwardData(l);
      w.backwardWeights(fc1);
      w.backwardData(fc1);
      const auto partial = w.exchangeInputGrad(fc1).span();
      for (size_t i = 0; i < partial.size(); ++i)
        dx.data()[i] += partial[i];
      for (int l : {fc1, fc2}) {
        const NeuronRange s = w.slice(l);
        const ParamBlock pb = w.paramBlock(l), wb = whole.paramBlock(l);
        const int64_t in = wb.weights / net.layers[static_cast<size_t>(l)].outShape.c;
        const auto g = whole.gradients(l);
        checkClose(std::span<const float>(g.data() + s.begin * in, static_cast<size_t>(pb.weights)),
                   w.gradients(l).first(static_cast<size_t>(pb.weights)), "weight gradients");
      }
    }
    checkClose(whole.inputGrad().span(), dx.span(), "input gradient");

    // Or the loss from the whole logits gathered by the caller.
    Tensor logits(Dims{batch, 11, 1, 1});
    for (Model& w : workers)
      copyIntoChannels(w.output(fc2).view(), logits.view(), w.slice(fc2).begin);
    Tensor dlogits(logits.dims());
    TensorView dv = dlogits.view();
    const double gathered =
        softmaxCrossEntropy(workers[0].backend(), logits.view(), labels, 0, &dv);
    CHECK(gathered == Approx(whole.loss()).epsilon(1e-6));
    checkClose(whole.outputGrad(fc2).span(), dlogits.span(), "logit gradient");
  }
}

TEST_CASE("model-parallel layouts the executor cannot run are refused", "[parallel][errors]") {
  NetworkBuilder b({4, 3, 3});
  b.add(LayerKind::kConv, test::convSpec(4, 3, 3), {-1});
  b.add(LayerKind::kFc, test::fcSpec(6));
  b.add(LayerKind::kPool, test::poolSpec(PoolMode::kMax, 1, 1));
  const Network net = b.network();
  std::vector<NeuronRange> slices(3);
  slices[0] = {0, 2};  // a conv cannot be sliced
  CHECK_THROWS_WITH(Model(net, ModelOptions{.slices = slices}),
                    Catch::Contains("conv0") && Catch::Contains("only fc layers"));
  slices[0] = {};
  slices[1] = {0, 3};  // a pool cannot read a slice
  CHECK_THROWS_WITH(Model(net, ModelOptions{.slices = slices}),
                    Catch::Contains("pool2") && Catch::Contains("reads a model-parallel slice"));
  CHECK_THROWS_AS(modelParallelSlices(net, 2, 0), ConfigError);
}

}  // namespace
}  // namespace strata::nn

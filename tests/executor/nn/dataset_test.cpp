// SyntheticDataset: deterministic per (seed, index), so K workers can split a
// global batch among themselves without communication.
#include "strata/exec/nn/dataset.h"

#include <catch2/catch.hpp>

#include "helpers.h"

namespace strata::nn {
namespace {

TEST_CASE("examples are a function of (seed, index) only", "[dataset]") {
  const Shape shape{3, 8, 8};
  const SyntheticDataset a(shape, 10, 1), b(shape, 10, 1), other(shape, 10, 2);
  std::vector<float> x(192), y(192), z(192);
  for (int64_t i : {0, 1, 1000000007}) {
    a.example(i, x);
    b.example(i, y);
    other.example(i, z);
    CHECK(x == y);
    CHECK(x != z);
    CHECK(a.label(i) == b.label(i));
  }
}

TEST_CASE("K workers with b examples each see the one-worker batch of K*b", "[dataset]") {
  const Network net = test::presetNetwork("tiny-cnn");
  const auto data = SyntheticDataset::forNetwork(net, 3);
  CHECK(data.classes() == 10);
  const int b = 4, step = 2;
  for (int k : {1, 3, 7}) {
    CAPTURE(k);
    Tensor whole(Dims{k * b, 3, 32, 32});
    std::vector<int32_t> wholeLabels(static_cast<size_t>(k * b));
    data.fill(int64_t{step} * k * b, whole.view(), wholeLabels);
    for (int w = 0; w < k; ++w) {
      Tensor mine(Dims{b, 3, 32, 32});
      std::vector<int32_t> labels(b);
      data.fill(int64_t{step} * k * b + int64_t{w} * b, mine.view(), labels);
      const auto expected = whole.examples({w * b, (w + 1) * b}).span();
      CHECK(std::equal(expected.begin(), expected.end(), mine.span().begin()));
      CHECK(std::equal(labels.begin(), labels.end(), wholeLabels.begin() + w * b));
    }
  }
}

TEST_CASE("a token batch's ids are the dataset's tokens, bit for bit", "[dataset]") {
  // The batch carries only (seed, vocab, first index); syntheticFill makes
  // the ids with kernels' twin (the CUDA kernel's element function), which
  // must equal token(i, p), the host's own walk, at every position.
  for (const auto& [vocab, positions, first, n] :
       {std::tuple{50257, 64, int64_t{0}, 3}, std::tuple{2, 129, int64_t{37}, 5},
        std::tuple{1 << 24, 17, int64_t{1} << 33, 2}}) {
    CAPTURE(vocab, positions, first);
    const SyntheticDataset data(Shape{1, positions, 1}, 10, 20261126,
                                SyntheticOptions{1.0f, 0.5f, 4, vocab});
    const SyntheticBatch batch = data.batch(first, n);
    CHECK(batch.values.empty());
    CHECK(batch.tokens.vocab == vocab);
    CHECK(batch.tokens.firstIndex == first);
    Tensor x(Dims{n, 1, positions, 1});
    syntheticFill(batch, x.view());
    for (int i = 0; i < n; ++i)
      for (int p = 0; p < positions; ++p)
        REQUIRE(x.span()[static_cast<size_t>(i * positions + p)] ==
                static_cast<float>(data.token(first + i, p)));
    // example() is the same function; the ids are in [0, vocab).
    std::vector<float> one(static_cast<size_t>(positions));
    data.example(first + n - 1, one);
    CHECK(std::equal(one.begin(), one.end(), x.span().end() - positions));
    CHECK(*std::max_element(x.span().begin(), x.span().end()) < float(vocab));
  }
}

TEST_CASE("labels are spread over the classes and repeat per position", "[dataset]") {
  const SyntheticDataset data({2, 4, 4}, 10, 7);
  std::vector<int> counts(10);
  for (int64_t i = 0; i < 10000; ++i)
    ++counts[static_cast<size_t>(data.label(i))];
  for (int c : counts)
    CHECK(c == Approx(1000).margin(150));
  Tensor x(Dims{2, 2, 4, 4});
  std::vector<int32_t> labels(6);
  data.fill(5, x.view(), labels, 3);
  CHECK(labels == std::vector<int32_t>{data.label(5), data.label(5), data.label(5), data.label(6),
                                       data.label(6), data.label(6)});
}

}  // namespace
}  // namespace strata::nn

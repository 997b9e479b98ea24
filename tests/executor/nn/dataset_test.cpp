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

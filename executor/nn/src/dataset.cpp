#include "strata/exec/nn/dataset.h"

#include <fmt/format.h>

#include <algorithm>

#include "strata/kernels/counter_rng.h"
#include "strata/kernels/kernels.h"
#include "strata/model/error.h"

namespace strata::nn {

namespace {
// Streams of the counter-based generator, so labels, means and noise never
// share random bits.
constexpr uint64_t kLabelStream = 1;
constexpr uint64_t kMeanStream = 2;
constexpr uint64_t kNoiseStream = 3;
// Token sequences draw from streams 4 and 5 (kernels.h: kTokenStream,
// kBigramStream), and follow the dataset's bigram map except at a fraction
// kTokenNoise = 0.1 of positions, which draw a uniform token (our choice:
// learnable, not trivial).
using kernels::kBigramStream;
using kernels::kTokenNoise;
using kernels::kTokenStream;
}  // namespace

SyntheticDataset::SyntheticDataset(Shape shape, int classes, uint64_t seed,
                                   SyntheticOptions options)
    : shape_(shape), classes_(classes), seed_(seed), options_(options) {
  if (classes < 1)
    throw OptionError("classes", fmt::format("{} classes; need at least 1", classes));
  if (shape.elements() <= 0)
    throw OptionError("shape",
                      fmt::format("empty example shape {}x{}x{}", shape.c, shape.h, shape.w));
  if (options.grid < 1)
    throw OptionError("grid", fmt::format("grid {} must be positive", options.grid));
  if (options.vocab < 0)
    throw OptionError("vocab", fmt::format("vocabulary {} must not be negative", options.vocab));
  if (options.vocab > 0) {
    if (shape.c != 1)
      throw OptionError("shape", fmt::format("token sequences have 1 channel, not {}", shape.c));
    if (options.vocab > (1 << 24))
      throw OptionError("vocab", fmt::format("vocabulary {} is over 2^24, the largest whose ids "
                                             "a float holds exactly",
                                             options.vocab));
    return;  // no class means: examples are token sequences
  }
  // Class means: one value per (class, channel, grid cell), spread over the
  // pixels of the cell by example(); stored per cell, so an ImageNet-sized
  // input with 1000 classes costs a few MB, not 600.
  gridH_ = std::min(options.grid, shape.h);
  gridW_ = std::min(options.grid, shape.w);
  const int64_t cells = int64_t{gridH_} * gridW_;
  means_.resize(static_cast<size_t>(int64_t{classes} * shape.c * cells));
  for (int k = 0; k < classes; ++k)
    for (int c = 0; c < shape.c; ++c)
      for (int64_t cell = 0; cell < cells; ++cell) {
        const uint64_t bits = kernels::hashOf(seed, kMeanStream, static_cast<uint64_t>(k),
                                              static_cast<uint64_t>(int64_t{c} * cells + cell));
        means_[static_cast<size_t>((int64_t{k} * shape.c + c) * cells + cell)] =
            options.signal * kernels::normalFloat(bits);
      }
}

SyntheticDataset SyntheticDataset::forNetwork(const Network& network, uint64_t seed,
                                              SyntheticOptions options) {
  // A language model reads token ids: its examples are token sequences.
  for (const Layer& l : network.layers)
    if (l.kind == LayerKind::kEmbedding && l.readsNetworkInput())
      options.vocab = l.spec.vocab;
  for (auto it = network.layers.rbegin(); it != network.layers.rend(); ++it)
    if (it->kind == LayerKind::kSoftmax)
      return SyntheticDataset(network.input, it->inShape.c, seed, options);
  throw UserError(fmt::format("network '{}' has no softmax layer to take labels", network.name));
}

int32_t SyntheticDataset::label(int64_t index) const {
  STRATA_ENFORCE_OP(index, >=, 0);
  return static_cast<int32_t>(kernels::hashOf(seed_, kLabelStream, static_cast<uint64_t>(index)) %
                              static_cast<uint64_t>(classes_));
}

void SyntheticDataset::example(int64_t index, std::span<float> out) const {
  STRATA_ENFORCE_OP(static_cast<int64_t>(out.size()), ==, shape_.elements());
  syntheticFill(batch(index, 1), TensorView{out.data(), Dims{1, shape_.c, shape_.h, shape_.w}});
}

int32_t SyntheticDataset::token(int64_t index, int64_t position) const {
  STRATA_ENFORCE_OP(index, >=, 0);
  STRATA_ENFORCE(options_.vocab > 0 && position >= 0);
  const auto vocab = static_cast<uint64_t>(options_.vocab);
  const auto draw = [&](int64_t p) {
    return kernels::hashOf(seed_, kTokenStream, static_cast<uint64_t>(index),
                           static_cast<uint64_t>(p));
  };
  // Walk back to the last uniform draw (position 0 always is one), then
  // follow the bigram map forward.
  int64_t p = position;
  while (p > 0 && kernels::uniformFloat(kernels::mix64(draw(p))) >= kTokenNoise)
    --p;
  auto tok = draw(p) % vocab;
  for (; p < position; ++p)
    tok = kernels::hashOf(seed_, kBigramStream, tok) % vocab;
  return static_cast<int32_t>(tok);
}

SyntheticBatch SyntheticDataset::batch(int64_t firstIndex, int n) const {
  STRATA_ENFORCE_OP(firstIndex, >=, 0);
  STRATA_ENFORCE_OP(n, >=, 0);
  SyntheticBatch b{means_, {}, {}, gridH_, gridW_, options_.noise, {}, {}};
  if (options_.vocab > 0)
    b.tokens = {seed_, options_.vocab, firstIndex};  // token(i, p), made by the backend
  b.classes.reserve(static_cast<size_t>(n));
  b.keys.reserve(static_cast<size_t>(n));
  for (int64_t i = firstIndex; i < firstIndex + n; ++i) {
    b.classes.push_back(label(i));
    b.keys.push_back(kernels::hashOf(seed_, kNoiseStream, static_cast<uint64_t>(i)));
  }
  return b;
}

std::vector<int32_t> SyntheticDataset::labels(int64_t firstIndex, int n, int positions) const {
  STRATA_ENFORCE_OP(positions, >=, 1);
  std::vector<int32_t> out;
  out.reserve(static_cast<size_t>(n) * static_cast<size_t>(positions));
  if (options_.vocab > 0) {
    // The next token at each position, as a class of the softmax.
    for (int64_t i = firstIndex; i < firstIndex + n; ++i)
      for (int p = 0; p < positions; ++p)
        out.push_back(token(i, p + 1) % classes_);
    return out;
  }
  for (int64_t i = firstIndex; i < firstIndex + n; ++i)
    out.insert(out.end(), static_cast<size_t>(positions), label(i));
  return out;
}

void syntheticFill(const SyntheticBatch& b, TensorView x) {
  STRATA_ENFORCE_OP(static_cast<int64_t>(x.dims.n), ==, static_cast<int64_t>(b.classes.size()));
  STRATA_ENFORCE_OP(b.classes.size(), ==, b.keys.size());
  if (b.tokens.vocab > 0) {
    kernels::twin::syntheticTokens(
        {b.tokens.seed, b.tokens.vocab, b.tokens.firstIndex, x.dims.n, x.dims.perExample()},
        x.data);
    return;
  }
  if (!b.values.empty()) {
    STRATA_ENFORCE_OP(static_cast<int64_t>(b.values.size()), ==, x.elements());
    std::copy(b.values.begin(), b.values.end(), x.data);
    return;
  }
  const int64_t cells = int64_t{b.gridH} * b.gridW;
  const int64_t perExample = int64_t{x.dims.c} * x.dims.h * x.dims.w;
  for (int n = 0; n < x.dims.n; ++n) {
    const auto classIndex = static_cast<int64_t>(b.classes[static_cast<size_t>(n)]);
    STRATA_ENFORCE(classIndex >= 0 &&
                   (classIndex + 1) * x.dims.c * cells <= static_cast<int64_t>(b.means.size()));
    const float* mean = b.means.data() + classIndex * x.dims.c * cells;
    const uint64_t key = b.keys[static_cast<size_t>(n)];
    float* out = x.data + n * perExample;
    int64_t e = 0;
    for (int c = 0; c < x.dims.c; ++c)
      for (int y = 0; y < x.dims.h; ++y) {
        const float* row = mean + int64_t{c} * cells + int64_t{y * b.gridH / x.dims.h} * b.gridW;
        for (int xx = 0; xx < x.dims.w; ++xx, ++e)
          out[e] = row[xx * b.gridW / x.dims.w] +
                   b.noise * kernels::normalFloat(kernels::hashOf(key, static_cast<uint64_t>(e)));
      }
  }
}

void SyntheticDataset::fill(int64_t firstIndex, TensorView x, std::span<int32_t> labels,
                            int positions) const {
  STRATA_ENFORCE(x.dims.c == shape_.c && x.dims.h == shape_.h && x.dims.w == shape_.w);
  STRATA_ENFORCE_OP(positions, >=, 1);
  STRATA_ENFORCE_OP(static_cast<int64_t>(labels.size()), ==, int64_t{x.dims.n} * positions);
  syntheticFill(batch(firstIndex, x.dims.n), x);
  const auto all = this->labels(firstIndex, x.dims.n, positions);
  std::copy(all.begin(), all.end(), labels.begin());
}

}  // namespace strata::nn

// Synthetic training data that a network can learn, generated on demand.
//
// Example i is a pure function of (seed, i): any worker can generate any
// example without communication, and a run of K workers that each take b
// consecutive examples of step s (worker k: s*K*b + k*b + [0, b)) sees exactly
// the examples of a one-worker run with batch K*b (s*K*b + [0, K*b)).
//
// The task: class-dependent means plus noise. Each class has a mean image
// that is constant on the cells of a coarse grid (grid x grid cells per
// channel, values ~ N(0, signal^2)), so the classes differ in coarse spatial
// structure that convolutions and pooling pick up; an example of class y is
// mean_y + N(0, noise^2) per element. The label is uniform over the classes.
//
// A language model (a network whose input is read by an embedding) gets token
// sequences instead: token 0 uniform in [0, vocab); token p+1 is the
// dataset's bigram map (a fixed random function of the token) of token p,
// except at 10% of positions, which draw a uniform token. The label of
// position p is token p+1 (the next token), taken modulo the classes; the
// network input holds the ids as floats. Each example has one "class" as
// before (label(i)), used only for the batch's bookkeeping.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "strata/exec/nn/synthetic_batch.h"
#include "strata/exec/nn/tensor.h"
#include "strata/model/network.h"

namespace strata::nn {

struct SyntheticOptions {
  float signal = 0.5f;  // standard deviation of the class means
  float noise = 1.0f;   // standard deviation of the per-element noise
  int grid = 4;         // cells per side of the class-mean grid (capped by h, w)
  // > 0: a language model's data (see the header): examples are sequences of
  // token ids in [0, vocab), signal, noise and grid unused.
  int vocab = 0;
};

class SyntheticDataset {
 public:
  // Examples of `shape` in `classes` classes. Requires classes >= 1 and a
  // non-empty shape.
  SyntheticDataset(Shape shape, int classes, uint64_t seed, SyntheticOptions options = {});
  // The input shape of `network` and as many classes as its softmax layer has
  // channels; token sequences over the embedding's vocabulary when an
  // embedding reads the network input. Throws UserError when the network has
  // no softmax layer.
  static SyntheticDataset forNetwork(const Network& network, uint64_t seed,
                                     SyntheticOptions options = {});

  Shape shape() const { return shape_; }
  int classes() const { return classes_; }

  // The class of example `index` (index >= 0).
  int32_t label(int64_t index) const;
  // Writes example `index` (c*h*w values, NCHW) into `out`.
  void example(int64_t index, std::span<float> out) const;
  // Writes examples firstIndex .. firstIndex + x.n - 1 into `x` (dims must be
  // (n, c, h, w) of this dataset) and their labels into `labels`, each
  // repeated `positions` times (one per position of a per-position softmax).
  void fill(int64_t firstIndex, TensorView x, std::span<int32_t> labels, int positions = 1) const;
  // Examples firstIndex .. firstIndex + n - 1 as data, for a backend to make
  // them where its memory is (Backend::writeSynthetic).
  SyntheticBatch batch(int64_t firstIndex, int n) const;
  // Their labels, each repeated `positions` times; for token sequences the
  // next token of each of the first `positions` positions.
  std::vector<int32_t> labels(int64_t firstIndex, int n, int positions = 1) const;
  // Token `position` of example `index` of a token dataset (position may be
  // the one past the example's last: the last label).
  int32_t token(int64_t index, int64_t position) const;

 private:
  Shape shape_;
  int classes_ = 0;
  uint64_t seed_ = 0;
  SyntheticOptions options_;
  int gridH_ = 1, gridW_ = 1;  // cells per side of the class-mean grid
  std::vector<float> means_;   // classes x c x gridH x gridW
};

}  // namespace strata::nn

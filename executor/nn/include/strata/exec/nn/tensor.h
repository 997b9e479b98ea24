// Tensors of the compute layer: float, NCHW, contiguous.
//
// A Tensor owns its storage; TensorView and ConstTensorView are non-owning
// windows (pointer + dims) that the Backend's kernels take, so a kernel can
// run on a range of examples of a bigger tensor without copying. Examples are
// the outermost dimension, so a range of examples is one contiguous block.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "strata/exec/nn/memory.h"

namespace strata::nn {

// Shape of a batch: n examples of c channels x h x w.
struct Dims {
  int n = 0;
  int c = 0;
  int h = 0;
  int w = 0;

  int64_t perExample() const { return int64_t{c} * h * w; }
  int64_t elements() const { return int64_t{n} * perExample(); }
  bool operator==(const Dims&) const = default;
};

// A half-open range [begin, end) of examples (rows of a batch).
struct ExampleRange {
  int begin = 0;
  int end = 0;

  int count() const { return end - begin; }
  bool operator==(const ExampleRange&) const = default;
};

// A non-owning window onto n examples of a tensor; writes go to the tensor.
struct TensorView {
  float* data = nullptr;
  Dims dims;

  int64_t elements() const { return dims.elements(); }
  std::span<float> span() const { return {data, static_cast<size_t>(elements())}; }
  // Element (n, c, h, w); no bounds check.
  float& at(int n, int c, int h, int w) const {
    return data[((int64_t{n} * dims.c + c) * dims.h + h) * dims.w + w];
  }
  // Examples [r.begin, r.end) of this view. Requires 0 <= begin <= end <= n.
  TensorView examples(ExampleRange r) const;
};

// A read-only window; every TensorView converts to one.
struct ConstTensorView {
  const float* data = nullptr;
  Dims dims;

  ConstTensorView() = default;
  ConstTensorView(const float* d, Dims s) : data(d), dims(s) {}
  ConstTensorView(TensorView v) : data(v.data), dims(v.dims) {}  // NOLINT: implicit on purpose

  int64_t elements() const { return dims.elements(); }
  std::span<const float> span() const { return {data, static_cast<size_t>(elements())}; }
  float at(int n, int c, int h, int w) const {
    return data[((int64_t{n} * dims.c + c) * dims.h + h) * dims.w + w];
  }
  ConstTensorView examples(ExampleRange r) const;
};

// An owning NCHW float tensor in one Memory (host memory unless given: a
// Model keeps its tensors in its backend's memory).
class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(Memory& memory) : storage_(memory) {}
  // A tensor of `dims`, zero-filled.
  explicit Tensor(Dims dims, Memory& memory = hostMemory());

  const Dims& dims() const { return dims_; }
  int n() const { return dims_.n; }
  int64_t elements() const { return dims_.elements(); }
  Memory& memory() const { return storage_.memory(); }
  // The Memory's pointers (memory.h): for kernels and BufferOps, and for the
  // host only where the memory is host-accessible.
  float* data() { return storage_.data(); }
  const float* data() const { return storage_.data(); }
  std::span<float> span() { return {storage_.data(), static_cast<size_t>(elements())}; }
  std::span<const float> span() const { return {storage_.data(), static_cast<size_t>(elements())}; }

  // Host reads and writes of elements: InvariantError when the memory is not
  // host-accessible (use toHost() / upload()).
  float& at(int n, int c, int h, int w) {
    requireHostAccess(memory(), "Tensor::at");
    return view().at(n, c, h, w);
  }
  float at(int n, int c, int h, int w) const {
    requireHostAccess(memory(), "Tensor::at");
    return view().at(n, c, h, w);
  }
  // The elements copied to the host (waits for the kernels before it).
  std::vector<float> toHost() const;
  // Writes host `values` (elements() of them) into the tensor.
  void upload(std::span<const float> values);

  // Changes the shape. Contents are unspecified afterwards unless the shape is
  // unchanged (then nothing happens); storage only grows, so a per-step resize
  // to the same or a smaller batch does not allocate.
  void resize(Dims dims);
  // Every element = value, on the host (host-accessible memory only; a
  // backend's buffers are filled with Backend::fill).
  void fill(float value);

  TensorView view() { return {storage_.data(), dims_}; }
  ConstTensorView view() const { return {storage_.data(), dims_}; }
  // Examples [r.begin, r.end); requires 0 <= begin <= end <= n().
  TensorView examples(ExampleRange r) { return view().examples(r); }
  ConstTensorView examples(ExampleRange r) const { return view().examples(r); }

 private:
  Dims dims_;
  Buffer<float> storage_;
};

// Copies all channels of `src` into channels [channelOffset, channelOffset +
// src.c) of `dst`, example by example: how model-parallel slices of a layer's
// output are assembled into the full input of the next layer. Requires equal
// n, h, w and the channels to fit.
void copyIntoChannels(ConstTensorView src, TensorView dst, int channelOffset);

// The inverse: copies channels [channelOffset, channelOffset + dst.c) of `src`
// into `dst` (a worker's slice of a full gradient).
void copyFromChannels(ConstTensorView src, int channelOffset, TensorView dst);

}  // namespace strata::nn

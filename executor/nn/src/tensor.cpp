#include "strata/exec/nn/tensor.h"

#include <algorithm>
#include <cstring>

#include "strata/model/error.h"

namespace strata::nn {

TensorView TensorView::examples(ExampleRange r) const {
  STRATA_ENFORCE_OP(r.begin, >=, 0);
  STRATA_ENFORCE_OP(r.begin, <=, r.end);
  STRATA_ENFORCE_OP(r.end, <=, dims.n);
  return {data + r.begin * dims.perExample(), Dims{r.count(), dims.c, dims.h, dims.w}};
}

ConstTensorView ConstTensorView::examples(ExampleRange r) const {
  STRATA_ENFORCE_OP(r.begin, >=, 0);
  STRATA_ENFORCE_OP(r.begin, <=, r.end);
  STRATA_ENFORCE_OP(r.end, <=, dims.n);
  return {data + r.begin * dims.perExample(), Dims{r.count(), dims.c, dims.h, dims.w}};
}

Tensor::Tensor(Dims dims, Memory& memory) : storage_(memory) {
  resize(dims);
}

void Tensor::resize(Dims dims) {
  STRATA_ENFORCE(dims.n >= 0 && dims.c >= 0 && dims.h >= 0 && dims.w >= 0);
  if (dims == dims_)
    return;
  dims_ = dims;
  if (static_cast<size_t>(dims.elements()) > storage_.size())
    storage_.resize(static_cast<size_t>(dims.elements()));
}

void Tensor::fill(float value) {
  requireHostAccess(memory(), "Tensor::fill");
  std::fill_n(storage_.data(), elements(), value);
}

std::vector<float> Tensor::toHost() const {
  std::vector<float> out(static_cast<size_t>(elements()));
  download(memory(), std::span<float>(out), storage_.data());
  return out;
}

void Tensor::upload(std::span<const float> values) {
  STRATA_ENFORCE_OP(static_cast<int64_t>(values.size()), ==, elements());
  nn::upload(memory(), storage_.data(), values);
}

void copyIntoChannels(ConstTensorView src, TensorView dst, int channelOffset) {
  STRATA_ENFORCE_OP(src.dims.n, ==, dst.dims.n);
  STRATA_ENFORCE_OP(src.dims.h, ==, dst.dims.h);
  STRATA_ENFORCE_OP(src.dims.w, ==, dst.dims.w);
  STRATA_ENFORCE(channelOffset >= 0 && channelOffset + src.dims.c <= dst.dims.c);
  const int64_t plane = int64_t{src.dims.h} * src.dims.w;
  const size_t bytes = static_cast<size_t>(src.dims.perExample()) * sizeof(float);
  for (int n = 0; n < src.dims.n; ++n)
    std::memcpy(dst.data + n * dst.dims.perExample() + channelOffset * plane,
                src.data + n * src.dims.perExample(), bytes);
}

void copyFromChannels(ConstTensorView src, int channelOffset, TensorView dst) {
  STRATA_ENFORCE_OP(src.dims.n, ==, dst.dims.n);
  STRATA_ENFORCE_OP(src.dims.h, ==, dst.dims.h);
  STRATA_ENFORCE_OP(src.dims.w, ==, dst.dims.w);
  STRATA_ENFORCE(channelOffset >= 0 && channelOffset + dst.dims.c <= src.dims.c);
  const int64_t plane = int64_t{src.dims.h} * src.dims.w;
  const size_t bytes = static_cast<size_t>(dst.dims.perExample()) * sizeof(float);
  for (int n = 0; n < src.dims.n; ++n)
    std::memcpy(dst.data + n * dst.dims.perExample(),
                src.data + n * src.dims.perExample() + channelOffset * plane, bytes);
}

}  // namespace strata::nn

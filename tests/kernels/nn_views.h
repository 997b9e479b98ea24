// kernels.h's shapes as executor/nn's views, for the tests that hold the
// twins against CpuBackend (twin_test.cpp, transformer_twin_test.cpp).
#pragma once

#include <vector>

#include "strata/exec/nn/tensor.h"
#include "strata/kernels/kernels.h"

namespace strata::kernels::test {

inline nn::Dims dimsOf(Shape4 s) {
  return {s.n, s.c, s.h, s.w};
}
inline nn::TensorView view(std::vector<float>& v, Shape4 s) {
  return {v.data(), dimsOf(s)};
}
inline nn::ConstTensorView view(const std::vector<float>& v, Shape4 s) {
  return {v.data(), dimsOf(s)};
}

}  // namespace strata::kernels::test

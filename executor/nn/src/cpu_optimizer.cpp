// The CPU kernels of one ISA (cpu_kernels.cpp): the optimisers' updates
// (SGD with momentum; Adam and AdamW, whose elements are kernels/
// elementwise.h's, as the twin's and the CUDA kernel's).
#include <cmath>

#include "cpu_isa.h"
#include "strata/kernels/elementwise.h"
#include "strata/model/error.h"

namespace strata::nn::STRATA_CPU_ISA {

// ---- optimiser ------------------------------------------------------------

void CpuImpl::sgdMomentum(std::span<float> w, std::span<float> v, std::span<const float> g,
                          float learningRate, float momentum, float weightDecay) {
  STRATA_ENFORCE_OP(w.size(), ==, v.size());
  STRATA_ENFORCE_OP(w.size(), ==, g.size());
  if (!runs(MemKernel::kSgd, double(w.size())))
    return;
  for (size_t i = 0; i < w.size(); ++i) {
    v[i] = momentum * v[i] - learningRate * (g[i] + weightDecay * w[i]);
    w[i] += v[i];
  }
}

void CpuImpl::adam(std::span<float> w, std::span<float> m, std::span<float> v,
                   std::span<const float> g, const AdamParams& p) {
  if (!runs(MemKernel::kAdam, double(w.size())))
    return;
  adamKernel(w, m, v, g, p);
}

void CpuImpl::adamKernel(std::span<float> w, std::span<float> m, std::span<float> v,
                         std::span<const float> g, const AdamParams& p) {
  STRATA_ENFORCE_OP(w.size(), ==, m.size());
  STRATA_ENFORCE_OP(w.size(), ==, v.size());
  STRATA_ENFORCE_OP(w.size(), ==, g.size());
  STRATA_ENFORCE_OP(p.step, >=, 1);
  // The element function the kernels/ twin and the CUDA kernel run.
  const kernels::element::AdamScalars s = kernels::element::adamScalars(
      {p.learningRate, p.beta1, p.beta2, p.eps, p.weightDecay, p.decoupled, p.step});
  for (size_t i = 0; i < w.size(); ++i)
    kernels::element::adam(&w[i], &m[i], &v[i], g[i], s);
}

}  // namespace strata::nn::STRATA_CPU_ISA

// The CPU kernels of one ISA (cpu_kernels.cpp): the optimisers' updates
// (SGD with momentum, which the executor trains with; Adam, for calibration).
#include <cmath>

#include "cpu_isa.h"
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
                   std::span<const float> g, float learningRate, float beta1, float beta2,
                   float eps, int step) {
  STRATA_ENFORCE_OP(w.size(), ==, m.size());
  STRATA_ENFORCE_OP(w.size(), ==, v.size());
  STRATA_ENFORCE_OP(w.size(), ==, g.size());
  STRATA_ENFORCE_OP(step, >=, 1);
  const float c1 = 1.0f / (1.0f - std::pow(beta1, static_cast<float>(step)));
  const float c2 = 1.0f / (1.0f - std::pow(beta2, static_cast<float>(step)));
  for (size_t i = 0; i < w.size(); ++i) {
    m[i] = beta1 * m[i] + (1.0f - beta1) * g[i];
    v[i] = beta2 * v[i] + (1.0f - beta2) * g[i] * g[i];
    w[i] -= learningRate * (m[i] * c1) / (std::sqrt(v[i] * c2) + eps);
  }
}

}  // namespace strata::nn::STRATA_CPU_ISA

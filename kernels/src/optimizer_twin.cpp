// The CPU twin of the optimisers' kernels beside sgdMomentum (twins.cpp):
// Adam and AdamW, a loop over elementwise.h's adam.
#include "strata/kernels/elementwise.h"
#include "strata/kernels/kernels.h"

namespace strata::kernels::twin {

void adam(float* w, float* m, float* v, const float* g, int64_t count, const AdamParams& p) {
  const element::AdamScalars s = element::adamScalars(p);
  for (int64_t i = 0; i < count; ++i)
    element::adam(w + i, m + i, v + i, g[i], s);
}

}  // namespace strata::kernels::twin

// The CPU twins of precision.h: plain loops over its element functions.
#include "strata/kernels/elementwise.h"
#include "strata/kernels/precision.h"

namespace strata::kernels::twin {

void castToBf16(const float* x, uint16_t* y, int64_t count) {
  for (int64_t i = 0; i < count; ++i)
    y[i] = element::bf16FromFloat(x[i]);
}

void castFromBf16(const uint16_t* x, float* y, int64_t count, float beta) {
  for (int64_t i = 0; i < count; ++i)
    y[i] = element::blend(y + i, element::floatFromBf16(x[i]), beta);
}

}  // namespace strata::kernels::twin

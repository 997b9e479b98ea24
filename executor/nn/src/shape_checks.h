// The shape checks every backend makes on its arguments (a mismatch is a bug
// in the caller: InvariantError). Internal to executor/nn.
#pragma once

#include "strata/exec/nn/backend.h"
#include "strata/model/error.h"

namespace strata::nn {

inline void checkSameDims(const Dims& a, const Dims& b) {
  STRATA_ENFORCE_OP(a.n, ==, b.n);
  STRATA_ENFORCE_OP(a.c, ==, b.c);
  STRATA_ENFORCE_OP(a.h, ==, b.h);
  STRATA_ENFORCE_OP(a.w, ==, b.w);
}

// x (n, inC, inH, inW) and y (n, filters, outH, outW) of convolution d.
inline void checkConv(const ConvDesc& d, const Dims& x, const Dims& y) {
  STRATA_ENFORCE_OP(x.n, ==, y.n);
  STRATA_ENFORCE_OP(x.c, ==, d.inC);
  STRATA_ENFORCE_OP(x.h, ==, d.inH);
  STRATA_ENFORCE_OP(x.w, ==, d.inW);
  STRATA_ENFORCE_OP(y.c, ==, d.filters);
  STRATA_ENFORCE_OP(y.h, ==, d.outH);
  STRATA_ENFORCE_OP(y.w, ==, d.outW);
  STRATA_ENFORCE_OP(d.inC % d.groups, ==, 0);
  STRATA_ENFORCE_OP(d.filters % d.groups, ==, 0);
}

// Attention d over x (n, features, T) and the buffers forward saves for backward.
inline void checkAttention(const AttentionDesc& d, const Dims& x, const AttentionSaved& saved) {
  STRATA_ENFORCE(d.heads > 0 && d.inner() % d.heads == 0);
  STRATA_ENFORCE(d.keyValueHeads() > 0 && d.heads % d.keyValueHeads() == 0);
  STRATA_ENFORCE(!d.rotary || (d.rotaryFeatures() % 2 == 0 && d.rotaryFeatures() > 0 &&
                               d.rotaryFeatures() <= d.headFeatures()));
  STRATA_ENFORCE_OP(x.c, ==, d.features);
  STRATA_ENFORCE_OP(int64_t{x.h} * x.w, ==, d.positions);
  STRATA_ENFORCE_OP(saved.qkv.dims.n, ==, x.n);
  STRATA_ENFORCE_OP(saved.qkv.dims.perExample(), ==, int64_t{d.qkvFeatures()} * d.positions);
  STRATA_ENFORCE_OP(saved.context.dims.n, ==, x.n);
  STRATA_ENFORCE_OP(saved.context.dims.perExample(), ==, int64_t{d.inner()} * d.positions);
  STRATA_ENFORCE(saved.probs != nullptr);
}

}  // namespace strata::nn

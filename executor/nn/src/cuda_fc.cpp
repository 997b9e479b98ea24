// The CUDA backend's fully-connected layers (cuda_internal.h): cuBLAS SGEMM.
#include <cublas_v2.h>
#include <fmt/format.h>

#include <string>

#include "cuda_internal.h"
#include "strata/kernels/kernels.h"
#include "strata/model/error.h"

namespace strata::nn {

using namespace cuda_detail;

// ---- fully connected -------------------------------------------------------------------------
//
// cuBLAS is column-major: a row-major r x c matrix is, to cuBLAS, its c x r
// transpose with leading dimension c. So each row-major product C = A B is
// computed as C^T = B^T A^T, operands swapped.
//
// flatten (D = inFeatures, O = outputs, n examples):
//   forward         Y (n x O) = X (n x D) W^T      as  Y^T = W X^T
//   backward data   dX (n x D) = dY (n x O) W      as  dX^T = W^T dY^T
//   backward weights dW (O x D) += dY^T X          as  dW^T += X^T dY
// per position (C = inFeatures, P = h*w positions; per example e):
//   forward         Y_e (O x P) = W X_e            as  Y_e^T = X_e^T W^T
//   backward data   dX_e (C x P) = W^T dY_e        as  dX_e^T = dY_e^T W
//   backward weights dW (O x C) += dY_e X_e^T      as  dW^T += X_e dY_e^T
// The first two run as one strided-batched GEMM over the examples (W's batch
// stride 0); the weight gradient sums over examples into one matrix, so it
// runs as one GEMM per example. With a single position (P = 1) the
// per-position layer is the flattened one and runs as such.

namespace {
std::string fcWhere(const FcDesc& d, const Dims& x) {
  return fmt::format("fc {} outputs x {} inputs{}, input {}", d.outputs, d.inFeatures,
                     d.flatten ? "" : " per position", dimsText(x));
}
}  // namespace

void CudaBackend::fcForward(const FcDesc& d, ConstTensorView x, const float* w, const float* bias,
                            TensorView y) {
  STRATA_ENFORCE_OP(x.dims.n, ==, y.dims.n);
  STRATA_ENFORCE_OP(y.dims.c, ==, d.outputs);
  if (d.flatten)
    STRATA_ENFORCE_OP(x.dims.perExample(), ==, d.inFeatures);
  else
    STRATA_ENFORCE_OP(x.dims.c, ==, d.inFeatures);
  const int n = x.dims.n;
  if (n == 0)
    return;
  const auto where = [&] { return fcWhere(d, x.dims); };
  const int p = x.dims.h * x.dims.w;
  const int o = d.outputs, k = d.inFeatures;
  if (d.flatten || p == 1) {
    if (runs(cublasCall(CUBLAS_OP_T, CUBLAS_OP_N, o, n, k))) {
      activate();
      check(cublasSgemm(impl_->cublas.get(), CUBLAS_OP_T, CUBLAS_OP_N, o, n, k, &kOne, w, k, x.data,
                        k, &kZero, y.data, o),
            "cublasSgemm", where);
    }
  } else if (runs(cublasCall(CUBLAS_OP_N, CUBLAS_OP_N, p, o, k, n))) {
    activate();
    check(cublasSgemmStridedBatched(impl_->cublas.get(), CUBLAS_OP_N, CUBLAS_OP_N, p, o, k, &kOne,
                                    x.data, p, int64_t{k} * p, w, k, 0, &kZero, y.data, p,
                                    int64_t{o} * p, n),
          "cublasSgemmStridedBatched", where);
  }
  if (bias && runs(MemKernel::kBias, double(y.elements()))) {
    launch("kernels::cuda::biasAdd", where, [&] {
      kernels::cuda::biasAdd(y.data, bias, n, o, d.flatten ? 1 : p, impl_->stream.get());
    });
  }
}

// cuBLAS does not read C when beta is 0, so a NaN in dx cannot leak.
void CudaBackend::fcBackwardData(const FcDesc& d, ConstTensorView dy, const float* w, TensorView dx,
                                 float beta) {
  STRATA_ENFORCE_OP(dx.dims.n, ==, dy.dims.n);
  STRATA_ENFORCE_OP(dy.dims.c, ==, d.outputs);
  if (d.flatten)
    STRATA_ENFORCE_OP(dx.dims.perExample(), ==, d.inFeatures);
  else
    STRATA_ENFORCE_OP(dx.dims.c, ==, d.inFeatures);
  const int n = dy.dims.n;
  if (n == 0)
    return;
  const auto where = [&] { return fcWhere(d, dx.dims); };
  const int p = dx.dims.h * dx.dims.w;
  const int o = d.outputs, k = d.inFeatures;
  if (d.flatten || p == 1) {
    if (runs(cublasCall(CUBLAS_OP_N, CUBLAS_OP_N, k, n, o))) {
      activate();
      check(cublasSgemm(impl_->cublas.get(), CUBLAS_OP_N, CUBLAS_OP_N, k, n, o, &kOne, w, k,
                        dy.data, o, &beta, dx.data, k),
            "cublasSgemm", where);
    }
  } else if (runs(cublasCall(CUBLAS_OP_N, CUBLAS_OP_T, p, k, o, n))) {
    activate();
    check(cublasSgemmStridedBatched(impl_->cublas.get(), CUBLAS_OP_N, CUBLAS_OP_T, p, k, o, &kOne,
                                    dy.data, p, int64_t{o} * p, w, k, 0, &beta, dx.data, p,
                                    int64_t{k} * p, n),
          "cublasSgemmStridedBatched", where);
  }
}

void CudaBackend::fcBackwardWeights(const FcDesc& d, ConstTensorView x, ConstTensorView dy,
                                    float* dw, float* dbias) {
  STRATA_ENFORCE_OP(x.dims.n, ==, dy.dims.n);
  STRATA_ENFORCE_OP(dy.dims.c, ==, d.outputs);
  if (d.flatten)
    STRATA_ENFORCE_OP(x.dims.perExample(), ==, d.inFeatures);
  else
    STRATA_ENFORCE_OP(x.dims.c, ==, d.inFeatures);
  const int n = x.dims.n;
  if (n == 0)
    return;
  const auto where = [&] { return fcWhere(d, x.dims); };
  const int p = x.dims.h * x.dims.w;
  const int o = d.outputs, k = d.inFeatures;
  if (d.flatten || p == 1) {
    if (runs(cublasCall(CUBLAS_OP_N, CUBLAS_OP_T, k, o, n))) {
      activate();
      check(cublasSgemm(impl_->cublas.get(), CUBLAS_OP_N, CUBLAS_OP_T, k, o, n, &kOne, x.data, k,
                        dy.data, o, &kOne, dw, k),
            "cublasSgemm", where);
    }
  } else {
    if (!recordOnly())
      activate();
    for (int e = 0; e < n; ++e)
      if (runs(cublasCall(CUBLAS_OP_T, CUBLAS_OP_N, k, o, p)))
        check(cublasSgemm(impl_->cublas.get(), CUBLAS_OP_T, CUBLAS_OP_N, k, o, p, &kOne,
                          x.data + e * x.dims.perExample(), p, dy.data + e * dy.dims.perExample(),
                          p, &kOne, dw, k),
              "cublasSgemm", where);
  }
  if (dbias && runs(MemKernel::kBiasGrad, double(dy.elements()))) {
    launch("kernels::cuda::biasGrad", where, [&] {
      kernels::cuda::biasGrad(dy.data, dbias, n, o, d.flatten ? 1 : p, impl_->stream.get());
    });
  }
}

}  // namespace strata::nn

// The CUDA backend's fully-connected layers (cuda_internal.h): cuBLAS SGEMM,
// or with element bf16 cublasGemmEx on bf16 copies of the operands (fp32
// result and accumulation).
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

// bf16 (CudaBackendOptions::element): both operands are cast to bf16 into
// the backend's scratch first (the weights too, on every call: the Model
// owns when they change), and the same GEMM runs as cublasGemmEx /
// cublasGemmStridedBatchedEx with CUDA_R_16BF A and B, CUDA_R_32F C and
// CUBLAS_COMPUTE_32F. C stays fp32 on purpose: the products (exact in fp32)
// are summed and written in fp32, beta blends in fp32, and a weight gradient
// accumulates over calls in fp32 (a bf16 C would round every partial sum to
// 8 bits and need a cast back for the other layers).

namespace {

std::string fcWhere(const FcDesc& d, const Dims& x) {
  return fmt::format("fc {} outputs x {} inputs{}, input {}", d.outputs, d.inFeatures,
                     d.flatten ? "" : " per position", dimsText(x));
}

// A GEMM operand: the fp32 array, and with bf16 its bf16 copy (null on a
// record-only backend, which runs nothing).
struct Operand {
  const float* f = nullptr;
  const uint16_t* h = nullptr;
  Operand at(int64_t offset) const { return {f + offset, h ? h + offset : nullptr}; }
};

// One GEMM of the backend's precision, or a strided batch of `batch`:
// C = A B (column-major, cuBLAS's transposes) with alpha 1 and *beta.
template <class Where>
void gemm(cublasHandle_t handle, bool half, cublasOperation_t ta, cublasOperation_t tb, int m,
          int n, int k, Operand a, int lda, int64_t strideA, Operand b, int ldb, int64_t strideB,
          const float* beta, float* c, int ldc, int64_t strideC, int batch, const Where& where) {
  if (!half) {
    if (batch == 1)
      check(cublasSgemm(handle, ta, tb, m, n, k, &kOne, a.f, lda, b.f, ldb, beta, c, ldc),
            "cublasSgemm", where);
    else
      check(cublasSgemmStridedBatched(handle, ta, tb, m, n, k, &kOne, a.f, lda, strideA, b.f, ldb,
                                      strideB, beta, c, ldc, strideC, batch),
            "cublasSgemmStridedBatched", where);
  } else if (batch == 1) {
    check(cublasGemmEx(handle, ta, tb, m, n, k, &kOne, a.h, CUDA_R_16BF, lda, b.h, CUDA_R_16BF, ldb,
                       beta, c, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
          "cublasGemmEx (bf16 operands, fp32 result)", where);
  } else {
    check(cublasGemmStridedBatchedEx(handle, ta, tb, m, n, k, &kOne, a.h, CUDA_R_16BF, lda, strideA,
                                     b.h, CUDA_R_16BF, ldb, strideB, beta, c, CUDA_R_32F, ldc,
                                     strideC, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
          "cublasGemmStridedBatchedEx (bf16 operands, fp32 result)", where);
  }
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
  const bool half = bf16();
  if (half && !recordOnly())
    activate();
  const Operand xs{x.data, half ? castOperand(0, x.data, x.elements(), where) : nullptr};
  const Operand ws{w, half ? castOperand(1, w, int64_t{o} * k, where) : nullptr};
  if (d.flatten || p == 1) {
    if (runs(cublasCall(CUBLAS_OP_T, CUBLAS_OP_N, o, n, k))) {
      activate();
      gemm(impl_->cublas.get(), half, CUBLAS_OP_T, CUBLAS_OP_N, o, n, k, ws, k, 0, xs, k, 0, &kZero,
           y.data, o, 0, 1, where);
    }
  } else if (runs(cublasCall(CUBLAS_OP_N, CUBLAS_OP_N, p, o, k, n))) {
    activate();
    gemm(impl_->cublas.get(), half, CUBLAS_OP_N, CUBLAS_OP_N, p, o, k, xs, p, int64_t{k} * p, ws, k,
         0, &kZero, y.data, p, int64_t{o} * p, n, where);
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
  const bool half = bf16();
  if (half && !recordOnly())
    activate();
  const Operand dys{dy.data, half ? castOperand(0, dy.data, dy.elements(), where) : nullptr};
  const Operand ws{w, half ? castOperand(1, w, int64_t{o} * k, where) : nullptr};
  if (d.flatten || p == 1) {
    if (runs(cublasCall(CUBLAS_OP_N, CUBLAS_OP_N, k, n, o))) {
      activate();
      gemm(impl_->cublas.get(), half, CUBLAS_OP_N, CUBLAS_OP_N, k, n, o, ws, k, 0, dys, o, 0, &beta,
           dx.data, k, 0, 1, where);
    }
  } else if (runs(cublasCall(CUBLAS_OP_N, CUBLAS_OP_T, p, k, o, n))) {
    activate();
    gemm(impl_->cublas.get(), half, CUBLAS_OP_N, CUBLAS_OP_T, p, k, o, dys, p, int64_t{o} * p, ws,
         k, 0, &beta, dx.data, p, int64_t{k} * p, n, where);
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
  const bool half = bf16();
  if (half && !recordOnly())
    activate();
  const Operand xs{x.data, half ? castOperand(0, x.data, x.elements(), where) : nullptr};
  const Operand dys{dy.data, half ? castOperand(1, dy.data, dy.elements(), where) : nullptr};
  if (d.flatten || p == 1) {
    if (runs(cublasCall(CUBLAS_OP_N, CUBLAS_OP_T, k, o, n))) {
      activate();
      gemm(impl_->cublas.get(), half, CUBLAS_OP_N, CUBLAS_OP_T, k, o, n, xs, k, 0, dys, o, 0, &kOne,
           dw, k, 0, 1, where);
    }
  } else {
    if (!recordOnly())
      activate();
    for (int e = 0; e < n; ++e)
      if (runs(cublasCall(CUBLAS_OP_T, CUBLAS_OP_N, k, o, p)))
        gemm(impl_->cublas.get(), half, CUBLAS_OP_T, CUBLAS_OP_N, k, o, p,
             xs.at(e * x.dims.perExample()), p, 0, dys.at(e * dy.dims.perExample()), p, 0, &kOne,
             dw, k, 0, 1, where);
  }
  if (dbias && runs(MemKernel::kBiasGrad, double(dy.elements()))) {
    launch("kernels::cuda::biasGrad", where, [&] {
      kernels::cuda::biasGrad(dy.data, dbias, n, o, d.flatten ? 1 : p, impl_->stream.get());
    });
  }
}

}  // namespace strata::nn

// The CUDA backend's other layers (cuda_internal.h): pooling, element-wise
// layers and buffer operations, LRN, batch normalisation, softmax with
// cross-entropy and the optimiser, on the project's kernels
// (strata::kernels::cuda).
#include <fmt/format.h>

#include <string>

#include "cuda_internal.h"
#include "shape_checks.h"
#include "strata/kernels/kernels.h"
#include "strata/model/error.h"

namespace strata::nn {

using namespace cuda_detail;

namespace {

// ---- shape checks (the rest are shape_checks.h) -------------------------------------

void checkPool(const PoolDesc& d, const Dims& in, const Dims& out) {
  STRATA_ENFORCE_OP(in.n, ==, out.n);
  STRATA_ENFORCE_OP(in.c, ==, d.c);
  STRATA_ENFORCE_OP(out.c, ==, d.c);
  STRATA_ENFORCE(in.h == d.inH && in.w == d.inW && out.h == d.outH && out.w == d.outW);
}

// ---- nn descriptors -> kernel parameters ---------------------------------------------

kernels::Shape4 shapeOf(const Dims& d) {
  return {d.n, d.c, d.h, d.w};
}

kernels::PoolParams poolParams(const PoolDesc& d) {
  kernels::PoolParams p;
  p.max = d.mode == PoolMode::kMax;
  p.c = d.c;
  p.inH = d.inH;
  p.inW = d.inW;
  p.kernelH = d.kernelH;
  p.kernelW = d.kernelW;
  p.stride = d.stride;
  p.pad = d.pad;
  p.outH = d.outH;
  p.outW = d.outW;
  return p;
}

kernels::LrnParams lrnParams(const LrnDesc& d) {
  return {d.size, d.k, d.alpha, d.beta};
}

kernels::DropoutParams dropoutParams(const DropoutDesc& d) {
  kernels::DropoutParams p;
  p.rate = d.rate;
  p.seed = d.seed;
  p.step = d.step;
  p.layer = d.layer;
  p.firstRow = d.firstRow;
  p.channelOffset = d.channelOffset;
  p.firstPosition = d.firstPosition;
  p.totalPositions = d.totalPositions;
  return p;
}

}  // namespace

// ---- pooling -------------------------------------------------------------------------------

void CudaBackend::poolForward(const PoolDesc& d, ConstTensorView x, TensorView y, int32_t* argmax) {
  checkPool(d, x.dims, y.dims);
  STRATA_ENFORCE(d.mode != PoolMode::kMax || argmax != nullptr);
  // Units: window reads, padding included (as the CPU kernel's).
  const double window = double(d.kernelH) * d.kernelW;
  if (!runs(d.mode == PoolMode::kMax ? MemKernel::kPoolMaxFwd : MemKernel::kPoolAvgFwd,
            double(y.elements()) * window, window))
    return;
  activate();
  launch(
      "kernels::cuda::poolForward", [&] { return "pool " + dimsText(x.dims); },
      [&] {
        kernels::cuda::poolForward(poolParams(d), x.dims.n, x.data, y.data, argmax,
                                   impl_->stream.get());
      });
}

void CudaBackend::poolBackward(const PoolDesc& d, ConstTensorView dy, const int32_t* argmax,
                               TensorView dx, float beta) {
  checkPool(d, dx.dims, dy.dims);
  STRATA_ENFORCE(d.mode != PoolMode::kMax || argmax != nullptr);
  // Applies beta itself: no zero fill. Units as the CPU kernel's.
  const double window = double(d.kernelH) * d.kernelW;
  if (!(d.mode == PoolMode::kMax
            ? runs(MemKernel::kPoolMaxBwd, double(dy.elements()))
            : runs(MemKernel::kPoolAvgBwd, double(dy.elements()) * window, window)))
    return;
  activate();
  launch(
      "kernels::cuda::poolBackward", [&] { return "pool " + dimsText(dx.dims); },
      [&] {
        kernels::cuda::poolBackward(poolParams(d), dy.dims.n, dy.data, argmax, dx.data, beta,
                                    impl_->stream.get());
      });
}

// ---- elementwise ------------------------------------------------------------------------------

void CudaBackend::reluForward(ConstTensorView x, TensorView y) {
  checkSameDims(x.dims, y.dims);
  if (!runs(MemKernel::kReluFwd, double(x.elements())))
    return;
  activate();
  launch(
      "kernels::cuda::reluForward", [&] { return "relu " + dimsText(x.dims); },
      [&] { kernels::cuda::reluForward(x.data, y.data, x.elements(), impl_->stream.get()); });
}

void CudaBackend::reluBackward(ConstTensorView y, ConstTensorView dy, TensorView dx, float beta) {
  checkSameDims(y.dims, dy.dims);
  checkSameDims(y.dims, dx.dims);
  if (!runs(MemKernel::kReluBwd, double(y.elements())))
    return;
  activate();
  launch(
      "kernels::cuda::reluBackward", [&] { return "relu " + dimsText(y.dims); },
      [&] {
        kernels::cuda::reluBackward(y.data, dy.data, dx.data, y.elements(), beta,
                                    impl_->stream.get());
      });
}

void CudaBackend::dropoutForward(const DropoutDesc& d, ConstTensorView x, TensorView y) {
  checkSameDims(x.dims, y.dims);
  if (!runs(MemKernel::kDropoutFwd, double(x.elements())))
    return;
  activate();
  launch(
      "kernels::cuda::dropoutForward", [&] { return "dropout " + dimsText(x.dims); },
      [&] {
        kernels::cuda::dropoutForward(dropoutParams(d), shapeOf(x.dims), x.data, y.data,
                                      impl_->stream.get());
      });
}

void CudaBackend::dropoutBackward(const DropoutDesc& d, ConstTensorView dy, TensorView dx,
                                  float beta) {
  checkSameDims(dy.dims, dx.dims);
  if (!runs(MemKernel::kDropoutBwd, double(dy.elements())))
    return;
  activate();
  launch(
      "kernels::cuda::dropoutBackward", [&] { return "dropout " + dimsText(dy.dims); },
      [&] {
        kernels::cuda::dropoutBackward(dropoutParams(d), shapeOf(dy.dims), dy.data, dx.data, beta,
                                       impl_->stream.get());
      });
}

void CudaBackend::fill(std::span<float> x, float value) {
  if (!runs(MemKernel::kZero, double(x.size())))
    return;
  activate();
  launch(
      "kernels::cuda::fill", [&] { return fmt::format("fill of {} values", x.size()); },
      [&] {
        kernels::cuda::fill(x.data(), static_cast<int64_t>(x.size()), value, impl_->stream.get());
      });
}

void CudaBackend::add(ConstTensorView a, ConstTensorView b, TensorView y) {
  checkSameDims(a.dims, b.dims);
  checkSameDims(a.dims, y.dims);
  if (!runs(MemKernel::kAdd, double(a.elements())))
    return;
  activate();
  launch(
      "kernels::cuda::add", [&] { return "add " + dimsText(a.dims); },
      [&] { kernels::cuda::add(a.data, b.data, y.data, a.elements(), impl_->stream.get()); });
}

void CudaBackend::accumulate(ConstTensorView src, TensorView dst, float beta) {
  checkSameDims(src.dims, dst.dims);
  if (!runs(beta == 0.0f ? MemKernel::kCopy : MemKernel::kAccumulate, double(src.elements())))
    return;
  activate();
  launch(
      "kernels::cuda::accumulate", [&] { return "accumulate " + dimsText(src.dims); },
      [&] {
        kernels::cuda::accumulate(src.data, dst.data, src.elements(), beta, impl_->stream.get());
      });
}

// ---- local response normalisation -------------------------------------------------------------

void CudaBackend::lrnForward(const LrnDesc& d, ConstTensorView x, TensorView y, TensorView scale) {
  checkSameDims(x.dims, y.dims);
  checkSameDims(x.dims, scale.dims);
  if (!runs(MemKernel::kLrnFwd, double(x.elements())))
    return;
  activate();
  launch(
      "kernels::cuda::lrnForward", [&] { return "lrn " + dimsText(x.dims); },
      [&] {
        kernels::cuda::lrnForward(lrnParams(d), shapeOf(x.dims), x.data, y.data, scale.data,
                                  impl_->stream.get());
      });
}

void CudaBackend::lrnBackward(const LrnDesc& d, ConstTensorView x, ConstTensorView y,
                              ConstTensorView scale, ConstTensorView dy, TensorView dx,
                              float beta) {
  checkSameDims(x.dims, y.dims);
  checkSameDims(x.dims, scale.dims);
  checkSameDims(x.dims, dy.dims);
  checkSameDims(x.dims, dx.dims);
  if (!runs(MemKernel::kLrnBwd, double(x.elements())))
    return;
  activate();
  launch(
      "kernels::cuda::lrnBackward", [&] { return "lrn " + dimsText(x.dims); },
      [&] {
        kernels::cuda::lrnBackward(lrnParams(d), shapeOf(x.dims), x.data, y.data, scale.data,
                                   dy.data, dx.data, beta, impl_->stream.get());
      });
}

// ---- batch normalisation ----------------------------------------------------------------------

void CudaBackend::batchNormForward(ConstTensorView x, const float* gamma, const float* shift,
                                   float eps, TensorView y) {
  checkSameDims(x.dims, y.dims);
  if (!runs(MemKernel::kBatchNormFwd, double(x.elements())))
    return;
  activate();
  launch(
      "kernels::cuda::batchNormForward", [&] { return "batchnorm " + dimsText(x.dims); },
      [&] {
        kernels::cuda::batchNormForward(shapeOf(x.dims), x.data, gamma, shift, eps, y.data,
                                        impl_->stream.get());
      });
}

void CudaBackend::batchNormBackwardData(ConstTensorView x, ConstTensorView dy, const float* gamma,
                                        float eps, TensorView dx, float beta) {
  checkSameDims(x.dims, dy.dims);
  checkSameDims(x.dims, dx.dims);
  if (!runs(MemKernel::kBatchNormBwdData, double(x.elements())))
    return;
  activate();
  launch(
      "kernels::cuda::batchNormBackwardData", [&] { return "batchnorm " + dimsText(x.dims); },
      [&] {
        kernels::cuda::batchNormBackwardData(shapeOf(x.dims), x.data, dy.data, gamma, eps, dx.data,
                                             beta, impl_->stream.get());
      });
}

void CudaBackend::batchNormBackwardWeights(ConstTensorView x, ConstTensorView dy, float eps,
                                           float* dgamma, float* dshift) {
  checkSameDims(x.dims, dy.dims);
  if (!runs(MemKernel::kBatchNormBwdWeights, double(x.elements())))
    return;
  activate();
  launch(
      "kernels::cuda::batchNormBackwardWeights", [&] { return "batchnorm " + dimsText(x.dims); },
      [&] {
        kernels::cuda::batchNormBackwardWeights(shapeOf(x.dims), x.data, dy.data, eps, dgamma,
                                                dshift, impl_->stream.get());
      });
}

// ---- softmax + cross-entropy --------------------------------------------------------------------

// softmax_fwd is the statistics and the probabilities together (as the CPU
// backend reports it): one call, reported here.
void CudaBackend::softmaxStats(ConstTensorView logits, float* stats) {
  if (!runs(MemKernel::kSoftmaxFwd, double(logits.elements())))
    return;
  activate();
  launch(
      "kernels::cuda::softmaxStats", [&] { return "softmax " + dimsText(logits.dims); },
      [&] {
        kernels::cuda::softmaxStats(shapeOf(logits.dims), logits.data, stats, impl_->stream.get());
      });
}

void CudaBackend::softmaxProbabilities(ConstTensorView logits, const float* stats, TensorView y) {
  checkSameDims(logits.dims, y.dims);
  if (recordOnly())
    return;  // the second half of softmax_fwd (softmaxStats reports it)
  activate();
  launch(
      "kernels::cuda::softmaxProbabilities", [&] { return "softmax " + dimsText(logits.dims); },
      [&] {
        kernels::cuda::softmaxProbabilities(shapeOf(logits.dims), logits.data, stats, y.data,
                                            impl_->stream.get());
      });
}

SoftmaxLossSum CudaBackend::softmaxLoss(ConstTensorView logits, const float* stats,
                                        const int32_t* labels, int classOffset) {
  if (recordOnly())
    return {};  // part of no layer phase (the loss of a step)
  activate();
  kernels::LossSum sum;
  launch(
      "kernels::cuda::softmaxLoss", [&] { return "softmax " + dimsText(logits.dims); },
      [&] {
        sum = kernels::cuda::softmaxLoss(shapeOf(logits.dims), logits.data, stats, labels,
                                         classOffset, impl_->stream.get());
      });
  return {sum.loss, sum.correct};
}

void CudaBackend::softmaxBackward(ConstTensorView logits, const float* stats, const int32_t* labels,
                                  int classOffset, float scale, TensorView dlogits, float beta) {
  checkSameDims(logits.dims, dlogits.dims);
  if (!runs(MemKernel::kSoftmaxBwd, double(logits.elements())))
    return;
  activate();
  launch(
      "kernels::cuda::softmaxBackward", [&] { return "softmax " + dimsText(logits.dims); },
      [&] {
        kernels::cuda::softmaxBackward(shapeOf(logits.dims), logits.data, stats, labels,
                                       classOffset, scale, dlogits.data, beta, impl_->stream.get());
      });
}

// ---- optimiser ----------------------------------------------------------------------------------

void CudaBackend::sgdMomentum(std::span<float> w, std::span<float> v, std::span<const float> g,
                              float learningRate, float momentum, float weightDecay) {
  STRATA_ENFORCE_OP(w.size(), ==, v.size());
  STRATA_ENFORCE_OP(w.size(), ==, g.size());
  if (!runs(MemKernel::kSgd, double(w.size())))
    return;
  activate();
  launch(
      "kernels::cuda::sgdMomentum", [&] { return fmt::format("sgd of {} weights", w.size()); },
      [&] {
        kernels::cuda::sgdMomentum(w.data(), v.data(), g.data(), static_cast<int64_t>(w.size()),
                                   learningRate, momentum, weightDecay, impl_->stream.get());
      });
}

void CudaBackend::adam(std::span<float> w, std::span<float> m, std::span<float> v,
                       std::span<const float> g, const AdamParams& p) {
  STRATA_ENFORCE_OP(w.size(), ==, m.size());
  STRATA_ENFORCE_OP(w.size(), ==, v.size());
  STRATA_ENFORCE_OP(w.size(), ==, g.size());
  STRATA_ENFORCE_OP(p.step, >=, 1);
  if (!runs(MemKernel::kAdam, double(w.size())))
    return;
  activate();
  launch(
      "kernels::cuda::adam",
      [&] {
        return fmt::format("{} step {} of {} weights", p.decoupled ? "adamw" : "adam", p.step,
                           w.size());
      },
      [&] {
        kernels::cuda::adam(
            w.data(), m.data(), v.data(), g.data(), static_cast<int64_t>(w.size()),
            {p.learningRate, p.beta1, p.beta2, p.eps, p.weightDecay, p.decoupled, p.step},
            impl_->stream.get());
      });
}

}  // namespace strata::nn

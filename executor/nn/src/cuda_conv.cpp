// The CUDA backend's convolutions (cuda_internal.h): cuDNN's legacy
// convolution API, a plan of descriptors per shape, the algorithm of each
// direction chosen once per shape, one workspace per backend.
//
// bf16 (CudaBackendOptions::element): the plan's tensors and filter are
// CUDNN_DATA_BFLOAT16 with CUDNN_DATA_FLOAT compute (cuDNN's
// PSEUDO_BFLOAT16_CONFIG: products summed in fp32; the legacy API takes one
// data type for x, w and y, so the result is bf16 too). Each call casts its
// two operands to bf16 into the backend's scratch (the weights on every call:
// the Model owns when they change), runs cuDNN into bf16 scratch with beta 0
// and casts that back into the fp32 tensor with the call's beta (dw: beta 1,
// so weight gradients accumulate in fp32). A backend has one element type, so
// its plans and their algorithm search are per shape and that precision.
#include <cudnn.h>
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <string>
#include <utility>

#include "cuda_internal.h"
#include "shape_checks.h"
#include "strata/kernels/kernels.h"
#include "strata/model/error.h"

namespace strata::nn {

using namespace cuda_detail;

namespace {

ConvKey convKey(const ConvDesc& d, int n) {
  return {d.inC, d.inH,    d.inW,  d.filters, d.kernelH,    d.kernelW,  d.stride,
          d.pad, d.groups, d.outH, d.outW,    d.widthPad(), d.dilation, n};
}

// Elements of the weights (without bias): filters x inC / groups x kernel.
int64_t weightCount(const ConvDesc& d) {
  return int64_t{d.filters} * (d.inC / d.groups) * d.kernelH * d.kernelW;
}

std::string convWhere(const ConvDesc& d, int n) {
  std::string pad = std::to_string(d.pad);
  if (d.widthPad() != d.pad)
    pad.append("x").append(std::to_string(d.widthPad()));
  return fmt::format("conv {}x{}x{}x{} stride {} pad {}{}{}, input {}x{}, batch {}", d.filters,
                     d.inC / d.groups, d.kernelH, d.kernelW, d.stride, pad,
                     d.dilation > 1 ? fmt::format(" dilation {}", d.dilation) : std::string(),
                     d.groups > 1 ? fmt::format(" groups {}", d.groups) : std::string(), d.inH,
                     d.inW, n);
}

const char* mathName(cudnnMathType_t m) {
  switch (m) {
    case CUDNN_DEFAULT_MATH:
      return "default";
    case CUDNN_TENSOR_OP_MATH:
      return "tensor-op";
    case CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION:
      return "tensor-op-allow-conversion";
    case CUDNN_FMA_MATH:
      return "fma";
  }
  return "?";
}

}  // namespace

ConvPlan& CudaBackend::Impl::plan(const ConvDesc& d, int n) {
  const ConvKey key = convKey(d, n);
  if (auto it = plans.find(key); it != plans.end())
    return it->second;
  ConvPlan p;
  p.where = convWhere(d, n);
  if (options.element == ElementType::kBf16)
    p.where += ", bf16";
  // bf16 data, fp32 compute (cudnnSetConvolution2dDescriptor's type below).
  const cudnnDataType_t data =
      options.element == ElementType::kBf16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
  check(cudnnCreateTensorDescriptor(p.x.out()), "cudnnCreateTensorDescriptor", p.where);
  check(cudnnSetTensor4dDescriptor(p.x.get(), CUDNN_TENSOR_NCHW, data, n, d.inC, d.inH, d.inW),
        "cudnnSetTensor4dDescriptor (input)", p.where);
  check(cudnnCreateTensorDescriptor(p.y.out()), "cudnnCreateTensorDescriptor", p.where);
  check(
      cudnnSetTensor4dDescriptor(p.y.get(), CUDNN_TENSOR_NCHW, data, n, d.filters, d.outH, d.outW),
      "cudnnSetTensor4dDescriptor (output)", p.where);
  check(cudnnCreateFilterDescriptor(p.w.out()), "cudnnCreateFilterDescriptor", p.where);
  check(cudnnSetFilter4dDescriptor(p.w.get(), data, CUDNN_TENSOR_NCHW, d.filters, d.inC / d.groups,
                                   d.kernelH, d.kernelW),
        "cudnnSetFilter4dDescriptor", p.where);
  check(cudnnCreateConvolutionDescriptor(p.conv.out()), "cudnnCreateConvolutionDescriptor",
        p.where);
  // Cross-correlation (no kernel flip), as CpuBackend and every framework.
  check(cudnnSetConvolution2dDescriptor(p.conv.get(), d.pad, d.widthPad(), d.stride, d.stride,
                                        d.dilation, d.dilation, CUDNN_CROSS_CORRELATION,
                                        CUDNN_DATA_FLOAT),
        "cudnnSetConvolution2dDescriptor", p.where);
  check(cudnnSetConvolutionGroupCount(p.conv.get(), d.groups), "cudnnSetConvolutionGroupCount",
        p.where);
  // cuDNN's output shape must be the one ConvDesc says (the same formula).
  std::array<int, 4> out{};
  check(cudnnGetConvolution2dForwardOutputDim(p.conv.get(), p.x.get(), p.w.get(), &out[0], &out[1],
                                              &out[2], &out[3]),
        "cudnnGetConvolution2dForwardOutputDim", p.where);
  STRATA_ENFORCE_OP(out[1], ==, d.filters);
  STRATA_ENFORCE_OP(out[2], ==, d.outH);
  STRATA_ENFORCE_OP(out[3], ==, d.outW);
  return plans.emplace(key, std::move(p)).first->second;
}

namespace {

// Picks one direction's algorithm: asks cuDNN for its candidates (timed or
// heuristic, best first) and keeps the first that succeeded, has the math
// allowed (fp32: FMA only, as the search also tries the default math, which
// may use TF32 on Ampere and later; tf32 and bf16: any, tensor cores
// included), still reports a workspace size for its math and fits the
// workspace limit.
//   search(count, &returned, perf) runs cudnnFind* or cudnnGet*_v7;
//   workspaceOf(algo, &bytes) runs cudnnGet*WorkspaceSize.
template <class Perf, class Search, class WorkspaceOf>
ConvChoice chooseAlgorithm(const char* searchCall, cudnnConvolutionDescriptor_t conv,
                           const CudaBackendOptions& options, const std::string& where,
                           Search&& search, WorkspaceOf&& workspaceOf) {
  constexpr int kMaxCandidates = 16;  // more than any direction has (8, 6, 7)
  std::array<Perf, kMaxCandidates> perf{};
  int returned = 0;
  // The search runs with FMA math (plain FP32) for fp32; the default math
  // lets cuDNN use TF32 tensor cores, tensor-op math bf16 ones; an earlier
  // direction's choice may have left another math type on the descriptor.
  const bool fmaOnly = options.element == ElementType::kFp32;
  check(cudnnSetConvolutionMathType(conv, fmaOnly ? CUDNN_FMA_MATH
                                          : options.element == ElementType::kBf16
                                              ? CUDNN_TENSOR_OP_MATH
                                              : CUDNN_DEFAULT_MATH),
        "cudnnSetConvolutionMathType", where);
  check(search(kMaxCandidates, &returned, perf.data()), searchCall, where);
  // The search may try algorithms that fail inside (e.g. out of memory for a
  // large workspace) and leave that CUDA error behind, non-sticky, for the
  // next launch check to blame on its own kernel; those failures are in the
  // candidates' statuses.
  static_cast<void>(cudaGetLastError());
  std::string rejected;
  for (int i = 0; i < returned; ++i) {
    const Perf& p = perf[static_cast<size_t>(i)];
    const auto note = [&](const std::string& why) {
      rejected += fmt::format("{}algorithm {} ({} math): {}", rejected.empty() ? "" : "; ",
                              static_cast<int>(p.algo), mathName(p.mathType), why);
    };
    if (p.status != CUDNN_STATUS_SUCCESS) {
      note(cudnnGetErrorString(p.status));
      continue;
    }
    if (fmaOnly && p.mathType != CUDNN_FMA_MATH) {
      note("not FMA math (fp32: TF32 is off)");
      continue;
    }
    check(cudnnSetConvolutionMathType(conv, p.mathType), "cudnnSetConvolutionMathType", where);
    size_t bytes = 0;
    if (const cudnnStatus_t s = workspaceOf(p.algo, &bytes); s != CUDNN_STATUS_SUCCESS) {
      note(fmt::format("workspace size: {}", cudnnGetErrorString(s)));
      continue;
    }
    bytes = std::max(bytes, p.memory);
    if (bytes > options.maxWorkspaceBytes) {
      note(fmt::format("needs {} bytes of workspace (limit {})", bytes, options.maxWorkspaceBytes));
      continue;
    }
    return {static_cast<int>(p.algo), p.mathType, bytes};
  }
  throw RunFailure(fmt::format("{} ({}): no usable algorithm among {} candidates{}{}", searchCall,
                               where, returned, rejected.empty() ? "" : ": ", rejected));
}

}  // namespace

const ConvChoice& CudaBackend::Impl::forward(ConvPlan& p) {
  if (!p.forward) {
    const auto workspaceOf = [&](cudnnConvolutionFwdAlgo_t a, size_t* bytes) {
      return cudnnGetConvolutionForwardWorkspaceSize(cudnn.get(), p.x.get(), p.w.get(),
                                                     p.conv.get(), p.y.get(), a, bytes);
    };
    if (options.benchmarkConvolutions)
      p.forward = chooseAlgorithm<cudnnConvolutionFwdAlgoPerf_t>(
          "cudnnFindConvolutionForwardAlgorithm", p.conv.get(), options, p.where,
          [&](int count, int* returned, cudnnConvolutionFwdAlgoPerf_t* perf) {
            return cudnnFindConvolutionForwardAlgorithm(
                cudnn.get(), p.x.get(), p.w.get(), p.conv.get(), p.y.get(), count, returned, perf);
          },
          workspaceOf);
    else
      p.forward = chooseAlgorithm<cudnnConvolutionFwdAlgoPerf_t>(
          "cudnnGetConvolutionForwardAlgorithm_v7", p.conv.get(), options, p.where,
          [&](int count, int* returned, cudnnConvolutionFwdAlgoPerf_t* perf) {
            return cudnnGetConvolutionForwardAlgorithm_v7(
                cudnn.get(), p.x.get(), p.w.get(), p.conv.get(), p.y.get(), count, returned, perf);
          },
          workspaceOf);
    growWorkspace(p.forward->workspace);
  }
  return *p.forward;
}

const ConvChoice& CudaBackend::Impl::backwardData(ConvPlan& p) {
  if (!p.backwardData) {
    const auto workspaceOf = [&](cudnnConvolutionBwdDataAlgo_t a, size_t* bytes) {
      return cudnnGetConvolutionBackwardDataWorkspaceSize(cudnn.get(), p.w.get(), p.y.get(),
                                                          p.conv.get(), p.x.get(), a, bytes);
    };
    if (options.benchmarkConvolutions)
      p.backwardData = chooseAlgorithm<cudnnConvolutionBwdDataAlgoPerf_t>(
          "cudnnFindConvolutionBackwardDataAlgorithm", p.conv.get(), options, p.where,
          [&](int count, int* returned, cudnnConvolutionBwdDataAlgoPerf_t* perf) {
            return cudnnFindConvolutionBackwardDataAlgorithm(
                cudnn.get(), p.w.get(), p.y.get(), p.conv.get(), p.x.get(), count, returned, perf);
          },
          workspaceOf);
    else
      p.backwardData = chooseAlgorithm<cudnnConvolutionBwdDataAlgoPerf_t>(
          "cudnnGetConvolutionBackwardDataAlgorithm_v7", p.conv.get(), options, p.where,
          [&](int count, int* returned, cudnnConvolutionBwdDataAlgoPerf_t* perf) {
            return cudnnGetConvolutionBackwardDataAlgorithm_v7(
                cudnn.get(), p.w.get(), p.y.get(), p.conv.get(), p.x.get(), count, returned, perf);
          },
          workspaceOf);
    growWorkspace(p.backwardData->workspace);
  }
  return *p.backwardData;
}

const ConvChoice& CudaBackend::Impl::backwardFilter(ConvPlan& p) {
  if (!p.backwardFilter) {
    const auto workspaceOf = [&](cudnnConvolutionBwdFilterAlgo_t a, size_t* bytes) {
      return cudnnGetConvolutionBackwardFilterWorkspaceSize(cudnn.get(), p.x.get(), p.y.get(),
                                                            p.conv.get(), p.w.get(), a, bytes);
    };
    if (options.benchmarkConvolutions)
      p.backwardFilter = chooseAlgorithm<cudnnConvolutionBwdFilterAlgoPerf_t>(
          "cudnnFindConvolutionBackwardFilterAlgorithm", p.conv.get(), options, p.where,
          [&](int count, int* returned, cudnnConvolutionBwdFilterAlgoPerf_t* perf) {
            return cudnnFindConvolutionBackwardFilterAlgorithm(
                cudnn.get(), p.x.get(), p.y.get(), p.conv.get(), p.w.get(), count, returned, perf);
          },
          workspaceOf);
    else
      p.backwardFilter = chooseAlgorithm<cudnnConvolutionBwdFilterAlgoPerf_t>(
          "cudnnGetConvolutionBackwardFilterAlgorithm_v7", p.conv.get(), options, p.where,
          [&](int count, int* returned, cudnnConvolutionBwdFilterAlgoPerf_t* perf) {
            return cudnnGetConvolutionBackwardFilterAlgorithm_v7(
                cudnn.get(), p.x.get(), p.y.get(), p.conv.get(), p.w.get(), count, returned, perf);
          },
          workspaceOf);
    growWorkspace(p.backwardFilter->workspace);
  }
  return *p.backwardFilter;
}

void* CudaBackend::Impl::prepare(ConvPlan& p, const ConvChoice& c) {
  check(cudnnSetConvolutionMathType(p.conv.get(), c.math), "cudnnSetConvolutionMathType", p.where);
  return c.workspace > 0 ? workspace.get() : nullptr;
}

void CudaBackend::Impl::growWorkspace(size_t bytes) {
  if (bytes <= workspaceBytes)
    return;
  // Kernels already enqueued may still use the old buffer.
  check(cudaStreamSynchronize(stream.get()), "cudaStreamSynchronize");
  workspace.reset();
  workspaceBytes = 0;
  check(cudaMalloc(workspace.out(), bytes), "cudaMalloc",
        [&] { return fmt::format("cuDNN workspace of {} bytes", bytes); });
  workspaceBytes = bytes;
}

// ---- convolution ----------------------------------------------------------------------------

void CudaBackend::convForward(const ConvDesc& d, ConstTensorView x, const float* w,
                              const float* bias, TensorView y) {
  checkConv(d, x.dims, y.dims);
  if (x.dims.n == 0)
    return;
  const bool half = bf16();
  const auto where = [&] { return convWhere(d, x.dims.n) + ", bf16"; };
  if (half && !recordOnly())
    activate();
  const void* xs =
      half ? static_cast<const void*>(castOperand(0, x.data, x.elements(), where)) : x.data;
  const void* wsrc = half ? static_cast<const void*>(castOperand(1, w, weightCount(d), where)) : w;
  void* out = half ? static_cast<void*>(bf16Scratch(2, y.elements())) : y.data;
  if (runs(cudnnCall(ConvPass::kFwd, d, x.dims.n))) {
    activate();
    Impl& m = *impl_;
    ConvPlan& p = m.plan(d, x.dims.n);
    const ConvChoice& c = m.forward(p);
    void* ws = m.prepare(p, c);
    check(cudnnConvolutionForward(m.cudnn.get(), &kOne, p.x.get(), xs, p.w.get(), wsrc,
                                  p.conv.get(), static_cast<cudnnConvolutionFwdAlgo_t>(c.algorithm),
                                  ws, c.workspace, &kZero, p.y.get(), out),
          "cudnnConvolutionForward", p.where);
  }
  if (half)
    castResult(static_cast<const uint16_t*>(out), y.data, y.elements(), 0.0f, where);
  if (bias && runs(MemKernel::kBias, double(y.elements()))) {
    launch(
        "kernels::cuda::biasAdd", [&] { return convWhere(d, x.dims.n); },
        [&] {
          kernels::cuda::biasAdd(y.data, bias, y.dims.n, d.filters, int64_t{d.outH} * d.outW,
                                 impl_->stream.get());
        });
  }
}

// cuDNN blends dx = 1 * result + beta * dx and does not read dx when beta
// is 0 (it may hold NaN from an earlier batch), as the Backend requires.
void CudaBackend::convBackwardData(const ConvDesc& d, ConstTensorView dy, const float* w,
                                   TensorView dx, float beta) {
  checkConv(d, dx.dims, dy.dims);
  if (dy.dims.n == 0)
    return;
  const bool half = bf16();
  const auto where = [&] { return convWhere(d, dy.dims.n) + ", bf16"; };
  if (half && !recordOnly())
    activate();
  const void* dys =
      half ? static_cast<const void*>(castOperand(0, dy.data, dy.elements(), where)) : dy.data;
  const void* wsrc = half ? static_cast<const void*>(castOperand(1, w, weightCount(d), where)) : w;
  void* out = half ? static_cast<void*>(bf16Scratch(2, dx.elements())) : dx.data;
  // bf16: cuDNN overwrites the bf16 scratch; beta applies in fp32 below.
  const float* blend = half ? &kZero : &beta;
  if (runs(cudnnCall(ConvPass::kBwdData, d, dy.dims.n))) {
    activate();
    Impl& m = *impl_;
    ConvPlan& p = m.plan(d, dy.dims.n);
    const ConvChoice& c = m.backwardData(p);
    void* ws = m.prepare(p, c);
    check(cudnnConvolutionBackwardData(m.cudnn.get(), &kOne, p.w.get(), wsrc, p.y.get(), dys,
                                       p.conv.get(),
                                       static_cast<cudnnConvolutionBwdDataAlgo_t>(c.algorithm), ws,
                                       c.workspace, blend, p.x.get(), out),
          "cudnnConvolutionBackwardData", p.where);
  }
  if (half)
    castResult(static_cast<const uint16_t*>(out), dx.data, dx.elements(), beta, where);
}

// dw += (cuDNN's beta 1); dbias += by the project's kernel.
void CudaBackend::convBackwardWeights(const ConvDesc& d, ConstTensorView x, ConstTensorView dy,
                                      float* dw, float* dbias) {
  checkConv(d, x.dims, dy.dims);
  if (x.dims.n == 0)
    return;
  const bool half = bf16();
  const auto where = [&] { return convWhere(d, x.dims.n) + ", bf16"; };
  if (half && !recordOnly())
    activate();
  const void* xs =
      half ? static_cast<const void*>(castOperand(0, x.data, x.elements(), where)) : x.data;
  const void* dys =
      half ? static_cast<const void*>(castOperand(1, dy.data, dy.elements(), where)) : dy.data;
  void* out = half ? static_cast<void*>(bf16Scratch(2, weightCount(d))) : dw;
  // bf16: cuDNN overwrites the bf16 scratch, which is added to dw in fp32.
  if (runs(cudnnCall(ConvPass::kBwdFilter, d, x.dims.n))) {
    activate();
    Impl& m = *impl_;
    ConvPlan& p = m.plan(d, x.dims.n);
    const ConvChoice& c = m.backwardFilter(p);
    void* ws = m.prepare(p, c);
    check(cudnnConvolutionBackwardFilter(m.cudnn.get(), &kOne, p.x.get(), xs, p.y.get(), dys,
                                         p.conv.get(),
                                         static_cast<cudnnConvolutionBwdFilterAlgo_t>(c.algorithm),
                                         ws, c.workspace, half ? &kZero : &kOne, p.w.get(), out),
          "cudnnConvolutionBackwardFilter", p.where);
  }
  if (half)
    castResult(static_cast<const uint16_t*>(out), dw, weightCount(d), 1.0f, where);
  if (dbias && runs(MemKernel::kBiasGrad, double(dy.elements()))) {
    launch(
        "kernels::cuda::biasGrad", [&] { return convWhere(d, x.dims.n); },
        [&] {
          kernels::cuda::biasGrad(dy.data, dbias, dy.dims.n, d.filters, int64_t{d.outH} * d.outW,
                                  impl_->stream.get());
        });
  }
}

}  // namespace strata::nn

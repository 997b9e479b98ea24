#pragma once

// Kernel lowering: the calls each backend makes for one layer phase, in the
// vocabulary of kernels.h, which the cost model prices from kernel tables.

#include <string_view>
#include <vector>

#include "strata/model/cluster.h"
#include "strata/model/kernels.h"
#include "strata/model/network.h"

namespace strata {

// The CPU backend's kernel calls for `phase` of layer `index` of `network` on
// `examples` examples (rounded to whole examples, at least 1), holding
// `outputs` output channels of a model-parallel fc (0: the whole layer).
// Includes the Model's own work around the kernels (zeroing a gradient that
// several readers sum into). Update: one call of `update` (kSgd, the
// SGD-with-momentum kernel, or kAdam) over the layer's parameters (scaled by
// fraction). Empty for phases that do nothing (bwd_weights of a layer
// without weights). `threads`: the worker's threads (--threads-per-worker);
// a GEMM split over them is one call, but a conv's bwd_weights over at least
// that many examples adds a zero fill and a reduce of each thread's partial
// gradient. tests/executor/nn/lowering_test.cpp holds this list against the
// calls the CPU backend makes.
std::vector<KernelCall> lowerCpu(const Network& network, int index, Phase phase, double examples,
                                 int outputs, MemKernel update = MemKernel::kSgd, int threads = 1);

// The same for the CUDA backend (executor/nn/src/cuda_backend.cpp): a
// convolution is one cuDNN call per pass (groups included, count = groups of
// per-group implicit GEMMs) with the bias kernels beside it; fc layers are
// cuBLAS GEMMs as on the CPU (per-position fc a batch of n GEMMs); every other
// layer one kernel of kernels/, which applies beta itself (no zero fills).
// element bf16 (CudaBackendOptions::element): each conv and fc phase also
// casts its two operands to bf16 (cast_bf16: x or dy, and w or dy, one call
// each per phase) and a convolution its bf16 result back (cast_fp32: y, dx or
// dw); the GEMM and convolution shapes are the same. fp32 and tf32 lower
// alike.
std::vector<KernelCall> lowerCuda(const Network& network, int index, Phase phase, double examples,
                                  int outputs, MemKernel update = MemKernel::kSgd,
                                  ElementType element = ElementType::kFp32);

// lowerCpu or lowerCuda by `backend` ("cpu", "cuda"); threads: lowerCpu's.
std::vector<KernelCall> lower(std::string_view backend, const Network& network, int index,
                              Phase phase, double examples, int outputs,
                              MemKernel update = MemKernel::kSgd, int threads = 1);

}  // namespace strata

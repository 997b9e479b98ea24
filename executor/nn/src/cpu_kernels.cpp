// The CPU kernels, compiled once per instruction set (cpu_isa.h): GEMMs of
// conv (after im2col) and fc go through Eigen's blocked products; the rest
// are loops written so the innermost one runs over contiguous memory. CMake
// builds every file below as cpu_<isa> with STRATA_CPU_ISA naming the
// namespace and `Eigen` renamed per ISA, and links one ISA's files into one
// object, so no template instance of one ISA can stand in for another's
// (cpu_isa.h). The files, by concern:
//   cpu_kernels.cpp           this ISA's table; CpuImpl's scratch, threads per kernel
//   cpu_kernels.h             helpers the files share (ordered sums, ranges)
//   cpu_gemm_conv.cpp         GEMM, convolution, fully connected, bias
//   cpu_pool_lrn_softmax.cpp  pooling, LRN, softmax + cross-entropy
//   cpu_elementwise.cpp       relu, dropout, gelu, swiglu, fill/add/accumulate/zero
//   cpu_norm.cpp              batch, layer and RMS normalisation
//   cpu_transformer.cpp       attention (grouped keys and values, rotary positions), embedding
//   cpu_optimizer.cpp         SGD with momentum, Adam
#include "cpu_kernels.h"

#include <algorithm>
#include <memory>

namespace strata::nn::STRATA_CPU_ISA {

int CpuImpl::examplesParts(int examples, int64_t perExample) const {
  const int64_t most = int64_t{examples} * perExample / kElementGrain;
  return static_cast<int>(std::clamp<int64_t>(std::min<int64_t>(most, examples), 1, team_.size()));
}

void CpuImpl::scaleForBeta(TensorView dst, float beta) {
  if (beta == 0.0f ? runs(MemKernel::kZero, double(dst.elements())) : !recordOnly())
    scaleForAccumulate(dst.data, dst.elements(), beta);
}

void CpuImpl::reserveScratch(int parts, int64_t elements) {
  if (recordOnly())
    elements = 0;
  if (scratch_.size() < size_t(parts))
    scratch_.resize(size_t(parts));
  for (int t = 0; t < parts; ++t)
    if (scratch_[size_t(t)].size() < size_t(elements))
      scratch_[size_t(t)].resize(size_t(elements));
}

const CpuIsaTable& table() {
  static const CpuIsaTable kTable{
      [](ThreadTeam& team) -> std::unique_ptr<Backend> { return std::make_unique<CpuImpl>(team); },
      &CpuImpl::gemm,
      &CpuImpl::im2colKernel,
      &CpuImpl::col2imKernel,
      &CpuImpl::biasAdd,
      &CpuImpl::biasGrad,
      &CpuImpl::zero,
      &CpuImpl::attnSoftmaxForward,
      &CpuImpl::attnSoftmaxBackward,
      &CpuImpl::adamKernel,
      &CpuImpl::rotaryTable,
      &CpuImpl::rotaryKernel,
  };
  return kTable;
}

}  // namespace strata::nn::STRATA_CPU_ISA

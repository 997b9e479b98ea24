// Recording the kernel calls a Backend really makes, in the vocabulary of the
// cost model's lowering (strata/model/kernels.h: KernelCall), so that tests
// hold lowerCpu and lowerCuda against what the backends run.
//
// The backends report each call where they make it (Backend::runs, one line
// beside the call): the CPU kernels (src/cpu_*.cpp) every GEMM as its
// caller asks for it (before a split over the worker's threads: one logical
// call), every im2col, bias, zero fill and elementwise pass; the CUDA backend
// every cuBLAS and cuDNN call and every launch of a kernels/ kernel. Without
// a recorder (the default) that is one null-pointer test per call and
// nothing else: results are bit for bit those of a run without this file.
//
// Record only: the backend reports the calls it would make and does none of
// their work: it reads and writes no buffer, allocates no scratch, and the
// CUDA backend needs no device (CudaBackend's record-only constructor). Which
// calls a phase makes depends on shapes, betas and the thread count, never on
// values, so the list is the one a computing run gives (the tests check that
// on the small presets). With ReservedMemory for the Model's buffers and
// ModelOptions::initializeParameters off, a record-only Model of a
// 1.3-billion-parameter network costs address space only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "strata/exec/nn/memory.h"
#include "strata/model/kernels.h"

namespace strata::nn {

class KernelRecorder {
 public:
  explicit KernelRecorder(bool recordOnly = false) : recordOnly_(recordOnly) {}
  KernelRecorder(const KernelRecorder&) = delete;
  KernelRecorder& operator=(const KernelRecorder&) = delete;

  // Whether backends skip the work of the calls they report.
  bool recordOnly() const { return recordOnly_; }
  // Adds one call. Thread-safe: a CPU backend's team threads report the
  // GEMMs of their examples concurrently.
  void record(const KernelCall& call);
  // The calls since the last clear(), merged (mergeCalls).
  std::vector<KernelCall> calls() const;
  void clear();

 private:
  bool recordOnly_;
  mutable std::mutex mutex_;
  std::vector<KernelCall> calls_;
};

// One call of each kind, as KernelCall describes it.
KernelCall gemmCall(GemmOp op, int64_t m, int64_t n, int64_t k, double count = 1,
                    bool accumulate = false);
// A cuDNN convolution pass over `groups` groups of implicit GEMM (m, n, k).
KernelCall convCall(ConvPass pass, int64_t m, int64_t n, int64_t k, int groups);
KernelCall memoryCall(MemKernel kernel, double units, double window = 0);
// An im2col or col2im over output rows `rowWidth` long at `stride`.
KernelCall columnsCall(MemKernel kernel, double units, int rowWidth, int stride);

// A multiset of calls in canonical form: calls equal in kind and shape (GEMM
// op, m, n, k and accumulate; conv pass and m, n, k; memory kernel, units, window, row
// width and stride)
// become one entry whose count is the sum of theirs; memory calls over no
// units and calls counted 0 (free, and never priced) go; entries sorted. Two
// lists the cost model prices alike (it sums calls, so their order is
// irrelevant) have equal canonical forms.
std::vector<KernelCall> mergeCalls(std::vector<KernelCall> calls);

// "gemm nt 8x4096x9216 x2", "conv fwd 3136x64x576 x1", "relu_fwd 802816 x3",
// "pool_max_fwd 1000 window 9 x1": for test messages.
std::string describe(const KernelCall& call);
std::string describe(const std::vector<KernelCall>& calls);

// Host memory whose pages exist only once touched (an anonymous mapping with
// MAP_NORESERVE; zero-filled, as Memory requires): for the buffers of a
// record-only Model, which nothing reads or writes, so that networks of any
// size cost address space only.
class ReservedMemory final : public HostAddressedMemory {
 public:
  void* allocate(size_t bytes) override;
  void deallocate(void* p, size_t bytes) noexcept override;
  const char* name() const override { return "reserved"; }
};

}  // namespace strata::nn

// Memory that behaves like a GPU's for host code: plain host memory (the CPU
// backend's kernels use its pointers, as a GPU's kernels would use device
// pointers) that says the host may not address it, with copies that count
// themselves. A run on a CpuBackend over it fails wherever host code touches
// a buffer through a host-span accessor (Model::allParameters, Tensor::at,
// Buffer::hostSpan, ...) instead of the Memory's copies (memory.h).
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>

#include "strata/exec/nn/cpu_backend.h"
#include "strata/exec/nn/memory.h"

namespace strata::test {

class DeviceLikeMemory final : public nn::Memory {
 public:
  void* allocate(size_t bytes) override { return nn::hostMemory().allocate(bytes); }
  void deallocate(void* p, size_t bytes) noexcept override {
    nn::hostMemory().deallocate(p, bytes);
  }
  const char* name() const override { return "device-like"; }
  bool hostAccessible() const override { return false; }
  void upload(void* dst, const void* src, size_t bytes) override {
    uploads.fetch_add(1, std::memory_order_relaxed);
    if (bytes > 0)
      std::memcpy(dst, src, bytes);
  }
  void download(void* dst, const void* src, size_t bytes) override {
    downloads.fetch_add(1, std::memory_order_relaxed);
    if (bytes > 0)
      std::memcpy(dst, src, bytes);
  }
  void copy(void* dst, const void* src, size_t bytes) override {
    if (bytes > 0)
      std::memcpy(dst, src, bytes);
  }
  void zero(void* dst, size_t bytes) override {
    if (bytes > 0)
      std::memset(dst, 0, bytes);
  }

  std::atomic<uint64_t> uploads{0}, downloads{0};
};

// A one-thread CpuBackend whose buffers are in `memory`.
inline std::unique_ptr<nn::Backend> deviceLikeBackend(DeviceLikeMemory& memory) {
  nn::CpuOptions o;
  o.memory = &memory;
  return std::make_unique<nn::CpuBackend>(o);
}

}  // namespace strata::test

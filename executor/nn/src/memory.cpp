#include "strata/exec/nn/memory.h"

#include <fmt/format.h>

#include <atomic>
#include <cstring>
#include <new>

#include "strata/model/error.h"

namespace strata::nn {

namespace {

// 64 bytes: a cache line, and the widest vector load Eigen may use.
constexpr std::align_val_t kHostAlignment{64};

class HostMemory final : public HostAddressedMemory {
 public:
  void* allocate(size_t bytes) override {
    allocations_.fetch_add(1, std::memory_order_relaxed);
    void* p = ::operator new(bytes == 0 ? 1 : bytes, kHostAlignment);
    std::memset(p, 0, bytes);
    return p;
  }
  void deallocate(void* p, size_t) noexcept override { ::operator delete(p, kHostAlignment); }
  const char* name() const override { return "host"; }
  uint64_t allocations() const { return allocations_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> allocations_{0};
};

HostMemory& theHostMemory() {
  static HostMemory memory;
  return memory;
}

}  // namespace

void HostAddressedMemory::upload(void* dst, const void* src, size_t bytes) {
  if (bytes > 0)
    std::memcpy(dst, src, bytes);
}

void HostAddressedMemory::download(void* dst, const void* src, size_t bytes) {
  if (bytes > 0)
    std::memcpy(dst, src, bytes);
}

void HostAddressedMemory::copy(void* dst, const void* src, size_t bytes) {
  if (bytes > 0)
    std::memcpy(dst, src, bytes);
}

void HostAddressedMemory::zero(void* dst, size_t bytes) {
  if (bytes > 0)
    std::memset(dst, 0, bytes);
}

void requireHostAccess(const Memory& memory, const char* what) {
  if (!memory.hostAccessible())
    throw InvariantError(fmt::format(
        "{}: the buffer is in {} memory, which the host cannot address; copy it with the "
        "Memory's download/upload (memory.h)",
        what, memory.name()));
}

Memory& hostMemory() {
  return theHostMemory();
}

uint64_t hostAllocations() {
  return theHostMemory().allocations();
}

}  // namespace strata::nn

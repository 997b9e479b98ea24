#include "strata/exec/nn/memory.h"

#include <cstring>
#include <new>

namespace strata::nn {

namespace {

// 64 bytes: a cache line, and the widest vector load Eigen may use.
constexpr std::align_val_t kHostAlignment{64};

class HostMemory final : public Memory {
 public:
  void* allocate(size_t bytes) override {
    void* p = ::operator new(bytes == 0 ? 1 : bytes, kHostAlignment);
    std::memset(p, 0, bytes);
    return p;
  }
  void deallocate(void* p, size_t) noexcept override { ::operator delete(p, kHostAlignment); }
  const char* name() const override { return "host"; }
};

}  // namespace

Memory& hostMemory() {
  static HostMemory memory;
  return memory;
}

}  // namespace strata::nn

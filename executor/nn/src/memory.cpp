#include "strata/exec/nn/memory.h"

#include <fmt/format.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <new>

#include "strata/model/error.h"

namespace strata::nn {

namespace {

// 64 bytes: a cache line, and the widest vector load Eigen may use.
constexpr std::align_val_t kHostAlignment{64};

// Buffers of at least one huge page are mapped on their own, aligned to a 2
// MiB boundary and marked for transparent huge pages (MADV_HUGEPAGE: Debian's
// default THP mode, "madvise", backs only such ranges). With 4 KiB pages a
// kernel streaming a few MiB that the step touched long ago misses the TLB on
// every page: a relu over 2 MiB ran 10-14 % slower right after touching
// other pages than repeated, and a 16 MiB one from DRAM 17 % slower, than on
// huge pages (docs/executor.md, "Huge pages").
constexpr size_t kHugePage = size_t{2} << 20;

void* mapHuge(size_t bytes) {
  // Over-map by a huge page, then unmap the unaligned head and the tail.
  const size_t span = bytes + kHugePage;
  void* raw = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED)
    throw std::bad_alloc();
  const auto start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (start + kHugePage - 1) & ~(uintptr_t{kHugePage} - 1);
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t mapped = (bytes + page - 1) / page * page;
  if (aligned > start)
    munmap(raw, aligned - start);
  const uintptr_t end = aligned + mapped;
  if (start + span > end)
    munmap(reinterpret_cast<void*>(end), start + span - end);
  void* p = reinterpret_cast<void*>(aligned);
  adviseHugePages(p, mapped);
  return p;
}

void unmapHuge(void* p, size_t bytes) noexcept {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  munmap(p, (bytes + page - 1) / page * page);
}

}  // namespace

void adviseHugePages(void* p, size_t bytes) noexcept {
  const auto start = reinterpret_cast<uintptr_t>(p);
  const uintptr_t first = (start + kHugePage - 1) & ~(uintptr_t{kHugePage} - 1);
  const uintptr_t last = (start + bytes) & ~(uintptr_t{kHugePage} - 1);
  if (last > first)
    madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE);
}

namespace {

class HostMemory final : public HostAddressedMemory {
 public:
  void* allocate(size_t bytes) override {
    allocations_.fetch_add(1, std::memory_order_relaxed);
    void* p = bytes >= kHugePage ? mapHuge(bytes)
                                 : ::operator new(bytes == 0 ? 1 : bytes, kHostAlignment);
    // Zero-filled, and every page faulted in now rather than in a timed step.
    std::memset(p, 0, bytes);
    return p;
  }
  void deallocate(void* p, size_t bytes) noexcept override {
    if (bytes >= kHugePage)
      unmapHuge(p, bytes);
    else
      ::operator delete(p, kHostAlignment);
  }
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

// BufferOps for tests: the host's arithmetic, with every call counted, and
// staging memory filled with NaN when allocated, so a collective that reads
// staging it never wrote, or sums past a message's end, shows up as NaN in
// its results. What the device communicator's host-side logic is tested with
// where no GPU is: a world of these routes every byte and every sum through
// its ranks' ops exactly as a world of GPU ranks' ops does.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "strata/exec/comm/buffer_ops.h"

namespace strata::test {

class CountingOps final : public exec::BufferOps {
 public:
  std::string name() const override { return "counting"; }
  void copy(void* dst, const void* src, std::size_t bytes) override {
    ++copies;
    copiedBytes += bytes;
    exec::hostOps().copy(dst, src, bytes);
  }
  void add(std::span<float> dst, std::span<const float> src) override {
    ++adds;
    addedElements += dst.size();
    exec::hostOps().add(dst, src);
  }
  void* allocate(std::size_t bytes) override {
    void* p = exec::hostOps().allocate(bytes);
    auto* f = static_cast<float*>(p);
    for (std::size_t i = 0; i < bytes / sizeof(float); ++i)
      f[i] = std::numeric_limits<float>::quiet_NaN();
    liveBytes += static_cast<int64_t>(bytes);
    ++allocations;
    return p;
  }
  void deallocate(void* p, std::size_t bytes) noexcept override {
    liveBytes -= static_cast<int64_t>(bytes);
    exec::hostOps().deallocate(p, bytes);
  }

  std::atomic<int64_t> copies{0}, copiedBytes{0}, adds{0}, addedElements{0};
  std::atomic<int64_t> allocations{0}, liveBytes{0};
};

// One CountingOps per rank, and the world's view of them.
struct CountingWorld {
  explicit CountingWorld(int k) {
    for (int r = 0; r < k; ++r)
      ranks.push_back(std::make_shared<CountingOps>());
  }
  std::vector<std::shared_ptr<exec::BufferOps>> ops() const { return {ranks.begin(), ranks.end()}; }
  std::vector<std::shared_ptr<CountingOps>> ranks;
};

}  // namespace strata::test

// Where a Backend's buffers live.
//
// The CPU backend computes on host memory. The CUDA backend computes on
// memory its GPU reaches at full speed and that the host can still address:
// CUDA managed memory, so the Model, the Plan interpreter and the
// communicators read and write buffers through the same pointers on either
// backend (a host touch of a device-resident page migrates it, so the
// per-step path touches only what it must: the input batch, the labels, the
// loss statistics and, between workers, the gradients). Every buffer a
// Backend kernel reads or writes comes from its Memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <type_traits>
#include <utility>

namespace strata::nn {

class Memory {
 public:
  virtual ~Memory() = default;
  // `bytes` of zero-filled memory aligned for any element type, or throws
  // (std::bad_alloc on the host, a RunFailure naming the call on a device).
  virtual void* allocate(size_t bytes) = 0;
  virtual void deallocate(void* p, size_t bytes) noexcept = 0;
  // "host", "cuda-managed", ...
  virtual const char* name() const = 0;
};

// Plain host memory (operator new, 64-byte aligned).
Memory& hostMemory();
// How many buffers hostMemory() has handed out so far, over all threads: for
// tests that a run stops allocating after its first step (a buffer made per
// step or per message is a cudaMallocManaged and a device-wide cudaFree on a
// GPU, which is what made an H100's ring steps 4x slower).
uint64_t hostAllocations();

// A grow-only array of trivially copyable T in one Memory: what Tensor and
// Model keep their data in. size() is the logical size; storage only grows
// (shrinking keeps it, so a per-step resize to a smaller batch does not
// allocate), and new elements read as zero.
template <class T>
class Buffer {
  static_assert(std::is_trivially_copyable_v<T>);

 public:
  Buffer() = default;
  explicit Buffer(Memory& memory) : memory_(&memory) {}
  Buffer(Memory& memory, size_t size) : memory_(&memory) { resize(size); }
  ~Buffer() { release(); }
  Buffer(Buffer&& o) noexcept { swap(o); }
  Buffer& operator=(Buffer&& o) noexcept {
    if (this != &o) {
      release();
      swap(o);
    }
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  Memory& memory() const { return *memory_; }
  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }
  std::span<T> span() { return {data_, size_}; }
  std::span<const T> span() const { return {data_, size_}; }
  operator std::span<T>() { return span(); }              // NOLINT: as std::vector converts
  operator std::span<const T>() const { return span(); }  // NOLINT

  // Elements past the old size read as zero (grown storage is zero-filled,
  // and storage kept from an earlier larger size is zeroed again).
  void resize(size_t size) {
    if (size > capacity_) {
      T* fresh = static_cast<T*>(memory_->allocate(size * sizeof(T)));
      if (size_ > 0)
        std::memcpy(fresh, data_, size_ * sizeof(T));
      release();
      data_ = fresh;
      capacity_ = size;
    } else if (size > size_) {
      std::memset(data_ + size_, 0, (size - size_) * sizeof(T));
    }
    size_ = size;
  }
  // Size `size`, contents unspecified (no copy of the old contents, no fill
  // of kept storage): for buffers a kernel overwrites before any read.
  void resizeUninitialized(size_t size) {
    if (size > capacity_) {
      release();
      data_ = static_cast<T*>(memory_->allocate(size * sizeof(T)));
      capacity_ = size;
    }
    size_ = size;
  }
  void assign(std::span<const T> values) {
    resizeUninitialized(values.size());
    if (!values.empty())
      std::memcpy(data_, values.data(), values.size() * sizeof(T));
  }

 private:
  void release() noexcept {
    if (data_)
      memory_->deallocate(data_, capacity_ * sizeof(T));
    data_ = nullptr;
    size_ = capacity_ = 0;
  }
  void swap(Buffer& o) noexcept {
    std::swap(memory_, o.memory_);
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    std::swap(capacity_, o.capacity_);
  }

  Memory* memory_ = &hostMemory();
  T* data_ = nullptr;
  size_t size_ = 0;
  size_t capacity_ = 0;
};

}  // namespace strata::nn

// Where a Backend's buffers live, and how host code meets them.
//
// The CPU backend computes on host memory. The CUDA backend computes on
// device memory (CudaDeviceMemory, cuda_backend.h), which the host cannot
// dereference. So host code (Model, the Plan interpreter, the communicators,
// calibrate, tests) never reads or writes a buffer through its pointer unless
// its Memory says hostAccessible(); it hands pointers to the backend's kernels
// and to a communicator's BufferOps (which copy and sum on the device), and it
// moves values to and from the host with the Memory's copies: upload,
// download, copy and zero, ordered with the backend's kernels (on a GPU they
// run on the backend's stream). Every buffer a Backend kernel reads or writes
// comes from its Memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

namespace strata::nn {

// Marks the whole 2 MiB pages inside [p, p + bytes) for transparent huge
// pages (MADV_HUGEPAGE), to be called before they are first touched: what
// HostMemory does for each allocation of 2 MiB or more, and calibrate for
// its buffers, so the kernel tables and a step see the same pages
// (docs/executor.md, "Huge pages"). Advice only: where THP is off, nothing.
void adviseHugePages(void* p, size_t bytes) noexcept;

class Memory {
 public:
  virtual ~Memory() = default;
  // `bytes` of zero-filled memory aligned for any element type, or throws
  // (std::bad_alloc on the host, a RunFailure naming the call on a device).
  // On a device the zero fill is ordered before every kernel and copy
  // enqueued after the call.
  virtual void* allocate(size_t bytes) = 0;
  // Freed once the kernels and copies already enqueued on it are done.
  virtual void deallocate(void* p, size_t bytes) noexcept = 0;
  // "host", "cuda-device", "cuda-managed", ...
  virtual const char* name() const = 0;
  // Whether the host may dereference this memory's pointers. When false,
  // host code moves values only through the four calls below.
  virtual bool hostAccessible() const = 0;

  // The copies (no overlap between source and destination). Each is ordered
  // after the kernels already enqueued on this memory's backend and before
  // those enqueued after it; pointers named "host" are plain host memory.
  // Host `src` to `dst` (this memory's): `src` may be reused once it returns.
  virtual void upload(void* dst, const void* src, size_t bytes) = 0;
  // `src` (this memory's) to host `dst`: the bytes are in `dst` when it
  // returns (it waits for the kernels before it).
  virtual void download(void* dst, const void* src, size_t bytes) = 0;
  // From `src` to `dst`, both this memory's.
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;
  // Sets `bytes` bytes at `dst` (this memory's) to zero.
  virtual void zero(void* dst, size_t bytes) = 0;
};

// A Memory the host addresses directly: the copies are memcpy and memset,
// done when they return.
class HostAddressedMemory : public Memory {
 public:
  bool hostAccessible() const override { return true; }
  void upload(void* dst, const void* src, size_t bytes) override;
  void download(void* dst, const void* src, size_t bytes) override;
  void copy(void* dst, const void* src, size_t bytes) override;
  void zero(void* dst, size_t bytes) override;
};

// Plain host memory (operator new, 64-byte aligned).
Memory& hostMemory();

// Throws InvariantError naming `what` unless `memory` is host-accessible:
// the guard of every accessor that hands a buffer to the host as a span.
void requireHostAccess(const Memory& memory, const char* what);

// Typed copies between host spans and a Memory's arrays (see Memory).
template <class T>
void upload(Memory& memory, T* dst, std::span<const T> src) {
  static_assert(std::is_trivially_copyable_v<T>);
  if (!src.empty())
    memory.upload(dst, src.data(), src.size_bytes());
}
template <class T>
void download(Memory& memory, std::span<T> dst, const T* src) {
  static_assert(std::is_trivially_copyable_v<T>);
  if (!dst.empty())
    memory.download(dst.data(), src, dst.size_bytes());
}
// How many buffers hostMemory() has handed out so far, over all threads: for
// tests that a run stops allocating after its first step (a buffer made per
// step or per message was a cudaMallocManaged and a device-wide cudaFree on a
// GPU, which is what made an H100's ring steps 4x slower; device memory now
// comes from a pool, but a step still allocates nothing).
uint64_t hostAllocations();

// A grow-only array of trivially copyable T in one Memory: what Tensor and
// Model keep their data in. size() is the logical size; storage only grows
// (shrinking keeps it, so a per-step resize to a smaller batch does not
// allocate), and new elements read as zero. data() and span() are pointers of
// the Memory: for kernels and BufferOps; the host dereferences them only where
// the Memory is host-accessible (hostSpan() checks), and otherwise copies with
// assign(), toHost() or the Memory's calls.
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
  // and storage kept from an earlier larger size is zeroed again). The old
  // contents move and the zeroing runs through the Memory (on a device, on
  // its stream).
  void resize(size_t size) {
    if (size > capacity_) {
      T* fresh = static_cast<T*>(memory_->allocate(size * sizeof(T)));
      if (size_ > 0)
        memory_->copy(fresh, data_, size_ * sizeof(T));
      release();
      data_ = fresh;
      capacity_ = size;
    } else if (size > size_) {
      memory_->zero(data_ + size_, (size - size_) * sizeof(T));
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
  // Size values.size(), holding `values` (host memory): an upload.
  void assign(std::span<const T> values) {
    resizeUninitialized(values.size());
    nn::upload(*memory_, data_, values);
  }
  // The contents, copied to the host (a download: waits for the kernels
  // before it).
  std::vector<T> toHost() const {
    std::vector<T> out(size_);
    nn::download(*memory_, std::span<T>(out), data_);
    return out;
  }
  // A span the host reads and writes directly; InvariantError naming `what`
  // when the memory is not host-accessible (memory.h).
  std::span<T> hostSpan(const char* what) {
    requireHostAccess(*memory_, what);
    return span();
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

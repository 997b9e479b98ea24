// How one rank's communication moves and sums bytes, and so where its buffers
// may live.
//
// A Communicator's send/recv and the collectives never touch the bytes of a
// message themselves: they copy through copy(), sum through add() and keep
// messages in flight in memory from allocate(). The host's (hostOps()) are
// memcpy, a loop and operator new. A GPU rank's (cuda_ops.h) are copies and
// the reduce-add kernel on the rank's own stream on its GPU, with messages
// staged in device memory: so the same collectives and the same Plan
// interpreter move data between GPU buffers (device to device, or peer to
// peer between GPUs) without a line of strategy code knowing.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>

namespace strata::exec {

class BufferOps {
 public:
  virtual ~BufferOps() = default;
  // "host", "cuda:0", ...
  virtual std::string name() const = 0;
  // Copies `bytes` from `src` to `dst` (not overlapping), each anywhere this
  // rank can address: host memory, or on a GPU rank also managed memory and
  // any GPU's memory. The bytes are in place when it returns.
  virtual void copy(void* dst, const void* src, std::size_t bytes) = 0;
  // `rows` rows of `rowBytes` bytes, row i from src + i*srcPitch to
  // dst + i*dstPitch (pitches >= rowBytes): a channel slice of an NCHW
  // tensor, one row per example. In place when it returns. The default is
  // one copy() per row; a GPU rank's is one 2-D copy.
  virtual void copyRows(void* dst, std::size_t dstPitch, const void* src, std::size_t srcPitch,
                        std::size_t rowBytes, std::size_t rows);
  // dst[i] += src[i] for every i (equal sizes, not overlapping); done when it
  // returns. Sums in the order of the twins in kernels/ (one rounding per
  // element), so every implementation gives the same bits.
  virtual void add(std::span<float> dst, std::span<const float> src) = 0;
  // `bytes` (> 0) uninitialised bytes where this rank's copies are fastest
  // from and to (host memory; device memory on a GPU), aligned for float.
  // Throws on failure (std::bad_alloc, or a RunFailure naming the call).
  virtual void* allocate(std::size_t bytes) = 0;
  virtual void deallocate(void* p, std::size_t bytes) noexcept = 0;
};

// The host's: memcpy, a loop and operator new. One instance, shared.
BufferOps& hostOps();
std::shared_ptr<BufferOps> sharedHostOps();

// A grow-only buffer of floats in one BufferOps' memory (a rank's scratch).
class OpsBuffer {
 public:
  explicit OpsBuffer(BufferOps& ops) : ops_(&ops) {}
  ~OpsBuffer() { release(); }
  OpsBuffer(const OpsBuffer&) = delete;
  OpsBuffer& operator=(const OpsBuffer&) = delete;
  // The first `elements` floats (contents unspecified), growing as needed.
  std::span<float> first(std::size_t elements);

 private:
  void release() noexcept;
  BufferOps* ops_;
  float* data_ = nullptr;
  std::size_t capacity_ = 0;
};

}  // namespace strata::exec

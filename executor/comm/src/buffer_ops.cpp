#include "strata/exec/comm/buffer_ops.h"

#include <cstddef>
#include <cstring>
#include <new>

#include "strata/kernels/kernels.h"

namespace strata::exec {
namespace {

class HostOps final : public BufferOps {
 public:
  std::string name() const override { return "host"; }
  void copy(void* dst, const void* src, std::size_t bytes) override {
    if (bytes > 0)
      std::memcpy(dst, src, bytes);
  }
  void add(std::span<float> dst, std::span<const float> src) override {
    kernels::twin::reduceAdd(src.data(), dst.data(), static_cast<int64_t>(dst.size()));
  }
  void* allocate(std::size_t bytes) override {
    return ::operator new (bytes, std::align_val_t{64});
  }
  void deallocate(void* p, std::size_t) noexcept override {
    ::operator delete (p, std::align_val_t{64});
  }
};

}  // namespace

void BufferOps::copyRows(void* dst, std::size_t dstPitch, const void* src, std::size_t srcPitch,
                         std::size_t rowBytes, std::size_t rows) {
  for (std::size_t i = 0; i < rows; ++i)
    copy(static_cast<std::byte*>(dst) + i * dstPitch,
         static_cast<const std::byte*>(src) + i * srcPitch, rowBytes);
}

std::shared_ptr<BufferOps> sharedHostOps() {
  static const std::shared_ptr<BufferOps> ops = std::make_shared<HostOps>();
  return ops;
}

BufferOps& hostOps() {
  return *sharedHostOps();
}

std::span<float> OpsBuffer::first(std::size_t elements) {
  if (elements > capacity_) {
    release();
    data_ = static_cast<float*>(ops_->allocate(elements * sizeof(float)));
    capacity_ = elements;
  }
  return {data_, elements};
}

void OpsBuffer::release() noexcept {
  if (data_)
    ops_->deallocate(data_, capacity_ * sizeof(float));
  data_ = nullptr;
  capacity_ = 0;
}

}  // namespace strata::exec

#include "strata/exec/comm/cuda_ops.h"

#include <cuda_runtime.h>
#include <fmt/format.h>

#include <vector>

#include "strata/kernels/kernels.h"
#include "strata/model/error.h"

namespace strata::exec {
namespace {

void check(cudaError_t status, const char* call, int device) {
  if (status != cudaSuccess)
    throw RunFailure(fmt::format("{} on cuda:{}: {}", call, device, cudaGetErrorString(status)));
}

// Where a pointer's memory is, as far as this rank's kernels and the host
// are concerned.
struct Place {
  bool device = false;  // a kernel on our GPU may read and write it
  bool host = false;    // the host may read and write it
};

class CudaOps final : public BufferOps {
 public:
  explicit CudaOps(int device) : device_(device) {
    check(cudaSetDevice(device), "cudaSetDevice", device);
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate", device);
    int count = 0;
    check(cudaGetDeviceCount(&count), "cudaGetDeviceCount", device);
    peers_.assign(static_cast<size_t>(count), false);
    peers_[static_cast<size_t>(device)] = true;
    for (int d = 0; d < count; ++d) {
      if (d == device)
        continue;
      int can = 0;
      if (cudaDeviceCanAccessPeer(&can, device, d) != cudaSuccess || !can)
        continue;
      const cudaError_t status = cudaDeviceEnablePeerAccess(d, 0);
      if (status == cudaSuccess || status == cudaErrorPeerAccessAlreadyEnabled)
        peers_[static_cast<size_t>(d)] = true;
      (void)cudaGetLastError();  // an "already enabled" is not sticky, but clear it
    }
  }
  ~CudaOps() override {
    if (staging_)
      (void)cudaFree(staging_);
    if (hostStaging_)
      (void)cudaFreeHost(hostStaging_);
    (void)cudaSetDevice(device_);
    (void)cudaStreamDestroy(stream_);
  }
  CudaOps(const CudaOps&) = delete;
  CudaOps& operator=(const CudaOps&) = delete;

  std::string name() const override { return fmt::format("cuda:{}", device_); }

  void copy(void* dst, const void* src, std::size_t bytes) override {
    if (bytes == 0)
      return;
    check(cudaSetDevice(device_), "cudaSetDevice", device_);
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_), "cudaMemcpyAsync", device_);
    wait();
  }

  void copyRows(void* dst, std::size_t dstPitch, const void* src, std::size_t srcPitch,
                std::size_t rowBytes, std::size_t rows) override {
    if (rowBytes == 0 || rows == 0)
      return;
    check(cudaSetDevice(device_), "cudaSetDevice", device_);
    check(
        cudaMemcpy2DAsync(dst, dstPitch, src, srcPitch, rowBytes, rows, cudaMemcpyDefault, stream_),
        "cudaMemcpy2DAsync", device_);
    wait();
  }

  void add(std::span<float> dst, std::span<const float> src) override {
    STRATA_ENFORCE_OP(dst.size(), ==, src.size());
    if (dst.empty())
      return;
    const auto n = static_cast<int64_t>(dst.size());
    const Place to = placeOf(dst.data()), from = placeOf(src.data());
    if (to.device && from.device) {
      check(cudaSetDevice(device_), "cudaSetDevice", device_);
      kernels::cuda::reduceAdd(src.data(), dst.data(), n, stream_);
      check(cudaGetLastError(), "reduceAdd kernel launch", device_);
      wait();
    } else if (to.host && from.host) {
      // Host memory (pageable, pinned or managed) on both sides: the host
      // sums, in the kernel's order.
      kernels::twin::reduceAdd(src.data(), dst.data(), n);
    } else if (to.device) {
      // Pageable host data into device memory: stage it on the GPU first.
      float* staged = stage(dst.size());
      copy(staged, src.data(), src.size_bytes());
      kernels::cuda::reduceAdd(staged, dst.data(), n, stream_);
      check(cudaGetLastError(), "reduceAdd kernel launch", device_);
      wait();
    } else if (to.host) {
      // Device data into host memory: bring it to pinned host staging, and
      // the host sums (in the kernel's order) once the copy is waited for.
      float* staged = stageOnHost(src.size());
      copy(staged, src.data(), src.size_bytes());
      kernels::twin::reduceAdd(staged, dst.data(), n);
    } else {
      throw RunFailure(fmt::format(
          "cuda:{}: cannot sum into memory that neither the host nor this GPU reaches", device_));
    }
  }

  void* allocate(std::size_t bytes) override {
    check(cudaSetDevice(device_), "cudaSetDevice", device_);
    void* p = nullptr;
    check(cudaMalloc(&p, bytes), "cudaMalloc", device_);
    return p;
  }
  void deallocate(void* p, std::size_t) noexcept override { (void)cudaFree(p); }

 private:
  void wait() { check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize", device_); }

  Place placeOf(const void* p) const {
    cudaPointerAttributes a{};
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
      (void)cudaGetLastError();
      return {false, true};  // unknown to CUDA: pageable host memory
    }
    switch (a.type) {
      case cudaMemoryTypeManaged:
        return {true, true};
      case cudaMemoryTypeHost:  // pinned: mapped into every GPU's address space
        return {true, true};
      case cudaMemoryTypeDevice:
        return {a.device >= 0 && static_cast<size_t>(a.device) < peers_.size() &&
                    peers_[static_cast<size_t>(a.device)],
                false};
      default:
        return {false, true};
    }
  }

  float* stage(std::size_t elements) {
    if (elements > stagingElems_) {
      if (staging_)
        (void)cudaFree(staging_);
      staging_ = nullptr;
      stagingElems_ = 0;
      staging_ = static_cast<float*>(allocate(elements * sizeof(float)));
      stagingElems_ = elements;
    }
    return staging_;
  }

  // Pinned host memory of `elements` floats (grow-only). Free to write: every
  // copy through it was waited for before the call that made it returned.
  float* stageOnHost(std::size_t elements) {
    if (elements > hostStagingElems_) {
      if (hostStaging_)
        check(cudaFreeHost(hostStaging_), "cudaFreeHost", device_);
      hostStaging_ = nullptr;
      hostStagingElems_ = 0;
      void* p = nullptr;
      check(cudaMallocHost(&p, elements * sizeof(float)), "cudaMallocHost", device_);
      hostStaging_ = static_cast<float*>(p);
      hostStagingElems_ = elements;
    }
    return hostStaging_;
  }

  int device_;
  cudaStream_t stream_ = nullptr;
  std::vector<bool> peers_;  // devices whose memory our kernels may touch
  float* staging_ = nullptr;
  std::size_t stagingElems_ = 0;
  float* hostStaging_ = nullptr;
  std::size_t hostStagingElems_ = 0;
};

}  // namespace

std::shared_ptr<BufferOps> makeCudaOps(int device) {
  return std::make_shared<CudaOps>(device);
}

int cudaVisibleDeviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return count;
}

}  // namespace strata::exec

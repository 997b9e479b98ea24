#include "strata/exec/comm/nccl_communicator.h"

#include <cuda_runtime.h>
#include <fmt/format.h>
#include <nccl.h>

#include <chrono>
#include <cstring>
#include <set>
#include <thread>

#include "strata/exec/comm/cuda_ops.h"
#include "strata/model/error.h"

namespace strata::exec {
namespace {

using Clock = std::chrono::steady_clock;

void checkCuda(cudaError_t status, const char* call, int device) {
  if (status != cudaSuccess)
    throw CommError(fmt::format("{} on cuda:{}: {}", call, device, cudaGetErrorString(status)));
}

void checkNccl(ncclResult_t status, const char* call, ncclComm_t comm = nullptr) {
  if (status == ncclSuccess || status == ncclInProgress)
    return;
  const char* detail = comm ? ncclGetLastError(comm) : ncclGetLastError(nullptr);
  throw CommError(fmt::format("{} failed: {}{}{}", call, ncclGetErrorString(status),
                              detail && *detail ? ": " : "", detail ? detail : ""));
}

// Whether NCCL's kernels on our GPU can read and write `p` directly.
bool onDevice(const void* p) {
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged ||
         a.type == cudaMemoryTypeHost;
}

}  // namespace

// ---- NcclCommunicator ---------------------------------------------------------------

struct NcclCommunicator::Impl {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  std::atomic<bool> aborted{false};
  std::atomic<bool> ncclAborted{false};
  std::mutex reasonMutex;
  std::string reason;
  // Device staging for host buffers: one for sends, one for receives.
  void* sendStage = nullptr;
  size_t sendStageBytes = 0;
  void* recvStage = nullptr;
  size_t recvStageBytes = 0;

  void abortNccl() {
    if (!ncclAborted.exchange(true) && comm)
      (void)ncclCommAbort(comm);
  }
};

namespace {
void* growStage(void*& stage, size_t& have, size_t bytes, int device) {
  if (bytes > have) {
    if (stage)
      (void)cudaFree(stage);
    stage = nullptr;
    have = 0;
    checkCuda(cudaMalloc(&stage, bytes), "cudaMalloc (NCCL staging)", device);
    have = bytes;
  }
  return stage;
}
}  // namespace

NcclCommunicator::NcclCommunicator(MpiCommunicator& bootstrap, int device)
    : bootstrap_(bootstrap), device_(device), impl_(std::make_unique<Impl>()) {
  setTimeout(bootstrap.timeout());
  checkCuda(cudaSetDevice(device), "cudaSetDevice", device);
  ops_ = makeCudaOps(device);
  checkCuda(cudaStreamCreateWithFlags(&impl_->stream, cudaStreamNonBlocking), "cudaStreamCreate",
            device);
  // The unique id, from rank 0 to every rank over MPI.
  ncclUniqueId id{};
  constexpr int kTagNcclId = kFirstReservedTag + 60;
  auto bytes = std::as_writable_bytes(std::span<ncclUniqueId>(&id, 1));
  if (rank() == 0) {
    checkNccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
    for (int r = 1; r < size(); ++r)
      bootstrap.send(r, kTagNcclId, std::span<const std::byte>(bytes));
  } else {
    bootstrap.recv(0, kTagNcclId, bytes);
  }
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // every wait polls, so timeouts and aborts work
  checkNccl(ncclCommInitRankConfig(&impl_->comm, size(), id, rank(), &config),
            "ncclCommInitRankConfig");
  wait("ncclCommInitRankConfig");
}

NcclCommunicator::~NcclCommunicator() {
  Impl& m = *impl_;
  (void)cudaSetDevice(device_);
  if (m.comm) {
    if (m.aborted.load() || m.ncclAborted.load()) {
      m.abortNccl();
    } else {
      // Non-blocking communicator: finalize returns at once; poll it out,
      // bounded by the timeout.
      (void)ncclCommFinalize(m.comm);
      const auto deadline = Clock::now() + std::chrono::duration<double>(timeout().value());
      ncclResult_t state = ncclInProgress;
      while (ncclCommGetAsyncError(m.comm, &state) == ncclSuccess && state == ncclInProgress &&
             Clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      if (state != ncclSuccess)
        m.abortNccl();
      else
        (void)ncclCommDestroy(m.comm);
    }
  }
  if (m.sendStage)
    (void)cudaFree(m.sendStage);
  if (m.recvStage)
    (void)cudaFree(m.recvStage);
  if (m.stream)
    (void)cudaStreamDestroy(m.stream);
}

void NcclCommunicator::abort(const std::string& reason) {
  {
    std::lock_guard lock(impl_->reasonMutex);
    if (impl_->reason.empty())
      impl_->reason = reason;
  }
  impl_->aborted.store(true);
  impl_->abortNccl();
  bootstrap_.abort(reason);
}

bool NcclCommunicator::aborted() const {
  return impl_->aborted.load() || bootstrap_.aborted();
}

void NcclCommunicator::wait(const std::string& what) {
  Impl& m = *impl_;
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout().value());
  for (int polls = 0;; ++polls) {
    if (m.aborted.load(std::memory_order_acquire)) {
      std::lock_guard lock(m.reasonMutex);
      throw CommError(fmt::format("{}: aborted: {}", what, m.reason));
    }
    ncclResult_t state = ncclSuccess;
    checkNccl(ncclCommGetAsyncError(m.comm, &state), "ncclCommGetAsyncError", m.comm);
    if (state != ncclSuccess && state != ncclInProgress) {
      m.abortNccl();
      throw CommError(fmt::format("{}: NCCL: {}: {}", what, ncclGetErrorString(state),
                                  ncclGetLastError(m.comm)));
    }
    if (state == ncclSuccess) {
      const cudaError_t q = cudaStreamQuery(m.stream);
      if (q == cudaSuccess)
        return;
      if (q != cudaErrorNotReady)
        throw CommError(fmt::format("{}: cudaStreamQuery on cuda:{}: {}", what, device_,
                                    cudaGetErrorString(q)));
    }
    if (Clock::now() >= deadline) {
      m.abortNccl();
      throw CommError(
          fmt::format("{}: timed out after {:g} s waiting for NCCL", what, timeout().value()));
    }
    // Spin briefly (a transfer between GPUs takes microseconds), then sleep.
    if (polls < 2000)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

void NcclCommunicator::doSend(int peer, int tag, std::span<const std::byte> data) {
  doSendRecv(peer, tag, data, -1, tag, {});
}

void NcclCommunicator::doRecv(int peer, int tag, std::span<std::byte> data) {
  doSendRecv(-1, tag, {}, peer, tag, data);
}

// Peer -1: that half is absent. Empty messages are skipped on both sides
// (their sizes agree, as every message's must).
void NcclCommunicator::doSendRecv(int sendPeer, int sendTag, std::span<const std::byte> sendData,
                                  int recvPeer, int recvTag, std::span<std::byte> recvData) {
  Impl& m = *impl_;
  const bool sending = sendPeer >= 0 && !sendData.empty();
  const bool receiving = recvPeer >= 0 && !recvData.empty();
  if (!sending && !receiving)
    return;
  const std::string what = sending && receiving
                               ? describeCall("sendRecv", sendPeer, sendTag, rank()) + ", " +
                                     describeCall("recv", recvPeer, recvTag, rank())
                           : sending ? describeCall("send", sendPeer, sendTag, rank())
                                     : describeCall("recv", recvPeer, recvTag, rank());
  if (m.aborted.load()) {
    std::lock_guard lock(m.reasonMutex);
    throw CommError(fmt::format("{}: aborted: {}", what, m.reason));
  }
  checkCuda(cudaSetDevice(device_), "cudaSetDevice", device_);
  const void* src = sendData.data();
  void* dst = recvData.data();
  const bool stageIn = sending && !onDevice(src);
  const bool stageOut = receiving && !onDevice(dst);
  if (stageIn) {
    void* stage = growStage(m.sendStage, m.sendStageBytes, sendData.size(), device_);
    checkCuda(cudaMemcpyAsync(stage, src, sendData.size(), cudaMemcpyDefault, m.stream),
              "cudaMemcpyAsync (NCCL staging)", device_);
    src = stage;
  }
  if (stageOut)
    dst = growStage(m.recvStage, m.recvStageBytes, recvData.size(), device_);
  checkNccl(ncclGroupStart(), "ncclGroupStart", m.comm);
  if (sending)
    checkNccl(ncclSend(src, sendData.size(), ncclInt8, sendPeer, m.comm, m.stream), "ncclSend",
              m.comm);
  if (receiving)
    checkNccl(ncclRecv(dst, recvData.size(), ncclInt8, recvPeer, m.comm, m.stream), "ncclRecv",
              m.comm);
  checkNccl(ncclGroupEnd(), "ncclGroupEnd", m.comm);
  if (stageOut)
    checkCuda(cudaMemcpyAsync(recvData.data(), dst, recvData.size(), cudaMemcpyDefault, m.stream),
              "cudaMemcpyAsync (NCCL staging)", device_);
  wait(what);
}

void NcclCommunicator::allreduceNccl(std::span<float> data) {
  Impl& m = *impl_;
  if (data.empty())
    return;
  const std::string what =
      fmt::format("ncclAllReduce of {} floats on rank {}", data.size(), rank());
  checkCuda(cudaSetDevice(device_), "cudaSetDevice", device_);
  STRATA_ENFORCE(onDevice(data.data()));
  checkNccl(
      ncclAllReduce(data.data(), data.data(), data.size(), ncclFloat, ncclSum, m.comm, m.stream),
      "ncclAllReduce", m.comm);
  wait(what);
}

// ---- NcclClique ---------------------------------------------------------------------

struct NcclClique::Impl {
  std::vector<int> devices;
  std::vector<ncclComm_t> comms;
  std::vector<cudaStream_t> streams;
};

NcclClique::NcclClique(const std::vector<int>& devices) : impl_(std::make_unique<Impl>()) {
  if (std::set<int>(devices.begin(), devices.end()).size() != devices.size())
    throw OptionError("--workers",
                      "NCCL runs one rank per GPU: each worker of ncclAllReduce needs a GPU of "
                      "its own");
  impl_->devices = devices;
  impl_->comms.assign(devices.size(), nullptr);
  checkNccl(ncclCommInitAll(impl_->comms.data(), static_cast<int>(devices.size()), devices.data()),
            "ncclCommInitAll");
  for (int d : devices) {
    checkCuda(cudaSetDevice(d), "cudaSetDevice", d);
    cudaStream_t s = nullptr;
    checkCuda(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate", d);
    impl_->streams.push_back(s);
  }
}

NcclClique::~NcclClique() {
  for (size_t i = 0; i < impl_->comms.size(); ++i) {
    (void)cudaSetDevice(impl_->devices[i]);
    if (i < impl_->streams.size())
      (void)cudaStreamDestroy(impl_->streams[i]);
    if (impl_->comms[i])
      (void)ncclCommDestroy(impl_->comms[i]);
  }
}

int NcclClique::size() const {
  return static_cast<int>(impl_->devices.size());
}

void NcclClique::allreduce(const std::vector<std::span<float>>& buffers) {
  STRATA_ENFORCE_OP(buffers.size(), ==, impl_->devices.size());
  checkNccl(ncclGroupStart(), "ncclGroupStart");
  for (size_t i = 0; i < buffers.size(); ++i) {
    STRATA_ENFORCE_OP(buffers[i].size(), ==, buffers[0].size());
    checkNccl(ncclAllReduce(buffers[i].data(), buffers[i].data(), buffers[i].size(), ncclFloat,
                            ncclSum, impl_->comms[i], impl_->streams[i]),
              "ncclAllReduce");
  }
  checkNccl(ncclGroupEnd(), "ncclGroupEnd");
  for (size_t i = 0; i < buffers.size(); ++i) {
    checkCuda(cudaSetDevice(impl_->devices[i]), "cudaSetDevice", impl_->devices[i]);
    checkCuda(cudaStreamSynchronize(impl_->streams[i]), "cudaStreamSynchronize", impl_->devices[i]);
  }
}

}  // namespace strata::exec

// Ranks as MPI processes, one GPU each, moving data with NCCL (built when
// CUDA, NCCL and MPI are all present: STRATA_HAVE_NCCL).
//
// NCCL runs one rank per GPU: two ranks naming one GPU fail at start-up
// ("Duplicate GPU detected"). So K workers on fewer GPUs run as threads of
// one process over the device communicator (LocalWorld with GPU ranks' ops,
// cuda_ops.h), and across processes and nodes each rank takes its own GPU
// and talks through this class.
//
// Bootstrap: rank 0 makes the NCCL unique id and sends it to every rank over
// the MpiCommunicator; every rank then joins the NCCL communicator on its
// GPU. Transfers: ncclSend / ncclRecv on the rank's own stream (a sendRecv is
// one ncclGroupStart/End, so both directions of a link move at once); the
// project's collectives (allReduceRing, ...) run over them unchanged, and
// ncclAllReduce is there as the baseline. The communicator is non-blocking
// (ncclConfig_t::blocking = 0): every wait polls the stream, NCCL's
// asynchronous error and the timeout, so a lost peer ends the call with a
// CommError naming peer and tag, and abort() calls ncclCommAbort, which ends
// every pending NCCL operation of this rank, before the MPI job is ended.
//
// Differences from the Communicator contract, which NCCL imposes: messages
// between two ranks are matched in the order they were posted whatever their
// tags (the Plan interpreter and the collectives post them in the same order
// on every rank, so this holds), and a receive of the wrong size is not
// detected (the ranks agree on the whole configuration at start, runWorker's
// config hash). Buffers may be device, managed or host memory; host memory is
// staged through the rank's GPU.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "strata/exec/comm/communicator.h"
#include "strata/exec/comm/mpi_communicator.h"

namespace strata::exec {

#ifdef STRATA_HAVE_NCCL

class NcclCommunicator final : public Communicator {
 public:
  // Collective over `bootstrap` (every rank calls it): joins the NCCL
  // communicator of bootstrap.size() ranks on CUDA device `device`. Throws
  // CommError naming the NCCL or CUDA call when that fails, or when a rank
  // does not arrive within bootstrap.timeout(). `bootstrap` must outlive this.
  NcclCommunicator(MpiCommunicator& bootstrap, int device);
  // Finalises and destroys the NCCL communicator (aborts it after an error).
  ~NcclCommunicator() override;

  int rank() const override { return bootstrap_.rank(); }
  int size() const override { return bootstrap_.size(); }
  // ncclCommAbort (every pending NCCL call of this rank ends), then the MPI
  // job ends as MpiCommunicator::abort does. Does not return.
  void abort(const std::string& reason) override;
  bool aborted() const override;
  // The GPU's: copies and the reduce-add kernel on this rank's stream.
  BufferOps& ops() override { return *ops_; }

  int device() const { return device_; }
  // ncclAllReduce(sum) of `data` in place over every rank, waited for: the
  // baseline the allreduce benchmark compares the project's ring against.
  // Collective; same size on every rank.
  void allreduceNccl(std::span<float> data);

 protected:
  void doSend(int peer, int tag, std::span<const std::byte> data) override;
  void doRecv(int peer, int tag, std::span<std::byte> data) override;
  void doSendRecv(int sendPeer, int sendTag, std::span<const std::byte> sendData, int recvPeer,
                  int recvTag, std::span<std::byte> recvData) override;

 private:
  struct Impl;
  // Waits for everything posted on the stream; throws CommError (naming
  // `what`) on an NCCL error, an abort or the timeout (then aborts NCCL).
  void wait(const std::string& what);

  MpiCommunicator& bootstrap_;
  int device_;
  std::shared_ptr<BufferOps> ops_;
  std::unique_ptr<Impl> impl_;
};

// NCCL on K GPUs of one process (ncclCommInitAll): the baseline of the
// allreduce benchmark when its workers each have a GPU of their own. Blocking
// (a benchmark, not a run: no timeout).
class NcclClique {
 public:
  // One NCCL rank per entry of `devices` (distinct CUDA ordinals). Throws
  // CommError naming the call on failure, OptionError on a repeated device.
  explicit NcclClique(const std::vector<int>& devices);
  ~NcclClique();
  NcclClique(const NcclClique&) = delete;
  NcclClique& operator=(const NcclClique&) = delete;

  int size() const;
  // ncclAllReduce(sum) in place: buffers[i] is device memory on devices[i];
  // equal sizes. Returns when every GPU is done.
  void allreduce(const std::vector<std::span<float>>& buffers);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

#endif  // STRATA_HAVE_NCCL

}  // namespace strata::exec

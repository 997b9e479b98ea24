// Ranks as MPI processes over MPI_COMM_WORLD.
//
// Every transfer is MPI_Isend / MPI_Irecv followed by an MPI_Testsome polling
// loop that also watches the timeout and the abort flag, so no call can block
// forever inside MPI. Every MPI call is checked; a failure becomes a CommError
// naming the call and MPI's error string. This header does not include
// <mpi.h>: only the library's sources do.
//
// Without MPI (STRATA_HAVE_MPI undefined) only launchedByMpiexec() exists.
#pragma once

#include <atomic>
#include <mutex>
#include <string>

#include "strata/exec/comm/communicator.h"

namespace strata::exec {

// True when this process was started by mpirun/mpiexec (Open MPI, MPICH or
// PMIx environment variables are set). Lets a program pick MPI mode without
// MPI_Init's singleton start-up when run alone.
bool launchedByMpiexec();

#ifdef STRATA_HAVE_MPI

// Throws CommError "<call> failed: <MPI error string>" when rc != MPI_SUCCESS.
void checkMpi(int rc, const char* call);

// RAII: MPI_Init_thread (MPI_THREAD_FUNNELED) on construction, MPI_Finalize on
// destruction. If MPI is already initialised, does neither. If the guard is
// destroyed while an exception unwinds the stack, it calls MPI_Abort instead
// of MPI_Finalize: finalising would wait forever for peers that are still
// inside a collective.
class MpiSession {
 public:
  // Throws CommError when MPI_Init_thread fails.
  MpiSession(int& argc, char**& argv);
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

  // True when this guard initialised MPI (and so will finalise it).
  bool owns() const { return owns_; }

 private:
  bool owns_ = false;
  int uncaughtAtStart_ = 0;
};

class MpiCommunicator final : public Communicator {
 public:
  // Wraps MPI_COMM_WORLD and makes MPI return error codes on it instead of
  // aborting (so they become CommErrors). MPI must be initialised; throws
  // CommError otherwise.
  MpiCommunicator();

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  // Prints "strata: rank R aborting: <reason>" on stderr, sets the abort flag
  // (this rank's pending calls throw at their next poll) and calls
  // MPI_Abort(MPI_COMM_WORLD, 1), which ends every rank of the job; the
  // launcher exits non-zero. Returns only if MPI_Abort does.
  void abort(const std::string& reason) override;
  bool aborted() const override { return aborted_.load(std::memory_order_acquire); }

 protected:
  void doSend(int peer, int tag, std::span<const std::byte> data) override;
  void doRecv(int peer, int tag, std::span<std::byte> data) override;
  void doSendRecv(int sendPeer, int sendTag, std::span<const std::byte> sendData, int recvPeer,
                  int recvTag, std::span<std::byte> recvData) override;

 private:
  struct Transfer;
  // Polls MPI until every transfer completes; throws on timeout, abort,
  // MPI failure or a received size that differs from the expected one.
  void complete(Transfer* transfers, int count);
  std::string abortReason() const;

  int rank_ = 0;
  int size_ = 1;
  std::atomic<bool> aborted_{false};
  mutable std::mutex reasonMutex_;
  std::string reason_;
};

#endif  // STRATA_HAVE_MPI

}  // namespace strata::exec

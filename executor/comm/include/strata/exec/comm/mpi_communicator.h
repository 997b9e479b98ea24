// Ranks as MPI processes over MPI_COMM_WORLD.
//
// Every transfer is MPI_Isend / MPI_Irecv followed by an MPI_Testsome polling
// loop that also watches the timeout and the abort flag, so no call can block
// forever inside MPI. Every MPI call is checked; a failure becomes a CommError
// naming the call and MPI's error string. This header does not include
// <mpi.h>: only the library's sources do.
//
// Heartbeats. A rank whose process stops (SIGSTOP, a frozen node, a debugger)
// or dies without mpirun noticing would hold its peers for a whole receive
// timeout. So each rank runs a watcher thread that sends an empty message to
// every other rank each heartbeat period, over its own duplicate of
// MPI_COMM_WORLD (heartbeats never match data receives), and notes when it
// last heard from each. A rank silent for kMissedHeartbeats periods ends the
// job: the lowest rank still heard from prints one line, "strata: error: rank
// R went silent: no heartbeat for S s (...)", and calls MPI_Abort with status
// 1, which also ends the stopped rank. The receive timeout then only bounds a
// live peer that is slow or stuck. A watcher thread calls MPI while the
// rank's own threads do, so heartbeats need MPI_THREAD_MULTIPLE (MpiSession
// asks for it; Open MPI 4.1 provides it); without it there are no heartbeats
// and only the timeout ends a run with a lost peer. Cost: K-1 empty messages
// per rank per period and a thread that wakes every period / 4 (at most
// 50 ms) for a few microseconds.
//
// Ending a job. Whoever ends it first (a rank whose worker failed, or the
// watcher that saw a peer fall silent) first tells the other ranks over the
// heartbeat communicator; they stop at their next poll and stay quiet, so the
// job prints one line rather than one per rank, whatever MPI_Abort's kill
// makes their pending calls report. When two ranks fail at once, the lower
// one prints. A rank told to stand by ends the job itself if nothing has
// ended it after max(3 s, kMissedHeartbeats periods).
//
// Without MPI (STRATA_HAVE_MPI undefined) only launchedByMpiexec() exists.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "strata/exec/comm/communicator.h"

namespace strata::exec {

// True when this process was started by mpirun/mpiexec (Open MPI, MPICH or
// PMIx environment variables are set). Lets a program pick MPI mode without
// MPI_Init's singleton start-up when run alone.
bool launchedByMpiexec();
// The rank of this process among those on its node, and how many ranks the
// launcher started on the node (Open MPI, MPICH/Hydra, Slurm variables); -1
// when the launcher does not say. Which GPU a rank takes: its local rank.
int localRankFromLauncher();
int localSizeFromLauncher();

#ifdef STRATA_HAVE_MPI

// Throws CommError "<call> failed: <MPI error string>" when rc != MPI_SUCCESS.
void checkMpi(int rc, const char* call);

// RAII: MPI_Init_thread asking for MPI_THREAD_MULTIPLE on construction (a
// rank's communication lane and heartbeat watcher call MPI beside its main
// thread), MPI_Finalize on destruction. If MPI is already initialised, does
// neither. If the guard is destroyed while an exception unwinds the stack, it
// calls MPI_Abort instead of MPI_Finalize: finalising would wait forever for
// peers that are still inside a collective. Destroy every MpiCommunicator
// first (its watcher thread must stop before MPI_Finalize).
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

// Prints `line` on stderr and ends every rank of the job with MPI_Abort and
// `status`: for failures before a communicator exists. Returns only if
// MPI_Abort does.
void abortMpiJob(const std::string& line, int status);

class MpiCommunicator final : public Communicator {
 public:
  // Heartbeat period when none is given; with kMissedHeartbeats a stopped or
  // dead rank ends the job 5-6 s after it fell silent.
  static constexpr double kDefaultHeartbeatSeconds = 1.0;
  // Periods without a heartbeat after which a rank counts as gone.
  static constexpr int kMissedHeartbeats = 5;

  // Wraps MPI_COMM_WORLD and makes MPI return error codes on it instead of
  // aborting (so they become CommErrors). Collective: duplicates the world
  // for heartbeats and agrees on them (waiting at most kDefaultTimeoutSeconds
  // for every rank); when every rank has MPI_THREAD_MULTIPLE and a
  // `heartbeat` > 0, starts the watcher thread: it beats every `heartbeat`
  // and counts a peer gone after kMissedHeartbeats of the longest period any
  // rank asked for. MPI must be initialised; throws CommError otherwise, or
  // when a rank does not arrive.
  explicit MpiCommunicator(Seconds heartbeat = Seconds(kDefaultHeartbeatSeconds));
  // Stops the watcher, telling the peers this rank is done (they stop
  // watching it: a rank that finished is not a rank that went silent).
  ~MpiCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  // Ends the job: sets the abort flag (this rank's pending calls throw at
  // their next poll), tells every other rank to stand by (their calls throw
  // too, and they print nothing), prints "strata: error: <reason>" on stderr
  // and calls MPI_Abort(MPI_COMM_WORLD, 1); the launcher exits 1. If the job
  // is already ending (another thread, or a peer that said so first), prints
  // nothing and waits for the end instead. Returns only if MPI_Abort does.
  void abort(const std::string& reason) override;
  bool aborted() const override { return aborted_.load(std::memory_order_acquire); }

  // How this rank copies and sums its buffers (buffer_ops.h): the host's
  // unless set. MPI itself is handed host pointers only, so a GPU rank sets
  // its GPU's ops only when it is alone in the job (mpirun -np 1: nothing
  // goes through MPI, but the Plan interpreter's copies of owt's rows and
  // slices are device to device); GPU ranks that talk go over NCCL.
  BufferOps& ops() override { return ops_ ? *ops_ : hostOps(); }
  void setOps(std::shared_ptr<BufferOps> ops) { ops_ = std::move(ops); }

  // True while the watcher thread runs (heartbeats are on).
  bool heartbeats() const;
  // Whether a line about the job's end from this rank would repeat one that
  // another rank printed: the job is ending (the abort flag), or this rank's
  // watcher has not run for a heartbeat period, or found so in the last
  // seconds (this process was stopped, so the rank that noticed said so).
  // Async-signal-safe, for a SIGTERM handler.
  bool endSeenElsewhere() const;
  // The period a peer is watched with: the longest any rank asked for; 0 when
  // heartbeats are off (one rank asked for 0, or MPI lacks
  // MPI_THREAD_MULTIPLE on one rank, or a world of one rank).
  Seconds heartbeat() const { return heartbeat_; }

 protected:
  void doSend(int peer, int tag, std::span<const std::byte> data) override;
  void doRecv(int peer, int tag, std::span<std::byte> data) override;
  void doSendRecv(int sendPeer, int sendTag, std::span<const std::byte> sendData, int recvPeer,
                  int recvTag, std::span<std::byte> recvData) override;

 private:
  struct Transfer;
  struct Watcher;
  using Clock = std::chrono::steady_clock;
  std::shared_ptr<BufferOps> ops_;  // null: hostOps()
  // Who ends the job once it is ending: this rank, or another one that told
  // this rank (or that this rank's watcher left it to) to stand by.
  enum class Ending { kNo, kHere, kElsewhere };

  // Polls MPI until every transfer completes; throws on timeout, abort,
  // MPI failure or a received size that differs from the expected one.
  void complete(Transfer* transfers, int count);
  std::string abortReason() const;
  // Records the job as ending (the first reason wins); true when this call
  // made it end.
  bool beginEnding(const std::string& reason, Ending who);
  // Tells the peers, prints the line and calls MPI_Abort, unless a lower
  // rank said it ends the job meanwhile; then waits as standByForEnd.
  void endJobHere(const std::string& reason);
  // Waits for another rank to end the job, then ends it from here.
  void standByForEnd();
  // Prints (once per process) and calls MPI_Abort(MPI_COMM_WORLD, 1).
  void finish(const std::string& reason);
  // The watcher thread: heartbeats out, heartbeats and notices in.
  void watch();
  // A notice from `peer` that it ends the job because of `reason`.
  void onNotice(int peer, const std::string& reason);
  double standByLimit() const;

  int rank_ = 0;
  int size_ = 1;
  Seconds heartbeat_{0};
  std::atomic<bool> aborted_{false};
  std::atomic<bool> printed_{false};
  // When the watcher last looked, and last found it had not run for a period
  // (0: never), in steady_clock nanoseconds.
  std::atomic<std::int64_t> lastLookNs_{0};
  std::atomic<std::int64_t> lastStallNs_{0};
  mutable std::mutex reasonMutex_;
  std::string reason_;
  Ending ending_ = Ending::kNo;
  Clock::time_point endingSince_{};
  std::unique_ptr<Watcher> watcher_;
};

#endif  // STRATA_HAVE_MPI

}  // namespace strata::exec

// The one point-to-point interface every executor layer talks through.
//
// A Communicator is one rank's view of a world of size() ranks. Strategy code
// and the collectives (collectives.h) only ever call rank(), size(), send(),
// recv() and sendRecv(), so they run unchanged on worker threads in one process
// (local_communicator.h) and on MPI processes (mpi_communicator.h).
//
// Semantics shared by every implementation:
//   - Messages between one (source, destination, tag) arrive in the order they
//     were sent, so collectives may reuse a tag call after call as long as all
//     ranks call the same collectives in the same order.
//   - recv() takes exactly one message and its size must equal the buffer's:
//     a mismatch is a CommError naming the peer, the tag and both sizes.
//   - Every blocking call gives up after timeout() with a CommError naming the
//     peer, the tag and the timeout, so a lost peer never hangs a run. Under
//     MPI, heartbeats end the job sooner when a peer process stops or dies
//     (mpi_communicator.h): the timeout is then only for slow live peers.
//   - abort() ends the world: every pending and future call on every rank
//     throws (local threads) or the whole job ends (MPI) promptly.
//   - One thread drives a Communicator; only abort() may come from another.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "strata/exec/comm/buffer_ops.h"
#include "strata/model/error.h"
#include "strata/model/units.h"

namespace strata::exec {

// Tag ranges. MPI guarantees MPI_TAG_UB >= 32767; we stay below it everywhere.
//   [0, kFirstReservedTag)                    callers' data (plan transfers)
//   [kFirstReservedTag, kFirstCollectiveTag)  executor bookkeeping (start-up
//                                             agreement, config checks,
//                                             statistics)
//   [kFirstCollectiveTag, kMaxTag]            the collectives in collectives.h
// Separate ranges keep a collective's messages from matching someone else's
// receive when both run between the same pair of ranks.
inline constexpr int kMaxTag = 32767;
inline constexpr int kFirstReservedTag = 32000;
inline constexpr int kFirstCollectiveTag = 32704;
// agreeOnMistakes' messages; the runtime's bookkeeping tags follow it.
inline constexpr int kAgreementTag = kFirstReservedTag;

// A communication failure: a timeout, an aborted world, a size mismatch, a
// failed MPI call. A RunFailure: its usual cause is outside strata (a dead or
// wrong peer, a mismatched program); the CLI prints it on one line, status 1.
class CommError : public RunFailure {
 public:
  using RunFailure::RunFailure;
};

class Communicator {
 public:
  // Long enough for a 1 GB transfer over a slow link, short enough that a
  // live but stuck peer ends a run within a minute. (A stopped or dead MPI
  // peer is noticed sooner, by heartbeats.)
  static constexpr double kDefaultTimeoutSeconds = 60.0;

  virtual ~Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  // This rank, in [0, size()).
  virtual int rank() const = 0;
  // Number of ranks in the world (>= 1).
  virtual int size() const = 0;

  // Sends `data` to `peer` (in [0, size())) under `tag` (in [0, kMaxTag]).
  // Returns when `data` may be reused. Local sends copy and never wait; MPI
  // sends may wait for the receiver, up to timeout(). Throws CommError on a
  // bad peer or tag, timeout, abort or MPI failure.
  void send(int peer, int tag, std::span<const std::byte> data);
  // Receives the next message from `peer` under `tag` into `data`; the message
  // must be exactly data.size() bytes. Waits at most timeout(). Throws
  // CommError on a bad peer or tag, size mismatch, timeout, abort or MPI
  // failure; `data` is unspecified after a throw.
  void recv(int peer, int tag, std::span<std::byte> data);
  // send(sendPeer, sendTag, sendData) and recv(recvPeer, recvTag, recvData) at
  // once: the receive is posted before the send waits, so a ring of ranks that
  // all sendRecv to the right and from the left never deadlocks, and both
  // directions of a link move data at the same time. The spans must not
  // overlap. Same errors as send() and recv().
  void sendRecv(int sendPeer, int sendTag, std::span<const std::byte> sendData, int recvPeer,
                int recvTag, std::span<std::byte> recvData);

  // Typed forms of the above for float buffers (sizes in elements x 4 bytes).
  void send(int peer, int tag, std::span<const float> data);
  void recv(int peer, int tag, std::span<float> data);
  void sendRecv(int sendPeer, int sendTag, std::span<const float> sendData, int recvPeer,
                int recvTag, std::span<float> recvData);

  // Ends the world because of `reason` (e.g. "worker 2: out of memory"). Local
  // world: every rank's pending and future calls throw CommError carrying the
  // reason within milliseconds; returns. MPI: tells the other ranks (so they
  // stay quiet), prints "strata: error: <reason>" on stderr and ends every
  // rank of the job with status 1; does not return (see MpiCommunicator).
  // Safe from any thread; later calls keep the first reason.
  virtual void abort(const std::string& reason) = 0;
  // True once abort() was called on any rank of this world (local) or on this
  // rank (MPI).
  virtual bool aborted() const = 0;

  // How this rank's messages are copied and summed, and where they may live
  // (buffer_ops.h): the host's unless the world was built with others (GPU
  // ranks). The collectives sum through it; the Plan interpreter too.
  virtual BufferOps& ops() { return hostOps(); }
  // Scratch of at least `elements` floats in ops()' memory, this rank's own,
  // reused call after call (contents unspecified; valid until the next call).
  std::span<float> scratch(std::size_t elements);

  // How long one blocking call may wait before throwing CommError; > 0.
  // Per communicator (per rank); default kDefaultTimeoutSeconds.
  void setTimeout(Seconds timeout);
  Seconds timeout() const { return timeout_; }

 protected:
  Communicator() = default;

  // The implementations' halves of send/recv/sendRecv. Arguments are checked
  // (peer and tag in range, sizes representable) before these are called.
  virtual void doSend(int peer, int tag, std::span<const std::byte> data) = 0;
  virtual void doRecv(int peer, int tag, std::span<std::byte> data) = 0;
  virtual void doSendRecv(int sendPeer, int sendTag, std::span<const std::byte> sendData,
                          int recvPeer, int recvTag, std::span<std::byte> recvData) = 0;

 private:
  void checkPeerAndTag(const char* op, int peer, int tag) const;

  Seconds timeout_{kDefaultTimeoutSeconds};
  std::unique_ptr<OpsBuffer> scratch_;
};

// The text every implementation puts in front of its errors, so that every
// message names the call, the peer, the tag and this rank:
// "recv from peer 1 tag 7 on rank 0".
std::string describeCall(const char* op, int peer, int tag, int rank);

// Runs body(comm). If body throws, aborts the world with reason
// "worker R: <what>" (R = comm.rank()) so the other ranks end too, then
// rethrows. Over MPI the abort ends the job and does not return.
void runOrAbort(Communicator& comm, const std::function<void(Communicator&)>& body);

// Start-up agreement: every rank first does what can find a user mistake
// (reading options and configs), then calls this with its mistake ("" when it
// had none). Collective. Returns the same verdict on every rank: "" when no
// rank had a mistake; else rank 0's mistake, or "rank R: <mistake>" for the
// lowest rank R that had one when rank 0 had none (a file readable on one
// node only). Mistakes are cut to 4096 bytes. So every rank can end cleanly
// together, and rank 0 alone prints the verdict. Throws CommError when a
// rank does not arrive within timeout() (or is found stopped or dead sooner,
// under MPI).
std::string agreeOnMistakes(Communicator& comm, const std::string& mistake);

// Fault injection for tests: stops this whole process (SIGSTOP), as a frozen
// node or a debugger would, so its peers see it fall silent. A guard process
// kills it after `guard` if nothing else has ended it, so a test cannot leave
// a stopped process behind. Returns if the process is continued (SIGCONT).
// POSIX only; elsewhere throws RunFailure.
void stopThisProcessForTest(Seconds guard);

}  // namespace strata::exec

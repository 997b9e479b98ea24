// K ranks as threads of one process.
//
// A LocalWorld owns one mailbox per destination rank, holding FIFO queues per
// (source, tag). send() never waits: if the receiver is already waiting with
// its buffer posted, the sender copies straight into it; otherwise it copies
// into a pooled buffer and queues it. recv() takes a queued message or posts
// its buffer and waits on the destination's condition variable until it is
// filled, the world is aborted, or the timeout passes. sendRecv() posts its
// receive before it sends, so in a ring most transfers are a single memcpy.
// When the machine has two cores per rank (a worker's compute and
// communication threads), a receiver polls for up to 50 us before it sleeps:
// a wake-up costs ~10-50 us, a 1 KiB ring allreduce on 2 polling threads
// ~1.7 us. Polls after the first few call sched_yield, so a thread that shares
// the receiver's core still runs. Pooled buffers are recycled so a large
// allreduce does not page-fault fresh memory at every step.
//
// This is what the tests and the thread-mode executor run on: it has the same
// semantics as MpiCommunicator (communicator.h) at the speed of memcpy.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "strata/exec/comm/communicator.h"

namespace strata::exec {

class LocalWorld;

// One rank's endpoint in a LocalWorld; obtained from LocalWorld::communicator.
class LocalCommunicator final : public Communicator {
 public:
  // Contracts as in Communicator.
  int rank() const override { return rank_; }
  int size() const override;
  // Aborts the whole LocalWorld (see LocalWorld::abort).
  void abort(const std::string& reason) override;
  bool aborted() const override;
  // This rank's, as given to the LocalWorld.
  BufferOps& ops() override;

 protected:
  void doSend(int peer, int tag, std::span<const std::byte> data) override;
  void doRecv(int peer, int tag, std::span<std::byte> data) override;
  void doSendRecv(int sendPeer, int sendTag, std::span<const std::byte> sendData, int recvPeer,
                  int recvTag, std::span<std::byte> recvData) override;

 private:
  friend class LocalWorld;
  struct Pending;
  LocalCommunicator(LocalWorld& world, int rank) : world_(world), rank_(rank) {}
  // A receive in two halves, so sendRecv can post it before it sends.
  void postRecv(Pending& pending);
  void waitRecv(Pending& pending);
  void withdraw(Pending& pending);

  LocalWorld& world_;
  int rank_;
};

class LocalWorld {
 public:
  // A world of `size` ranks (>= 1; OptionError otherwise). `ops`: how each
  // rank copies, sums and stages its messages (one per rank; empty: the
  // host's for all). With GPU ranks' ops (cuda_ops.h) this is the device
  // communicator: K workers in one process on one or several GPUs, messages
  // moved device to device or peer to peer. A sender copies with its own ops
  // (into the receiver's posted buffer, or into a staging buffer of its own
  // memory); a receiver copies a staged message out with its own.
  explicit LocalWorld(int size, std::vector<std::shared_ptr<BufferOps>> ops = {});
  ~LocalWorld();
  LocalWorld(const LocalWorld&) = delete;
  LocalWorld& operator=(const LocalWorld&) = delete;

  int size() const;
  // The endpoint of `rank` (in [0, size())). Hand each to exactly one thread;
  // the reference lives as long as the world.
  Communicator& communicator(int rank);

  // Makes every rank's pending and future send/recv throw CommError carrying
  // `reason`; wakes blocked receivers at once. Safe from any thread; the first
  // reason wins. `rank`: the rank whose failure this is (-1: none, e.g. the
  // world's owner); LocalCommunicator::abort passes its own.
  void abort(const std::string& reason, int rank = -1);
  bool aborted() const;
  // The first abort reason; empty while not aborted.
  std::string abortReason() const;
  // The rank given with the first abort; -1 while not aborted or when none.
  int abortRank() const;

 private:
  friend class LocalCommunicator;
  struct State;
  std::unique_ptr<State> state_;
};

// Runs body on `size` threads, one per rank of a fresh LocalWorld whose
// communicators time out after `timeout`. If any rank throws, the world is
// aborted so the others end promptly, all threads are joined, and the first
// error is rethrown with its message prefixed "worker R: " (as CommError,
// UserError, InvariantError or std::runtime_error, whichever it was). Never
// hangs as long as each body returns once its communicator throws: a rank
// that stops communicating is noticed within one timeout, and an abort wakes
// every blocked rank at once.
void runLocal(int size, const std::function<void(Communicator&)>& body,
              Seconds timeout = Seconds(Communicator::kDefaultTimeoutSeconds));
// The same on a world whose ranks use `ops` (one per rank; see LocalWorld).
void runLocal(int size, const std::function<void(Communicator&)>& body, Seconds timeout,
              std::vector<std::shared_ptr<BufferOps>> ops);

}  // namespace strata::exec

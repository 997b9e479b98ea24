#include "strata/exec/comm/local_communicator.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <list>
#include <map>
#include <mutex>
#include <new>
#include <thread>
#include <utility>
#include <vector>

#include "strata/model/limits.h"

namespace strata::exec {
namespace {

// Uninitialised bytes from a rank's BufferOps (host memory, or its GPU's):
// a vector<std::byte> would zero every buffer it grows.
struct FreeWithOps {
  BufferOps* ops = nullptr;
  std::size_t capacity = 0;
  void operator()(std::byte* p) const noexcept { ops->deallocate(p, capacity); }
};

struct Buffer {
  std::unique_ptr<std::byte, FreeWithOps> bytes;
  std::size_t capacity = 0;
  std::size_t size = 0;
  int owner = -1;  // the rank whose pool it returns to
};

// Recycles one rank's message buffers. A ring allreduce of 64 MiB sends
// ~2 x 64 MiB per rank in segments; fresh allocations of that size come from
// mmap and cost a page fault per 4 KiB on first touch (or a cudaMalloc, which
// may wait for the device), more than the copy itself. Per rank, because each
// rank's buffers live where its copies are fastest (its GPU).
class BufferPool {
 public:
  BufferPool(BufferOps& ops, int rank) : ops_(ops), rank_(rank) {}

  Buffer acquire(std::size_t size) {
    if (size == 0)
      return {};
    {
      std::lock_guard lock(mutex_);
      // Smallest free buffer that fits, so small messages leave the big ones.
      auto best = free_.end();
      for (auto it = free_.begin(); it != free_.end(); ++it) {
        if (it->capacity >= size && (best == free_.end() || it->capacity < best->capacity))
          best = it;
      }
      if (best != free_.end()) {
        Buffer buffer = std::move(*best);
        *best = std::move(free_.back());
        free_.pop_back();
        freeBytes_ -= buffer.capacity;
        buffer.size = size;
        return buffer;
      }
    }
    auto* p = static_cast<std::byte*>(ops_.allocate(size));
    return Buffer{std::unique_ptr<std::byte, FreeWithOps>(p, FreeWithOps{&ops_, size}), size, size,
                  rank_};
  }

  void release(Buffer buffer) {
    if (buffer.capacity == 0)
      return;
    std::lock_guard lock(mutex_);
    if (free_.size() < kMaxBuffers && freeBytes_ + buffer.capacity <= kMaxBytes) {
      freeBytes_ += buffer.capacity;
      free_.push_back(std::move(buffer));
    }
  }

 private:
  // Enough for every in-flight segment of K <= 64 ranks; bounded so a world
  // that once sent a huge message does not keep it forever.
  static constexpr std::size_t kMaxBuffers = 256;
  static constexpr std::size_t kMaxBytes = std::size_t{1} << 30;

  BufferOps& ops_;
  int rank_;
  std::mutex mutex_;
  std::vector<Buffer> free_;
  std::size_t freeBytes_ = 0;
};

// A receive waiting with its buffer exposed, so that a sender that finds it
// copies straight into it: one memcpy instead of two (into a queued buffer,
// then out). Lives on the receiver's stack; the sender only touches it under
// the inbox mutex, except for the copy itself, which the receiver waits out.
struct PostedRecv {
  enum class State { kWaiting, kFilling, kDone, kMismatch };
  std::byte* data = nullptr;
  std::size_t size = 0;
  // Written under the inbox mutex; atomic so a receiver may spin on it.
  std::atomic<State> state{State::kWaiting};
  std::size_t offered = 0;  // size of the message that did not fit (kMismatch)
};

// Traffic from one source under one tag to one destination. Invariant: a
// receive is posted only while nothing is queued, so FIFO order holds.
struct Channel {
  std::list<Buffer> queued;      // a list: an idle channel allocates nothing
  PostedRecv* posted = nullptr;  // one thread drives a rank: at most one
};

// Everything waiting for one destination rank, per (source, tag). Idle
// channels are erased, so callers may spread messages over thousands of tags
// without the map growing with every tag ever used.
struct Inbox {
  using Channels = std::map<std::pair<int, int>, Channel>;  // map nodes never move

  std::mutex mutex;
  std::condition_variable arrived;
  Channels channels;

  // Call with the mutex held.
  void eraseIfIdle(Channels::iterator it) {
    if (it->second.queued.empty() && it->second.posted == nullptr)
      channels.erase(it);
  }
};

// How long a receiver polls before it sleeps on the condition variable. A
// wake-up costs ~10-50 us on a VM; a neighbour on another core usually
// delivers within a few us.
constexpr std::chrono::microseconds kPollBeforeSleeping{50};
// Polls with a pause instruction before polling with sched_yield: yielding
// lets a partner (or our own compute thread) that the scheduler put on our
// core run, where a pure spin would hold the core until it gives up.
constexpr int kPausePolls = 64;

inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

std::chrono::steady_clock::time_point deadlineAfter(Seconds timeout) {
  // Clamped so that an absurd timeout cannot overflow the clock's ticks.
  const double seconds = std::min(timeout.value(), 1e9);
  return std::chrono::steady_clock::now() +
         std::chrono::duration_cast<std::chrono::steady_clock::duration>(
             std::chrono::duration<double>(seconds));
}

}  // namespace

struct LocalWorld::State {
  State(int n, std::vector<std::shared_ptr<BufferOps>> rankOps)
      // Spin only when every thread can have a core: a strata worker runs a
      // compute and a communication thread, and a spinning receiver would take
      // the core its own compute lane needs.
      : size(n),
        spinBeforeSleeping(2 * n <= static_cast<int>(std::thread::hardware_concurrency())) {
    ops = std::move(rankOps);
    for (int r = 0; r < n; ++r) {
      inboxes.push_back(std::make_unique<Inbox>());
      pools.push_back(std::make_unique<BufferPool>(*ops[static_cast<std::size_t>(r)], r));
    }
  }

  void release(Buffer buffer) {
    if (buffer.owner >= 0)
      pools[static_cast<std::size_t>(buffer.owner)]->release(std::move(buffer));
  }

  int size;
  bool spinBeforeSleeping;                      // when every rank can have a core
  std::vector<std::shared_ptr<BufferOps>> ops;  // per rank; first, so destroyed last
  std::vector<std::unique_ptr<Inbox>> inboxes;
  std::vector<std::unique_ptr<LocalCommunicator>> comms;
  // Per rank; after `ops` and the inboxes (whose queued messages are pool
  // buffers), so every buffer is freed before its ops go.
  std::vector<std::unique_ptr<BufferPool>> pools;
  std::atomic<bool> aborted{false};
  mutable std::mutex abortMutex;
  std::string abortReason;
  int abortRank = -1;  // the rank whose communicator aborted first, or -1
};

LocalWorld::LocalWorld(int size, std::vector<std::shared_ptr<BufferOps>> ops) {
  if (size < 1)
    throw OptionError("world size", fmt::format("must be >= 1, got {}", size));
  if (ops.empty())
    ops.assign(static_cast<std::size_t>(size), sharedHostOps());
  STRATA_ENFORCE_OP(ops.size(), ==, static_cast<std::size_t>(size));
  for (const auto& o : ops)
    STRATA_ENFORCE(o != nullptr);
  state_ = std::make_unique<State>(size, std::move(ops));
  for (int r = 0; r < size; ++r)
    state_->comms.push_back(std::unique_ptr<LocalCommunicator>(new LocalCommunicator(*this, r)));
}

LocalWorld::~LocalWorld() = default;

int LocalWorld::size() const {
  return state_->size;
}

Communicator& LocalWorld::communicator(int rank) {
  STRATA_ENFORCE_OP(rank, >=, 0);
  STRATA_ENFORCE_OP(rank, <, state_->size);
  return *state_->comms[static_cast<std::size_t>(rank)];
}

void LocalWorld::abort(const std::string& reason, int rank) {
  {
    std::lock_guard lock(state_->abortMutex);
    if (state_->aborted.load(std::memory_order_relaxed))
      return;
    state_->abortReason = reason;
    state_->abortRank = rank;
    state_->aborted.store(true, std::memory_order_release);
  }
  // Taking each inbox's mutex orders the flag before any receiver's next
  // predicate check, so no receiver can miss this wake-up.
  for (auto& inbox : state_->inboxes) {
    { std::lock_guard lock(inbox->mutex); }
    inbox->arrived.notify_all();
  }
}

bool LocalWorld::aborted() const {
  return state_->aborted.load(std::memory_order_acquire);
}

std::string LocalWorld::abortReason() const {
  std::lock_guard lock(state_->abortMutex);
  return state_->abortReason;
}

int LocalWorld::abortRank() const {
  std::lock_guard lock(state_->abortMutex);
  return state_->abortRank;
}

int LocalCommunicator::size() const {
  return world_.size();
}

BufferOps& LocalCommunicator::ops() {
  return *world_.state_->ops[static_cast<std::size_t>(rank_)];
}

void LocalCommunicator::abort(const std::string& reason) {
  world_.abort(reason, rank_);
}

bool LocalCommunicator::aborted() const {
  return world_.aborted();
}

// A receive in progress: either it took a queued message at once, or its
// buffer is posted on the channel for a sender to fill.
struct LocalCommunicator::Pending {
  int peer = 0;
  int tag = 0;
  std::span<std::byte> data;
  Inbox::Channels::iterator channel;  // valid while our posting is registered
  Buffer taken;
  bool tookQueued = false;
  PostedRecv posting;
};

void LocalCommunicator::doSend(int peer, int tag, std::span<const std::byte> data) {
  LocalWorld::State& st = *world_.state_;
  if (st.aborted.load(std::memory_order_acquire))
    throw CommError(fmt::format("{}: aborted: {}", describeCall("send", peer, tag, rank_),
                                world_.abortReason()));
  Inbox& inbox = *st.inboxes[static_cast<std::size_t>(peer)];
  Buffer buffer;
  bool copied = false;
  // At most two rounds: a receive may be posted while we copy into a buffer.
  for (;;) {
    std::unique_lock lock(inbox.mutex);
    const auto it = inbox.channels.try_emplace({rank_, tag}).first;
    Channel& channel = it->second;
    if (PostedRecv* posted = channel.posted) {
      channel.posted = nullptr;
      inbox.eraseIfIdle(it);
      if (posted->size != data.size()) {
        posted->state = PostedRecv::State::kMismatch;
        posted->offered = data.size();
      } else {
        posted->state = PostedRecv::State::kFilling;
        lock.unlock();
        if (!data.empty())
          ops().copy(posted->data, data.data(), data.size());
        lock.lock();
        posted->state = PostedRecv::State::kDone;
      }
      lock.unlock();
      inbox.arrived.notify_all();
      st.release(std::move(buffer));
      return;
    }
    if (copied) {
      channel.queued.push_back(std::move(buffer));
      lock.unlock();
      inbox.arrived.notify_all();
      return;
    }
    inbox.eraseIfIdle(it);  // we may have created it; it stays empty while we copy
    lock.unlock();
    buffer = st.pools[static_cast<std::size_t>(rank_)]->acquire(data.size());
    if (!data.empty())
      ops().copy(buffer.bytes.get(), data.data(), data.size());
    copied = true;
  }
}

void LocalCommunicator::postRecv(Pending& pending) {
  LocalWorld::State& st = *world_.state_;
  Inbox& inbox = *st.inboxes[static_cast<std::size_t>(rank_)];
  std::lock_guard lock(inbox.mutex);
  const auto it = inbox.channels.try_emplace({pending.peer, pending.tag}).first;
  Channel& channel = it->second;
  if (!channel.queued.empty()) {
    pending.taken = std::move(channel.queued.front());
    channel.queued.pop_front();
    pending.tookQueued = true;
    inbox.eraseIfIdle(it);
    return;
  }
  pending.channel = it;
  pending.posting.data = pending.data.data();
  pending.posting.size = pending.data.size();
  channel.posted = &pending.posting;
}

void LocalCommunicator::waitRecv(Pending& pending) {
  LocalWorld::State& st = *world_.state_;
  // Built only on failure: formatting costs more than a small transfer.
  auto call = [&] { return describeCall("recv", pending.peer, pending.tag, rank_); };
  auto mismatch = [&](std::size_t got) {
    return CommError(fmt::format("{}: size mismatch: expected {} bytes, got a {}-byte message",
                                 call(), pending.data.size(), got));
  };
  if (pending.tookQueued) {
    Buffer message = std::move(pending.taken);
    if (message.size != pending.data.size()) {
      const std::size_t got = message.size;
      st.release(std::move(message));
      throw mismatch(got);
    }
    if (!pending.data.empty())
      ops().copy(pending.data.data(), message.bytes.get(), message.size);
    st.release(std::move(message));
    return;
  }

  using State = PostedRecv::State;
  Inbox& inbox = *st.inboxes[static_cast<std::size_t>(rank_)];
  PostedRecv& posting = pending.posting;
  if (st.spinBeforeSleeping) {
    const auto giveUp = std::chrono::steady_clock::now() + kPollBeforeSleeping;
    for (int i = 0;; ++i) {
      const State now = posting.state.load(std::memory_order_acquire);
      if (now == State::kDone || now == State::kMismatch ||
          st.aborted.load(std::memory_order_relaxed))
        break;
      if (i < kPausePolls) {
        cpuRelax();
      } else {
        if (std::chrono::steady_clock::now() >= giveUp)
          break;
        std::this_thread::yield();
      }
    }
  }
  std::unique_lock lock(inbox.mutex);
  inbox.arrived.wait_until(lock, deadlineAfter(timeout()), [&] {
    return st.aborted.load(std::memory_order_acquire) || posting.state == State::kDone ||
           posting.state == State::kMismatch;
  });
  // A sender already copying into our buffer must finish before we return.
  inbox.arrived.wait(lock, [&] { return posting.state != State::kFilling; });
  switch (posting.state.load(std::memory_order_relaxed)) {
    case State::kDone:
      return;
    case State::kMismatch:
      throw mismatch(posting.offered);
    case State::kFilling:
    case State::kWaiting:
      break;
  }
  // Still registered (no sender took it): withdraw, so later messages queue.
  pending.channel->second.posted = nullptr;
  inbox.eraseIfIdle(pending.channel);
  lock.unlock();
  if (st.aborted.load(std::memory_order_acquire))
    throw CommError(fmt::format("{}: aborted: {}", call(), world_.abortReason()));
  throw CommError(
      fmt::format("{}: timed out after {:g} s waiting for a message", call(), timeout().value()));
}

void LocalCommunicator::doRecv(int peer, int tag, std::span<std::byte> data) {
  if (world_.aborted())
    throw CommError(fmt::format("{}: aborted: {}", describeCall("recv", peer, tag, rank_),
                                world_.abortReason()));
  Pending pending;
  pending.peer = peer;
  pending.tag = tag;
  pending.data = data;
  postRecv(pending);
  waitRecv(pending);
}

void LocalCommunicator::doSendRecv(int sendPeer, int sendTag, std::span<const std::byte> sendData,
                                   int recvPeer, int recvTag, std::span<std::byte> recvData) {
  if (world_.aborted())
    throw CommError(fmt::format("{}: aborted: {}", describeCall("recv", recvPeer, recvTag, rank_),
                                world_.abortReason()));
  // Post the receive first so the left neighbour's send can land in it
  // directly; a local send never waits, so this order cannot deadlock.
  Pending pending;
  pending.peer = recvPeer;
  pending.tag = recvTag;
  pending.data = recvData;
  postRecv(pending);
  try {
    doSend(sendPeer, sendTag, sendData);
  } catch (...) {
    withdraw(pending);
    throw;
  }
  waitRecv(pending);
}

void LocalCommunicator::withdraw(Pending& pending) {
  LocalWorld::State& st = *world_.state_;
  if (pending.tookQueued) {
    st.release(std::move(pending.taken));
    return;
  }
  Inbox& inbox = *st.inboxes[static_cast<std::size_t>(rank_)];
  std::unique_lock lock(inbox.mutex);
  inbox.arrived.wait(lock, [&] { return pending.posting.state != PostedRecv::State::kFilling; });
  if (pending.posting.state == PostedRecv::State::kWaiting) {
    pending.channel->second.posted = nullptr;
    inbox.eraseIfIdle(pending.channel);
  }
}

namespace {

[[noreturn]] void rethrowPrefixed(const std::exception_ptr& error, const std::string& prefix) {
  try {
    std::rethrow_exception(error);
  } catch (const CommError& e) {
    throw CommError(prefix + e.what());
  } catch (const RunFailure& e) {
    throw RunFailure(prefix + e.what());
  } catch (const UserError& e) {
    throw UserError(prefix + e.what());
  } catch (const InvariantError& e) {
    throw InvariantError(prefix + e.what());
  } catch (const std::bad_alloc&) {
    // An allocation the checks before the run did not foresee: one line
    // naming the bound (ulimit -v, the cgroup, the machine), exit status 1.
    throw RunFailure(prefix +
                     "out of memory (std::bad_alloc); the memory available to this "
                     "process is " +
                     availableMemory().describe());
  } catch (const std::exception& e) {
    throw std::runtime_error(prefix + e.what());
  } catch (...) {
    throw std::runtime_error(prefix + "unknown exception");
  }
}

std::string describe(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown exception";
  }
}

}  // namespace

void runLocal(int size, const std::function<void(Communicator&)>& body, Seconds timeout) {
  runLocal(size, body, timeout, {});
}

void runLocal(int size, const std::function<void(Communicator&)>& body, Seconds timeout,
              std::vector<std::shared_ptr<BufferOps>> ops) {
  LocalWorld world(size, std::move(ops));
  for (int r = 0; r < size; ++r)
    world.communicator(r).setTimeout(timeout);

  std::mutex errorMutex;
  std::exception_ptr firstError;
  int firstRank = -1;
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(size));
  auto worker = [&](int r) {
    try {
      body(world.communicator(r));
    } catch (...) {
      std::exception_ptr error = std::current_exception();
      {
        // Recorded before the abort, so the errors the abort causes on other
        // ranks can never win.
        std::lock_guard lock(errorMutex);
        errors[static_cast<std::size_t>(r)] = error;
        if (!firstError) {
          firstError = error;
          firstRank = r;
        }
      }
      world.abort(fmt::format("worker {}: {}", r, describe(error)), r);
    }
  };

  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(size));
  try {
    for (int r = 0; r < size; ++r)
      threads.emplace_back(worker, r);
  } catch (const std::exception& e) {
    world.abort(fmt::format("could not start worker threads: {}", e.what()));
    for (auto& t : threads)
      t.join();
    throw;
  }
  for (auto& t : threads)
    t.join();
  // A rank whose body aborted the world itself (a lane's failure, before its
  // error reached this function) caused the others' errors: its error wins
  // over one that reached here first.
  const int aborter = world.abortRank();
  if (aborter >= 0 && errors[static_cast<std::size_t>(aborter)])
    rethrowPrefixed(errors[static_cast<std::size_t>(aborter)], fmt::format("worker {}: ", aborter));
  if (firstError)
    rethrowPrefixed(firstError, fmt::format("worker {}: ", firstRank));
}

}  // namespace strata::exec

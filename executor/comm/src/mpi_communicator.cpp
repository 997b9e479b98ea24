#include "strata/exec/comm/mpi_communicator.h"

#include <fmt/format.h>
#include <mpi.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <climits>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <exception>
#include <thread>
#include <vector>

namespace strata::exec {
namespace {

std::string mpiErrorText(int rc) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  if (MPI_Error_string(rc, text, &length) != MPI_SUCCESS)
    return fmt::format("MPI error {}", rc);
  return std::string(text, static_cast<std::size_t>(length));
}

// MPI counts are ints. The description of the call is only built on failure:
// it costs more than a small message's transfer.
int byteCount(std::size_t bytes, const char* op, int peer, int tag, int rank) {
  if (bytes > static_cast<std::size_t>(INT_MAX))
    throw CommError(fmt::format("{}: {} bytes exceed MPI's int count ({}); split the message",
                                describeCall(op, peer, tag, rank), bytes, INT_MAX));
  return static_cast<int>(bytes);
}

// checkMpi for a call made on behalf of one transfer: the error names it too.
void checkTransfer(int rc, const char* call, const char* op, int peer, int tag, int rank) {
  if (rc != MPI_SUCCESS)
    throw CommError(fmt::format("{}: {} failed: {}", describeCall(op, peer, tag, rank), call,
                                mpiErrorText(rc)));
}

// Polls without yielding this many times before giving the core away: a
// message from a rank on another core usually lands within a few hundred
// polls, while on an oversubscribed node the peer needs our core to progress.
constexpr unsigned kPollsBeforeYield = 64;

// Tags on the heartbeat communicator.
constexpr int kBeatTag = 1;    // empty: "I am alive"
constexpr int kByeTag = 2;     // empty: "I am done; stop watching me"
constexpr int kNoticeTag = 3;  // the reason: "I end the job; stand by"
// Longest reason a notice carries (longer ones are cut).
constexpr int kNoticeBytes = 1024;

double secondsBetween(std::chrono::steady_clock::time_point a,
                      std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

void checkMpi(int rc, const char* call) {
  if (rc != MPI_SUCCESS)
    throw CommError(fmt::format("{} failed: {}", call, mpiErrorText(rc)));
}

// ---- MpiSession --------------------------------------------------------------

MpiSession::MpiSession(int& argc, char**& argv) : uncaughtAtStart_(std::uncaught_exceptions()) {
  int initialized = 0;
  checkMpi(MPI_Initialized(&initialized), "MPI_Initialized");
  if (initialized)
    return;
  int provided = 0;
  checkMpi(MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
  owns_ = true;
}

MpiSession::~MpiSession() {
  if (!owns_)
    return;
  int finalized = 0;
  if (MPI_Finalized(&finalized) != MPI_SUCCESS || finalized)
    return;
  if (std::uncaught_exceptions() > uncaughtAtStart_) {
    std::fprintf(stderr, "strata: an exception ended the MPI session; aborting the job\n");
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();  // a destructor cannot report failure; MPI prints its own
}

void abortMpiJob(const std::string& line, int status) {
  std::fprintf(stderr, "%s\n", line.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, status);
}

// ---- MpiCommunicator ---------------------------------------------------------

struct MpiCommunicator::Transfer {
  const char* op;  // "send" or "recv"
  int peer;
  int tag;
  std::size_t bytes;
  MPI_Request request = MPI_REQUEST_NULL;
};

struct MpiCommunicator::Watcher {
  MPI_Comm comm = MPI_COMM_NULL;  // MPI_COMM_WORLD's duplicate, heartbeats only
  double period = 0;              // s between heartbeats
  double silentAfter = 0;         // s of silence after which a rank is gone
  double poll = 0;                // s between the watcher's looks
  std::thread thread;
  std::atomic<bool> running{false};
  std::mutex mutex;
  std::condition_variable wake;
  bool stop = false;    // the rank is done: say bye, wait for the peers' byes
  double byeLimit = 0;  // s to wait for the peers' byes
};

MpiCommunicator::MpiCommunicator(Seconds heartbeat) : heartbeat_(heartbeat) {
  int initialized = 0;
  checkMpi(MPI_Initialized(&initialized), "MPI_Initialized");
  if (!initialized)
    throw CommError("MpiCommunicator: MPI is not initialised (create an MpiSession first)");
  if (!std::isfinite(heartbeat.value()) || heartbeat.value() < 0)
    throw CommError(
        fmt::format("MpiCommunicator: the heartbeat period must be finite and >= 0 s, "
                    "got {} s",
                    heartbeat.value()));
  checkMpi(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  checkMpi(MPI_Comm_rank(MPI_COMM_WORLD, &rank_), "MPI_Comm_rank");
  checkMpi(MPI_Comm_size(MPI_COMM_WORLD, &size_), "MPI_Comm_size");

  // Both start-up calls are collective and nonblocking, so a rank that never
  // arrives ends this one in CommError, not a hang.
  auto wait = [&](MPI_Request& request, const char* call) {
    const auto deadline = Clock::now() + std::chrono::seconds(int(kDefaultTimeoutSeconds));
    for (int done = 0; !done;) {
      checkMpi(MPI_Test(&request, &done, MPI_STATUS_IGNORE), call);
      if (!done && Clock::now() >= deadline)
        throw CommError(fmt::format("{} on rank {}: not every rank arrived within {:g} s", call,
                                    rank_, kDefaultTimeoutSeconds));
      if (!done)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  };
  // The duplicate inherits MPI_ERRORS_RETURN.
  watcher_ = std::make_unique<Watcher>();
  MPI_Request request = MPI_REQUEST_NULL;
  checkMpi(MPI_Comm_idup(MPI_COMM_WORLD, &watcher_->comm, &request), "MPI_Comm_idup");
  wait(request, "MPI_Comm_idup");

  // Every rank must beat, and watch with the longest period any rank beats
  // at: heartbeats are on only if every rank can and wants them.
  int level = 0;
  checkMpi(MPI_Query_thread(&level), "MPI_Query_thread");
  const bool able = heartbeat.value() > 0 && level >= MPI_THREAD_MULTIPLE;
  double mine[2] = {heartbeat.value(), able ? 0.0 : 1.0}, all[2] = {0, 0};
  checkMpi(MPI_Iallreduce(mine, all, 2, MPI_DOUBLE, MPI_MAX, watcher_->comm, &request),
           "MPI_Iallreduce");
  wait(request, "MPI_Iallreduce (heartbeat periods)");
  if (size_ < 2 || all[1] > 0) {
    heartbeat_ = Seconds(0);
    return;
  }
  Watcher& w = *watcher_;
  heartbeat_ = Seconds(all[0]);
  w.period = heartbeat.value();
  w.silentAfter = kMissedHeartbeats * all[0];
  w.poll = std::clamp(w.period / 4, 0.001, 0.05);
  lastLookNs_.store(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
          .count());
  w.running = true;
  w.thread = std::thread([this] { watch(); });
}

MpiCommunicator::~MpiCommunicator() {
  if (!watcher_ || !watcher_->thread.joinable())
    return;
  {
    std::lock_guard lock(watcher_->mutex);
    watcher_->stop = true;
    watcher_->byeLimit = timeout().value();
  }
  watcher_->wake.notify_all();
  watcher_->thread.join();
}

bool MpiCommunicator::heartbeats() const {
  return watcher_ && watcher_->running.load();
}

bool MpiCommunicator::endSeenElsewhere() const {
  if (aborted())
    return true;
  if (!heartbeats())
    return false;
  const std::int64_t now =
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
  // Read in the order opposite to the watcher's stores: a fresh look implies
  // its stall (if any) is visible.
  const std::int64_t look = lastLookNs_.load();
  const std::int64_t stall = lastStallNs_.load();
  return double(now - look) * 1e-9 > heartbeat_.value() ||
         (stall != 0 && double(now - stall) * 1e-9 < standByLimit());
}

double MpiCommunicator::standByLimit() const {
  return std::max(3.0, kMissedHeartbeats * heartbeat_.value());
}

std::string MpiCommunicator::abortReason() const {
  std::lock_guard lock(reasonMutex_);
  return reason_;
}

bool MpiCommunicator::beginEnding(const std::string& reason, Ending who) {
  std::lock_guard lock(reasonMutex_);
  if (ending_ != Ending::kNo)
    return false;
  ending_ = who;
  reason_ = reason;
  endingSince_ = Clock::now();
  aborted_.store(true, std::memory_order_release);
  return true;
}

void MpiCommunicator::abort(const std::string& reason) {
  if (beginEnding(reason, Ending::kHere))
    endJobHere(reason);
  else
    standByForEnd();
}

void MpiCommunicator::onNotice(int peer, const std::string& reason) {
  if (beginEnding(reason, Ending::kElsewhere))
    return;
  // Two ranks ending the job at once: the lower one prints.
  std::lock_guard lock(reasonMutex_);
  if (ending_ == Ending::kHere && peer < rank_) {
    ending_ = Ending::kElsewhere;
    endingSince_ = Clock::now();
  }
}

void MpiCommunicator::endJobHere(const std::string& reason) {
  if (heartbeats()) {
    // Best effort (these calls go unchecked): the job ends either way, and
    // the notices only keep the other ranks quiet.
    const std::string text = reason.substr(0, kNoticeBytes);
    std::vector<MPI_Request> notices;
    for (int p = 0; p < size_; ++p) {
      if (p == rank_)
        continue;
      MPI_Request request = MPI_REQUEST_NULL;
      if (MPI_Isend(text.data(), static_cast<int>(text.size()), MPI_CHAR, p, kNoticeTag,
                    watcher_->comm, &request) == MPI_SUCCESS)
        notices.push_back(request);
    }
    // Long enough for the peers' watchers to read the notice (and for a
    // lower rank's notice to reach ours) before MPI_Abort's kill.
    const auto start = Clock::now();
    const double window = 3 * watcher_->poll;
    int sent = 0;
    while (secondsBetween(start, Clock::now()) < std::max(window, sent ? 0.0 : 0.5)) {
      if (!sent)
        MPI_Testall(static_cast<int>(notices.size()), notices.data(), &sent, MPI_STATUSES_IGNORE);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    bool yielded = false;
    {
      std::lock_guard lock(reasonMutex_);
      yielded = ending_ == Ending::kElsewhere;
    }
    if (yielded) {
      standByForEnd();
      return;
    }
  }
  finish(reason);
}

void MpiCommunicator::standByForEnd() {
  for (;;) {
    Clock::time_point since;
    {
      std::lock_guard lock(reasonMutex_);
      since = endingSince_;
    }
    if (secondsBetween(since, Clock::now()) >= standByLimit())
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  finish(abortReason());
}

void MpiCommunicator::finish(const std::string& reason) {
  if (!printed_.exchange(true)) {
    std::fprintf(stderr, "strata: error: %s\n", reason.c_str());
    std::fflush(stderr);
  }
  MPI_Abort(MPI_COMM_WORLD, 1);
}

void MpiCommunicator::watch() {
  Watcher& w = *watcher_;
  const auto k = static_cast<std::size_t>(size_);
  const auto me = static_cast<std::size_t>(rank_);
  std::vector<MPI_Request> inbound(k, MPI_REQUEST_NULL), beats(k, MPI_REQUEST_NULL);
  std::vector<std::array<char, kNoticeBytes>> inbox(k);
  std::vector<Clock::time_point> heard(k, Clock::now());
  std::vector<char> gone(k, 0);  // said bye (done), or this rank
  gone[me] = 1;
  std::vector<int> indices(k);
  std::vector<MPI_Status> statuses(k);

  // A heartbeat call that fails ends the job with its error: going quiet
  // instead would have the peers blame this rank's silence.
  auto check = [&](int rc, const char* call) {
    if (rc == MPI_SUCCESS)
      return true;
    const std::string reason =
        fmt::format("heartbeats on rank {}: {} failed: {}", rank_, call, mpiErrorText(rc));
    if (beginEnding(reason, Ending::kHere))
      endJobHere(reason);
    return false;
  };
  auto post = [&](std::size_t p) {
    return check(MPI_Irecv(inbox[p].data(), kNoticeBytes, MPI_CHAR, static_cast<int>(p),
                           MPI_ANY_TAG, w.comm, &inbound[p]),
                 "MPI_Irecv");
  };
  for (std::size_t p = 0; p < k; ++p)
    if (!gone[p] && !post(p))
      return;

  auto nextBeat = Clock::now();
  auto lastLook = Clock::now();
  bool saidBye = false;
  Clock::time_point byeAt{};
  for (;;) {
    bool stopping = false;
    double byeLimit = 0;
    {
      std::unique_lock lock(w.mutex);
      w.wake.wait_for(lock, std::chrono::duration<double>(w.poll), [&] { return w.stop; });
      stopping = w.stop;
      byeLimit = w.byeLimit;
    }
    const auto now = Clock::now();
    const auto nowNs =
        std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count();
    // This thread not running for a period (an overloaded machine, this
    // process stopped and continued) is not the peers' silence. The stall is
    // noted before the look, for endSeenElsewhere.
    if (secondsBetween(lastLook, now) > w.period) {
      lastStallNs_.store(nowNs);
      std::fill(heard.begin(), heard.end(), now);
    }
    lastLook = now;
    lastLookNs_.store(nowNs);

    // What arrived: any message proves its sender alive.
    for (int round = 0; round < 8; ++round) {
      int count = 0;
      const int rc = MPI_Testsome(static_cast<int>(k), inbound.data(), &count, indices.data(),
                                  statuses.data());
      if (!check(rc, "MPI_Testsome"))
        return;
      if (count == MPI_UNDEFINED || count == 0)
        break;
      for (int i = 0; i < count; ++i) {
        const auto p = static_cast<std::size_t>(indices[static_cast<std::size_t>(i)]);
        const MPI_Status& status = statuses[static_cast<std::size_t>(i)];
        heard[p] = now;
        if (status.MPI_TAG == kByeTag) {
          gone[p] = 1;
          continue;
        }
        if (status.MPI_TAG == kNoticeTag) {
          int length = 0;
          MPI_Get_count(&status, MPI_CHAR, &length);
          onNotice(static_cast<int>(p),
                   std::string(inbox[p].data(), static_cast<std::size_t>(std::max(length, 0))));
        }
        if (!post(p))
          return;
      }
    }

    // Done: say bye once, then wait for every peer's bye, so no rank enters
    // MPI_Finalize (which would wait for a stopped peer for ever) while a peer
    // may still stop unseen.
    if (stopping && !saidBye) {
      for (std::size_t p = 0; p < k; ++p) {
        if (p == me)
          continue;
        if (beats[p] != MPI_REQUEST_NULL)
          MPI_Request_free(&beats[p]);
        if (!check(MPI_Isend(nullptr, 0, MPI_CHAR, static_cast<int>(p), kByeTag, w.comm, &beats[p]),
                   "MPI_Isend"))
          return;
      }
      saidBye = true;
      byeAt = now;
    }
    if (saidBye && std::all_of(gone.begin(), gone.end(), [](char g) { return g != 0; }))
      break;

    // Heartbeats out, at most one in flight per peer (a stopped peer's queue
    // does not grow).
    if (!saidBye && now >= nextBeat) {
      for (std::size_t p = 0; p < k; ++p) {
        if (gone[p])
          continue;
        if (beats[p] != MPI_REQUEST_NULL) {
          int done = 0;
          if (!check(MPI_Test(&beats[p], &done, MPI_STATUS_IGNORE), "MPI_Test"))
            return;
          if (!done)
            continue;
        }
        if (!check(
                MPI_Isend(nullptr, 0, MPI_CHAR, static_cast<int>(p), kBeatTag, w.comm, &beats[p]),
                "MPI_Isend"))
          return;
      }
      nextBeat = now + std::chrono::duration_cast<Clock::duration>(
                           std::chrono::duration<double>(w.period));
    }

    if (!aborted()) {
      std::size_t silent = k;
      double longest = 0;
      for (std::size_t p = 0; p < k; ++p) {
        const double quiet = secondsBetween(heard[p], now);
        if (!gone[p] && quiet > longest) {
          longest = quiet;
          silent = p;
        }
      }
      if (silent < k && longest > w.silentAfter) {
        const std::string reason = fmt::format(
            "rank {} went silent: no heartbeat for {:.1f} s (its process is stopped, frozen or "
            "dead)",
            silent, longest);
        // The lowest rank still heard from reports; the others stand by.
        std::size_t reporter = me;
        for (std::size_t p = 0; p < me; ++p) {
          if (!gone[p] && secondsBetween(heard[p], now) <= w.silentAfter) {
            reporter = p;
            break;
          }
        }
        if (reporter == me) {
          if (beginEnding(reason, Ending::kHere))
            endJobHere(reason);
        } else {
          beginEnding(reason, Ending::kElsewhere);
        }
      } else if (saidBye && secondsBetween(byeAt, now) > byeLimit) {
        std::size_t late = 0;
        while (late < k && gone[late])
          ++late;
        const std::string reason =
            fmt::format("rank {} did not finish within {:g} s of rank {} (alive, but stuck?)", late,
                        byeLimit, rank_);
        if (beginEnding(reason, Ending::kHere))
          endJobHere(reason);
      }
    }

    // Told to stand by, and nothing ended the job: end it from here.
    bool overdue = false;
    {
      std::lock_guard lock(reasonMutex_);
      overdue =
          ending_ == Ending::kElsewhere && secondsBetween(endingSince_, now) >= standByLimit();
    }
    if (overdue)
      finish(abortReason());
  }

  // Withdraw what is still posted (best effort: MPI_Finalize follows).
  for (std::size_t p = 0; p < k; ++p) {
    if (inbound[p] != MPI_REQUEST_NULL) {
      MPI_Cancel(&inbound[p]);
      MPI_Request_free(&inbound[p]);
    }
    if (beats[p] != MPI_REQUEST_NULL)
      MPI_Request_free(&beats[p]);
  }
  w.running = false;
}

void MpiCommunicator::complete(Transfer* transfers, int count) {
  const double limit = std::min(timeout().value(), 1e9);
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(limit));
  MPI_Request requests[2];
  int indices[2];
  MPI_Status statuses[2];
  STRATA_ENFORCE(count >= 1 && count <= 2);

  auto describeTransfer = [&](const Transfer& t) {
    return describeCall(t.op, t.peer, t.tag, rank_);
  };
  // Cancels what is still pending so MPI does not write into a buffer the
  // caller is about to free; what cannot be cancelled in 100 ms is released
  // (the communicator is unusable after a timeout anyway). Best effort, so
  // these calls go unchecked: we are about to throw the error that matters,
  // and a failing cleanup must not replace it.
  auto cancelPending = [&] {
    for (int i = 0; i < count; ++i) {
      MPI_Request& request = transfers[i].request;
      if (request == MPI_REQUEST_NULL)
        continue;
      MPI_Cancel(&request);
      const auto giveUp = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
      int done = 0;
      while (!done && std::chrono::steady_clock::now() < giveUp) {
        if (MPI_Test(&request, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS)
          break;
      }
      if (!done && request != MPI_REQUEST_NULL)
        MPI_Request_free(&request);
    }
  };
  auto firstPending = [&]() -> const Transfer& {
    // A stuck receive says more than a stuck send: name it first.
    for (int i = 0; i < count; ++i) {
      if (transfers[i].request != MPI_REQUEST_NULL && std::string_view(transfers[i].op) == "recv")
        return transfers[i];
    }
    for (int i = 0; i < count; ++i) {
      if (transfers[i].request != MPI_REQUEST_NULL)
        return transfers[i];
    }
    return transfers[0];
  };

  int pending = 0;
  for (int i = 0; i < count; ++i)
    pending += transfers[i].request != MPI_REQUEST_NULL ? 1 : 0;
  unsigned polls = 0;
  while (pending > 0) {
    for (int i = 0; i < count; ++i)
      requests[i] = transfers[i].request;
    int completed = 0;
    const int rc = MPI_Testsome(count, requests, &completed, indices, statuses);
    if (rc != MPI_SUCCESS && rc != MPI_ERR_IN_STATUS) {
      cancelPending();
      throw CommError(fmt::format("{}: MPI_Testsome failed: {}", describeTransfer(firstPending()),
                                  mpiErrorText(rc)));
    }
    if (completed == MPI_UNDEFINED)
      completed = 0;
    for (int k = 0; k < completed; ++k) {
      Transfer& t = transfers[indices[k]];
      t.request = MPI_REQUEST_NULL;
      --pending;
      const MPI_Status& status = statuses[k];
      if (rc == MPI_ERR_IN_STATUS && status.MPI_ERROR != MPI_SUCCESS) {
        cancelPending();
        int errorClass = 0;
        MPI_Error_class(status.MPI_ERROR, &errorClass);
        if (errorClass == MPI_ERR_TRUNCATE)
          throw CommError(fmt::format("{}: size mismatch: expected {} bytes, got a larger message",
                                      describeTransfer(t), t.bytes));
        throw CommError(fmt::format("{}: {} failed: {}", describeTransfer(t),
                                    std::string_view(t.op) == "recv" ? "MPI_Irecv" : "MPI_Isend",
                                    mpiErrorText(status.MPI_ERROR)));
      }
      if (std::string_view(t.op) == "recv") {
        int received = 0;
        checkMpi(MPI_Get_count(&status, MPI_BYTE, &received), "MPI_Get_count");
        if (static_cast<std::size_t>(received) != t.bytes) {
          cancelPending();
          throw CommError(fmt::format("{}: size mismatch: expected {} bytes, got a {}-byte message",
                                      describeTransfer(t), t.bytes, received));
        }
      }
    }
    if (pending == 0)
      break;
    if (aborted()) {
      const std::string what = describeTransfer(firstPending());
      cancelPending();
      throw CommError(fmt::format("{}: aborted: {}", what, abortReason()));
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      const std::string what = describeTransfer(firstPending());
      cancelPending();
      throw CommError(
          fmt::format("{}: timed out after {:g} s waiting for the peer", what, timeout().value()));
    }
    if (++polls >= kPollsBeforeYield)
      std::this_thread::yield();
  }
}

void MpiCommunicator::doSend(int peer, int tag, std::span<const std::byte> data) {
  if (aborted())
    throw CommError(
        fmt::format("{}: aborted: {}", describeCall("send", peer, tag, rank_), abortReason()));
  Transfer t{"send", peer, tag, data.size()};
  const int n = byteCount(data.size(), "send", peer, tag, rank_);
  checkTransfer(MPI_Isend(data.data(), n, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &t.request),
                "MPI_Isend", "send", peer, tag, rank_);
  complete(&t, 1);
}

void MpiCommunicator::doRecv(int peer, int tag, std::span<std::byte> data) {
  if (aborted())
    throw CommError(
        fmt::format("{}: aborted: {}", describeCall("recv", peer, tag, rank_), abortReason()));
  Transfer t{"recv", peer, tag, data.size()};
  const int n = byteCount(data.size(), "recv", peer, tag, rank_);
  checkTransfer(MPI_Irecv(data.data(), n, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &t.request),
                "MPI_Irecv", "recv", peer, tag, rank_);
  complete(&t, 1);
}

void MpiCommunicator::doSendRecv(int sendPeer, int sendTag, std::span<const std::byte> sendData,
                                 int recvPeer, int recvTag, std::span<std::byte> recvData) {
  if (aborted())
    throw CommError(fmt::format("{}: aborted: {}", describeCall("recv", recvPeer, recvTag, rank_),
                                abortReason()));
  Transfer t[2] = {{"recv", recvPeer, recvTag, recvData.size()},
                   {"send", sendPeer, sendTag, sendData.size()}};
  const int recvCount = byteCount(recvData.size(), "recv", recvPeer, recvTag, rank_);
  const int sendCount = byteCount(sendData.size(), "send", sendPeer, sendTag, rank_);
  // The receive goes first so the peer's data has somewhere to land while our
  // own send waits for its receiver.
  checkTransfer(MPI_Irecv(recvData.data(), recvCount, MPI_BYTE, recvPeer, recvTag, MPI_COMM_WORLD,
                          &t[0].request),
                "MPI_Irecv", "recv", recvPeer, recvTag, rank_);
  const int rc = MPI_Isend(sendData.data(), sendCount, MPI_BYTE, sendPeer, sendTag, MPI_COMM_WORLD,
                           &t[1].request);
  if (rc != MPI_SUCCESS) {
    MPI_Cancel(&t[0].request);
    MPI_Request_free(&t[0].request);
    checkTransfer(rc, "MPI_Isend", "send", sendPeer, sendTag, rank_);
  }
  complete(t, 2);
}

}  // namespace strata::exec

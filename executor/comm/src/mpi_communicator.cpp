#include "strata/exec/comm/mpi_communicator.h"

#include <fmt/format.h>
#include <mpi.h>

#include <chrono>
#include <climits>
#include <cstdio>
#include <exception>
#include <thread>

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
  checkMpi(MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
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

// ---- MpiCommunicator ---------------------------------------------------------

struct MpiCommunicator::Transfer {
  const char* op;  // "send" or "recv"
  int peer;
  int tag;
  std::size_t bytes;
  MPI_Request request = MPI_REQUEST_NULL;
};

MpiCommunicator::MpiCommunicator() {
  int initialized = 0;
  checkMpi(MPI_Initialized(&initialized), "MPI_Initialized");
  if (!initialized)
    throw CommError("MpiCommunicator: MPI is not initialised (create an MpiSession first)");
  checkMpi(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  checkMpi(MPI_Comm_rank(MPI_COMM_WORLD, &rank_), "MPI_Comm_rank");
  checkMpi(MPI_Comm_size(MPI_COMM_WORLD, &size_), "MPI_Comm_size");
}

std::string MpiCommunicator::abortReason() const {
  std::lock_guard lock(reasonMutex_);
  return reason_;
}

void MpiCommunicator::abort(const std::string& reason) {
  {
    std::lock_guard lock(reasonMutex_);
    if (!aborted_.load(std::memory_order_relaxed)) {
      reason_ = reason;
      aborted_.store(true, std::memory_order_release);
    }
  }
  std::fprintf(stderr, "strata: rank %d aborting: %s\n", rank_, reason.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
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

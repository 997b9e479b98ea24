#include "strata/exec/comm/communicator.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <initializer_list>

#if defined(__unix__) || defined(__APPLE__)
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#endif
#if defined(__linux__)
#include <sys/prctl.h>
#endif

#include "strata/exec/comm/mpi_communicator.h"

namespace strata::exec {

std::string describeCall(const char* op, int peer, int tag, int rank) {
  const bool inbound = std::string_view(op) == "recv";
  return fmt::format("{} {} peer {} tag {} on rank {}", op, inbound ? "from" : "to", peer, tag,
                     rank);
}

void Communicator::checkPeerAndTag(const char* op, int peer, int tag) const {
  if (peer < 0 || peer >= size())
    throw CommError(
        fmt::format("{}: peer out of range [0, {})", describeCall(op, peer, tag, rank()), size()));
  if (tag < 0 || tag > kMaxTag)
    throw CommError(
        fmt::format("{}: tag out of range [0, {}]", describeCall(op, peer, tag, rank()), kMaxTag));
}

std::span<float> Communicator::scratch(std::size_t elements) {
  if (!scratch_)
    scratch_ = std::make_unique<OpsBuffer>(ops());
  return scratch_->first(elements);
}

void Communicator::send(int peer, int tag, std::span<const std::byte> data) {
  checkPeerAndTag("send", peer, tag);
  doSend(peer, tag, data);
}

void Communicator::recv(int peer, int tag, std::span<std::byte> data) {
  checkPeerAndTag("recv", peer, tag);
  doRecv(peer, tag, data);
}

void Communicator::sendRecv(int sendPeer, int sendTag, std::span<const std::byte> sendData,
                            int recvPeer, int recvTag, std::span<std::byte> recvData) {
  checkPeerAndTag("send", sendPeer, sendTag);
  checkPeerAndTag("recv", recvPeer, recvTag);
  doSendRecv(sendPeer, sendTag, sendData, recvPeer, recvTag, recvData);
}

void Communicator::send(int peer, int tag, std::span<const float> data) {
  send(peer, tag, std::as_bytes(data));
}

void Communicator::recv(int peer, int tag, std::span<float> data) {
  recv(peer, tag, std::as_writable_bytes(data));
}

void Communicator::sendRecv(int sendPeer, int sendTag, std::span<const float> sendData,
                            int recvPeer, int recvTag, std::span<float> recvData) {
  sendRecv(sendPeer, sendTag, std::as_bytes(sendData), recvPeer, recvTag,
           std::as_writable_bytes(recvData));
}

void Communicator::setTimeout(Seconds timeout) {
  if (!(timeout.value() > 0.0))
    throw OptionError("timeout", fmt::format("must be > 0 s, got {} s", timeout.value()));
  timeout_ = timeout;
}

void runOrAbort(Communicator& comm, const std::function<void(Communicator&)>& body) {
  try {
    body(comm);
  } catch (const std::exception& e) {
    comm.abort(fmt::format("worker {}: {}", comm.rank(), e.what()));
    throw;
  } catch (...) {
    comm.abort(fmt::format("worker {}: unknown exception", comm.rank()));
    throw;
  }
}

namespace {

// Mistakes travel as a length, then the text (if any); long ones are cut.
constexpr std::size_t kMaxMistakeBytes = 4096;

void sendText(Communicator& comm, int peer, const std::string& text) {
  const std::uint64_t length = std::min(text.size(), kMaxMistakeBytes);
  comm.send(peer, kAgreementTag, std::as_bytes(std::span(&length, 1)));
  if (length > 0)
    comm.send(peer, kAgreementTag, std::as_bytes(std::span(text.data(), length)));
}

std::string recvText(Communicator& comm, int peer) {
  std::uint64_t length = 0;
  comm.recv(peer, kAgreementTag, std::as_writable_bytes(std::span(&length, 1)));
  if (length > kMaxMistakeBytes)
    throw CommError(fmt::format("{}: a mistake of {} bytes (at most {} expected)",
                                describeCall("recv", peer, kAgreementTag, comm.rank()), length,
                                kMaxMistakeBytes));
  std::string text(length, '\0');
  if (length > 0)
    comm.recv(peer, kAgreementTag, std::as_writable_bytes(std::span(text.data(), text.size())));
  return text;
}

}  // namespace

std::string agreeOnMistakes(Communicator& comm, const std::string& mistake) {
  // Cut to what a message carries, so every rank returns the same text.
  const std::string own = mistake.substr(0, kMaxMistakeBytes);
  if (comm.size() == 1)
    return own;
  if (comm.rank() != 0) {
    sendText(comm, 0, own);
    return recvText(comm, 0);
  }
  // Rank 0 hears every rank before it answers, so no rank leaves early.
  std::string verdict = own;
  for (int r = 1; r < comm.size(); ++r) {
    const std::string theirs = recvText(comm, r);
    if (verdict.empty() && !theirs.empty())
      verdict = fmt::format("rank {}: {}", r, theirs).substr(0, kMaxMistakeBytes);
  }
  for (int r = 1; r < comm.size(); ++r)
    sendText(comm, r, verdict);
  return verdict;
}

void stopThisProcessForTest(Seconds guard) {
#if defined(__unix__) || defined(__APPLE__)
  const pid_t self = getpid();
  const pid_t child = fork();
  if (child == 0) {
    // The guard: only async-signal-safe calls after fork() in a threaded
    // process. It dies with its parent (Linux), and checks that its parent is
    // still the stopped process before it kills anything.
#if defined(__linux__)
    prctl(PR_SET_PDEATHSIG, SIGKILL);
#endif
    const auto wait = static_cast<unsigned>(std::max(1.0, guard.value()));
    for (unsigned s = 0; s < wait; ++s) {
      if (getppid() != self)
        _exit(0);
      sleep(1);
    }
    if (getppid() == self)
      kill(self, SIGKILL);
    _exit(0);
  }
  raise(SIGSTOP);
  if (child > 0) {  // continued: the guard is no longer wanted
    kill(child, SIGKILL);
    waitpid(child, nullptr, 0);
  }
#else
  (void)guard;
  throw RunFailure("stopping a process for a test needs POSIX signals");
#endif
}

bool launchedByMpiexec() {
  // Open MPI, PMIx (Open MPI 5, Slurm), MPICH / Intel MPI (Hydra's PMI).
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK"}) {
    if (std::getenv(name) != nullptr)
      return true;
  }
  return false;
}

namespace {
int envCount(std::initializer_list<const char*> names) {
  for (const char* name : names)
    if (const char* v = std::getenv(name); v && *v) {
      char* end = nullptr;
      const long value = std::strtol(v, &end, 10);
      if (end && *end == '\0' && value >= 0 && value < (1L << 30))
        return static_cast<int>(value);
    }
  return -1;
}
}  // namespace

int localRankFromLauncher() {
  return envCount({"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "PMI_LOCAL_RANK",
                   "SLURM_LOCALID", "MV2_COMM_WORLD_LOCAL_RANK"});
}

int localSizeFromLauncher() {
  return envCount({"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "PMI_LOCAL_SIZE",
                   "MV2_COMM_WORLD_LOCAL_SIZE"});
}

}  // namespace strata::exec

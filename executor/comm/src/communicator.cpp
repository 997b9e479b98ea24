#include "strata/exec/comm/communicator.h"

#include <fmt/format.h>

#include <cstdlib>
#include <exception>

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

bool launchedByMpiexec() {
  // Open MPI, PMIx (Open MPI 5, Slurm), MPICH / Intel MPI (Hydra's PMI).
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK"}) {
    if (std::getenv(name) != nullptr)
      return true;
  }
  return false;
}

}  // namespace strata::exec

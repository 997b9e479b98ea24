// The start of a command run as MPI ranks (`strata run`, `allreduce`,
// `calibrate --overlap-only` under mpirun): every rank reads its options, then
// the ranks agree on the mistakes, so that all end together with one line.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "strata/exec/comm/communicator.h"
#include "strata/exec/comm/mpi_communicator.h"

namespace strata::cli {

// Collective over `comm`. Unless `mistake` is already set (a wrong command
// line), runs prepare(comm) on this rank: a UserError it throws is this
// rank's mistake. The ranks then agree (exec::agreeOnMistakes). Returns 0 to
// go on; otherwise rank 0 has printed "strata: error: <verdict>" and every
// rank gets kUserErrorExit (2). A rank that fails to arrive aborts the job
// (exec::runOrAbort).
int startRanks(exec::Communicator& comm, std::string mistake,
               const std::function<void(exec::Communicator&)>& prepare);

#ifdef STRATA_HAVE_MPI
// Opens the world's communicator into `world` (inside an MpiSession). A
// failure ends the job with one line and status 1: returns false, and the
// command returns kRunFailureExit.
bool openWorld(std::optional<exec::MpiCommunicator>& world,
               Seconds heartbeat = Seconds(exec::MpiCommunicator::kDefaultHeartbeatSeconds));
#endif

}  // namespace strata::cli

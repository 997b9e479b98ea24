// One MPI rank fails mid-run while the others wait for it in an allreduce
// with the default 60 s timeout; ctest (check_run.cmake) expects the whole job
// to end non-zero within seconds. `comm_mpi_fault MODE [HEARTBEAT_S]`, MODE:
//   throw  rank 1 throws: "strata: error: worker 1: injected failure on rank 1"
//   stop   rank 1's process stops (SIGSTOP): the heartbeats end the job
//   kill   rank 1 dies (SIGKILL): mpirun ends the job
//   exit   rank 1 exits with status 3 without MPI_Finalize: mpirun ends the job
#include <csignal>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "strata/exec/comm/collectives.h"
#include "strata/exec/comm/mpi_communicator.h"

using namespace strata;
using namespace strata::exec;

int main(int argc, char** argv) {
  MpiSession session(argc, argv);
  const std::string mode = argc > 1 ? argv[1] : "throw";
  const double heartbeat =
      argc > 2 ? std::atof(argv[2]) : MpiCommunicator::kDefaultHeartbeatSeconds;
  MpiCommunicator comm{Seconds(heartbeat)};
  runOrAbort(comm, [&](Communicator& c) {
    std::vector<float> data(4096, 1.0f);
    allReduceRing(c, data);
    if (c.rank() == 1) {
      if (mode == "throw")
        throw std::runtime_error("injected failure on rank 1");
      if (mode == "stop")
        stopThisProcessForTest(Seconds(60));
      if (mode == "kill")
        std::raise(SIGKILL);
      if (mode == "exit")
        std::_Exit(3);
    }
    allReduceRing(c, data);  // the others wait here for rank 1
  });
  return 0;
}

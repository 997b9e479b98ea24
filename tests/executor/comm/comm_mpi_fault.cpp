// One MPI rank fails mid-run; check_mpi_fault.cmake expects the whole job to
// end non-zero within 10 s with this rank's error printed, although the other
// ranks are blocked in an allreduce with a 60 s timeout.
#include <stdexcept>
#include <vector>

#include "strata/exec/comm/collectives.h"
#include "strata/exec/comm/mpi_communicator.h"

using namespace strata::exec;

int main(int argc, char** argv) {
  MpiSession session(argc, argv);
  MpiCommunicator comm;
  runOrAbort(comm, [](Communicator& c) {
    std::vector<float> data(4096, 1.0f);
    allreduceRing(c, data);
    if (c.rank() == 1)
      throw std::runtime_error("injected failure on rank 1");
    allreduceRing(c, data);  // the others wait here for rank 1
  });
  return 0;
}

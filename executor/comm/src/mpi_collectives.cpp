// The MPI library's own allreduce, as the baseline for the bench.
#include <fmt/format.h>
#include <mpi.h>

#include <climits>

#include "strata/exec/comm/collectives.h"

namespace strata::exec {

void mpiAllreduceBaseline(MpiCommunicator& comm, std::span<float> data) {
  (void)comm;  // taken so that callers prove MPI is initialised
  if (data.size() > static_cast<std::size_t>(INT_MAX))
    throw CommError(fmt::format("MPI_Allreduce: {} floats exceed MPI's int count", data.size()));
  checkMpi(MPI_Allreduce(MPI_IN_PLACE, data.data(), static_cast<int>(data.size()), MPI_FLOAT,
                         MPI_SUM, MPI_COMM_WORLD),
           "MPI_Allreduce");
}

}  // namespace strata::exec

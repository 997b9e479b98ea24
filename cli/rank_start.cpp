#include "rank_start.h"

#include <iostream>

#include "flags.h"
#include "strata/model/error.h"

namespace strata::cli {

int startRanks(exec::Communicator& comm, std::string mistake,
               const std::function<void(exec::Communicator&)>& prepare) {
  std::string verdict;
  exec::runOrAbort(comm, [&](exec::Communicator& c) {
    if (mistake.empty()) {
      try {
        prepare(c);
      } catch (const UserError& e) {
        mistake = e.what();
      }
    }
    verdict = exec::agreeOnMistakes(c, mistake);
  });
  if (verdict.empty())
    return 0;
  if (comm.rank() == 0)
    std::cerr << "strata: error: " << verdict << "\n";
  return kUserErrorExit;
}

#ifdef STRATA_HAVE_MPI
bool openWorld(std::optional<exec::MpiCommunicator>& world, Seconds heartbeat) {
  try {
    world.emplace(heartbeat);
    return true;
  } catch (const std::exception& e) {
    exec::abortMpiJob(std::string("strata: error: ") + e.what(), kRunFailureExit);
    return false;
  }
}
#endif

}  // namespace strata::cli

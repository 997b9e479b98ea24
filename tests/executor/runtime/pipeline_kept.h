// Which of one rank's parameters a run keeps current: every one, but in a
// pipeline only its stage's layers' and the copy of a table tied to one of
// them (the rank's Model holds the whole network, the rest as initialised).
// Shared by runtime_test (threads) and runtime_mpi_test (mpirun).
#pragma once

#include <algorithm>
#include <vector>

#include "strata/exec/nn/model.h"
#include "strata/model/plan.h"

namespace strata::test {

// Per element of `rank`'s parameters, at its tensor-parallel share of the
// plan's tp: 1 when the run keeps it current.
inline std::vector<char> keptByRank(const Network& net, const Plan& plan, int rank) {
  const int tp = std::max(1, plan.scenario.options.tp);
  nn::ModelOptions o;
  o.initializeParameters = false;
  if (tp > 1)
    o.tensorParallel = {tp, rank % tp};
  const nn::Model share(net, o);
  std::vector<char> kept(static_cast<size_t>(share.parameterCount()), 1);
  if (plan.scenario.options.pp <= 1)
    return kept;
  std::fill(kept.begin(), kept.end(), 0);
  std::vector<char> runs(net.layers.size(), 0);
  for (const auto& t : plan.tasks)
    if (t.kind == TaskKind::kCompute && t.worker == rank)
      runs[static_cast<size_t>(t.layer)] = 1;
  auto keep = [&](int64_t first, int64_t count) { std::fill_n(kept.begin() + first, count, 1); };
  for (size_t l = 0; l < net.layers.size(); ++l) {
    if (!runs[l])
      continue;
    keep(share.paramBlock(static_cast<int>(l)).offset,
         share.paramBlock(static_cast<int>(l)).size());
    if (const int owner = net.layers[l].spec.tiedTo;
        owner >= 0 && !runs[static_cast<size_t>(owner)])
      keep(share.paramBlock(owner).offset, share.tokenTableElements(owner));
  }
  return kept;
}

}  // namespace strata::test

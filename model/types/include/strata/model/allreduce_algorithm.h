#pragma once

#include <string>
#include <string_view>

namespace strata {

// kAuto is not an algorithm: it stands for the candidate with the least
// predicted time for each buffer (chooseAllreduce), as NCCL's tuner picks.
enum class AllreduceAlgorithm {
  kNaive,
  kRing,
  kHalvingDoubling,
  kDirect,
  kHierarchical,
  kTree,
  kAuto
};
std::string_view toString(AllreduceAlgorithm algorithm);
// Parses "naive", "ring", "halving-doubling", "direct", "hierarchical",
// "tree", "auto"; throws OptionError.
AllreduceAlgorithm parseAllreduceAlgorithm(std::string_view text, const std::string& option);

}  // namespace strata

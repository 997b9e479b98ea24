#include "strata/model/allreduce_algorithm.h"

#include <string>

#include "strata/model/error.h"

namespace strata {

std::string_view toString(AllreduceAlgorithm algorithm) {
  switch (algorithm) {
    case AllreduceAlgorithm::kNaive:
      return "naive";
    case AllreduceAlgorithm::kRing:
      return "ring";
    case AllreduceAlgorithm::kHalvingDoubling:
      return "halving-doubling";
    case AllreduceAlgorithm::kDirect:
      return "direct";
    case AllreduceAlgorithm::kHierarchical:
      return "hierarchical";
    case AllreduceAlgorithm::kTree:
      return "tree";
    case AllreduceAlgorithm::kAuto:
      return "auto";
  }
  return "?";
}

AllreduceAlgorithm parseAllreduceAlgorithm(std::string_view text, const std::string& option) {
  for (auto a :
       {AllreduceAlgorithm::kNaive, AllreduceAlgorithm::kRing, AllreduceAlgorithm::kHalvingDoubling,
        AllreduceAlgorithm::kDirect, AllreduceAlgorithm::kHierarchical, AllreduceAlgorithm::kTree,
        AllreduceAlgorithm::kAuto})
    if (toString(a) == text)
      return a;
  throw OptionError(option, "unknown allreduce algorithm '" + std::string(text) +
                                "' (expected auto, ring, hierarchical, tree, halving-doubling, "
                                "direct or naive)");
}

}  // namespace strata

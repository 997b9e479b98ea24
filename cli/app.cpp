// The `strata` application as every reader of its command line builds it:
// main, the command-line fuzzer and the man page and completion generator.
#include "app.h"

#include "strata_version.h"

namespace strata::cli {

void describeApp(CLI::App& app) {
  app.description("strata: how fast will this network train on this cluster with this strategy?");
  app.name("strata");
  app.require_subcommand(1);
  app.set_version_flag("--version", versionText());
  app.footer(
      "Examples:\n"
      "  strata list\n"
      "  strata describe alexnet-owt\n"
      "  strata predict --network alexnet-owt --cluster k20x8-pcie --strategy owt-b --workers 8\n"
      "  strata compare configs/experiments/owt-k20.yaml\n"
      "  strata compare --network resnet50 --cluster dgx-h100 --strategies ring,ps --workers "
      "8,16,64\n"
      "  strata sweep --networks alexnet-owt,vgg16 --clusters k20x8-pcie --workers 1,2,4,8 "
      "--format csv\n"
      "  strata allreduce -k 4 -b 1KiB -e 64MiB -f 4\n"
      "Networks and clusters are preset names (strata list) or paths to YAML files "
      "(docs/configs.md).");
}

std::string versionText() {
  return std::string("strata ") + kVersion + " (git " + kGitRevision + ")";
}

}  // namespace strata::cli

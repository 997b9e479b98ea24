// The `strata` command: what-if questions about distributed training.
//
// Every user mistake ends as one line "strata: error: ..." naming the file,
// line and key or the option, with exit status 2; a failure at run time (a
// worker failed, a peer timed out) is one such line with status 1, and so is
// a bug ("strata: internal error: ...").
#include <iostream>
#include <string>
#include <vector>

#include "commands.h"
#include "flags.h"
#include "strata/model/error.h"
#include "strata_version.h"

namespace strata::cli {
namespace {

int run(int argc, char** argv) {
  CLI::App app{"strata: how fast will this network train on this cluster with this strategy?"};
  app.require_subcommand(1);
  app.set_version_flag("--version",
                       std::string("strata ") + kVersion + " (git " + kGitRevision + ")");
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

  const std::vector<Command> commands = addAllCommands(app, Process{&argc, &argv});

  // CLI11 reports an unknown command only as "a subcommand is required".
  if (argc > 1 && argv[1][0] != '-') {
    const std::string name = argv[1];
    std::string known;
    bool found = false;
    for (const auto& c : commands) {
      found = found || c.app->get_name() == name;
      known += (known.empty() ? "" : ", ") + c.app->get_name();
    }
    if (!found)
      throw OptionError(name, "unknown command (expected one of " + known + "; see strata --help)");
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    const std::string message = std::string(e.what()) + " (see strata --help)";
    if (argc > 1 && std::string(argv[1]) == "run")
      return reportRunMistake(Process{&argc, &argv}, message);  // one line under mpirun too
    if (argc > 1 && std::string(argv[1]) == "allreduce")
      return reportAllreduceMistake(Process{&argc, &argv}, message);
    if (argc > 1 && std::string(argv[1]) == "calibrate")
      return reportCalibrateMistake(Process{&argc, &argv}, message);
    std::cerr << "strata: error: " << message << "\n";
    return kUserErrorExit;
  }
  for (const auto& c : commands)
    if (c.app->parsed())
      return c.run();
  return kUserErrorExit;  // unreachable: CLI11 requires one subcommand
}

}  // namespace
}  // namespace strata::cli

int main(int argc, char** argv) {
  try {
    return strata::cli::run(argc, argv);
  } catch (const strata::UserError& e) {
    std::cerr << "strata: error: " << e.what() << "\n";
    return strata::cli::kUserErrorExit;
  } catch (const strata::RunFailure& e) {
    std::cerr << "strata: error: " << e.what() << "\n";
    return strata::cli::kRunFailureExit;
  } catch (const std::exception& e) {
    std::cerr << "strata: internal error: " << e.what() << "\n";
    return 1;
  }
}

// The `strata` command: what-if questions about distributed training.
//
// Every user mistake ends as one line "strata: error: ..." naming the file,
// line and key or the option, with exit status 2; a failure at run time (a
// worker failed, a peer timed out) is one such line with status 1, and so is
// a bug ("strata: internal error: ...").
//
// Output that does not arrive is a failure too: a stdout on a full device or a
// closed pipe ends with one line and status 1 (SIGPIPE is ignored, so a write
// to a closed pipe fails with EPIPE rather than killing the process without a
// word), and an interrupt (SIGINT, SIGTERM) leaves no temporary file of an
// output being written (model/atomic_file.h).
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <new>
#include <string>
#include <vector>

#include "app.h"
#include "commands.h"
#include "flags.h"
#include "strata/model/atomic_file.h"
#include "strata/model/error.h"
#include "strata/model/limits.h"

namespace strata::cli {
namespace {

int run(int argc, char** argv) {
  CLI::App app;
  describeApp(app);
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

// `status`, unless what was written to stdout did not all arrive (a full
// device, a closed pipe): then one line saying so and status 1. A command that
// failed already has said so on its one line.
int checkStdout(int status) {
  errno = 0;
  std::cout.flush();
  const bool failed = std::fflush(stdout) != 0 || std::ferror(stdout) != 0 || !std::cout;
  int error = errno;
  if (!failed || status != 0)
    return status;
  // A write that failed earlier left no errno: a pipe whose reader is gone
  // still says so (POLLERR on its write end).
  pollfd out{STDOUT_FILENO, 0, 0};
  if (error == 0 && ::poll(&out, 1, 0) == 1 && (out.revents & POLLERR) != 0)
    error = EPIPE;
  std::cerr << "strata: error: the output on stdout was not all written"
            << (error != 0 ? ": " + errnoText(error) : std::string()) << "\n";
  return kRunFailureExit;
}

}  // namespace
}  // namespace strata::cli

int main(int argc, char** argv) {
  std::signal(SIGPIPE, SIG_IGN);
  strata::removeTemporaryFilesOnSignals();
  using strata::cli::checkStdout;
  try {
    return checkStdout(strata::cli::run(argc, argv));
  } catch (const strata::UserError& e) {
    std::cerr << "strata: error: " << e.what() << "\n";
    return strata::cli::kUserErrorExit;
  } catch (const strata::RunFailure& e) {
    std::cerr << "strata: error: " << e.what() << "\n";
    return strata::cli::kRunFailureExit;
  } catch (const std::bad_alloc& e) {
    // The checks before each run compare with availableMemory() (limits.h):
    // this is an allocation they did not foresee.
    std::cerr << "strata: error: out of memory (" << e.what()
              << "): " << strata::availableMemory().describe() << "\n";
    return strata::cli::kRunFailureExit;
  } catch (const std::exception& e) {
    std::cerr << "strata: internal error: " << e.what() << "\n";
    return 1;
  }
}

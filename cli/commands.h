// The subcommands of `strata`, one file each (DESIGN.md's layout).
//
// Each add*Command registers its subcommand and options on `app` and returns
// what to run when the command line chose it. The options live in the
// returned closure, so registering every command costs no globals.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

namespace strata::cli {

// What main needs from the process: argc and argv, which `run` under mpirun
// hands to MPI_Init.
struct Process {
  int* argc;
  char*** argv;
};

struct Command {
  CLI::App* app = nullptr;
  std::function<int()> run;  // the exit status
};

Command addListCommand(CLI::App& app);
Command addDescribeCommand(CLI::App& app);
Command addPredictCommand(CLI::App& app);
Command addCompareCommand(CLI::App& app);
Command addSweepCommand(CLI::App& app);
Command addSearchCommand(CLI::App& app);
Command addPlanCommand(CLI::App& app);
Command addSimulateCommand(CLI::App& app);
Command addRunCommand(CLI::App& app, Process process);
// A wrong `strata run` command line (`message`, CLI11's): under mpirun every
// rank joins the start-up agreement, rank 0 alone prints "strata: error:
// <message>" and all exit 2 after finalising MPI; otherwise prints it. Returns
// the exit status (2).
int reportRunMistake(Process process, const std::string& message);
Command addValidateCommand(CLI::App& app);
Command addCalibrateCommand(CLI::App& app, Process process);
// A wrong `strata calibrate` command line, as reportRunMistake (under mpirun
// calibrate measures the lanes over the ranks). Returns the exit status (2).
int reportCalibrateMistake(Process process, const std::string& message);
// `strata report`: the command line (from `process`) goes into the report's
// provenance, so it can be made again.
Command addReportCommand(CLI::App& app, Process process);
Command addProfileCommand(CLI::App& app);
// `strata allreduce`: threads, or MPI ranks under mpirun (MPI_Init from
// `process`).
Command addAllreduceCommand(CLI::App& app, Process process);
// A wrong `strata allreduce` command line, as reportRunMistake: one line from
// rank 0 under mpirun, every rank exits 2. Returns the exit status (2).
int reportAllreduceMistake(Process process, const std::string& message);

// Every subcommand on `app`, in the order `strata --help` lists them: what
// main runs and what the CLI fuzzer parses, so neither can miss one.
inline std::vector<Command> addAllCommands(CLI::App& app, Process process) {
  return {
      addListCommand(app),
      addDescribeCommand(app),
      addPredictCommand(app),
      addCompareCommand(app),
      addSweepCommand(app),
      addSearchCommand(app),
      addProfileCommand(app),
      addPlanCommand(app),
      addSimulateCommand(app),
      addRunCommand(app, process),
      addCalibrateCommand(app, process),
      addValidateCommand(app),
      addAllreduceCommand(app, process),
      addReportCommand(app, process),
  };
}

}  // namespace strata::cli

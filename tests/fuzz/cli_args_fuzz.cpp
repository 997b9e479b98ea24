// libFuzzer target: the command line. The input is split at NUL bytes into
// arguments; every subcommand is registered exactly as `strata` registers it
// and the arguments are parsed (nothing is run: commands measure, write files
// and start threads). Each argument also goes through every option reader.
// Expected outcomes are a clean parse, CLI::ParseError or strata::UserError;
// anything else (another exception, a crash, a sanitizer report) is a finding.
#include <CLI/CLI.hpp>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "commands.h"
#include "flags.h"
#include "strata/model/error.h"

namespace {

template <class F>
void expectUserError(F&& f) {
  try {
    f();
  } catch (const strata::UserError&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace strata::cli;
  std::vector<std::string> args = {"strata"};
  std::string current;
  for (size_t i = 0; i < size && args.size() < 64; ++i) {
    if (data[i] == 0) {
      args.push_back(current);
      current.clear();
    } else {
      current.push_back(static_cast<char>(data[i]));
    }
  }
  args.push_back(current);

  for (const auto& a : args) {
    expectUserError([&] { parsePositiveList(a, "--workers"); });
    expectUserError([&] { parseSize(a, "--segment"); });
    expectUserError([&] { parseTime(a, "--timeout"); });
    expectUserError([&] { parseSeed(a, "--seed"); });
    expectUserError([&] { parseOnOff(a, "--overlap"); });
    expectUserError([&] { parseFormat(a); });
    expectUserError([&] {
      std::vector<double> slowdown;
      parseStraggler(a, slowdown, 8);
    });
    expectUserError([&] { strata::parseStrategies(a, "--strategies"); });
  }

  std::vector<char*> argv;
  for (auto& a : args)
    argv.push_back(a.data());
  int argc = static_cast<int>(argv.size());
  char** argvp = argv.data();
  CLI::App app{"fuzz"};
  app.require_subcommand(1);
  const std::vector<Command> commands = {
      addListCommand(app),    addDescribeCommand(app),  addPredictCommand(app),
      addCompareCommand(app), addSweepCommand(app),     addProfileCommand(app),
      addPlanCommand(app),    addSimulateCommand(app),  addRunCommand(app, Process{&argc, &argvp}),
      addCalibrateCommand(app), addValidateCommand(app),
  };
  try {
    app.parse(argc, argvp);
  } catch (const CLI::Error&) {
  }
  return 0;
}

// libFuzzer target: the command line. The input is split at newlines into
// arguments (so seeds are text files, one argument a line); every subcommand is registered exactly
// as `strata` registers it and the arguments are parsed. The commands that only compute (list,
// describe, predict, compare, plan, simulate without --trace, sweep without
// --out) then run, their output discarded, unless a limit option or
// --allow-large lifts the bounds on their size; the others measure, write
// files or start threads and are only parsed. Each argument also goes
// through every option reader. Expected outcomes are a clean parse or run,
// CLI::ParseError or strata::UserError; anything else (another exception, a
// crash, a sanitizer report, a timeout, memory past -rss_limit_mb) is a
// finding.
#include <CLI/CLI.hpp>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <iostream>
#include <streambuf>
#include <string>
#include <vector>

#include "app.h"
#include "commands.h"
#include "flags.h"
#include "strata/model/error.h"

namespace {

// Discards what the commands print.
class NullBuffer : public std::streambuf {
 protected:
  int overflow(int c) override { return traits_type::not_eof(c); }
  std::streamsize xsputn(const char*, std::streamsize n) override { return n; }
};

// Sends std::cout and std::cerr to a NullBuffer while it lives.
class Silence {
 public:
  Silence() : out_(std::cout.rdbuf(&sink())), err_(std::cerr.rdbuf(&sink())) {}
  ~Silence() {
    std::cout.rdbuf(out_);
    std::cerr.rdbuf(err_);
  }
  Silence(const Silence&) = delete;
  Silence& operator=(const Silence&) = delete;

 private:
  static NullBuffer& sink() {
    static NullBuffer b;
    return b;
  }
  std::streambuf* out_;
  std::streambuf* err_;
};

// Whether the command line gave `app` any of `options`.
bool anyGiven(const CLI::App* app, std::initializer_list<const char*> options) {
  for (const char* o : options) {
    const CLI::Option* opt = nullptr;
    try {
      opt = app->get_option(o);
    } catch (const CLI::OptionNotFound&) {
      continue;
    }
    if (opt->count() > 0)
      return true;
  }
  return false;
}

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
    if (data[i] == '\n') {
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
    expectUserError([&] { splitItems(a, "--networks"); });
  }
  // Every argument as a --straggler: a worker given twice is refused.
  expectUserError([&] { parseStragglers(args, 8); });

  std::vector<char*> argv;
  for (auto& a : args)
    argv.push_back(a.data());
  int argc = static_cast<int>(argv.size());
  char** argvp = argv.data();
  CLI::App app;
  describeApp(app);  // the App main builds: the same flags and --version
  const std::vector<Command> commands = addAllCommands(app, Process{&argc, &argvp});
  try {
    app.parse(argc, argvp);
  } catch (const CLI::Error&) {
    return 0;
  }
  static const std::vector<std::string> computeOnly = {"list", "describe", "predict", "compare",
                                                       "plan", "simulate", "sweep"};
  for (const auto& c : commands) {
    if (!c.app->parsed())
      continue;
    const std::string name = c.app->get_name();
    bool runIt = false;
    for (const auto& n : computeOnly)
      runIt = runIt || n == name;
    if (!runIt || anyGiven(c.app, {"--trace", "--out", "--max-workers", "--max-tasks",
                                   "--max-events", "--allow-large", "--trace-max-events"}))
      return 0;
    Silence quiet;
    try {
      c.run();
    } catch (const strata::UserError&) {
    }
  }
  return 0;
}

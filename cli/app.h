// The `strata` application's own text: its description, version flag and
// footer of examples, set on an App before the subcommands (commands.h) are
// added. One place, so main, the fuzzer and the generated man page and bash
// completion (cli/docgen.cpp) describe the same program.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace strata::cli {

void describeApp(CLI::App& app);
// "strata 0.1.0 (git abc1234)".
std::string versionText();

}  // namespace strata::cli

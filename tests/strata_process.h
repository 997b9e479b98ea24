// What the end-to-end tests of the `strata` command share (cli_test,
// cli_writes_test): running a shell line and capturing its output and exit
// status, quoting, and the check that a user mistake is one line, exit 2.
#pragma once

#include <sys/wait.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace strata_test {

struct Result {
  int status = -1;     // exit status; -signal when killed by a signal
  std::string output;  // stdout and stderr, interleaved
};

// `s` quoted for sh, whatever it holds.
inline std::string shellQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s)
    out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// Runs `line` with sh, stderr sent to stdout, capturing both and the status.
inline Result runShell(const std::string& line) {
  FILE* pipe = popen(("exec 2>&1; " + line).c_str(), "r");
  REQUIRE(pipe != nullptr);
  Result r;
  char buffer[4096];
  size_t n = 0;
  while ((n = fread(buffer, 1, sizeof buffer, pipe)) > 0)
    r.output.append(buffer, n);
  const int raw = pclose(pipe);
  REQUIRE(raw != -1);
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : WIFSIGNALED(raw) ? -WTERMSIG(raw) : -1;
  return r;
}

inline std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  std::string line;
  while (std::getline(in, line))
    out.push_back(line);
  return out;
}

// A file's bytes ("" when it cannot be read).
inline std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Exit status 2, exactly one line, "strata: error: " first, every `needle` in it.
inline void checkUserError(const Result& r, const std::vector<std::string>& needles) {
  INFO("output was:\n" << r.output);
  CHECK(r.status == 2);
  CHECK(lines(r.output).size() == 1);
  CHECK(r.output.rfind("strata: error: ", 0) == 0);
  for (const auto& needle : needles) {
    INFO("expected to contain: " << needle);
    CHECK(r.output.find(needle) != std::string::npos);
  }
}

}  // namespace strata_test

// Running gnuplot: findGnuplot and drawing one figure's script into SVG.
#include "gnuplot.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "strata/model/error.h"
#include "strata/reports/report.h"

namespace strata::reports {

namespace fs = std::filesystem;

namespace {

bool isExecutable(const fs::path& p) {
  return fs::is_regular_file(p) && ::access(p.c_str(), X_OK) == 0;
}

std::string readFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

std::string findGnuplot() {
  if (const char* env = std::getenv("STRATA_GNUPLOT"); env && *env) {
    if (!isExecutable(env))
      throw UserError(std::string("STRATA_GNUPLOT: '") + env + "' is not an executable file");
    return env;
  }
  if (const char* path = std::getenv("PATH")) {
    std::stringstream dirs(path);
    std::string dir;
    while (std::getline(dirs, dir, ':'))
      if (!dir.empty() && isExecutable(fs::path(dir) / "gnuplot"))
        return (fs::path(dir) / "gnuplot").string();
  }
  throw UserError(
      "gnuplot not found on PATH: strata report draws its figures with it (Debian: apt-get "
      "install gnuplot-nox, or scripts/install-deps); or set STRATA_GNUPLOT to its path");
}

void runGnuplot(const std::string& gnuplot, const std::string& folder, const std::string& script) {
  // Absolute: the child changes into the folder before it opens the log.
  const std::string dir = fs::absolute(folder).string();
  const fs::path errors = fs::path(dir) / (script + ".log");
  const pid_t pid = ::fork();
  if (pid < 0)
    throw RunFailure(std::string("fork for gnuplot: ") + std::strerror(errno));
  if (pid == 0) {
    // The child: only async-signal-safe calls until exec. strata ignores
    // SIGPIPE (cli/main.cpp); gnuplot gets the default back.
    ::signal(SIGPIPE, SIG_DFL);
    if (::chdir(dir.c_str()) != 0)
      ::_exit(126);
    const int fd = ::open(errors.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int null = ::open("/dev/null", O_RDWR);
    if (fd < 0 || null < 0)
      ::_exit(126);
    ::dup2(null, 0);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    ::execl(gnuplot.c_str(), gnuplot.c_str(), script.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0)
    if (errno != EINTR)
      throw RunFailure(std::string("waitpid for gnuplot: ") + std::strerror(errno));
  std::string log = readFile(errors);
  const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  if (WIFEXITED(status) && WEXITSTATUS(status) == 126 && log.empty())
    log = "could not enter " + dir + " or write " + errors.string();
  if (WIFEXITED(status) && WEXITSTATUS(status) == 127 && log.empty())
    log = "could not execute " + gnuplot;
  if (!ok) {
    // gnuplot's message names the line of the script: keep it on one line.
    for (auto& c : log)
      if (c == '\n')
        c = ' ';
    throw RunFailure("gnuplot " + (fs::path(dir) / script).string() + " failed (" +
                     (WIFEXITED(status) ? "exit status " + std::to_string(WEXITSTATUS(status))
                                        : std::string("killed")) +
                     "): " + log);
  }
  std::error_code ec;
  fs::remove(errors, ec);  // warnings of a successful run are not kept
}

std::string inlineSvg(const std::string& svg, const std::string& prefix) {
  // Drop what precedes the root element (XML declaration, DOCTYPE).
  const size_t root = svg.find("<svg");
  if (root == std::string::npos)
    throw RunFailure("gnuplot wrote no <svg> element");
  std::string in = svg.substr(root);
  std::string out;
  out.reserve(in.size() + in.size() / 16);
  auto startsAt = [&in](size_t i, const char* s) { return in.compare(i, std::strlen(s), s) == 0; };
  for (size_t i = 0; i < in.size();) {
    // id='x' / id="x" (an attribute: whitespace before it)
    if ((startsAt(i, "id='") || startsAt(i, "id=\"")) && i > 0 &&
        std::isspace(static_cast<unsigned char>(in[i - 1]))) {
      out += in.substr(i, 4) + prefix + "-";
      i += 4;
      continue;
    }
    // href='#x', xlink:href="#x"
    if (startsAt(i, "href='#") || startsAt(i, "href=\"#")) {
      out += in.substr(i, 7) + prefix + "-";
      i += 7;
      continue;
    }
    if (startsAt(i, "url(#")) {
      out += "url(#" + prefix + "-";
      i += 5;
      continue;
    }
    out += in[i++];
  }
  return out;
}

}  // namespace strata::reports

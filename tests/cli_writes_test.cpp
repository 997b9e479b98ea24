// End-to-end tests of what `strata` writes and what it may use (issue 29,
// parts 3 and 5): no failed or interrupted write destroys a file that was
// there, targets that are not regular files are refused before any work, a
// failed trace write after a run still prints what was measured, output that
// does not reach stdout is a failure, and runs under an address-space limit
// (ulimit -v) end with one line, not std::bad_alloc.
//
// Tests may run as root, where permissions stop no write: a full disk is
// stood in for by a file-size limit (ulimit -f, with SIGXFSZ ignored so the
// write fails with EFBIG instead of killing the process), and unwritable
// places by /dev/full and a path under a regular file.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "strata_process.h"

#ifndef STRATA_BIN
#error "STRATA_BIN must be defined to the path of the strata binary"
#endif

namespace {

namespace fs = std::filesystem;
using namespace strata_test;

// "strata ARGS", each argument quoted.
std::string strata(const std::vector<std::string>& args) {
  std::string cmd = shellQuote(STRATA_BIN);
  for (const auto& a : args)
    cmd += " " + shellQuote(a);
  return cmd;
}

// Runs `line` with sh; the output is its stdout and stderr.
Result shell(const std::string& line) {
  return runShell(line);
}

// strata under a file-size limit of `kib` KiB: a write past it fails (EFBIG,
// "File too large") as a full disk would, SIGXFSZ ignored.
std::string underFileLimit(int kib, const std::vector<std::string>& args) {
  // sh's ulimit -f counts 512-byte blocks (dash) or KiB (bash): small either way.
  return "trap '' XFSZ; ulimit -f " + std::to_string(kib * 2) + "; exec " + strata(args);
}

// A folder of this test's own, removed at the end; `entries()` counts what is
// in it (temporary files left behind would show there).
struct Folder {
  fs::path path;
  explicit Folder(const std::string& name)
      : path(fs::temp_directory_path() /
             ("strata-writes-" + name + "-" + std::to_string(::getpid()))) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~Folder() { fs::remove_all(path); }
  std::vector<std::string> entries() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(path))
      out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }
};

const std::string kEarlier = "{\"an earlier trace\": \"to be kept byte for byte\"}\n";

}  // namespace

TEST_CASE("a trace that cannot be written leaves an earlier one byte-for-byte", "[cli][writes]") {
  Folder dir("sim-trace");
  for (const std::string name : {"step.json", "step.json.gz"}) {
    const fs::path trace = dir.path / name;
    { std::ofstream(trace, std::ios::binary) << kEarlier; }
    const auto r = shell(underFileLimit(4, {"simulate", "-n", "alexnet-owt", "-c", "k20x8-pcie",
                                            "-s", "owt-b", "-k", "4", "--trace", trace.string()}));
    INFO(r.output);
    // The step is printed, then one line says the trace was not written: a
    // full disk is no user mistake (status 1), and its reason is given.
    CHECK(r.status == 1);
    CHECK(r.output.find("step time") != std::string::npos);
    const auto out = lines(r.output);
    REQUIRE(!out.empty());
    CHECK(out.back() == "strata: error: --trace: cannot write '" + trace.string() +
                            "': File too large (the step above was simulated; its trace was "
                            "not written)");
    CHECK(r.output.find("trace written to") == std::string::npos);
    CHECK(slurp(trace) == kEarlier);
    CHECK(dir.entries() == std::vector<std::string>{name});  // no temporary file left
    fs::remove(trace);
  }
}

TEST_CASE("targets that are not regular files are refused before any work", "[cli][writes]") {
  // /dev/full was removed by a failed trace write (as root).
  checkUserError(shell(strata({"simulate", "-n", "tiny-cnn", "-c", "localhost-cpu", "-s", "ring",
                               "-k", "2", "--trace", "/dev/full"})),
                 {"--trace: '/dev/full' exists and is a device, not a regular file"});
  // run: refused before the header or any step.
  checkUserError(shell(strata({"run", "-n", "tiny-cnn", "-s", "ring", "-k", "2", "--steps", "1",
                               "-b", "1", "--trace", "/dev/full"})),
                 {"--trace: '/dev/full' exists and is a device"});
  struct stat st {};
  REQUIRE(::stat("/dev/full", &st) == 0);
  CHECK(S_ISCHR(st.st_mode));

  Folder dir("refuse");
  const fs::path fifo = dir.path / "fifo";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  checkUserError(shell(strata({"sweep", "--networks", "tiny-cnn", "--clusters", "localhost-cpu",
                               "--workers", "1,2", "--out", fifo.string()})),
                 {"--out: '" + fifo.string() + "' exists and is a FIFO"});
  checkUserError(shell(strata({"simulate", "-n", "tiny-cnn", "-c", "localhost-cpu", "-s", "ring",
                               "-k", "2", "--trace", dir.path.string()})),
                 {"--trace: '" + dir.path.string() + "' exists and is a folder"});
  // A path under a regular file: no folder to write in.
  { std::ofstream(dir.path / "file") << "x"; }
  checkUserError(
      shell(strata({"profile", "-n", "tiny-cnn", "--batch", "1", "--repeats", "1", "--out",
                    (dir.path / "file" / "p.yaml").string()})),
      {"--out: cannot write '" + (dir.path / "file" / "p.yaml").string() + "'", "Not a directory"});
  CHECK(dir.entries() == std::vector<std::string>{"fifo", "file"});
}

TEST_CASE("run: a trace that cannot be written still prints the measured step", "[cli][writes]") {
  Folder dir("run-trace");
  const fs::path trace = dir.path / "run.json";
  { std::ofstream(trace, std::ios::binary) << kEarlier; }
  for (const std::string format : {"table", "json"}) {
    const auto r =
        shell(underFileLimit(4, {"run", "-n", "tiny-cnn", "-s", "ring", "-k", "2", "--steps", "3",
                                 "-b", "2", "--trace", trace.string(), "--format", format}));
    INFO(r.output);
    CHECK(r.status == 1);
    CHECK(r.output.find(format == "table" ? "measured (median step after warm-up)"
                                          : "\"measured\":") != std::string::npos);
    const auto out = lines(r.output);
    REQUIRE(!out.empty());
    CHECK(out.back() == "strata: error: --trace: cannot write '" + trace.string() +
                            "': File too large (the run above was measured; its trace was not "
                            "written)");
    CHECK(slurp(trace) == kEarlier);
    CHECK(dir.entries() == std::vector<std::string>{"run.json"});
  }
  // Written when it can be: the earlier file is replaced whole.
  const auto r = shell(strata({"run", "-n", "tiny-cnn", "-s", "ring", "-k", "2", "--steps", "3",
                               "-b", "2", "--trace", trace.string()}));
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK(slurp(trace).rfind("{\"otherData\":{\"engine\":\"executor\"", 0) == 0);
  CHECK(dir.entries() == std::vector<std::string>{"run.json"});
}

TEST_CASE("an interrupted run leaves an earlier trace and no temporary file", "[cli][writes]") {
  Folder dir("sigint");
  const fs::path trace = dir.path / "run.json";
  { std::ofstream(trace, std::ios::binary) << kEarlier; }
  // Worker 1 hangs at step 0: the run waits (up to --timeout) until SIGINT.
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    const int null = ::open("/dev/null", O_WRONLY);
    ::dup2(null, 1);
    ::dup2(null, 2);
    ::execl(STRATA_BIN, STRATA_BIN, "run", "-n", "tiny-cnn", "-s", "ring", "-k", "2", "--steps",
            "2", "-b", "1", "--hang-rank", "1", "--hang-step", "0", "--timeout", "60s", "--trace",
            trace.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  // Its temporary file appears beside the trace once the run has started.
  bool started = false;
  for (int i = 0; i < 200 && !started; ++i) {
    ::usleep(50'000);
    started = dir.entries().size() == 2;
  }
  CHECK(started);
  ::kill(child, SIGINT);
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  CHECK(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGINT);
  CHECK(slurp(trace) == kEarlier);
  CHECK(dir.entries() == std::vector<std::string>{"run.json"});
}

TEST_CASE("sweep and profile outputs are whole or not there", "[cli][writes]") {
  Folder dir("outputs");
  const fs::path csv = dir.path / "sweep.csv";
  { std::ofstream(csv, std::ios::binary) << kEarlier; }
  // A sweep whose CSV is larger than the limit: a truncated CSV was left.
  const auto r = shell(
      underFileLimit(1, {"sweep", "--networks", "alexnet-owt,vgg16,resnet50", "--clusters",
                         "k20x8-pcie,dgx-h100", "--workers", "1,2,4,8", "--out", csv.string()}));
  INFO(r.output);
  CHECK(r.status == 1);
  CHECK(lines(r.output).size() == 1);
  CHECK(r.output == "strata: error: --out: cannot write '" + csv.string() + "': File too large\n");
  CHECK(slurp(csv) == kEarlier);
  CHECK(dir.entries() == std::vector<std::string>{"sweep.csv"});
}

TEST_CASE("output that does not reach stdout is a failure with one line", "[cli][writes]") {
  // A full device: exited 0.
  const auto full =
      shell(strata({"predict", "-n", "alexnet-owt", "-c", "k20x8-pcie", "-s", "owt-b", "-k", "8"}) +
            " 2>&1 >/dev/full");
  INFO(full.output);
  CHECK(full.status == 1);
  CHECK(full.output ==
        "strata: error: the output on stdout was not all written: No space left on device\n");
  const auto help = shell(strata({"--help"}) + " 2>&1 >/dev/full");
  CHECK(help.status == 1);

  // A closed pipe: the reader is gone before strata writes.
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  int errs[2];
  REQUIRE(::pipe(errs) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::close(fds[0]);
    ::close(errs[0]);
    ::dup2(fds[1], 1);
    ::dup2(errs[1], 2);
    ::execl(STRATA_BIN, STRATA_BIN, "plan", "-n", "tiny-cnn", "-s", "ring", "-k", "8",
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(fds[0]);  // nobody reads stdout
  ::close(fds[1]);
  ::close(errs[1]);
  std::string err;
  char buffer[1024];
  ssize_t n = 0;
  while ((n = ::read(errs[0], buffer, sizeof buffer)) > 0)
    err.append(buffer, static_cast<size_t>(n));
  ::close(errs[0]);
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  INFO(err);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 1);
  CHECK(err == "strata: error: the output on stdout was not all written: Broken pipe\n");
}

TEST_CASE("a report that fails halfway leaves the earlier report as it was", "[cli][writes]") {
  Folder dir("report");
  const fs::path out = dir.path / "report";
  fs::create_directories(out);
  { std::ofstream(out / "index.html") << "earlier page"; }
  { std::ofstream(out / "notes.txt") << "the user's own file"; }
  // A gnuplot that fails: the report stops after writing its data files.
  const fs::path failing = dir.path / "failing-gnuplot";
  { std::ofstream(failing) << "#!/bin/sh\necho 'line 1: failure for the test' >&2\nexit 1\n"; }
  fs::permissions(failing, fs::perms::owner_all);
  const std::vector<std::string> args = {"report", "-n", "tiny-cnn", "-c",    "localhost-cpu", "-s",
                                         "ring",   "-k", "1,2",      "--out", out.string()};
  auto r = shell("STRATA_GNUPLOT=" + shellQuote(failing.string()) + " " + strata(args));
  INFO(r.output);
  CHECK(r.status == 1);
  CHECK(lines(r.output).back().find("failure for the test") != std::string::npos);
  CHECK(slurp(out / "index.html") == "earlier page");
  CHECK(!fs::exists(out / "data"));
  CHECK(dir.entries() == std::vector<std::string>{"failing-gnuplot", "report"});

  // A full disk (a file-size limit): exited 2 without a reason and left a
  // truncated page. Now: the reason, status 1, the earlier page as it was.
  r = shell("trap '' XFSZ; ulimit -f 0; STRATA_GNUPLOT=" + shellQuote(failing.string()) + " exec " +
            strata(args));
  INFO(r.output);
  CHECK(r.status == 1);
  CHECK(lines(r.output).size() == 1);
  CHECK(r.output.rfind("strata: error: --out: cannot write '", 0) == 0);
  CHECK(r.output.find("': File too large") != std::string::npos);
  // The file is named where the user will look for it, not in the staging folder.
  CHECK(r.output.find("cannot write '" + (out / "data").string()) != std::string::npos);
  CHECK(r.output.find("strata-tmp") == std::string::npos);
  CHECK(slurp(out / "index.html") == "earlier page");
  CHECK(dir.entries() == std::vector<std::string>{"failing-gnuplot", "report"});

  // A gnuplot that draws an empty SVG: the report goes into place, files of
  // the user's beside it are kept, and a new folder gets a folder's mode.
  const fs::path drawing = dir.path / "drawing-gnuplot";
  {
    std::ofstream(drawing)
        << "#!/bin/sh\nout=$(sed -n \"s/^set output '\\(.*\\)'/\\1/p\" \"$1\")\n"
           "echo \"<svg xmlns='http://www.w3.org/2000/svg' id='x'></svg>\" > \"$out\"\n";
  }
  fs::permissions(drawing, fs::perms::owner_all);
  r = shell("STRATA_GNUPLOT=" + shellQuote(drawing.string()) + " " + strata(args));
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK(slurp(out / "index.html").rfind("<!DOCTYPE html>", 0) == 0);
  CHECK(slurp(out / "notes.txt") == "the user's own file");
  CHECK(fs::exists(out / "data" / "report.json"));
  const fs::path fresh = dir.path / "fresh";
  auto argsFresh = args;
  argsFresh.back() = fresh.string();
  r = shell("umask 022; STRATA_GNUPLOT=" + shellQuote(drawing.string()) + " " + strata(argsFresh));
  CHECK(r.status == 0);
  CHECK(fs::exists(fresh / "index.html"));
  CHECK((fs::status(fresh).permissions() & fs::perms::all) ==
        (fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
         fs::perms::others_read | fs::perms::others_exec));
  CHECK(dir.entries() ==
        std::vector<std::string>{"drawing-gnuplot", "failing-gnuplot", "fresh", "report"});
}

// The address space strata maps before it allocates anything of a run (its
// libraries: about 1 GB in a CUDA build, far less without), in KiB: read from
// a run that waits (a hung worker) until it is killed.
long startupKiB() {
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    const int null = ::open("/dev/null", O_WRONLY);
    ::dup2(null, 1);
    ::dup2(null, 2);
    ::execl(STRATA_BIN, STRATA_BIN, "run", "-n", "tiny-cnn", "-s", "ring", "-k", "2", "--steps",
            "1", "-b", "1", "--hang-rank", "1", "--timeout", "30s", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  // Read VmSize only once the run's workers exist: right after exec (and, in
  // a sanitized build, before the sanitizer has mapped its shadow memory) the
  // image is a few MB, and a limit derived from that would stop startup.
  long kib = 0;
  for (int i = 0; i < 400 && kib == 0; ++i) {
    ::usleep(50'000);
    std::ifstream status("/proc/" + std::to_string(child) + "/status");
    std::string line;
    long threads = 0, size = 0;
    while (std::getline(status, line))
      if (line.rfind("Threads:", 0) == 0)
        threads = std::stol(line.substr(8));
      else if (line.rfind("VmSize:", 0) == 0)
        size = std::stol(line.substr(7));
    if (threads >= 3)
      kib = size;
  }
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  REQUIRE(kib > 0);
  return kib;
}

TEST_CASE("runs under an address-space limit end with one line, not bad_alloc",
          "[cli][resources]") {
  // ulimit -v in KiB: room for strata itself and about 1.2 GB more, not for
  // what each command asks (3 GB and more, less than any test machine has).
  const long limit = startupKiB() + 1'200'000;
  const std::string ulimit = "ulimit -v " + std::to_string(limit) + "; exec ";
  auto check = [](const Result& r, const std::string& option) {
    INFO(r.output);
    CHECK(r.status == 2);
    CHECK(lines(r.output).size() == 1);
    CHECK(r.output.rfind("strata: error: " + option + ": ", 0) == 0);
    CHECK(r.output.find("the address-space limit (ulimit -v)") != std::string::npos);
    CHECK(r.output.find("bad_alloc") == std::string::npos);
  };
  check(shell(ulimit + strata({"run", "-n", "alexnet-owt", "-s", "ring", "-k", "2", "-b", "64",
                               "--steps", "1"})),
        "--batch");
  check(shell(ulimit + strata({"profile", "-n", "vgg16", "--batch", "16", "--repeats", "1"})),
        "--batch");
  check(shell(ulimit + strata({"allreduce", "-k", "2", "-b", "1MiB", "-e", "2GiB"})), "--maxbytes");
  // Within the limit, a run runs.
  const auto fits = shell(ulimit + strata({"run", "-n", "tiny-cnn", "-s", "ring", "-k", "2", "-b",
                                           "8", "--steps", "2"}));
  INFO(fits.output);
  CHECK(fits.status == 0);
}

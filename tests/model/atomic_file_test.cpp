// AtomicFile: outputs are written beside their target and renamed into place,
// so a failed write never destroys what was there; targets that are not
// regular files are refused before any work.
#include "strata/model/atomic_file.h"

#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "strata/model/error.h"

namespace {

namespace fs = std::filesystem;
using Catch::Contains;
using strata::AtomicFile;

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A fresh folder of this test's own, removed at the end.
struct Folder {
  fs::path path;
  explicit Folder(const std::string& name)
      : path(fs::temp_directory_path() /
             ("strata-atomic-" + name + "-" + std::to_string(::getpid()))) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~Folder() { fs::remove_all(path); }
  int entries() const {
    int n = 0;
    for ([[maybe_unused]] const auto& e : fs::directory_iterator(path))
      ++n;
    return n;
  }
};

}  // namespace

TEST_CASE("AtomicFile replaces the target only when committed", "[atomic_file]") {
  Folder dir("commit");
  const fs::path target = dir.path / "out.csv";
  { std::ofstream(target, std::ios::binary) << "earlier\n"; }
  fs::permissions(target, fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read);
  {
    AtomicFile f(target.string(), "--out");
    f.stream() << "new contents\n";
    CHECK(slurp(target) == "earlier\n");  // not yet
    CHECK(dir.entries() == 2);            // the target and the temporary file
    f.commit();
  }
  CHECK(slurp(target) == "new contents\n");
  CHECK(dir.entries() == 1);
  // The target's permissions are kept (mkstemp's 0600 is not).
  CHECK((fs::status(target).permissions() & fs::perms::all) ==
        (fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read));

  // Destroyed without commit (an exception on the way): only its own
  // temporary file goes; the target is byte-for-byte as it was.
  {
    AtomicFile f(target.string(), "--out");
    f.stream() << std::string(1 << 20, 'x');
  }
  CHECK(slurp(target) == "new contents\n");
  CHECK(dir.entries() == 1);

  // A new file gets 0666 less the umask, as open(2) would give it.
  const mode_t mask = ::umask(022);
  strata::writeFileAtomically((dir.path / "fresh.txt").string(), "fresh", "--out");
  ::umask(mask);
  CHECK(slurp(dir.path / "fresh.txt") == "fresh");
  CHECK((fs::status(dir.path / "fresh.txt").permissions() & fs::perms::all) ==
        (fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read |
         fs::perms::others_read));
}

TEST_CASE("AtomicFile refuses targets that are not regular files, before writing",
          "[atomic_file]") {
  Folder dir("refuse");
  using strata::OptionError;
  // A device: writing into it is no file; renaming over it would remove it.
  CHECK_THROWS_MATCHES(
      AtomicFile("/dev/full", "--trace"), OptionError,
      Catch::Matchers::Message("--trace: '/dev/full' exists and is a device, not a regular file: "
                               "strata writes its outputs whole and renames them into place; give "
                               "a file name"));
  CHECK_THROWS_WITH(AtomicFile(dir.path.string(), "--out"),
                    Contains("--out: '" + dir.path.string() + "' exists and is a folder"));
  const fs::path fifo = dir.path / "fifo";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK_THROWS_WITH(AtomicFile(fifo.string(), "--out"), Contains("is a FIFO"));
  // A path under a regular file, and under a missing folder.
  { std::ofstream(dir.path / "file") << "x"; }
  CHECK_THROWS_AS(AtomicFile((dir.path / "file" / "t.json").string(), "--trace"), OptionError);
  CHECK_THROWS_WITH(AtomicFile((dir.path / "missing" / "t.json").string(), "--trace"),
                    Contains("--trace: cannot write '") && Contains("No such file or directory"));
  CHECK_THROWS_WITH(AtomicFile("", "--out"), "--out: empty file name");
  CHECK(fs::exists("/dev/full"));
  CHECK(dir.entries() == 2);  // fifo and file, nothing else
}

TEST_CASE("AtomicFile follows a symbolic link and replaces the file it points to",
          "[atomic_file]") {
  Folder dir("link");
  { std::ofstream(dir.path / "real.json") << "old"; }
  fs::create_symlink("real.json", dir.path / "link.json");
  strata::writeFileAtomically((dir.path / "link.json").string(), "new", "--trace");
  CHECK(fs::is_symlink(dir.path / "link.json"));
  CHECK(slurp(dir.path / "real.json") == "new");
  CHECK(dir.entries() == 2);
}

TEST_CASE("a write the system refuses is a WriteError with its reason, and the target survives",
          "[atomic_file]") {
  Folder dir("refused");
  const fs::path target = dir.path / "trace.json";
  const std::string earlier = "earlier trace, to be kept\n";
  { std::ofstream(target, std::ios::binary) << earlier; }
  // A file-size limit in a child stands for a full disk (tests may run as
  // root, whom permissions do not stop): a write past 4 KiB fails with EFBIG.
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    std::signal(SIGXFSZ, SIG_IGN);
    const rlimit small{4096, 4096};
    ::setrlimit(RLIMIT_FSIZE, &small);
    int code = 1;
    try {
      AtomicFile f(target.string(), "--trace");
      f.stream() << std::string(1 << 20, 'x');
      f.commit();
      code = 2;  // no failure: wrong
    } catch (const strata::WriteError& e) {
      const std::string what = e.what();
      code =
          what.find("--trace: cannot write '" + target.string() + "': File too large") == 0 ? 0 : 3;
    } catch (...) {
      code = 4;
    }
    ::_exit(code);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(slurp(target) == earlier);
  CHECK(dir.entries() == 1);  // no temporary file left

  // /dev/full as the folder's stand-in is not possible; fail() reports a
  // failure a writer found itself, and removes the temporary file.
  {
    AtomicFile f(target.string(), "--out");
    CHECK_THROWS_MATCHES(
        f.fail("gzip failed"), strata::WriteError,
        Catch::Matchers::Message("--out: cannot write '" + target.string() + "': gzip failed"));
  }
  CHECK(dir.entries() == 1);
}

TEST_CASE("removeTemporaryFilesNow removes what a signal would have left", "[atomic_file]") {
  Folder dir("signal");
  { std::ofstream(dir.path / "t.json") << "kept"; }
  AtomicFile f((dir.path / "t.json").string(), "--trace");
  f.stream() << "partial" << std::flush;
  CHECK(dir.entries() == 2);
  strata::removeTemporaryFilesNow();
  CHECK(dir.entries() == 1);
  CHECK(slurp(dir.path / "t.json") == "kept");
}

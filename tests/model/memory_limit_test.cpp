// availableMemory(): the one figure every memory check compares with, the
// least of physical memory, ulimit -v (RLIMIT_AS) and the cgroup's memory.max.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>

#include "strata/model/limits.h"

namespace {

namespace fs = std::filesystem;

// A fake cgroup mount: `files` are (path under the root, contents).
struct FakeCgroups {
  fs::path root;
  FakeCgroups(std::initializer_list<std::pair<std::string, std::string>> files)
      : root(fs::temp_directory_path() / ("strata-cgroups-" + std::to_string(::getpid()))) {
    fs::remove_all(root);
    for (const auto& [path, text] : files) {
      fs::create_directories((root / path).parent_path());
      std::ofstream(root / path) << text << "\n";
    }
  }
  ~FakeCgroups() { fs::remove_all(root); }
};

}  // namespace

TEST_CASE("the cgroup's memory.max binds, its parents' too, \"max\" is none", "[limits]") {
  using strata::cgroupMemoryLimit;
  FakeCgroups v2(
      {{"a/memory.max", "1073741824"}, {"a/b/memory.max", "max"}, {"other/memory.max", "1000"}});
  const std::string root = v2.root.string();
  // The process's cgroup says "max": its parent's 1 GiB binds.
  auto l = cgroupMemoryLimit("0::/a/b\n", root);
  CHECK(l.bytes == 1073741824.0);
  CHECK(l.what == "the cgroup's memory.max (" + root + "/a/memory.max)");
  CHECK_FALSE(l.addressSpace);
  // Another cgroup's limit is not this process's; no limit anywhere: none.
  CHECK(cgroupMemoryLimit("0::/\n", root).bytes == 0);
  CHECK(cgroupMemoryLimit("", root).bytes == 0);
  { std::ofstream(v2.root / "a/b/memory.max") << "536870912\n"; }
  CHECK(cgroupMemoryLimit("0::/a/b", root).bytes == 536870912.0);

  // cgroup v1: the memory controller's limit; "unlimited" is a huge number.
  FakeCgroups v1({{"memory/job/memory.limit_in_bytes", "9223372036854771712"},
                  {"memory/job/step/memory.limit_in_bytes", "2147483648"}});
  const auto one =
      cgroupMemoryLimit("5:cpu,memory:/job/step\n1:name=systemd:/x\n", v1.root.string());
  CHECK(one.bytes == 2147483648.0);
  CHECK(one.what.find("memory.limit_in_bytes") != std::string::npos);
  CHECK(cgroupMemoryLimit("5:memory:/job\n", v1.root.string()).bytes == 0);
}

TEST_CASE("ulimit -v bounds the memory available, less what is mapped", "[limits]") {
  const auto free = strata::availableMemory();
  REQUIRE(free.bytes > 0);
  // In a child: an address-space limit of what is mapped now plus 256 MiB.
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    std::ifstream statm("/proc/self/statm");
    double pages = 0;
    statm >> pages;
    const double mapped = pages * double(::sysconf(_SC_PAGE_SIZE));
    const auto limit = static_cast<rlim_t>(mapped + 256.0 * 1024 * 1024);
    const rlimit as{limit, limit};
    if (::setrlimit(RLIMIT_AS, &as) != 0)
      ::_exit(10);
    const auto bound = strata::availableMemory();
    // About 256 MiB left (the check itself maps a little).
    const bool ok = bound.addressSpace &&
                    bound.what.find("the address-space limit (ulimit -v)") == 0 &&
                    bound.bytes > 200.0 * 1024 * 1024 && bound.bytes <= 256.0 * 1024 * 1024 &&
                    bound.describe().find(", the address-space limit") != std::string::npos;
    ::_exit(ok ? 0 : 11);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  // Thread reservations: a stack and an arena each, arenas up to 8 per core.
  CHECK(strata::threadsReservedBytes(1) >= 64.0 * 1024 * 1024);
  CHECK(strata::threadsReservedBytes(2) == 2 * strata::threadsReservedBytes(1));
}

#include "strata/model/limits.h"

#include <fmt/format.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include "strata/model/error.h"
#include "strata/model/quantity_text.h"

namespace strata {

namespace {
Limits& current() {
  static Limits l;
  return l;
}

int64_t clampTo(int64_t value, int64_t fallback, int64_t ceiling) {
  return value <= 0 ? fallback : std::min(value, ceiling);
}
}  // namespace

const Limits& limits() {
  return current();
}

void setLimits(const Limits& l) {
  const Limits defaults;
  Limits& c = current();
  c.maxModelWorkers = clampTo(l.maxModelWorkers, defaults.maxModelWorkers, kCeilingModelWorkers);
  c.maxPlanTasks = clampTo(l.maxPlanTasks, defaults.maxPlanTasks, kCeilingPlanTasks);
  c.maxSimEvents = clampTo(l.maxSimEvents, defaults.maxSimEvents, kCeilingSimEvents);
  c.maxThreadWorkers = clampTo(l.maxThreadWorkers, 0, kCeilingThreadWorkers);
  c.maxPrintedPlanItems =
      clampTo(l.maxPrintedPlanItems, defaults.maxPrintedPlanItems, kCeilingPrintedPlanItems);
}

Limits largestLimits() {
  Limits l;
  l.maxModelWorkers = kCeilingModelWorkers;
  l.maxPlanTasks = kCeilingPlanTasks;
  l.maxSimEvents = kCeilingSimEvents;
  l.maxThreadWorkers = kCeilingThreadWorkers;
  l.maxPrintedPlanItems = kCeilingPrintedPlanItems;
  return l;
}

int64_t threadWorkerLimit(const Limits& l) {
  if (l.maxThreadWorkers > 0)
    return std::min(l.maxThreadWorkers, kCeilingThreadWorkers);
  const int64_t cores = std::max(1u, std::thread::hardware_concurrency());
  return std::min<int64_t>(std::max<int64_t>(64, 2 * cores), kCeilingThreadWorkers);
}

namespace {

// The first word of a small file, "" when it cannot be read.
std::string firstWord(const std::string& path) {
  std::ifstream in(path);
  std::string word;
  in >> word;
  return word;
}

// A byte count as a cgroup file writes it; 0 for "max", garbage or a v1
// "unlimited" (a page-rounded 2^63).
double cgroupBytes(const std::string& text) {
  if (text.empty() || text == "max")
    return 0;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || *end != '\0' || !(v > 0) || v >= 0x1p60)
    return 0;
  return v;
}

// The tighter of `limit` and `bytes` (0: none) from `what`.
void tighten(MemoryLimit& limit, double bytes, std::string what) {
  if (bytes > 0 && (limit.bytes <= 0 || bytes < limit.bytes)) {
    limit.bytes = bytes;
    limit.what = std::move(what);
    limit.addressSpace = false;
  }
}

}  // namespace

MemoryLimit cgroupMemoryLimit(const std::string& procSelfCgroup, const std::string& cgroupRoot) {
  MemoryLimit out;
  std::istringstream lines(procSelfCgroup);
  std::string line;
  while (std::getline(lines, line)) {
    // "0::/a/b" (v2), "4:memory:/a/b" or "4:cpu,memory:/a/b" (v1).
    const auto first = line.find(':');
    const auto second = first == std::string::npos ? first : line.find(':', first + 1);
    if (second == std::string::npos)
      continue;
    const std::string controllers = line.substr(first + 1, second - first - 1);
    std::string path = line.substr(second + 1);
    std::string base, file;
    if (line.compare(0, first, "0") == 0 && controllers.empty()) {
      base = cgroupRoot;
      file = "memory.max";
    } else if (("," + controllers + ",").find(",memory,") != std::string::npos) {
      base = cgroupRoot + "/memory";
      file = "memory.limit_in_bytes";
    } else {
      continue;
    }
    // The cgroup and each one above it: a parent's limit binds its children.
    while (true) {
      if (path.size() > 1 && path.back() == '/')
        path.pop_back();
      const std::string at = base + (path == "/" ? "" : path) + "/" + file;
      tighten(out, cgroupBytes(firstWord(at)), "the cgroup's " + file + " (" + at + ")");
      if (path.empty() || path == "/")
        break;
      const auto slash = path.find_last_of('/');
      path = slash == 0 || slash == std::string::npos ? "/" : path.substr(0, slash);
    }
  }
  return out;
}

MemoryLimit availableMemory() {
  MemoryLimit out;
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long pageSize = ::sysconf(_SC_PAGE_SIZE);
  if (pages > 0 && pageSize > 0)
    tighten(out, double(pages) * double(pageSize), "this machine's physical memory");
  rlimit as{};
  if (::getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY) {
    // What is mapped already counts against the limit (libraries, stacks).
    std::ifstream statm("/proc/self/statm");
    double mapped = 0;
    statm >> mapped;
    mapped *= pageSize > 0 ? double(pageSize) : 4096.0;
    const double left = std::max(1.0, double(as.rlim_cur) - mapped);
    const double before = out.bytes;
    tighten(out, left,
            fmt::format("the address-space limit (ulimit -v) of {} less the {} this process "
                        "has mapped",
                        formatBytes(Bytes(double(as.rlim_cur))), formatBytes(Bytes(mapped))));
    out.addressSpace = out.bytes != before || out.addressSpace;
  }
  std::ifstream in("/proc/self/cgroup");
  std::stringstream text;
  text << in.rdbuf();
  const MemoryLimit cgroup = cgroupMemoryLimit(text.str(), "/sys/fs/cgroup");
  tighten(out, cgroup.bytes, cgroup.what);
  return out;
}

std::string MemoryLimit::describe() const {
  if (bytes <= 0)
    return "no memory limit known";
  return formatBytes(Bytes(bytes)) + ", " + what;
}

double threadsReservedBytes(int64_t threads) {
  rlimit stack{};
  double stackBytes = 8.0 * 1024 * 1024;
  if (::getrlimit(RLIMIT_STACK, &stack) == 0 && stack.rlim_cur != RLIM_INFINITY &&
      stack.rlim_cur > 0)
    stackBytes = double(stack.rlim_cur);
  const int64_t cores = std::max(1u, std::thread::hardware_concurrency());
  const int64_t arenas = std::min(threads, 8 * cores);
  return double(threads) * stackBytes + double(arenas) * 64.0 * 1024 * 1024;
}

void checkSimWorkers(int64_t workers, const Limits& l) {
  if (workers > l.maxModelWorkers)
    throw OptionError(
        "--workers",
        fmt::format("{} workers is over the simulator's limit of {} (it keeps state per "
                    "worker); use fewer workers, or raise the limit with {} N ({} lifts every "
                    "limit)",
                    workers, l.maxModelWorkers, kMaxWorkersOption, kAllowLargeOption));
}

void checkModelWorkers(int64_t workers, const Limits& l) {
  if (workers > l.maxModelWorkers)
    throw OptionError(
        "--workers",
        fmt::format("{} workers is over the model's limit of {} (it keeps a row per worker); "
                    "use fewer workers, or raise the limit with {} N ({} lifts every limit)",
                    workers, l.maxModelWorkers, kMaxWorkersOption, kAllowLargeOption));
}

}  // namespace strata

#include "strata/study/machine_load.h"

#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

namespace strata::study {

namespace {
double seconds(const timeval& t) {
  return double(t.tv_sec) + 1e-6 * double(t.tv_usec);
}
}  // namespace

std::optional<CpuSample> sampleCpu() {
  std::ifstream stat("/proc/stat");
  std::string line;
  if (!stat || !std::getline(stat, line) || line.rfind("cpu ", 0) != 0)
    return std::nullopt;
  // cpu  user nice system idle iowait irq softirq steal guest guest_nice (jiffies);
  // guest time is already inside user, idle and iowait are not busy, steal is
  // time other virtual machines took from ours.
  std::istringstream in(line.substr(4));
  unsigned long long user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0,
                     steal = 0;
  in >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal;
  if (!in)
    return std::nullopt;
  const long ticks = sysconf(_SC_CLK_TCK);
  if (ticks <= 0)
    return std::nullopt;
  rusage self{};
  if (getrusage(RUSAGE_SELF, &self) != 0)
    return std::nullopt;
  CpuSample s;
  s.wallSeconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  s.machineBusySeconds = double(user + nice + system + irq + softirq + steal) / double(ticks);
  s.selfSeconds = seconds(self.ru_utime) + seconds(self.ru_stime);
  return s;
}

std::optional<double> loadAverage() {
  std::ifstream f("/proc/loadavg");
  double one = 0;
  if (!(f >> one))
    return std::nullopt;
  return one;
}

LoadReport measureLoadBefore(double windowSeconds, int cores) {
  LoadReport report;
  report.cores = cores;
  const auto load = loadAverage();
  const auto before = sampleCpu();
  if (!load || !before)
    return report;
  std::this_thread::sleep_for(std::chrono::duration<double>(windowSeconds));
  const auto after = sampleCpu();
  if (!after)
    return report;
  report.measured = true;
  report.loadAverageBefore = *load;
  report.othersCoresBefore = othersCores(*before, *after);
  report.busyBefore = busyBeforeStart(*load, report.othersCoresBefore, cores);
  return report;
}

}  // namespace strata::study

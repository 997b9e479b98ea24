#include "strata/model/limits.h"

#include <fmt/format.h>

#include <algorithm>
#include <thread>

#include "strata/model/error.h"

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

void checkModelWorkers(int64_t workers, const Limits& l) {
  if (workers > l.maxModelWorkers)
    throw OptionError(
        "--workers",
        fmt::format("{} workers is over the model's limit of {} (it keeps a row per worker); "
                    "use fewer workers, or raise the limit with {} N ({} lifts every limit)",
                    workers, l.maxModelWorkers, kMaxWorkersOption, kAllowLargeOption));
}

}  // namespace strata

// What happened during one step, task by task: the common output of the
// simulator and the executor, written as a Chrome trace-event file that the
// Perfetto UI opens (strata/study/trace.h). Both engines use the same schema,
// so a simulated and a measured step open side by side.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "strata/model/network.h"
#include "strata/model/plan.h"
#include "strata/model/strategy.h"
#include "strata/model/topology.h"

namespace strata {

// Tracks of a worker's process in the trace.
enum class Track : uint8_t { kCompute = 0, kSend = 1, kReceive = 2, kReduce = 3 };

// One task (or one flow of a transfer) on one worker's track; seconds from the
// start of the step.
struct Slice {
  uint32_t task;
  int32_t worker;
  Track track;
  int32_t peer;  // the other end of a flow, -1 otherwise
  double start;
  double end;
};

// A link busy with at least one flow (simulator only).
struct LinkSlice {
  int32_t channel;  // index into Timeline::channelNames
  double start;
  double end;
};

struct Timeline {
  std::vector<Slice> slices;
  std::vector<LinkSlice> linkSlices;
  std::vector<std::string> channelNames;
  // Per channel (same index as channelNames): the workers whose traffic it
  // carries, so a trace of some ranks keeps their links only. Empty when the
  // engine has no links (executor).
  std::vector<LinkUsers> channelUsers;
};

// Intervals [start, end) in seconds; both engines measure exposed
// communication as communication time not overlapped by compute.
using Intervals = std::vector<std::pair<double, double>>;

// Total overlap of two sorted lists of disjoint intervals.
double overlapSeconds(const Intervals& a, const Intervals& b);

}  // namespace strata

// What happened during one step, task by task: the common output of the
// simulator and the executor, written as a Chrome trace-event file that the
// Perfetto UI opens. Both engines use the same schema, so a simulated and a
// measured step open side by side.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "strata/model/network.h"
#include "strata/model/plan.h"
#include "strata/model/strategy.h"

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
};

// Intervals [start, end) in seconds; both engines measure exposed
// communication as communication time not overlapped by compute.
using Intervals = std::vector<std::pair<double, double>>;

// Total overlap of two sorted lists of disjoint intervals.
double overlapSeconds(const Intervals& a, const Intervals& b);

// Writes Chrome trace-event JSON (opens in ui.perfetto.dev): one process per
// worker with tracks compute / send / receive / reduce, one process for the
// links; one slice per Slice with FLOPs, examples, bytes and peer in its args;
// the estimate's engine, strategy and step time in otherData.
void writeTrace(std::ostream& out, const Plan& plan, const Network& network,
                const StepEstimate& estimate, const Timeline& timeline);

}  // namespace strata

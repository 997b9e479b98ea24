// The simulator's event queue (internal to simulator/src).
#pragma once

#include <cstdint>
#include <queue>
#include <vector>

#include "strata/model/error.h"

namespace strata::sim::detail {

// A binary heap ordered by (time, insertion number): events at the same time
// come out in the order they were scheduled, so a run is reproducible byte for
// byte. The clock never goes back (asserted).

enum class EventKind : uint32_t { kTaskDone, kActivate, kTransferDone, kReady };

struct Event {
  double time;
  uint64_t seq;
  EventKind kind;
  uint32_t task;
  uint32_t version;
};

struct Later {
  bool operator()(const Event& a, const Event& b) const {
    return a.time > b.time || (a.time == b.time && a.seq > b.seq);
  }
};

class EventQueue {
 public:
  void push(double time, EventKind kind, uint32_t task, uint32_t version = 0) {
    STRATA_ENFORCE_OP(time, >=, now_);
    heap_.push(Event{time, seq_++, kind, task, version});
  }
  Event pop() {
    Event e = heap_.top();
    heap_.pop();
    STRATA_ENFORCE_OP(e.time, >=, now_);
    now_ = e.time;
    ++popped_;
    return e;
  }
  bool empty() const { return heap_.empty(); }
  double nextTime() const { return heap_.top().time; }
  double now() const { return now_; }
  uint64_t popped() const { return popped_; }

 private:
  std::priority_queue<Event, std::vector<Event>, Later> heap_;
  uint64_t seq_ = 0;
  uint64_t popped_ = 0;
  double now_ = 0;
};

}  // namespace strata::sim::detail

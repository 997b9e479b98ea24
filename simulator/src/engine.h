// The simulator's engine (internal to simulator/src): one run of a Plan, its
// state and the event loop. Its members are defined by concern:
//   engine.cpp      construction, the event loop and the task lifecycle
//                   (ready, ps jobs, compute queues, finish)
//   lanes.cpp       compute tasks' times and the sharing of a worker's cores
//                   between its compute and communication lanes
//   network.cpp     flows on links: channel loads, transfers joining and
//                   leaving channels, their rates under contention
//   accounting.cpp  bytes and communication time per worker, trace slices,
//                   and the Result (StepEstimate, link use, timeline)
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <queue>
#include <tuple>
#include <utility>
#include <vector>

#include "event_queue.h"
#include "strata/model/compute_cost.h"
#include "strata/model/estimate.h"
#include "strata/model/topology.h"
#include "strata/sim/simulator.h"

namespace strata::sim::detail {

// ---- channel loads of a transfer pattern ------------------------------------

struct Load {
  std::vector<std::pair<int, int>> channels;  // (channel, flows), sorted by channel
  Seconds latency;
  double secondsPerByte = 0;    // alone on the network
  double exchangeShare = 0;     // of pairs sending to each other (PatternCost::exchangeShare)
  bool latencyPerStep = false;  // the latency's level pays it once per step (Task::follows)
};

class Engine {
 public:
  Engine(const Plan& plan, const Network& net, const Cluster& cluster, const Options& options,
         int64_t maxEvents);

  Result run();

 private:
  // ---- task lifecycle (engine.cpp) -------------------------------------------
  void makeReady(uint32_t t);
  void grantNext();
  void tryStart(int worker);
  void finish(uint32_t t);

  // ---- lanes (lanes.cpp) -------------------------------------------------------
  void addComm(int worker, int delta, bool cpu = false);

  // The speed of a compute task on worker w with what communication runs there.
  double computeRateOf(size_t w) const {
    if (!cpuShared_)
      return 1.0;
    if (cpuCommActive_[w] > 0)
      return lanes_.busyCompute;
    return commActive_[w] > 0 ? lanes_.compute : 1.0;
  }

  double computeTime(const Task& task, uint32_t id) const;
  bool startComm(const Task& task, uint32_t t);
  void endComm(const Task& task, uint32_t t);
  // With a duty curve, an allreduce's speed, decided when its first task
  // starts (busy: one of that task's workers computes): the curve at the
  // duty of its window (LaneSpeeds::windowDuty of the compute its busiest
  // worker has left), where the window is the whole allreduce (its time alone
  // as the model prices it, and the lanes' two hand-offs); kept by every task
  // of it, whatever the compute lanes do meanwhile (the duty averages them).
  // Other communication (owt's exchanges, ps) and every task without a curve
  // is re-rated per instant (commRateOf).
  void decideCollectiveSpeed(const Task& task, bool busy);
  // Compute (seconds alone) worker w has still to run: its running task's
  // rest and its compute tasks not started yet.
  double computeLeftOn(size_t w) const;
  std::vector<int> commWorkers(const Task& task) const;
  // The speed of communication task t (transfer, sum or ps server update)
  // from whether its workers compute now.
  double commRateOf(uint32_t t) const;
  // Worker w's compute lane started or stopped: its communication re-rated.
  void reRateComm(size_t w);
  // A sum or server update (time-priced, no flows) from now at `rate`.
  void scheduleTimed(uint32_t t, double rate);

  // ---- network (network.cpp) ---------------------------------------------------
  int channelOf(int link, bool up) const {
    return topo_.linkSpec(link).fullDuplex ? 2 * link + (up ? 0 : 1) : 2 * link;
  }

  const Load& loadOf(const Task& task);

  struct Active {
    const Load* load;
    double remaining;  // bytes per flow
    double rate;       // bytes per second per flow
    double last;
    uint32_t version;
    std::vector<int> position;  // in tasksOn_ of each channel
    // Alone on the network since it started: its channels are not touched
    // (O(1) instead of O(channels)); it joins them if another transfer starts.
    bool solo = false;
    double activatedAt = 0;
    double bytes = 0;
  };

  void join(uint32_t t, Active& a, double since);
  void activate(uint32_t t);
  void leave(uint32_t t);
  void leaveChannels(uint32_t t, Active& a, size_t slot);

  void markChannel(int c) {
    for (uint32_t t : tasksOn_[static_cast<size_t>(c)])
      markTask(t);
  }
  void markTask(uint32_t t) {
    if (stamp_[t] != stampNow_ + 1) {
      stamp_[t] = stampNow_ + 1;
      affected_.push_back(t);
    }
  }

  void recomputeRates();

  // ---- accounting (accounting.cpp) ---------------------------------------------
  double pipelineBubble() const;
  void countBytes(const Task& task);
  void noteCommunication(const Task& task, uint32_t t, bool transfer);
  void selectTimeline(int channels);
  Result assemble();

  int64_t maxEvents_;
  const Plan& plan_;
  const Network& net_;
  const Cluster& cluster_;
  Options opt_;
  Topology topo_;
  int ranks_;  // workers, then a ps plan's dedicated servers
  int k_;
  ComputeCosts costs_;
  double gamma_;
  // Where communication shares the workers' cores (calibrated CPU clusters):
  // speeds of compute and communication while both run on a worker, and per
  // worker the communication tasks running (docs/simulator.md).
  LaneSpeeds lanes_;  // as the model's (overlapSpeeds)
  bool cpuShared_ = false;
  double handoff_ = 0;  // seconds for a lane to wake up (calibrated executors)
  std::vector<int> commActive_;
  std::vector<int> cpuCommActive_;  // of them, ps server updates
  // Per worker, its running compute task (shared cores): the work it has
  // left at full speed, its speed and since when; per task, the version of
  // its completion event (bumped when re-rated).
  std::vector<uint32_t> running_;
  std::vector<double> computeLeft_, computeRate_, rateSince_;
  std::vector<uint32_t> computeVersion_;
  // Per worker, the communication tasks running on its cores; per task, its
  // workers and, for sums and server updates, the work (seconds alone) left
  // at the rate it has had since `commSince_` (shared cores: fluid both ways).
  std::vector<std::vector<uint32_t>> commOn_;
  std::vector<std::vector<int>> commWorkersOf_;
  std::vector<double> commLeft_, commRate_, commSince_;
  // With a duty curve: per worker, the seconds alone of its compute tasks
  // not started yet; per collective, its speed (-1 until it starts).
  std::vector<double> computeAhead_;
  std::vector<double> collectiveSpeed_;

  EventQueue q_;

  std::vector<uint32_t> depsLeft_;
  std::vector<uint32_t> dependentsBegin_;
  std::vector<uint32_t> dependents_;
  std::vector<double> start_, end_;
  std::vector<double> cpuFactor_;  // a transfer's speed from its workers' cores
  std::vector<std::priority_queue<uint32_t, std::vector<uint32_t>, std::greater<>>> workerQueue_;
  std::vector<char> workerBusy_;
  // ps: the job the server's thread runs (-1: none), the jobs waiting for it
  // and their tasks that are ready.
  struct JobRequest {
    int priority;
    uint64_t seq;
    int job;
  };
  int holder_ = -1;
  std::vector<JobRequest> waiting_;
  uint64_t requests_ = 0;
  std::vector<std::vector<uint32_t>> parked_;
  std::vector<char> requested_;
  std::vector<uint32_t> jobTasksLeft_;

  std::vector<double> beta_;
  bool hasTables_ = false;  // some link prices messages by size
  std::vector<int> flowsOn_;
  std::vector<std::vector<uint32_t>> tasksOn_;
  std::vector<int> activeOn_;
  std::vector<double> busySince_, busy_, bytesOn_;
  std::vector<int> scratch_;
  // (pattern, root or stored flows, naive pair, ring span, ring stride)
  using LoadKey = std::tuple<int, long, bool, int, int>;
  std::map<LoadKey, Load> loads_;
  std::vector<Active> active_;
  std::vector<int> freeActive_;
  std::vector<int> activeIndex_;
  std::vector<uint32_t> stamp_;
  uint32_t stampNow_ = 0;
  std::vector<uint32_t> affected_;
  int activeTransfers_ = 0;
  int soloTask_ = -1;
  std::map<const Load*, std::pair<double, double>> soloUse_;  // bytes per flow, busy seconds

  double allSent_ = 0, allReceived_ = 0;
  std::vector<double> sent_, received_;
  std::vector<PhaseTimes> phase_;
  std::vector<Intervals> computeIntervals_;
  Intervals allComm_;
  std::vector<Intervals> ownComm_;
  std::vector<uint32_t> workerStamp_;
  uint32_t workerStampNow_ = 0;
  std::vector<Slice> slices_;
  std::vector<LinkSlice> linkSlices_;
  std::vector<char> recordWorker_;   // with timeline: per worker, its slices are recorded
  std::vector<char> recordChannel_;  // with timeline: per channel, its busy slices are recorded
};

}  // namespace strata::sim::detail

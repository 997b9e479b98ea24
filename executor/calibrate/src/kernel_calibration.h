// Measuring the CPU backend's kernel tables (model/kernels.h) and how kernels
// slow down when workers share the machine. Internal to executor/calibrate.
#pragma once

#include <array>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "strata/exec/calibrate.h"
#include "strata/exec/comm/communicator.h"
#include "strata/exec/nn/backend.h"
#include "strata/model/fit.h"
#include "strata/model/kernels.h"

namespace strata::exec::detail {

// Times every GEMM variant on the grid of dims and every memory-bound kernel
// over a range of sizes, on this thread. `say` gets one line per table.
// `sweeps` sweeps over every GEMM shape and memory kernel, each point's rate
// the median over the sweeps (a VM's speed moves by tens of percent over
// seconds: a point timed once is a snapshot of it); validate's two reference
// kernels timed before, between and after the sweeps give the speed the
// tables stand for (KernelTables::referenceGemmRate, referenceCopyRate);
// `between` runs at each of those moments too.
KernelTables measureKernelTables(const std::function<void(const std::string&)>& say, int sweeps = 1,
                                 const std::function<void()>& between = {});

// GEMMs with their operands out of the caches (KernelTables::gemmCold and
// effectiveCache): each shape of a coarse grid hot and right after writing
// `flush` (twice the reported cache), and an nt GEMM's 64 MiB operand after
// writing a share of it; and with `warmFlush` (four times the core's own
// cache; empty: none) each shape right after writing it (gemmWarm). Needs
// t.lastLevelCache.
void measureGemmCold(KernelTables& t, std::vector<float>& flush, std::vector<float>& warmFlush);

// The network whose one call measures a layer-phase call's own cost: a relu
// over one element, the input its only input.
Network callOverheadNetwork();

// The vocabulary of the embedding kernels' table (1 MiB at 64 features),
// on the CPU and the GPU alike.
inline constexpr int kCalibrationVocab = 4096;

// The pooling the kernel tables time (AlexNet's 3x3 and VGG's 2x2, stride 2)
// over 64 channels: an `out` x `out` output and the input its windows cover;
// mode max.
nn::PoolDesc calibrationPool(int window, int out);
// The output side whose `window` x `window` reads over 64 channels come to
// about `units`: sqrt(units / 64 / window^2), at least 1.
int calibrationPoolOut(double units, int window);

// Fills the points of a d x d x d grid table not `measured` (over a size
// cap), smallest first, from the point whose largest dimension is one grid
// step smaller (measured or filled before): rates saturate at those sizes.
void fillOverCap(std::vector<double>& rate, std::vector<char>& measured, size_t d);

// The tables as the YAML block under `device:` (indented by 2), with the
// provenance of every table.
std::string kernelTablesYaml(const KernelTables& tables, const std::string& where, int sweeps);

// The rows of a grid table (gemm or conv) under its `NAME:` line: dims, then
// one row per (`key`, m, n) with the GFLOP/s over k (`valueKey` slowdown:
// gemm_cold's cold time over hot time); `names` the key's three values in
// table order.
// `indent`: of the dims and rates lines (the rows two more).
void gridRowsYaml(std::ostringstream& y, const char* key, const GemmTable& table,
                  const std::array<std::string_view, 3>& names, std::string_view indent = "      ",
                  std::string_view valueKey = "gflop_per_s");
// One `{units, gunits_per_s}` row, `name: {...}`, indented by 6.
void sizeRowYaml(std::ostringstream& y, std::string_view name, const SizeTable& table);
// The rows under `memory:`: one per kernel with a table.
// memory's rows (kWarm: memory_warm's, kCold: memory_cold's).
void memoryRowsYaml(std::ostringstream& y, const KernelTables& tables,
                    Residence at = Residence::kHot);

// One row of a calibrated `sharing` table: speeds of each of `workers`
// workers relative to one alone, and the lanes' hand-off time (seconds).
struct SharingRow {
  int workers = 1;
  double gemm = 1, memory = 1, overlapCompute = 1, overlapComm = 1, handoff = 0;
  double overlapCommRate = 0;  // bytes/s; 0: not measured (not written)
  // (duty, communication speed) by the compute lane's duty cycle, the last
  // at duty 1 (overlapComm); empty: not measured (not written).
  std::vector<std::pair<double, double>> overlapCommByDuty;
  // (bytes per thread, memory speed) by working-set size; empty: not measured.
  std::vector<std::pair<double, double>> memoryBySize;
};
// What an overlap trial measures: the two lanes' speeds while both run, and
// the bytes per second each worker's communication lane sent alone (0 where
// the rate does not say how busy the lane keeps the compute's resources).
struct OverlapTrial {
  double compute = 1, comm = 1, commRate = 0;
  // The communication lane's speed while the compute lane runs GEMMs a
  // share d of every 2 ms slice (and sleeps the rest), d in kOverlapDuties,
  // (d, speed); and the compute lane's speed while it runs (d, speed).
  // d = 1 is `comm` and `compute`, d = 0 is 1 (the lane alone). Empty where
  // the trial has no duty sweep.
  std::vector<std::pair<double, double>> commByDuty, computeByDuty;
};
inline constexpr std::array<double, 5> kOverlapDuties{0, 0.25, 0.5, 0.75, 1};
// Rows for 1, 2, 4, ... up to maxWorkers: `sharing(k)` gives (GEMM, memory)
// speeds for k > 1, `overlap(k)` (compute, communication) speeds, and the
// hand-off is measureHandoff(k); `say` gets one line per row, `where` in it
// (e.g. " on GPU 0").
std::vector<SharingRow> measureSharingRows(
    int maxWorkers, const std::function<std::pair<double, double>(int)>& sharing,
    const std::function<OverlapTrial(int)>& overlap,
    const std::function<void(const std::string&)>& say, const std::string& where,
    const std::function<std::vector<std::pair<double, double>>(int)>& memoryBySize = {});
// The rows under `sharing:` (indented by 4).
void sharingRowsYaml(std::ostringstream& y, const std::vector<SharingRow>& rows);

// Sharing trials (time alone / time of the slowest of k threads at once: of
// 256^3 GEMMs, and of copies of 256 KiB to 16 MiB per thread) for k = 2, 4,
// ... maxWorkers, pooled over the moments they were taken at. A VM's second
// core can run slower for seconds at a time: 7 trials taken within a second
// gave 2 workers a GEMM speed of 0.663 in one calibration (2026-11-27) where
// every other measured 0.98 to 1.0, and every K = 2 row of that day's suite
// was priced 30-50 % slow. Calibrate samples between the kernel tables'
// sweeps (a minute and more apart) and once more at the end.
inline constexpr int kSharingTrials = 7;
class SharingPool {
 public:
  explicit SharingPool(int maxWorkers) : maxWorkers_(maxWorkers) {}
  // `trials` more trials of every figure for every k.
  void sample(int trials);
  // The medians of the pooled trials (kSharingTrials taken now if none
  // were): GEMM speed and the 16 MiB copies' (memory_speed).
  std::pair<double, double> sharing(int workers);
  // The copies' speed by bytes per thread (memory_speed_by_size): a working
  // set inside a core's own caches barely slows, one that streams from DRAM
  // shares its bandwidth.
  std::vector<std::pair<double, double>> memoryBySize(int workers);

 private:
  int maxWorkers_;
  std::map<int, std::vector<double>> gemm_;
  std::map<int, std::array<std::vector<double>, 4>> memory_;
};

// Speed of compute (first) and of communication (second) of each of
// `workers` workers when its communication lane moves data (a ring exchange
// of 4 MiB segments, summed as the executor sums them) while its compute lane
// runs GEMMs, relative to each running alone with the same number of workers.
// On CPU workers the two lanes share the cores: both slow down. commRate:
// the bytes each worker's lane sent per second alone (median of 3).
OverlapTrial measureOverlap(int workers);
// The same trial with every rank of `comm` a worker (collective; the same
// result on every rank): over MPI ranks it measures the lanes as that
// transport runs them, e.g. TCP, whose stack and polling take cores that a
// copy through shared memory does not. Rounds of fewer exchanges where one
// takes long (at least 4; about 1 s). Ranks < 2: speeds 1, no rate.
OverlapTrial measureOverlapOn(Communicator& comm);

// Seconds for a thread asleep on a condition variable to run again after
// another sets its flag and notifies it, as the executor's lanes hand tasks
// to each other: half a ping-pong between two threads while `busy` other
// threads run GEMMs (the compute lanes of a step), median of 3 runs.
double measureHandoff(int busy);

// One-way seconds of messages of 1 KiB .. 64 MiB between ranks 0 and 1
// (half a ping-pong, median of many), from and into buffers in the ranks'
// ops memory (host, or device memory on GPU ranks), rotating through 32 MiB
// of them so that, as a step's gradients, they are not in cache. Ranks above
// 1 return at once; rank 0's samples are the result.
std::vector<TimingSample> pingPong(Communicator& comm);

// A link as calibrated: beta from the least-squares fit of alpha + n / beta,
// alpha from the smallest message (the fit's intercept is unstable when
// bandwidth varies this much with size), and the per-size table that makes
// alpha + n / beta(n) reproduce every measured size.
struct LinkFit {
  AlphaBetaFit ab;
  std::vector<BandwidthPoint> table;
};
LinkFit fitLink(const std::vector<TimingSample>& samples);
// Ranks 0 and 1 exchanging `bytes` both ways at once (sendRecv) against one
// way alone (a ping-pong's half): the time ratio, 1 on a link that carries
// both directions at once, 2 where they take turns; 0 on other ranks.
double exchangeRatio(Communicator& comm, double bytes);
// Above this ratio the link is half duplex.
inline constexpr double kHalfDuplexRatio = 1.5;
// The `duplex:` text of linkYaml for a measured exchange ratio.
std::string duplexYaml(double ratio, double bytes);
// The `link:` block of a topology level (indented by 4): bandwidth, latency,
// duplex (the text after `duplex: `, with its comment) and the table; `what`
// says between what it was measured.
void linkYaml(std::ostringstream& y, const LinkFit& link, const std::string& what,
              const std::string& duplex);

// `strata calibrate --device cuda`: GPU 0 as a one-device cluster (its
// kernel tables through the CUDA backend, copy and host-link bandwidths), the
// YAML with every figure's provenance; `where` says by whom and when.
// Throws OptionError naming --device when CUDA is not built or no GPU is here.
std::string calibrateCuda(const CalibrationOptions& options, const std::string& where);

}  // namespace strata::exec::detail

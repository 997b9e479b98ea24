// `strata calibrate`: measurements of this machine as a cluster config.
#include "strata/exec/calibrate.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <ctime>
#include <map>
#include <memory>
#include <numeric>
#include <sstream>
#include <thread>
#include <tuple>

#include "kernel_calibration.h"
#include "layer_timing.h"
#include "strata/exec/comm/local_communicator.h"
#include "strata/exec/nn/cpu_backend.h"
#include "strata/exec/nn/dataset.h"
#include "strata/exec/nn/model.h"
#include "strata/model/error.h"
#include "strata/model/fit.h"
#include "strata/model/limits.h"
#include "strata/model/quantity_text.h"
#include "timing.h"

namespace strata::exec {

namespace {

using detail::Clock;
using detail::median;
using detail::since;

// Best of `reps` timings of fn (the least disturbed by the noisy VM).
template <class F>
double bestOf(int reps, F&& fn) {
  double best = 1e300;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    fn();
    best = std::min(best, since(t0));
  }
  return best;
}

std::string today() {
  const std::time_t now = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d", std::gmtime(&now));
  return buf;
}

std::string host() {
  char buf[256] = {};
  gethostname(buf, sizeof buf - 1);
  return buf;
}

}  // namespace

void checkCalibrationOptions(const CalibrationOptions& o) {
  if (o.device == Device::kCuda && o.network)
    throw OptionError("--network",
                      "--device cuda measures kernel tables only (roofline fits on a network are "
                      "for the CPU)");
  checkDevice(o.device, "--device");
  // Sharing beyond 64 workers on one machine is time-slicing, not sharing.
  if (o.maxWorkers < 1 || o.maxWorkers > 64)
    throw OptionError("--sharing-up-to", fmt::format("must be in 1..64, got {}", o.maxWorkers));
  if (o.batch < 1)
    throw OptionError("--batch", fmt::format("must be at least 1, got {}", o.batch));
  if (o.sweeps < 1 || o.sweeps > 9)
    throw OptionError("--sweeps", fmt::format("must be in 1..9, got {}", o.sweeps));
}

std::string calibrate(const CalibrationOptions& o) {
  auto say = [&](const std::string& s) {
    if (o.progress)
      o.progress(s);
  };
  checkCalibrationOptions(o);
  const std::string where = fmt::format("`strata calibrate` on {}, {}", host(), today());
  if (o.device == Device::kCuda)
    return detail::calibrateCuda(o, where);
  const Network* net = o.network;
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());

  // 1. Kernel tables: every GEMM shape of the grid and every memory-bound
  // kernel by size, independent of any network.
  // Sharing trials are taken between the sweeps too (detail::SharingPool):
  // a minute and more apart, not all within a second.
  detail::SharingPool pool(o.maxWorkers);
  const KernelTables tables = detail::measureKernelTables(say, o.sweeps, [&] { pool.sample(2); });
  double peak = 0;
  for (const auto& r : tables.gemm.rate)
    for (double x : r)
      peak = std::max(peak, x);
  say(fmt::format("GEMM peak        {} (fastest shape of the tables)",
                  formatFlopRate(FlopsPerSecond(peak))));

  // 2. Streaming memory bandwidth (copy: read + write) and summing rate.
  const size_t n = 16u << 20;  // 16 Mi floats = 64 MiB per array
  std::vector<float> a(n, 1.0f), b(n, 2.0f);
  const double copy = bestOf(5, [&] { std::copy(a.begin(), a.end(), b.begin()); });
  const double memBw = 2.0 * n * sizeof(float) / copy;
  const double sum = bestOf(5, [&] {
    for (size_t i = 0; i < n; ++i)
      b[i] += a[i];
  });
  const double reduceBw = double(n) * sizeof(float) / sum;
  say(fmt::format("memory           {} copy, {} summed", formatBandwidth(BytesPerSecond(memBw)),
                  formatBandwidth(BytesPerSecond(reduceBw))));

  // 3. Roofline efficiencies, for element types the tables do not cover: from
  // the tables (held-out), or fitted on a network's own layers (--network).
  std::map<LayerKind, std::pair<double, double>> perKind;  // FLOPs, seconds
  double sgdSeconds = 0, sgdParams = 0;
  if (net) {
    const auto times = detail::timeLayers(*net, o.batch, 3);
    for (size_t l = 0; l < net->layers.size(); ++l) {
      const auto& layer = net->layers[l];
      auto& k = perKind[layer.kind];
      k.first += o.batch * (layer.fwdFlops + (layer.hasWeights() ? layer.bwdWeightsFlops : 0) +
                            (layer.readsNetworkInput() ? 0 : layer.bwdDataFlops));
      k.second += times.fwd[l] + times.bwdData[l] + times.bwdWeights[l];
      sgdParams += double(layer.params);
    }
    sgdSeconds = times.updateAll;
  } else {
    const auto& sgd = tables.memory[static_cast<size_t>(MemKernel::kSgd)];
    sgdParams = sgd.units.back();
    sgdSeconds = sgd.units.back() / sgd.rate.back();
  }
  // SGD with momentum reads w, g, v and writes w, v (estimate.h).
  const double memEff = std::clamp(5.0 * sgdParams * 4 / sgdSeconds / memBw, 0.01, 1.0);
  say(fmt::format("SGD update       {} for {:.0f} parameters", formatSeconds(Seconds(sgdSeconds)),
                  sgdParams));

  // 4. Communicator: alpha, beta and bandwidth by size, ranks 0 and 1.
  // Duplex: a ring step's size on this machine (4 MiB, the segments of the
  // overlap trials), both ways at once against one way.
  std::vector<TimingSample> samples;
  std::string commKind;
  constexpr double kExchangeBytes = 4.0 * 1024 * 1024;
  double exchange = 0;
  if (o.comm && o.comm->size() >= 2) {
    samples = detail::pingPong(*o.comm);
    exchange = detail::exchangeRatio(*o.comm, kExchangeBytes);
    commKind = "MPI ranks 0 and 1";
  } else {
    runLocal(2, [&](Communicator& c) {
      auto s = detail::pingPong(c);
      const double r = detail::exchangeRatio(c, kExchangeBytes);
      if (c.rank() == 0) {
        samples = s;
        exchange = r;
      }
    });
    commKind = "two threads (strata run's local communicator)";
  }
  const auto link = detail::fitLink(samples);
  say(fmt::format(
      "link             alpha {}, beta {} (fit within {:.0f} %); both ways at once "
      "{:.2f} x one way: {} duplex",
      formatSeconds(link.ab.alpha), formatBandwidth(link.ab.beta), 100 * link.ab.maxRelativeError,
      exchange, exchange > detail::kHalfDuplexRatio ? "half" : "full"));

  // 5. Sharing: K threads running GEMMs, then memory-bound kernels, at once;
  // speed = time alone / time together. Overlap: each of K workers moving
  // data on its communication lane while its compute lane runs GEMMs.
  pool.sample(3);
  const auto sharing = detail::measureSharingRows(
      o.maxWorkers, [&](int k) { return pool.sharing(k); }, detail::measureOverlap, say, "",
      [&](int k) { return pool.memoryBySize(k); });

  // The YAML, every number with its provenance.
  std::ostringstream y;
  y << fmt::format("# This machine as measured by {}.\n", where);
  y << "# Regenerate with: strata calibrate" << (net ? " --network " + net->name : "") << " --out "
    << o.name << ".yaml\n";
  y << "name: " << o.name << "\n";
  if (net)
    y << "fitted_on: " << net->name
      << "   # roofline efficiencies fitted on this network's layers: not held-out for it\n";
  y << fmt::format("description: this machine ({} cores), measured by strata calibrate\n", cores);
  y << "device:\n";
  y << "  name: one worker of this machine\n";
  y << fmt::format(
      "  peak: {{fp32: {:.4g} GFLOP/s}}   # fastest GEMM shape of the kernel tables below, {}\n",
      peak / 1e9, where);
  y << fmt::format(
      "  memory_bandwidth: {:.4g} GB/s   # std::copy of 64 MiB, read + write, best of 5\n",
      memBw / 1e9);
  // What this process may allocate: a cgroup or ulimit -v below the
  // physical memory is what the workers of a run get.
  const MemoryLimit memory = availableMemory();
  y << "  memory_capacity: " << fmt::format("{:.4g} GB", memory.bytes / 1e9) << "   # "
    << memory.what << ", shared by the workers\n";
  y << fmt::format(
      "  memory_efficiency: {:.3g}   # SGD update of {:.0f} parameters took {} (5 x 4 B each), "
      "{}\n",
      memEff, sgdParams, formatSeconds(Seconds(sgdSeconds)),
      net ? "on " + net->name + "'s parameters" : "the sgd kernel table's largest size");
  y << fmt::format(
      "  reduce_bandwidth: {:.4g} GB/s   # y += x over 64 MiB, bytes of x per second, best of "
      "5\n",
      reduceBw / 1e9);
  if (net) {
    y << "  efficiency:   # roofline only (element types without tables): achieved share of the "
         "peak on "
      << net->name << "'s layers, batch " << o.batch << ", median of 3 passes\n";
    double smallest = 1;
    for (const auto& [kind, ft] : perKind) {
      if (ft.first <= 0 || ft.second <= 0)
        continue;
      const double eff = std::clamp(ft.first / (peak * ft.second), 1e-4, 1.0);
      smallest = std::min(smallest, eff);
      y << fmt::format("    {}: {:.4g}   # {} over {}\n", toString(kind), eff,
                       formatFlops(Flops(ft.first)), formatSeconds(Seconds(ft.second)));
    }
    y << fmt::format("    default: {:.4g}   # kinds not in {}: the least efficient kind measured\n",
                     smallest, net->name);
  } else {
    // Mid-sized shapes of the tables stand for the GEMM-bound kinds.
    const double conv = tables.gemmRate(GemmOp::kNN, 64, 1024, 256) / peak;
    const double fc = tables.gemmRate(GemmOp::kNT, 64, 1024, 1024) / peak;
    y << "  efficiency:   # roofline only (element types without tables), from the GEMM tables\n";
    y << fmt::format("    conv: {:.4g}   # nn GEMM 64 x 1024 x 256 (an im2col convolution)\n",
                     std::clamp(conv, 1e-4, 1.0));
    y << fmt::format("    fc: {:.4g}   # nt GEMM 64 x 1024 x 1024 (an fc layer, batch 64)\n",
                     std::clamp(fc, 1e-4, 1.0));
    y << "    default: 0.1   # estimate: memory-bound kinds; their time comes from bandwidth\n";
  }
  y << "  sharing:   # speed of each worker when this many run at once, relative to alone "
       "(median of every trial, each alone then together: 2 before, between and after the kernel "
       "tables' sweeps and 3 at the end): threads running 256^3 GEMMs (speed) or "
       "copying 16 MiB (memory_speed, the 16384 KiB entry of memory_speed_by_size: copying that "
       "many bytes each) together; with each "
       "worker's communication lane exchanging 4 MiB "
       "segments with its ring neighbours and summing them while its compute lane runs GEMMs: "
       "the compute lane's speed (overlap_compute_speed) and the exchanges' "
       "(overlap_comm_speed), the exchanges' speed while the compute lane runs 128^3 GEMMs only "
       "a share d of every 2 ms slice and sleeps the rest (overlap_comm_speed_by_duty: [d, "
       "speed] for d = 0, 0.25, 0.5, 0.75, 1; d = 0 is the lane alone, d = 1 is "
       "overlap_comm_speed), and the bytes per second each worker's exchanges sent alone "
       "(overlap_comm_rate: on a slower link the lane waits on the wire and leaves the cores to "
       "compute); lane_handoff: a thread asleep on a condition variable runs again "
       "after another notifies it and waits, while one fewer threads than workers run GEMMs "
       "(the other workers' compute lanes; half a ping-pong of two threads, median of 3 x "
       "300), as the executor's compute and communication lanes release each other\n";
  detail::sharingRowsYaml(y, sharing);
  y << detail::kernelTablesYaml(tables, where, o.sweeps);
  y << "topology:\n";
  y << "  - name: shared-memory\n";
  y << fmt::format("    group: {}   # workers on this machine: up to the largest sharing entry\n",
                   std::max<int>(o.maxWorkers, int(cores)));
  detail::linkYaml(y, link, commKind, detail::duplexYaml(exchange, kExchangeBytes));
  return y.str();
}

LaneOverlap measureLaneOverlap(Communicator& comm) {
  if (comm.size() < 2)
    throw OptionError(
        "-np", fmt::format("the lanes' overlap needs 2 or more workers, got {}", comm.size()));
  const auto t = detail::measureOverlapOn(comm);
  return {comm.size(), t.compute, t.comm, t.commRate, t.commByDuty, t.computeByDuty};
}

LaneOverlap measureLaneOverlap(int workers) {
  if (workers < 2)
    throw OptionError("--sharing-up-to",
                      fmt::format("the lanes' overlap needs 2 or more workers, got {}", workers));
  const auto t = detail::measureOverlap(workers);
  return {workers, t.compute, t.comm, t.commRate, t.commByDuty, t.computeByDuty};
}

namespace {
// `threads` threads, each running `timeOnce` (one timed call on its own
// buffers, made by `make`) `calls` times after a warm-up, from a common
// start; the slowest thread's median rate, `units` per call.
template <class Make>
double slowestMedianRate(int calls, int threads, double units, Make make) {
  STRATA_ENFORCE(calls >= 1);
  STRATA_ENFORCE(threads >= 1 && threads <= 1024);
  std::vector<double> rates(static_cast<size_t>(threads));
  std::atomic<int> ready{0};
  auto time = [&](int who) {
    auto once = make();  // this thread's buffers, and its timed call
    once();
    // A common start: every thread's timings overlap the others'.
    ready.fetch_add(1);
    while (ready.load() < threads) {
    }
    std::vector<double> t;
    for (int i = 0; i < calls; ++i)
      t.push_back(once());
    rates[static_cast<size_t>(who)] = units / median(t);
  };
  std::vector<std::thread> others;
  for (int i = 1; i < threads; ++i)
    others.emplace_back(time, i);
  time(0);
  for (auto& th : others)
    th.join();
  return *std::min_element(rates.begin(), rates.end());
}
}  // namespace

double referenceGemmRate(int calls, int threads) {
  constexpr int n = kReferenceGemm;
  return slowestMedianRate(calls, threads, 2.0 * n * n * n, [] {
    return
        [a = std::vector<float>(size_t(n) * n, 0.01f), b = std::vector<float>(size_t(n) * n, 0.02f),
         c = std::vector<float>(size_t(n) * n)]() mutable {
          const auto t0 = Clock::now();
          nn::CpuBackend::gemm(GemmOp::kNN, n, n, n, a.data(), b.data(), c.data(), false);
          return since(t0);
        };
  });
}

double referenceCopyRate(int calls, int threads) {
  constexpr int64_t n = kReferenceCopy;
  return slowestMedianRate(calls, threads, double(n), [] {
    return [x = std::vector<float>(size_t(n), 0.01f), y = std::vector<float>(size_t(n)),
            be = std::make_unique<nn::CpuBackend>()]() mutable {
      const nn::Dims d{1, 64, 1, static_cast<int>(n / 64)};  // as calibrate's tables
      const auto t0 = Clock::now();
      be->accumulate(nn::ConstTensorView{x.data(), d}, nn::TensorView{y.data(), d}, 0.0f);
      return since(t0);
    };
  });
}

}  // namespace strata::exec

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

#include "layer_timing.h"
#include "strata/exec/comm/local_communicator.h"
#include "strata/exec/nn/dataset.h"
#include "strata/exec/nn/model.h"
#include "strata/model/error.h"
#include "strata/model/fit.h"
#include "strata/model/quantity_text.h"

namespace strata::exec {

namespace {

using Clock = std::chrono::steady_clock;

double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Best of `reps` timings of fn (the least disturbed by the noisy VM).
template <class F>
double bestOf(int reps, F&& fn) {
  double best = 1e300;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    fn();
    best = std::min(best, seconds(t0, Clock::now()));
  }
  return best;
}

// A one-layer fc network for the GEMM peak.
Network fcNetwork(int in, int out) {
  Network n;
  n.name = "calibration-fc";
  n.sourceFile = "strata calibrate";
  n.input = Shape{in, 1, 1};
  Layer l;
  l.name = "fc";
  l.kind = LayerKind::kFc;
  l.spec.outputs = out;
  l.inputs = {-1};
  deriveLayer(l, {n.input}, n.sourceFile, 0);
  n.layers.push_back(l);
  Layer loss;  // the Model trains against labels through a softmax
  loss.name = "loss";
  loss.kind = LayerKind::kSoftmax;
  loss.inputs = {0};
  deriveLayer(loss, {l.outShape}, n.sourceFile, 1);
  n.layers.push_back(loss);
  return n;
}

// One-way time of n bytes between ranks 0 and 1 (half a ping-pong).
std::vector<TimingSample> pingPong(Communicator& comm) {
  std::vector<TimingSample> samples;
  if (comm.rank() > 1)
    return samples;
  const int peer = 1 - comm.rank();
  for (double n = 1024; n <= 64.0 * 1024 * 1024; n *= 4) {
    // Messages come from and land in buffers that are not in cache, as a
    // training step's gradients and activations are: rotate through 32 MiB.
    const auto size = static_cast<size_t>(n);
    std::vector<std::vector<std::byte>> bufs(std::max<size_t>(1, (32u << 20) / size),
                                             std::vector<std::byte>(size, std::byte{1}));
    const int reps = n < 1e6 ? 200 : n < 16e6 ? 20 : 5;
    std::vector<double> times;
    for (int r = 0; r < reps + 1; ++r) {
      auto& buf = bufs[static_cast<size_t>(r) % bufs.size()];
      const auto t0 = Clock::now();
      if (comm.rank() == 0) {
        comm.send(peer, 1, buf);
        comm.recv(peer, 2, buf);
      } else {
        comm.recv(peer, 1, buf);
        comm.send(peer, 2, buf);
      }
      if (r > 0)
        times.push_back(seconds(t0, Clock::now()) / 2);
    }
    samples.push_back({n, median(times)});
  }
  return samples;
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

std::string calibrate(const CalibrationOptions& o) {
  auto say = [&](const std::string& s) {
    if (o.progress)
      o.progress(s);
  };
  if (!o.network)
    throw UserError("calibrate needs a network whose layers to time");
  const Network& net = *o.network;
  const std::string where = fmt::format("`strata calibrate` on {}, {}", host(), today());
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());

  // 1. GEMM peak: the fastest pass of a 1024 x 1024 fc on 256 examples.
  const auto fc = fcNetwork(1024, 1024);
  const auto gemm = detail::timeLayers(fc, 256, 3);
  const double gemmFlops = 2.0 * 1024 * 1024 * 256;
  const double peak =
      gemmFlops / std::min({gemm.fwd[0], gemm.bwdWeights[0] > 0 ? gemm.bwdWeights[0] : 1e300});
  say(fmt::format("GEMM peak        {}", formatFlopRate(FlopsPerSecond(peak))));

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

  // 3. Layer kinds: each kind's achieved share of the peak on this network's
  // layers, so the model's time for them is the measured time.
  const auto times = detail::timeLayers(net, o.batch, 3);
  std::map<LayerKind, std::pair<double, double>> perKind;  // FLOPs, seconds
  for (size_t l = 0; l < net.layers.size(); ++l) {
    const auto& layer = net.layers[l];
    auto& k = perKind[layer.kind];
    k.first += o.batch * (layer.fwdFlops + (layer.hasWeights() ? layer.bwdWeightsFlops : 0) +
                          (layer.readsNetworkInput() ? 0 : layer.bwdDataFlops));
    k.second += times.fwd[l] + times.bwdData[l] + times.bwdWeights[l];
  }
  double params = 0;
  for (const auto& l : net.layers)
    params += double(l.params);
  // SGD with momentum reads w, g, v and writes w, v (estimate.h).
  const double memEff = std::clamp(5.0 * params * 4 / times.updateAll / memBw, 0.01, 1.0);
  say(fmt::format("SGD update       {} for {} parameters", formatSeconds(Seconds(times.updateAll)),
                  params));

  // 4. Communicator: alpha, beta and bandwidth by size, ranks 0 and 1.
  std::vector<TimingSample> samples;
  std::string commKind;
  if (o.comm && o.comm->size() >= 2) {
    samples = pingPong(*o.comm);
    commKind = "MPI ranks 0 and 1";
  } else {
    runLocal(2, [&](Communicator& c) {
      auto s = pingPong(c);
      if (c.rank() == 0)
        samples = s;
    });
    commKind = "two threads (strata run's local communicator)";
  }
  // beta from the least-squares fit; alpha from the smallest message (the fit's
  // intercept is unstable when bandwidth varies this much with size), and the
  // table makes alpha + n / beta(n) reproduce every measured size.
  auto ab = fitAlphaBeta(samples);
  ab.alpha = Seconds(0.9 * samples.front().seconds);
  const auto table = bandwidthTable(samples, ab.alpha);
  say(fmt::format("link             alpha {}, beta {} (fit within {:.0f} %)",
                  formatSeconds(ab.alpha), formatBandwidth(ab.beta), 100 * ab.maxRelativeError));

  // 5. Sharing: K workers running whole training passes of this network at
  // once, from a common start; speed = time of the passes alone / together.
  std::vector<std::pair<int, double>> sharing;
  double alone = 0;
  const int passes = 6;
  for (int k = 1; k <= o.maxWorkers; k *= 2) {
    std::vector<std::unique_ptr<nn::Model>> models;
    for (int w = 0; w < k; ++w) {
      nn::ModelOptions mo;
      models.push_back(std::make_unique<nn::Model>(net, mo));
      auto& x = models.back()->input(o.batch);
      const auto data = nn::SyntheticDataset::forNetwork(net, 11);
      const auto& last = net.layers.back().outShape;
      std::vector<int32_t> labels(static_cast<size_t>(o.batch) * last.h * last.w);
      data.fill(0, x.view(), labels, last.h * last.w);
      models.back()->setLabels(labels);
      models.back()->forwardAll();  // warm up
    }
    std::atomic<int> ready{0};
    std::vector<std::thread> threads;
    const auto t0 = Clock::now();
    for (int w = 0; w < k; ++w)
      threads.emplace_back([&, w] {
        ready.fetch_add(1);
        while (ready.load() < k) {
        }
        for (int p = 0; p < passes; ++p) {
          models[static_cast<size_t>(w)]->forwardAll();
          models[static_cast<size_t>(w)]->backwardAll();
        }
      });
    for (auto& t : threads)
      t.join();
    const double together = seconds(t0, Clock::now());
    if (k == 1)
      alone = together;
    sharing.push_back({k, std::min(1.0, alone / together)});
    say(fmt::format("sharing          {} workers: speed {:.2f} of alone", k, alone / together));
  }

  // The YAML, every number with its provenance.
  std::ostringstream y;
  y << fmt::format("# This machine as measured by {}.\n", where);
  y << "# Regenerate with: strata calibrate --network " << net.name << " --out " << o.name
    << ".yaml\n";
  y << "name: " << o.name << "\n";
  y << fmt::format("description: this machine ({} cores), measured by strata calibrate\n", cores);
  y << "device:\n";
  y << "  name: one worker of this machine\n";
  y << fmt::format(
      "  peak: {{fp32: {:.4g} GFLOP/s}}   # best pass of a 1024x1024 fc on 256 examples "
      "(Eigen GEMM), {}\n",
      peak / 1e9, where);
  y << fmt::format(
      "  memory_bandwidth: {:.4g} GB/s   # std::copy of 64 MiB, read + write, best of 5\n",
      memBw / 1e9);
  y << "  memory_capacity: "
    << fmt::format("{:.4g} GB",
                   double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGE_SIZE)) / 1e9)
    << "   # physical memory (sysconf), shared by the workers\n";
  y << fmt::format(
      "  memory_efficiency: {:.3g}   # SGD update of {}'s {:.0f} parameters took {} (5 x 4 B "
      "each)\n",
      memEff, net.name, params, formatSeconds(Seconds(times.updateAll)));
  y << fmt::format(
      "  reduce_bandwidth: {:.4g} GB/s   # y += x over 64 MiB, bytes of x per second, best of "
      "5\n",
      reduceBw / 1e9);
  y << "  efficiency:   # achieved share of the peak on " << net.name << "'s layers, batch "
    << o.batch << ", median of 3 passes\n";
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
                   smallest, net.name);
  y << "  sharing:   # speed of each worker when this many run at once, relative to alone\n";
  for (const auto& [k, s] : sharing)
    y << fmt::format("    - {{workers: {}, speed: {:.3f}}}   # {} concurrent passes of {}\n", k, s,
                     k, net.name);
  y << "topology:\n";
  y << "  - name: shared-memory\n";
  y << fmt::format("    group: {}   # workers on this machine: up to the largest sharing entry\n",
                   std::max<int>(o.maxWorkers, int(cores)));
  y << "    link:\n";
  y << fmt::format(
      "      bandwidth: {:.4g} GB/s   # fitted t = alpha + n / beta over 1 KiB..64 MiB, {}\n",
      ab.beta.value() / 1e9, commKind);
  y << fmt::format(
      "      latency: {:.4g} us   # 0.9 x the one-way time of 1 KiB (the fit above is off by up "
      "to {:.0f} %: the table carries the rest)\n",
      ab.alpha.value() * 1e6, 100 * ab.maxRelativeError);
  y << "      duplex: half   # both directions are copies through the same cores and memory\n";
  y << "      bandwidth_table:   # n / (t(n) - alpha) per message size: small messages are "
       "slower\n";
  for (const auto& p : table)
    y << fmt::format("        - {{bytes: {:.0f}, bandwidth: {:.4g} GB/s}}\n", p.bytes.value(),
                     p.bandwidth.value() / 1e9);
  return y.str();
}

}  // namespace strata::exec

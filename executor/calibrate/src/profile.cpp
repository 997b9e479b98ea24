#include "strata/exec/profile.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <ctime>

#include "layer_timing.h"
#include "strata/exec/device.h"
#include "strata/exec/nn/dataset.h"
#include "strata/exec/nn/model.h"
#include "strata/exec/runtime.h"
#include "strata/model/error.h"
#include "timing.h"

namespace strata::exec {

namespace detail {

namespace {

// The median of the timings after the first (the warm-up); 0 when none.
double medianAfterWarmup(std::vector<double> v) {
  if (v.size() <= 1)
    return 0.0;
  v.erase(v.begin());
  return median(v);
}

}  // namespace

LayerTimes timeLayers(const Network& net, int b, int repeats, Device device, int threads,
                      ElementType element, Optimizer optimizer,
                      const std::function<void(int, int)>& progress) {
  const auto backend = makeBackend(device, "--device", 0, threads, element);
  nn::ModelOptions mo;
  mo.dropout = true;
  mo.backend = backend.get();
  nn::Model model(net, mo);
  const auto data = nn::SyntheticDataset::forNetwork(net, 7);
  auto& x = model.input(b);
  const auto& last = net.layers.back().outShape;
  std::vector<int32_t> labels(static_cast<size_t>(b) * last.h * last.w);
  {
    // Made on the host, then uploaded (the backend's memory may be a GPU's).
    nn::Tensor examples(x.dims());
    data.fill(0, examples.view(), labels, last.h * last.w);
    x.upload(examples.span());
  }
  if (net.layers.back().kind == LayerKind::kSoftmax)
    model.setLabels(labels);
  const size_t n = net.layers.size();
  std::vector<std::vector<double>> f(n), d(n), w(n), u(n);
  std::vector<double> all;
  // Each call between two marks of the backend's timer: host time on the
  // CPU, GPU time (CUDA events) on CUDA. A pass is read after it ends.
  WorkTimer timer(*backend);
  // Learning rate 0: every pass times the same weights.
  nn::UpdateRule rule;
  rule.optimizer = optimizer;
  rule.learningRate = 0.0f;
  for (int rep = 0; rep < repeats + 1; ++rep) {
    timer.start();
    model.zeroGradients();
    std::vector<std::pair<int, int>> fm(n, {-1, -1}), dm = fm, wm = fm, um = fm;
    const auto timed = [&](std::pair<int, int>& marks, auto&& call) {
      marks.first = timer.mark();
      call();
      marks.second = timer.mark();
    };
    for (size_t l = 0; l < n; ++l)
      timed(fm[l], [&] { model.forward(static_cast<int>(l)); });
    for (size_t l = n; l-- > 0;) {
      const auto& layer = net.layers[l];
      if (layer.hasWeights())
        timed(wm[l], [&] { model.backwardWeights(static_cast<int>(l)); });
      if (!layer.readsNetworkInput())
        timed(dm[l], [&] { model.backwardData(static_cast<int>(l)); });
    }
    for (size_t l = 0; l < n; ++l)
      if (net.layers[l].hasWeights())
        timed(um[l], [&] { model.update(static_cast<int>(l), rule); });
    std::pair<int, int> am;
    timed(am, [&] { model.updateAll(rule); });
    timer.finish();
    const auto seconds = [&](std::pair<int, int> m) {
      return timer.seconds(m.second) - timer.seconds(m.first);
    };
    for (size_t l = 0; l < n; ++l) {
      f[l].push_back(seconds(fm[l]));
      if (wm[l].first >= 0)
        w[l].push_back(seconds(wm[l]));
      if (dm[l].first >= 0)
        d[l].push_back(seconds(dm[l]));
      if (um[l].first >= 0)
        u[l].push_back(seconds(um[l]));
    }
    all.push_back(seconds(am));
    if (progress)
      progress(rep + 1, repeats + 1);
  }
  LayerTimes t;
  for (size_t l = 0; l < n; ++l) {
    t.fwd.push_back(medianAfterWarmup(f[l]));
    t.bwdData.push_back(medianAfterWarmup(d[l]));
    t.bwdWeights.push_back(medianAfterWarmup(w[l]));
    t.update.push_back(medianAfterWarmup(u[l]));
  }
  t.updateAll = medianAfterWarmup(all);
  return t;
}

}  // namespace detail

OpProfile profileNetwork(const Network& network, int batch, int repeats, Device device, int threads,
                         ElementType element, Optimizer optimizer,
                         const std::function<void(int, int)>& progress) {
  checkElement(element, device);
  checkThreadsPerWorker(threads);
  if (threads > 1 && device != Device::kCpu)
    throw OptionError("--threads-per-worker",
                      "applies to --device cpu (a cuda worker's kernels run on its GPU)");
  if (batch < 1)
    throw OptionError("--batch", fmt::format("must be at least 1, got {}", batch));
  if (repeats < 1 || repeats > 1000)
    throw OptionError("--repeats", fmt::format("must be in 1..1000, got {}", repeats));
  Scenario one;  // one worker's passes at `batch`: bounded like a run
  one.workers = 1;
  one.batchPerWorker = batch;
  one.options.element = element;
  one.options.optimizer = optimizer;
  RunOptions run;
  run.device = device;
  run.threadsPerWorker = threads;
  checkRun(network, one, run, RunPlacement::kThreads);
  const auto t =
      detail::timeLayers(network, batch, repeats, device, threads, element, optimizer, progress);
  OpProfile p;
  p.network = network.name;
  p.batch = batch;
  p.repeats = repeats;
  char hostName[256] = {};
  gethostname(hostName, sizeof hostName - 1);
  const std::time_t now = std::time(nullptr);
  char day[32];
  std::strftime(day, sizeof day, "%Y-%m-%d", std::gmtime(&now));
  p.provenance = fmt::format(
      "measured by `strata profile -n {} --batch {}{}{}{}{}` on {}, {}", network.name, batch,
      device == Device::kCpu ? "" : " --device " + std::string(toString(device)),
      element == ElementType::kFp32 ? "" : " --element " + std::string(toString(element)),
      threads == 1 ? "" : fmt::format(" --threads-per-worker {}", threads),
      optimizer == Optimizer::kMomentum ? "" : " --optimizer " + std::string(toString(optimizer)),
      hostName, day);
  for (size_t l = 0; l < network.layers.size(); ++l)
    p.layers.push_back({network.layers[l].name, Seconds(t.fwd[l]), Seconds(t.bwdData[l]),
                        Seconds(t.bwdWeights[l]), Seconds(t.update[l])});
  return p;
}

}  // namespace strata::exec

#include "strata/exec/profile.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <ctime>

#include "layer_timing.h"
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

LayerTimes timeLayers(const Network& net, int b, int repeats) {
  nn::ModelOptions mo;
  mo.dropout = true;
  nn::Model model(net, mo);
  const auto data = nn::SyntheticDataset::forNetwork(net, 7);
  auto& x = model.input(b);
  const auto& last = net.layers.back().outShape;
  std::vector<int32_t> labels(static_cast<size_t>(b) * last.h * last.w);
  data.fill(0, x.view(), labels, last.h * last.w);
  if (net.layers.back().kind == LayerKind::kSoftmax)
    model.setLabels(labels);
  const size_t n = net.layers.size();
  std::vector<std::vector<double>> f(n), d(n), w(n), u(n);
  std::vector<double> all;
  for (int rep = 0; rep < repeats + 1; ++rep) {
    model.zeroGradients();
    for (size_t l = 0; l < n; ++l) {
      const auto t0 = Clock::now();
      model.forward(static_cast<int>(l));
      f[l].push_back(since(t0));
    }
    for (size_t l = n; l-- > 0;) {
      const auto& layer = net.layers[l];
      if (layer.hasWeights()) {
        const auto t0 = Clock::now();
        model.backwardWeights(static_cast<int>(l));
        w[l].push_back(since(t0));
      }
      if (!layer.readsNetworkInput()) {
        const auto t0 = Clock::now();
        model.backwardData(static_cast<int>(l));
        d[l].push_back(since(t0));
      }
    }
    for (size_t l = 0; l < n; ++l) {
      if (!net.layers[l].hasWeights())
        continue;
      const auto t0 = Clock::now();
      model.update(static_cast<int>(l), 0.0f, 0.9f);
      u[l].push_back(since(t0));
    }
    const auto t0 = Clock::now();
    model.updateAll(0.0f, 0.9f);
    all.push_back(since(t0));
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

OpProfile profileNetwork(const Network& network, int batch, int repeats) {
  if (batch < 1)
    throw OptionError("--batch", fmt::format("must be at least 1, got {}", batch));
  if (repeats < 1 || repeats > 1000)
    throw OptionError("--repeats", fmt::format("must be in 1..1000, got {}", repeats));
  checkRunnable(network, Scenario{});
  const auto t = detail::timeLayers(network, batch, repeats);
  OpProfile p;
  p.network = network.name;
  p.batch = batch;
  p.repeats = repeats;
  char hostName[256] = {};
  gethostname(hostName, sizeof hostName - 1);
  const std::time_t now = std::time(nullptr);
  char day[32];
  std::strftime(day, sizeof day, "%Y-%m-%d", std::gmtime(&now));
  p.provenance = fmt::format("measured by `strata profile -n {} --batch {}` on {}, {}",
                             network.name, batch, hostName, day);
  for (size_t l = 0; l < network.layers.size(); ++l)
    p.layers.push_back({network.layers[l].name, Seconds(t.fwd[l]), Seconds(t.bwdData[l]),
                        Seconds(t.bwdWeights[l]), Seconds(t.update[l])});
  return p;
}

}  // namespace strata::exec

#include "strata/model/compute_cost.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "strata/model/error.h"
#include "strata/model/estimate.h"
#include "strata/model/kernels.h"
#include "strata/model/layer_kinds.h"
#include "strata/model/lowering.h"

namespace strata {

namespace {
// Bytes a memory-bound kernel call touches per unit of its table (elements
// produced, parameters updated): a float read and a float written. The
// sharing slowdown of memory-bound kernels depends on whether that working
// set stays in a core's own caches (DeviceSpec::sharingMemorySpeed by size).
constexpr double kMemoryBytesPerUnit = 8;

}  // namespace

double dramShare(double bytesPerThread) {
  constexpr double kInCache = 1024.0 * 1024, kInDram = 16.0 * 1024 * 1024;
  return std::clamp(
      std::log(std::max(bytesPerThread, kInCache) / kInCache) / std::log(kInDram / kInCache), 0.0,
      1.0);
}

double rowSpeed(double gemmSpeed, double copySpeed, double memoryShare) {
  STRATA_ENFORCE(gemmSpeed > 0 && memoryShare >= 0 && memoryShare <= 1);
  if (copySpeed <= 0)
    return gemmSpeed;
  return 1.0 / ((1.0 - memoryShare) / gemmSpeed + memoryShare / copySpeed);
}

std::string_view toString(ComputeSource source) {
  switch (source) {
    case ComputeSource::kProfile:
      return "profile";
    case ComputeSource::kTables:
      return "kernel tables";
    case ComputeSource::kRoofline:
      return "roofline";
  }
  return "?";
}

ComputeCosts::ComputeCosts(const Network& network, const Cluster& cluster, ElementType element,
                           int workersPerNode, Optimizer optimizer, int threadsPerWorker,
                           double stepExamples)
    : net_(network),
      device_(cluster.device),
      element_(element),
      optimizer_(optimizer),
      clusterFile_(std::filesystem::path(cluster.sourceFile).filename().string()),
      peak_(cluster.device.peakFor(element, cluster.sourceFile)),
      speed_(threadsPerWorker * cluster.device.sharingSpeed(workersPerNode * threadsPerWorker) *
             cluster.device.computeScale),
      busyCores_(workersPerNode * threadsPerWorker),
      threads_(threadsPerWorker),
      stepExamples_(stepExamples) {
  if (device_.kernels.hasCold() && device_.kernels.residencyCache().value() > 0) {
    tableCache_ = device_.kernels.residencyCache().value();
    cache_ = tableCache_ / std::max(1, workersPerNode);
  }
  if ((device_.kernels.hasWarm() || device_.kernels.hasGemmWarm()) &&
      device_.kernels.coreCache.value() > 0)
    core_ = device_.kernels.coreCache.value() * std::max(1, threadsPerWorker);
  if (device_.profile) {
    checkProfileMatches(*device_.profile, network);
    source_ = ComputeSource::kProfile;
  } else if (device_.kernels.pricesElement(element)) {
    source_ = ComputeSource::kTables;
    if (element != ElementType::kFp32)
      elementTables_ = std::make_shared<const KernelTables>(device_.kernels.forElement(element));
  } else {
    source_ = ComputeSource::kRoofline;
  }
}

ComputeCosts::TablesTime ComputeCosts::fromTables(int index, Phase phase, double examples,
                                                  double fraction) const {
  const Layer& l = net_.layers[static_cast<size_t>(index)];
  const int outputs =
      fraction < 1.0 ? static_cast<int>(std::ceil(double(l.outShape.c) * fraction - 1e-9)) : 0;
  // Whole examples are run; a fractional count (owt-c's b/K) is the mean of
  // the neighbours' costs.
  const double lo = std::max(1.0, std::floor(examples));
  const double hi = std::max(1.0, std::ceil(examples));
  const double w = hi > lo ? examples - lo : 0.0;
  const auto& t = tables();
  TablesTime result;
  bool any = false;
  const double cold = cache_ > 0 ? coldShare(index, phase, examples) : 0.0;
  const double warm =
      core_ > 0 ? std::max(0.0, evictedShare(index, phase, examples, core_) - cold) : 0.0;
  for (int side = 0; side < (hi > lo ? 2 : 1); ++side) {
    const double ex = side == 0 ? lo : hi;
    const double weight = side == 0 ? 1.0 - w : w;
    if (weight <= 0)
      continue;
    Seconds gemm, memory, dram;
    // A memory-bound call: hot from the tables, warm (operands out of the
    // core's cache, in the last-level one) from the warm tables, cold
    // (operands no longer cached: all DRAM traffic) from the cold tables, by
    // the phase's shares (`share`, where given: a GEMM's zero fill, by its
    // C's).
    struct Shares {
      double cold = -1, warm = 0;
    };
    auto memoryCall = [&](const KernelCall& c, Shares share = {}) {
      const double callCold = share.cold >= 0 ? share.cold : cold;
      const double callWarm = share.cold >= 0 ? share.warm : warm;
      bool outside = false;
      if (t.memory[static_cast<size_t>(c.kernel)].empty()) {
        outside_.insert(fmt::format("{} not in the tables ({})", toString(c.kernel), l.name));
        memory += Seconds(c.units * c.count * 2 * elementBytes(element_) /
                          (device_.memoryBandwidth.value() * device_.memoryEfficiency)) /
                  memorySpeed(c.units * kMemoryBytesPerUnit);
        return;
      }
      auto time = [&](Residence at) {
        if (c.window > 0)
          return t.windowTime(c.kernel, c.units, c.window, &outside, at);
        if (c.rowWidth > 0)
          return t.columnsTime(c.kernel, c.units, c.rowWidth, c.stride, &outside, at);
        return t.memoryTime(c.kernel, c.units, &outside, at);
      };
      const Seconds hot = time(Residence::kHot) * std::max(0.0, 1 - callCold - callWarm);
      const Seconds fromLlc = callWarm > 0 ? time(Residence::kWarm) * callWarm : Seconds(0);
      const Seconds fromDram = callCold > 0 ? time(Residence::kCold) * callCold : Seconds(0);
      const double scale = c.count / memorySpeed(c.units * kMemoryBytesPerUnit);
      memory += (hot + fromLlc + fromDram) * scale;
      dram += ((hot + fromLlc) * dramShare(c.units * kMemoryBytesPerUnit / threads_) + fromDram) *
              scale;
      if (outside)
        outside_.insert(
            c.window > 0 ? fmt::format("{} of {:.0f}, window {:.0f} ({})", toString(c.kernel),
                                       c.units, c.window, l.name)
                         : fmt::format("{} of {:.0f} ({})", toString(c.kernel), c.units, l.name));
    };
    const auto calls = lower(t.backend, net_, index, phase, ex, outputs, updateKernel(), threads_);
    // A gradient overwritten by a GEMM that adds into it is zero filled
    // first (a kZero call of its size before the GEMM): the fill brings it
    // into the cache, at its cold share, and the GEMM finds it there.
    std::vector<Shares> fillShare(calls.size());
    std::vector<char> zeroed(calls.size(), 0);
    // A written operand's shares: out of every cache, and out of the core's
    // only.
    auto writtenShares = [&](GemmOperand held, double bytes) {
      Shares s;
      s.cold = cache_ > 0 ? operandCold(index, phase, ex, held, bytes, cache_) : 0.0;
      if (core_ > 0)
        s.warm = std::max(0.0, operandCold(index, phase, ex, held, bytes, core_) - s.cold);
      return s;
    };
    for (size_t i = 0; i < calls.size() && (cache_ > 0 || core_ > 0); ++i) {
      const auto& c = calls[i];
      if (!c.gemm || !c.accumulate || c.c == GemmOperand::kScratch)
        continue;
      const double units = double(c.m) * double(c.n) * c.count;
      for (size_t j = 0; j < i; ++j)
        if (!calls[j].gemm && calls[j].kernel == MemKernel::kZero &&
            calls[j].units * calls[j].count == units && fillShare[j].cold < 0) {
          fillShare[j] = writtenShares(c.c, units * elementBytes(element_));
          zeroed[i] = 1;
          break;
        }
    }
    for (size_t i = 0; i < calls.size(); ++i) {
      const auto& c = calls[i];
      any = true;
      bool outside = false;
      if (c.conv) {
        gemm += t.convTime(c.pass, double(c.m), double(c.n), double(c.k), &outside) * c.count;
        if (outside)
          outside_.insert(
              fmt::format("conv {} {}x{}x{} ({})", toString(c.pass), c.m, c.n, c.k, l.name));
      } else if (c.gemm) {
        const Seconds hot =
            t.gemmTime(c.op, double(c.m), double(c.n), double(c.k), &outside) * c.count;
        gemm += hot;
        if (outside)
          outside_.insert(
              fmt::format("gemm {} {}x{}x{} ({})", toString(c.op), c.m, c.n, c.k, l.name));
        // Tables of the product alone: C = is Eigen's zero fill of C, then
        // it. The fill brings C into the cache (from DRAM by C's share).
        const bool fills = t.gemmAccumulates && !c.accumulate;
        if (fills) {
          KernelCall fill;
          fill.kernel = MemKernel::kZero;
          fill.units = double(c.m) * double(c.n);
          fill.count = c.count;
          memoryCall(fill, writtenShares(
                               c.c, double(c.m) * double(c.n) * elementBytes(element_) * c.count));
        }
        // Operands the step has evicted (KernelTables::gemmCold: the grid
        // is timed by repeated calls), the extra at DRAM's shared speed;
        // and those only the core's cache lost (gemmWarm), the extra at the
        // same speed (the last-level cache is shared as DRAM is).
        const double bytes = double(c.m * c.k + c.k * c.n + c.m * c.n) * elementBytes(element_);
        double coldPart = 0;
        if (t.hasGemmCold() && cache_ > 0) {
          coldPart = gemmColdShare(index, phase, ex, c, fills || zeroed[i], cache_, tableCache_);
          const double slowdown = t.gemmColdSlowdown(c.op, double(c.m), double(c.n), double(c.k));
          if (coldPart > 0 && slowdown > 1) {
            const Seconds extra = hot * ((slowdown - 1) * coldPart) / memorySpeed(bytes);
            memory += extra;
            dram += extra;
          }
        }
        if (t.hasGemmWarm() && core_ > 0) {
          const double share = std::max(0.0, gemmColdShare(index, phase, ex, c, fills || zeroed[i],
                                                           core_, t.coreCache.value()) -
                                                 coldPart);
          const double slowdown = t.gemmWarmSlowdown(c.op, double(c.m), double(c.n), double(c.k));
          if (share > 0 && slowdown > 1)
            memory += hot * ((slowdown - 1) * share) / memorySpeed(bytes);
        }
      } else {
        memoryCall(c, fillShare[i]);
      }
    }
    result.total += (gemm / speed_ + memory) * weight;
    result.dram += dram * weight;
  }
  if (any)
    result.total += t.callOverhead / speed_;
  return result;
}

double ComputeCosts::memorySpeed(double bytes) const {
  return threads_ * device_.sharingMemorySpeed(busyCores_, bytes / threads_) * device_.computeScale;
}

Seconds ComputeCosts::layer(int index, Phase phase, double examples, double fraction) const {
  const Layer& l = net_.layers[static_cast<size_t>(index)];
  if (phase == Phase::kBwdWeights && !l.computesWeightGradient())
    return Seconds(0);
  switch (source_) {
    case ComputeSource::kProfile:
      return device_.profile->time(index, phase, examples, fraction) / speed_;
    case ComputeSource::kTables:
      return fromTables(index, phase, examples, fraction).total;
    case ComputeSource::kRoofline:
      break;
  }
  return layerTime(l, phase, examples, fraction, device_, peak_, element_, optimizer_) / speed_;
}

const ComputeCosts::Traffic& ComputeCosts::traffic(double examples) const {
  const double ex = std::max(1.0, std::round(examples));
  if (auto it = traffic_.find(ex); it != traffic_.end())
    return it->second;
  const auto& t = tables();
  const size_t n = net_.layers.size();
  std::vector<double> fwd(n), bwd(n);
  auto bytes = [&](int index, Phase phase) {
    double b = 0;
    for (const auto& c : lower(t.backend, net_, index, phase, ex, 0, updateKernel(), threads_))
      b += c.count * (c.gemm || c.conv ? 4.0 * double(c.m * c.k + c.k * c.n + c.m * c.n)
                                       : c.units * kMemoryBytesPerUnit);
    return b;
  };
  Traffic tr{std::vector<double>(2 * n + 1, 0.0), std::vector<double>(n + 1, 0.0),
             std::vector<double>(n, 0.0)};
  for (size_t i = 0; i < n; ++i) {
    const int index = static_cast<int>(i);
    fwd[i] = bytes(index, Phase::kFwd);
    tr.weightGradient[i] =
        net_.layers[i].computesWeightGradient() ? bytes(index, Phase::kBwdWeights) : 0.0;
    // A layer that reads the network input computes no input gradient.
    bwd[i] = (net_.layers[i].readsNetworkInput() ? 0.0 : bytes(index, Phase::kBwdData)) +
             tr.weightGradient[i];
  }
  for (size_t p = 0; p < 2 * n; ++p)
    tr.before[p + 1] = tr.before[p] + (p < n ? fwd[p] : bwd[2 * n - 1 - p]);
  for (size_t i = n; i-- > 0;)
    tr.updateFrom[i] =
        tr.updateFrom[i + 1] +
        (net_.layers[i].hasWeights() ? bytes(static_cast<int>(i), Phase::kUpdate) : 0.0);
  return traffic_.emplace(ex, std::move(tr)).first->second;
}

double ComputeCosts::coldShare(int index, Phase phase, double examples) const {
  return evictedShare(index, phase, examples, cache_);
}

double ComputeCosts::warmShare(int index, Phase phase, double examples) const {
  if (core_ <= 0)
    return 0.0;
  return std::max(0.0, evictedShare(index, phase, examples, core_) -
                           evictedShare(index, phase, examples, cache_));
}

double ComputeCosts::evictedShare(int index, Phase phase, double examples, double cache) const {
  if (cache <= 0)
    return 0.0;
  // A phase with GEMMs prices what they write by their C (gemmColdShare);
  // one of memory-bound calls only counts it here.
  bool gemms = false;
  const auto& t = tables();
  for (const auto& c : lower(t.backend, net_, index, phase, std::max(1.0, std::round(examples)), 0,
                             updateKernel(), threads_))
    gemms = gemms || c.gemm || c.conv;
  const ColdBytes b = activationsCold(index, phase, examples, !gemms, cache);
  return b.all > 0 ? b.cold / b.all : 0.0;
}

double ComputeCosts::Traffic::between(int a, int b) const {
  const int end = static_cast<int>(before.size()) - 1;  // 2n
  a = std::clamp(a, 0, end);
  b = std::clamp(b, 0, end);
  return b > a ? before[static_cast<size_t>(b)] - before[static_cast<size_t>(a)] : 0.0;
}

std::vector<int> ComputeCosts::readers(int producer) const {
  std::vector<int> r;
  for (size_t c = 0; c < net_.layers.size(); ++c)
    for (int j : net_.layers[c].inputs)
      if (j == producer && static_cast<int>(c) > producer) {
        r.push_back(static_cast<int>(c));
        break;
      }
  return r;
}

double ComputeCosts::stepTraffic(double examples) const {
  const Traffic& tr = traffic(examples);
  return tr.before.back() + tr.updateFrom.front();
}

double ComputeCosts::residentShare(double size, double distance, double cache) {
  return std::min(1.0, cache / std::max(distance + size, 1.0));
}

ComputeCosts::ColdBytes ComputeCosts::activationsCold(int index, Phase phase, double examples,
                                                      bool written, double cache) const {
  if (cache <= 0 || phase == Phase::kUpdate)
    return {};
  const Traffic& tr = traffic(examples);
  const int n = static_cast<int>(net_.layers.size());
  const double ex = std::max(1.0, std::round(examples));
  const double e = elementBytes(element_);
  auto between = [&](int a, int b) { return tr.between(a, b); };
  const Layer& l = net_.layers[static_cast<size_t>(index)];
  auto outBytes = [&](int layer) {
    const Shape s = layer < 0 ? net_.input : net_.layers[static_cast<size_t>(layer)].outShape;
    return ex * double(s.elements()) * e;
  };
  ColdBytes b;
  auto operand = [&](double size, double distance) {
    b.all += size;
    b.cold += size * (1.0 - residentShare(size, distance, cache));
  };
  if (phase == Phase::kFwd) {
    // Each input, since its producer's forward (the network's input: since
    // the step began).
    for (int j : l.inputs)
      operand(outBytes(j), between(j + 1, index));
  } else {
    const int self = 2 * n - 1 - index;  // this layer's backward position
    // The output's gradient, since the backward of its first consumer (the
    // last to run before this one), or made just now (the loss's).
    const auto consumers = readers(index);
    operand(outBytes(index), consumers.empty() ? 0.0 : between(2 * n - consumers.front(), self));
    // The saved input, since this layer's forward (add and concat read no
    // input back: BackwardReads::kNothing).
    if (layerKindRow(l.kind).reads != BackwardReads::kNothing)
      for (int j : l.inputs)
        operand(outBytes(j), between(index + 1, self));
  }
  // What the phase writes over, with `written`: the output forward, the
  // inputs' gradients in backward data.
  if (written && phase == Phase::kFwd) {
    const double size = outBytes(index);
    b.all += size;
    b.cold += size * operandCold(index, phase, examples, GemmOperand::kOutput, size, cache);
  } else if (written && phase == Phase::kBwdData && !l.readsNetworkInput()) {
    for (int j : l.inputs) {
      const double size = outBytes(j);
      b.all += size;
      b.cold += size * operandCold(index, phase, examples, GemmOperand::kInputGrad, size, cache);
    }
  }
  return b;
}

double ComputeCosts::operandCold(int index, Phase phase, double examples, GemmOperand held,
                                 double size, double cache) const {
  if (cache <= 0 || held == GemmOperand::kScratch || size <= 0)
    return 0.0;
  const Traffic& tr = traffic(examples);
  const int n = static_cast<int>(net_.layers.size());
  const int self = 2 * n - 1 - index;  // this layer's backward position
  auto between = [&](int a, int b) { return tr.between(a, b); };
  const Layer& l = net_.layers[static_cast<size_t>(index)];
  const int input = l.inputs.empty() ? -1 : l.inputs.front();
  // The rest of the step before's backward from position p on, and its
  // updates.
  auto stepBeforeFrom = [&](int p) { return between(p, 2 * n) + tr.updateFrom[0]; };
  double distance = 0;
  switch (held) {
    case GemmOperand::kWeights:
      // The forward's since this layer's update in the step before (the
      // later layers' updates, then this step's forward up to here);
      // backward data's since the forward and this layer's weight gradient,
      // which a step computes first.
      distance = phase == Phase::kFwd
                     ? tr.updateFrom[static_cast<size_t>(index) + 1] + between(0, index)
                     : between(index + 1, self) + tr.weightGradient[static_cast<size_t>(index)];
      break;
    case GemmOperand::kWeightGrad:
      // Since the update of the step before: the whole step.
      distance = between(0, self) + tr.updateFrom[0];
      break;
    case GemmOperand::kInput:
      // Forward: since its producer's forward (the network input: since the
      // step began); backward: since this layer's forward.
      distance = phase == Phase::kFwd ? between(input + 1, index) : between(index + 1, self);
      break;
    case GemmOperand::kOutputGrad: {
      // Since the backward of its first consumer (the last to run before
      // this one), or made just now (the loss's).
      const auto r = readers(index);
      distance = r.empty() ? 0.0 : between(2 * n - r.front(), self);
      break;
    }
    case GemmOperand::kOutput: {
      // Written over what the step before last read: the backward of the
      // output's first consumer (the last of them to run), or of this layer.
      const auto r = readers(index);
      distance = stepBeforeFrom(2 * n - (r.empty() ? index : r.front())) + between(0, index);
      break;
    }
    case GemmOperand::kInputGrad: {
      // Summed from several readers: since the reader whose backward ran
      // just before this one, or since the first reader's forward cleared
      // it; else since the input's producer read it in the step before.
      // This layer's weight gradient ran first.
      const auto r = readers(input);
      if (r.size() > 1) {
        const auto next = std::upper_bound(r.begin(), r.end(), index);
        distance = next != r.end() ? between(2 * n - *next, self) : between(r.front(), self);
      } else {
        distance = stepBeforeFrom(2 * n - std::max(input, 0)) + between(0, self);
      }
      distance += tr.weightGradient[static_cast<size_t>(index)];
      break;
    }
    case GemmOperand::kScratch:
      break;
  }
  return 1.0 - residentShare(size, distance, cache);
}

double ComputeCosts::gemmColdShare(int index, Phase phase, double examples, const KernelCall& c,
                                   bool filled, double cache, double tableCache) const {
  const double e = elementBytes(element_);
  const double ex = std::max(1.0, std::round(examples));
  const double a = double(c.m) * double(c.k) * e, b = double(c.k) * double(c.n) * e,
               out = double(c.m) * double(c.n) * e;
  double cold = 0;
  for (const auto& [held, bytes] : {std::pair{c.a, a}, std::pair{c.b, b},
                                    std::pair{filled ? GemmOperand::kScratch : c.c, out}}) {
    // The weights (and their gradient) are one copy that each example's
    // call re-reads: only the first finds them out of the cache.
    const bool once = held == GemmOperand::kWeights || held == GemmOperand::kWeightGrad;
    const double distinct = bytes * (once ? std::max(1.0, c.count / ex) : c.count);
    cold += distinct * operandCold(index, phase, examples, held, distinct, cache);
  }
  const double all = (a + b + out) * c.count;
  // Only what the table had in the cache can come out of it: a call timed
  // back to back (calibrate, alone on the node) found min(1, C / size) of
  // its operands cached, so a 151 MB fc6 weight matrix is half cold in its
  // own table at C = 74 MiB.
  const double tableCold = 1.0 - std::min(1.0, tableCache / std::max(a + b + out, 1.0));
  if (all <= 0 || tableCold >= 1)
    return 0.0;
  return std::clamp((cold / all - tableCold) / (1.0 - tableCold), 0.0, 1.0);
}

Seconds ComputeCosts::dramPart(int index, Phase phase, double examples, double fraction) const {
  const Layer& l = net_.layers[static_cast<size_t>(index)];
  if (source_ != ComputeSource::kTables ||
      (phase == Phase::kBwdWeights && !l.computesWeightGradient()))
    return Seconds(0);
  return fromTables(index, phase, examples, fraction).dram;
}

Seconds ComputeCosts::update(double params) const {
  switch (source_) {
    case ComputeSource::kProfile: {
      // Per parameter, as the profile measured the whole network's updates.
      double p = 0;
      Seconds t;
      for (size_t i = 0; i < net_.layers.size(); ++i) {
        p += double(net_.layers[i].params);
        t += device_.profile->layers[i].update;
      }
      return p > 0 ? t * (params / p) / speed_ : Seconds(0);
    }
    case ComputeSource::kTables:
      if (!device_.kernels.memory[static_cast<size_t>(updateKernel())].empty()) {
        // The weights, gradients and optimizer state, last touched about a
        // step ago (the momentum by the step before's update): cold by the
        // residency rule at the step's traffic (stepExamples_), hot
        // without it.
        const auto& t = device_.kernels;
        const double size = params * kMemoryBytesPerUnit;
        const double distance = stepExamples_ > 0 ? stepTraffic(stepExamples_) : 0.0;
        const double cold =
            cache_ > 0 && stepExamples_ > 0 ? 1.0 - residentShare(size, distance, cache_) : 0.0;
        const double warm = core_ > 0 && stepExamples_ > 0
                                ? std::max(0.0, 1.0 - residentShare(size, distance, core_) - cold)
                                : 0.0;
        const Seconds hot = t.memoryTime(updateKernel(), params) * std::max(0.0, 1 - cold - warm);
        const Seconds fromLlc =
            warm > 0 ? t.memoryTime(updateKernel(), params, nullptr, Residence::kWarm) * warm
                     : Seconds(0);
        const Seconds fromDram =
            cold > 0 ? t.memoryTime(updateKernel(), params, nullptr, Residence::kCold) * cold
                     : Seconds(0);
        return (hot + fromLlc + fromDram) / memorySpeed(size);
      }
      break;
    case ComputeSource::kRoofline:
      break;
  }
  return updateTime(params, device_, element_, optimizer_) / speed_;
}

std::string ComputeCosts::describe() const {
  std::string s;
  switch (source_) {
    case ComputeSource::kProfile:
      s = fmt::format(
          "compute from the per-op profile {} (batch {})",
          device_.profile->sourceFile.empty() ? "measured now" : device_.profile->sourceFile,
          device_.profile->batch);
      break;
    case ComputeSource::kTables:
      s = fmt::format("compute from kernel tables (backend {}{})", device_.kernels.backend,
                      element_ == ElementType::kFp32
                          ? std::string()
                          : fmt::format("; {} GEMM and conv tables", toString(element_)));
      break;
    case ComputeSource::kRoofline:
      s = "compute from roofline x per-kind efficiency";
      if (element_ != ElementType::kFp32) {
        const auto type = std::string(toString(element_));
        s += device_.ownEfficiency(element_)
                 ? fmt::format(" ({} peak, {} efficiencies)", type, type)
                 : fmt::format(
                       " ({} peak; {} has no efficiency_by_element.{}: the fp32 "
                       "efficiencies are used, likely optimistic)",
                       type, clusterFile_.empty() ? "the cluster" : clusterFile_, type);
      }
      break;
  }
  if (!outside_.empty()) {
    s += fmt::format("; {} kernel shape{} outside the tables' grid (priced at the edge): ",
                     outside_.size(), outside_.size() == 1 ? "" : "s");
    int shown = 0;
    for (const auto& o : outside_) {
      if (shown++ == 3) {
        s += ", ...";
        break;
      }
      s += (shown > 1 ? ", " : "") + o;
    }
  }
  return s;
}

double dramBoundShare(const Network& network, const Cluster& cluster, const Scenario& sc) {
  const ComputeCosts costs(network, cluster, sc.options.element,
                           workersPerNode(cluster, sc.workers), sc.options.optimizer,
                           sc.options.threadsPerWorker, sc.batchPerWorker);
  if (costs.source() != ComputeSource::kTables)
    return 0.0;
  const bool split = isModelParallel(sc.strategy) && network.modelParallelFrom >= 0;
  Seconds total, dram;
  double params = 0;
  for (size_t i = 0; i < network.layers.size(); ++i) {
    const int index = static_cast<int>(i);
    // owt-*: a model-parallel layer runs every worker's examples on 1/K of
    // its outputs.
    const bool mp = split && index >= network.modelParallelFrom;
    const double examples = double(sc.batchPerWorker) * (mp ? sc.workers : 1);
    const double fraction = mp ? 1.0 / sc.workers : 1.0;
    for (Phase phase : {Phase::kFwd, Phase::kBwdData, Phase::kBwdWeights}) {
      total += costs.layer(index, phase, examples, fraction);
      dram += costs.dramPart(index, phase, examples, fraction);
    }
    params += double(network.layers[i].params) * fraction;
  }
  // The update is one memory-bound kernel over the worker's parameters.
  const Seconds update = costs.update(params);
  total += update;
  dram += update * dramShare(params * kMemoryBytesPerUnit / sc.options.threadsPerWorker);
  return total.value() > 0 ? dram / total : 0.0;
}

}  // namespace strata

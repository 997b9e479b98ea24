#include "kernel_calibration.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <fstream>
#include <functional>
#include <mutex>
#include <sstream>
#include <thread>
#include <tuple>
#include <vector>

#include "strata/exec/calibrate.h"
#include "strata/exec/comm/collectives.h"
#include "strata/exec/comm/local_communicator.h"
#include "strata/exec/nn/cpu_backend.h"
#include "strata/exec/nn/model.h"
#include "strata/kernels/precision.h"
#include "strata/model/compute_cost.h"
#include "strata/model/error.h"
#include "strata/model/quantity_text.h"
#include "timing.h"

namespace strata::exec::detail {

namespace {

// Seconds per call of fn: after a warm-up call, groups of calls long enough to
// time (>= 0.3 ms each); the median of 3 groups, or the best of 2 when one call
// takes over 10 ms (the least disturbed of two long runs).
template <class F>
double perCall(F&& fn) {
  fn();
  auto t0 = Clock::now();
  fn();
  const double one = since(t0);
  const int calls = std::max(1, static_cast<int>(3e-4 / std::max(one, 1e-9)));
  const int groups = one > 0.01 ? 2 : 3;
  std::vector<double> g;
  for (int i = 0; i < groups; ++i) {
    t0 = Clock::now();
    for (int c = 0; c < calls; ++c)
      fn();
    g.push_back(since(t0) / calls);
  }
  std::sort(g.begin(), g.end());
  return groups == 2 ? g[0] : g[1];
}

// Seconds of one call of fn with its operands out of the caches, as in a step
// whose data outgrows the last-level cache: each of 3 calls right after
// writing `flush` (twice that cache; one write per 64-byte line, so every
// line of it is loaded and left dirty, as a step's other tensors leave it);
// the median (of `calls` such calls).
template <class F>
double perCallCold(F&& fn, std::vector<float>& flush, int calls = 3) {
  std::vector<double> t;
  for (int i = 0; i < calls; ++i) {
    for (size_t j = 0; j < flush.size(); j += 16)
      flush[j] += 1.0f;
    const auto t0 = Clock::now();
    fn();
    t.push_back(since(t0));
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// The largest of cpu0's data and unified caches (sysfs) that `keep` accepts
// by its shared_cpu_list; 0 when the OS reports none.
double largestCache(const std::function<bool(const std::string& sharedCpus)>& keep) {
  double largest = 0;
  for (int index = 0; index < 8; ++index) {
    const std::string dir = fmt::format("/sys/devices/system/cpu/cpu0/cache/index{}/", index);
    std::ifstream size(dir + "size"), shared(dir + "shared_cpu_list"), type(dir + "type");
    std::string text, cpus, kind;
    if (!(size >> text) || text.empty())
      continue;
    shared >> cpus;
    type >> kind;
    if (kind == "Instruction" || !keep(cpus))
      continue;
    double scale = 1;
    if (text.back() == 'K')
      scale = 1024;
    else if (text.back() == 'M')
      scale = 1024.0 * 1024;
    try {
      largest = std::max(largest, std::stod(text) * scale);
    } catch (const std::exception&) {
    }
  }
  return largest >= 1024 ? largest : 0.0;
}

// The node's last-level cache, as the OS reports it (the largest level of
// cpu0's caches); 32 MiB when it reports none.
Bytes lastLevelCache() {
  const double largest = largestCache([](const std::string&) { return true; });
  return Bytes(largest > 0 ? largest : 32.0 * 1024 * 1024);
}

// The cache private to a core: the largest level of cpu0's caches that no
// other core shares (shared_cpu_list "0", or cpu0's hyperthread siblings);
// 0 when the OS reports none.
Bytes coreCache() {
  std::string siblings = "0";
  std::ifstream("/sys/devices/system/cpu/cpu0/topology/thread_siblings_list") >> siblings;
  return Bytes(
      largestCache([&](const std::string& cpus) { return cpus == "0" || cpus == siblings; }));
}

// GEMM grid: m, n and k each from 1 to 16384, by factors of 2 up to 256 (batch
// sizes: an fc layer's rate changes fastest there, where streaming its weights
// dominates) and of 4 above. Points above kMaxMacs multiply-adds or with an
// operand over kMaxOperand floats are not timed: their rate is the one of the
// point with the largest dimension reduced one grid step (GEMM rates
// saturate at these sizes). The caps were 2^28 and 2^24 (64 MiB) until
// 2026-12-04, which left every fc shape whose weights outgrow the cache to
// a neighbour's rate whose weights fit it: alexnet b 8's fc6 backward data
// (nn 8 x 9216 x 4096, 151 MB of weights) was priced 30 ms from the 13.5 ms
// of 8 x 4096 x 4096 and ran 48-52 ms (8 x 16384 x 4096: 102 ms). At 2^31 and
// 2^26 (256 MiB) every fc of up to 16384 x 4096 weights at batches up to 32
// is timed; the grid takes ~61 s a sweep on the 2-core VM (16 s before).
const std::vector<int64_t> kGemmDims = {1, 2, 4, 8, 16, 32, 64, 128, 256, 1024, 4096, 16384};
constexpr double kMaxMacs = double(int64_t{1} << 31);
// And operands of at most 64 Mi floats (256 MiB) each, so memory stays
// bounded (gemm_cold's buffers are as large).
constexpr double kMaxOperand = double(int64_t{1} << 26);

// Memory-bound kernels: units per call from 1 Ki to 16 Mi by factors of 4.
std::vector<double> memorySizes() {
  std::vector<double> s;
  for (double u = 1024; u <= 16.0 * 1024 * 1024; u *= 4)
    s.push_back(u);
  return s;
}

std::vector<float> filled(size_t n, float value) {
  // On the pages HostMemory gives a step's tensors (huge where THP allows).
  std::vector<float> v;
  v.reserve(n);
  nn::adviseHugePages(v.data(), n * sizeof(float));
  v.assign(n, value);
  return v;
}

double medianOfValues(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

Network callOverheadNetwork() {
  Network tiny;
  tiny.name = "calibration-call";
  tiny.sourceFile = "strata calibrate";
  tiny.input = Shape{1, 1, 1};
  Layer relu;
  relu.name = "relu";
  relu.kind = LayerKind::kRelu;
  relu.inputs = {-1};
  deriveLayer(relu, {tiny.input}, tiny.sourceFile, 0);
  tiny.layers.push_back(relu);
  return tiny;
}

void fillOverCap(std::vector<double>& rate, std::vector<char>& measured, size_t d) {
  for (size_t sum = 0; sum < 3 * d; ++sum)
    for (size_t im = 0; im < d; ++im)
      for (size_t in = 0; in < d; ++in)
        for (size_t ik = 0; ik < d; ++ik) {
          if (im + in + ik != sum || measured[(im * d + in) * d + ik])
            continue;
          size_t jm = im, jn = in, jk = ik;
          if (jm >= jn && jm >= jk)
            --jm;
          else if (jn >= jk)
            --jn;
          else
            --jk;
          rate[(im * d + in) * d + ik] = rate[(jm * d + jn) * d + jk];
          measured[(im * d + in) * d + ik] = 1;
        }
}

// The grid of gemm_cold (KernelTables::gemmCold): m, n and k by factors of
// 8 from an fc layer's batch of 8 to 4096, and 16384 (an fc's 4096 x 9216
// weights at a batch of 8 lie between the last two: a first grid of 16..8192
// with operands up to 16 Mi floats priced its cold slowdown 1.23 where the
// call measured 1.34). Points above 2^30 multiply-adds or with an operand
// over 64 Mi floats take a neighbour's slowdown (fillOverCap), so a sweep's
// cold grid takes ~30 s on the 2-core VM (90 points per op, each after a
// flush of twice the reported cache).
const std::vector<int64_t> kGemmColdDims = {8, 64, 512, 4096, 16384};
constexpr double kMaxColdMacs = double(1 << 30);
constexpr int64_t kMaxColdOperand = int64_t{1} << 26;

void measureGemmCold(KernelTables& t, std::vector<float>& flush, std::vector<float>& warmFlush) {
  constexpr int64_t kLargest = int64_t{1} << 24;  // floats: 64 MiB
  constexpr int kSide = 4096;                     // 16 x 4096 x 4096 nt: B of 64 MiB
  auto a = filled(size_t(kLargest), 0.01f);
  auto b = filled(size_t(kLargest), 0.02f);
  auto c = filled(size_t(kLargest), 0.0f);
  auto gemm = [&](GemmOp op, int64_t m, int64_t n, int64_t k) {
    return [&, op, m, n, k] {
      nn::CpuBackend::gemm(op, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k),
                           a.data(), b.data(), c.data(), true);
    };
  };
  // The effective cache: the nt GEMM of an fc forward at a batch of 16
  // (its 64 MiB weights the operand) after writing D bytes of other data (a
  // share of the flush buffer), D from 1/16 of the reported cache to all of
  // it; the slowdown's share of cold - hot against the LRU share.
  const auto fc = gemm(GemmOp::kNT, 16, kSide, kSide);
  const double hot = perCall(fc), cold = perCallCold(fc, flush);
  t.effectiveCache = t.lastLevelCache;
  if (cold >= 1.05 * hot) {
    std::vector<double> distances, shares;
    const double bytes = t.lastLevelCache.value();
    for (double part : {1.0 / 16, 1.0 / 8, 1.0 / 4, 1.0 / 2, 1.0}) {
      const size_t floats =
          std::min(flush.size(), static_cast<size_t>(part * bytes / sizeof(float)));
      std::vector<double> times;
      for (int i = 0; i < 3; ++i) {
        fc();  // the operand in the cache
        for (size_t j = 0; j < floats; j += 16)
          flush[j] += 1.0f;
        const auto t0 = Clock::now();
        fc();
        times.push_back(since(t0));
      }
      distances.push_back(double(floats) * sizeof(float));
      shares.push_back(std::clamp((medianOfValues(times) - hot) / (cold - hot), 0.0, 1.0));
    }
    t.effectiveCache = Bytes(fitEffectiveCache(distances, shares, double(kLargest) * sizeof(float),
                                               t.lastLevelCache.value()));
  }
  // The slowdown grid: each shape hot (repeated calls, as the gemm grid) and
  // once right after the flush, every operand out of the caches.
  a = filled(size_t(kMaxColdOperand), 0.01f);
  b = filled(size_t(kMaxColdOperand), 0.02f);
  c = filled(size_t(kMaxColdOperand), 0.0f);
  t.gemmCold = {};
  t.gemmCold.dims = kGemmColdDims;
  t.gemmWarm = {};
  if (!warmFlush.empty())
    t.gemmWarm.dims = kGemmColdDims;
  const size_t d = kGemmColdDims.size();
  for (auto op : kAllGemmOps) {
    auto& slowdown = t.gemmCold.rate[static_cast<size_t>(op)];
    slowdown.assign(d * d * d, 1.0);
    auto& warmSlowdown = t.gemmWarm.rate[static_cast<size_t>(op)];
    if (!warmFlush.empty())
      warmSlowdown.assign(d * d * d, 1.0);
    std::vector<char> measured(d * d * d, 0);
    for (size_t im = 0; im < d; ++im)
      for (size_t in = 0; in < d; ++in)
        for (size_t ik = 0; ik < d; ++ik) {
          const int64_t m = kGemmColdDims[im], n = kGemmColdDims[in], k = kGemmColdDims[ik];
          if (double(m) * double(n) * double(k) > kMaxColdMacs ||
              std::max({double(m) * double(k), double(k) * double(n), double(m) * double(n)}) >
                  double(kMaxColdOperand))
            continue;
          const auto call = gemm(op, m, n, k);
          const double h = perCall(call);
          for (size_t j = 0; j < flush.size(); j += 16)
            flush[j] += 1.0f;
          const auto t0 = Clock::now();
          call();
          slowdown[(im * d + in) * d + ik] = std::clamp(since(t0) / h, 0.1, 1e4);
          // Out of the core's cache only: the median of 3 where a call is
          // short enough for one timing to be noisy.
          if (!warmFlush.empty())
            warmSlowdown[(im * d + in) * d + ik] =
                std::clamp(perCallCold(call, warmFlush, h < 2e-3 ? 3 : 1) / h, 0.1, 1e4);
          measured[(im * d + in) * d + ik] = 1;
        }
    auto alsoMeasured = measured;
    fillOverCap(slowdown, measured, d);
    if (!warmFlush.empty())
      fillOverCap(warmSlowdown, alsoMeasured, d);
  }
}

namespace {
// The machine's speed through a sweep. A VM's core speed moves 30-40 %
// within minutes (the 2-core Xeon VM, 2026-12-04: a calibration's 256^3
// GEMM point at 172 GFLOP/s, its four reference timings 149 GFLOP/s median,
// spread 40 %), so the tables and the reference they stand for must be timed
// together: validate's two reference kernels are timed at least every
// kTrackInterval through the GEMM grid and the memory kernels, each point is
// tagged with the timing before it, and measureKernelTables scales it by the
// two timings around it to the speed of the references' median.
constexpr double kTrackInterval = 1.0;  // seconds: ~2 % of the sweep's time
struct SpeedTrack {
  std::vector<double> gemm, copy;  // FLOP/s, floats/s
  Clock::time_point last;
  // The index of the timing before the next point, timed anew when
  // kTrackInterval has passed (or at the first point, or `now`).
  int tick(bool now = false) {
    if (now || gemm.empty() || since(last) >= kTrackInterval) {
      gemm.push_back(referenceGemmRate(31, 1));
      copy.push_back(referenceCopyRate(7, 1));
      last = Clock::now();
    }
    return static_cast<int>(gemm.size()) - 1;
  }
  // The factor that takes a rate measured at point `e` to the speeds g0 and
  // c0 of the references, for a call a share m of whose time is DRAM
  // traffic (compute_cost.h's dramShare): the slower the machine was around
  // it (the timings e and e + 1), the larger.
  double factor(int e, double g0, double c0, double m) const {
    const size_t a = static_cast<size_t>(e), b = std::min(a + 1, gemm.size() - 1);
    return rowSpeed(g0 / (0.5 * (gemm[a] + gemm[b])), c0 / (0.5 * (copy[a] + copy[b])), m);
  }
};

// A sweep's tables and, for each point of the GEMM grid and of the memory
// tables, its SpeedTrack timing.
struct Sweep {
  KernelTables t;
  SpeedTrack track;
  std::array<std::vector<double>, 3> gemmAt;  // by op, as gemm.rate (a neighbour's over the caps)
  std::array<std::vector<int>, kMemKernelCount> memoryAt;  // by kernel, as memory[k].rate
};

// One sweep of measureKernelTables: every GEMM shape, every memory kernel by
// size, and the call overhead, each timed once (perCall).
Sweep measureKernelSweep(const std::function<void(const std::string&)>& say) {
  Sweep sweep;
  KernelTables& t = sweep.t;
  SpeedTrack& track = sweep.track;
  t.lastLevelCache = lastLevelCache();
  t.coreCache = coreCache();
  t.backend = "cpu";
  t.gemm.dims = kGemmDims;
  // Timed as C += op(A) op(B), the product alone: the cost model adds the
  // zero fill of C to a call that writes C = (KernelTables::gemmAccumulates).
  t.gemmAccumulates = true;
  const size_t d = kGemmDims.size();
  const auto t0 = Clock::now();
  {
    const auto top = static_cast<size_t>(kMaxOperand);
    auto a = filled(top, 0.01f);
    auto b = filled(top, 0.02f);
    auto c = filled(top, 0.0f);
    for (auto op : kAllGemmOps) {
      auto& rate = t.gemm.rate[static_cast<size_t>(op)];
      rate.assign(d * d * d, 0.0);
      auto& at = sweep.gemmAt[static_cast<size_t>(op)];
      at.assign(d * d * d, 0.0);
      std::vector<char> measured(d * d * d, 0);
      for (size_t im = 0; im < d; ++im)
        for (size_t in = 0; in < d; ++in)
          for (size_t ik = 0; ik < d; ++ik) {
            const int64_t m = kGemmDims[im], n = kGemmDims[in], k = kGemmDims[ik];
            if (double(m) * double(n) * double(k) > kMaxMacs ||
                std::max({double(m) * double(k), double(k) * double(n), double(m) * double(n)}) >
                    kMaxOperand)
              continue;
            at[(im * d + in) * d + ik] = track.tick();
            const double s = perCall([&] {
              nn::CpuBackend::gemm(op, static_cast<int>(m), static_cast<int>(n),
                                   static_cast<int>(k), a.data(), b.data(), c.data(), true);
            });
            rate[(im * d + in) * d + ik] = 2.0 * double(m) * double(n) * double(k) / s;
            measured[(im * d + in) * d + ik] = 1;
          }
      // The points over the caps take a neighbour's rate, and its timing.
      auto alsoMeasured = measured;
      fillOverCap(rate, measured, d);
      fillOverCap(at, alsoMeasured, d);
    }
  }
  track.tick(true);
  say(fmt::format("GEMM tables      3 x {} shapes (m, n, k in 1..{}), {:.1f} s", d * d * d,
                  kGemmDims.back(), since(t0)));

  const auto t1 = Clock::now();
  const auto sizes = memorySizes();
  // Room for the largest size and the geometries rounded around it.
  const size_t top = static_cast<size_t>(sizes.back() * 1.25);
  auto x = filled(top, 0.5f), y = filled(top, 0.25f), dy = filled(top, 0.125f),
       dx = filled(top, 0.0f), scale = filled(top, 1.0f);
  // Pseudo-random values of both signs, as activations and gradients are: the
  // branches of relu, dropout and max pooling are as unpredictable as in a
  // real step (a regular pattern makes relu's backward ~10x faster here).
  uint64_t state = 0x9e3779b97f4a7c15ull;
  auto next = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return float(int64_t(state >> 40) - (int64_t(1) << 23)) / float(1 << 23);
  };
  for (size_t i = 0; i < top; ++i) {
    x[i] = next();
    y[i] = next();
    dy[i] = 0.01f * next();
  }
  std::vector<int32_t> argmax(top), labels(top);
  for (size_t i = 0; i < top; ++i)
    labels[i] = static_cast<int32_t>(i % 10);
  // Transformer kernels' operands: layernorm's gradients, an embedding's
  // tables and token ids, Adam's second moments (non-negative).
  std::vector<float> lnGrad(128), adamV(top, 0.5f);
  std::vector<uint16_t> bf16(top);  // the bf16 side of the casts
  std::vector<float> embedTable(static_cast<size_t>(kCalibrationVocab + 256) * 64, 0.01f),
      tableGrad(embedTable.size());
  std::vector<float> tokenIds(top / 64 + 1);
  for (auto& id : tokenIds)
    id = static_cast<float>(static_cast<int>((next() + 1.0f) * 0.5f * kCalibrationVocab) %
                            kCalibrationVocab);
  nn::CpuBackend be;
  // Each point hot (perCall: repeated calls on the same operands, in cache
  // up to its size) and cold (perCallCold: after flushing the caches).
  auto flush = filled(static_cast<size_t>(2 * t.lastLevelCache.value() / sizeof(float)), 0.0f);
  // And warm (perCallCold after writing four times the core's own cache:
  // the operands left in the last-level cache, as a step leaves most).
  auto warmFlush = filled(static_cast<size_t>(4 * t.coreCache.value() / sizeof(float)), 0.0f);
  auto record = [&](MemKernel kernel, double units, auto&& fn) {
    auto& table = t.memory[static_cast<size_t>(kernel)];
    if (!table.units.empty() && units <= table.units.back())
      return;  // a geometry that rounds to the previous size
    table.units.push_back(units);
    sweep.memoryAt[static_cast<size_t>(kernel)].push_back(track.tick());
    table.rate.push_back(units / perCall(fn));
    auto& cold = t.memoryCold[static_cast<size_t>(kernel)];
    cold.units.push_back(units);
    cold.rate.push_back(units / perCallCold(fn, flush));
    if (!warmFlush.empty()) {
      auto& warm = t.memoryWarm[static_cast<size_t>(kernel)];
      warm.units.push_back(units);
      warm.rate.push_back(units / perCallCold(fn, warmFlush));
    }
  };
  // Elementwise tensors: 64 channels, the rest in width.
  auto flat = [](double u) { return nn::Dims{1, 64, 1, std::max(1, static_cast<int>(u / 64))}; };
  for (double u : sizes) {
    const auto fd = flat(u);
    const double n = double(fd.n) * fd.c * fd.h * fd.w;
    nn::ConstTensorView cx{x.data(), fd}, cy{y.data(), fd}, cdy{dy.data(), fd};
    nn::TensorView vy{y.data(), fd}, vdx{dx.data(), fd};
    record(MemKernel::kZero, n, [&] { nn::CpuBackend::zero(dx.data(), int64_t(n)); });
    record(MemKernel::kCopy, n, [&] { be.accumulate(cx, vdx, 0.0f); });
    record(MemKernel::kAccumulate, n, [&] { be.accumulate(cx, vdx, 1.0f); });
    record(MemKernel::kAdd, n, [&] { be.add(cx, cdy, vdx); });
    record(MemKernel::kBias, n,
           [&] { nn::CpuBackend::biasAdd(dx.data(), scale.data(), fd.c, int64_t(fd.h) * fd.w); });
    record(MemKernel::kBiasGrad, n, [&] {
      nn::CpuBackend::biasGrad(dy.data(), scale.data() + top - 4096, fd.c, int64_t(fd.h) * fd.w);
    });
    record(MemKernel::kReluFwd, n, [&] { be.reluForward(cx, vy); });
    record(MemKernel::kReluBwd, n, [&] { be.reluBackward(cy, cdy, vdx, 0.0f); });
    // Dropout follows fc layers in every preset: rows of 256 neurons.
    const nn::Dims dr{std::max(1, static_cast<int>(u / 256)), 256, 1, 1};
    nn::DropoutDesc dd;
    dd.rate = 0.5f;
    dd.totalChannels = dr.c;
    record(MemKernel::kDropoutFwd, double(dr.n) * dr.c, [&] {
      be.dropoutForward(dd, nn::ConstTensorView{x.data(), dr}, nn::TensorView{y.data(), dr});
    });
    record(MemKernel::kDropoutBwd, double(dr.n) * dr.c, [&] {
      be.dropoutBackward(dd, nn::ConstTensorView{dy.data(), dr}, nn::TensorView{dx.data(), dr},
                         0.0f);
    });
    record(MemKernel::kSgd, n, [&] {
      be.sgdMomentum(std::span<float>(y.data(), size_t(n)), std::span<float>(dx.data(), size_t(n)),
                     std::span<const float>(dy.data(), size_t(n)), 0.0f, 0.9f, 0.0f);
    });
    // The executor's reduce step: the loop of its endpoints (runtime/src/endpoints.cpp).
    record(MemKernel::kReduce, n, [&] {
      float* dst = dx.data();
      const float* src = dy.data();
      for (size_t i = 0; i < size_t(n); ++i)
        dst[i] += src[i];
    });
    // LRN (size 5, as every preset) and batchnorm on 4 x 16 channels.
    const int side = std::max(1, static_cast<int>(std::lround(std::sqrt(u / 64))));
    const nn::Dims sq{1, 64, side, side};
    const double ns = 64.0 * side * side;
    nn::LrnDesc ld;
    nn::TensorView sc{scale.data(), sq};
    record(MemKernel::kLrnFwd, ns, [&] {
      be.lrnForward(ld, nn::ConstTensorView{x.data(), sq}, nn::TensorView{y.data(), sq}, sc);
    });
    record(MemKernel::kLrnBwd, ns, [&] {
      be.lrnBackward(ld, nn::ConstTensorView{x.data(), sq}, nn::ConstTensorView{y.data(), sq},
                     nn::ConstTensorView{scale.data(), sq}, nn::ConstTensorView{dy.data(), sq},
                     nn::TensorView{dx.data(), sq}, 0.0f);
    });
    const nn::Dims bd{4, 16, side, side};
    std::vector<float> gamma(64, 1.0f), shift(64, 0.0f), dg(16), ds(16);
    record(MemKernel::kBatchNormFwd, ns, [&] {
      be.batchNormForward(nn::ConstTensorView{x.data(), bd}, gamma.data(), shift.data(), 1e-5f,
                          nn::TensorView{y.data(), bd});
    });
    record(MemKernel::kBatchNormBwdData, ns, [&] {
      be.batchNormBackwardData(nn::ConstTensorView{x.data(), bd},
                               nn::ConstTensorView{dy.data(), bd}, gamma.data(), 1e-5f,
                               nn::TensorView{dx.data(), bd}, 0.0f);
    });
    record(MemKernel::kBatchNormBwdWeights, ns, [&] {
      be.batchNormBackwardWeights(nn::ConstTensorView{x.data(), bd},
                                  nn::ConstTensorView{dy.data(), bd}, 1e-5f, dg.data(), ds.data());
    });
    // Softmax over 10 classes per example (the classifiers' layout).
    const nn::Dims smd{std::max(1, static_cast<int>(u / 10)), 10, 1, 1};
    const double nsm = double(smd.n) * smd.c;
    std::vector<float> stats(2 * static_cast<size_t>(smd.n));
    record(MemKernel::kSoftmaxFwd, nsm, [&] {
      be.softmaxStats(nn::ConstTensorView{x.data(), smd}, stats.data());
      be.softmaxProbabilities(nn::ConstTensorView{x.data(), smd}, stats.data(),
                              nn::TensorView{y.data(), smd});
    });
    record(MemKernel::kSoftmaxBwd, nsm, [&] {
      be.softmaxLoss(nn::ConstTensorView{x.data(), smd}, stats.data(), labels.data(), 0);
      be.softmaxBackward(nn::ConstTensorView{x.data(), smd}, stats.data(), labels.data(), 0, 1.0f,
                         nn::TensorView{dx.data(), smd}, 0.0f);
    });
    // Transformer kernels on sequences of 64 features (tiny-gpt's width) and
    // up to 256 positions per example, the rest in examples.
    const int seqT = std::clamp(static_cast<int>(u / 64), 1, 256);
    const nn::Dims sd{std::max(1, static_cast<int>(u / 64 / seqT)), 64, seqT, 1};
    const double nsd = double(sd.n) * sd.c * sd.h;
    record(MemKernel::kLayerNormFwd, nsd, [&] {
      be.layerNormForward(nn::ConstTensorView{x.data(), sd}, gamma.data(), shift.data(), 1e-5f,
                          nn::TensorView{y.data(), sd});
    });
    record(MemKernel::kLayerNormBwdData, nsd, [&] {
      be.layerNormBackwardData(nn::ConstTensorView{x.data(), sd},
                               nn::ConstTensorView{dy.data(), sd}, gamma.data(), 1e-5f,
                               nn::TensorView{dx.data(), sd}, 0.0f);
    });
    record(MemKernel::kLayerNormBwdWeights, nsd, [&] {
      be.layerNormBackwardWeights(nn::ConstTensorView{x.data(), sd},
                                  nn::ConstTensorView{dy.data(), sd}, 1e-5f, lnGrad.data(),
                                  lnGrad.data() + 64);
    });
    record(MemKernel::kGeluFwd, n, [&] { be.geluForward(cx, vy); });
    record(MemKernel::kGeluBwd, n, [&] { be.geluBackward(cx, cdy, vdx, 0.0f); });
    // Vision networks' activations, each kernel timed as its dearest
    // activation (model/kernels.h): silu for sigmoid's, hardswish for the
    // piecewise linear ones; mul with a per-channel gate (a squeeze-excitation
    // block's) over the 64 channels.
    record(MemKernel::kSigmoidFwd, n, [&] { be.activationForward(nn::Activation::kSilu, cx, vy); });
    record(MemKernel::kSigmoidBwd, n,
           [&] { be.activationBackward(nn::Activation::kSilu, cx, cy, cdy, vdx, 0.0f); });
    record(MemKernel::kHardActFwd, n,
           [&] { be.activationForward(nn::Activation::kHardSwish, cx, vy); });
    record(MemKernel::kHardActBwd, n,
           [&] { be.activationBackward(nn::Activation::kHardSwish, cx, cy, cdy, vdx, 0.0f); });
    {
      const nn::Dims gate{fd.n, fd.c, 1, 1};
      record(MemKernel::kMulFwd, n, [&] {
        be.mulForward(cx, nn::ConstTensorView{scale.data(), gate}, vy);
      });
      record(MemKernel::kMulBwd, n, [&] {
        be.mulBackward(cx, nn::ConstTensorView{scale.data(), gate}, cdy, vdx, 0.0f,
                       nn::TensorView{lnGrad.data(), gate}, 0.0f);
      });
      // Layer scale over the same 64 channels (a gamma each).
      record(MemKernel::kScaleFwd, n, [&] { be.scaleChannels(cx, scale.data(), vy, 0.0f); });
      record(MemKernel::kScaleGrad, n, [&] { be.scaleBackwardWeights(cx, cdy, lnGrad.data()); });
    }
    // Llama's kernels on the same sequences: rmsnorm as layernorm; swiglu
    // from their 64 channels (gate and up) to 32; rotary positions over heads
    // of 64 features.
    record(MemKernel::kRmsNormFwd, nsd, [&] {
      be.rmsNormForward(nn::ConstTensorView{x.data(), sd}, gamma.data(), 1e-5f,
                        nn::TensorView{y.data(), sd});
    });
    record(MemKernel::kRmsNormBwdData, nsd, [&] {
      be.rmsNormBackwardData(nn::ConstTensorView{x.data(), sd}, nn::ConstTensorView{dy.data(), sd},
                             gamma.data(), 1e-5f, nn::TensorView{dx.data(), sd}, 0.0f);
    });
    record(MemKernel::kRmsNormBwdWeights, nsd, [&] {
      be.rmsNormBackwardWeights(nn::ConstTensorView{x.data(), sd},
                                nn::ConstTensorView{dy.data(), sd}, 1e-5f, lnGrad.data());
    });
    {
      const nn::Dims gated{sd.n, 32, sd.h, 1};
      record(MemKernel::kSwigluFwd, nsd / 2, [&] {
        be.swigluForward(nn::ConstTensorView{x.data(), sd}, nn::TensorView{y.data(), gated});
      });
      record(MemKernel::kSwigluBwd, nsd / 2, [&] {
        be.swigluBackward(nn::ConstTensorView{x.data(), sd}, nn::ConstTensorView{dy.data(), gated},
                          nn::TensorView{dx.data(), sd}, 0.0f);
      });
      std::vector<float> table;
      nn::CpuBackend::rotaryTable(64, seqT, 10000.0f, table);
      record(MemKernel::kRotary, nsd, [&] {
        nn::CpuBackend::rotaryKernel(y.data(), sd.n, 64, 64, seqT, table.data(), false);
      });
    }
    // Attention scores: rows of 64 keys (64 positions), causal, dh = 64.
    {
      const int64_t rows = std::max<int64_t>(1, static_cast<int64_t>(u / 64));
      const double scores = double(rows) * 64;
      record(MemKernel::kAttnSoftmaxFwd, scores, [&] {
        nn::CpuBackend::attnSoftmaxForward(x.data(), y.data(), rows, 64, true, 0.125f);
      });
      record(MemKernel::kAttnSoftmaxBwd, scores, [&] {
        nn::CpuBackend::attnSoftmaxBackward(y.data(), dy.data(), dx.data(), rows, 64, 0.125f);
      });
    }
    // Embedding: tokens of a 4096 x 64 table (1 MiB) plus positions.
    {
      const nn::EmbeddingDesc ed{kCalibrationVocab, 64, true};
      const nn::Dims ids{sd.n, 1, sd.h, 1};
      record(MemKernel::kEmbeddingFwd, nsd, [&] {
        be.embeddingForward(ed, nn::ConstTensorView{tokenIds.data(), ids}, embedTable.data(),
                            nn::TensorView{y.data(), sd});
      });
      record(MemKernel::kEmbeddingBwd, nsd, [&] {
        be.embeddingBackwardWeights(ed, nn::ConstTensorView{tokenIds.data(), ids},
                                    nn::ConstTensorView{dy.data(), sd}, tableGrad.data());
      });
    }
    record(MemKernel::kAdam, n, [&] {
      nn::AdamParams adam;
      adam.learningRate = 1e-4f;
      adam.step = 10;
      nn::CpuBackend::adamKernel(std::span<float>(y.data(), size_t(n)),
                                 std::span<float>(dx.data(), size_t(n)),
                                 std::span<float>(adamV.data(), size_t(n)),
                                 std::span<const float>(dy.data(), size_t(n)), adam);
    });
    // The casts of mixed precision (the CUDA backend's --element bf16), by
    // their CPU twins.
    record(MemKernel::kCastBf16, n,
           [&] { kernels::twin::castToBf16(x.data(), bf16.data(), int64_t(n)); });
    record(MemKernel::kCastFp32, n,
           [&] { kernels::twin::castFromBf16(bf16.data(), y.data(), int64_t(n), 0.0f); });
    // Pooling with 3x3 and 2x2 windows, stride 2 (AlexNet's and VGG's) over
    // 64 channels: forward units are window reads, avg backward window writes.
    for (int win : {3, 2}) {
      const int out = calibrationPoolOut(u, win);
      nn::PoolDesc pd = calibrationPool(win, out);
      const nn::Dims in{1, 64, pd.inH, pd.inW}, o{1, 64, out, out};
      const double reads = 64.0 * out * out * win * win;
      pd.mode = PoolMode::kMax;
      record(win == 3 ? MemKernel::kPoolMaxFwd : MemKernel::kPoolMaxFwd2, reads, [&] {
        be.poolForward(pd, nn::ConstTensorView{x.data(), in}, nn::TensorView{y.data(), o},
                       argmax.data());
      });
      pd.mode = PoolMode::kAvg;
      record(win == 3 ? MemKernel::kPoolAvgFwd : MemKernel::kPoolAvgFwd2, reads, [&] {
        be.poolForward(pd, nn::ConstTensorView{x.data(), in}, nn::TensorView{y.data(), o}, nullptr);
      });
      record(win == 3 ? MemKernel::kPoolAvgBwd : MemKernel::kPoolAvgBwd2, reads, [&] {
        be.poolBackward(pd, nn::ConstTensorView{dy.data(), o}, nullptr,
                        nn::TensorView{dx.data(), in}, 1.0f);
      });
    }
    {
      // The input (about 4x the output) must fit the buffers too.
      const nn::PoolDesc pd = calibrationPool(3, calibrationPoolOut(u, 2));
      const int out = pd.outH;
      const nn::Dims in{1, 64, pd.inH, pd.inW}, o{1, 64, out, out};
      be.poolForward(pd, nn::ConstTensorView{x.data(), in}, nn::TensorView{y.data(), o},
                     argmax.data());
      record(MemKernel::kPoolMaxBwd, 64.0 * out * out, [&] {
        be.poolBackward(pd, nn::ConstTensorView{dy.data(), o}, argmax.data(),
                        nn::TensorView{dx.data(), in}, 1.0f);
      });
    }
    // im2col / col2im at four geometries: output rows of 64 and of 8 at
    // stride 1 (3x3 pad 1), rows of 64 at strides 2 and 4 with taps that
    // overlap as in ResNet's and AlexNet's strided convolutions (kernel
    // 2 stride - 1: 3x3 and 7x7), so the input is re-read from cache as
    // theirs is (KernelTables::columnsTime). Rows are as many as the size
    // needs, up to square planes, then channels.
    auto columnsAt = [&](MemKernel im2col, MemKernel col2im, int row, int stride) {
      const int kernel = stride == 1 ? 3 : 2 * stride - 1;
      const double perRow = double(kernel) * kernel * row;
      const int outH = static_cast<int>(std::clamp(std::round(u / perRow), 1.0, double(row)));
      nn::ConvDesc cd;
      cd.inC = std::max(1, static_cast<int>(std::lround(u / (perRow * outH))));
      cd.kernelH = cd.kernelW = kernel;
      cd.pad = (kernel - 1) / 2;
      cd.stride = stride;
      cd.outH = outH;
      cd.outW = row;
      cd.inH = outH * stride;
      cd.inW = row * stride;
      cd.filters = 16;
      const double units = perRow * outH * cd.inC;
      if (units + 1 >= double(top) || double(cd.inC) * cd.inH * cd.inW >= double(top))
        return;
      record(im2col, units, [&] { nn::CpuBackend::im2colKernel(cd, x.data(), y.data()); });
      record(col2im, units, [&] { nn::CpuBackend::col2imKernel(cd, y.data(), dx.data()); });
    };
    columnsAt(MemKernel::kIm2col, MemKernel::kCol2im, kColumnsLongRow, 1);
    columnsAt(MemKernel::kIm2colShort, MemKernel::kCol2imShort, kColumnsShortRow, 1);
    columnsAt(MemKernel::kIm2colStride2, MemKernel::kCol2imStride2, kColumnsLongRow, 2);
    columnsAt(MemKernel::kIm2colStride4, MemKernel::kCol2imStride4, kColumnsLongRow, 4);
  }
  track.tick(true);
  say(fmt::format("memory kernels   {} kernels x {} sizes (1 Ki..16 Mi units), {:.1f} s",
                  kMemKernelCount, sizes.size(), since(t1)));
  const auto t2 = Clock::now();
  measureGemmCold(t, flush, warmFlush);
  say(fmt::format(
      "cold GEMMs       3 x {} shapes (m, n, k in {}..{}), effective cache {:.0f} MiB (of "
      "{:.0f} MiB reported), {:.1f} s",
      t.gemmCold.rate[0].size(), t.gemmCold.dims.front(), t.gemmCold.dims.back(),
      t.effectiveCache.value() / (1024.0 * 1024), t.lastLevelCache.value() / (1024.0 * 1024),
      since(t2)));
  // The Model's own cost per layer-phase call: forward of a relu over one
  // element, less the kernel (negligible at that size).
  {
    nn::Model model(callOverheadNetwork());
    model.input(1).fill(1.0f);
    t.callOverhead = Seconds(perCall([&] { model.forward(0); }));
  }
  return sweep;
}

}  // namespace

KernelTables measureKernelTables(const std::function<void(const std::string&)>& say, int sweeps,
                                 const std::function<void()>& between) {
  STRATA_ENFORCE(sweeps >= 1);
  std::vector<double> gemmRefs, copyRefs;
  auto reference = [&] {
    gemmRefs.push_back(referenceGemmRate(31, 1));
    copyRefs.push_back(referenceCopyRate(15, 1));
    if (between)
      between();
  };
  std::vector<Sweep> sweepsRun;
  reference();
  for (int i = 0; i < sweeps; ++i) {
    sweepsRun.push_back(measureKernelSweep([&](const std::string& line) {
      say(sweeps > 1 ? fmt::format("{} (sweep {} of {})", line, i + 1, sweeps) : line);
    }));
    reference();
  }
  // The speed the tables stand for: the median of every reference timing,
  // the sweeps' own and those around them.
  std::vector<double> allGemm = gemmRefs, allCopy = copyRefs;
  for (const auto& sw : sweepsRun) {
    allGemm.insert(allGemm.end(), sw.track.gemm.begin(), sw.track.gemm.end());
    allCopy.insert(allCopy.end(), sw.track.copy.begin(), sw.track.copy.end());
  }
  const double g0 = medianOfValues(allGemm), c0 = medianOfValues(allCopy);
  // Each point scaled from the speed around it to that one: a GEMM's by the
  // GEMM reference; a memory kernel's hot rate by the two references in the
  // proportion of its traffic beyond the caches (dramShare, by its bytes:
  // 8 per unit, as the cost model counts them), its cold rate by the copy
  // reference. gemm_cold (cold over hot, each pair timed together) stays.
  std::vector<KernelTables> runs;
  for (auto& sw : sweepsRun) {
    for (size_t w = 0; w < sw.t.gemm.rate.size(); ++w)
      for (size_t i = 0; i < sw.t.gemm.rate[w].size(); ++i)
        sw.t.gemm.rate[w][i] *= sw.track.factor(static_cast<int>(sw.gemmAt[w][i]), g0, c0, 0.0);
    for (size_t k = 0; k < sw.t.memory.size(); ++k) {
      STRATA_ENFORCE(sw.memoryAt[k].size() == sw.t.memory[k].rate.size());
      for (size_t i = 0; i < sw.t.memory[k].rate.size(); ++i) {
        const int e = sw.memoryAt[k][i];
        sw.t.memory[k].rate[i] *=
            sw.track.factor(e, g0, c0, dramShare(sw.t.memory[k].units[i] * 8));
        if (i < sw.t.memoryCold[k].rate.size())
          sw.t.memoryCold[k].rate[i] *= sw.track.factor(e, g0, c0, 1.0);
        // Warm: from the last-level cache, on the chip as the hot rate's.
        if (i < sw.t.memoryWarm[k].rate.size())
          sw.t.memoryWarm[k].rate[i] *=
              sw.track.factor(e, g0, c0, dramShare(sw.t.memoryWarm[k].units[i] * 8));
      }
    }
    runs.push_back(std::move(sw.t));
  }
  // Each point's median over the sweeps; every sweep has the same points.
  KernelTables t = runs.front();
  auto gridMedians = [&](GemmTable KernelTables::*grid) {
    for (size_t w = 0; w < (t.*grid).rate.size(); ++w)
      for (size_t i = 0; i < (t.*grid).rate[w].size(); ++i) {
        std::vector<double> v;
        for (const auto& r : runs)
          v.push_back((r.*grid).rate[w][i]);
        (t.*grid).rate[w][i] = medianOfValues(v);
      }
  };
  gridMedians(&KernelTables::gemm);
  gridMedians(&KernelTables::gemmCold);
  gridMedians(&KernelTables::gemmWarm);
  auto medians = [&](auto member) {
    for (size_t k = 0; k < (t.*member).size(); ++k)
      for (size_t i = 0; i < (t.*member)[k].rate.size(); ++i) {
        std::vector<double> v;
        for (const auto& r : runs) {
          STRATA_ENFORCE((r.*member)[k].units == (t.*member)[k].units);
          v.push_back((r.*member)[k].rate[i]);
        }
        (t.*member)[k].rate[i] = medianOfValues(v);
      }
  };
  medians(&KernelTables::memory);
  medians(&KernelTables::memoryCold);
  medians(&KernelTables::memoryWarm);
  {
    std::vector<double> caches;
    for (const auto& r : runs)
      caches.push_back(r.effectiveCache.value());
    t.effectiveCache = Bytes(medianOfValues(caches));
  }
  std::vector<double> overheads;
  for (const auto& r : runs)
    overheads.push_back(r.callOverhead.value());
  t.callOverhead = Seconds(medianOfValues(overheads));
  t.referenceGemmRate = g0;
  t.referenceCopyRate = c0;
  const auto [gLo, gHi] = std::minmax_element(allGemm.begin(), allGemm.end());
  const auto [cLo, cHi] = std::minmax_element(allCopy.begin(), allCopy.end());
  say(fmt::format(
      "reference        256^3 GEMM {} ({:.0f} % from slowest to fastest of {} timings), 16 MiB "
      "copy {:.3g} G floats/s ({:.0f} %); every table point scaled to these by the timings "
      "around it",
      formatFlopRate(FlopsPerSecond(t.referenceGemmRate)), 100 * (*gHi / *gLo - 1), allGemm.size(),
      t.referenceCopyRate / 1e9, 100 * (*cHi / *cLo - 1)));
  return t;
}

std::string kernelTablesYaml(const KernelTables& t, const std::string& where, int sweeps) {
  const std::string over =
      sweeps > 1 ? fmt::format("; each point the median over {} sweeps", sweeps) : "";
  std::ostringstream y;
  y << "  kernels:   # the CPU backend's kernels, timed alone by " << where << "\n";
  y << "    backend: cpu   # lowering of executor/nn's CPU backend (im2col + GEMM convolutions)\n";
  y << fmt::format(
      "    call_overhead: {:.4g} us   # one Model layer-phase call around its kernels: forward of "
      "a relu over one element, median of 3 timed groups{}\n",
      t.callOverhead.value() * 1e6, over);
  if (t.referenceGemmRate > 0 && t.referenceCopyRate > 0)
    y << fmt::format(
        "    reference: {{gemm_gflop_per_s: {:.4g}, copy_gunits_per_s: {:.4g}}}   # the speed "
        "these tables stand for: strata validate's reference kernels (a 256^3 GEMM; a copy of "
        "16 MiB into a second buffer, floats per second), one thread, timed before, between and "
        "after the sweeps, median of each\n",
        t.referenceGemmRate / 1e9, t.referenceCopyRate / 1e9);
  y << "    gemm:   # FLOP/s of Eigen's products as conv and fc run them; median of 3 timed groups "
       "after a warm-up (best of 2 for calls over 10 ms); points over 2^31 multiply-adds or with "
       "an operand over 2^26 floats take the "
       "rate of the point with the largest dimension one step smaller"
    << over << "\n";
  if (t.gemmAccumulates)
    y << "      timed: accumulate   # each call C += op(A) op(B), the product alone: a call that "
         "writes C = is priced with the zero fill of C Eigen makes before it\n";
  gridRowsYaml(y, "op", t.gemm,
               {toString(GemmOp::kNN), toString(GemmOp::kNT), toString(GemmOp::kTN)});
  y << "    memory:   # units per call -> giga-units per second (docs/configs.md: units per "
       "kernel); median of 3 timed groups after a warm-up"
    << over << "\n";
  memoryRowsYaml(y, t);
  if (t.hasCold()) {
    y << fmt::format(
        "    last_level_cache: {:.0f} MiB   # cpu0's largest cache level (/sys/devices/system/cpu/"
        "cpu0/cache): the cold tables were flushed of it; workers on a node share it\n",
        t.lastLevelCache.value() / (1024.0 * 1024));
    y << "    memory_cold:   # the same kernels with their operands out of the caches: each call "
         "right after writing twice last_level_cache, median of 3"
      << over << "\n";
    memoryRowsYaml(y, t, Residence::kCold);
  }
  if (t.hasWarm()) {
    y << fmt::format(
        "    core_cache: {:.0f} KiB   # cpu0's largest cache level no other core shares "
        "(/sys/devices/system/cpu/cpu0/cache): the warm tables were flushed of it; each thread "
        "has its own\n",
        t.coreCache.value() / 1024);
    y << "    memory_warm:   # the same kernels with their operands out of the core's cache, in "
         "the last-level one: each call right after writing four times core_cache, median of 3"
      << over << "\n";
    memoryRowsYaml(y, t, Residence::kWarm);
  }
  if (t.hasGemmCold()) {
    y << fmt::format(
        "    effective_cache: {:.0f} MiB   # the cache an operand finds: a 16 x 4096 x 4096 nt "
        "GEMM timed after writing 1/16 to all of last_level_cache, the LRU share 1 - min(1, "
        "C / (written + 64 MiB)) fitted to its slowdown from hot to cold{}\n",
        t.effectiveCache.value() / (1024.0 * 1024), over);
    y << "    gemm_cold:   # cold time over hot time of Eigen's products: each shape timed "
         "hot (repeated calls, as gemm) and once right after writing twice last_level_cache; "
         "points over 2^30 multiply-adds or with an operand over 2^26 floats take a neighbour's"
      << over << "\n";
    gridRowsYaml(y, "op", t.gemmCold,
                 {toString(GemmOp::kNN), toString(GemmOp::kNT), toString(GemmOp::kTN)}, "      ",
                 "slowdown");
  }
  if (t.hasGemmWarm()) {
    y << "    gemm_warm:   # warm time over hot time of Eigen's products: each shape of "
         "gemm_cold's "
         "grid right after writing four times core_cache (median of 3 for calls under 2 ms)"
      << over << "\n";
    gridRowsYaml(y, "op", t.gemmWarm,
                 {toString(GemmOp::kNN), toString(GemmOp::kNT), toString(GemmOp::kTN)}, "      ",
                 "slowdown");
  }
  return y.str();
}

void gridRowsYaml(std::ostringstream& y, const char* key, const GemmTable& table,
                  const std::array<std::string_view, 3>& names, std::string_view indent,
                  std::string_view valueKey) {
  const bool rates = valueKey == "gflop_per_s";
  y << indent << "dims: [";
  for (size_t i = 0; i < table.dims.size(); ++i)
    y << (i ? ", " : "") << table.dims[i];
  y << "]   # grid of m, n and k\n";
  y << indent << "rates:   # one row per (" << key
    << ", m, n): " << (rates ? "GFLOP/s" : "time with the operands flushed (above) over hot time")
    << " for each k in dims\n";
  const size_t d = table.dims.size();
  for (size_t w = 0; w < 3; ++w)
    for (size_t im = 0; im < d; ++im)
      for (size_t in = 0; in < d; ++in) {
        y << indent
          << fmt::format("  - {{{}: {}, m: {}, n: {}, {}: [", key, names[w], table.dims[im],
                         table.dims[in], valueKey);
        for (size_t ik = 0; ik < d; ++ik)
          y << (ik ? ", " : "")
            << fmt::format("{:.4g}", table.rate[w][(im * d + in) * d + ik] / (rates ? 1e9 : 1));
        y << "]}\n";
      }
}

void sizeRowYaml(std::ostringstream& y, std::string_view name, const SizeTable& table) {
  y << "      " << name << ": {units: [";
  for (size_t j = 0; j < table.units.size(); ++j)
    y << (j ? ", " : "") << fmt::format("{:.0f}", table.units[j]);
  y << "], gunits_per_s: [";
  for (size_t j = 0; j < table.rate.size(); ++j)
    y << (j ? ", " : "") << fmt::format("{:.4g}", table.rate[j] / 1e9);
  y << "]}\n";
}

void memoryRowsYaml(std::ostringstream& y, const KernelTables& t, Residence at) {
  for (int i = 0; i < kMemKernelCount; ++i) {
    const auto& m = t.memoryTables(at)[static_cast<size_t>(i)];
    if (!m.empty())
      sizeRowYaml(y, toString(static_cast<MemKernel>(i)), m);
  }
}

namespace {
// One measurement of measureSharing: the slowest of `threads` threads
// running 60 GEMMs of 256^3 (gemm) or 40 copies of 16 MiB.
double sharedRun(int threads, bool gemm, size_t kCopy = 4u << 20 /* floats: 16 MiB */) {
  constexpr int kGemm = 256;
  std::vector<std::vector<float>> a(static_cast<size_t>(threads)), b(static_cast<size_t>(threads)),
      c(static_cast<size_t>(threads));
  for (int i = 0; i < threads; ++i) {
    const size_t n = gemm ? size_t(kGemm) * kGemm : kCopy;
    a[size_t(i)].assign(n, 0.01f);
    b[size_t(i)].assign(n, 0.02f);
    c[size_t(i)].assign(n, 0.0f);
  }
  std::atomic<int> ready{0};
  std::vector<double> took(static_cast<size_t>(threads));
  std::vector<std::thread> pool;
  for (int i = 0; i < threads; ++i)
    pool.emplace_back([&, i] {
      auto& A = a[size_t(i)];
      auto& B = b[size_t(i)];
      auto& C = c[size_t(i)];
      ready.fetch_add(1);
      while (ready.load() < threads) {
      }
      const auto t0 = Clock::now();
      // Copies: at least 40, and at least 640 MiB in all (small ones repeat).
      const int reps = gemm ? 60 : std::max<int>(40, int((640u << 20) / (kCopy * 4)));
      for (int r = 0; r < reps; ++r) {
        if (gemm)
          nn::CpuBackend::gemm(GemmOp::kNN, kGemm, kGemm, kGemm, A.data(), B.data(), C.data(),
                               false);
        else
          std::copy(A.begin(), A.end(), C.begin());
      }
      took[size_t(i)] = since(t0);
    });
  for (auto& th : pool)
    th.join();
  return *std::max_element(took.begin(), took.end());
}

double median3(double a, double b, double c) {
  return std::max(std::min(a, b), std::min(std::max(a, b), c));
}

// The slowest worker of a round, on every rank: the least of the `rate`s and
// the longest of the `time`s (collective; a gather as a sum of zero-padded
// vectors, floats: ample for speeds).
std::pair<double, double> slowestOf(Communicator& comm, double rate, double time) {
  const auto k = static_cast<size_t>(comm.size()), r = static_cast<size_t>(comm.rank());
  std::vector<float> all(2 * k, 0.0f);
  all[2 * r] = static_cast<float>(rate);
  all[2 * r + 1] = static_cast<float>(time);
  allReduceRing(comm, all, 0);
  double least = 1e300, longest = 0;
  for (size_t i = 0; i < k; ++i) {
    least = std::min(least, double(all[2 * i]));
    longest = std::max(longest, double(all[2 * i + 1]));
  }
  return {least, longest};
}
}  // namespace

OverlapTrial measureOverlapOn(Communicator& comm) {
  const int workers = comm.size();
  if (workers < 2)
    return {};
  constexpr int kGemm = 256;
  constexpr size_t kSegment = 1u << 20;  // floats: 4 MiB, the Plan's segment
  const int r = comm.rank();
  const int right = (r + 1) % workers, left = (r + workers - 1) % workers;
  std::vector<float> out(kSegment, 1.0f), in(kSegment), acc(kSegment, 0.0f);
  auto exchange = [&] {
    comm.sendRecv(right, 1, std::as_bytes(std::span<const float>(out)), left, 1,
                  std::as_writable_bytes(std::span<float>(in)));
    for (size_t j = 0; j < kSegment; ++j)
      acc[j] += in[j];
  };
  // Exchanges per round: 24, or fewer where one takes long (a slow link
  // between MPI ranks: a round of about 1 s, at least 4), as the slowest
  // rank timed its first (which also opens the connections).
  barrier(comm);
  const auto first = Clock::now();
  exchange();
  const int exchanges = static_cast<int>(std::clamp(
      std::ceil(1.0 / std::max(slowestOf(comm, 0, since(first)).second, 1e-9)), 4.0, 24.0));
  // mode 0: communication alone, 1: compute alone, 2: both, 3: both with
  // the compute lane running 128^3 GEMMs for `duty` of every 2 ms slice and
  // asleep for the rest, 4: those GEMMs alone. Returns (GEMMs per second of
  // the slowest compute lane while it runs, seconds of the slowest
  // communication lane for `exchanges` exchanges).
  constexpr double kSlice = 2e-3;
  constexpr int kDutyGemm = 128;
  auto run = [&](int mode, double duty = 1) {
    barrier(comm);
    std::atomic<bool> stop{false};
    double gemmRate = 0, commTime = 0;
    std::thread compute;
    if (mode >= 1)
      compute = std::thread([&] {
        const int n = mode >= 3 ? kDutyGemm : kGemm;
        std::vector<float> a(size_t(n) * n, 0.01f), b(a.size(), 0.02f), c(a.size());
        int done = 0;
        double busy = 0;
        const auto t0 = Clock::now();
        // Alone: a fixed 150 ms (100 ms of the small GEMMs); together:
        // while the exchanges run.
        const bool together = mode == 2 || mode == 3;
        const double aloneFor = mode == 4 ? 0.1 : 0.15;
        while (together ? !stop.load() : since(t0) < aloneFor) {
          if (mode != 3) {
            nn::CpuBackend::gemm(GemmOp::kNN, n, n, n, a.data(), b.data(), c.data(), false);
            ++done;
            continue;
          }
          const auto slice = Clock::now();
          while (since(slice) < duty * kSlice && !stop.load()) {
            nn::CpuBackend::gemm(GemmOp::kNN, n, n, n, a.data(), b.data(), c.data(), false);
            ++done;
          }
          busy += since(slice);
          const double rest = kSlice - since(slice);
          if (rest > 0 && !stop.load())
            std::this_thread::sleep_for(std::chrono::duration<double>(rest));
        }
        gemmRate = done / (mode == 3 ? std::max(busy, 1e-9) : since(t0));
      });
    if (mode != 1 && mode != 4) {
      const auto t0 = Clock::now();
      for (int i = 0; i < exchanges; ++i)
        exchange();
      commTime = since(t0);
    }
    stop.store(true);
    if (compute.joinable())
      compute.join();
    return slowestOf(comm, gemmRate, commTime);
  };
  constexpr size_t kSweep = kOverlapDuties.size() - 2;  // 0 and 1 are not swept
  double computeSpeed[3], commSpeed[3], rate[3];
  std::array<std::array<double, 3>, kSweep> dutyComm{}, dutyCompute{};
  for (int trial = 0; trial < 3; ++trial) {
    const double commAlone = run(0).second;
    const double gemmAlone = run(1).first;
    const auto both = run(2);
    computeSpeed[trial] = std::min(1.0, both.first / gemmAlone);
    commSpeed[trial] = std::min(1.0, commAlone / both.second);
    rate[trial] = exchanges * double(kSegment * sizeof(float)) / commAlone;
    const double smallAlone = run(4).first;
    for (size_t i = 0; i < kSweep; ++i) {
      const auto part = run(3, kOverlapDuties[i + 1]);
      dutyComm[i][size_t(trial)] = std::min(1.0, commAlone / part.second);
      dutyCompute[i][size_t(trial)] = std::min(1.0, part.first / smallAlone);
    }
  }
  OverlapTrial result{median3(computeSpeed[0], computeSpeed[1], computeSpeed[2]),
                      median3(commSpeed[0], commSpeed[1], commSpeed[2]),
                      median3(rate[0], rate[1], rate[2]),
                      {},
                      {}};
  result.commByDuty.push_back({0.0, 1.0});
  result.computeByDuty.push_back({0.0, 1.0});
  for (size_t i = 0; i < kSweep; ++i) {
    const auto& c = dutyComm[i];
    const auto& g = dutyCompute[i];
    // Never below the saturated figure: a lane busy part of the time slows
    // the other no more than one busy all the time (the trials' noise aside).
    result.commByDuty.push_back(
        {kOverlapDuties[i + 1], std::max(result.comm, median3(c[0], c[1], c[2]))});
    result.computeByDuty.push_back({kOverlapDuties[i + 1], median3(g[0], g[1], g[2])});
  }
  result.commByDuty.push_back({1.0, result.comm});
  result.computeByDuty.push_back({1.0, result.compute});
  return result;
}

OverlapTrial measureOverlap(int workers) {
  OverlapTrial result;
  if (workers < 2)
    return result;
  runLocal(workers, [&](Communicator& comm) {
    const OverlapTrial t = measureOverlapOn(comm);
    if (comm.rank() == 0)
      result = t;
  });
  return result;
}

double measureHandoff(int busy) {
  std::atomic<bool> stop{false};
  std::vector<std::thread> spinners;
  for (int i = 0; i < busy; ++i)
    spinners.emplace_back([&] {
      std::vector<float> a(128 * 128, 0.01f), b(a.size(), 0.02f), c(a.size());
      while (!stop.load())
        nn::CpuBackend::gemm(GemmOp::kNN, 128, 128, 128, a.data(), b.data(), c.data(), false);
    });
  double runs[3];
  for (double& result : runs) {
    std::mutex m;
    std::condition_variable cv;
    int turn = 0;
    constexpr int kRounds = 300;
    const auto t0 = Clock::now();
    std::thread other([&] {
      for (int i = 0; i < kRounds; ++i) {
        std::unique_lock lock(m);
        cv.wait(lock, [&] { return turn == 1; });
        turn = 0;
        lock.unlock();
        cv.notify_all();
      }
    });
    for (int i = 0; i < kRounds; ++i) {
      {
        std::lock_guard lock(m);
        turn = 1;
      }
      cv.notify_all();
      std::unique_lock lock(m);
      cv.wait(lock, [&] { return turn == 0; });
    }
    other.join();
    result = since(t0) / kRounds / 2;
  }
  stop.store(true);
  for (auto& t : spinners)
    t.join();
  return median3(runs[0], runs[1], runs[2]);
}

nn::PoolDesc calibrationPool(int window, int out) {
  nn::PoolDesc pd;
  pd.c = 64;
  pd.kernelH = pd.kernelW = window;
  pd.stride = 2;
  pd.outH = pd.outW = out;
  pd.inH = pd.inW = 2 * out + window - 2;
  pd.mode = PoolMode::kMax;
  return pd;
}

int calibrationPoolOut(double units, int window) {
  return std::max(1, static_cast<int>(std::lround(std::sqrt(units / 64 / (window * window)))));
}

std::vector<SharingRow> measureSharingRows(
    int maxWorkers, const std::function<std::pair<double, double>(int)>& sharing,
    const std::function<OverlapTrial(int)>& overlap,
    const std::function<void(const std::string&)>& say, const std::string& where,
    const std::function<std::vector<std::pair<double, double>>(int)>& memoryBySize) {
  std::vector<SharingRow> rows;
  for (int k = 1; k <= maxWorkers; k *= 2) {
    SharingRow r;
    r.workers = k;
    if (k > 1 && memoryBySize) {
      // memory_speed is the by-size row's 16 MiB entry, the same copies: two
      // separate timings of it disagreed by up to 2x on the unsteady VM
      // (0.486 and 0.939, one calibration, 2026-11-26).
      r.gemm = sharing(k).first;
      r.memoryBySize = memoryBySize(k);
      r.memory = r.memoryBySize.back().second;
    } else if (k > 1) {
      std::tie(r.gemm, r.memory) = sharing(k);
    }
    const auto trial = overlap(k);
    r.overlapCompute = trial.compute;
    r.overlapComm = trial.comm;
    r.overlapCommRate = trial.commRate;
    r.overlapCommByDuty = trial.commByDuty;
    // A lane hands off and then waits (its next task needs the other lane's),
    // so its own core is free: the other K - 1 workers' compute lanes are
    // what keeps the cores busy. With K GEMM threads on K cores every
    // wake-up waited for a time slice: 64 us at K = 2 on the 2-core VM, where
    // tiny-cnn's owt-b steps measured 1-7 us between the lanes' tasks
    // (2026-12-02, docs/validation.md).
    r.handoff = measureHandoff(k - 1);
    rows.push_back(r);
    std::string byDuty;
    for (const auto& [d, speed] : r.overlapCommByDuty)
      if (d > 0 && d < 1)
        byDuty += fmt::format("{}{:g}: {:.2f}", byDuty.empty() ? "" : ", ", d, speed);
    say(fmt::format(
        "sharing          {} workers{}: GEMM speed {:.2f}, memory speed {:.2f}; with "
        "communication: compute {:.2f}, communication {:.2f}{}; lane hand-off {}",
        k, where, r.gemm, r.memory, r.overlapCompute, r.overlapComm,
        byDuty.empty()
            ? std::string()
            : " (compute lane busy a share d of the time, d: communication " + byDuty + ")",
        formatSeconds(Seconds(r.handoff))));
  }
  return rows;
}

namespace {
// ", memory_speed_by_size: {256 KiB: 0.99, ...}" or "".
std::string memoryBySizeYaml(const std::vector<std::pair<double, double>>& bySize) {
  if (bySize.empty())
    return "";
  std::string s = ", memory_speed_by_size: {";
  for (size_t i = 0; i < bySize.size(); ++i)
    s += fmt::format("{}{:.0f} KiB: {:.3f}", i ? ", " : "", bySize[i].first / 1024,
                     bySize[i].second);
  return s + "}";
}
}  // namespace

}  // namespace strata::exec::detail

namespace strata::exec {
std::string dutyCurveYaml(const std::vector<std::pair<double, double>>& curve) {
  if (curve.empty())
    return "";
  std::string s = ", overlap_comm_speed_by_duty: [";
  for (size_t i = 0; i < curve.size(); ++i)
    s += fmt::format("{}[{:g}, {:.3f}]", i ? ", " : "", curve[i].first, curve[i].second);
  return s + "]";
}
}  // namespace strata::exec

namespace strata::exec::detail {

void sharingRowsYaml(std::ostringstream& y, const std::vector<SharingRow>& rows) {
  for (const auto& r : rows)
    y << fmt::format(
        "    - {{workers: {}, speed: {:.3f}, memory_speed: {:.3f}, overlap_compute_speed: {:.3f}, "
        "overlap_comm_speed: {:.3f}{}{}, lane_handoff: {:.4g} us{}}}\n",
        r.workers, r.gemm, r.memory, r.overlapCompute, r.overlapComm,
        dutyCurveYaml(r.overlapCommByDuty),
        r.overlapCommRate > 0
            ? fmt::format(", overlap_comm_rate: {:.4g} GB/s", r.overlapCommRate / 1e9)
            : std::string(),
        r.handoff * 1e6, memoryBySizeYaml(r.memoryBySize));
}

namespace {
// Half of one ping-pong of `buf` between ranks 0 and 1 (rank 0 sends first),
// under tags `tag` and `tag + 1`: one way's time.
double halfPingPong(Communicator& comm, int peer, std::span<std::byte> buf, int tag) {
  const auto t0 = Clock::now();
  if (comm.rank() == 0) {
    comm.send(peer, tag, buf);
    comm.recv(peer, tag + 1, buf);
  } else {
    comm.recv(peer, tag, buf);
    comm.send(peer, tag + 1, buf);
  }
  return since(t0) / 2;
}
}  // namespace

std::vector<TimingSample> pingPong(Communicator& comm) {
  std::vector<TimingSample> samples;
  if (comm.rank() > 1)
    return samples;
  const int peer = 1 - comm.rank();
  BufferOps& ops = comm.ops();
  for (double n = 1024; n <= 64.0 * 1024 * 1024; n *= 4) {
    const auto size = static_cast<size_t>(n);
    const size_t count = std::max<size_t>(1, (32u << 20) / size);
    // Touched once before timing (a host page's first touch is a fault).
    const std::vector<std::byte> ones(size, std::byte{1});
    std::vector<std::span<std::byte>> bufs;
    for (size_t i = 0; i < count; ++i) {
      auto* p = static_cast<std::byte*>(ops.allocate(size));
      ops.copy(p, ones.data(), size);
      bufs.emplace_back(p, size);
    }
    const int reps = n < 1e6 ? 200 : n < 16e6 ? 20 : 5;
    std::vector<double> times;
    for (int r = 0; r < reps + 1; ++r) {
      const double t = halfPingPong(comm, peer, bufs[static_cast<size_t>(r) % bufs.size()], 1);
      if (r > 0)
        times.push_back(t);
    }
    for (auto b : bufs)
      ops.deallocate(b.data(), b.size());
    samples.push_back({n, median(times)});
  }
  return samples;
}

double exchangeRatio(Communicator& comm, double bytes) {
  if (comm.rank() > 1)
    return 0;
  const int peer = 1 - comm.rank();
  BufferOps& ops = comm.ops();
  const auto size = static_cast<size_t>(bytes);
  const std::vector<std::byte> ones(size, std::byte{1});
  auto* out = static_cast<std::byte*>(ops.allocate(size));
  auto* in = static_cast<std::byte*>(ops.allocate(size));
  ops.copy(out, ones.data(), size);
  ops.copy(in, ones.data(), size);
  const std::span<std::byte> send(out, size), recv(in, size);
  double ratio[3];
  for (double& r : ratio) {
    // One way, then both ways at once, back to back (a trial sees one speed
    // of the machine); each the median of 9 after a warm-up.
    std::vector<double> oneWay, bothWays;
    for (int i = 0; i < 10; ++i) {
      const double t = halfPingPong(comm, peer, recv, 4);
      if (i > 0)
        oneWay.push_back(t);
    }
    for (int i = 0; i < 10; ++i) {
      const auto t0 = Clock::now();
      comm.sendRecv(peer, 6, send, peer, 6, recv);
      if (i > 0)
        bothWays.push_back(since(t0));
    }
    r = median(bothWays) / median(oneWay);
  }
  ops.deallocate(out, size);
  ops.deallocate(in, size);
  return median3(ratio[0], ratio[1], ratio[2]);
}

std::string duplexYaml(double ratio, double bytes) {
  return fmt::format(
      "{}   # both directions at once: an exchange of {:.0f} KiB each way took {:.2f} x one "
      "way alone (measured, median of 3 trials; half duplex above {} x, where the two "
      "directions take turns)",
      ratio > kHalfDuplexRatio ? "half" : "full", bytes / 1024, ratio, kHalfDuplexRatio);
}

LinkFit fitLink(const std::vector<TimingSample>& samples) {
  LinkFit f;
  f.ab = fitAlphaBeta(samples);
  f.ab.alpha = Seconds(0.9 * samples.front().seconds);
  f.table = bandwidthTable(samples, f.ab.alpha);
  return f;
}

void linkYaml(std::ostringstream& y, const LinkFit& link, const std::string& what,
              const std::string& duplex) {
  y << "    link:\n";
  y << fmt::format(
      "      bandwidth: {:.4g} GB/s   # fitted t = alpha + n / beta over 1 KiB..64 MiB, {}\n",
      link.ab.beta.value() / 1e9, what);
  y << fmt::format(
      "      latency: {:.4g} us   # 0.9 x the one-way time of 1 KiB (the fit above is off by up "
      "to {:.0f} %: the table carries the rest)\n",
      link.ab.alpha.value() * 1e6, 100 * link.ab.maxRelativeError);
  y << "      duplex: " << duplex << "\n";
  y << "      bandwidth_table:   # n / (t(n) - alpha) per message size: small messages are "
       "slower\n";
  for (const auto& p : link.table)
    y << fmt::format("        - {{bytes: {:.0f}, bandwidth: {:.4g} GB/s}}\n", p.bytes.value(),
                     p.bandwidth.value() / 1e9);
}

namespace {
// One trial of a sharing speed: time alone / time of the slowest of
// `workers` threads at once, the two timed back to back.
double sharingTrial(int workers, bool gemm, size_t copyFloats) {
  return std::min(1.0, sharedRun(1, gemm, copyFloats) / sharedRun(workers, gemm, copyFloats));
}
// Bytes per thread of the memory trials: inside a core's L2 (256 KiB), about
// the L2 (1 MiB), a share of the L3 (4 MiB), DRAM (16 MiB, memory_speed's).
constexpr std::array<double, 4> kSharingSizes = {256.0 * 1024, 1024.0 * 1024, 4096.0 * 1024,
                                                 16384.0 * 1024};
}  // namespace

void SharingPool::sample(int trials) {
  for (int k = 2; k <= maxWorkers_; k *= 2)
    for (int t = 0; t < trials; ++t) {
      gemm_[k].push_back(sharingTrial(k, true, 0));
      for (size_t i = 0; i < kSharingSizes.size(); ++i)
        memory_[k][i].push_back(sharingTrial(k, false, static_cast<size_t>(kSharingSizes[i] / 4)));
    }
}

std::pair<double, double> SharingPool::sharing(int workers) {
  if (gemm_[workers].empty())
    sample(kSharingTrials);
  return {median(gemm_[workers]), median(memory_[workers].back())};
}

std::vector<std::pair<double, double>> SharingPool::memoryBySize(int workers) {
  if (memory_[workers].back().empty())
    sample(kSharingTrials);
  std::vector<std::pair<double, double>> out;
  for (size_t i = 0; i < kSharingSizes.size(); ++i)
    out.push_back({kSharingSizes[i], median(memory_[workers][i])});
  return out;
}

}  // namespace strata::exec::detail

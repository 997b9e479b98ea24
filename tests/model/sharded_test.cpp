// Tensor parallelism, sequence parallelism, ZeRO and recomputation in the
// closed form (cost/src/sharded.cpp, types/src/tensor_parallel.cpp): the
// split of each layer against hand counts, the group collectives against
// their alpha-beta-gamma forms, memory per ZeRO stage against ZeRO's
// (2 + 2 + 12) psi / N, activations per recomputation mode, whole steps
// against the sum of their parts, and the options' mistakes.
#include <catch2/catch.hpp>
#include <numeric>

#include "helpers.h"
#include "strata/model/collectives.h"
#include "strata/model/error.h"
#include "strata/model/estimate.h"
#include "strata/model/plan.h"
#include "strata/model/tensor_parallel.h"
#include "strata/model/topology.h"

using namespace strata;
using strata::test::flatCluster;
using strata::test::presetCluster;
using strata::test::presetNetwork;

namespace {

Scenario ringScenario(int k, int b) {
  Scenario sc;
  sc.strategy = Strategy::kRing;
  sc.workers = k;
  sc.batchPerWorker = b;
  sc.options.segment = Bytes(0);  // unsegmented: the closed forms below
  return sc;
}

double localParams(const TpLayout& l) {
  double p = 0;
  for (const auto& x : l.layers)
    p += x.params;
  return p;
}

// Forward and backward of every layer alone (roofline, fp32) on b examples,
// each at its share of `layout` (the step's compute without its update).
double passesAlone(const Network& n, const TpLayout& layout, const DeviceSpec& d, int b) {
  double t = 0;
  for (size_t i = 0; i < n.layers.size(); ++i) {
    const auto& layer = n.layers[i];
    const double w = layout.layers[i].work;
    t += layerTime(layer, Phase::kFwd, b, w, d, d.peak[0], ElementType::kFp32).value();
    t += layerTime(layer, Phase::kBwdWeights, b, w, d, d.peak[0], ElementType::kFp32).value();
    if (!layer.readsNetworkInput())
      t += layerTime(layer, Phase::kBwdData, b, w, d, d.peak[0], ElementType::kFp32).value();
  }
  return t;
}

std::string errorOf(const Network& n, const Scenario& sc) {
  return test::scenarioError(n, sc);
}

}  // namespace

TEST_CASE("tiny-gpt's tensor-parallel slices hold the hand-counted parameters") {
  const auto n = presetNetwork("tiny-gpt");  // width 64, 4 heads, MLP 256, vocab 512, T 32
  REQUIRE(n.totalParams() == 134912);
  // t = 2: wte 256 x 64 + 32 x 64 positions; per block ln1 128, attention
  // (16640 - 64) / 2 + 64 (the output bias whole), ln2 128, fc1 16640 / 2,
  // fc2 (16448 - 64) / 2 + 64; ln_f 128; the tied lm_head none.
  const double block2 = 128 + 8352 + 128 + 8320 + 8256;
  CHECK(localParams(tensorParallelLayout(n, 2, false)) == 18432 + 2 * block2 + 128);
  const double block4 = 128 + 4208 + 128 + 4160 + 4160;
  CHECK(localParams(tensorParallelLayout(n, 4, false)) == 10240 + 2 * block4 + 128);
  CHECK(localParams(tensorParallelLayout(n, 1, false)) == 134912);

  // The collectives: per block an allreduce of T x c = 2048 elements after
  // the attention and after fc2 (forward) and after the attention's and
  // fc1's bwd_data (backward); the embedding's sum, the output layer's input
  // gradient, and the loss's 3 values per position.
  const auto l = tensorParallelLayout(n, 2, false);
  int fwd = 0, bwd = 0;
  double lossElems = 0;
  for (size_t i = 0; i < l.layers.size(); ++i) {
    const auto& x = l.layers[i];
    CHECK(x.fwdBefore.op == TpCollective::kNone);
    CHECK(x.bwdBefore.op == TpCollective::kNone);
    if (x.fwdAfter.op != TpCollective::kNone) {
      CHECK(x.fwdAfter.op == TpCollective::kAllReduce);
      if (n.layers[i].kind == LayerKind::kSoftmax)
        lossElems = x.fwdAfter.elems;
      else
        CHECK(x.fwdAfter.elems == 2048);
      ++fwd;
    }
    if (x.bwdAfter.op != TpCollective::kNone) {
      CHECK(x.bwdAfter.elems == 2048);
      ++bwd;
    }
  }
  CHECK(fwd == 1 + 2 * 2 + 1);
  CHECK(bwd == 2 * 2 + 1);
  CHECK(lossElems == 3 * 32);
  CHECK(l.splitRegions == 4);

  // Sequence parallelism: each allreduce becomes a reduce-scatter, and an
  // all-gather of the same tensor comes before each column layer (forward)
  // and each row layer's and the embedding's backward; the group sums the
  // weight gradients of the layernorms (2 per block and the final one).
  const auto sp = tensorParallelLayout(n, 2, true);
  int sums = 0;
  for (size_t i = 0; i < n.layers.size(); ++i)
    if (sp.layers[i].sumsGradient) {
      CHECK(n.layers[i].kind == LayerKind::kLayerNorm);
      CHECK(sp.layers[i].params == 2 * 64);
      ++sums;
    }
  CHECK(sums == 2 * 2 + 1);
  CHECK_FALSE(tensorParallelLayout(n, 2, false).layers[1].sumsGradient);
  int gathers = 0, scatters = 0;
  for (const auto& x : sp.layers)
    for (const auto* c : {&x.fwdBefore, &x.fwdAfter, &x.bwdBefore, &x.bwdAfter}) {
      gathers += c->op == TpCollective::kAllGather;
      scatters += c->op == TpCollective::kReduceScatter;
    }
  CHECK(scatters == 1 + 2 * 2 + 2 * 2 + 1);
  CHECK(gathers == 2 * 2 + 1 + 2 * 1 + 2 * 1 + 1);
  for (size_t i = 0; i < n.layers.size(); ++i)
    if (n.layers[i].kind == LayerKind::kLayerNorm)
      CHECK(sp.layers[i].work == 0.5);
}

TEST_CASE("a Llama block splits with its gate and value halves and whole key/value groups") {
  const auto n = presetNetwork("tiny-llama");  // width 64, 4 heads, 2 key/value heads, MLP 176
  // t = 2: the embedding's 256 rows; per block rmsnorm 64, attention 12288 / 2
  // (no biases), rmsnorm 64, gate_up 22528 / 2, down 11264 / 2; the final
  // rmsnorm; the untied output layer's 256 of 512 outputs.
  const double block = 64 + 6144 + 64 + 11264 + 5632;
  CHECK(localParams(tensorParallelLayout(n, 2, false)) == 16384 + 2 * block + 64 + 16384);
  CHECK(tensorParallelLayout(n, 2, true).splitRegions == 4);
  CHECK(tensorParallelObstacle(n, 2, true).empty());  // rmsnorm works per position
  CHECK_THAT(tensorParallelObstacle(n, 4, false),
             Catch::Contains("'h.1.attn' has 2 key/value heads, which 4 workers"));
  CHECK_THAT(tensorParallelObstacle(presetNetwork("llama3-8b"), 16, false),
             Catch::Contains("8 key/value heads, which 16 workers"));
  CHECK(tensorParallelObstacle(presetNetwork("llama2-70b"), 8, true).empty());
}

TEST_CASE("a tensor-parallel group that the network cannot split is refused, naming the layer") {
  const auto n = presetNetwork("tiny-gpt");
  CHECK(tensorParallelObstacle(n, 1, false).empty());
  CHECK(tensorParallelObstacle(n, 4, true).empty());
  CHECK_THAT(tensorParallelObstacle(n, 3, false), Catch::Contains("'h.1.attn' has 4 heads"));
  CHECK_THAT(tensorParallelObstacle(presetNetwork("alexnet"), 2, false),
             Catch::Contains("no layer that splits"));
  auto sc = ringScenario(6, 4);
  sc.options.tp = 4;
  CHECK_THAT(errorOf(n, sc), Catch::Contains("--tp: 6 workers do not split into tensor-parallel "
                                             "groups of 4"));
  sc = ringScenario(4, 4);
  sc.options.tp = 2;
  sc.strategy = Strategy::kNaive;
  CHECK_THAT(errorOf(n, sc), Catch::Contains("--tp: applies to ring only"));
  sc.strategy = Strategy::kRing;
  sc.options.gradientSync = AllreduceAlgorithm::kHalvingDoubling;
  CHECK_THAT(errorOf(n, sc), Catch::Contains("--allreduce: with --tp, --pp or --zero"));
  sc = ringScenario(4, 4);
  sc.options.zero = 4;
  CHECK_THAT(errorOf(n, sc), Catch::Contains("--zero: must be a ZeRO stage in [0, 3], got 4"));
  sc = ringScenario(4, 4);
  sc.options.sequenceParallel = true;
  CHECK_THAT(errorOf(n, sc), Catch::Contains("--sequence-parallel: applies with --tp 2 or more"));
  sc = ringScenario(4, 4);
  sc.options.recompute = Recompute::kSelective;
  CHECK_THAT(errorOf(presetNetwork("alexnet"), sc), Catch::Contains("no attention layer"));
  sc.options.recompute = Recompute::kFull;
  CHECK_THAT(errorOf(presetNetwork("alexnet"), sc), Catch::Contains("has none"));
  CHECK(errorOf(presetNetwork("resnet50"), sc).empty());  // bottleneck blocks
}

TEST_CASE("group collectives are the ring's alpha-beta-gamma forms inside each group") {
  const double beta = 1e9, alpha = 1e-5, reduceBw = 1e10;
  const auto cl = flatCluster(beta, alpha, 0, true, reduceBw);
  const Topology topo(cl, 8);
  CommParams p;
  p.segment = Bytes(0);
  p.gamma = 1 / reduceBw;
  const double n = 8e6;
  // Groups of 4 consecutive ranks: 3 steps of n/4 per phase.
  const auto rs = groupReduceScatter(topo, {4, 1}, Bytes(n), p);
  CHECK(rs.time.value() == Approx(3 * (alpha + n / 4 / beta + n / 4 / reduceBw)).epsilon(1e-12));
  const auto ag = groupAllGather(topo, {4, 1}, Bytes(n), p);
  CHECK(ag.time.value() == Approx(3 * (alpha + n / 4 / beta)).epsilon(1e-12));
  const auto ar = groupAllReduce(topo, {4, 1}, Bytes(n), p);
  CHECK(ar.time.value() == Approx(rs.time.value() + ag.time.value()).epsilon(1e-12));
  for (int r = 0; r < 8; ++r) {
    CHECK(ar.sent[static_cast<size_t>(r)] == 2 * 3 * n / 4);
    CHECK(rs.received[static_cast<size_t>(r)] == 3 * n / 4);
  }
  // The data-parallel groups across them (ranks 4 apart): pairs.
  const auto dp = groupAllReduce(topo, {8, 4}, Bytes(n), p);
  CHECK(dp.time.value() == Approx(2 * (alpha + n / 2 / beta) + n / 2 / reduceBw).epsilon(1e-12));
  // The whole ring is allReduceRing.
  const auto whole = groupAllReduce(topo, {8, 1}, Bytes(n), p);
  CHECK(
      whole.time.value() ==
      Approx(allReduce(topo, AllreduceAlgorithm::kRing, Bytes(n), p).time.value()).epsilon(1e-12));
  // A group of one moves nothing.
  CHECK(groupAllReduce(topo, {8, 8}, Bytes(n), p).time.value() == 0);
}

TEST_CASE("ZeRO shards the model states over the data-parallel group as ZeRO's section 5.1") {
  const auto n = presetNetwork("tiny-gpt");
  auto cl = flatCluster(1e9, 1e-6);
  cl.device.peak[static_cast<size_t>(ElementType::kBf16)] = FlopsPerSecond(1e12);
  const double psi = 134912;
  auto sc = ringScenario(4, 2);
  sc.options.element = ElementType::kBf16;
  sc.options.optimizer = Optimizer::kAdam;
  // Mixed-precision Adam: 2 + 2 + 12 bytes per parameter (fp32 master,
  // momentum and variance), Rajbhandari et al. 2020.
  auto states = [&](int zero) {
    sc.options.zero = zero;
    const auto m = estimateMemory(n, cl, sc, 0);
    return std::array<double, 3>{m.weights.value(), m.gradients.value(), m.optimizer.value()};
  };
  const auto s0 = states(0), s1 = states(1), s2 = states(2), s3 = states(3);
  CHECK(s0 == std::array<double, 3>{2 * psi, 2 * psi, 12 * psi});
  CHECK(s1 == std::array<double, 3>{2 * psi, 2 * psi, 12 * psi / 4});
  CHECK(s2 == std::array<double, 3>{2 * psi, 2 * psi / 4, 12 * psi / 4});
  CHECK(s3 == std::array<double, 3>{2 * psi / 4, 2 * psi / 4, 12 * psi / 4});
  CHECK(s3[0] + s3[1] + s3[2] == 16 * psi / 4);

  // Traffic per worker: ZeRO-1 and 2 reduce-scatter the gradients and
  // all-gather the weights, the allreduce's 2 (N-1)/N psi; ZeRO-3 gathers
  // the weights twice, 3 (N-1)/N psi (section 7).
  auto sent = [&](int zero) {
    sc.options.zero = zero;
    return estimate(n, cl, sc).workers[0].sent.value();
  };
  CHECK(sent(1) == Approx(2 * 3.0 / 4 * psi * 2).epsilon(1e-12));
  CHECK(sent(2) == Approx(sent(1)).epsilon(1e-12));
  CHECK(sent(0) == Approx(sent(1)).epsilon(1e-12));
  CHECK(sent(3) == Approx(3 * 3.0 / 4 * psi * 2).epsilon(1e-12));
}

TEST_CASE("recomputation keeps what Korthikanti et al. keep") {
  const auto n = presetNetwork("tiny-gpt");   // T 32, width 64, 4 heads, dropout: 2 blocks
  const auto cl = presetCluster("dgx-h100");  // a device with a bf16 peak
  auto sc = ringScenario(1, 3);
  sc.options.element = ElementType::kBf16;  // 2-byte elements, as the paper's formulas
  auto bytes = [&](Recompute r, int tp = 1, bool sp = false, int k = 1) {
    sc.options.recompute = r;
    sc.options.tp = tp;
    sc.options.sequenceParallel = sp;
    sc.workers = k;
    return estimateMemory(n, cl, sc, 0).activations.value() / 3;  // per example
  };
  auto act = [&](Recompute r, int tp = 1, bool sp = false, int k = 1) {
    return bytes(r, tp, sp, k) / 2;  // 2-byte elements (masks as bytes / 2)
  };
  // Korthikanti et al. 2023, section 4.1: a transformer layer keeps
  // s b h (34 + 5 a s / h) bytes, 5 a s^2 b of them the attention's softmax
  // output (2), its dropout mask (1) and output (2); tiny-gpt has no
  // attention dropout, so 34 s h + 2 a s^2 per example and block: the LN
  // inputs 4 s h, QKV's input 2 s h, Q K V 6 s h, the context 2 s h, fc1's
  // input 2 s h, GeLU's input 8 s h, fc2's input 8 s h, two dropout masks
  // 2 s h, the scores 2 a s^2. Around the blocks: the ids 2 s, ln_f's output
  // 2 s h (the head's input) and the softmax's probabilities 2 s V; not the
  // logits (the softmax's backward reads its output only).
  const double s = 32, h = 64, a = 4, vocab = 512;
  const double block = 34 * s * h + 2 * a * s * s;
  CHECK(bytes(Recompute::kNone) == 2 * s + 2 * s * h + 2 * block + 2 * s * h + 2 * s * vocab);
  const double none = act(Recompute::kNone);
  // Tensor parallelism over t = 2 keeps the replicated 10 s h of a block
  // whole (the layernorms' inputs and outputs, the masks) and splits the
  // other 24 s h + 2 a s^2 (Korthikanti et al. 2023, eq. 2); around the
  // blocks the ids, the embedding's and ln_f's outputs stay whole and the
  // probabilities over the vocabulary split.
  CHECK(bytes(Recompute::kNone, 2, false, 2) ==
        2 * s + 2 * s * h + 2 * (10 * s * h + (24 * s * h + 2 * a * s * s) / 2) + 2 * s * h +
            2 * s * vocab / 2);
  // Selective drops the H T^2 scores of each attention, leaving 34 s h a block.
  CHECK(none - act(Recompute::kSelective) == 2 * a * s * s);
  // Full keeps each block's output (the next one's input) and reruns one
  // block at a time: a block holds (34 s h + 2 a s^2) / 2 elements, so with 2
  // blocks it keeps one block's whole and the two outputs of s h.
  CHECK(none - act(Recompute::kFull) == 2 * block / 2 - (block / 2 + 2 * s * h));
  // Sequence parallelism divides every layer's activations by t but the
  // input's and the vocabulary-parallel embedding's (each worker writes its
  // whole output before the reduce-scatter).
  const double whole = double(n.input.elements()) + 2048;
  CHECK(act(Recompute::kNone, 2, true, 2) == Approx(whole + (none - whole) / 2).epsilon(1e-12));
  // Tensor parallelism alone leaves the replicated layers whole.
  const double tp2 = act(Recompute::kNone, 2, false, 2);
  CHECK(tp2 < none);
  CHECK(tp2 > act(Recompute::kNone, 2, true, 2));
}

TEST_CASE("a tensor-parallel step is its split compute plus its collectives in the path") {
  const auto n = presetNetwork("tiny-gpt");
  const double beta = 1e9, alpha = 2e-6, reduceBw = 1e10;
  const auto cl = flatCluster(beta, alpha, 0, true, reduceBw);
  const int b = 4;
  auto sc = ringScenario(2, b);
  sc.options.tp = 2;  // dp = 1: no data-parallel sync
  const auto l = tensorParallelLayout(n, 2, false);
  const auto& d = cl.device;
  double compute = passesAlone(n, l, d, b);
  compute += updateTime(localParams(l), d, ElementType::kFp32, Optimizer::kMomentum).value();
  // Allreduce over a pair: 2 alpha + 2 s / beta + s gamma, s = n / 2.
  auto pairAllreduce = [&](double bytes) {
    const double s = bytes / 2;
    return 2 * alpha + 2 * s / beta + s / reduceBw;
  };
  const double comm = 10 * pairAllreduce(2048.0 * b * 4) + pairAllreduce(96.0 * b * 4);
  const auto e = estimate(n, cl, sc);
  CHECK(e.step.value() == Approx(compute + comm).epsilon(1e-9));
  CHECK(e.workers[0].exposedCommunication.value() == Approx(comm).epsilon(1e-9));
  CHECK(e.workers[0].sent.value() == Approx((10 * 2048.0 + 96) * b * 4 / 2 * 2).epsilon(1e-12));
  // Two workers on one batch of b: the throughput is b per step.
  CHECK(e.throughput == Approx(b / e.step.value()).epsilon(1e-12));
  CHECK_THAT(e.placement, Catch::Contains("K = 2 = dp 1 x tp 2"));
}

TEST_CASE("a ZeRO-1 step without overlap: backprop, reduce-scatter, 1/N update, all-gather") {
  const auto n = presetNetwork("tiny-gpt");
  const double beta = 1e9, alpha = 2e-6, reduceBw = 1e10;
  const auto cl = flatCluster(beta, alpha, 0, true, reduceBw);
  const int b = 4;
  auto sc = ringScenario(4, b);
  sc.options.zero = 1;
  sc.options.overlap = false;
  const auto& d = cl.device;
  double compute = passesAlone(n, tensorParallelLayout(n, 1, false), d, b);
  const double psi = 134912, bytes = psi * 4;
  compute += updateTime(psi / 4, d, ElementType::kFp32, Optimizer::kMomentum).value();
  const double s = bytes / 4;
  const double rs = 3 * (alpha + s / beta + s / reduceBw), ag = 3 * (alpha + s / beta);
  const auto e = estimate(n, cl, sc);
  CHECK(e.step.value() == Approx(compute + rs + ag).epsilon(1e-9));
  CHECK(e.workers[0].compute.update.value() ==
        Approx(updateTime(psi / 4, d, ElementType::kFp32, Optimizer::kMomentum).value()));
}

TEST_CASE("gpt3-xl on 64 H100s with ZeRO-1 and bf16 Adam fits, and says why") {
  const auto n = presetNetwork("gpt3-xl");
  const auto cl = presetCluster("dgx-h100");
  auto sc = ringScenario(64, 1);
  sc.options.element = ElementType::kBf16;
  sc.options.optimizer = Optimizer::kAdam;
  sc.options.zero = 1;
  const double psi = 1315723264;
  const auto e = estimate(n, cl, sc);
  CHECK(e.fitsInMemory);
  const auto& m = e.workers[0].memory;
  CHECK(m.weights.value() == 2 * psi);
  CHECK(m.gradients.value() == 2 * psi);
  CHECK(m.optimizer.value() == 12 * psi / 64);
  CHECK(m.total() < cl.device.memoryCapacity);

  // At 32 examples per worker the activations do not fit; the change that
  // fits with one option is named, and it does fit.
  sc.batchPerWorker = 32;
  sc.options.zero = 0;
  REQUIRE_FALSE(estimate(n, cl, sc).fitsInMemory);
  const auto change = smallestFittingChange(n, cl, sc);
  REQUIRE(change);
  CHECK(change->memory <= cl.device.memoryCapacity);
  CHECK(change->options.find(' ', change->options.find(' ') + 1) == std::string::npos);  // one
  sc.batchPerWorker = 1;
  CHECK_FALSE(smallestFittingChange(n, cl, sc));  // it fits already
}

TEST_CASE("a ZeRO Plan never rewrites weights while a worker's compute or update may use them",
          "[plan][zero]") {
  // The executor runs the Plan's tasks as soon as their dependencies are
  // done, so a weight gather that delivers into worker d's layers must be
  // ordered (one reaches the other through dependencies) with every compute
  // task of d on those layers and every update of them on its source or
  // destination. ZeRO-3's gather before a unit's backward once waited only
  // for the unit two before it: on its first units it could run during their
  // forward (ThreadSanitizer, 2026-11-27).
  for (const char* name : {"tiny-cnn", "tiny-gpt"})
    for (int k = 2; k <= 5; ++k)
      for (int zero : {1, 2, 3})
        for (double bucket : {0.0, 40e3}) {
          INFO(name << " K = " << k << " ZeRO-" << zero << " bucket " << bucket);
          auto sc = ringScenario(k, 4);
          sc.options.zero = zero;
          sc.options.bucket = Bytes(bucket);
          const auto plan = lowerToPlan(presetNetwork(name), sc);
          const size_t n = plan.tasks.size(), words = (n + 63) / 64;
          // ancestors[i]: the tasks i waits for, directly or not (deps point back).
          std::vector<std::vector<uint64_t>> ancestors(n, std::vector<uint64_t>(words));
          for (size_t i = 0; i < n; ++i)
            for (int d : plan.depsOf(plan.tasks[i])) {
              REQUIRE(static_cast<size_t>(d) < i);
              auto& a = ancestors[i];
              const auto& da = ancestors[static_cast<size_t>(d)];
              for (size_t w = 0; w < words; ++w)
                a[w] |= da[w];
              a[static_cast<size_t>(d) / 64] |= uint64_t{1} << (d % 64);
            }
          auto waitsFor = [&](size_t i, size_t j) {
            return (ancestors[i][j / 64] >> (j % 64) & 1) != 0;
          };
          int gathers = 0, unordered = 0;
          for (size_t i = 0; i < n; ++i) {
            const auto& t = plan.tasks[i];
            if (t.kind != TaskKind::kTransfer ||
                plan.collectives[static_cast<size_t>(t.collective)].buffer != BufferKind::kWeights)
              continue;
            ++gathers;
            const auto& c = plan.collectives[static_cast<size_t>(t.collective)];
            for (const auto& f : plan.flowsOf(t))
              for (size_t j = 0; j < n; ++j) {
                const auto& u = plan.tasks[j];
                const int last = u.kind == TaskKind::kUpdate ? u.lastLayer : u.layer;
                const bool touches =
                    (u.kind == TaskKind::kCompute && u.worker == f.dst) ||
                    (u.kind == TaskKind::kUpdate && (u.worker == f.dst || u.worker == f.src));
                if (touches && u.layer <= c.lastLayer && last >= c.firstLayer && !waitsFor(i, j) &&
                    !waitsFor(j, i))
                  ++unordered;
              }
          }
          CHECK(gathers > 0);
          CHECK(unordered == 0);
        }
}

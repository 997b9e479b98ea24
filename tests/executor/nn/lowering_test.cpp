// The cost model's lowerings (model/lowering.h: lowerCpu, lowerCuda) against
// the kernel calls the backends really make, recorded by the backends
// themselves (kernel_recorder.h): for every preset network, every layer and
// phase, batches of 1 and 3 examples, the CPU backend at 1 and 2 threads per
// worker, and the CUDA backend (record only: no device needed) where it is
// built.
//
// Compared as multisets (mergeCalls): the cost model sums a phase's calls,
// so their order does not matter (and with 2 threads the team's threads
// report their examples' GEMMs in whatever order they run). Memory units
// compare to 1e-12 relative (a model-parallel slice's update is the layer's
// parameters times a share); shapes and counts exactly.
//
// Threads: lowerCpu lists the calls of one worker whose kernels run on T
// threads (--threads-per-worker). A GEMM that the team splits is one call
// (the cost model divides its time by T), as the recorder counts it; the one
// call list that depends on T is a convolution's bwd_weights over at least T
// examples (a zero fill and a reduce of each thread's partial gradient), so
// the CPU cases run at T = 1 and T = 2.
//
// The record-only runs compute nothing and allocate address space only
// (ReservedMemory, parameters left uninitialised), so gpt3-xl takes
// milliseconds; the small presets also run computing, to show that the
// record-only list is the computing run's and that a recorder changes no bit.
#include "strata/model/lowering.h"

#include <fmt/format.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "helpers.h"
#include "strata/exec/nn/cpu_backend.h"
#include "strata/exec/nn/kernel_recorder.h"
#include "strata/exec/nn/model.h"
#include "strata/model/error.h"
#include "strata/model/kernels.h"
#include "strata/model/layer_kinds.h"
#include "strata/model/presets.h"
#if STRATA_TEST_CUDA
#include "strata/exec/nn/cuda_backend.h"
#endif

namespace strata::nn {
namespace {

using test::presetNetwork;

constexpr Phase kPhases[] = {Phase::kFwd, Phase::kBwdData, Phase::kBwdWeights, Phase::kUpdate};

// Calls per (layer, phase) of one step.
using StepCalls = std::map<std::pair<int, Phase>, std::vector<KernelCall>>;

bool sameCall(const KernelCall& a, const KernelCall& b) {
  if (a.gemm != b.gemm || a.conv != b.conv || a.count != b.count)
    return false;
  if (a.gemm || a.conv)
    return (a.gemm ? a.op == b.op && a.accumulate == b.accumulate : a.pass == b.pass) &&
           a.m == b.m && a.n == b.n && a.k == b.k;
  return a.kernel == b.kernel && a.window == b.window && a.rowWidth == b.rowWidth &&
         a.stride == b.stride &&
         std::fabs(a.units - b.units) <= 1e-12 * std::max(std::fabs(a.units), 1.0);
}

bool sameCalls(const std::vector<KernelCall>& a, const std::vector<KernelCall>& b) {
  if (a.size() != b.size())
    return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!sameCall(a[i], b[i]))
      return false;
  return true;
}

// A model-parallel layout (owt-*) to record: rank `rank` of `workers`, or
// none (workers 0).
struct Slicing {
  int workers = 0;
  int rank = 0;
};

// One training step of `net` on `backend`, layer by layer, recording each
// phase: forward in order, then per layer from the last bwd_weights and
// bwd_data (as Model::backwardAll and the plans run them), then the update
// of each layer by `optimizer`. `compute`: the parameters are initialised
// and the input filled (a computing run); else nothing is written.
StepCalls recordStep(const Network& net, Backend& backend, KernelRecorder& recorder, int batch,
                     bool compute, Slicing slicing = {},
                     Optimizer optimizer = Optimizer::kMomentum) {
  ModelOptions options;
  options.backend = &backend;
  options.initializeParameters = compute;
  if (slicing.workers > 0)
    options.slices = modelParallelSlices(net, slicing.workers, slicing.rank);
  Model model(net, options);
  const int layers = model.layerCount();
  Tensor& input = model.input(batch);
  // Token ids stay 0 (an id); images get values.
  if (compute && net.layers[0].kind != LayerKind::kEmbedding)
    test::fillUniform(input.span(), 7, 0.0f, 1.0f);
  for (int l = 0; l < layers; ++l)
    if (model.modelParallel(l)) {
      Tensor& in = model.exchangeInput(l, batch);
      if (compute)
        test::fillUniform(in.span(), 11u + static_cast<uint32_t>(l));
    }
  const Layer& last = net.layers.back();
  model.setLabels(std::vector<int32_t>(size_t(batch) * last.inShape.h * last.inShape.w, 0));
  StepCalls calls;
  auto record = [&](int l, Phase phase, auto&& run) {
    recorder.clear();
    run();
    calls[{l, phase}] = recorder.calls();
  };
  for (int l = 0; l < layers; ++l)
    record(l, Phase::kFwd, [&] { model.forward(l); });
  for (int l = layers - 1; l >= 0; --l) {
    record(l, Phase::kBwdWeights, [&] { model.backwardWeights(l); });
    record(l, Phase::kBwdData, [&] { model.backwardData(l); });
  }
  for (int l = 0; l < layers; ++l)
    record(l, Phase::kUpdate, [&] { model.update(l, UpdateRule{optimizer}); });
  recorder.clear();
  return calls;
}

// The `outputs` argument of the lowering for layer l: the slice it holds
// under model parallelism, else 0 (the whole layer).
int outputsOf(const Network& net, Slicing slicing, int l) {
  if (slicing.workers == 0 || l < net.modelParallelFrom)
    return 0;
  const Layer& layer = net.layers[static_cast<size_t>(l)];
  if (layer.kind == LayerKind::kSoftmax || layer.kind == LayerKind::kRelu ||
      layer.kind == LayerKind::kDropout || layer.kind == LayerKind::kFc ||
      layer.kind == LayerKind::kSigmoid || layer.kind == LayerKind::kSilu ||
      layer.kind == LayerKind::kRelu6 || layer.kind == LayerKind::kHardSigmoid ||
      layer.kind == LayerKind::kHardSwish)
    return evenSlice(layer.outShape.c, slicing.workers, slicing.rank).size();
  return 0;
}

// Checks every (layer, phase) of a recorded step against `lowering`.
template <class Lowering>
void checkAgainst(const Network& net, const StepCalls& recorded, Lowering&& lowering,
                  const std::string& what) {
  for (int l = 0; l < static_cast<int>(net.layers.size()); ++l)
    for (Phase phase : kPhases) {
      const std::vector<KernelCall> lowered = mergeCalls(lowering(l, phase));
      const std::vector<KernelCall>& real = recorded.at({l, phase});
      INFO(fmt::format("{}: layer {} '{}' ({}), {}", what, l, net.layers[size_t(l)].name,
                       toString(net.layers[size_t(l)].kind), toString(phase)));
      INFO("lowered:  " << describe(lowered));
      INFO("recorded: " << describe(real));
      CHECK(sameCalls(lowered, real));
    }
}

// Adam and AdamW: a step updated by Backend::adam lists, phase by phase, the
// calls lowerCpu prices with the adam kernel (the update kernel the cost
// model picks for both, ComputeCosts::updateKernel), and its update calls
// are the SGD step's with the kernel swapped (same parameters, one call per
// layer).
void checkAdamUpdate(const Network& net, const StepCalls& sgd, int batch, int threads,
                     Slicing slicing) {
  for (Optimizer optimizer : {Optimizer::kAdam, Optimizer::kAdamW}) {
    KernelRecorder recorder(/*recordOnly=*/true);
    CpuBackend backend(CpuOptions{threads, &recorder});
    const StepCalls recorded = recordStep(net, backend, recorder, batch, false, slicing, optimizer);
    checkAgainst(
        net, recorded,
        [&](int l, Phase phase) {
          return lowerCpu(net, l, phase, batch, outputsOf(net, slicing, l), MemKernel::kAdam,
                          threads);
        },
        fmt::format("{} {}, batch {}, T = {}{}", net.name, toString(optimizer), batch, threads,
                    slicing.workers > 0 ? ", model-parallel" : ""));
    for (int l = 0; l < static_cast<int>(net.layers.size()); ++l) {
      std::vector<KernelCall> expected = sgd.at({l, Phase::kUpdate});
      for (KernelCall& c : expected) {
        REQUIRE(c.kernel == MemKernel::kSgd);
        c.kernel = MemKernel::kAdam;
      }
      INFO(fmt::format("{}: {} update of layer {}", net.name, toString(optimizer), l));
      CHECK(sameCalls(mergeCalls(recorded.at({l, Phase::kUpdate})), mergeCalls(expected)));
    }
  }
}

bool hasRnn(const Network& net) {
  for (const Layer& l : net.layers)
    if (l.kind == LayerKind::kRnn)
      return true;
  return false;
}

// Attention dropout (the Megatron-LM presets of docs/reproductions.md): priced
// by the model, refused by the executor's Model.
bool hasAttentionDropout(const Network& net) {
  for (const Layer& l : net.layers)
    if (l.kind == LayerKind::kAttention && l.spec.attentionDropout > 0)
      return true;
  return false;
}

// Swin's windows, position biases and patch merging (swin-t, swin-v2-t):
// priced by the model, refused by the executor's Model.
bool hasSwinLayers(const Network& net) {
  for (const Layer& l : net.layers)
    if (l.kind == LayerKind::kSpaceToDepth ||
        (l.kind == LayerKind::kAttention && (l.partitionSide() > 0 || l.spec.cosine)))
      return true;
  return false;
}

// The presets the executor never builds, not even record only: llama2-7b,
// llama3-8b and llama2-70b (6.7 to 69 billion parameters, and T = 4096 or
// 8192 positions whose attention scores alone reserve hundreds of GB of
// address space). tiny-llama holds their layers at a size that runs; the cost
// model prices the big ones from the same lowering.
constexpr int64_t kMaxRecordedParams = 2'000'000'000;  // gpt3-xl's 1.3B is recorded
bool tooBigToRecord(const Network& net) {
  return net.totalParams() > kMaxRecordedParams;
}

// Whether a network has layers only the CPU backend runs (Backend::runsLlamaLayers).
bool hasLlamaLayers(const Network& net) {
  for (const Layer& l : net.layers)
    if (l.kind == LayerKind::kRmsNorm || l.kind == LayerKind::kSwiglu ||
        (l.kind == LayerKind::kAttention && (l.kvHeads() != l.spec.heads || l.spec.rotary)))
      return true;
  return false;
}

// Whether a network has vision networks' layers, which only the CPU backend
// runs (Backend::runsVisionLayers).
bool hasVisionLayers(const Network& net) {
  for (const Layer& l : net.layers)
    if (isVisionKind(l.kind))
      return true;
  return false;
}

void checkCpu(int threads) {
  for (const std::string& preset : listPresets(ConfigKind::kNetwork)) {
    const Network net = presetNetwork(preset);
    if (tooBigToRecord(net))
      continue;
    if (hasRnn(net) || hasAttentionDropout(net) || hasSwinLayers(net)) {
      // The executor runs no rnn layer (lm-300m), no attention dropout and
      // no Swin layers: nothing to record.
      INFO(preset);
      CHECK_THROWS_AS(Model(net), ConfigError);
      continue;
    }
    for (int batch : {1, 3}) {
      std::vector<Slicing> layouts = {{}};
      if (net.modelParallelFrom >= 0)
        layouts.push_back({3, 1});  // the middle third: uneven slices
      for (Slicing slicing : layouts) {
        KernelRecorder recorder(/*recordOnly=*/true);
        CpuBackend backend(CpuOptions{threads, &recorder});
        const StepCalls recorded = recordStep(net, backend, recorder, batch, false, slicing);
        checkAgainst(
            net, recorded,
            [&](int l, Phase phase) {
              return lowerCpu(net, l, phase, batch, outputsOf(net, slicing, l), MemKernel::kSgd,
                              threads);
            },
            fmt::format("{}, batch {}, T = {}{}", preset, batch, threads,
                        slicing.workers > 0 ? fmt::format(", model-parallel rank {} of {}",
                                                          slicing.rank, slicing.workers)
                                            : ""));
        checkAdamUpdate(net, recorded, batch, threads, slicing);
      }
    }
  }
}

TEST_CASE("lowerCpu lists the calls the CPU backend makes: every preset on 1 thread",
          "[lowering]") {
  checkCpu(1);
}

// What no preset has: the network input read by two layers, a four-input
// add, grouped and pointwise convolutions without bias, avg pooling with
// padding, a global pool, dropout at rate 0, per-position fc layers over
// several positions and over one.
Network edgeNetwork() {
  using test::convSpec;
  using test::fcSpec;
  using test::poolSpec;
  test::NetworkBuilder b(Shape{3, 9, 9});
  const int c0 = b.add(LayerKind::kConv, convSpec(8, 3, 3, 1, 1), {-1});
  const int r0 = b.add(LayerKind::kRelu);
  const int c1 = b.add(LayerKind::kConv, convSpec(8, 1, 1, 1, 0, 1, false), {-1});
  const int c2 = b.add(LayerKind::kConv, convSpec(8, 3, 3, 1, 1, 4), {r0});
  const int c3 = b.add(LayerKind::kConv, convSpec(8, 1, 1, 1, 0, 2, false), {r0});
  static_cast<void>(c0);
  b.add(LayerKind::kAdd, {}, {r0, c1, c2, c3});
  b.add(LayerKind::kPool, poolSpec(PoolMode::kAvg, 3, 2, 1));
  b.add(LayerKind::kLrn, test::lrnSpec(3));
  b.add(LayerKind::kFc, fcSpec(6, false));
  b.add(LayerKind::kDropout, test::dropoutSpec(0.0));
  b.add(LayerKind::kPool, poolSpec(PoolMode::kMax, 1, 1, 0, true));
  b.add(LayerKind::kFc, fcSpec(4, false));
  b.add(LayerKind::kBatchNorm);
  b.add(LayerKind::kFc, fcSpec(5));
  b.add(LayerKind::kDropout, test::dropoutSpec(0.5));
  b.add(LayerKind::kSoftmax);
  return b.network();
}

TEST_CASE("lowerCpu lists the calls the CPU backend makes: layers no preset has",
          "[lowering][threads]") {
  const Network net = edgeNetwork();
  for (int threads : {1, 2})
    for (int batch : {1, 3}) {
      KernelRecorder recorder(/*recordOnly=*/true);
      CpuBackend backend(CpuOptions{threads, &recorder});
      const StepCalls recorded = recordStep(net, backend, recorder, batch, false);
      checkAgainst(
          net, recorded,
          [&](int l, Phase phase) {
            return lowerCpu(net, l, phase, batch, 0, MemKernel::kSgd, threads);
          },
          fmt::format("edge network, batch {}, T = {}", batch, threads));
    }
}

// Vision networks' layers: concatenations of two and three inputs of
// different widths (one of them the network input, one read twice, so that
// gradients are summed), every activation, mul by a per-channel gate (a
// squeeze-excitation block) and by a tensor of its shape (x * x too: both
// gradients one buffer), convolutions with a column pad other than the
// row pad, dilated, and a 1x1 one with a column pad (not pointwise), max
// pooling with ceil_mode, slices (two of one input, and one alone) and a
// shuffle, and an fc head whose model-parallel part holds activations.
Network visionEdgeNetwork() {
  using test::convSpec;
  test::NetworkBuilder b(Shape{3, 9, 8});
  LayerSpec wide = convSpec(4, 1, 5, 1, 0);
  wide.padW = 2;
  const int a = b.add(LayerKind::kConv, wide, {-1});
  LayerSpec dilated = convSpec(5, 3, 3, 1, 2);
  dilated.dilation = 2;
  const int c = b.add(LayerKind::kConv, dilated, {-1});
  const int cat2 = b.add(LayerKind::kConcat, {}, {a, c});
  LayerSpec columns = convSpec(3, 1, 1, 1, 0);
  columns.padW = 1;
  const int d = b.add(LayerKind::kConv, columns, {cat2});  // 9 x 10
  LayerSpec narrow = convSpec(2, 1, 3, 1, 0);
  const int e = b.add(LayerKind::kConv, narrow, {d});  // 9 x 8
  const int cat3 = b.add(LayerKind::kConcat, {}, {e, -1, a});
  const int s = b.add(LayerKind::kSilu, {}, {cat3});
  const int pool = b.add(LayerKind::kPool, test::poolSpec(PoolMode::kAvg, 0, 1, 0, true), {s});
  b.add(LayerKind::kConv, convSpec(9, 1, 1));
  const int gate = b.add(LayerKind::kHardSigmoid);
  static_cast<void>(pool);
  const int se = b.add(LayerKind::kMul, {}, {s, gate});
  const int sig = b.add(LayerKind::kSigmoid, {}, {se});
  const int same = b.add(LayerKind::kMul, {}, {se, sig});
  const int square = b.add(LayerKind::kMul, {}, {same, same});
  b.add(LayerKind::kRelu6, {}, {square});
  LayerSpec ceil = test::poolSpec(PoolMode::kMax, 2, 2);
  ceil.ceilMode = true;
  const int ceiled = b.add(LayerKind::kPool, ceil);  // 9 x 5 x 4
  // Two overlapping slices of one input (their gradients summed), joined,
  // shuffled, and a slice its input's one reader (its gradient zero-filled).
  LayerSpec low, high, inner, shuffle;
  low.channels = 4;
  high.offset = 3;
  high.channels = 6;
  inner.offset = 1;
  inner.channels = 8;
  shuffle.groups = 5;
  const int lo = b.add(LayerKind::kSlice, low, {ceiled});
  const int hi = b.add(LayerKind::kSlice, high, {ceiled});
  b.add(LayerKind::kConcat, {}, {lo, hi});
  b.add(LayerKind::kShuffle, shuffle);
  b.add(LayerKind::kSlice, inner);
  b.add(LayerKind::kScale);
  b.add(LayerKind::kHardSwish);
  b.add(LayerKind::kFc, test::fcSpec(6));
  b.add(LayerKind::kHardSwish);
  b.add(LayerKind::kRelu6);
  b.add(LayerKind::kFc, test::fcSpec(5));
  b.add(LayerKind::kSigmoid);
  b.add(LayerKind::kSilu);
  b.add(LayerKind::kSoftmax);
  return b.network();
}

TEST_CASE("lowerCpu lists the calls the CPU backend makes: vision layers no preset has",
          "[lowering][threads][vision]") {
  Network net = visionEdgeNetwork();
  REQUIRE(net.modelParallelFrom >= 0);
  for (int threads : {1, 2})
    for (int batch : {1, 3}) {
      for (Slicing slicing : {Slicing{}, Slicing{3, 1}}) {
        KernelRecorder recorder(/*recordOnly=*/true);
        CpuBackend backend(CpuOptions{threads, &recorder});
        const StepCalls recorded = recordStep(net, backend, recorder, batch, false, slicing);
        checkAgainst(
            net, recorded,
            [&](int l, Phase phase) {
              return lowerCpu(net, l, phase, batch, outputsOf(net, slicing, l), MemKernel::kSgd,
                              threads);
            },
            fmt::format("vision edge network, batch {}, T = {}{}", batch, threads,
                        slicing.workers > 0 ? ", model-parallel" : ""));
      }
    }
  // A computing run lists the record-only run's calls.
  KernelRecorder onlyRecords(/*recordOnly=*/true), alsoComputes(/*recordOnly=*/false);
  CpuBackend dry(CpuOptions{2, &onlyRecords});
  CpuBackend wet(CpuOptions{2, &alsoComputes});
  const StepCalls recorded = recordStep(net, dry, onlyRecords, 3, false);
  const StepCalls computed = recordStep(net, wet, alsoComputes, 3, true);
  for (const auto& [key, calls] : computed) {
    INFO(fmt::format("layer {}, {}", key.first, toString(key.second)));
    CHECK(sameCalls(calls, recorded.at(key)));
  }
}

// A vision transformer (torchvision's ViT) at toy size: patches by a strided
// conv, two class tokens, the position table, a pre-LN block with
// bidirectional attention, the class token to the head; and what ViT has not:
// the block's output read by two tokens (their gradients summed) and the
// patches by a second class token (summed into the conv's gradient), whose
// token is its input's one reader (a gradient zero-filled first).
Network vitEdgeNetwork() {
  test::NetworkBuilder b(Shape{3, 8, 12});
  const int patches = b.add(LayerKind::kConv, test::convSpec(6, 4, 4, 4), {-1});  // 6 x 2 x 3
  LayerSpec two, one;
  two.tokens = 2;
  one.tokens = 1;
  b.add(LayerKind::kClassToken, two, {patches});  // 6 x 8 x 1
  const int pos = b.add(LayerKind::kPosEmbedding);
  b.add(LayerKind::kLayerNorm);
  LayerSpec bidirectional;
  bidirectional.heads = 2;
  bidirectional.causal = false;
  const int attn = b.add(LayerKind::kAttention, bidirectional);
  const int block = b.add(LayerKind::kAdd, {}, {pos, attn});
  LayerSpec first, fourth, last;
  first.index = 0;
  fourth.index = 3;
  last.index = 6;
  const int cls = b.add(LayerKind::kToken, first, {block});
  const int other = b.add(LayerKind::kToken, fourth, {block});
  const int again = b.add(LayerKind::kClassToken, one, {patches});  // 6 x 7 x 1
  const int tail = b.add(LayerKind::kToken, last, {again});
  b.add(LayerKind::kAdd, {}, {cls, other, tail});
  b.add(LayerKind::kFc, test::fcSpec(5));
  b.add(LayerKind::kSoftmax);
  return b.network();
}

TEST_CASE("lowerCpu lists the calls the CPU backend makes: a vision transformer's layers",
          "[lowering][threads][vision][vit]") {
  const Network net = vitEdgeNetwork();
  for (int threads : {1, 2})
    for (int batch : {1, 3}) {
      KernelRecorder recorder(/*recordOnly=*/true);
      CpuBackend backend(CpuOptions{threads, &recorder});
      const StepCalls recorded = recordStep(net, backend, recorder, batch, false);
      checkAgainst(
          net, recorded,
          [&](int l, Phase phase) {
            return lowerCpu(net, l, phase, batch, 0, MemKernel::kSgd, threads);
          },
          fmt::format("vision transformer edge network, batch {}, T = {}", batch, threads));
      checkAdamUpdate(net, recorded, batch, threads, {});
    }
  // A computing run lists the record-only run's calls.
  KernelRecorder onlyRecords(/*recordOnly=*/true), alsoComputes(/*recordOnly=*/false);
  CpuBackend dry(CpuOptions{2, &onlyRecords});
  CpuBackend wet(CpuOptions{2, &alsoComputes});
  const StepCalls recorded = recordStep(net, dry, onlyRecords, 3, false);
  const StepCalls computed = recordStep(net, wet, alsoComputes, 3, true);
  for (const auto& [key, calls] : computed) {
    INFO(fmt::format("layer {}, {}", key.first, toString(key.second)));
    CHECK(sameCalls(calls, recorded.at(key)));
  }
}

// Transformer layers as no preset has them: an embedding without a position
// table, attention with one head (fewer heads than the batch of 3: the CUDA
// backend then batches its per-head GEMMs over the examples) and without
// bias, attention with two heads not causal, a tied fc with a bias.
Network transformerEdgeNetwork() {
  test::NetworkBuilder b(Shape{1, 5, 1});
  LayerSpec embedding;
  embedding.vocab = 7;
  embedding.outputs = 6;
  embedding.positions = 0;
  const int wte = b.add(LayerKind::kEmbedding, embedding);
  LayerSpec oneHead;
  oneHead.heads = 1;
  oneHead.causal = true;
  oneHead.bias = false;
  b.add(LayerKind::kAttention, oneHead);
  b.add(LayerKind::kLayerNorm);
  LayerSpec twoHeads;
  twoHeads.heads = 2;
  twoHeads.causal = false;
  twoHeads.bias = true;
  b.add(LayerKind::kAttention, twoHeads);
  b.add(LayerKind::kGelu);
  LayerSpec tied = test::fcSpec(7, false, true);
  tied.tiedTo = wte;
  b.add(LayerKind::kFc, tied);
  b.add(LayerKind::kSoftmax);
  return b.network();
}

TEST_CASE("lowerCpu lists the calls the CPU backend makes: transformer layers no preset has",
          "[lowering][threads]") {
  const Network net = transformerEdgeNetwork();
  for (int threads : {1, 2})
    for (int batch : {1, 3}) {
      KernelRecorder recorder(/*recordOnly=*/true);
      CpuBackend backend(CpuOptions{threads, &recorder});
      const StepCalls recorded = recordStep(net, backend, recorder, batch, false);
      checkAgainst(
          net, recorded,
          [&](int l, Phase phase) {
            return lowerCpu(net, l, phase, batch, 0, MemKernel::kSgd, threads);
          },
          fmt::format("transformer edge network, batch {}, T = {}", batch, threads));
    }
  // Rotary positions on 2 of each head's 3 features (GPT-NeoX's rotary_pct;
  // a CPU layer, Backend::runsLlamaLayers), in a parallel residual.
  test::NetworkBuilder b(Shape{1, 5, 1});
  LayerSpec embedding;
  embedding.vocab = 7;
  embedding.outputs = 6;
  const int embed = b.add(LayerKind::kEmbedding, embedding);
  b.add(LayerKind::kLayerNorm, {}, {embed});
  LayerSpec partial;
  partial.heads = 2;
  partial.rotary = true;
  partial.rotaryDims = 2;
  const int attn = b.add(LayerKind::kAttention, partial);
  const int mlp = b.add(LayerKind::kFc, test::fcSpec(6, false), {embed});
  b.add(LayerKind::kAdd, {}, {embed, attn, mlp});
  b.add(LayerKind::kFc, test::fcSpec(7, false));
  b.add(LayerKind::kSoftmax);
  const Network neox = b.network();
  REQUIRE(neox.layers[2].rotaryFeatures() == 2);
  for (int batch : {1, 3}) {
    KernelRecorder recorder(/*recordOnly=*/true);
    CpuBackend backend(CpuOptions{2, &recorder});
    const StepCalls recorded = recordStep(neox, backend, recorder, batch, false);
    checkAgainst(
        neox, recorded,
        [&](int l, Phase phase) { return lowerCpu(neox, l, phase, batch, 0, MemKernel::kSgd, 2); },
        fmt::format("partial rotary network, batch {}", batch));
  }
}

TEST_CASE("lowerCpu lists the calls the CPU backend makes: every preset on 2 threads",
          "[lowering][threads]") {
  checkCpu(2);
}

// A parameter-identical copy of a step's results, for bit comparisons.
std::vector<float> stepResult(const Network& net, Backend& backend) {
  ModelOptions options;
  options.backend = &backend;
  Model model(net, options);
  Tensor& input = model.input(3);
  if (net.layers[0].kind != LayerKind::kEmbedding)
    test::fillUniform(input.span(), 7, 0.0f, 1.0f);
  const Layer& last = net.layers.back();
  model.setLabels(std::vector<int32_t>(size_t(3) * last.inShape.h * last.inShape.w, 0));
  model.forwardAll();
  model.backwardAll();
  model.updateAll(0.01f, 0.9f);
  const auto params = model.allParameters();
  return {params.begin(), params.end()};
}

TEST_CASE("a record-only run lists the calls a computing run makes and recording changes no bit",
          "[lowering][threads]") {
  for (const char* preset : {"tiny-cnn", "tiny-gpt", "tiny-llama"})
    for (int threads : {1, 2}) {
      const Network net = presetNetwork(preset);
      INFO(fmt::format("{}, T = {}", preset, threads));
      KernelRecorder onlyRecords(/*recordOnly=*/true), alsoComputes(/*recordOnly=*/false);
      CpuBackend dry(CpuOptions{threads, &onlyRecords});
      CpuBackend wet(CpuOptions{threads, &alsoComputes});
      const StepCalls recorded = recordStep(net, dry, onlyRecords, 3, false);
      const StepCalls computed = recordStep(net, wet, alsoComputes, 3, true);
      for (const auto& [key, calls] : computed) {
        INFO(fmt::format("layer {}, {}", key.first, toString(key.second)));
        INFO("computing:   " << describe(calls));
        INFO("record only: " << describe(recorded.at(key)));
        CHECK(sameCalls(calls, recorded.at(key)));
      }
      CpuBackend plain(CpuOptions{threads});
      const std::vector<float> without = stepResult(net, plain);
      const std::vector<float> with = stepResult(net, wet);
      REQUIRE(without.size() == with.size());
      CHECK(std::memcmp(without.data(), with.data(), without.size() * sizeof(float)) == 0);
    }
}

#if STRATA_TEST_CUDA
TEST_CASE("lowerCuda lists the calls the CUDA backend makes: layers no preset has",
          "[lowering][cuda]") {
  const Network net = edgeNetwork();
  for (auto element : {ElementType::kFp32, ElementType::kBf16})
    for (int batch : {1, 3}) {
      KernelRecorder recorder(/*recordOnly=*/true);
      CudaBackend backend(recorder, element);
      const StepCalls recorded = recordStep(net, backend, recorder, batch, false);
      checkAgainst(
          net, recorded,
          [&](int l, Phase phase) {
            return lowerCuda(net, l, phase, batch, 0, MemKernel::kSgd, element);
          },
          fmt::format("edge network on cuda {}, batch {}", toString(element), batch));
    }
}

// A dilated convolution and one with a column pad of its own go to cuDNN
// as one call per pass, as lowerCuda prices them; the vision layers
// around them are refused (the CUDA backend lacks their kernels).
TEST_CASE("lowerCuda: dilated and column-padded convolutions, and vision layers refused",
          "[lowering][cuda][vision]") {
  test::NetworkBuilder b(Shape{3, 9, 8});
  LayerSpec wide = test::convSpec(4, 1, 5, 1, 0);
  wide.padW = 2;
  b.add(LayerKind::kConv, wide);
  LayerSpec dilated = test::convSpec(5, 3, 3, 2, 2);
  dilated.dilation = 2;
  b.add(LayerKind::kConv, dilated);
  LayerSpec ceil = test::poolSpec(PoolMode::kMax, 2, 2);
  ceil.ceilMode = true;
  b.add(LayerKind::kPool, ceil);
  b.add(LayerKind::kFc, test::fcSpec(5));
  b.add(LayerKind::kSoftmax);
  const Network net = b.network();
  for (int batch : {1, 3}) {
    KernelRecorder recorder(/*recordOnly=*/true);
    CudaBackend backend(recorder);
    const StepCalls recorded = recordStep(net, backend, recorder, batch, false);
    checkAgainst(
        net, recorded, [&](int l, Phase phase) { return lowerCuda(net, l, phase, batch, 0); },
        fmt::format("dilated convolutions on cuda, batch {}", batch));
  }
  KernelRecorder recorder(/*recordOnly=*/true);
  CudaBackend backend(recorder);
  ModelOptions options;
  options.backend = &backend;
  CHECK_THROWS_WITH(Model(visionEdgeNetwork(), options),
                    Catch::Contains("layer 'concat2' (concat): the cuda backend does not run "
                                    "vision networks'"));
  // Backend's defaults name the kernel it lacks.
  const Dims d{1, 1, 1, 1};
  float v = 0;
  CHECK_THROWS_WITH(backend.activationForward(Activation::kRelu6, {&v, d}, {&v, d}),
                    Catch::Contains("the cuda backend does not run relu6 layers yet"));
  CHECK_THROWS_AS(backend.mulForward({&v, d}, {&v, d}, {&v, d}), UserError);
  CHECK_THROWS_AS(backend.copyFromChannels({&v, d}, 0, {&v, d}, 0.0f), UserError);
  CHECK_THROWS_AS(backend.addIntoChannels({&v, d}, {&v, d}, 0, 0.0f), UserError);
  CHECK_THROWS_WITH(backend.shuffleChannels({&v, d}, 1, {&v, d}, 0.0f),
                    Catch::Contains("the cuda backend does not run shuffle layers yet"));
  CHECK_THROWS_WITH(backend.scaleChannels({&v, d}, &v, {&v, d}, 0.0f),
                    Catch::Contains("the cuda backend does not run scale layers yet"));
  // A vision transformer's layers: the Model names the first, the backend's
  // defaults their kernels.
  CHECK_THROWS_WITH(Model(vitEdgeNetwork(), options),
                    Catch::Contains("layer 'class_token1' (class_token): the cuda backend does not "
                                    "run vision networks'"));
  CHECK_THROWS_WITH(backend.copyPositions({&v, d}, 0, {&v, d}, 0, 1, 0.0f),
                    Catch::Contains("the cuda backend does not run class_token and token layers"));
  CHECK_THROWS_WITH(backend.broadcastPositions(&v, 1, {&v, d}, 0),
                    Catch::Contains("the cuda backend does not run class_token layers yet"));
  CHECK_THROWS_WITH(backend.addTable({&v, d}, &v, {&v, d}),
                    Catch::Contains("the cuda backend does not run pos_embedding layers yet"));
  CHECK_THROWS_AS(backend.sumPositions({&v, d}, 0, 1, &v), UserError);
}

// bf16 adds casts around every conv and fc phase and nothing else: the
// lowering of a conv layer's forward lists them with their sizes.
TEST_CASE("lowerCuda bf16: the casts around a convolution and an fc layer", "[lowering][cuda]") {
  const Network net = presetNetwork("tiny-cnn");
  int conv = -1, fc = -1;
  for (size_t i = 0; i < net.layers.size(); ++i) {
    if (conv < 0 && net.layers[i].kind == LayerKind::kConv)
      conv = static_cast<int>(i);
    if (fc < 0 && net.layers[i].kind == LayerKind::kFc && net.layers[i].spec.flatten)
      fc = static_cast<int>(i);
  }
  REQUIRE(conv >= 0);
  REQUIRE(fc >= 0);
  const Layer& c = net.layers[static_cast<size_t>(conv)];
  const double n = 3, in = n * c.inShape.c * c.inShape.h * c.inShape.w,
               out = n * c.outShape.c * c.outShape.h * c.outShape.w,
               weights = double(c.spec.filters) * (c.inShape.c / std::max(1, c.spec.groups)) *
                         c.spec.kernelH * c.spec.kernelW;
  auto casts = [](const std::vector<KernelCall>& calls, MemKernel kernel) {
    std::vector<double> units;
    for (const auto& k : calls)
      if (!k.gemm && !k.conv && k.kernel == kernel)
        units.push_back(k.units);
    std::sort(units.begin(), units.end());
    return units;
  };
  const auto sorted = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v;
  };
  const auto fwd = lowerCuda(net, conv, Phase::kFwd, n, 0, MemKernel::kSgd, ElementType::kBf16);
  CHECK(casts(fwd, MemKernel::kCastBf16) == sorted({in, weights}));
  CHECK(casts(fwd, MemKernel::kCastFp32) == std::vector<double>{out});
  const auto bwd =
      lowerCuda(net, conv, Phase::kBwdWeights, n, 0, MemKernel::kSgd, ElementType::kBf16);
  CHECK(casts(bwd, MemKernel::kCastBf16) == sorted({in, out}));
  CHECK(casts(bwd, MemKernel::kCastFp32) == std::vector<double>{weights});
  // fp32 and tf32: none.
  for (auto e : {ElementType::kFp32, ElementType::kTf32})
    CHECK(casts(lowerCuda(net, conv, Phase::kFwd, n, 0, MemKernel::kSgd, e), MemKernel::kCastBf16)
              .empty());
  const Layer& f = net.layers[static_cast<size_t>(fc)];
  const double features = double(f.inShape.c) * f.inShape.h * f.inShape.w;
  const auto data = lowerCuda(net, fc, Phase::kBwdData, n, 0, MemKernel::kSgd, ElementType::kBf16);
  CHECK(casts(data, MemKernel::kCastBf16) ==
        sorted({n * f.outShape.c, double(f.outShape.c) * features}));
  CHECK(casts(data, MemKernel::kCastFp32).empty());  // cuBLAS writes fp32
  CHECK(lowerCuda(net, fc, Phase::kUpdate, n, 0, MemKernel::kSgd, ElementType::kBf16).size() == 1);
}

TEST_CASE("lowerCuda lists the calls the CUDA backend makes: transformer layers no preset has",
          "[lowering][cuda]") {
  const Network net = transformerEdgeNetwork();
  for (int batch : {1, 3}) {
    KernelRecorder recorder(/*recordOnly=*/true);
    CudaBackend backend(recorder);
    const StepCalls recorded = recordStep(net, backend, recorder, batch, false);
    checkAgainst(
        net, recorded, [&](int l, Phase phase) { return lowerCuda(net, l, phase, batch, 0); },
        fmt::format("transformer edge network on cuda, batch {}", batch));
    // CudaBackend::adam reports the adam kernel over each layer's parameters.
    for (Optimizer optimizer : {Optimizer::kAdam, Optimizer::kAdamW}) {
      KernelRecorder adamRecorder(/*recordOnly=*/true);
      CudaBackend adamBackend(adamRecorder);
      const StepCalls withAdam =
          recordStep(net, adamBackend, adamRecorder, batch, false, {}, optimizer);
      checkAgainst(
          net, withAdam,
          [&](int l, Phase phase) { return lowerCuda(net, l, phase, batch, 0, MemKernel::kAdam); },
          fmt::format("transformer edge network on cuda, {}, batch {}", toString(optimizer),
                      batch));
    }
  }
}

// CudaBackend record only: each method reports the cuBLAS / cuDNN calls and
// kernel launches of its device path, from the same arguments, and makes no
// CUDA call, so this runs without a GPU. The transformer presets (tiny-gpt,
// gpt2-small, gpt3-xl) included: attention's strided-batched GEMMs over
// (examples x heads) are listed as one call per loop item, which merges into
// the lowering's count of examples x heads.
TEST_CASE(
    "lowerCuda lists the calls the CUDA backend makes: every preset recorded without a device",
    "[lowering][cuda]") {
  for (const std::string& preset : listPresets(ConfigKind::kNetwork)) {
    const Network net = presetNetwork(preset);
    if (hasRnn(net) || hasAttentionDropout(net) || hasSwinLayers(net) || tooBigToRecord(net))
      continue;  // no backend runs rnn layers (or Swin's)
    // The CUDA backend refuses the layers only the CPU backend has kernels
    // for (vision networks' concat, mul and activations; Llama's layers),
    // naming the first such layer.
    const char* refusal = hasVisionLayers(net)  ? "the cuda backend does not run vision networks'"
                          : hasLlamaLayers(net) ? "the cuda backend does not run Llama's layers yet"
                                                : nullptr;
    if (refusal) {
      KernelRecorder recorder(/*recordOnly=*/true);
      CudaBackend backend(recorder, ElementType::kFp32);
      ModelOptions options;
      options.backend = &backend;
      INFO(preset);
      CHECK_THROWS_WITH(Model(net, options), Catch::Contains(refusal));
      continue;
    }
    for (auto element : {ElementType::kFp32, ElementType::kBf16})
      for (int batch : {1, 3}) {
        KernelRecorder recorder(/*recordOnly=*/true);
        CudaBackend backend(recorder, element);
        std::vector<Slicing> layouts = {{}};
        if (net.modelParallelFrom >= 0)
          layouts.push_back({3, 1});
        for (Slicing slicing : layouts) {
          const StepCalls recorded = recordStep(net, backend, recorder, batch, false, slicing);
          checkAgainst(
              net, recorded,
              [&](int l, Phase phase) {
                return lowerCuda(net, l, phase, batch, outputsOf(net, slicing, l), MemKernel::kSgd,
                                 element);
              },
              fmt::format("{} on cuda {}, batch {}{}", preset, toString(element), batch,
                          slicing.workers > 0 ? fmt::format(", model-parallel rank {} of {}",
                                                            slicing.rank, slicing.workers)
                                              : ""));
        }
      }
  }
}
#endif

}  // namespace
}  // namespace strata::nn

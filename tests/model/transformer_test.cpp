// Transformer layers against closed forms: parameter counts of the presets
// against published figures, FLOPs against Megatron-LM's per-layer formula,
// activation memory against the sequence length, and the loader's mistakes.
#include <fmt/format.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>

#include "helpers.h"
#include "strata/model/error.h"
#include "strata/model/estimate.h"
#include "strata/model/model_flops.h"
#include "strata/model/network_loader.h"

using namespace strata;
using strata::test::flatCluster;
using strata::test::presetNetwork;

namespace {

const Layer& layer(const Network& n, const std::string& name) {
  const int i = n.find(name);
  REQUIRE(i >= 0);
  return n.layers[static_cast<size_t>(i)];
}

Network loadText(const std::string& stem, const std::string& text) {
  return test::loadNetworkText("strata-transformer", stem, text);
}
std::string loadError(const std::string& stem, const std::string& text) {
  return test::networkLoadError("strata-transformer", stem, text);
}

// Forward FLOPs per example of the GEMMs of one block (attention + fc1 +
// fc2) of `net`'s block `b`.
double blockGemmFlops(const Network& net, const std::string& b) {
  return layer(net, b + ".attn").fwdFlops + layer(net, b + ".fc1").fwdFlops +
         layer(net, b + ".fc2").fwdFlops;
}

}  // namespace

TEST_CASE("gpt2-small has the 124,439,808 parameters of GPT-2 small", "[network][transformer]") {
  const auto n = presetNetwork("gpt2-small");
  // wte 50257 x 768 + wpe 1024 x 768.
  CHECK(layer(n, "wte").params == int64_t{50257} * 768 + 1024 * 768);
  // Q, K, V and output projections with biases: 4 d^2 + 4 d.
  CHECK(layer(n, "h.1.attn").params == 4 * 768 * 768 + 4 * 768);  // 2,362,368
  CHECK(layer(n, "h.1.ln1").params == 2 * 768);
  CHECK(layer(n, "h.1.fc1").params == 768 * 3072 + 3072);
  CHECK(layer(n, "h.12.fc2").params == 3072 * 768 + 768);
  // The output layer shares the token table: no parameters of its own.
  CHECK(layer(n, "lm_head").params == 0);
  CHECK(layer(n, "lm_head").spec.tiedTo == n.find("wte"));
  CHECK(layer(n, "lm_head").computesWeightGradient());
  CHECK(n.totalParams() == 124'439'808);
  CHECK(layer(n, "loss").inShape == Shape{50257, 1024, 1});
}

TEST_CASE("gpt3-xl has the 1.3B parameters of GPT-3 XL", "[network][transformer]") {
  const auto n = presetNetwork("gpt3-xl");
  // 24 x (12 d^2 + 13 d) + wte + wpe + ln_f, d = 2048.
  const int64_t d = 2048;
  CHECK(n.totalParams() == 24 * (12 * d * d + 13 * d) + 50257 * d + 2048 * d + 2 * d);
  CHECK(n.totalParams() == 1'315'723'264);
}

TEST_CASE("a transformer block's forward FLOPs are Megatron-LM's 24 s h^2 + 4 s^2 h",
          "[network][transformer]") {
  // Narayanan et al. (SC 2021), section 5.1: per layer, per example (b = 1).
  for (const char* name : {"gpt2-small", "gpt3-xl", "tiny-gpt"}) {
    INFO(name);
    const auto n = presetNetwork(name);
    const double s = n.input.h;
    const double h = layer(n, "wte").outShape.c;
    const double megatron = 24 * s * h * h + 4 * s * s * h;
    CHECK(blockGemmFlops(n, "h.1") == megatron);
    CHECK(blockGemmFlops(n, "h.2") == megatron);
    // The output layer: 2 s h V (Megatron's logit term).
    const double v = layer(n, "wte").spec.vocab;
    CHECK(layer(n, "lm_head").fwdFlops == 2 * s * h * v);
  }
  // gpt2-small: 12 x (24 x 1024 x 768^2 + 4 x 1024^2 x 768) + 2 x 1024 x 768 x 50257.
  const auto g = presetNetwork("gpt2-small");
  double gemms = 0;
  for (const auto& l : g.layers)
    if (l.kind == LayerKind::kAttention || l.kind == LayerKind::kFc)
      gemms += l.fwdFlops;
  CHECK(gemms == 12.0 * 17'716'740'096 + 79'047'426'048);
}

TEST_CASE("model FLOPs, tokens and MFU are Narayanan et al. 2021's, with and without recomputation",
          "[network][transformer]") {
  // Narayanan et al. 2021, eq. 3: 96 B s l h^2 (1 + s / 6h + V / 16 l h)
  // per iteration with full recomputation; without it 72 B s l h^2 (1 +
  // s / 6h + V / 12 l h). Per example (B = 1), gpt2-small: s 1024, l 12,
  // h 768, V 50257.
  const auto g = presetNetwork("gpt2-small");
  const double s = 1024, l = 12, h = 768, v = 50257;
  const auto none = trainFlopsPerExample(g, Recompute::kNone);
  CHECK(none.model == Approx(72 * s * l * h * h * (1 + s / (6 * h) + v / (12 * l * h))));
  CHECK(none.hardware == none.model);
  const auto full = trainFlopsPerExample(g, Recompute::kFull);
  CHECK(full.model == none.model);
  CHECK(full.hardware == Approx(96 * s * l * h * h * (1 + s / (6 * h) + v / (16 * l * h))));
  // Selective: the scores and the context again, 4 s^2 h a layer.
  CHECK(trainFlopsPerExample(g, Recompute::kSelective).hardware ==
        Approx(none.model + l * 4 * s * s * h));
  CHECK(tokensPerExample(g) == 1024);
  CHECK(tokensPerExample(presetNetwork("alexnet")) == 0);
  // Rotary turns are not matmuls: tiny-llama's attention counts its
  // projections and mixing only (d 64, T 32, 2 of 4 kv heads: Q K V 64 + 2 x 32 rows).
  const auto tl = presetNetwork("tiny-llama");
  const auto& attn = tl.layers[static_cast<size_t>(tl.find("h.1.attn"))];
  CHECK(matmulFwdFlops(attn) == 2.0 * (32 * 64 * (128 + 64) + 2 * 32 * 32 * 64));
  // MFU: model FLOPs x examples/s over K x peak.
  StepEstimate e;
  e.scenario.workers = 8;
  e.scenario.options.element = ElementType::kBf16;
  e.throughput = 100;
  Cluster c;
  c.device.peak[static_cast<size_t>(ElementType::kBf16)] = FlopsPerSecond(1e15);
  setUtilisation(e, g, &c);
  CHECK(e.tokensPerSecond == 102400);
  CHECK(e.modelFlopsUtilisation == Approx(none.model * 100 / 8e15));
  setUtilisation(e, g, nullptr);
  CHECK(e.modelFlopsUtilisation == 0);
  CHECK(e.tokensPerSecond == 102400);
}

TEST_CASE("attention: backward is twice forward, split as the executor runs it",
          "[network][transformer]") {
  const auto n = presetNetwork("gpt2-small");
  const auto& a = layer(n, "h.3.attn");
  const double t = 1024, d = 768;
  CHECK(a.fwdFlops == 8 * t * d * d + 4 * t * t * d);
  CHECK(a.bwdDataFlops + a.bwdWeightsFlops == 2 * a.fwdFlops);
  // bwd_data is dx = Wqkv^T dQKV alone: 2 x 3 T d^2.
  CHECK(a.bwdDataFlops == 6 * t * d * d);
  // Saved for backward besides the output: Q, K, V, context (4 T d) and
  // the probabilities of 12 heads (12 T^2).
  CHECK(a.savedElems == 4 * t * d + 12 * t * t);
}

TEST_CASE("activation memory grows with the square of the sequence in attention",
          "[network][transformer]") {
  const auto cl = flatCluster(1e10, 1e-6);
  auto withSequence = [](int t) {
    return loadText(fmt::format("seq{}", t), fmt::format(R"(name: seq{}
input: {{channels: 1, height: {}, width: 1}}
layers:
  - {{name: wte, kind: embedding, vocab: 100, outputs: 64}}
  - {{name: attn, kind: attention, heads: 4}}
  - {{name: head, kind: fc, outputs: 100, flatten: false, tied: wte}}
  - {{name: loss, kind: softmax}}
)",
                                                         t, t));
  };
  Scenario sc;
  sc.strategy = Strategy::kRing;
  sc.workers = 1;
  sc.batchPerWorker = 2;
  const auto m128 = estimateMemory(withSequence(128), cl, sc, 0).activations.value();
  const auto m256 = estimateMemory(withSequence(256), cl, sc, 0).activations.value();
  // Per example, what the backward reads (activationsKept): the ids T
  // (wte's), wte's 64 T (attn's input), attn's 64 T (head's input) + saved
  // Q K V and context 4 x 64 T + scores 4 T^2, and the loss's 100 T
  // probabilities; not head's 100 T logits, which the softmax's backward does
  // not read. Elements of 4 bytes, for 2 examples.
  auto expected = [](double t) {
    return 2 * 4 * (t + 64 * t + 64 * t + 256 * t + 4 * t * t + 100 * t);
  };
  CHECK(m128 == Approx(expected(128)));
  CHECK(m256 == Approx(expected(256)));
}

TEST_CASE("ring, naive and ps price a transformer and owt-* say why they cannot",
          "[network][transformer][strategy]") {
  const auto n = presetNetwork("tiny-gpt");
  CHECK(n.modelParallelFrom == -1);
  CHECK_THAT(n.noModelParallelWhy, Catch::Contains("does not read the layer before it") ||
                                       Catch::Contains("shares its weights"));
  const auto cl = flatCluster(1e10, 1e-6);
  for (auto s : {Strategy::kNaive, Strategy::kRing, Strategy::kPs}) {
    Scenario sc;
    sc.strategy = s;
    sc.workers = 3;
    sc.batchPerWorker = 4;
    const auto e = estimate(n, cl, sc);
    CHECK(e.step.value() > 0);
    // Every gradient crosses the wire: the tied head adds no bytes of its own.
    CHECK(e.workers[0].sent.value() > 0);
  }
  Scenario owt;
  owt.strategy = Strategy::kOwtB;
  owt.workers = 2;
  owt.batchPerWorker = 4;
  try {
    estimate(n, cl, owt);
    FAIL("owt-b ran a network without a model-parallel part");
  } catch (const UserError& e) {
    CHECK_THAT(std::string(e.what()), Catch::Contains("no part that can run model-parallel") &&
                                          Catch::Contains("naive, ring and ps run any network"));
  }
}

TEST_CASE("a residual MLP runs ring (the owt chain rule no longer refuses it)",
          "[network][transformer][strategy]") {
  const auto n = loadText("residual-mlp", R"(name: residual-mlp
input: {channels: 32, height: 1, width: 1}
layers:
  - {name: fc1, kind: fc, outputs: 32}
  - {name: relu1, kind: relu}
  - {name: fc2, kind: fc, outputs: 32}
  - {name: add, kind: add, inputs: [fc1, fc2]}
  - {name: out, kind: fc, outputs: 10}
  - {name: loss, kind: softmax}
)");
  // fc1 and fc2 are followed by the add of two inputs; "out" is the first fc
  // whose rest is a chain.
  CHECK(n.modelParallelFrom == n.find("out"));
  Scenario sc;
  sc.strategy = Strategy::kRing;
  sc.workers = 2;
  sc.batchPerWorker = 8;
  CHECK(estimate(n, flatCluster(1e10, 1e-6), sc).step.value() > 0);
  // Asked for explicitly, a part that is no chain is refused at its key.
  CHECK_THAT(loadError("residual-mp", R"(name: residual-mp
input: {channels: 32, height: 1, width: 1}
model_parallel_from: fc1
layers:
  - {name: fc1, kind: fc, outputs: 32}
  - {name: fc2, kind: fc, outputs: 32}
  - {name: add, kind: add, inputs: [fc1, fc2]}
  - {name: loss, kind: softmax}
)"),
             Catch::Contains("model_parallel_from") && Catch::Contains("must form a chain"));
}

TEST_CASE("transformer layer mistakes name the file, line and key", "[network][transformer]") {
  const std::string head = "input: {channels: 1, height: 8, width: 1}\nlayers:\n";
  // The embedding reads token ids: the network input, one channel.
  CHECK_THAT(loadError("e1",
                       "name: e1\ninput: {channels: 3, height: 8, width: 1}\nlayers:\n"
                       "  - {name: wte, kind: embedding, vocab: 10, outputs: 4}\n"),
             Catch::Contains("e1.yaml:4: layers[0].input") && Catch::Contains("token ids"));
  CHECK_THAT(loadError("e2", "name: e2\n" + head +
                                 "  - {name: wte, kind: embedding, vocab: 10, outputs: 4, "
                                 "positions: 4}\n"),
             Catch::Contains("layers[0].positions") && Catch::Contains("8 positions"));
  CHECK_THAT(loadError("e3", "name: e3\n" + head +
                                 "  - {name: wte, kind: embedding, vocab: 10, outputs: 6}\n"
                                 "  - {name: attn, kind: attention, heads: 4}\n"),
             Catch::Contains("e3.yaml:5: layers[1].heads") && Catch::Contains("divide the 6"));
  CHECK_THAT(loadError("e4", "name: e4\n" + head +
                                 "  - {name: wte, kind: embedding, vocab: 10, outputs: 4}\n"
                                 "  - {name: out, kind: fc, outputs: 11, flatten: false, tied: "
                                 "wte}\n"),
             Catch::Contains("layers[1].tied") && Catch::Contains("10 tokens of 4 features"));
  CHECK_THAT(loadError("e5", "name: e5\n" + head +
                                 "  - {name: wte, kind: embedding, vocab: 10, outputs: 4}\n"
                                 "  - {name: out, kind: fc, outputs: 10, tied: wte}\n"),
             Catch::Contains("layers[1].tied") && Catch::Contains("flatten: false"));
  CHECK_THAT(loadError("e6", "name: e6\n" + head +
                                 "  - {name: wte, kind: embedding, vocab: 10, outputs: 4}\n"
                                 "  - {name: out, kind: fc, outputs: 10, flatten: false, tied: "
                                 "nothing}\n"),
             Catch::Contains("'nothing' is not an embedding layer defined earlier"));
  CHECK_THAT(loadError("e7", "name: e7\n" + head +
                                 "  - {name: wte, kind: embedding, vocab: 10, outputs: 4}\n"
                                 "  - {name: h, kind: transformer, heads: 2, hidden: 8, "
                                 "dropout: 1.5}\n"),
             Catch::Contains("layers[1].dropout") && Catch::Contains("[0, 1)"));
  CHECK_THAT(loadError("e8", "name: e8\n" + head +
                                 "  - {name: wte, kind: embedding, vocab: 10, outputs: 4}\n"
                                 "  - {name: h, kind: transformer, heads: 2, hidden: 8, "
                                 "repeat: 100000000}\n"),
             Catch::Contains("layers[1].repeat"));
}

TEST_CASE("a transformer block expands to the pre-LN layout with its residuals",
          "[network][transformer]") {
  const auto n = presetNetwork("tiny-gpt");
  // wte, then per block ln1 attn drop1 add1 ln2 fc1 gelu fc2 drop2 add2, then
  // ln_f, lm_head, loss.
  REQUIRE(n.layers.size() == 1 + 2 * 10 + 3);
  const auto& add1 = layer(n, "h.2.add1");
  REQUIRE(add1.inputs.size() == 2);
  CHECK(add1.inputs[0] == n.find("h.1.add2"));  // the block's input
  CHECK(add1.inputs[1] == n.find("h.2.drop1"));
  const auto& add2 = layer(n, "h.1.add2");
  CHECK(add2.inputs[0] == n.find("h.1.add1"));
  CHECK(add2.inputs[1] == n.find("h.1.drop2"));
  CHECK(layer(n, "h.1.ln1").inputs[0] == n.find("wte"));
  CHECK(layer(n, "h.1.add1").inputs[0] == n.find("wte"));
  CHECK(layer(n, "h.1.fc2").outShape == Shape{64, 32, 1});  // back to the width
  CHECK(layer(n, "h.1.fc1").outShape == Shape{256, 32, 1});
  CHECK(layer(n, "h.1.drop1").spec.dropoutRate == 0.1);
  CHECK(layer(n, "h.1.attn").spec.causal);
}

namespace {

// One attention layer of T = 64 positions, d = 32 features, 4 heads (dh 8).
Network oneAttention(const std::string& stem, const std::string& keys) {
  return loadText(stem, fmt::format(R"(name: {}
input: {{channels: 1, height: 64, width: 1}}
layers:
  - {{name: wte, kind: embedding, vocab: 16, outputs: 32}}
  - {{name: attn, kind: attention, heads: 4{}}}
  - {{name: head, kind: fc, outputs: 16, flatten: false, tied: wte}}
  - {{name: loss, kind: softmax}}
)",
                                    stem, keys));
}

}  // namespace

TEST_CASE("attention: projections at attention's efficiency, the core at attention_core's",
          "[network][transformer][attention]") {
  const auto net = oneAttention("core", ", fused: true");
  const auto& a = layer(net, "attn");
  DeviceSpec d = flatCluster(1e10, 1e-6).device;  // 1 TFLOP/s, 100 GB/s
  d.efficiency[static_cast<size_t>(LayerKind::kAttention)] = 0.5;
  const FlopsPerSecond peak(1e12);
  // Per example: projections 2 T d (3d + d) = 524,288 FLOPs, the core
  // 2 x 2 T^2 d = 524,288; bwd_weights: the projections' 2 T d 4d + the
  // weight gradient 2 T d^2 = 655,360, the core's twice forward 1,048,576.
  CHECK(a.fwdFlops == 2 * 64.0 * 32 * 128 + 4 * 64.0 * 64 * 32);
  CHECK(a.fwdCoreFlops == 524288);
  CHECK(a.bwdWeightsCoreFlops == 1048576);
  CHECK(a.bwdWeightsFlops - a.bwdWeightsCoreFlops == 655360);
  auto time = [&](Phase p) { return layerTime(a, p, 1, 1, d, peak, ElementType::kFp32).value(); };
  // Without attention_core the whole layer runs at attention's 0.5.
  CHECK(time(Phase::kFwd) == Approx(1048576 / 0.5e12).epsilon(1e-12));
  CHECK(d.attentionCoreEfficiency(ElementType::kFp32) == 0.5);
  d.attentionCore[0] = 0.25;
  CHECK(time(Phase::kFwd) == Approx(524288 / 0.5e12 + 524288 / 0.25e12).epsilon(1e-12));
  CHECK(time(Phase::kBwdWeights) == Approx(655360 / 0.5e12 + 1048576 / 0.25e12).epsilon(1e-12));
  // bwd_data holds no core: dx = Wqkv^T dQKV, 2 T d 3d.
  CHECK(time(Phase::kBwdData) == Approx(2 * 64.0 * 32 * 96 / 0.5e12).epsilon(1e-12));
  // A type without a table of its own takes fp32's core figure; one with a
  // table takes its own attention_core, else its own attention.
  d.peak[static_cast<size_t>(ElementType::kFp16)] = FlopsPerSecond(4e12);
  CHECK(d.attentionCoreEfficiency(ElementType::kFp16) == 0.25);
  d.hasEfficiency[static_cast<size_t>(ElementType::kFp16)] = true;
  d.efficiencyByElement[static_cast<size_t>(ElementType::kFp16)].fill(0.8);
  CHECK(d.attentionCoreEfficiency(ElementType::kFp16) == 0.8);
  d.attentionCore[static_cast<size_t>(ElementType::kFp16)] = 0.2;
  CHECK(d.attentionCoreEfficiency(ElementType::kFp16) == 0.2);
  CHECK(d.efficiencyFor(LayerKind::kAttention, ElementType::kFp16) == 0.8);
}

TEST_CASE(
    "attention: an unfused core's score traffic adds to the GEMMs' time, a fused one has none",
    "[network][transformer][attention]") {
  DeviceSpec d = flatCluster(1e10, 1e-6).device;  // 1 TFLOP/s, 100 GB/s
  d.efficiency[static_cast<size_t>(LayerKind::kAttention)] = 0.5;
  const FlopsPerSecond peak(1e12);
  const double scores = 4 * 64.0 * 64;  // heads x T^2
  // The GEMMs' time is above their operands' (x, Q K V, context, output,
  // the scores the QK^T GEMM writes, the weights: 1.3 us forward).
  const double gemmsFwd = 1048576 / 0.5e12, gemmsBwd = (655360 + 1048576) / 0.5e12;
  auto time = [&](const Network& n, Phase p) {
    return layerTime(layer(n, "attn"), p, 1, 1, d, peak, ElementType::kFp32).value();
  };
  // Fused (FlashAttention): no scores in memory; the GEMMs decide.
  const auto fused = oneAttention("fused", ", fused: true");
  CHECK(layer(fused, "attn").fwdScoreElems == 0);
  CHECK(time(fused, Phase::kFwd) == Approx(gemmsFwd).epsilon(1e-12));
  CHECK(time(fused, Phase::kBwdWeights) == Approx(gemmsBwd).epsilon(1e-12));
  // Saved: Q K V (3 T d), the context (T d) and a log-sum-exp per head and
  // query (4 T), no probabilities.
  CHECK(layer(fused, "attn").savedElems == 4 * 64.0 * 32 + 4 * 64);
  // Unfused (the default): softmax reads the scores and writes the
  // probabilities (2 per score, 4 bytes each) after the QK^T GEMM; backward
  // it reads P and dP and writes dS (3). At 100 GB/s, added.
  const auto unfused = oneAttention("unfused", "");
  CHECK(layer(unfused, "attn").fwdScoreElems == 2 * scores);
  CHECK(time(unfused, Phase::kFwd) == Approx(gemmsFwd + 2 * scores * 4 / 1e11).epsilon(1e-12));
  CHECK(time(unfused, Phase::kBwdWeights) ==
        Approx(gemmsBwd + 3 * scores * 4 / 1e11).epsilon(1e-12));
  CHECK(layer(unfused, "attn").savedElems == 4 * 64.0 * 32 + scores);
  // Attention dropout: 2 more per score and a 1-byte mask each way (read
  // P, write P' and the mask; backward read dP' and the mask, write dP);
  // the dropped probabilities are kept too.
  const auto dropped = oneAttention("dropped", ", attention_dropout: 0.1");
  CHECK(time(dropped, Phase::kFwd) ==
        Approx(gemmsFwd + (4 * scores * 4 + scores) / 1e11).epsilon(1e-12));
  CHECK(time(dropped, Phase::kBwdWeights) ==
        Approx(gemmsBwd + (5 * scores * 4 + scores) / 1e11).epsilon(1e-12));
  CHECK(layer(dropped, "attn").savedElems == 4 * 64.0 * 32 + 2 * scores);
  CHECK(layer(dropped, "attn").scoreMaskBytes == scores);
  // A fused core drops in the kernel: nothing in memory either.
  const auto fusedDropped = oneAttention("fdrop", ", fused: true, attention_dropout: 0.1");
  CHECK(time(fusedDropped, Phase::kFwd) == Approx(gemmsFwd).epsilon(1e-12));
  // The transformer block passes both keys to its attention.
  const auto block = loadText("block", R"(name: block
input: {channels: 1, height: 64, width: 1}
layers:
  - {name: wte, kind: embedding, vocab: 16, outputs: 32}
  - {name: h, kind: transformer, heads: 4, hidden: 64, attention_dropout: 0.1, fused: true}
)");
  CHECK(layer(block, "h.attn").spec.fusedCore);
  CHECK(layer(block, "h.attn").spec.attentionDropout == 0.1);
}

TEST_CASE("attention core key mistakes name the file, line and key",
          "[network][transformer][attention]") {
  const std::string head =
      "input: {channels: 1, height: 8, width: 1}\nlayers:\n"
      "  - {name: wte, kind: embedding, vocab: 10, outputs: 4}\n";
  CHECK_THAT(
      loadError("a1", "name: a1\n" + head +
                          "  - {name: attn, kind: attention, heads: 2, "
                          "attention_dropout: -0.1}\n"),
      Catch::Contains("a1.yaml:5: layers[1].attention_dropout") && Catch::Contains("[0, 1)"));
  CHECK_THAT(loadError("a2", "name: a2\n" + head +
                                 "  - {name: h, kind: transformer, heads: 2, hidden: 8, "
                                 "fused: 3}\n"),
             Catch::Contains("a2.yaml:5: layers[1].fused"));
  CHECK_THAT(loadError("a3", "name: a3\n" + head +
                                 "  - {name: h, kind: llama, heads: 2, hidden: 8, "
                                 "attention_dropout: 1}\n"),
             Catch::Contains("a3.yaml:5: layers[1].attention_dropout"));
}

TEST_CASE("selene-a100 prices the attention core apart from the projections",
          "[network][transformer][attention]") {
  const auto d = test::presetCluster("selene-a100").device;
  CHECK(d.efficiencyFor(LayerKind::kAttention, ElementType::kFp16) == 0.87);
  CHECK(d.attentionCoreEfficiency(ElementType::kFp16) == 0.276);
  CHECK(d.attentionCoreEfficiency(ElementType::kBf16) == 0.276);
  // fp32 has no attention_core: its attention, which is fc's.
  CHECK(d.attentionCoreEfficiency(ElementType::kFp32) == 0.95);
}

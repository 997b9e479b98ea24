// Llama's layers against closed forms: the presets' parameter counts against
// the published ones, rmsnorm, swiglu and grouped-query attention with rotary
// positions on a block small enough to count by hand, the llama block's
// expansion, and the loader's mistakes.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>

#include "helpers.h"
#include "strata/model/error.h"
#include "strata/model/lowering.h"
#include "strata/model/network_loader.h"

using namespace strata;
using strata::test::presetNetwork;

namespace {

const Layer& layer(const Network& n, const std::string& name) {
  const int i = n.find(name);
  REQUIRE(i >= 0);
  return n.layers[static_cast<size_t>(i)];
}

Network loadText(const std::string& stem, const std::string& text) {
  return test::loadNetworkText("strata-llama", stem, text);
}
std::string loadError(const std::string& stem, const std::string& text) {
  return test::networkLoadError("strata-llama", stem, text);
}

const std::string kHead = "input: {channels: 1, height: 4, width: 1}\nlayers:\n";

}  // namespace

TEST_CASE("the Llama presets have their published parameter counts", "[network][llama]") {
  // Touvron et al. 2023 and the Hugging Face configs (each preset's header
  // writes the sum out).
  CHECK(presetNetwork("llama2-7b").totalParams() == 6'738'415'616);
  CHECK(presetNetwork("llama3-8b").totalParams() == 8'030'261'248);
  CHECK(presetNetwork("llama2-70b").totalParams() == 68'976'648'192);
  CHECK(presetNetwork("tiny-llama").totalParams() == 158'016);
  const auto n = presetNetwork("llama3-8b");
  // Grouped keys and values: Q and O 4096^2 each, K and V 4096 x 1024 each.
  CHECK(layer(n, "h.1.attn").params == 2 * 4096 * 4096 + 2 * 4096 * 1024);
  CHECK(layer(n, "h.1.attn").kvHeads() == 8);
  CHECK(layer(n, "h.1.attn").spec.rotaryBase == 500000);
  CHECK(layer(n, "h.32.gate_up").params == int64_t{4096} * 2 * 14336);
  CHECK(layer(n, "h.32.down").params == int64_t{14336} * 4096);
  CHECK(layer(n, "h.1.attn_norm").params == 4096);
  CHECK(layer(n, "embed").params == int64_t{128256} * 4096);
  CHECK(layer(n, "lm_head").params == int64_t{4096} * 128256);  // untied
  CHECK(layer(n, "lm_head").spec.tiedTo < 0);
}

TEST_CASE("a small Llama block by hand: shapes, parameters, FLOPs and elements",
          "[network][llama]") {
  // d = 8 features, T = 4 positions, 4 query heads of dh = 2 over 2
  // key/value heads (kv = 4 rows of K and of V), MLP f = 6.
  const auto n = loadText("small", "name: small\n" + kHead +
                                       "  - {name: embed, kind: embedding, vocab: 10, outputs: 8}\n"
                                       "  - {name: h, kind: llama, heads: 4, kv_heads: 2, "
                                       "hidden: 6, eps: 1e-6, rotary_base: 100}\n"
                                       "  - {name: norm, kind: rmsnorm}\n"
                                       "  - {name: lm_head, kind: fc, outputs: 10, flatten: "
                                       "false, bias: false}\n"
                                       "  - {name: loss, kind: softmax}\n");
  REQUIRE(n.layers.size() == 1 + 8 + 3);
  const char* names[] = {"h.attn_norm", "h.attn",   "h.add1", "h.mlp_norm",
                         "h.gate_up",   "h.swiglu", "h.down", "h.add2"};
  for (int i = 0; i < 8; ++i)
    CHECK(n.layers[static_cast<size_t>(i + 1)].name == names[i]);
  CHECK(layer(n, "h.add1").inputs == std::vector<int>{n.find("embed"), n.find("h.attn")});
  CHECK(layer(n, "h.add2").inputs == std::vector<int>{n.find("h.add1"), n.find("h.down")});

  // rmsnorm over 8 x 4: a gain per channel; 4 / 7 / 3 FLOPs per element.
  const auto& norm = layer(n, "h.attn_norm");
  CHECK(norm.params == 8);
  CHECK(norm.spec.eps == 1e-6);
  CHECK(layer(n, "norm").spec.eps == 1e-5);  // the default
  CHECK(norm.fwdFlops == 4 * 32);
  CHECK(norm.bwdDataFlops == 7 * 32);
  CHECK(norm.bwdWeightsFlops == 3 * 32);

  // Attention: rows = d + 2 kv = 16 of Q, K, V; Wqkv 16 x 8 and Wo 8 x 8,
  // no biases: 192 parameters.
  const auto& a = layer(n, "h.attn");
  CHECK(a.kvHeads() == 2);
  CHECK(a.qkvRows() == 16);
  CHECK(a.spec.rotary);
  CHECK(a.spec.rotaryBase == 100);
  CHECK_FALSE(a.spec.bias);
  CHECK(a.params == 192);
  // Projections T d (rows + d) = 4 x 8 x 24 = 768 MACs; scores and context
  // 2 T^2 d = 256; rotary 3 FLOPs on each of T (d + kv) = 48 elements.
  CHECK(a.fwdFlops == 2 * (768 + 256) + 3 * 48);                             // 2192
  CHECK(a.bwdDataFlops == 2 * 4 * 8 * 16);                                   // dx = Wqkv^T dQKV
  CHECK(a.bwdWeightsFlops == 2 * (768 + 2 * 256) + 2 * 4 * 8 * 8 + 3 * 48);  // 3216
  CHECK(a.bwdDataFlops + a.bwdWeightsFlops == 2 * a.fwdFlops - 3 * 48);
  // x, context, y (3 T d = 96), QKV (T rows = 64), Q and K turned (2 x 48),
  // the scores written (H T^2 = 64); the softmax's read and write of them
  // are kernels of their own, apart (2 H T^2).
  CHECK(a.fwdElems == 96 + 64 + 96 + 64);
  CHECK(a.fwdScoreElems == 2 * 64);
  CHECK(a.bwdDataElems == 64 + 64);
  CHECK(a.savedElems == 64 + 32 + 64);

  // The MLP: gate and up as one fc of 2f = 12 rows, swiglu to f = 6, down.
  CHECK(layer(n, "h.gate_up").params == 8 * 12);
  CHECK(layer(n, "h.gate_up").outShape == Shape{12, 4, 1});
  const auto& g = layer(n, "h.swiglu");
  CHECK(g.outShape == Shape{6, 4, 1});
  CHECK(g.params == 0);
  CHECK(g.fwdFlops == 5 * 24);
  CHECK(g.bwdDataFlops == 11 * 24);
  CHECK(g.fwdElems == 48 + 24);
  CHECK(layer(n, "h.down").params == 6 * 8);
  CHECK(layer(n, "h.down").outShape == Shape{8, 4, 1});
  // Block: 8 + 192 + 8 + 96 + 48; embed 80 (no position table), head 80.
  CHECK(n.totalParams() == 80 + 352 + 8 + 80);
}

TEST_CASE("without kv_heads and rotary, attention is multi-head attention as before",
          "[network][llama]") {
  const auto n = loadText("mha", "name: mha\n" + kHead +
                                     "  - {name: embed, kind: embedding, vocab: 10, outputs: 8}\n"
                                     "  - {name: attn, kind: attention, heads: 4, bias: false}\n"
                                     "  - {name: gqa, kind: attention, heads: 4, kv_heads: 4}\n");
  const auto& a = layer(n, "attn");
  const double t = 4, d = 8;
  CHECK(a.kvHeads() == 4);
  CHECK(a.qkvRows() == 24);
  CHECK(a.params == 4 * 8 * 8);
  CHECK(a.fwdFlops == 8 * t * d * d + 4 * t * t * d);
  CHECK(a.bwdDataFlops == 6 * t * d * d);
  CHECK(a.savedElems == 4 * t * d + 4 * t * t);
  CHECK(layer(n, "gqa").params == 4 * 8 * 8 + 4 * 8);
}

TEST_CASE("llama2-7b's block FLOPs: Megatron-LM's attention and a three-matrix MLP",
          "[network][llama]") {
  const auto n = presetNetwork("llama2-7b");
  const double s = 4096, h = 4096, f = 11008;
  // Narayanan et al. (SC 2021) section 5.1's attention, 8 s h^2 + 4 s^2 h,
  // plus rotary positions on Q and K (3 FLOPs on each of 2 s h elements).
  CHECK(layer(n, "h.7.attn").fwdFlops == 8 * s * h * h + 4 * s * s * h + 3 * 2 * s * h);
  // SwiGLU's MLP: three h x f matrices, 6 s h f.
  CHECK(layer(n, "h.7.gate_up").fwdFlops + layer(n, "h.7.down").fwdFlops == 6 * s * h * f);
  CHECK(layer(n, "lm_head").fwdFlops == 2 * s * h * 32000);
}

TEST_CASE("lowerCpu: grouped keys and values and rotary positions in attention's calls",
          "[network][llama][lowering]") {
  const auto n = presetNetwork("tiny-llama");
  const int i = n.find("h.1.attn");
  // d = 64, T = 32, 4 heads of 16, 2 key/value heads: QKV has 64 + 2 x 32 rows.
  bool projection = false, rotary = false;
  for (const auto& c : lowerCpu(n, i, Phase::kFwd, 3, 0, MemKernel::kSgd)) {
    if (c.gemm && c.op == GemmOp::kNN && c.m == 128 && c.n == 32 && c.k == 64 && c.count == 3)
      projection = true;
    if (!c.gemm && c.kernel == MemKernel::kRotary) {
      rotary = true;
      CHECK(c.units == 96.0 * 32);  // Q's 64 rows and K's 32, each of T = 32
      CHECK(c.count == 3);
    }
  }
  CHECK(projection);
  CHECK(rotary);
  bool back = false;
  for (const auto& c : lowerCpu(n, i, Phase::kBwdData, 3, 0, MemKernel::kSgd))
    back = back || (c.gemm && c.op == GemmOp::kTN && c.m == 64 && c.k == 128);
  CHECK(back);
}

TEST_CASE("Llama layer mistakes name the file, line and key", "[network][llama]") {
  const std::string embed = "  - {name: embed, kind: embedding, vocab: 10, outputs: 8}\n";
  CHECK_THAT(loadError("l1", "name: l1\n" + kHead + embed +
                                 "  - {name: attn, kind: attention, heads: 4, kv_heads: 3}\n"),
             Catch::Contains("l1.yaml:5: layers[1].kv_heads") &&
                 Catch::Contains("kv_heads 3 must divide heads 4"));
  CHECK_THAT(loadError("l2", "name: l2\n" + kHead + embed +
                                 "  - {name: h, kind: llama, heads: 4, kv_heads: 8, hidden: 6}\n"),
             Catch::Contains("l2.yaml:5: layers[1].kv_heads") &&
                 Catch::Contains("kv_heads 8 must divide heads 4"));
  // 8 channels over 8 heads: one feature per head, which rotary cannot pair.
  CHECK_THAT(loadError("l3", "name: l3\n" + kHead + embed +
                                 "  - {name: attn, kind: attention, heads: 8, rotary: true}\n"),
             Catch::Contains("l3.yaml:5: layers[1].rotary") && Catch::Contains("must be even"));
  CHECK_THAT(loadError("l4", "name: l4\n" + kHead + embed +
                                 "  - {name: up, kind: fc, outputs: 5, flatten: false}\n"
                                 "  - {name: gate, kind: swiglu}\n"),
             Catch::Contains("l4.yaml:6: layers[2].input") && Catch::Contains("5 channels is odd"));
  CHECK_THAT(
      loadError("l5", "name: l5\n" + kHead + embed + "  - {name: n, kind: rmsnorm, eps: 0}\n"),
      Catch::Contains("l5.yaml:5") && Catch::Contains("eps") &&
          Catch::Contains("must be in (0, 1)"));
  CHECK_THAT(loadError("l6", "name: l6\n" + kHead + embed +
                                 "  - {name: attn, kind: attention, heads: 4, rotary_base: 100}\n"),
             Catch::Contains("l6.yaml:5") && Catch::Contains("rotary_base") &&
                 Catch::Contains("only with rotary: true"));
  CHECK_THAT(loadError("l7", "name: l7\n" + kHead + embed +
                                 "  - {name: h, kind: llama, heads: 4, hidden: 6, dropout: 0.1}\n"),
             Catch::Contains("l7.yaml:5") && Catch::Contains("dropout"));
  CHECK_THAT(loadError("l8", "name: l8\n" + kHead + embed +
                                 "  - {name: h, kind: llama, heads: 4, hidden: 6, repeat: "
                                 "100000000}\n"),
             Catch::Contains("layers[1].repeat"));
  CHECK_THAT(loadError("l9", "name: l9\n" + kHead + embed +
                                 "  - {name: h, kind: llama, heads: 4, hidden: 6, rotary_base: "
                                 "0.5}\n"),
             Catch::Contains("rotary_base") && Catch::Contains("must be over 1"));
  CHECK_THAT(loadError("l10", "name: l10\n" + kHead + embed + "  - {name: h, kind: lama}\n"),
             Catch::Contains("rmsnorm") && Catch::Contains("swiglu") && Catch::Contains("llama"));
  CHECK_THAT(
      loadError("l11", "name: l11\n" + kHead + embed + "  - {name: h, kind: llama, hidden: 6}\n"),
      Catch::Contains("l11.yaml:5") && Catch::Contains("heads"));
}

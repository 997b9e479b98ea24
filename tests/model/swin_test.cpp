// Swin's layers in YAML (docs/configs.md, docs/networks.md): attention in
// windows (window, shift, position_bias, cosine), MaxViT's grid attention
// (grid), space_to_depth (patch merging) and the transformer block's
// alternating shifts and post-norm;
// shapes, parameters, FLOPs and elements by hand, the presets' counts
// against torchvision's, and each mistake one error naming its key.
#include <catch2/catch.hpp>

#include "helpers.h"
#include "strata/model/error.h"
#include "strata/model/layer_kinds.h"
#include "strata/model/lowering.h"
#include "strata/model/model_flops.h"
#include "strata/model/tensor_parallel.h"

using namespace strata;

namespace {

Network loadText(const std::string& stem, const std::string& text) {
  return test::loadNetworkText("strata-swin", stem, "name: " + stem + "\n" + text);
}
std::string loadError(const std::string& stem, const std::string& text) {
  return test::networkLoadError("strata-swin", stem, "name: " + stem + "\n" + text);
}

const Layer& layer(const Network& n, const std::string& name) {
  const int i = n.find(name);
  REQUIRE(i >= 0);
  return n.layers[static_cast<size_t>(i)];
}

// A 6 x 6 grid of 8 channels.
const std::string kGrid = "input: {channels: 8, height: 6, width: 6}\nlayers:\n";

std::string attention(const std::string& keys, bool causal = false) {
  return kGrid +
         "  - {name: attn, kind: attention, heads: 2, causal: " + (causal ? "true" : "false") +
         (keys.empty() ? "" : ", " + keys) + "}\n  - {name: loss, kind: softmax}\n";
}

}  // namespace

TEST_CASE("attention in shifted windows with a relative position bias, by hand",
          "[network][swin]") {
  // 6 x 6 positions in windows of 4: padded to 8 x 8 = 4 windows of 16; the
  // padded grid spans more than one window, so the shift of 2 stays.
  const auto n = loadText("swin", attention("window: 4, shift: 2, position_bias: table"));
  const Layer& a = layer(n, "attn");
  CHECK(a.outShape == Shape{8, 6, 6});
  CHECK(a.attentionPositions() == 64);
  CHECK(a.attentionSpan() == 16);
  CHECK(a.attentionWindows() == 4);
  CHECK(a.shiftH() == 2);
  CHECK(a.shiftW() == 2);
  // 4 d^2 + 4 d weights and biases, and (2 x 4 - 1)^2 = 49 offsets x 2 heads.
  CHECK(a.params == 4 * 64 + 4 * 8 + 49 * 2);
  // Projections over P = 64 positions: 64 x 8 x (24 + 8) = 16,384 MACs;
  // scores and context 2 x 64 x 16 x 8 = 16,384 MACs; 2 heads x 64 x 16 =
  // 2,048 scores, each with the bias and the shift's mask added.
  CHECK(a.fwdFlops == 2.0 * (16384 + 16384) + 2 * 2048);
  CHECK(a.bwdDataFlops == 2.0 * 64 * 8 * 24);
  // Twice the GEMMs, dC = Wo^T dy, and dS summed into the bias table.
  CHECK(a.bwdWeightsFlops == 2.0 * (16384 + 2 * 16384) + 2.0 * 64 * 64 + 2048);
  CHECK(a.fwdCoreFlops == 2.0 * 16384);
  CHECK(a.bwdWeightsCoreFlops == 4.0 * 16384);
  // x (36 x 8 = 288) read and the output written, the context (64 x 8) and
  // Q K V (64 x 24) over the padded grid, the scores written; the windows'
  // copies one way: x read, the padded windows written, a roll of the grid
  // (288 + 512 + 2 x 288 = 1,376), and the same back.
  const double oneWay = 288 + 512 + 2 * 288;
  CHECK(a.fwdElems == 2 * 288 + 512 + 1536 + 2048 + 2 * oneWay);
  CHECK(a.bwdWeightsElems == 2 * (2 * 288 + 512 + 1536 + 2048) + oneWay);
  CHECK(a.bwdDataElems == 1536 + 2 * 288 + oneWay);
  // Softmax's read and write, and a read and write per add (bias, mask);
  // backward's softmax and the bias gradient's read of dS.
  CHECK(a.fwdScoreElems == 2 * 2048 + 2 * (2 * 2048));
  CHECK(a.bwdWeightsScoreElems == 3 * 2048 + 2048);
  CHECK(a.savedElems == 1536 + 512 + 2048);
  // Model FLOPs: the GEMMs alone.
  CHECK(matmulFwdFlops(a) == 2.0 * (16384 + 16384));
  // Selective recomputation reruns the core: 4 P M^2 d of 4 P M^2 d + 8 P d^2.
  const double core = 4.0 * 64 * 16 * 8;
  CHECK(attentionCoreShare(a) == Approx(core / (core + 8.0 * 64 * 64)));
}

TEST_CASE("the lowering of attention in windows holds the layer's GEMMs and score adds",
          "[network][swin][lowering]") {
  const auto n = loadText("swin", attention("window: 4, shift: 2, position_bias: table"));
  const int a = n.find("attn");
  const Layer& l = n.layers[static_cast<size_t>(a)];
  auto sums = [&](Phase phase, MemKernel kernel) {
    double flops = 0, units = 0;
    for (const auto& c : lowerCpu(n, a, phase, 3, 0)) {
      if (c.gemm)
        flops += 2.0 * double(c.m) * double(c.n) * double(c.k) * c.count;
      else if (c.kernel == kernel)
        units += c.units * c.count;
    }
    return std::pair{flops, units};
  };
  // 3 examples: the GEMMs of fwdFlops (without the 2 x 2,048 score adds),
  // one add over them; 4 windows x 2 heads x 3 examples of 16 x 16 scores.
  const auto [fwd, adds] = sums(Phase::kFwd, MemKernel::kAdd);
  CHECK(fwd == 3 * (l.fwdFlops - 2 * 2048));
  CHECK(adds == 3.0 * 2 * 2048);
  const auto [bwd, reduced] = sums(Phase::kBwdWeights, MemKernel::kReduce);
  CHECK(bwd == 3 * (l.bwdWeightsFlops - 2048));
  CHECK(reduced == 3.0 * 2048);  // dS summed into the table
  CHECK(sums(Phase::kBwdData, MemKernel::kCopy).first == 3 * l.bwdDataFlops);
  // The windows' copies: into them and back forward (the padded 64 x 8 and
  // a roll of 36 x 8 each way), once in each backward phase.
  CHECK(sums(Phase::kFwd, MemKernel::kCopy).second == 3.0 * 2 * (512 + 288));
  CHECK(sums(Phase::kBwdData, MemKernel::kCopy).second == 3.0 * (512 + 288));
}

TEST_CASE("grid attention over strided positions with a relative position bias, by hand",
          "[network][maxvit]") {
  // 6 x 6 positions in grids of 3 (MaxViT): 4 grids of 9 positions, each 2
  // apart; no padding, no shift.
  const auto n = loadText("maxvit", attention("grid: 3, position_bias: table"));
  const Layer& a = layer(n, "attn");
  CHECK(a.outShape == Shape{8, 6, 6});
  CHECK(a.partitionSide() == 3);
  CHECK(a.attentionPositions() == 36);
  CHECK(a.attentionSpan() == 9);
  CHECK(a.attentionWindows() == 4);
  CHECK(a.shiftH() == 0);
  // 4 d^2 + 4 d, and (2 x 3 - 1)^2 = 25 offsets x 2 heads.
  CHECK(a.params == 4 * 64 + 4 * 8 + 25 * 2);
  // Projections 36 x 8 x 32 = 9,216 MACs; scores and context 2 x 36 x 9 x 8
  // = 5,184 MACs; 2 heads x 36 x 9 = 648 scores, each with the bias added.
  CHECK(a.fwdFlops == 2.0 * (9216 + 5184) + 648);
  CHECK(a.bwdWeightsFlops == 2.0 * (9216 + 2 * 5184) + 2.0 * 36 * 64 + 648);
  CHECK(matmulFwdFlops(a) == 2.0 * (9216 + 5184));
  // The grids gathered and put back: x (288) read and 288 written each way.
  const double oneWay = 288 + 288;
  CHECK(a.fwdElems == 2 * 288 + 288 + 36 * 24 + 648 + 2 * oneWay);
  CHECK(a.bwdDataElems == 36 * 24 + 2 * 288 + oneWay);
  const int at = n.find("attn");
  double copied = 0;
  for (const auto& c : lowerCpu(n, at, Phase::kFwd, 3, 0))
    if (!c.gemm && c.kernel == MemKernel::kCopy)
      copied += c.units * c.count;
  CHECK(copied == 3.0 * 2 * 288);
  // The same costs as windows of 3, which cut the grid into as many parts.
  const auto w = loadText("maxvit", attention("window: 3, position_bias: table"));
  const Layer& b = layer(w, "attn");
  CHECK(a.fwdFlops == b.fwdFlops);
  CHECK(a.params == b.params);
  CHECK(a.fwdElems == b.fwdElems);
}

TEST_CASE("a shift is dropped where one window covers the grid, as torchvision drops it",
          "[network][swin]") {
  // 7 x 7 in windows of 7 (Swin-T's last stage): one window, no shift, no
  // mask, no roll; the same costs as without the shift.
  const std::string grid = "input: {channels: 8, height: 7, width: 7}\nlayers:\n";
  auto net = [&](const std::string& keys) {
    return loadText("last", grid + "  - {name: attn, kind: attention, heads: 2, causal: false, " +
                                keys + "}\n  - {name: loss, kind: softmax}\n");
  };
  const Layer shifted = layer(net("window: 7, shift: 3"), "attn");
  const Layer plain = layer(net("window: 7"), "attn");
  CHECK(shifted.shiftH() == 0);
  CHECK(shifted.shiftW() == 0);
  CHECK(shifted.fwdFlops == plain.fwdFlops);
  CHECK(shifted.fwdElems == plain.fwdElems);
  CHECK(shifted.fwdScoreElems == plain.fwdScoreElems);
  // One window of all 49 positions scores what global attention scores.
  const Layer global = layer(net("window: 0"), "attn");
  CHECK(plain.fwdFlops == global.fwdFlops);
  CHECK(plain.fwdScoreElems == global.fwdScoreElems);
  CHECK(plain.fwdElems == global.fwdElems + 2 * (49 * 8 + 49 * 8));  // the windows' copies
  // A 7 x 14 grid: the shift stays along W alone.
  const auto wide = loadText("wide",
                             "input: {channels: 8, height: 7, width: 14}\nlayers:\n"
                             "  - {name: attn, kind: attention, heads: 2, causal: false, "
                             "window: 7, shift: 3}\n  - {name: loss, kind: softmax}\n");
  CHECK(layer(wide, "attn").shiftH() == 0);
  CHECK(layer(wide, "attn").shiftW() == 3);
}

TEST_CASE("Swin V2's continuous position bias and cosine attention, by hand", "[network][swin]") {
  const auto n = loadText("v2", attention("window: 6, position_bias: mlp, cosine: true"));
  const Layer& a = layer(n, "attn");
  // One window of 36 positions; Linear(2, 512) with bias, Linear(512, 2)
  // without; a logit scale per head.
  CHECK(a.attentionWindows() == 1);
  CHECK(a.params == 4 * 64 + 4 * 8 + (2 * 512 + 512) + 512 * 2 + 2);
  // Q and K normalised (3 per element of 36 x 16), scores scaled and biased
  // (2 x 2 heads x 36 x 36).
  const double gemms = 2.0 * (36 * 8 * 32 + 2 * 36 * 36 * 8);
  CHECK(a.fwdFlops == gemms + 3.0 * 36 * 16 + 2.0 * 2 * 36 * 36);
  CHECK(matmulFwdFlops(a) == gemms);
}

TEST_CASE("space_to_depth merges 2 x 2 patches, padding an odd grid", "[network][swin]") {
  const auto n = loadText("merge", R"(input: {channels: 4, height: 5, width: 7}
layers:
  - {name: merge, kind: space_to_depth}
  - {name: wide, kind: space_to_depth, block_size: 3}
  - {name: loss, kind: softmax}
)");
  const Layer& m = layer(n, "merge");
  CHECK(m.outShape == Shape{16, 3, 4});  // ceil(5 / 2) x ceil(7 / 2)
  CHECK(m.params == 0);
  CHECK(m.fwdFlops == 0);
  CHECK(m.fwdElems == 4 * 5 * 7 + 16 * 3 * 4);
  CHECK(m.bwdDataElems == 16 * 3 * 4 + 4 * 5 * 7);
  CHECK(layerKindRow(LayerKind::kSpaceToDepth).reads == BackwardReads::kNothing);
  CHECK(layer(n, "wide").outShape == Shape{16 * 9, 1, 2});
}

TEST_CASE("the transformer block alternates shifted windows and puts norms after with post",
          "[network][swin]") {
  const auto n = loadText("blocks", kGrid + R"(
  - {name: pre, kind: transformer, heads: 2, hidden: 16, causal: false, window: 4, shift: 2, position_bias: table, repeat: 3}
  - {name: post, kind: transformer, heads: 2, hidden: 16, causal: false, window: 4, shift: 2, position_bias: mlp, cosine: true, norm: post, repeat: 2}
  - {name: loss, kind: softmax}
)");
  CHECK(layer(n, "pre.1.attn").spec.shift == 0);
  CHECK(layer(n, "pre.2.attn").spec.shift == 2);
  CHECK(layer(n, "pre.3.attn").spec.shift == 0);
  CHECK(layer(n, "pre.2.attn").spec.positionBias == PositionBias::kTable);
  // Post-norm: attn reads the block input, ln1 the attention, add1 both.
  const int attn = n.find("post.1.attn"), ln1 = n.find("post.1.ln1"), add1 = n.find("post.1.add1");
  CHECK(n.layers[static_cast<size_t>(attn)].inputs == std::vector<int>{n.find("pre.3.add2")});
  CHECK(n.layers[static_cast<size_t>(ln1)].inputs == std::vector<int>{attn});
  CHECK(n.layers[static_cast<size_t>(add1)].inputs ==
        (std::vector<int>{n.find("pre.3.add2"), ln1}));
  const int ln2 = n.find("post.1.ln2");
  CHECK(n.layers[static_cast<size_t>(ln2)].inputs == std::vector<int>{n.find("post.1.fc2")});
  CHECK(n.layers[static_cast<size_t>(n.find("post.1.add2"))].inputs ==
        (std::vector<int>{add1, ln2}));
  CHECK(layer(n, "post.2.attn").spec.shift == 2);
  CHECK(layer(n, "post.2.attn").spec.cosine);
  // Each repeat one block for recomputation.
  CHECK(layer(n, "post.1.attn").block == layer(n, "post.1.add2").block);
  CHECK(layer(n, "post.1.attn").block != layer(n, "post.2.attn").block);
}

TEST_CASE("the Swin presets have torchvision's parameters and the paper's FLOPs",
          "[network][swin]") {
  // torchvision 0.14's Swin_T_Weights and Swin_V2_T_Weights num_params.
  const Network t = test::presetNetwork("swin-t");
  CHECK(t.totalParams() == 28'288'354);
  const Network v2 = test::presetNetwork("swin-v2-t");
  CHECK(v2.totalParams() == 28'351'570);
  // Liu et al. 2021, eq. 2: W-MSA on h x w x C costs 4 h w C^2 + 2 M^2 h w
  // C multiply-accumulates; stage 1 of Swin-T, 56 x 56 x 96 in windows of 7,
  // plus one bias add per score (3 heads x 3,136 x 49).
  const double macs = 4.0 * 3136 * 96 * 96 + 2.0 * 49 * 3136 * 96;
  CHECK(layer(t, "stage1.1.attn").fwdFlops == 2 * macs + 3.0 * 3136 * 49);
  // The shifted block adds the mask too.
  CHECK(layer(t, "stage1.2.attn").fwdFlops == 2 * macs + 2 * 3.0 * 3136 * 49);
  // Stage 4's second block: 7 x 7 is one window, its shift dropped.
  CHECK(layer(t, "stage4.2.attn").shiftH() == 0);
  // Swin-T, 4.5G FLOPs in the paper's Table 1 (multiply-accumulates): the
  // GEMMs of strata's count.
  double gemmMacs = 0;
  for (const auto& l : t.layers)
    gemmMacs += matmulFwdFlops(l) / 2;
  CHECK(gemmMacs > 4.45e9);
  CHECK(gemmMacs < 4.55e9);
  // Swin V2-T at 256 x 256: torchvision publishes 5.94 GFLOPS (its count
  // adds the elementwise ops and the position-bias MLP to the GEMMs').
  double v2Macs = 0;
  for (const auto& l : v2.layers)
    v2Macs += matmulFwdFlops(l) / 2;
  CHECK(v2Macs == 5'921'028'096.0);
  CHECK(layer(v2, "stage4.2.attn").shiftH() == 0);  // 8 x 8: one window
}

TEST_CASE("mistakes in Swin's keys are one error naming the key", "[network][swin]") {
  struct Case {
    std::string keys, where, what;
  };
  const std::vector<Case> cases = {
      {"shift: 2", "layers[0].shift", "applies only with window"},
      {"window: 4, shift: 4", "layers[0].shift", "less than a window of 4"},
      {"position_bias: table", "layers[0].position_bias", "applies only with window"},
      {"window: 4, position_bias: learned", "layers[0].position_bias",
       "unknown position_bias 'learned'"},
      {"window: 5000", "layers[0].window", "at most 4096"},
      {"window: -1", "layers[0].window", ""},
      {"grid: 4", "layers[0].grid", "must tile the 6x6 positions"},
      {"grid: 3, window: 3", "layers[0].grid", "give one"},
      {"grid: 3, shift: 1", "layers[0].shift", "not grid"},
      {"grid: -2", "layers[0].grid", ""},
  };
  for (const auto& c : cases) {
    INFO(c.keys);
    const std::string e = loadError("bad", attention(c.keys));
    CHECK_THAT(e, Catch::Contains(c.where));
    CHECK_THAT(e, Catch::Contains(c.what));
  }
  CHECK_THAT(loadError("causal", attention("window: 4", true)),
             Catch::Contains("layers[0].causal: attention in windows is bidirectional"));
  CHECK_THAT(loadError("causal", attention("grid: 3", true)),
             Catch::Contains("layers[0].causal: grid attention is bidirectional"));
  // Windows tile a grid, not a sequence.
  CHECK_THAT(loadError("seq",
                       "input: {channels: 8, height: 6, width: 1}\nlayers:\n"
                       "  - {name: attn, kind: attention, heads: 2, causal: false, "
                       "window: 4}\n  - {name: loss, kind: softmax}\n"),
             Catch::Contains("a sequence"));
  CHECK_THAT(loadError("norm", kGrid + "  - {name: b, kind: transformer, heads: 2, hidden: 16, "
                                       "norm: middle}\n"),
             Catch::Contains("unknown norm 'middle'"));
  CHECK_THAT(loadError("norm", kGrid + "  - {name: b, kind: transformer, heads: 2, hidden: 16, "
                                       "norm: post, parallel: true}\n"),
             Catch::Contains("a parallel block"));
  CHECK_THAT(loadError("merge", kGrid + "  - {name: m, kind: space_to_depth, block_size: 0}\n"),
             Catch::Contains("layers[0].block_size"));
  CHECK_THAT(loadError("merge", kGrid + "  - {name: m, kind: space_to_depth, block_size: 65}\n"),
             Catch::Contains("1 to 64"));
}

// The vision networks' layer kinds in YAML (docs/configs.md): concat, mul,
// slice, shuffle, sigmoid, silu, relu6, hardsigmoid, hardswish, the vision
// transformer's class_token, pos_embedding and token, and the conv's pad_w and
// dilation and the max pool's ceil_mode; shapes, parameters and FLOPs by
// hand, and each mistake one error naming its key.
#include <catch2/catch.hpp>

#include "helpers.h"
#include "strata/model/error.h"
#include "strata/model/layer_kinds.h"

using namespace strata;

namespace {

Network loadText(const std::string& stem, const std::string& text) {
  return test::loadNetworkText("strata-vision", stem, "name: " + stem + "\n" + text);
}
std::string loadError(const std::string& stem, const std::string& text) {
  return test::networkLoadError("strata-vision", stem, "name: " + stem + "\n" + text);
}

const Layer& layer(const Network& n, const std::string& name) {
  const int i = n.find(name);
  REQUIRE(i >= 0);
  return n.layers[static_cast<size_t>(i)];
}

const std::string kHead = "input: {channels: 4, height: 8, width: 8}\nlayers:\n";

}  // namespace

TEST_CASE("an inception-style block: convs concatenated along the channels", "[network][vision]") {
  const auto n = loadText("concat", kHead + R"(
  - {name: a, kind: conv, input: input, filters: 6, kernel: 1}
  - {name: b, kind: conv, input: input, filters: 10, kernel: 3, pad: 1}
  - {name: c, kind: pool, input: input, mode: max, kernel: 3, stride: 1, pad: 1}
  - {name: cat, kind: concat, inputs: [a, b, c]}
  - {name: fc, kind: fc, outputs: 2}
  - {name: loss, kind: softmax}
)");
  const Layer& cat = layer(n, "cat");
  CHECK(cat.outShape == Shape{6 + 10 + 4, 8, 8});
  CHECK(cat.params == 0);
  CHECK(cat.fwdFlops == 0);
  CHECK(cat.bwdDataFlops == 0);
  CHECK(cat.fwdElems == 2.0 * 20 * 64);  // read the inputs, write the output
  CHECK(cat.bwdDataElems == 2.0 * 20 * 64);
  CHECK(cat.inputs == std::vector<int>{0, 1, 2});
  CHECK(layer(n, "fc").params == 20 * 64 * 2 + 2);
  // Nothing of the output is kept for backward: a concat's backward slices dy.
  const auto kept = activationsKept(n);
  CHECK(kept.elems[3] == 20.0 * 64);  // read by the fc's weight gradient
}

TEST_CASE("squeeze-excitation: a per-channel gate multiplies the map", "[network][vision]") {
  const auto n = loadText("se", kHead + R"(
  - {name: conv, kind: conv, input: input, filters: 8, kernel: 3, pad: 1}
  - {name: act, kind: silu}
  - {name: squeeze, kind: pool, mode: avg, global: true}
  - {name: reduce, kind: conv, filters: 2, kernel: 1}
  - {name: r_act, kind: relu6}
  - {name: expand, kind: conv, filters: 8, kernel: 1}
  - {name: gate, kind: sigmoid}
  - {name: scale, kind: mul, inputs: [act, gate]}
  - {name: hs, kind: hardswish}
  - {name: hsig, kind: hardsigmoid}
  - {name: fc, kind: fc, outputs: 3}
  - {name: loss, kind: softmax}
)");
  const double map = 8.0 * 8 * 8;
  const Layer& scale = layer(n, "scale");
  CHECK(scale.outShape == Shape{8, 8, 8});
  CHECK(scale.params == 0);
  CHECK(scale.fwdFlops == map);
  CHECK(scale.bwdDataFlops == 3 * map);  // dx = dy g; dg = sum of dy x
  CHECK(scale.fwdElems == map + 8 + map);
  CHECK(layer(n, "gate").outShape == Shape{8, 1, 1});
  CHECK(layer(n, "gate").fwdFlops == 4 * 8);
  CHECK(layer(n, "gate").bwdDataFlops == 3 * 8);
  CHECK(layer(n, "act").fwdFlops == 5 * map);
  CHECK(layer(n, "act").bwdDataFlops == 9 * map);
  CHECK(layer(n, "r_act").fwdFlops == 2 * 2);
  CHECK(layer(n, "r_act").bwdDataFlops == 1 * 2);
  CHECK(layer(n, "hs").fwdFlops == 5 * map);
  CHECK(layer(n, "hs").bwdDataFlops == 4 * map);
  CHECK(layer(n, "hsig").fwdFlops == 4 * map);
  CHECK(layer(n, "hsig").bwdDataFlops == 2 * map);
  for (const char* name : {"act", "gate", "r_act", "hs", "hsig", "scale"})
    CHECK(layer(n, name).params == 0);
  // What backward keeps: sigmoid and relu6 their outputs; silu, hardswish,
  // hardsigmoid their inputs; mul both of its inputs.
  CHECK(layerKindRow(LayerKind::kSigmoid).reads == BackwardReads::kOutput);
  CHECK(layerKindRow(LayerKind::kRelu6).reads == BackwardReads::kOutput);
  CHECK(layerKindRow(LayerKind::kSilu).reads == BackwardReads::kInput);
  CHECK(layerKindRow(LayerKind::kMul).reads == BackwardReads::kInput);
  const auto kept = activationsKept(n);
  CHECK(kept.elems[static_cast<size_t>(n.find("gate"))] == 8);   // its own output, and mul's
  CHECK(kept.elems[static_cast<size_t>(n.find("act"))] == map);  // read by mul's backward
}

TEST_CASE("a ShuffleNetV2 unit: split, one branch convolved, concatenated and shuffled",
          "[network][vision]") {
  const auto n = loadText("shuffle-unit", kHead + R"(
  - {name: keep, kind: slice, input: input, channels: 2}
  - {name: take, kind: slice, input: input, offset: 2, channels: 2}
  - {name: pw, kind: conv, filters: 2, kernel: 1, bias: false}
  - {name: cat, kind: concat, inputs: [keep, pw]}
  - {name: mix, kind: shuffle, groups: 2}
  - {name: fc, kind: fc, outputs: 3}
  - {name: loss, kind: softmax}
)");
  const double plane = 64;
  const Layer& keep = layer(n, "keep");
  CHECK(keep.outShape == Shape{2, 8, 8});
  CHECK(keep.spec.offset == 0);
  CHECK(keep.spec.channels == 2);
  CHECK(layer(n, "take").spec.offset == 2);
  CHECK(layer(n, "take").outShape == Shape{2, 8, 8});
  CHECK(keep.params == 0);
  CHECK(keep.fwdFlops == 0);
  CHECK(keep.fwdElems == 2 * 2 * plane);  // read its channels, write them
  CHECK(keep.bwdDataElems == 2 * 2 * plane);
  const Layer& mix = layer(n, "mix");
  CHECK(mix.outShape == Shape{4, 8, 8});
  CHECK(mix.spec.groups == 2);
  CHECK(mix.params == 0);
  CHECK(mix.fwdFlops == 0);
  CHECK(mix.fwdElems == 2 * 4 * plane);
  CHECK(mix.bwdDataElems == 2 * 4 * plane);
  CHECK(layer(n, "pw").params == 2 * 2);
  // Neither keeps anything for its backward: the conv reads take's output,
  // the fc mix's.
  CHECK(layerKindRow(LayerKind::kSlice).reads == BackwardReads::kNothing);
  CHECK(layerKindRow(LayerKind::kShuffle).reads == BackwardReads::kNothing);
  const auto kept = activationsKept(n);
  CHECK(kept.elems[static_cast<size_t>(n.find("keep"))] == 0);
  CHECK(kept.elems[static_cast<size_t>(n.find("take"))] == 2 * plane);
  CHECK(kept.elems[static_cast<size_t>(n.find("cat"))] == 0);
  CHECK(kept.elems[static_cast<size_t>(n.find("mix"))] == 4 * plane);
}

TEST_CASE("layer scale: a learned value per channel", "[network][vision]") {
  const auto n = loadText("layer-scale", kHead + R"(
  - {name: dw, kind: conv, filters: 4, kernel: 3, pad: 1, groups: 4}
  - {name: gamma, kind: scale}
  - {name: res, kind: add, inputs: [input, gamma]}
  - {name: fc, kind: fc, outputs: 3}
  - {name: loss, kind: softmax}
)");
  const double map = 4.0 * 8 * 8;
  const Layer& gamma = layer(n, "gamma");
  CHECK(gamma.outShape == Shape{4, 8, 8});
  CHECK(gamma.params == 4);
  CHECK(gamma.fwdFlops == map);
  CHECK(gamma.bwdDataFlops == map);
  CHECK(gamma.bwdWeightsFlops == 2 * map);  // dgamma = sums of dy x
  CHECK(gamma.fwdElems == 2 * map);
  CHECK(gamma.bwdWeightsElems == 2 * map);
  CHECK(layerKindRow(LayerKind::kScale).reads == BackwardReads::kInput);
  // Its input (the conv's output) is kept for the gradient of gamma.
  CHECK(activationsKept(n).elems[static_cast<size_t>(n.find("dw"))] == map);
  CHECK(n.totalParams() == 4 * 9 + 4 + 4 + 256 * 3 + 3);
}

TEST_CASE("a vision transformer: patches, class token, positions, attention, the token's head",
          "[network][vision][vit]") {
  // ViT (Dosovitskiy et al. 2021) on 8x8 images of 4 channels: 2x2 patches
  // of 6 features (16 positions), one class token, a learned table of 17
  // positions, one encoder block, the class token's features to the head.
  const auto n = loadText("vit", kHead + R"(
  - {name: patches, kind: conv, filters: 6, kernel: 2, stride: 2}
  - {name: cls, kind: class_token}
  - {name: pos, kind: pos_embedding}
  - {name: ln, kind: layernorm}
  - {name: attn, kind: attention, heads: 2, causal: false}
  - {name: res, kind: add, inputs: [pos, attn]}
  - {name: first, kind: token, index: 0}
  - {name: head, kind: fc, outputs: 3}
  - {name: loss, kind: softmax}
)");
  const Layer& cls = layer(n, "cls");
  CHECK(cls.inShape == Shape{6, 4, 4});
  CHECK(cls.outShape == Shape{6, 17, 1});  // 1 + 4 x 4 positions
  CHECK(cls.spec.tokens == 1);
  CHECK(cls.params == 6);
  CHECK(cls.fwdFlops == 0);
  CHECK(cls.bwdDataFlops == 0);
  CHECK(cls.bwdWeightsFlops == 6);  // the token's gradient: dy's position 0 summed
  CHECK(cls.fwdElems == 6.0 * 16 + 6.0 * 17);
  CHECK(cls.bwdDataElems == 2 * 6.0 * 16);
  CHECK(cls.bwdWeightsElems == 2 * 6.0);
  const Layer& pos = layer(n, "pos");
  CHECK(pos.outShape == Shape{6, 17, 1});
  CHECK(pos.params == 6 * 17);
  CHECK(pos.fwdFlops == 6.0 * 17);
  CHECK(pos.bwdDataFlops == 0);
  CHECK(pos.bwdWeightsFlops == 6.0 * 17);
  CHECK(pos.fwdElems == 2 * 6.0 * 17);
  const Layer& attn = layer(n, "attn");
  CHECK(attn.inShape == Shape{6, 17, 1});
  CHECK(!attn.spec.causal);
  const Layer& first = layer(n, "first");
  CHECK(first.outShape == Shape{6, 1, 1});
  CHECK(first.params == 0);
  CHECK(first.fwdFlops == 0);
  CHECK(first.fwdElems == 2 * 6.0);
  CHECK(first.bwdDataElems == 2 * 6.0);
  CHECK(layer(n, "head").params == 6 * 3 + 3);
  for (auto kind : {LayerKind::kClassToken, LayerKind::kPosEmbedding, LayerKind::kToken}) {
    CHECK(layerKindRow(kind).reads == BackwardReads::kNothing);
    CHECK(isVisionKind(kind));
  }
  CHECK(n.totalParams() == (4 * 4 * 6 + 6) + 6 + 6 * 17 + 12 + (4 * 36 + 4 * 6) + 6 * 3 + 3);
  // Two class tokens (DeiT's class and distillation tokens), and a sequence
  // read as it is.
  const auto two = loadText("deit", kHead + R"(
  - {name: patches, kind: conv, filters: 6, kernel: 4, stride: 4}
  - {name: cls, kind: class_token, tokens: 2}
  - {name: pos, kind: pos_embedding}
  - {name: last, kind: token, index: 5}
  - {name: head, kind: fc, outputs: 3}
  - {name: loss, kind: softmax}
)");
  CHECK(layer(two, "cls").outShape == Shape{6, 6, 1});
  CHECK(layer(two, "cls").params == 12);
  CHECK(layer(two, "pos").params == 36);
  CHECK(layer(two, "last").spec.index == 5);
}

TEST_CASE("conv pad_w and dilation, and a max pool rounding up", "[network][vision]") {
  const auto n = loadText("windows",
                          "input: {channels: 2, height: 17, width: 17}\nlayers:\n"
                          R"(
  - {name: wide, kind: conv, filters: 3, kernel_h: 1, kernel_w: 7, pad: 0, pad_w: 3}
  - {name: tall, kind: conv, filters: 3, kernel_h: 7, kernel_w: 1, pad: 3, pad_w: 0}
  - {name: dil, kind: conv, filters: 4, kernel: 3, dilation: 2, pad: 2}
  - {name: pool, kind: pool, mode: max, kernel: 3, stride: 2, ceil_mode: true}
  - {name: floor, kind: pool, input: dil, mode: max, kernel: 3, stride: 2}
  - {name: fc, kind: fc, outputs: 2}
  - {name: loss, kind: softmax}
)");
  CHECK(layer(n, "wide").outShape == Shape{3, 17, 17});
  CHECK(layer(n, "wide").params == 3 * 2 * 7 + 3);
  CHECK(layer(n, "tall").outShape == Shape{3, 17, 17});
  // A 3-tap kernel 2 apart spans 5 inputs: (17 + 4 - 5) + 1 = 17.
  CHECK(layer(n, "dil").outShape == Shape{4, 17, 17});
  CHECK(layer(n, "dil").params == 4 * 3 * 9 + 4);
  CHECK(layer(n, "dil").fwdFlops == 2.0 * 4 * 17 * 17 * 3 * 9);
  // (17 - 3) / 2 + 1 = 8 either way; ceil_mode changes 16 -> 8 (7.5 up).
  CHECK(layer(n, "pool").outShape == Shape{4, 8, 8});
  CHECK(layer(n, "floor").outShape == Shape{4, 8, 8});
  const auto m = loadText("ceil",
                          "input: {channels: 1, height: 112, width: 112}\nlayers:\n"
                          R"(
  - {name: up, kind: pool, mode: max, kernel: 3, stride: 2, ceil_mode: true}
  - {name: down, kind: pool, input: input, mode: max, kernel: 3, stride: 2}
  - {name: last, kind: pool, input: input, mode: max, kernel: 2, stride: 2, pad: 1, ceil_mode: true}
  - {name: loss, kind: softmax}
)");
  // GoogLeNet's first pool: (112 - 3) / 2 = 54.5, up to 55, + 1 = 56; down 55.
  CHECK(layer(m, "up").outShape == Shape{1, 56, 56});
  CHECK(layer(m, "down").outShape == Shape{1, 55, 55});
  // (112 + 2 - 2) / 2 + 1 = 57 exactly; rounding up would add a window
  // starting at 114 - 1 = 113 > 112 + 1 - 1 (beyond the input and its left
  // pad), which PyTorch drops: 57.
  CHECK(layer(m, "last").outShape == Shape{1, 57, 57});
}

TEST_CASE("vision layer mistakes name their key", "[network][vision][errors]") {
  CHECK_THAT(loadError("cat-hw", kHead + R"(
  - {name: a, kind: pool, input: input, mode: max, kernel: 2}
  - {name: cat, kind: concat, inputs: [a, input]}
)"),
             Catch::Contains("layers[1].inputs") &&
                 Catch::Contains("input 1 is 4x8x8, input 0 4x4x4 (height and width must agree)"));
  CHECK_THAT(loadError("cat-one", kHead + "  - {name: cat, kind: concat, inputs: [input]}\n"),
             Catch::Contains("a concat needs at least two inputs"));
  CHECK_THAT(loadError("cat-twice", kHead + R"(
  - {name: a, kind: relu}
  - {name: cat, kind: concat, inputs: [a, a]}
)"),
             Catch::Contains("input 'a' is listed twice: each input of a concat"));
  CHECK_THAT(loadError("mul-three", kHead + R"(
  - {name: a, kind: relu}
  - {name: b, kind: relu6}
  - {name: m, kind: mul, inputs: [input, a, b]}
)"),
             Catch::Contains("layers[2].inputs") && Catch::Contains("a mul needs two inputs"));
  CHECK_THAT(loadError("mul-shape", kHead + R"(
  - {name: a, kind: pool, mode: avg, kernel: 2}
  - {name: m, kind: mul, inputs: [input, a]}
)"),
             Catch::Contains("mul of 4x8x8 by 4x4x4: the second input must be the first's shape "
                             "or one value per channel (4x1x1)"));
  CHECK_THAT(
      loadError("ceil-avg", kHead + "  - {name: p, kind: pool, mode: avg, kernel: 3, stride: "
                                    "2, ceil_mode: true}\n"),
      Catch::Contains("layers[0].ceil_mode") && Catch::Contains("ceil_mode is for max pooling"));
  CHECK_THAT(loadError("dil-big",
                       kHead + "  - {name: c, kind: conv, filters: 2, kernel: 3, dilation: 4}\n"),
             Catch::Contains("layers[0].kernel") &&
                 Catch::Contains("dilated kernel height 9 is larger than the padded input 8"));
  CHECK_THAT(loadError("dil-zero",
                       kHead + "  - {name: c, kind: conv, filters: 2, kernel: 3, dilation: 0}\n"),
             Catch::Contains("dilation"));
  CHECK_THAT(
      loadError("slice-past", kHead + "  - {name: s, kind: slice, offset: 3, channels: 2}\n"),
      Catch::Contains("layers[0].channels") &&
          Catch::Contains("channels 3 to 4 of an input of 4 channels (4x8x8)"));
  CHECK_THAT(loadError("slice-none", kHead + "  - {name: s, kind: slice, offset: 1}\n"),
             Catch::Contains("layers[0]") && Catch::Contains("channels"));
  CHECK_THAT(
      loadError("slice-neg", kHead + "  - {name: s, kind: slice, offset: -1, channels: 2}\n"),
      Catch::Contains("layers[0].offset"));
  CHECK_THAT(loadError("shuffle-3", kHead + "  - {name: s, kind: shuffle, groups: 3}\n"),
             Catch::Contains("layers[0].groups") &&
                 Catch::Contains("a shuffle splits the channels into groups of equal size: 3 "
                                 "groups of 4 channels"));
  CHECK_THAT(loadError("shuffle-none", kHead + "  - {name: s, kind: shuffle}\n"),
             Catch::Contains("layers[0]") && Catch::Contains("groups"));
  CHECK_THAT(
      loadError("padw-pool", kHead + "  - {name: p, kind: pool, mode: max, kernel: 2, pad_w: 1}\n"),
      Catch::Contains("pad_w"));
  CHECK_THAT(loadError("cls-zero", kHead + "  - {name: c, kind: class_token, tokens: 0}\n"),
             Catch::Contains("layers[0].tokens"));
  CHECK_THAT(loadError("token-past", kHead + "  - {name: t, kind: token, index: 64}\n"),
             Catch::Contains("layers[0].index") &&
                 Catch::Contains("position 64 of an input of 64 positions (4x8x8): the index "
                                 "must be in [0, 63]"));
  CHECK_THAT(loadError("token-neg", kHead + "  - {name: t, kind: token, index: -1}\n"),
             Catch::Contains("layers[0].index"));
  CHECK_THAT(loadError("pos-key", kHead + "  - {name: p, kind: pos_embedding, positions: 4}\n"),
             Catch::Contains("positions"));
}

// torchvision's classification zoo imported from ONNX (docs/onnx.md): every
// model of tests/fixtures/onnx/torchvision/expected.tsv imports with the
// parameter count of torchvision's module, and each family's new layers
// (concat, relu6, hardswish, squeeze-excitation's mul, ...) are where the
// architecture puts them. The fixtures and the table are written by
// tests/fixtures/onnx/make_torchvision.py from Debian's torch and
// torchvision; their weights are not committed.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "helpers.h"
#include "strata/model/error.h"
#include "strata/model/model_flops.h"
#include "strata/model/network_loader.h"

using namespace strata;

namespace {

std::string zoo(const std::string& name) {
  const char* dir = std::getenv("STRATA_ZOO_DIR");  // a fresh export, for make_torchvision.py
  return (dir ? std::string(dir) : std::string(STRATA_ONNX_FIXTURES) + "/torchvision") + "/" + name;
}

struct Expected {
  std::string name;
  int size = 0;
  int64_t params = 0;
  int64_t published = 0;
};

std::vector<Expected> expectedZoo() {
  std::ifstream in(zoo("expected.tsv"));
  REQUIRE(in);
  std::vector<Expected> rows;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#')
      continue;
    std::istringstream fields(line);
    Expected e;
    fields >> e.name >> e.size >> e.params >> e.published;
    REQUIRE(fields);
    rows.push_back(e);
  }
  return rows;
}

int count(const Network& n, LayerKind kind) {
  int c = 0;
  for (const auto& l : n.layers)
    c += l.kind == kind ? 1 : 0;
  return c;
}

const Layer& layer(const Network& n, const std::string& name) {
  const int i = n.find(name);
  INFO("layer " << name);
  REQUIRE(i >= 0);
  return n.layers[static_cast<size_t>(i)];
}

}  // namespace

TEST_CASE("every torchvision classification model in the zoo imports with its parameters",
          "[onnx][zoo]") {
  const auto rows = expectedZoo();
  // Every mapped family of torchvision 0.14 (make_torchvision.py's MAPPED).
  CHECK(rows.size() == 80);
  for (const auto& e : rows) {
    INFO(e.name);
    const Network n = loadNetwork(zoo(e.name + ".onnx"));
    CHECK(n.input == Shape{3, e.size, e.size});
    CHECK(n.totalParams() == e.params);
    // The published count includes Inception-v3's auxiliary classifier,
    // which eval mode (and so the export) never runs; ViT-H/14's published
    // weights are for 518 x 518 images, whose position table has (37 x 37 -
    // 16 x 16) x 1,280 more parameters.
    if (e.name == "vit_h_14")
      CHECK(e.published - n.totalParams() == (37 * 37 - 16 * 16) * 1280);
    else if (e.name != "inception_v3")
      CHECK(n.totalParams() == e.published);
    REQUIRE(!n.layers.empty());
    CHECK(n.layers.back().kind == LayerKind::kSoftmax);
    CHECK(n.layers.back().outShape == Shape{1000, 1, 1});
  }
}

TEST_CASE("the zoo's multiply-adds equal torchvision's published GFLOPS", "[onnx][zoo]") {
  // torchvision's model pages (pytorch.org/vision/stable/models, "GFLOPS",
  // which count multiply-adds of the convolutions and linear layers at the
  // model's input size, and ViT's attention products), to their two
  // decimals; strata's conv, fc and attention layers' forward FLOPs / 2
  // (docs/cost-model.md).
  const std::vector<std::pair<std::string, double>> published = {{"alexnet", 0.71},
                                                                 {"vgg16", 15.47},
                                                                 {"resnet50", 4.09},
                                                                 {"googlenet", 1.50},
                                                                 {"inception_v3", 5.71},
                                                                 {"densenet121", 2.83},
                                                                 {"squeezenet1_0", 0.82},
                                                                 {"mobilenet_v2", 0.30},
                                                                 {"mobilenet_v3_large", 0.22},
                                                                 {"efficientnet_b0", 0.39},
                                                                 {"regnet_y_400mf", 0.40},
                                                                 {"mnasnet1_0", 0.31},
                                                                 {"shufflenet_v2_x1_0", 0.14},
                                                                 {"shufflenet_v2_x2_0", 0.58},
                                                                 {"convnext_tiny", 4.46},
                                                                 {"convnext_large", 34.36},
                                                                 {"vit_b_16", 17.56},
                                                                 {"vit_b_32", 4.41},
                                                                 {"vit_l_16", 61.55},
                                                                 {"vit_l_32", 15.38},
                                                                 {"swin_t", 4.49},
                                                                 {"swin_s", 8.74},
                                                                 {"swin_b", 15.43},
                                                                 {"maxvit_t", 5.56}};
  for (const auto& [name, gmacs] : published) {
    INFO(name);
    const Network n = loadNetwork(zoo(name + ".onnx"));
    double macs = 0;
    for (const auto& l : n.layers)
      macs += matmulFwdFlops(l) / 2;  // an attention's: its projections, Q Kᵀ and P V
    CHECK(std::abs(macs / 1e9 - gmacs) <= 0.005);
  }
}

TEST_CASE("torchvision families map onto strata's layer kinds", "[onnx][zoo]") {
  SECTION("GoogLeNet: 9 inception concats, max pools rounding up") {
    const Network n = loadNetwork(zoo("googlenet.onnx"));
    CHECK(count(n, LayerKind::kConcat) == 9);
    // 112 -> 56 with ceil_mode (55 rounding down): (112 - 3) / 2 rounded up, + 1.
    const Layer& pool = n.layers[static_cast<size_t>(n.find("/0/maxpool1/MaxPool"))];
    CHECK(pool.spec.ceilMode);
    CHECK(pool.inShape == Shape{64, 112, 112});
    CHECK(pool.outShape == Shape{64, 56, 56});
    // Inception 3a: 64 + 128 + 32 + 32 channels.
    CHECK(layer(n, "/0/inception3a/Concat").outShape == Shape{256, 28, 28});
  }
  SECTION("Inception-v3: 1x7 and 7x1 kernels padded 0x3 and 3x0, Pads folded into pools") {
    const Network n = loadNetwork(zoo("inception_v3.onnx"));
    CHECK(count(n, LayerKind::kConcat) == 11);
    int wide = 0, tall = 0;
    for (const auto& l : n.layers) {
      if (l.kind != LayerKind::kConv)
        continue;
      if (l.spec.kernelH == 1 && l.spec.kernelW == 7) {
        CHECK(l.spec.pad == 0);
        CHECK(l.spec.padWidth() == 3);
        CHECK(l.outShape.h == l.inShape.h);
        CHECK(l.outShape.w == l.inShape.w);
        ++wide;
      } else if (l.spec.kernelH == 7 && l.spec.kernelW == 1) {
        CHECK(l.spec.pad == 3);
        CHECK(l.spec.padWidth() == 0);
        ++tall;
      }
    }
    // Mixed_6b-6e: three of each; Mixed_7a: one.
    CHECK(wide == 13);
    CHECK(tall == 13);
    // avg_pool2d(3, stride 1, padding 1) as Pad + AveragePool: one pool of pad 1.
    int padded = 0;
    for (const auto& l : n.layers)
      if (l.kind == LayerKind::kPool && l.spec.poolMode == PoolMode::kAvg && !l.spec.global) {
        CHECK(l.spec.pad == 1);
        CHECK(l.outShape == l.inShape);
        ++padded;
      }
    CHECK(padded == 9);
  }
  SECTION("DenseNet-121: each dense layer concatenates 32 more channels") {
    const Network n = loadNetwork(zoo("densenet121.onnx"));
    CHECK(count(n, LayerKind::kConcat) == 58);  // 6 + 12 + 24 + 16 dense layers
    CHECK(n.layers[static_cast<size_t>(n.layers.size()) - 2].inShape == Shape{1024, 1, 1});
  }
  SECTION("SqueezeNet 1.0: fire modules concatenate their 1x1 and 3x3 expands") {
    const Network n = loadNetwork(zoo("squeezenet1_0.onnx"));
    CHECK(count(n, LayerKind::kConcat) == 8);
    CHECK(count(n, LayerKind::kFc) == 0);  // the classifier is a 1x1 conv
  }
  SECTION("MobileNetV2: Clip(0, 6) is relu6; depthwise convolutions") {
    const Network n = loadNetwork(zoo("mobilenet_v2.onnx"));
    CHECK(count(n, LayerKind::kRelu6) == 35);
    int depthwise = 0;
    for (const auto& l : n.layers)
      depthwise += l.kind == LayerKind::kConv && l.spec.groups > 1 &&
                           l.spec.groups == l.inShape.c && l.spec.filters == l.inShape.c
                       ? 1
                       : 0;
    CHECK(depthwise == 17);
  }
  SECTION("MobileNetV3-small: hardswish, and squeeze-excitation gating by hardsigmoid") {
    const Network n = loadNetwork(zoo("mobilenet_v3_small.onnx"));
    CHECK(count(n, LayerKind::kHardSwish) == 19);
    CHECK(count(n, LayerKind::kHardSigmoid) == 9);
    CHECK(count(n, LayerKind::kMul) == 9);
    for (const auto& l : n.layers)
      if (l.kind == LayerKind::kMul) {
        const Layer& gate = n.layers[static_cast<size_t>(l.inputs[1])];
        CHECK(gate.kind == LayerKind::kHardSigmoid);
        CHECK(gate.outShape == Shape{l.inShape.c, 1, 1});
        CHECK(l.outShape == l.inShape);
        CHECK(l.params == 0);
        CHECK(l.fwdFlops == double(l.inShape.elements()));
      }
  }
  SECTION("EfficientNet-B0: x * sigmoid(x) folds into silu; SE gates by sigmoid") {
    const Network n = loadNetwork(zoo("efficientnet_b0.onnx"));
    // 65 Sigmoid/Mul pairs: 49 SiLUs and 16 squeeze-excitation gates.
    CHECK(count(n, LayerKind::kSilu) == 49);
    CHECK(count(n, LayerKind::kSigmoid) == 16);
    CHECK(count(n, LayerKind::kMul) == 16);
  }
  SECTION("MNASNet: x.mean([2, 3]) is a global average pool") {
    const Network n = loadNetwork(zoo("mnasnet0_5.onnx"));
    const Layer& mean = n.layers[n.layers.size() - 3];
    CHECK(mean.kind == LayerKind::kPool);
    CHECK(mean.spec.global);
    CHECK(mean.spec.poolMode == PoolMode::kAvg);
    CHECK(mean.outShape == Shape{1280, 1, 1});
  }
  SECTION("ShuffleNetV2 1.0x: channel splits as slices, shuffles of two groups") {
    const Network n = loadNetwork(zoo("shufflenet_v2_x1_0.onnx"));
    // 16 units (4 + 8 + 4), each ending in a shuffle; the 13 that keep their
    // stride split their input in two halves.
    CHECK(count(n, LayerKind::kShuffle) == 16);
    CHECK(count(n, LayerKind::kSlice) == 26);
    CHECK(count(n, LayerKind::kConcat) == 16);
    for (const auto& l : n.layers) {
      if (l.kind == LayerKind::kShuffle) {
        CHECK(l.spec.groups == 2);
        CHECK(l.outShape == l.inShape);
        CHECK(n.layers[static_cast<size_t>(l.inputs[0])].kind == LayerKind::kConcat);
      } else if (l.kind == LayerKind::kSlice) {
        CHECK(l.spec.channels * 2 == l.inShape.c);
        CHECK((l.spec.offset == 0 || l.spec.offset == l.spec.channels));
        CHECK(n.layers[static_cast<size_t>(l.inputs[0])].kind == LayerKind::kShuffle);
      }
    }
    // Stage 2's first unit: 24 channels in, 116 out (58 per branch), 28 x 28.
    CHECK(layer(n, "/0/stage2/stage2.0/Reshape_1").outShape == Shape{116, 28, 28});
    CHECK(layer(n, "/0/stage2/stage2.1/Slice").spec.offset == 0);
    CHECK(layer(n, "/0/stage2/stage2.1/Slice_1").spec.offset == 58);
  }
  SECTION("ConvNeXt-tiny: channels-last blocks, per-position fc layers, layer scales") {
    const Network n = loadNetwork(zoo("convnext_tiny.onnx"));
    // 3 + 3 + 9 + 3 blocks, each: depthwise 7x7 conv, layernorm, fc (4C),
    // gelu, fc (C), scale, add; a layernorm after the stem, before each of
    // the 3 downsampling convs and before the classifier.
    CHECK(count(n, LayerKind::kScale) == 18);
    CHECK(count(n, LayerKind::kLayerNorm) == 23);
    CHECK(count(n, LayerKind::kGelu) == 18);
    CHECK(count(n, LayerKind::kFc) == 37);
    const Layer& fc1 = layer(n, "/0/features/features.1/features.1.0/block/block.3/MatMul");
    CHECK(!fc1.spec.flatten);
    CHECK(fc1.spec.bias);
    CHECK(fc1.inShape == Shape{96, 56, 56});
    CHECK(fc1.outShape == Shape{384, 56, 56});
    CHECK(fc1.params == 96 * 384 + 384);
    const Layer& scale = layer(n, "/0/features/features.1/features.1.0/Mul");
    CHECK(scale.kind == LayerKind::kScale);
    CHECK(scale.params == 96);
    CHECK(scale.inShape == Shape{96, 56, 56});
    // The layernorm before the classifier normalises the pooled 768 channels.
    const Layer& head = n.layers[n.layers.size() - 3];
    CHECK(head.kind == LayerKind::kLayerNorm);
    CHECK(head.inShape == Shape{768, 1, 1});
  }
  SECTION("ViT-B/16: patches, a class token, positions, 12 bidirectional attentions") {
    const Network n = loadNetwork(zoo("vit_b_16.onnx"));
    CHECK(count(n, LayerKind::kClassToken) == 1);
    CHECK(count(n, LayerKind::kPosEmbedding) == 1);
    CHECK(count(n, LayerKind::kToken) == 1);
    CHECK(count(n, LayerKind::kAttention) == 12);
    CHECK(count(n, LayerKind::kLayerNorm) == 25);
    CHECK(count(n, LayerKind::kGelu) == 12);
    const Layer& cls = layer(n, "/0/Concat_2");
    CHECK(cls.kind == LayerKind::kClassToken);
    CHECK(cls.inShape == Shape{768, 14, 14});
    CHECK(cls.outShape == Shape{768, 197, 1});
    const Layer& attn = layer(n, "/0/encoder/layers/encoder_layer_0/self_attention/MatMul");
    CHECK(attn.kind == LayerKind::kAttention);
    CHECK(attn.spec.heads == 12);
    CHECK(!attn.spec.causal);
    CHECK(attn.spec.bias);
    CHECK(attn.params == 4 * 768 * 768 + 4 * 768);
    // The vit-b-16 preset (configs/networks/vit-b-16.yaml), layer for layer.
    const Network preset = test::presetNetwork("vit-b-16");
    REQUIRE(n.layers.size() == preset.layers.size());
    for (size_t i = 0; i < n.layers.size(); ++i) {
      INFO("layer " << i << ": " << n.layers[i].name << " / " << preset.layers[i].name);
      CHECK(n.layers[i].kind == preset.layers[i].kind);
      // An add's two inputs in either order (torchvision's x + input).
      auto inputs = [](std::vector<int> v) {
        std::sort(v.begin(), v.end());
        return v;
      };
      CHECK(inputs(n.layers[i].inputs) == inputs(preset.layers[i].inputs));
      CHECK(n.layers[i].outShape == preset.layers[i].outShape);
      CHECK(n.layers[i].params == preset.layers[i].params);
      CHECK(n.layers[i].spec.causal == preset.layers[i].spec.causal);
      CHECK(n.layers[i].fwdFlops == preset.layers[i].fwdFlops);
      CHECK(n.layers[i].bwdDataFlops == preset.layers[i].bwdDataFlops);
      CHECK(n.layers[i].bwdWeightsFlops == preset.layers[i].bwdWeightsFlops);
    }
  }
  SECTION("Swin-T: attention in shifted windows, patch merging, the swin-t preset") {
    const Network n = loadNetwork(zoo("swin_t.onnx"));
    CHECK(count(n, LayerKind::kSpaceToDepth) == 3);
    CHECK(count(n, LayerKind::kAttention) == 12);
    const Layer& shifted = layer(n, "/0/features/features.1/features.1.1/attn/Concat_35");
    CHECK(shifted.kind == LayerKind::kAttention);
    CHECK(shifted.spec.window == 7);
    CHECK(shifted.spec.shift == 3);
    CHECK(shifted.spec.positionBias == PositionBias::kTable);
    CHECK(shifted.params == 4 * 96 * 96 + 4 * 96 + 169 * 3);
    // The swin-t preset (configs/networks/swin-t.yaml), layer for layer; the
    // last block's shift, which torchvision drops on its 7 x 7 grid before
    // the export, compared as both apply it (none).
    const Network preset = test::presetNetwork("swin-t");
    REQUIRE(n.layers.size() == preset.layers.size());
    for (size_t i = 0; i < n.layers.size(); ++i) {
      const Layer& a = n.layers[i];
      const Layer& b = preset.layers[i];
      INFO("layer " << i << ": " << a.name << " / " << b.name);
      CHECK(a.kind == b.kind);
      auto inputs = [](std::vector<int> v) {
        std::sort(v.begin(), v.end());
        return v;
      };
      CHECK(inputs(a.inputs) == inputs(b.inputs));
      CHECK(a.outShape == b.outShape);
      CHECK(a.params == b.params);
      CHECK(a.fwdFlops == b.fwdFlops);
      CHECK(a.bwdWeightsFlops == b.bwdWeightsFlops);
      CHECK(a.fwdElems == b.fwdElems);
      CHECK(a.spec.window == b.spec.window);
      CHECK(a.shiftH() == b.shiftH());
      CHECK(a.shiftW() == b.shiftW());
    }
  }
  SECTION("Swin V2-T: cosine attention, the position bias MLP, the swin-v2-t preset") {
    // torchvision's swin_v2_t at 256 x 256 (make_torchvision.py: its K
    // bias's zero_() exported as x * 0), layer for layer the swin-v2-t
    // preset (configs/networks/swin-v2-t.yaml). torchvision publishes 5.94
    // GFLOPS, which also counts the elementwise ops and the cpb MLP: strata's
    // GEMMs are 5.92 G (docs/networks.md), so it is not in the test above.
    const Network n = loadNetwork(zoo("swin_v2_t.onnx"));
    const Network preset = test::presetNetwork("swin-v2-t");
    REQUIRE(n.layers.size() == preset.layers.size());
    int shifted = 0;
    for (size_t i = 0; i < n.layers.size(); ++i) {
      const Layer& a = n.layers[i];
      const Layer& b = preset.layers[i];
      INFO("layer " << i << ": " << a.name << " / " << b.name);
      CHECK(a.kind == b.kind);
      CHECK(a.inputs == b.inputs);
      CHECK(a.outShape == b.outShape);
      CHECK(a.params == b.params);
      CHECK(a.fwdFlops == b.fwdFlops);
      CHECK(a.bwdWeightsFlops == b.bwdWeightsFlops);
      CHECK(a.fwdElems == b.fwdElems);
      if (a.kind != LayerKind::kAttention)
        continue;
      CHECK(a.spec.cosine);
      CHECK(a.spec.positionBias == PositionBias::kMlp);
      CHECK(a.spec.window == 8);
      CHECK(a.shiftH() == b.shiftH());
      shifted += a.shiftH() > 0 ? 1 : 0;
    }
    CHECK(shifted == 5);  // stages 1 to 3's second blocks (1 + 1 + 3); 8 x 8 is one window
    double macs = 0;
    for (const auto& l : n.layers)
      macs += matmulFwdFlops(l) / 2;
    CHECK(macs == 5'921'028'096.0);
  }
  SECTION("MaxViT-T: block and grid attention over windows of 7, MBConv, a tanh head") {
    const Network n = loadNetwork(zoo("maxvit_t.onnx"));
    // 2 + 2 + 5 + 2 MaxViT layers, each block then grid attention.
    CHECK(count(n, LayerKind::kAttention) == 22);
    CHECK(count(n, LayerKind::kTanh) == 1);
    int windows = 0, grids = 0;
    for (const auto& l : n.layers) {
      if (l.kind != LayerKind::kAttention)
        continue;
      INFO(l.name);
      CHECK(l.spec.positionBias == PositionBias::kTable);
      CHECK(l.attentionSpan() == 49);
      CHECK(l.spec.heads == l.inShape.c / 32);  // heads of 32 features
      windows += l.spec.window == 7 ? 1 : 0;
      grids += l.spec.grid == 7 ? 1 : 0;
    }
    CHECK(windows == 11);
    CHECK(grids == 11);
    // The first grid: 56 x 56 cut into 8 x 8 blocks, each grid the 7 x 7
    // positions 8 apart; its table (2 x 7 - 1)^2 x 2 heads.
    const Layer& grid =
        layer(n, "/0/blocks.0/layers.0/layers/grid_attention/attn_layer/attn_layer.1/merge/MatMul");
    CHECK(grid.spec.grid == 7);
    CHECK(grid.inShape == Shape{64, 56, 56});
    CHECK(grid.attentionWindows() == 64);
    CHECK(grid.params == 4 * 64 * 64 + 4 * 64 + 169 * 2);
  }
  SECTION("RegNetY-400MF: grouped convolutions and sigmoid-gated SE") {
    const Network n = loadNetwork(zoo("regnet_y_400mf.onnx"));
    CHECK(count(n, LayerKind::kSigmoid) == 16);
    CHECK(count(n, LayerKind::kMul) == 16);
  }
}

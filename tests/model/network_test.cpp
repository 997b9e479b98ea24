// Layer math against hand-computed values. Expected parameter and MAC totals
// were computed independently (docs/networks.md) from the papers' layer tables.
#include <catch2/catch.hpp>

#include "helpers.h"
#include "strata/model/error.h"
#include "strata/model/network_loader.h"

using namespace strata;
using strata::test::presetNetwork;

namespace {
const Layer& layer(const Network& n, const std::string& name) {
  const int i = n.find(name);
  REQUIRE(i >= 0);
  return n.layers[static_cast<size_t>(i)];
}
double macs(const Network& n) {  // conv + fc + rnn multiply-accumulates, fwd, per example
  double m = 0;
  for (const auto& l : n.layers)
    if (l.kind == LayerKind::kConv || l.kind == LayerKind::kFc || l.kind == LayerKind::kRnn)
      m += l.fwdFlops / 2;
  return m;
}
}  // namespace

TEST_CASE("alexnet-owt shapes follow cuda-convnet2's one-column net", "[network]") {
  const auto n = presetNetwork("alexnet-owt");
  CHECK(layer(n, "conv1").outShape == Shape{64, 55, 55});  // (224 + 4 - 11) / 4 + 1 = 55
  CHECK(layer(n, "pool1").outShape == Shape{64, 27, 27});  // (55 - 3) / 2 + 1
  CHECK(layer(n, "conv2").outShape == Shape{192, 27, 27});
  CHECK(layer(n, "pool2").outShape == Shape{192, 13, 13});
  CHECK(layer(n, "conv3").outShape == Shape{384, 13, 13});
  CHECK(layer(n, "conv5").outShape == Shape{256, 13, 13});
  CHECK(layer(n, "pool5").outShape == Shape{256, 6, 6});
  CHECK(layer(n, "fc6").inShape.elements() == 9216);
  CHECK(layer(n, "fc8").outShape == Shape{1000, 1, 1});
}

TEST_CASE("alexnet-owt parameters and FLOPs per layer", "[network]") {
  const auto n = presetNetwork("alexnet-owt");
  CHECK(layer(n, "conv1").params == 64 * 3 * 11 * 11 + 64);      // 23,296
  CHECK(layer(n, "conv2").params == 192 * 64 * 5 * 5 + 192);     // 307,392
  CHECK(layer(n, "conv3").params == 384 * 192 * 3 * 3 + 384);    // 663,936
  CHECK(layer(n, "conv4").params == 256 * 384 * 3 * 3 + 256);    // 884,992
  CHECK(layer(n, "conv5").params == 256 * 256 * 3 * 3 + 256);    // 590,080
  CHECK(layer(n, "fc6").params == int64_t{9216} * 4096 + 4096);  // 37,752,832
  CHECK(layer(n, "fc7").params == int64_t{4096} * 4096 + 4096);  // 16,781,312
  CHECK(layer(n, "fc8").params == int64_t{4096} * 1000 + 1000);  // 4,097,000
  CHECK(n.totalParams() == 61'100'840);
  // conv1: 64 x 55 x 55 outputs, each 3 x 11 x 11 MACs, 2 FLOPs per MAC.
  CHECK(layer(n, "conv1").fwdFlops == 2.0 * 64 * 55 * 55 * 3 * 11 * 11);
  CHECK(layer(n, "conv1").bwdWeightsFlops == layer(n, "conv1").fwdFlops);
  CHECK(layer(n, "fc6").fwdFlops == 2.0 * 9216 * 4096);
  // Max pool: one comparison per window element per output.
  CHECK(layer(n, "pool1").fwdFlops == 64.0 * 27 * 27 * 9);
  CHECK(layer(n, "relu1").fwdFlops == 64.0 * 55 * 55);
  CHECK(macs(n) == 714'188'480.0);
}

TEST_CASE("conv layers dominate FLOPs and fc layers dominate parameters in alexnet-owt",
          "[network]") {
  const auto n = presetNetwork("alexnet-owt");
  const double convFlops = n.fwdFlopsOfKind(LayerKind::kConv) / n.totalFwdFlops();
  const double fcParams = double(n.paramsOfKind(LayerKind::kFc)) / double(n.totalParams());
  CHECK(convFlops > 0.90);  // Krizhevsky 2014: 90-95 % of the compute
  CHECK(fcParams > 0.95);   // ~95 % of the parameters
  CHECK(n.layers[static_cast<size_t>(n.modelParallelFrom)].name == "fc6");
}

TEST_CASE("preset networks match their papers' totals", "[network]") {
  struct Expect {
    const char* name;
    int64_t params;
    double macs;
  };
  // docs/networks.md; vgg16 138M (Simonyan & Zisserman, Table 2); resnet50
  // matches torchvision's 25.56M; lm-300m is exactly 300M by construction.
  const Expect expected[] = {
      {"alexnet-owt", 61'100'840, 714'188'480.0}, {"alexnet", 60'965'224, 724'406'816.0},
      {"vgg16", 138'357'544, 15'470'264'320.0},   {"resnet50", 25'557'032, 4'089'184'256.0},
      {"lm-300m", 300'000'000, 24'000'000'000.0}, {"tiny-cnn", 268'650, 1'885'440.0}};
  for (const auto& e : expected) {
    INFO(e.name);
    const auto n = presetNetwork(e.name);
    CHECK(n.totalParams() == e.params);
    CHECK(macs(n) == e.macs);
  }
}

TEST_CASE("resnet50 bottlenecks expand with projections and residual adds", "[network]") {
  const auto n = presetNetwork("resnet50");
  CHECK(layer(n, "res2.1.proj").outShape == Shape{256, 56, 56});
  CHECK(layer(n, "res3.1.conv2").outShape == Shape{128, 28, 28});  // v1.5: stride on the 3x3
  CHECK(layer(n, "res5.3.add").outShape == Shape{2048, 7, 7});
  CHECK(layer(n, "res5.3.add").inputs.size() == 2);
  CHECK(n.find("res2.2.proj") < 0);  // identity shortcut after the first block
  CHECK(layer(n, "pool5").outShape == Shape{2048, 1, 1});
  CHECK(n.paramsOfKind(LayerKind::kBatchNorm) == 53'120);
}

TEST_CASE("a GRU layer has 3 H (in + H) weights", "[network]") {
  const auto n = presetNetwork("lm-300m");
  const auto& l = n.layers[0];
  CHECK(l.kind == LayerKind::kRnn);
  CHECK(l.params == 3LL * 2500 * (2500 + 2500));
  CHECK(l.fwdFlops == 2.0 * 80 * 3 * 2500 * 5000);  // 80 timesteps
}

TEST_CASE("impossible shapes are config errors naming file, line and key", "[network][errors]") {
  try {
    loadNetwork(strata::test::dataFile("kernel-too-large.yaml"));
    FAIL("expected a ConfigError");
  } catch (const ConfigError& e) {
    CHECK(e.line() == 6);
    CHECK(e.key() == "layers[1].kernel");
    CHECK_THAT(e.what(), Catch::Contains("larger than the padded input"));
  }
}

// Per-op profiles (model/profile.h): linear scaling, the YAML round trip,
// the checks against the network priced, and pricing from a profile.
#include "strata/model/profile.h"

#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "helpers.h"
#include "strata/model/cluster_loader.h"
#include "strata/model/compute_cost.h"
#include "strata/model/error.h"
#include "strata/model/estimate.h"
#include "strata/model/profile_loader.h"

using namespace strata;

namespace {

// A profile of `net` at batch 8 with figures of 7 significant digits (more
// than the YAML keeps), distinct per layer and phase; update 0 without weights.
OpProfile madeUp(const Network& net) {
  OpProfile p;
  p.network = net.name;
  p.batch = 8;
  p.repeats = 3;
  p.provenance =
      "measured by `strata profile -n " + net.name + " --batch 8` on test-host, 2025-01-02";
  for (size_t i = 0; i < net.layers.size(); ++i) {
    const double base = 1.234567e-6 * double(i + 1);
    p.layers.push_back({net.layers[i].name, Seconds(base), Seconds(2.345678 * base),
                        Seconds(net.layers[i].hasWeights() ? 3.456789 * base : 0.0),
                        Seconds(net.layers[i].hasWeights() ? 0.4567891 * base : 0.0)});
  }
  return p;
}

std::filesystem::path tempDir(const std::string& what) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("strata-" + what + "-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return dir;
}

int lineOf(const std::string& text, const std::string& what) {
  const auto at = text.find(what);
  REQUIRE(at != std::string::npos);
  return 1 + static_cast<int>(std::count(text.begin(), text.begin() + at, '\n'));
}

}  // namespace

TEST_CASE("OpProfile::time scales linearly in examples and fraction", "[profile]") {
  const auto net = test::presetNetwork("tiny-cnn");
  const auto p = madeUp(net);
  const double fwd = p.layers[3].fwd.value();
  CHECK(p.time(3, Phase::kFwd, 8, 1.0).value() == fwd);
  CHECK(p.time(3, Phase::kFwd, 4, 1.0).value() == Approx(fwd / 2).epsilon(1e-15));
  CHECK(p.time(3, Phase::kFwd, 32, 0.25).value() == Approx(fwd).epsilon(1e-15));
  CHECK(p.time(3, Phase::kBwdData, 12, 0.5).value() ==
        Approx(p.layers[3].bwdData.value() * 12 / 8 * 0.5).epsilon(1e-15));
  CHECK(p.time(3, Phase::kBwdWeights, 2, 1.0).value() ==
        Approx(p.layers[3].bwdWeights.value() / 4).epsilon(1e-15));
  // Update: the whole layer's parameters whatever the batch; a slice's share.
  CHECK(p.time(3, Phase::kUpdate, 100, 1.0).value() == p.layers[3].update.value());
  CHECK(p.time(3, Phase::kUpdate, 1, 0.5).value() ==
        Approx(p.layers[3].update.value() / 2).epsilon(1e-15));
}

TEST_CASE("profileYaml -> loadProfile keeps every figure and the provenance", "[profile]") {
  const auto net = test::presetNetwork("tiny-cnn");
  const auto p = madeUp(net);
  const auto dir = tempDir("profile-test");
  const auto path = (dir / "tiny-cnn.profile.yaml").string();
  std::ofstream(path) << profileYaml(p);
  const auto q = loadProfile(path, net);
  CHECK(q.sourceFile == path);
  CHECK(q.network == p.network);
  CHECK(q.batch == p.batch);
  CHECK(q.repeats == p.repeats);
  CHECK(q.provenance == p.provenance);
  REQUIRE(q.layers.size() == p.layers.size());
  // Figures are printed in us with 6 significant digits: within half a unit of the 6th.
  auto same = [](Seconds a, Seconds b) {
    return std::abs(a.value() - b.value()) <= 5e-6 * std::abs(b.value());
  };
  for (size_t i = 0; i < p.layers.size(); ++i) {
    INFO(p.layers[i].name);
    CHECK(q.layers[i].name == p.layers[i].name);
    CHECK(same(q.layers[i].fwd, p.layers[i].fwd));
    CHECK(same(q.layers[i].bwdData, p.layers[i].bwdData));
    CHECK(same(q.layers[i].bwdWeights, p.layers[i].bwdWeights));
    CHECK(same(q.layers[i].update, p.layers[i].update));
  }
  CHECK_NOTHROW(checkProfileMatches(q, net));
  std::filesystem::remove_all(dir);
}

TEST_CASE("a provenance with quotes and backslashes survives the round trip", "[profile]") {
  const auto net = test::presetNetwork("tiny-cnn");
  auto p = madeUp(net);
  p.provenance = R"(measured on "lab box" in C:\runs\new, 50% load: ok # not a comment)";
  const auto dir = tempDir("profile-quotes-test");
  const auto path = (dir / "q.profile.yaml").string();
  std::ofstream(path) << profileYaml(p);
  CHECK(loadProfile(path, net).provenance == p.provenance);
  std::filesystem::remove_all(dir);
}

TEST_CASE("loadProfile rejects a profile of another network, file:line:key", "[profile][errors]") {
  const auto net = test::presetNetwork("tiny-cnn");
  const std::string good = profileYaml(madeUp(net));
  const auto dir = tempDir("profile-errors-test");
  struct Case {
    const char* name;
    std::string text;
    std::string key;
    std::string lineAt;
    const char* message;
  };
  std::string other = good;
  other.replace(other.find("network: tiny-cnn"), 17, "network: alexnet");
  std::string missing = good;
  {
    const auto row = missing.find("  - {name: relu2,");
    missing.erase(row, missing.find('\n', row) + 1 - row);
  }
  std::string misnamed = good;
  misnamed.replace(misnamed.find("{name: pool1,"), 13, "{name: pool9,");
  const Case cases[] = {
      {"other", other, "network", "network: alexnet", "cannot price network 'tiny-cnn'"},
      {"missing", missing, "layers", "  - {name: conv1,",
       "10 layers, but network 'tiny-cnn' has 11"},
      {"misnamed", misnamed, "layers[2].name", "{name: pool9,", "'pool9', but layer 2"},
  };
  // A block list is reported at its first item (where its value starts).
  for (const auto& c : cases) {
    INFO(c.name);
    const auto path = (dir / (std::string(c.name) + ".yaml")).string();
    std::ofstream(path) << c.text;
    try {
      loadProfile(path, net);
      FAIL("expected a ConfigError");
    } catch (const ConfigError& e) {
      INFO(e.what());
      CHECK(e.file() == path);
      CHECK(e.key() == c.key);
      CHECK(e.line() == lineOf(c.text, c.lineAt));
      CHECK(std::string(e.what()).find(c.message) != std::string::npos);
    }
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("checkProfileMatches throws for another network, layer count or layer name",
          "[profile][errors]") {
  const auto net = test::presetNetwork("tiny-cnn");
  CHECK_NOTHROW(checkProfileMatches(madeUp(net), net));
  auto other = madeUp(net);
  other.network = "alexnet";
  CHECK_THROWS_AS(checkProfileMatches(other, net), UserError);
  CHECK_THROWS_WITH(
      checkProfileMatches(other, net),
      Catch::Contains("profile of network 'alexnet' cannot price network 'tiny-cnn'"));
  auto fewer = madeUp(net);
  fewer.layers.pop_back();
  CHECK_THROWS_WITH(checkProfileMatches(fewer, net), Catch::Contains("profile has 10 layers"));
  auto renamed = madeUp(net);
  renamed.layers[4].name = "relu9";
  CHECK_THROWS_WITH(checkProfileMatches(renamed, net),
                    Catch::Contains("layers[4] is 'relu9' but network 'tiny-cnn' has 'relu2'"));
}

TEST_CASE("a cluster with a profile prices compute from it", "[profile][cost]") {
  const auto net = test::presetNetwork("tiny-cnn");
  // Tables and roofline are both there; the profile comes first.
  auto cl = loadCluster(test::dataFile("kernel-cluster.yaml"));
  const auto p = madeUp(net);
  cl.device.profile = std::make_shared<OpProfile>(p);
  const ComputeCosts costs(net, cl, ElementType::kFp32, 1);
  CHECK(costs.source() == ComputeSource::kProfile);
  CHECK(costs.layer(0, Phase::kFwd, 4, 1.0).value() ==
        Approx(p.layers[0].fwd.value() / 2).epsilon(1e-15));
  Scenario sc;
  sc.strategy = Strategy::kRing;
  sc.workers = 1;
  sc.batchPerWorker = 4;
  const auto est = estimate(net, cl, sc);
  double fwdSum = 0;
  for (const auto& l : p.layers)
    fwdSum += l.fwd.value();
  REQUIRE(est.workers.size() == 1);
  // One worker: the profile's fwd sum scaled by b / batch = 4 / 8.
  CHECK(est.workers[0].compute.fwd.value() == Approx(fwdSum * 4 / 8).epsilon(1e-12));
  CHECK(est.computeSource.find("profile") != std::string::npos);
  CHECK(est.computeSource.find("batch 8") != std::string::npos);
  // A profile of another network cannot price this one.
  auto other = p;
  other.network = "alexnet";
  cl.device.profile = std::make_shared<OpProfile>(other);
  CHECK_THROWS_AS(ComputeCosts(net, cl, ElementType::kFp32, 1), UserError);
}

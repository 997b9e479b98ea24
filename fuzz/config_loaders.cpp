#include "config_loaders.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "strata/model/cluster.h"
#include "strata/model/cluster_loader.h"
#include "strata/model/error.h"
#include "strata/model/network.h"
#include "strata/model/network_loader.h"
#include "strata/model/presets.h"
#include "strata/model/profile.h"
#include "strata/model/profile_loader.h"
#include "strata/model/validation_suite.h"

namespace strata::fuzz {

namespace fs = std::filesystem;

Loader parseLoader(std::string_view name) {
  for (auto l : {Loader::kNetwork, Loader::kCluster, Loader::kExperiment, Loader::kSuite,
                 Loader::kProfile, Loader::kOnnx, Loader::kHf})
    if (toString(l) == name)
      return l;
  throw std::invalid_argument("unknown loader '" + std::string(name) +
                              "' (network, cluster, experiment, suite, profile, onnx, hf)");
}

std::string_view toString(Loader loader) {
  switch (loader) {
    case Loader::kNetwork:
      return "network";
    case Loader::kCluster:
      return "cluster";
    case Loader::kExperiment:
      return "experiment";
    case Loader::kSuite:
      return "suite";
    case Loader::kProfile:
      return "profile";
    case Loader::kOnnx:
      return "onnx";
    case Loader::kHf:
      return "hf";
  }
  return "?";
}

namespace {

// The network every profile input is checked against: loaded once, from the
// presets (STRATA_CONFIG_DIR or the source tree's configs/).
const Network& profiledNetwork() {
  static const Network net =
      loadNetwork(resolveConfig(ConfigKind::kNetwork, "tiny-cnn", "fuzz: profile network"));
  return net;
}

// The value of a top-level `name:` line when it is a plain word a file may be
// called, else "input".
std::string stemOf(std::string_view text) {
  size_t at = 0;
  while (at < text.size()) {
    const size_t end = std::min(text.find('\n', at), text.size());
    const std::string_view line = text.substr(at, end - at);
    at = end + 1;
    if (line.substr(0, 5) != "name:")
      continue;
    std::string_view value = line.substr(5);
    while (!value.empty() && (value.front() == ' ' || value.front() == '\t'))
      value.remove_prefix(1);
    while (!value.empty() && (value.back() == ' ' || value.back() == '\t' || value.back() == '\r'))
      value.remove_suffix(1);
    const bool plain = !value.empty() && value.size() <= 64 && value.front() != '.' &&
                       value.find_first_not_of(
                           "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                           "0123456789._-") == std::string_view::npos;
    return plain ? std::string(value) : "input";
  }
  return "input";
}

}  // namespace

std::string load(Loader loader, const std::string& path) {
  try {
    switch (loader) {
      case Loader::kNetwork:
      case Loader::kOnnx:  // the path ends in .onnx
      case Loader::kHf:    // the path ends in .json
        loadNetwork(path);
        break;
      case Loader::kCluster:
        loadCluster(path);
        break;
      case Loader::kExperiment:
        loadExperiment(path);
        break;
      case Loader::kSuite:
        loadValidationSuite(path);
        break;
      case Loader::kProfile:
        loadProfile(path, profiledNetwork());
        break;
    }
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

std::string loadBytes(Loader loader, const uint8_t* data, size_t size) {
  static const fs::path dir = [] {
    auto d = fs::temp_directory_path() / ("strata-fuzz-" + std::to_string(getpid()));
    fs::create_directories(d);
    return d;
  }();
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const fs::path path = loader == Loader::kOnnx ? dir / "input.onnx"
                        : loader == Loader::kHf ? dir / "checkpoint" / "config.json"
                                                : dir / (stemOf(text) + ".yaml");
  if (loader == Loader::kHf)
    fs::create_directories(path.parent_path());
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
  }
  std::string result = load(loader, path.string());
  fs::remove(path);
  return result;
}

}  // namespace strata::fuzz

#include "strata/model/presets.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "strata/model/error.h"

namespace fs = std::filesystem;

namespace strata {

std::string_view toString(ConfigKind kind) {
  switch (kind) {
    case ConfigKind::kNetwork:
      return "network";
    case ConfigKind::kCluster:
      return "cluster";
    case ConfigKind::kExperiment:
      return "experiment";
  }
  return "?";
}

namespace {
constexpr std::string_view kPresetFolders[] = {"networks", "clusters", "experiments"};

std::string_view folderOf(ConfigKind kind) {
  switch (kind) {
    case ConfigKind::kNetwork:
      return "networks";
    case ConfigKind::kCluster:
      return "clusters";
    case ConfigKind::kExperiment:
      return "experiments";
  }
  return "";
}
}  // namespace

namespace {
// setBuiltinConfigDir's folder; set once at import, before any lookup.
std::string& builtinOverride() {
  static std::string dir;
  return dir;
}
}  // namespace

void setBuiltinConfigDir(std::string dir) {
  builtinOverride() = std::move(dir);
}

std::string builtinConfigDir() {
  if (!builtinOverride().empty())
    return builtinOverride();
  if (fs::is_directory(STRATA_SOURCE_CONFIG_DIR))
    return STRATA_SOURCE_CONFIG_DIR;
  return STRATA_INSTALL_CONFIG_DIR;
}

std::vector<std::string> configDirs() {
  std::vector<std::string> dirs;
  if (const char* env = std::getenv("STRATA_CONFIG_DIR"); env && *env) {
    const std::string_view text(env);
    size_t start = 0;
    while (start <= text.size()) {
      const size_t colon = std::min(text.find(':', start), text.size());
      const std::string dir(text.substr(start, colon - start));
      if (!dir.empty()) {
        std::error_code ec;  // a folder name the file system refuses is no folder either
        if (!fs::is_directory(dir, ec))
          throw OptionError("STRATA_CONFIG_DIR", "no such folder '" + dir + "'");
        // A folder that holds no preset folder is a mistake (the configs/
        // folder's parent, a typo), not a source that silently adds nothing.
        const bool holdsPresets = std::any_of(
            std::begin(kPresetFolders), std::end(kPresetFolders),
            [&](std::string_view sub) { return fs::is_directory(fs::path(dir) / sub, ec); });
        if (!holdsPresets)
          throw OptionError("STRATA_CONFIG_DIR",
                            "'" + dir +
                                "' holds none of networks/, clusters/, experiments/: each "
                                "folder of STRATA_CONFIG_DIR is laid out as configs/ is "
                                "(DIR/networks/NAME.yaml, DIR/clusters/NAME.yaml, "
                                "DIR/experiments/NAME.yaml)");
        dirs.push_back(dir);
      }
      start = colon + 1;
    }
  }
  const std::string builtin = builtinConfigDir();
  if (std::find(dirs.begin(), dirs.end(), builtin) == dirs.end())
    dirs.push_back(builtin);
  return dirs;
}

std::vector<std::string> listPresets(ConfigKind kind) {
  std::vector<std::string> names;
  for (const auto& d : configDirs()) {
    const fs::path dir = fs::path(d) / folderOf(kind);
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(dir, ec))
      if (entry.path().extension() == ".yaml")
        names.push_back(entry.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return names;
}

namespace {
// fs::is_regular_file without the throw: a name the file system refuses (longer
// than NAME_MAX or PATH_MAX, a loop of links, no permission) is no file either,
// and the caller reports it as the user's mistake. The throwing form let a long
// preset name escape as std::filesystem::filesystem_error (found by
// experiment_fuzzer: "File name too long").
bool isFile(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}
}  // namespace

std::string resolveConfig(ConfigKind kind, std::string_view nameOrPath, const std::string& option) {
  const std::string given(nameOrPath);
  if (given.empty())
    throw OptionError(option, std::string("empty ") + std::string(toString(kind)) + " name");
  // An ONNX model or a Hugging Face config.json is always a file (docs/onnx.md,
  // docs/networks.md); there are no presets of either.
  const bool looksLikePath =
      given.find('/') != std::string::npos || given.ends_with(".yaml") || given.ends_with(".yml") ||
      (kind == ConfigKind::kNetwork && (given.ends_with(".onnx") || given.ends_with(".json")));
  if (looksLikePath) {
    if (!isFile(given))
      throw OptionError(option, "no such file '" + given + "'");
    return given;
  }
  for (const auto& d : configDirs()) {
    const fs::path preset = fs::path(d) / folderOf(kind) / (given + ".yaml");
    if (isFile(preset))
      return preset.string();
  }
  std::string known;
  for (const auto& n : listPresets(kind))
    known += (known.empty() ? "" : ", ") + n;
  throw OptionError(option, "unknown " + std::string(toString(kind)) + " '" + given +
                                "' (presets: " + (known.empty() ? "none found" : known) + ")");
}

}  // namespace strata

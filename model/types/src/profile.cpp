#include "strata/model/profile.h"

#include <fmt/format.h>

#include <sstream>

#include "strata/model/error.h"

namespace strata {

Seconds OpProfile::time(int index, Phase phase, double examples, double fraction) const {
  STRATA_ENFORCE(index >= 0 && index < static_cast<int>(layers.size()));
  const auto& l = layers[static_cast<size_t>(index)];
  const double perExample = fraction / double(batch);
  switch (phase) {
    case Phase::kFwd:
      return l.fwd * (examples * perExample);
    case Phase::kBwdData:
      return l.bwdData * (examples * perExample);
    case Phase::kBwdWeights:
      return l.bwdWeights * (examples * perExample);
    case Phase::kUpdate:
      return l.update * fraction;
  }
  return Seconds(0);
}

void checkProfileMatches(const OpProfile& p, const Network& net) {
  const std::string where = p.sourceFile.empty() ? "the profile" : p.sourceFile;
  if (p.network != net.name)
    throw UserError(fmt::format("{}: profile of network '{}' cannot price network '{}' ({})", where,
                                p.network, net.name, net.sourceFile));
  if (p.layers.size() != net.layers.size())
    throw UserError(fmt::format("{}: profile has {} layers but network '{}' ({}) has {}", where,
                                p.layers.size(), net.name, net.sourceFile, net.layers.size()));
  for (size_t i = 0; i < net.layers.size(); ++i)
    if (p.layers[i].name != net.layers[i].name)
      throw UserError(fmt::format("{}: layers[{}] is '{}' but network '{}' has '{}' there", where,
                                  i, p.layers[i].name, net.name, net.layers[i].name));
}

namespace {
// `text` as a YAML double-quoted scalar: backslashes, quotes and line breaks escaped.
std::string quoted(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '\\' || c == '"')
      out += '\\';
    out += c == '\n' ? std::string("\\n") : std::string(1, c);
  }
  return out + "\"";
}
}  // namespace

std::string profileYaml(const OpProfile& p) {
  std::ostringstream y;
  y << "# Per-op profile: each layer phase of " << p.network << " timed on one worker, batch "
    << p.batch << ", median of " << p.repeats << " passes after a warm-up pass.\n";
  y << "# " << p.provenance << "\n";
  y << "# Prices this network only (strata predict/simulate/validate --profile FILE); scaled\n"
       "# linearly in examples and in the fraction of a model-parallel layer a worker holds.\n";
  y << "network: " << p.network << "\n";
  y << "batch: " << p.batch << "   # examples per timed pass\n";
  y << "repeats: " << p.repeats << "   # timed passes; each figure is their median\n";
  y << "provenance: " << quoted(p.provenance) << "\n";
  y << "layers:\n";
  auto us = [](Seconds s) { return fmt::format("{:.6g} us", s.value() * 1e6); };
  for (const auto& l : p.layers)
    y << fmt::format("  - {{name: {}, fwd: {}, bwd_data: {}, bwd_weights: {}, update: {}}}\n",
                     l.name, us(l.fwd), us(l.bwdData), us(l.bwdWeights), us(l.update));
  return y.str();
}

}  // namespace strata

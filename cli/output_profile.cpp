// `strata profile`: a per-op profile, each phase beside its price.
#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <optional>

#include "output.h"
#include "strata/model/compute_cost.h"
#include "strata/model/quantity_text.h"
#include "table.h"

namespace strata::cli {

using nlohmann::ordered_json;

namespace {
// The rate each layer kind reaches in each phase: the network's FLOPs of
// that kind and phase over the measured time (kinds with FLOPs only).
void printProfileRates(std::ostream& out, const Network& net, const OpProfile& profile) {
  struct Sum {
    double flops[3] = {0, 0, 0};
    double seconds[3] = {0, 0, 0};
  };
  std::vector<std::pair<LayerKind, Sum>> kinds;
  for (size_t i = 0; i < net.layers.size(); ++i) {
    const Layer& l = net.layers[i];
    const double f[3] = {l.fwdFlops, l.readsNetworkInput() ? 0.0 : l.bwdDataFlops,
                         l.bwdWeightsFlops};
    if (f[0] + f[1] + f[2] <= 0)
      continue;
    auto it =
        std::find_if(kinds.begin(), kinds.end(), [&](const auto& k) { return k.first == l.kind; });
    if (it == kinds.end())
      it = kinds.insert(kinds.end(), {l.kind, Sum{}});
    const auto& m = profile.layers[i];
    const double s[3] = {m.fwd.value(), m.bwdData.value(), m.bwdWeights.value()};
    for (int p = 0; p < 3; ++p) {
      it->second.flops[p] += f[p] * profile.batch;
      it->second.seconds[p] += s[p];
    }
  }
  if (kinds.empty())
    return;
  out << "\nrate by layer kind (the model's FLOPs / measured time):\n";
  Table t({"kind", "fwd", "bwd_data", "bwd_weights"}, 1);
  for (const auto& [kind, sum] : kinds) {
    std::vector<std::string> row{std::string(toString(kind))};
    for (int p = 0; p < 3; ++p)
      row.push_back(sum.flops[p] > 0 && sum.seconds[p] > 0
                        ? fmt::format("{:.1f} GFLOP/s", sum.flops[p] / sum.seconds[p] / 1e9)
                        : std::string("-"));
    t.add(row);
  }
  t.print(out);
}
}  // namespace

void printProfile(std::ostream& out, const Network& net, const OpProfile& profile,
                  const Cluster* cluster, Format format) {
  std::optional<ComputeCosts> costs;
  if (cluster)
    costs.emplace(net, *cluster, ElementType::kFp32, 1, Optimizer::kMomentum, 1, profile.batch);
  const Phase phases[] = {Phase::kFwd, Phase::kBwdData, Phase::kBwdWeights, Phase::kUpdate};
  auto measured = [&](size_t i, Phase p) {
    const auto& l = profile.layers[i];
    return p == Phase::kFwd          ? l.fwd
           : p == Phase::kBwdData    ? l.bwdData
           : p == Phase::kBwdWeights ? l.bwdWeights
                                     : l.update;
  };
  auto priced = [&](size_t i, Phase p) {
    const auto& l = net.layers[i];
    if (p == Phase::kUpdate)
      return l.hasWeights() ? costs->update(double(l.params)) : Seconds(0);
    if (p == Phase::kBwdData && l.readsNetworkInput())
      return Seconds(0);
    return costs->layer(static_cast<int>(i), p, profile.batch, 1.0);
  };
  if (format == Format::kJson) {
    ordered_json j;
    j["network"] = profile.network;
    j["batch"] = profile.batch;
    j["repeats"] = profile.repeats;
    j["provenance"] = profile.provenance;
    if (cluster)
      j["cluster"] = cluster->name;
    for (size_t i = 0; i < net.layers.size(); ++i) {
      ordered_json row;
      row["layer"] = net.layers[i].name;
      row["kind"] = std::string(toString(net.layers[i].kind));
      for (auto p : phases) {
        row[std::string(toString(p)) + "_s"] = measured(i, p).value();
        if (costs)
          row[std::string(toString(p)) + "_priced_s"] = priced(i, p).value();
      }
      j["layers"].push_back(row);
    }
    if (costs)
      j["pricing"] = costs->describe();
    out << j.dump(2) << "\n";
    return;
  }
  if (format == Format::kCsv) {
    out << "layer,kind,phase,measured_s" << (costs ? ",priced_s" : "") << "\n";
    for (size_t i = 0; i < net.layers.size(); ++i)
      for (auto p : phases) {
        out << net.layers[i].name << "," << toString(net.layers[i].kind) << "," << toString(p)
            << "," << fmt::format("{:.9g}", measured(i, p).value());
        if (costs)
          out << "," << fmt::format("{:.9g}", priced(i, p).value());
        out << "\n";
      }
    return;
  }
  out << fmt::format("{}: each phase on one worker, batch {}, median of {} passes", net.name,
                     profile.batch, profile.repeats);
  if (cluster)
    out << fmt::format("; priced by {} ({})", cluster->name,
                       costs->source() == ComputeSource::kTables ? "kernel tables" : "roofline");
  out << "\n\n";
  std::vector<std::string> header{"layer", "kind"};
  for (auto p : phases) {
    header.push_back(std::string(toString(p)));
    if (costs) {
      header.push_back("priced");
      header.push_back("diff");
    }
  }
  Table t(header, 2);
  Seconds sumMeasured, sumPriced;
  auto diff = [](Seconds p, Seconds m) {
    return m.value() > 0 ? fmt::format("{:+.0f} %", 100 * (p / m - 1)) : std::string("-");
  };
  for (size_t i = 0; i < net.layers.size(); ++i) {
    std::vector<std::string> row{net.layers[i].name, std::string(toString(net.layers[i].kind))};
    for (auto p : phases) {
      const Seconds m = measured(i, p);
      row.push_back(formatSeconds(m));
      sumMeasured += m;
      if (costs) {
        const Seconds q = priced(i, p);
        sumPriced += q;
        row.push_back(formatSeconds(q));
        row.push_back(diff(q, m));
      }
    }
    t.add(row);
  }
  t.print(out);
  printProfileRates(out, net, profile);
  out << fmt::format("\ntotal {} measured", formatSeconds(sumMeasured));
  if (costs)
    out << fmt::format(", {} priced ({})\n{}", formatSeconds(sumPriced),
                       diff(sumPriced, sumMeasured), costs->describe());
  out << "\n";
}

}  // namespace strata::cli

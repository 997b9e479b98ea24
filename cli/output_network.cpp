// `strata list` and `strata describe`: the presets, and one network layer by
// layer.
#include <fmt/format.h>

#include "output.h"
#include "strata/model/presets.h"
#include "strata/model/quantity_text.h"
#include "strata/study/network_schema.h"
#include "table.h"

namespace strata::cli {

namespace {

std::string shape(const Shape& s) {
  return fmt::format("{}x{}x{}", s.c, s.h, s.w);
}

}  // namespace

void printPresetList(std::ostream& out, Format format) {
  const auto lists = study::presetLists();
  const std::vector<std::pair<std::string, std::vector<std::string>>> kinds = {
      {"network", lists.networks},
      {"cluster", lists.clusters},
      {"experiment", lists.experiments},
      {"validation-suite", lists.validationSuites}};
  if (format == Format::kJson) {
    out << study::presetsJson().dump(2) << "\n";
    return;
  }
  if (format == Format::kCsv) {
    out << "kind,name\n";
    for (const auto& [kind, names] : kinds)
      for (const auto& n : names)
        out << kind << "," << n << "\n";
    return;
  }
  std::string dirs;
  for (const auto& d : configDirs())
    dirs += (dirs.empty() ? "" : ", ") + d;
  out << "presets in " << dirs << "\n";
  const char* titles[] = {"networks:", "clusters:", "experiments (strata compare NAME):",
                          "validation suites (strata validate --suite NAME):"};
  for (size_t i = 0; i < kinds.size(); ++i) {
    out << "\n" << titles[i] << "\n";
    for (const auto& n : kinds[i].second)
      out << "  " << n << "\n";
  }
}

void printNetwork(std::ostream& out, const Network& net, ElementType element, Format format) {
  const double e = elementBytes(element);
  const auto totals = study::networkTotals(net, element);
  auto savedBytes = [&](const Layer& l) { return study::savedBytesPerExample(l, element); };
  if (format == Format::kJson) {
    out << study::networkJson(net, element).dump(2) << "\n";
    return;
  }
  if (format == Format::kCsv) {
    out << "name,kind,output_c,output_h,output_w,params,fwd_flops_per_example,"
           "bwd_data_flops_per_example,bwd_weights_flops_per_example,activation_bytes_per_"
           "example\n";
    for (const auto& l : net.layers)
      out << fmt::format("{},{},{},{},{},{},{:.0f},{:.0f},{:.0f},{:.0f}\n", l.name,
                         toString(l.kind), l.outShape.c, l.outShape.h, l.outShape.w, l.params,
                         l.fwdFlops, l.bwdDataFlops, l.bwdWeightsFlops, savedBytes(l));
    return;
  }
  out << net.name << ": " << net.description << "\n";
  out << fmt::format("input {}, element {} ({} bytes)\n\n", shape(net.input), toString(element), e);
  Table t({"layer", "kind", "output", "params", "fwd FLOPs/example", "activation/example"}, 3);
  for (size_t i = 0; i < net.layers.size(); ++i) {
    const auto& l = net.layers[i];
    std::string name = l.name;
    if (static_cast<int>(i) == net.modelParallelFrom)
      name += " *";
    t.add({name, std::string(toString(l.kind)), shape(l.outShape), count(double(l.params)),
           formatFlops(Flops(l.fwdFlops)), formatBytes(Bytes(savedBytes(l)))});
  }
  t.add({"total", "", "", count(totals.params), formatFlops(Flops(totals.fwdFlops)),
         formatBytes(Bytes(totals.activationBytes))});
  t.print(out);
  out << "\n";
  out << fmt::format("parameters  {} ({} of weights)\n", count(totals.params),
                     formatBytes(Bytes(totals.params * e)));
  out << fmt::format("compute     {} fwd, {} fwd+bwd per example\n",
                     formatFlops(Flops(totals.fwdFlops)),
                     formatFlops(Flops(net.totalTrainFlops())));
  out << fmt::format("conv layers {} of parameters, {} of fwd FLOPs\n",
                     percent(totals.convParams / totals.params),
                     percent(totals.convFlops / totals.fwdFlops));
  out << fmt::format("fc layers   {} of parameters, {} of fwd FLOPs\n",
                     percent(totals.fcParams / totals.params),
                     percent(totals.fcFlops / totals.fwdFlops));
  if (totals.rnnParams > 0)
    out << fmt::format("rnn layers  {} of parameters, {} of fwd FLOPs\n",
                       percent(totals.rnnParams / totals.params),
                       percent(totals.rnnFlops / totals.fwdFlops));
  if (totals.attentionParams > 0 || totals.attentionFlops > 0)
    out << fmt::format("attention   {} of parameters, {} of fwd FLOPs\n",
                       percent(totals.attentionParams / totals.params),
                       percent(totals.attentionFlops / totals.fwdFlops));
  if (net.modelParallelFrom >= 0)
    out << "* owt-a/b/c run this layer and the ones after it model-parallel\n";
  else
    out << "owt-a/b/c do not apply: " << net.noModelParallelWhy << "\n";
}

}  // namespace strata::cli

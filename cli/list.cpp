// `strata list` and `strata describe`: the presets, and one network's layers.
#include <iostream>
#include <memory>

#include "commands.h"
#include "flags.h"

namespace strata::cli {

Command addListCommand(CLI::App& app) {
  auto format = std::make_shared<std::string>("table");
  auto* sub = app.add_subcommand("list", "list the preset networks, clusters and experiments");
  addFormatOption(sub, *format);
  return {sub, [format] {
            printPresetList(std::cout, parseFormat(*format));
            return 0;
          }};
}

Command addDescribeCommand(CLI::App& app) {
  struct Options {
    std::string network, element = "fp32", format = "table";
  };
  auto o = std::make_shared<Options>();
  auto* sub = app.add_subcommand("describe", "per-layer shapes, parameters and FLOPs of a network");
  sub->add_option("network", o->network, kNetworkHelp)->required();
  sub->add_option("--element", o->element, "element type for byte sizes: fp32|tf32|fp16|bf16");
  addFormatOption(sub, o->format);
  sub->footer("Example:\n  strata describe alexnet-owt --format json");
  return {sub, [o] {
            const auto format = parseFormat(o->format);
            const auto element = parseElementType(o->element, "--element");
            printNetwork(std::cout, networkArg(o->network, "network"), element, format);
            return 0;
          }};
}

}  // namespace strata::cli

// `strata profile`: time each layer phase of one network on one worker.
#include "strata/exec/profile.h"

#include <iostream>
#include <memory>
#include <optional>

#include "commands.h"
#include "flags.h"
#include "strata/model/profile.h"

namespace strata::cli {

Command addProfileCommand(CLI::App& app) {
  struct Options {
    std::string network, out, cluster, format = "table", device = "cpu", element = "fp32",
                                       optimizer = "momentum";
    int batch = 32, repeats = 5, threads = 1;
  };
  auto o = std::make_shared<Options>();
  auto* sub = app.add_subcommand(
      "profile", "time each layer phase of one network on one worker (a per-op profile)");
  sub->add_option("--network,-n", o->network, kNetworkHelp)->required();
  sub->add_option("--batch,-b", o->batch, "examples per timed pass (default 32)");
  sub->add_option("--repeats", o->repeats,
                  "timed passes after a warm-up; figures are medians (default 5)");
  sub->add_option("--out,-o", o->out, "profile YAML to write (for --profile)");
  sub->add_option("--device", o->device,
                  "cpu (default; this thread) or cuda (GPU 0, GPU time from CUDA events)");
  sub->add_option("--element", o->element,
                  "cuda: precision of GEMMs and convolutions, fp32|tf32|bf16 (default fp32; bf16: "
                  "fp32 accumulation and master weights); cpu: fp32 only");
  sub->add_option("--threads-per-worker", o->threads,
                  "cpu: threads of the worker's kernels (default 1: one worker on this thread)");
  sub->add_option("--optimizer", o->optimizer,
                  "the update phase's rule: sgd|momentum (SGD with momentum) or adam|adamw (Adam) "
                  "(default momentum)");
  sub->add_option("--cluster,-c", o->cluster,
                  "also print each phase as this cluster prices it (kernel tables or roofline), "
                  "beside the measured one");
  addFormatOption(sub, o->format);
  sub->footer(
      "Example:\n"
      "  strata profile -n alexnet-owt --batch 8 --out alexnet-owt.profile.yaml\n"
      "  strata predict -n alexnet-owt -c my-cluster.yaml -s ring -k 2 -b 8 --profile "
      "alexnet-owt.profile.yaml");
  return {sub, [o] {
            const auto format = parseFormat(o->format);
            // A target that cannot be one fails before the profile is measured;
            // the file is written beside it and renamed into place after.
            if (!o->out.empty())
              checkOutputFile(o->out, "--out");
            const auto device = exec::parseDevice(o->device, "--device");
            const auto element = parseElementType(o->element, "--element");
            exec::checkElement(element, device);
            const auto optimizer = parseOptimizer(o->optimizer, "--optimizer");
            const auto net = networkArg(o->network, "--network");
            std::optional<Cluster> cluster;
            if (!o->cluster.empty())
              cluster = clusterArg(o->cluster, "--cluster");
            ProgressBar bar("passes timed (a warm-up, then --repeats)");
            const OpProfile profile = exec::profileNetwork(
                net, o->batch, o->repeats, device, o->threads, element, optimizer,
                [&](int done, int total) { bar.update(done, total); });
            // The measured profile is printed first: a file that cannot be
            // written (a full disk: exit 1 with its reason) loses no measurement.
            printProfile(std::cout, net, profile, cluster ? &*cluster : nullptr, format);
            if (o->out.empty())
              return 0;
            std::cout << std::flush;
            writeFileAtomically(o->out, profileYaml(profile), "--out");
            if (format == Format::kTable)
              std::cout << "\nwrote " << o->out << "\n";
            return 0;
          }};
}

}  // namespace strata::cli

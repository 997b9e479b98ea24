// `strata calibrate`: measure this machine and write it as a cluster config.
#include "strata/exec/calibrate.h"

#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>

#include "commands.h"
#include "flags.h"
#include "strata/exec/runtime.h"

namespace strata::cli {

Command addCalibrateCommand(CLI::App& app) {
  struct Options {
    std::string network, out, device = "cpu";
    int batch = 32, maxWorkers = 4;
  };
  auto o = std::make_shared<Options>();
  auto* sub =
      app.add_subcommand("calibrate", "measure this machine and write it as a cluster config");
  sub->add_option("--out,-o", o->out, "cluster YAML to write (its stem is its name)")->required();
  sub->add_option("--network,-n", o->network,
                  "also fit roofline efficiencies on this network's own layers (the cluster then "
                  "is not held-out for it; default: kernel tables only)");
  sub->add_option("--batch,-b", o->batch, "examples per timed pass with --network (default 32)");
  sub->add_option("--device", o->device,
                  "cpu (default: this machine's cores) or cuda (GPU 0: cuBLAS, cuDNN and "
                  "kernel tables, copy and host-link bandwidth)");
  sub->add_option("--sharing-up-to", o->maxWorkers,
                  "measure sharing for 1, 2, 4, ... up to this many workers (default 4)");
  sub->footer(
      "Example:\n"
      "  strata calibrate --out my-cluster.yaml\n"
      "  strata predict -n tiny-cnn -c my-cluster.yaml -s ring -k 2 -b 32");
  return {sub, [o] {
            std::optional<Network> net;
            if (!o->network.empty()) {
              net = networkArg(o->network, "--network");
              Scenario timed;  // one worker's passes at --batch: bounded like a run
              timed.workers = 1;
              timed.batchPerWorker = o->batch;
              exec::checkRunnable(*net, timed);
              exec::checkThreadRun(*net, timed);
            }
            exec::CalibrationOptions co;
            co.name = std::filesystem::path(o->out).stem().string();
            co.network = net ? &*net : nullptr;
            co.batch = o->batch;
            co.maxWorkers = o->maxWorkers;
            co.device = exec::parseDevice(o->device, "--device");
            co.progress = [](const std::string& line) { std::cout << line << "\n" << std::flush; };
            exec::checkCalibrationOptions(co);
            std::ofstream file(o->out);
            if (!file)
              throw OptionError("--out", "cannot write '" + o->out + "'");
            if (co.device == exec::Device::kCuda)
              std::cout << "calibrating GPU 0 (kernel tables through cuBLAS, cuDNN and "
                           "kernels/)\n";
            else if (net)
              std::cout << "calibrating this machine (kernel tables; roofline efficiencies "
                           "fitted on "
                        << net->name << "'s layers, batch " << o->batch << ")\n";
            else
              std::cout << "calibrating this machine (kernel tables, no network)\n";
            file << exec::calibrate(co);
            if (!file.flush())
              throw OptionError("--out", "error while writing '" + o->out + "'");
            std::cout << "wrote " << o->out << "\n";
            return 0;
          }};
}

}  // namespace strata::cli

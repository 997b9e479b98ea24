// `strata calibrate`: measure this machine and write it as a cluster config;
// with --overlap-only, measure how the compute and communication lanes slow
// each other, over threads or (under mpirun) over the MPI ranks' transport.
#include "strata/exec/calibrate.h"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "commands.h"
#include "flags.h"
#include "rank_start.h"
#include "strata/exec/comm/mpi_communicator.h"
#include "strata/exec/runtime.h"
#include "strata/model/quantity_text.h"

namespace strata::cli {

namespace {

struct CalibrateFlags {
  std::string network, out, device = "cpu", format = "table";
  int batch = 32, maxWorkers = 4, sweeps = 3;
  bool batchGiven = false;  // --batch on the command line
  bool overlapOnly = false;
  bool sharingGiven = false;  // --sharing-up-to on the command line
  bool sweepsGiven = false;   // --sweeps on the command line
};

// Mistakes of --overlap-only's options; `mpi`: started by mpirun.
void checkOverlapFlags(const CalibrateFlags& f, bool mpi) {
  if (!f.overlapOnly) {
    if (mpi)
      throw OptionError("--overlap-only",
                        "under mpirun strata calibrate measures only the lanes' overlap over the "
                        "ranks: add --overlap-only (the machine's own calibration runs in one "
                        "process: strata calibrate --out FILE)");
    if (f.out.empty())
      throw OptionError("--out", "required (the cluster YAML to write)");
    if (f.format != "table")
      throw OptionError("--format", "applies to --overlap-only (a calibration writes YAML)");
    if (f.batchGiven && f.network.empty())
      throw OptionError("--batch",
                        "applies with --network only (the kernel tables time their own shapes)");
    if (f.sweepsGiven && f.device != "cpu")
      throw OptionError("--sweeps",
                        "applies to the CPU's kernel tables (--device cuda sweeps its tables once, "
                        "timed on the GPU's own events)");
    return;
  }
  if (f.sweepsGiven)
    throw OptionError("--sweeps", "--overlap-only measures no kernel tables");
  if (!f.out.empty())
    throw OptionError("--out", "--overlap-only prints its sharing rows; it writes no file");
  if (!f.network.empty() || f.batchGiven)
    throw OptionError(f.batchGiven ? "--batch" : "--network", "--overlap-only times no network");
  if (f.device != "cpu")
    throw OptionError("--device",
                      "--overlap-only measures CPU lanes (a GPU's comes with "
                      "strata calibrate --device cuda)");
  if (mpi && f.sharingGiven)
    throw OptionError("--sharing-up-to",
                      "under mpirun the workers are the ranks (mpirun -np K); leave it out");
  if (f.maxWorkers < 2 || f.maxWorkers > 64)
    throw OptionError("--sharing-up-to",
                      fmt::format("--overlap-only needs 2..64 workers, got {}", f.maxWorkers));
  const Format format = parseFormat(f.format);
  if (format == Format::kCsv)
    throw OptionError("--format", "--overlap-only prints table or json");
}

// The trials' rows, as a sharing row each (to paste into a cluster file's
// device sharing table) or as JSON; `transport` says how the lanes moved data.
void printOverlap(const std::vector<exec::LaneOverlap>& rows, const std::string& transport,
                  Format format) {
  if (format == Format::kJson) {
    nlohmann::ordered_json j;
    j["transport"] = transport;
    j["segment_bytes"] = 4 << 20;
    auto& out = j["rows"] = nlohmann::ordered_json::array();
    for (const auto& r : rows)
      out.push_back({{"workers", r.workers},
                     {"overlap_compute_speed", r.computeSpeed},
                     {"overlap_comm_speed", r.commSpeed},
                     {"overlap_comm_speed_by_duty", r.commByDuty},
                     {"overlap_compute_speed_by_duty", r.computeByDuty},
                     {"overlap_comm_rate_bytes_per_s", r.commRate}});
    std::cout << j.dump(2) << "\n";
    return;
  }
  std::cout << "lanes' overlap over " << transport
            << ": each worker's communication lane exchanging 4 MiB segments with its ring "
               "neighbours (summed) while its compute lane runs 256^3 GEMMs, against each alone "
               "(median of 3)\n";
  for (const auto& r : rows)
    std::cout << fmt::format(
        "{} workers: compute {:.3f}, communication {:.3f}; the lane alone moved {}\n", r.workers,
        r.computeSpeed, r.commSpeed, formatBandwidth(BytesPerSecond(r.commRate)));
  for (const auto& r : rows) {
    // The duty sweep: the compute lane runs 128^3 GEMMs for d of every 2 ms.
    std::string line = fmt::format(
        "{} workers, compute lane busy a share d of every 2 ms (d: communication speed, compute "
        "speed while it runs):",
        r.workers);
    for (size_t i = 0; i < r.commByDuty.size() && i < r.computeByDuty.size(); ++i)
      line += fmt::format("{} {:g}: {:.3f}, {:.3f}", i ? ";" : "", r.commByDuty[i].first,
                          r.commByDuty[i].second, r.computeByDuty[i].second);
    std::cout << line << "\n";
  }
  std::cout << "sharing rows (device: sharing: in a cluster file; speed, memory_speed and "
               "lane_handoff come from strata calibrate):\n";
  for (const auto& r : rows)
    std::cout << fmt::format(
        "    - {{workers: {}, overlap_compute_speed: {:.3f}, overlap_comm_speed: {:.3f}{}, "
        "overlap_comm_rate: {:.4g} GB/s}}\n",
        r.workers, r.computeSpeed, r.commSpeed, exec::dutyCurveYaml(r.commByDuty),
        r.commRate / 1e9);
}

#ifdef STRATA_HAVE_MPI
// Under mpirun: every rank reads its options, the ranks agree on mistakes
// (all exit 2, one line from rank 0), then measure the trial together; rank 0
// prints. `f` is null when the command line itself was wrong (`mistake`).
int overlapRank(const CalibrateFlags* f, std::string mistake, Process process) {
  exec::MpiSession session(*process.argc, *process.argv);
  std::optional<exec::MpiCommunicator> mpi;
  if (!openWorld(mpi))
    return kRunFailureExit;
  if (const int status = startRanks(
          *mpi, mistake,
          [&](exec::Communicator& c) {
            checkOverlapFlags(*f, true);
            if (c.size() < 2)
              throw OptionError("-np", "--overlap-only under mpirun needs 2 or more ranks");
          });
      status != 0)
    return status;
  exec::LaneOverlap row;
  exec::runOrAbort(*mpi, [&](exec::Communicator& c) { row = exec::measureLaneOverlap(c); });
  if (mpi->rank() == 0)
    printOverlap({row}, fmt::format("MPI ({} ranks)", row.workers), parseFormat(f->format));
  return 0;
}
#endif

}  // namespace

int reportCalibrateMistake(Process process, const std::string& message) {
#ifdef STRATA_HAVE_MPI
  if (exec::launchedByMpiexec())
    return overlapRank(nullptr, message, process);
#endif
  (void)process;
  std::cerr << "strata: error: " << message << "\n";
  return kUserErrorExit;
}

Command addCalibrateCommand(CLI::App& app, Process process) {
  auto o = std::make_shared<CalibrateFlags>();
  auto* sub =
      app.add_subcommand("calibrate", "measure this machine and write it as a cluster config");
  sub->add_option("--out,-o", o->out,
                  "cluster YAML to write (its stem is its name); required but with "
                  "--overlap-only");
  sub->add_option("--network,-n", o->network,
                  "also fit roofline efficiencies on this network's own layers (the cluster then "
                  "is not held-out for it; default: kernel tables only)");
  auto* batch = sub->add_option("--batch,-b", o->batch,
                                "examples per timed pass with --network (default 32)");
  sub->add_option("--device", o->device,
                  "cpu (default: this machine's cores) or cuda (GPU 0: cuBLAS, cuDNN and "
                  "kernel tables, copy and host-link bandwidth)");
  auto* sharing =
      sub->add_option("--sharing-up-to", o->maxWorkers,
                      "measure sharing for 1, 2, 4, ... up to this many workers (default 4)");
  sub->add_flag("--overlap-only", o->overlapOnly,
                "measure only how each worker's compute and communication lanes slow each other "
                "(the sharing rows' overlap_* figures) and print them: threads for 2, 4, ... up "
                "to --sharing-up-to workers, or under mpirun the ranks over their transport "
                "(e.g. TCP between hosts)");
  auto* sweeps = sub->add_option(
      "--sweeps", o->sweeps,
      "sweeps over the CPU kernel tables, each point the median over them (1..9, "
      "default 3: about a minute each on 2 cores; one point timed once is a snapshot of a "
      "VM's speed)");
  addFormatOption(sub, o->format, "output of --overlap-only: table|json (default table)");
  sub->footer(
      "Examples:\n"
      "  strata calibrate --out my-cluster.yaml\n"
      "  strata predict -n tiny-cnn -c my-cluster.yaml -s ring -k 2 -b 32\n"
      "  mpirun -np 2 strata calibrate --overlap-only   # the lanes over MPI's transport");
  return {sub, [o, sharing, batch, sweeps, process] {
            o->sharingGiven = sharing->count() > 0;
            o->sweepsGiven = sweeps->count() > 0;
            o->batchGiven = batch->count() > 0;
            const bool mpi = exec::launchedByMpiexec();
#ifdef STRATA_HAVE_MPI
            if (mpi)
              return overlapRank(o.get(), "", process);
#else
            (void)process;
            if (mpi)
              throw OptionError("--overlap-only",
                                "this strata was built without MPI: it cannot measure MPI ranks");
#endif
            checkOverlapFlags(*o, false);
            if (o->overlapOnly) {
              const Format format = parseFormat(o->format);
              std::vector<exec::LaneOverlap> rows;
              for (int k = 2; k <= o->maxWorkers; k *= 2)
                rows.push_back(exec::measureLaneOverlap(k));
              printOverlap(rows, "threads (strata run's local communicator)", format);
              return 0;
            }
            std::optional<Network> net;
            if (!o->network.empty()) {
              net = networkArg(o->network, "--network");
              Scenario timed;  // one worker's passes at --batch: bounded like a run
              timed.workers = 1;
              timed.batchPerWorker = o->batch;
              exec::checkRun(*net, timed, exec::RunOptions{}, exec::RunPlacement::kThreads);
            }
            exec::CalibrationOptions co;
            co.name = std::filesystem::path(o->out).stem().string();
            co.network = net ? &*net : nullptr;
            co.batch = o->batch;
            co.maxWorkers = o->maxWorkers;
            co.sweeps = o->sweeps;
            co.device = exec::parseDevice(o->device, "--device");
            co.progress = [](const std::string& line) { std::cout << line << "\n" << std::flush; };
            exec::checkCalibrationOptions(co);
            // Beside --out until complete: a calibration that fails or is
            // interrupted leaves an earlier cluster file as it was.
            AtomicFile file(o->out, "--out");
            if (co.device == exec::Device::kCuda)
              std::cout << "calibrating GPU 0 (kernel tables through cuBLAS, cuDNN and "
                           "kernels/)\n";
            else if (net)
              std::cout << "calibrating this machine (kernel tables; roofline efficiencies "
                           "fitted on "
                        << net->name << "'s layers, batch " << o->batch << ")\n";
            else
              std::cout << "calibrating this machine (kernel tables, no network)\n";
            file.stream() << exec::calibrate(co);
            file.commit();
            std::cout << "wrote " << o->out << "\n";
            return 0;
          }};
}

}  // namespace strata::cli

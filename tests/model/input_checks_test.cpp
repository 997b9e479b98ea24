// Config and input validation that cannot be fooled (issue 9, "Hardening"):
// every class of bad input ends as one typed error naming the file, line and
// key (or the option), never as a silent default, a wrong answer, a crash or
// an allocation without end. One TEST_CASE per defect class; the configs are
// written to a temporary folder so each case shows its own YAML and lines.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "helpers.h"
#include "strata/model/checked.h"
#include "strata/model/cluster_loader.h"
#include "strata/model/collectives.h"
#include "strata/model/error.h"
#include "strata/model/estimate.h"
#include "strata/model/limits.h"
#include "strata/model/network_loader.h"
#include "strata/model/plan.h"
#include "strata/model/quantity_text.h"

using namespace strata;
using strata::test::presetCluster;
using strata::test::presetNetwork;

namespace {

namespace fs = std::filesystem;

// Writes `text` to <tmp>/strata-input-checks/<stem>.yaml (the stem is the
// config's name) and returns the path.
std::string tmpPath(const std::string& stem) {
  return (fs::temp_directory_path() / "strata-input-checks" / (stem + ".yaml")).string();
}
std::string writeYaml(const std::string& stem, const std::string& text) {
  fs::create_directories(fs::temp_directory_path() / "strata-input-checks");
  const auto path = tmpPath(stem);
  std::ofstream(path) << text;
  return path;
}

// `text` with the first occurrence of `from` replaced by `to` (which must exist).
std::string with(std::string text, const std::string& from, const std::string& to) {
  const auto at = text.find(from);
  REQUIRE(at != std::string::npos);
  return text.replace(at, from.size(), to);
}

// The message of the UserError `f` throws ("" when it throws none).
std::string userError(const std::function<void()>& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

// Lines: 1 name, 4 peak, 5 memory_bandwidth, 6 memory_capacity, 7
// memory_efficiency, 8 efficiency, 11 group, 13 bandwidth, 14 latency.
std::string clusterText(const std::string& name) {
  return "name: " + name +
         "\n"
         "device:\n"
         "  name: test device\n"
         "  peak: {fp32: 1 TFLOP/s}\n"
         "  memory_bandwidth: 100 GB/s\n"
         "  memory_capacity: 16 GB\n"
         "  memory_efficiency: 0.5\n"
         "  efficiency: {conv: 0.5, default: 0.5}\n"
         "topology:\n"
         "  - name: switch\n"
         "    group: 4\n"
         "    link:\n"
         "      bandwidth: 6 GB/s\n"
         "      latency: 10 us\n"
         "      duplex: full\n";
}

// A cluster named `name` whose text has `from` replaced by `to`; the error
// loading it ("" when it loads).
std::string clusterError(const std::string& name, const std::string& from, const std::string& to) {
  const auto p = writeYaml(name, with(clusterText(name), from, to));
  return userError([&] { loadCluster(p); });
}

// Lines: 2 input, 4 conv1, 5 relu1, 6 fc1, 7 loss.
std::string networkText(const std::string& name) {
  return "name: " + name +
         "\n"
         "input: {channels: 3, height: 8, width: 8}\n"
         "layers:\n"
         "  - {name: conv1, kind: conv, filters: 4, kernel: 3, pad: 1}\n"
         "  - {name: relu1, kind: relu}\n"
         "  - {name: fc1, kind: fc, outputs: 10}\n"
         "  - {name: loss, kind: softmax}\n";
}

std::string networkError(const std::string& name, const std::string& from, const std::string& to) {
  const auto p = writeYaml(name, with(networkText(name), from, to));
  return userError([&] { loadNetwork(p); });
}

// Sets the process-wide limits for one test and restores them after.
struct ScopedLimits {
  explicit ScopedLimits(const Limits& l) : saved(limits()) { setLimits(l); }
  ~ScopedLimits() { setLimits(saved); }
  Limits saved;
};

}  // namespace

TEST_CASE("the test configs load as written", "[input-checks]") {
  CHECK(clusterError("ok-cluster", "latency: 10 us", "latency: 10 us").empty());
  CHECK(networkError("ok-net", "pad: 1", "pad: 1").empty());
}

// ---- class 1: a quantity without its unit -------------------------------------

TEST_CASE("a bare number for a quantity key is an error naming file, line, key and units",
          "[input-checks][units]") {
  // The user's case: `latency: 5` was 5 seconds.
  CHECK(clusterError("bare-latency", "latency: 10 us", "latency: 5") ==
        tmpPath("bare-latency") +
            ":14: topology[0].link.latency: needs a unit: a time (s, ms, us, ns), got '5'");
  CHECK(clusterError("bare-bandwidth", "bandwidth: 6 GB/s", "bandwidth: 6e9") ==
        tmpPath("bare-bandwidth") +
            ":13: topology[0].link.bandwidth: needs a unit: a bandwidth (B/s, KB/s, MB/s, GB/s, "
            "TB/s, KiB/s, MiB/s, GiB/s, Mb/s, Gb/s, Mbit/s, Gbit/s), got '6e9'");
  CHECK(clusterError("bare-capacity", "memory_capacity: 16 GB", "memory_capacity: 16000000000") ==
        tmpPath("bare-capacity") +
            ":6: device.memory_capacity: needs a unit: a size (B, KB, MB, GB, TB, KiB, MiB, GiB, "
            "TiB), got '16000000000'");
  CHECK(clusterError("bare-peak", "{fp32: 1 TFLOP/s}", "{fp32: 1e12}") ==
        tmpPath("bare-peak") +
            ":4: device.peak.fp32: needs a unit: a compute rate (FLOP/s, GFLOP/s, TFLOP/s, "
            "PFLOP/s), got '1e12'");
  // A sharing row's communication rate is a bandwidth.
  const std::string eff = "  efficiency: {conv: 0.5, default: 0.5}\n";
  const std::string row =
      "  sharing:\n    - {workers: 2, speed: 0.9, overlap_compute_speed: 0.6, "
      "overlap_comm_speed: 0.5, overlap_comm_rate: ";
  CHECK(clusterError("comm-rate", eff, eff + row + "3.3 GB/s}\n").empty());
  CHECK(clusterError("bare-comm-rate", eff, eff + row + "3.3e9}\n") ==
        tmpPath("bare-comm-rate") +
            ":10: device.sharing[0].overlap_comm_rate: needs a unit: a bandwidth (B/s, KB/s, "
            "MB/s, GB/s, TB/s, KiB/s, MiB/s, GiB/s, Mb/s, Gb/s, Mbit/s, Gbit/s), got '3.3e9'");
  // memory_speed_by_size: sizes with units, increasing, beside memory_speed.
  const std::string mem = "  sharing:\n    - {workers: 2, speed: 0.9, memory_speed: 0.5, ";
  CHECK(clusterError("by-size", eff,
                     eff + mem + "memory_speed_by_size: {256 KiB: 1.0, 16 MiB: 0.5}}\n")
            .empty());
  CHECK(clusterError("by-size-bare", eff,
                     eff + mem + "memory_speed_by_size: {262144: 1.0, 16 MiB: 0.5}}\n")
            .find("'262144' is not a size with its unit") != std::string::npos);
  CHECK(clusterError("by-size-order", eff,
                     eff + mem + "memory_speed_by_size: {16 MiB: 0.5, 256 KiB: 1.0}}\n")
            .find("sizes must be positive and increase") != std::string::npos);
  // 0 is 0 in every unit: a bare 0 stays allowed where 0 is.
  CHECK(clusterError("zero-latency", "latency: 10 us", "latency: 0").empty());
  // A key whose name says the unit takes a bare number: `bytes:` of a table.
  CHECK(clusterError("table-bytes", "      duplex: full\n",
                     "      duplex: full\n      bandwidth_table:\n"
                     "        - {bytes: 1024, bandwidth: 1 GB/s}\n"
                     "        - {bytes: 1 MiB, bandwidth: 5 GB/s}\n")
            .empty());
}

TEST_CASE("overlap_comm_speed_by_duty loads and every mistake names file, line and key",
          "[input-checks][duty]") {
  const std::string eff = "  efficiency: {conv: 0.5, default: 0.5}\n";
  const std::string row =
      "  sharing:\n    - {workers: 1, speed: 1.0, overlap_comm_speed: 1.0}\n"
      "    - {workers: 2, speed: 0.9, overlap_comm_speed: 0.4, ";
  auto curveError = [&](const std::string& name, const std::string& curve) {
    return clusterError(name, eff, eff + row + "overlap_comm_speed_by_duty: " + curve + "}\n");
  };
  // Round trip: the points as written, 1 at duty 0, overlap_comm_speed at 1.
  const std::string good = "[[0, 1.0], [0.25, 0.95], [0.5, 0.8], [0.75, 0.6], [1, 0.4]]";
  REQUIRE(curveError("duty-ok", good).empty());
  const auto cl = loadCluster(
      writeYaml("duty-ok", with(clusterText("duty-ok"), eff,
                                eff + row + "overlap_comm_speed_by_duty: " + good + "}\n")));
  REQUIRE(cl.device.overlapCommByDuty.size() == 1);
  CHECK(cl.device.overlapCommByDuty[0].first == 2);
  const std::vector<std::pair<double, double>> points{
      {0, 1.0}, {0.25, 0.95}, {0.5, 0.8}, {0.75, 0.6}, {1, 0.4}};
  CHECK(cl.device.overlapCommByDuty[0].second == points);
  // Linear in duty between the points: 0.625 is halfway from 0.8 to 0.6.
  CHECK(cl.device.overlapCommSpeedAt(2, 0.625) == Approx(0.7));
  CHECK(cl.device.overlapCommSpeedAt(2, 1.0) == 0.4);
  CHECK(cl.device.overlapCommSpeedAt(2, 0.0) == 1.0);
  // One worker is never slowed.
  CHECK(cl.device.overlapCommSpeedAt(1, 0.5) == 1.0);
  // Points need not reach 0 or 1: (0, 1) and (1, overlap_comm_speed) are the
  // ends; 0.25 is halfway from 1 to the 0.5 point (0.8): 0.9; 0.75 is halfway
  // from 0.8 to 0.4: 0.6.
  const auto mid = loadCluster(
      writeYaml("duty-mid", with(clusterText("duty-mid"), eff,
                                 eff + row + "overlap_comm_speed_by_duty: [[0.5, 0.8]]}\n")));
  CHECK(mid.device.overlapCommSpeedAt(2, 0.25) == Approx(0.9));
  CHECK(mid.device.overlapCommSpeedAt(2, 0.75) == Approx(0.6));
  // Without the key: the saturated point while compute runs, 1 while it does
  // not, averaged: 1 - d (1 - 0.4); at 0.5: 0.7.
  const auto plain = loadCluster(writeYaml(
      "duty-none", with(clusterText("duty-none"), eff, eff + row + "lane_handoff: 10 us}\n")));
  CHECK_FALSE(plain.device.hasOverlapCommCurve());
  CHECK(plain.device.overlapCommSpeedAt(2, 0.5) == Approx(0.7));
  CHECK(plain.device.overlapCommSpeedAt(2, 1.0) == 0.4);

  const std::string at = ":11: device.sharing[1].overlap_comm_speed_by_duty";
  CHECK(curveError("duty-order", "[[0.5, 0.8], [0.25, 0.9]]") ==
        tmpPath("duty-order") + at + "[1][0]: duties must increase strictly along the list");
  CHECK(curveError("duty-equal", "[[0.5, 0.8], [0.5, 0.7]]") ==
        tmpPath("duty-equal") + at + "[1][0]: duties must increase strictly along the list");
  CHECK(curveError("duty-range", "[[1.5, 0.8]]").find(at + "[0][0]: must be in [0, 1]") !=
        std::string::npos);
  CHECK(curveError("duty-negative", "[[-0.1, 0.8]]").find(at + "[0][0]: must be in [0, 1]") !=
        std::string::npos);
  CHECK(curveError("duty-speed-zero", "[[0.5, 0]]") ==
        tmpPath("duty-speed-zero") + at +
            "[0][1]: must be a speed relative to the lane alone in (0, 1], got 0");
  CHECK(curveError("duty-speed-big", "[[0.5, 1.2]]") ==
        tmpPath("duty-speed-big") + at +
            "[0][1]: must be a speed relative to the lane alone in (0, 1], got 1.2");
  CHECK(curveError("duty-nan", "[[0.5, .nan]]").find(at + "[0][1]") != std::string::npos);
  CHECK(curveError("duty-inf", "[[0.5, .inf]]").find(at + "[0][1]") != std::string::npos);
  CHECK(curveError("duty-zero", "[[0, 0.9]]") ==
        tmpPath("duty-zero") + at +
            "[0][1]: at duty 0 the compute lane is idle: the lane runs alone, speed 1");
  CHECK(curveError("duty-one", "[[1, 0.5]]") ==
        tmpPath("duty-one") + at +
            "[0][1]: at duty 1 the speed is the row's overlap_comm_speed (both lanes saturated), "
            "got 0.5");
  CHECK(curveError("duty-pair", "[[0.5, 0.8, 0.7]]") ==
        tmpPath("duty-pair") + at + "[0]: must be a [duty, speed] pair, e.g. [0.5, 0.8]");
  CHECK(curveError("duty-scalar", "0.5") ==
        tmpPath("duty-scalar") + at +
            ": must be a list of [duty, speed] pairs, e.g. [[0, 1.0], [0.5, 0.8], [1, 0.44]]");
  CHECK(curveError("duty-empty", "[]") ==
        tmpPath("duty-empty") + at + ": needs at least one [duty, speed] pair");
  CHECK(clusterError("duty-alone", eff,
                     eff + "  sharing:\n    - {workers: 2, speed: 0.9, "
                           "overlap_comm_speed_by_duty: [[0.5, 0.8]]}\n") ==
        tmpPath("duty-alone") +
            ":10: device.sharing[0].overlap_comm_speed_by_duty: needs overlap_comm_speed in the "
            "same row (the speed at duty 1)");
}

TEST_CASE("experiment sizes need their unit, 0 alone means off", "[input-checks][units]") {
  const std::string base =
      "name: NAME\nnetwork: tiny-cnn\ncluster: localhost-cpu\nstrategies: [ring]\n"
      "workers: [2]\nbatch: 8\noptions:\n  segment: 1 MiB\n  bucket: 0\n";
  const auto bare =
      writeYaml("bare-segment", with(with(base, "NAME", "bare-segment"), "1 MiB", "4"));
  CHECK(userError([&] { loadExperiment(bare); }) ==
        bare +
            ":8: options.segment: needs a unit: a size (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB), "
            "got '4'");
  const auto ok = writeYaml("off-bucket", with(base, "NAME", "off-bucket"));
  const auto ex = loadExperiment(ok);
  CHECK(ex.options.segment.value() == 1048576.0);
  CHECK(ex.options.bucket.value() == 0.0);
}

// ---- class 2: numbers outside their physical range ----------------------------

TEST_CASE("denormal, infinite, NaN, hexadecimal and out-of-range numbers are rejected",
          "[input-checks][ranges]") {
  // The user's case: 1e-320 B/s passed "positive" and ended in an internal error.
  CHECK(clusterError("denormal-bw", "bandwidth: 6 GB/s", "bandwidth: 1e-320 B/s") ==
        tmpPath("denormal-bw") +
            ":13: topology[0].link.bandwidth: is too small to compute with (a denormal number), "
            "got '1e-320 B/s'");
  CHECK_THAT(clusterError("slow-bw", "bandwidth: 6 GB/s", "bandwidth: 0.5 B/s"),
             Catch::StartsWith(tmpPath("slow-bw") +
                               ":13: topology[0].link.bandwidth: is outside the range of a "
                               "bandwidth, 1.00 B/s .. 1000 TB/s") &&
                 Catch::EndsWith("got '0.5 B/s'"));
  CHECK_THAT(clusterError("fast-bw", "bandwidth: 6 GB/s", "bandwidth: 2 PB/s"),
             Catch::Contains("unknown unit 'PB/s'"));
  CHECK_THAT(clusterError("fast-bw2", "bandwidth: 6 GB/s", "bandwidth: 2000 TB/s"),
             Catch::Contains("is outside the range of a bandwidth"));
  CHECK_THAT(clusterError("inf-bw", "bandwidth: 6 GB/s", "bandwidth: inf GB/s"),
             Catch::Equals(tmpPath("inf-bw") +
                           ":13: topology[0].link.bandwidth: must be a finite number, got "
                           "'inf GB/s'"));
  CHECK_THAT(clusterError("nan-latency", "latency: 10 us", "latency: nan us"),
             Catch::Contains("topology[0].link.latency: must be a finite number"));
  CHECK_THAT(clusterError("huge-capacity", "memory_capacity: 16 GB", "memory_capacity: 1e400 B"),
             Catch::Contains("device.memory_capacity: is out of range"));
  CHECK_THAT(clusterError("hex-capacity", "memory_capacity: 16 GB", "memory_capacity: 0x10 GB"),
             Catch::Contains("device.memory_capacity: is hexadecimal (write a decimal number), "
                             "got '0x10 GB'"));
  CHECK_THAT(clusterError("negative-latency", "latency: 10 us", "latency: -5 us"),
             Catch::Contains("topology[0].link.latency: must not be negative, got '-5 us'"));
  CHECK_THAT(clusterError("long-latency", "latency: 10 us", "latency: 2e6 s"),
             Catch::Contains("is outside the range of a time"));
  CHECK_THAT(clusterError("exa-peak", "{fp32: 1 TFLOP/s}", "{fp32: 2000 PFLOP/s}"),
             Catch::Contains("device.peak.fp32: is outside the range of a compute rate"));
  CHECK_THAT(clusterError("tiny-efficiency", "memory_efficiency: 0.5", "memory_efficiency: 1e-9"),
             Catch::Contains("device.memory_efficiency: is below 1e-06"));
  CHECK_THAT(clusterError("denormal-efficiency", "{conv: 0.5,", "{conv: 1e-310,"),
             Catch::Contains("device.efficiency.conv: is too small to compute with"));
  CHECK_THAT(clusterError("inf-efficiency", "{conv: 0.5,", "{conv: .inf,"),
             Catch::Contains("device.efficiency.conv: must be a number"));
  // A dropout rate is a dimensionless number: finite and normal too.
  CHECK_THAT(networkError("nan-dropout", "{name: relu1, kind: relu}",
                          "{name: drop1, kind: dropout, rate: nan}"),
             Catch::Contains(":5: layers[1].rate: must be a finite number, got 'nan'"));
}

TEST_CASE("a size that is not exactly 0 but rounds to 0 bytes is an error",
          "[input-checks][ranges]") {
  const std::string base =
      "name: NAME\nnetwork: tiny-cnn\ncluster: localhost-cpu\nstrategies: [ring]\n"
      "workers: [2]\nbatch: 8\noptions:\n  segment: 0.000001 B\n";
  const auto path = writeYaml("sub-byte", with(base, "NAME", "sub-byte"));
  CHECK(userError([&] { loadExperiment(path); }) ==
        path +
            ":8: options.segment: is less than one byte (it would round to 0; write 0 where 0 is "
            "meant), got '0.000001 B'");
  // Through the API: the scenario check refuses what a loader would have.
  Scenario sc;
  sc.options.segment = Bytes(1e-6);
  CHECK(userError([&] { checkScenario(presetNetwork("tiny-cnn"), sc); }) ==
        "--segment: 1e-06 B is less than one byte (it would round to 0, which means off); write 0 "
        "for off or at least 1 B");
  sc.options.segment = Bytes(0);
  sc.options.bucket = Bytes(std::nan(""));
  CHECK_THAT(userError([&] { checkScenario(presetNetwork("tiny-cnn"), sc); }),
             Catch::StartsWith("--bucket: must be a size of at least 1 B"));
}

TEST_CASE("quantity text: every check, with the reason", "[input-checks][units]") {
  auto error = [](const char* text, QuantityKind kind) { return readQuantity(text, kind).error; };
  CHECK(*parseQuantity("1.5 us", QuantityKind::kTime) == Approx(1.5e-6));
  CHECK(*parseQuantity("0", QuantityKind::kBytes) == 0.0);
  CHECK(*parseQuantity("-0", QuantityKind::kTime) == 0.0);
  CHECK(*parseQuantity("1e9", QuantityKind::kBandwidth, UnitRule::kImplied) == 1e9);
  CHECK(error("5", QuantityKind::kTime) == "needs a unit: a time (s, ms, us, ns)");
  CHECK(error("1e-320 B/s", QuantityKind::kBandwidth) ==
        "is too small to compute with (a denormal number)");
  CHECK(error("1e400", QuantityKind::kBytes) ==
        "is out of range (too large or too small for a number)");
  CHECK(error("1e300 TB", QuantityKind::kBytes) == "is out of range (too large for a number)");
  CHECK(error("inf", QuantityKind::kTime) == "must be a finite number");
  CHECK(error("nan s", QuantityKind::kTime) == "must be a finite number");
  CHECK(error("0x1p3 s", QuantityKind::kTime) == "is hexadecimal (write a decimal number)");
  CHECK(error("fast", QuantityKind::kTime) == "is not a number");
  CHECK(error("", QuantityKind::kTime) == "is empty");
  CHECK(error("0.5 B", QuantityKind::kBytes) ==
        "is less than one byte (it would round to 0; write 0 where 0 is meant)");
  CHECK(error("9 PiB", QuantityKind::kBytes).empty() == false);  // PiB is no unit of strata's
  CHECK(error("1e16 B", QuantityKind::kBytes).find("2^53") != std::string::npos);
  CHECK(error("1 TFLOP/s", QuantityKind::kTime) ==
        "unknown unit 'TFLOP/s' for a time (s, ms, us, ns)");
}

TEST_CASE("command-line values: sizes, times and counts", "[input-checks][options]") {
  CHECK(parseSizeOption("4MiB", "--segment", true).value() == 4194304.0);
  CHECK(parseSizeOption("0", "--segment", true).value() == 0.0);
  // The user's cases: `--segment 4` was 4 bytes, `--segment 0.000001B` 0 bytes.
  CHECK(userError([] { parseSizeOption("4", "--segment", true); }) ==
        "--segment: needs a unit: a size (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB), got '4'; e.g. "
        "1MiB, or 0 for off");
  CHECK(userError([] { parseSizeOption("0.000001B", "--segment", true); }) ==
        "--segment: is less than one byte (it would round to 0; write 0 where 0 is meant), got "
        "'0.000001B'; e.g. 1MiB, or 0 for off");
  CHECK(userError([] { parseSizeOption("0", "--bucket", false); }) ==
        "--bucket: must be at least 1 B, got '0'; e.g. 1MiB");
  CHECK(parseTimeOption("30s", "--timeout").value() == 30.0);
  CHECK(userError([] { parseTimeOption("30", "--timeout"); }) ==
        "--timeout: needs a unit: a time (s, ms, us, ns), got '30'; e.g. 30s");
  CHECK(userError([] { parseTimeOption("0", "--timeout"); }) ==
        "--timeout: must be a positive time, got '0'; e.g. 30s");
  CHECK(parseCountOption("2147483647", "--batch") == 2147483647);
  CHECK(userError([] { parseCountOption("2147483648", "--batch"); }) ==
        "--batch: is too large: at most 2147483647, got '2147483648'");
  CHECK(userError([] { parseCountOption("99999999999999999999999", "--batch"); }) ==
        "--batch: is too large: at most 2147483647, got '99999999999999999999999'");
  CHECK(userError([] { parseCountOption("0", "--batch"); }) ==
        "--batch: must be a positive integer, got '0'");
  for (const char* bad : {"-3", "+3", "1e3", "0x10", "3.0", " 3", ""})
    CHECK_THAT(userError([&] { parseCountOption(bad, "--workers"); }),
               Catch::StartsWith("--workers: must be a positive integer, got '"));
  CHECK(parseCountListOption("1,2,4,8", "--workers") == std::vector<int>{1, 2, 4, 8});
  CHECK(userError([] { parseCountListOption("1,,2", "--workers"); }) ==
        "--workers: must be a positive integer, got '' in '1,,2'");
  CHECK(userError([] { parseCountListOption("8,100", "--workers", 64); }) ==
        "--workers: is too large: at most 64, got '100' in '8,100'");
}

// ---- class 3: keys left empty --------------------------------------------------

TEST_CASE("a key left empty is an error, never its default", "[input-checks][empty]") {
  // The user's cases: `pad:` and `rate: ~` silently took 0 and 0.5.
  CHECK(networkError("empty-pad", "pad: 1}", "pad: }") ==
        tmpPath("empty-pad") +
            ":4: layers[0].pad: has no value (write one, or leave the key out for its default)");
  CHECK(networkError("null-rate", "{name: relu1, kind: relu}",
                     "{name: drop1, kind: dropout, rate: ~}") ==
        tmpPath("null-rate") +
            ":5: layers[1].rate: has no value (write one, or leave the key out for its default)");
  // Block style: the line is the key's own.
  CHECK(networkError("empty-block", "  - {name: relu1, kind: relu}\n",
                     "  - name: relu1\n    kind: relu\n    input:\n") ==
        tmpPath("empty-block") +
            ":7: layers[1].input: has no value (write one, or leave the key out for its default)");
  CHECK(networkError("empty-name", "name: empty-name", "name: \"\"") ==
        tmpPath("empty-name") + ":1: name: must not be empty");
  CHECK(networkError("null-description", "input:", "description: null\ninput:") ==
        tmpPath("null-description") +
            ":2: description: has no value (write one, or leave the key out for its default)");
  CHECK(clusterError("null-peak", "{fp32: 1 TFLOP/s}", "{fp32: 1 TFLOP/s, fp16: ~}") ==
        tmpPath("null-peak") +
            ":4: device.peak.fp16: has no value (write one, or leave the key out for its default)");
  CHECK(clusterError("empty-latency", "latency: 10 us", "latency:") ==
        tmpPath("empty-latency") +
            ":14: topology[0].link.latency: has no value (write one, or leave the key out for its "
            "default)");
  CHECK(clusterError("empty-efficiency", "{conv: 0.5,", "{conv: ,") ==
        tmpPath("empty-efficiency") +
            ":8: device.efficiency.conv: has no value (write one, or leave the key out for its "
            "default)");
  const auto text = clusterText("empty-topology");
  const auto topoPath =
      writeYaml("empty-topology", text.substr(0, text.find("topology:")) + "topology:\n");
  CHECK(userError([&] { loadCluster(topoPath); }) ==
        topoPath + ":9: topology: has no value (write one, or leave the key out for its default)");
}

// ---- class 4: integer overflow of shapes, parameters and batches --------------

TEST_CASE("counts that overflow are config errors naming the network file and layer",
          "[input-checks][overflow]") {
  // The user's case: 1e9 channels x 1e9 height printed negative parameters.
  CHECK(networkError("huge-input", "{channels: 3, height: 8, width: 8}",
                     "{channels: 1000000000, height: 1000000000, width: 1}") ==
        tmpPath("huge-input") +
            ":2: input: 1000000000 x 1000000000 x 1 elements per example is over 2^53 = 9.01e+15 "
            "(the largest count strata computes with exactly)");
  // Fits as an input (1e9 elements), overflows as fc parameters (1e9 x 1e9 x 1e9).
  CHECK(networkError("huge-fc", "{name: fc1, kind: fc, outputs: 10}",
                     "{name: fc1, kind: fc, outputs: 1000000000}") == "");
  CHECK(networkError("huge-fc2", "{channels: 3, height: 8, width: 8}",
                     "{channels: 1000000000, height: 1, width: 1}") == "");
  const auto path =
      writeYaml("huge-conv", with(networkText("huge-conv"), "{channels: 3, height: 8, width: 8}",
                                  "{channels: 1000000000, height: 1000000, width: 1}"));
  CHECK(userError([&] { loadNetwork(path); }) ==
        path +
            ":4: layers[0]: multiply-accumulates of layer 'conv1' overflow: 4 x 1000000 x 1 x "
            "1000000000 x 3 x 3 = 3.6e+16, over 2^53 = 9.01e+15 (the largest count strata "
            "computes with exactly)");
  const auto fcPath =
      writeYaml("huge-fc4",
                "name: huge-fc4\ninput: {channels: 100000000, height: 1, width: 1}\n"
                "layers:\n  - {name: fc1, kind: fc, outputs: 100000000}\n");
  CHECK(userError([&] { loadNetwork(fcPath); }) ==
        fcPath +
            ":4: layers[0]: parameters of layer 'fc1' overflow: 100000000 x 1 x 1 x 100000000 = "
            "1e+16, over 2^53 = 9.01e+15 (the largest count strata computes with exactly)");
  // A pad of 1e9 on 8 x 8: two billion squared outputs.
  CHECK(networkError("huge-pad", "pad: 1}", "pad: 1000000000}") ==
        tmpPath("huge-pad") +
            ":4: layers[0]: output elements of layer 'conv1' overflow: 4 x 2000000006 x "
            "2000000006 = 1.6e+19, over 2^53 = 9.01e+15 (the largest count strata computes with "
            "exactly)");
  // A pad of 1e9 on a height of 1e9: an output height that does not fit an int.
  const auto padPath =
      writeYaml("huge-height",
                "name: huge-height\ninput: {channels: 1, height: 1000000000, width: 1}\n"
                "layers:\n  - {name: conv1, kind: conv, filters: 1, kernel: 1, pad: "
                "1000000000}\n");
  CHECK(userError([&] { loadNetwork(padPath); }) ==
        padPath +
            ":4: layers[0].kernel: output size 3000000000 (input 1000000000, pad 1000000000) is "
            "larger than 2147483647");
  // Integers beyond a billion, or beyond 64 bits, are too large; not a parse failure.
  CHECK(networkError("huge-int", "outputs: 10", "outputs: 99999999999999999999") ==
        tmpPath("huge-int") + ":6: layers[2].outputs: is too large: at most 1000000000, got " +
            "99999999999999999999");
  CHECK_THAT(networkError("big-int", "outputs: 10", "outputs: 2000000000"),
             Catch::EndsWith("layers[2].outputs: is too large: at most 1000000000, got "
                             "2000000000"));
  // A billion bottleneck blocks are refused before any is expanded.
  CHECK_THAT(networkError("huge-repeat", "{name: relu1, kind: relu}",
                          "{name: res, kind: bottleneck, mid: 2, outputs: 4, repeat: 1000000000}"),
             Catch::Contains(":5: layers[1].repeat: 1000000000 blocks would make more than 100000 "
                             "layers"));
  // The same layer, totals checked: sums of per-layer parameters.
  int64_t sum = 0;
  CHECK_FALSE(checkedAdd(kMaxExactCount, 1, sum, kMaxExactCount));
  CHECK_FALSE(checkedMul(int64_t{1} << 40, int64_t{1} << 30, sum));
  CHECK(checkedMul(3, 5, sum));
  CHECK(sum == 15);
}

TEST_CASE("a global batch K x b over 2^31 - 1 is an error naming --batch",
          "[input-checks][overflow]") {
  // The user's case: `-b 2147483647 -k 2` printed "global batch -2".
  CHECK(globalBatch(2, 1'073'741'823) == 2'147'483'646);
  CHECK(userError([] { globalBatch(2, 2'147'483'647); }) ==
        "--batch: 2147483647 examples per worker x 2 workers is a global batch over 2147483647 "
        "examples; lower --batch or --workers");
  Scenario sc;
  sc.workers = 2;
  sc.batchPerWorker = 2'147'483'647;
  const auto net = presetNetwork("tiny-cnn");
  CHECK_THAT(userError([&] { estimate(net, presetCluster("localhost-cpu"), sc); }),
             Catch::StartsWith("--batch: 2147483647 examples per worker x 2 workers"));
  CHECK_THAT(userError([&] { lowerToPlan(net, sc); }), Catch::StartsWith("--batch: "));
  // In an experiment: names the file, line and key.
  const auto path = writeYaml("huge-batch",
                              "name: huge-batch\nnetwork: tiny-cnn\ncluster: dgx-h100\n"
                              "strategies: [ring]\nworkers: [1, 3]\nbatch: 1000000000\n");
  CHECK(userError([&] { loadExperiment(path); }) ==
        path +
            ":6: batch: 1000000000 examples per worker x 3 workers is a global batch over "
            "2147483647 examples");
}

TEST_CASE("cluster sizes that overflow are refused", "[input-checks][overflow]") {
  // Three levels of a million: 1e18 devices do not fit an int worker id.
  const std::string text =
      "name: huge-cluster\ndevice:\n  name: d\n  peak: {fp32: 1 TFLOP/s}\n"
      "  memory_bandwidth: 100 GB/s\n  memory_capacity: 16 GB\n  memory_efficiency: 0.5\n"
      "  efficiency: {default: 0.5}\ntopology:\n"
      "  - {name: a, group: 1000000, link: {bandwidth: 1 GB/s, latency: 1 us}}\n"
      "  - {name: b, group: 1000000, link: {bandwidth: 1 GB/s, latency: 1 us}}\n"
      "  - {name: c, group: 1000000, link: {bandwidth: 1 GB/s, latency: 1 us}}\n";
  const auto path = writeYaml("huge-cluster", text);
  CHECK_THAT(userError([&] { loadCluster(path); }),
             Catch::StartsWith(path + ":11: topology[1].group: the cluster would hold more than "
                                      "2147483647 devices"));
  CHECK(clusterError("many-lanes", "duplex: full", "duplex: full\n      lanes: 1000000") ==
        tmpPath("many-lanes") +
            ":16: topology[0].link.lanes: at most 4096 parallel links per unit (the simulator "
            "keeps every lane's load), got 1000000");
}

TEST_CASE("a segment that cuts a transfer into more than 2^31 pieces is an error",
          "[input-checks][overflow]") {
  CHECK(segmentCount(Bytes(1e9), Bytes(1)) == 1'000'000'000);
  CHECK_THAT(userError([] { segmentCount(Bytes(1e12), Bytes(1)); }),
             Catch::StartsWith("--segment: segments of 1.00 B cut a 1.00 TB transfer into 1e+12 "
                               "pieces"));
}

// ---- class 5: resources bounded before allocating ------------------------------

TEST_CASE("the closed-form model refuses more workers than its limit, naming the override",
          "[input-checks][limits]") {
  const auto net = presetNetwork("resnet50");
  const auto cluster = presetCluster("dgx-h100");
  Scenario sc;
  sc.batchPerWorker = 1;
  // The user's case: K = 1e9 ended in std::bad_alloc.
  sc.workers = 1'000'000'000;
  CHECK(userError([&] { estimate(net, cluster, sc); }) ==
        "--workers: 1000000000 workers is over the model's limit of 131072 (it keeps a row per "
        "worker); use fewer workers, or raise the limit with --max-workers N (--allow-large lifts "
        "every limit)");
  sc.workers = 131'072;
  const auto est = estimate(net, cluster, sc);
  CHECK(est.workers.size() == 131'072);
  {
    Limits l;
    l.maxModelWorkers = 1000;
    ScopedLimits scoped(l);
    CHECK_THAT(userError([&] { estimate(net, cluster, sc); }),
               Catch::Contains("over the model's limit of 1000"));
  }
  CHECK(limits().maxModelWorkers == 131'072);
}

TEST_CASE("the plan's task count is known before lowering", "[input-checks][limits]") {
  for (const char* name : {"tiny-cnn", "alexnet-owt"}) {
    const auto net = presetNetwork(name);
    for (auto strategy : kAllStrategies)
      for (int k : {1, 2, 3, 5, 8})
        for (double segment : {0.0, 4194304.0, 65536.0})
          for (auto update : {FcUpdate::kStep, FcUpdate::kRound})
            for (auto sync : {AllreduceAlgorithm::kDirect, AllreduceAlgorithm::kRing,
                              AllreduceAlgorithm::kNaive, AllreduceAlgorithm::kHalvingDoubling}) {
              Scenario sc;
              sc.strategy = strategy;
              sc.workers = k;
              sc.batchPerWorker = 16;
              sc.options.segment = Bytes(segment);
              sc.options.fcUpdate = update;
              sc.options.convSync = sync;
              INFO(name << " " << toString(strategy) << " K=" << k << " segment " << segment << " "
                        << toString(update) << " " << toString(sync));
              const double actual = double(lowerToPlan(net, sc).tasks.size());
              const double estimated = estimatePlanTasks(net, sc);
              // Exact, except halving-doubling: log2 rounded up (3 tasks per exchange).
              CHECK(estimated >= actual);
              CHECK(estimated <= actual + (sync == AllreduceAlgorithm::kHalvingDoubling ? 3 : 0));
            }
  }
}

TEST_CASE("a plan over the task limit is refused before it is built", "[input-checks][limits]") {
  const auto net = presetNetwork("resnet50");
  Scenario sc;
  sc.strategy = Strategy::kRing;
  // The user's case: simulate -k 100000 grew to 5.9 GB with no output.
  sc.workers = 100'000;
  CHECK(userError([&] { lowerToPlan(net, sc); }) ==
        "--workers: the plan of resnet50 (ring, 100000 workers) would have about 4.69e+07 tasks, "
        "over the limit of 5000000 (about 14.1 GB of memory); use fewer workers, or raise the "
        "limit with --max-tasks N (--allow-large lifts every limit)");
  // Tiny segments make the plan large: the message names --segment.
  sc.workers = 8;
  sc.options.segment = Bytes(4);
  CHECK_THAT(userError([&] { lowerToPlan(net, sc); }),
             Catch::StartsWith("--segment: the plan of resnet50 (ring, 8 workers) would have "
                               "about ") &&
                 Catch::Contains("use larger segments than 4.00 B (or 0 for unsegmented "
                                 "transfers), or raise the limit with --max-tasks N"));
  // Raised, the same plan is built.
  sc.workers = 64;
  sc.options.segment = Bytes(4194304);
  {
    Limits l;
    l.maxPlanTasks = 1000;
    ScopedLimits scoped(l);
    CHECK_THAT(userError([&] { lowerToPlan(net, sc); }), Catch::Contains("over the limit of 1000"));
  }
  CHECK(lowerToPlan(net, sc).tasks.size() == size_t(estimatePlanTasks(net, sc)));
}

TEST_CASE("limits are clamped to their ceilings, 0 keeps the default", "[input-checks][limits]") {
  Limits big = largestLimits();
  big.maxModelWorkers = int64_t{1} << 40;
  {
    ScopedLimits scoped(big);
    CHECK(limits().maxModelWorkers == kCeilingModelWorkers);
    CHECK(limits().maxPlanTasks == kCeilingPlanTasks);
    CHECK(threadWorkerLimit(limits()) == kCeilingThreadWorkers);
  }
  Limits zero;
  zero.maxModelWorkers = 0;
  zero.maxPlanTasks = -5;
  {
    ScopedLimits scoped(zero);
    CHECK(limits().maxModelWorkers == 131'072);
    CHECK(limits().maxPlanTasks == 5'000'000);
    CHECK(threadWorkerLimit(limits()) >= 64);
  }
}

TEST_CASE("an experiment file sets the pipeline options, and refuses a bad one at its line",
          "[input-checks][pipeline]") {
  const std::string base =
      "name: NAME\nnetwork: tiny-gpt\ncluster: dgx-h100\nstrategies: [ring]\n"
      "workers: [4]\nbatch: 2\noptions:\n  pp: 2\n  microbatches: 4\n  schedule: interleaved\n"
      "  virtual_stages: 2\n";
  const auto ex = loadExperiment(writeYaml("pipeline-ok", with(base, "NAME", "pipeline-ok")));
  CHECK(ex.options.pp == 2);
  CHECK(ex.options.microbatches == 4);
  CHECK(ex.options.schedule == PipelineSchedule::kInterleaved);
  CHECK(ex.options.virtualStages == 2);
  const auto bad =
      writeYaml("pipeline-bad", with(with(base, "NAME", "pipeline-bad"), "pp: 2", "pp: 1.5"));
  CHECK(userError([&] { loadExperiment(bad); }) ==
        bad + ":8: options.pp: must be a whole number of pipeline stages in [1, 1024]");
  const auto schedule = writeYaml(
      "pipeline-schedule",
      with(with(base, "NAME", "pipeline-schedule"), "schedule: interleaved", "schedule: zigzag"));
  CHECK_THAT(
      userError([&] { loadExperiment(schedule); }),
      Catch::Contains(schedule + ":10: options.schedule: unknown pipeline schedule 'zigzag'"));
}

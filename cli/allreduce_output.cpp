// `strata allreduce`'s output: nccl-tests' columns (time, algbw, busbw,
// #wrong) per size and algorithm, as a table, JSON or CSV.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <optional>

#include "allreduce.h"

namespace strata::cli::allreduce {

std::string formatSize(double bytes) {
  constexpr std::array<std::pair<double, const char*>, 4> kUnits = {
      {{0x1p40, "TiB"}, {0x1p30, "GiB"}, {0x1p20, "MiB"}, {0x1p10, "KiB"}}};
  for (const auto& [unit, name] : kUnits) {
    if (bytes < unit)
      continue;
    if (std::fmod(bytes, unit) == 0)
      return fmt::format("{:.0f} {}", bytes / unit, name);
    return fmt::format("{:.2f} {}", bytes / unit, name);
  }
  return fmt::format("{:.0f} B", bytes);
}
std::string formatSize(std::size_t bytes) {
  return formatSize(double(bytes));
}

namespace {

// With one worker nothing crosses a link: the time is the call's own cost
// and a bandwidth (size over a near-zero time) would mean nothing, so there
// is none (printed "-", null in JSON, empty in CSV).
std::optional<double> algbwGBps(std::size_t bytes, const Cell& c, int workers) {
  if (workers < 2)
    return std::nullopt;
  return double(bytes) / c.seconds / 1e9;
}
// nccl-tests' bus bandwidth of an allreduce: each worker's link carries
// 2(K-1)/K of the buffer in a ring (docs: collectives.h, allReduceRing).
std::optional<double> busbwGBps(std::size_t bytes, const Cell& c, int workers) {
  const auto alg = algbwGBps(bytes, c, workers);
  if (!alg)
    return std::nullopt;
  return *alg * (2.0 * (workers - 1) / workers);
}

std::string gbpsText(std::optional<double> v) {
  return v ? fmt::format("{:.2f} GB/s", *v) : std::string("-");
}
nlohmann::ordered_json gbpsJson(std::optional<double> v) {
  return v ? nlohmann::ordered_json(*v) : nlohmann::ordered_json(nullptr);
}
std::string gbpsCsv(std::optional<double> v) {
  return v ? fmt::format("{:.9g}", *v) : std::string();
}

// The mean busbw over sizes of kAvgBusbwMinBytes and up; nullopt when no such
// size was measured.
std::optional<double> averageBusbw(const Setup& s, const Results& results, std::size_t column) {
  double sum = 0;
  int n = 0;
  for (std::size_t i = 0; i < s.sizes.size(); ++i) {
    const auto busbw = busbwGBps(s.sizes[i], results[column][i], s.workers);
    if (s.sizes[i] < kAvgBusbwMinBytes || !results[column][i].measured || !busbw)
      continue;
    sum += *busbw;
    ++n;
  }
  return n ? std::optional(sum / n) : std::nullopt;
}

std::string segmentText(const Setup& s) {
  return s.segmentElems == 0 ? std::string("one message per chunk (unsegmented)")
                             : "segments of " + formatSize(s.segmentElems * sizeof(float));
}

std::string transportOf(const Setup& s) {
  if (!s.mpi)
    return "threads";
  return s.device == exec::Device::kCuda ? "nccl" : "mpi";
}

void printTable(std::ostream& out, const Setup& s, const Results& results) {
  out << fmt::format(
      "allreduce: {} worker{} ({}, {}), float sum, {} iteration{} after {} warm-up, sizes {} .. "
      "{} x{}\n",
      s.workers, s.workers == 1 ? "" : "s",
      s.mpi ? (s.device == exec::Device::kCuda ? "MPI ranks over NCCL" : "MPI ranks") : "threads",
      exec::toString(s.device), s.iterations, s.iterations == 1 ? "" : "s", s.warmup,
      formatSize(s.sizes.front()), formatSize(s.sizes.back()), s.stepFactor);
  out << fmt::format("ring and naive: {}\n", segmentText(s));
  out << "time: median of the slowest worker's; algbw = size / time; busbw = algbw x 2(K-1)/K; "
         "#wrong: elements != the expected sum\n";
  for (const auto& note : s.notes)
    out << "note: " << note << "\n";

  // Cells as text, columns right-aligned; " | " between algorithms.
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> header = {"size", "count"};
  for (Algorithm a : s.algorithms)
    for (const std::string& h : {std::string(nameOf(a)) + ": time", std::string("algbw"),
                                 std::string("busbw"), std::string("#wrong")})
      header.push_back(h);
  rows.push_back(header);
  for (std::size_t i = 0; i < s.sizes.size(); ++i) {
    std::vector<std::string> row = {formatSize(s.sizes[i]),
                                    std::to_string(s.sizes[i] / sizeof(float))};
    for (std::size_t c = 0; c < s.algorithms.size(); ++c) {
      const Cell& cell = results[c][i];
      if (!cell.measured) {
        row.insert(row.end(), {"n/a", "", "", ""});
        continue;
      }
      row.push_back(fmt::format("{:.1f} us", cell.seconds * 1e6));
      row.push_back(gbpsText(algbwGBps(s.sizes[i], cell, s.workers)));
      row.push_back(gbpsText(busbwGBps(s.sizes[i], cell, s.workers)));
      row.push_back(std::to_string(cell.wrong));
    }
    rows.push_back(std::move(row));
  }
  std::vector<std::size_t> width(header.size(), 0);
  for (const auto& row : rows)
    for (std::size_t j = 0; j < row.size(); ++j)
      width[j] = std::max(width[j], row[j].size());
  for (const auto& row : rows) {
    std::string line;
    for (std::size_t j = 0; j < row.size(); ++j) {
      if (j > 0)
        line += j >= 2 && (j - 2) % 4 == 0 ? " | " : "  ";
      line += fmt::format("{:>{}}", row[j], width[j]);
    }
    out << line << "\n";
  }

  std::string average;
  for (std::size_t c = 0; c < s.algorithms.size(); ++c) {
    const auto avg = averageBusbw(s, results, c);
    average += fmt::format("{}{} {}", c ? ", " : "", nameOf(s.algorithms[c]),
                           avg ? fmt::format("{:.2f} GB/s", *avg) : std::string("n/a"));
  }
  if (s.workers < 2)
    out << "avg busbw: none (one worker: nothing crosses a link; the times are the calls' own "
           "cost)\n";
  else if (s.sizes.back() >= kAvgBusbwMinBytes)
    out << "avg busbw (sizes >= " << formatSize(kAvgBusbwMinBytes) << "): " << average << "\n";
  else
    out << "avg busbw: no size of " << formatSize(kAvgBusbwMinBytes)
        << " or more (it averages those; -e 16MiB or larger)\n";
}

void printJson(std::ostream& out, const Setup& s, const Results& results) {
  using nlohmann::ordered_json;
  ordered_json j;
  j["workers"] = s.workers;
  j["device"] = std::string(exec::toString(s.device));
  j["transport"] = transportOf(s);
  j["iterations"] = s.iterations;
  j["segment_bytes"] = s.segmentElems * sizeof(float);
  j["warmup"] = s.warmup;
  j["algorithms"] = ordered_json::array();
  for (Algorithm a : s.algorithms)
    j["algorithms"].push_back(nameOf(a));
  j["rows"] = ordered_json::array();
  for (std::size_t i = 0; i < s.sizes.size(); ++i) {
    ordered_json row;
    row["bytes"] = s.sizes[i];
    row["count"] = s.sizes[i] / sizeof(float);
    for (std::size_t c = 0; c < s.algorithms.size(); ++c) {
      const Cell& cell = results[c][i];
      if (!cell.measured) {
        row[nameOf(s.algorithms[c])] = nullptr;
        continue;
      }
      row[nameOf(s.algorithms[c])] = {
          {"time_us", cell.seconds * 1e6},
          {"algbw_GBps", gbpsJson(algbwGBps(s.sizes[i], cell, s.workers))},
          {"busbw_GBps", gbpsJson(busbwGBps(s.sizes[i], cell, s.workers))},
          {"wrong", cell.wrong}};
    }
    j["rows"].push_back(std::move(row));
  }
  j["avg_busbw_min_bytes"] = kAvgBusbwMinBytes;
  ordered_json average = ordered_json::object();
  for (std::size_t c = 0; c < s.algorithms.size(); ++c) {
    const auto avg = averageBusbw(s, results, c);
    average[nameOf(s.algorithms[c])] = avg ? ordered_json(*avg) : ordered_json(nullptr);
  }
  j["avg_busbw_GBps"] = std::move(average);
  j["notes"] = s.notes;
  out << j.dump() << "\n";
}

void printCsv(std::ostream& out, const Setup& s, const Results& results) {
  out << "bytes,count";
  for (Algorithm a : s.algorithms)
    out << fmt::format(",{0}_time_us,{0}_algbw_GBps,{0}_busbw_GBps,{0}_wrong", nameOf(a));
  out << "\n";
  for (std::size_t i = 0; i < s.sizes.size(); ++i) {
    out << s.sizes[i] << "," << s.sizes[i] / sizeof(float);
    for (std::size_t c = 0; c < s.algorithms.size(); ++c) {
      const Cell& cell = results[c][i];
      if (!cell.measured) {
        out << ",,,,";  // n/a: empty fields
        continue;
      }
      out << fmt::format(",{:.9g},{},{},{}", cell.seconds * 1e6,
                         gbpsCsv(algbwGBps(s.sizes[i], cell, s.workers)),
                         gbpsCsv(busbwGBps(s.sizes[i], cell, s.workers)), cell.wrong);
    }
    out << "\n";
  }
}

}  // namespace

void printResults(std::ostream& out, const Setup& s, const Results& results) {
  switch (s.format) {
    case Format::kTable:
      printTable(out, s, results);
      break;
    case Format::kJson:
      printJson(out, s, results);
      break;
    case Format::kCsv:
      printCsv(out, s, results);
      break;
  }
}

}  // namespace strata::cli::allreduce

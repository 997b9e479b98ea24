// A checker of the trace-event rules Perfetto's JSON importer applies, for the
// tests of strata's traces (Perfetto's trace_processor is not packaged for
// Debian). checkTrace() returns what breaks a rule, as one line each, and
// counts of what it saw; a trace Perfetto imports whole gives no problems.
//
// Rules (what Perfetto drops, misreads or refuses otherwise):
//   - the file is one JSON object with the array "traceEvents" and only keys
//     the importer knows (an unknown top-level key ends its reading);
//   - every event has "ph"; X events have integer "pid" >= 1 (pid 0 is the
//     idle process) and "tid", numeric "ts" and "dur" >= 0;
//   - times are whole nanoseconds: x * 1000 is within 0.2 of an integer N
//     (strata adds at most 0.1 ns so that truncation keeps N) and Perfetto's
//     reading, (int64)(x * 1000.0), gives N;
//   - no string value with a backslash before "ts" in an event (older
//     importers scan keys up to "ts" with a reader that refuses \u escapes);
//   - slices on one (pid, tid) are nested or disjoint, never partly
//     overlapping (the importer drops the misnested slice);
//   - every process with slices has a process_name, every thread a
//     thread_name (metadata "M" events with args.name);
//   - flows: each "s" id has exactly one "f" (with "bp":"e") and vice versa,
//     with the same cat and name; "s" is read before "f" (smaller ts, or the
//     same ts earlier in the file); each lies inside a slice of its thread
//     (start <= ts < end);
//   - args: a number with an integral value is a JSON integer (no 4.71859e+06
//     for bytes).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace strata::test {

struct TraceCheck {
  std::vector<std::string> problems;  // at most kMaxProblems, then a count
  size_t slices = 0;                  // X events
  size_t flows = 0;                   // matched s/f pairs
  std::set<int64_t> pids;             // of X events
  std::map<std::pair<int64_t, int64_t>, std::string> threadNames;  // (pid, tid) -> name
  std::map<int64_t, std::string> processNames;
  nlohmann::json otherData;
  bool ok() const { return problems.empty(); }
};

namespace detail {

struct CheckState {
  TraceCheck result;
  size_t problemCount = 0;
  static constexpr size_t kMaxProblems = 20;
  void problem(const std::string& what) {
    if (problemCount++ < kMaxProblems)
      result.problems.push_back(what);
    else if (problemCount == kMaxProblems + 1)
      result.problems.push_back("(more problems left out)");
  }
};

// Whole nanoseconds of a trace time in microseconds; false (and a problem)
// when it is not one.
inline bool nanoseconds(CheckState& st, const nlohmann::ordered_json& v, const char* key,
                        size_t index, int64_t& ns) {
  if (!v.is_number()) {
    st.problem("event " + std::to_string(index) + ": \"" + key + "\" is not a number");
    return false;
  }
  const double x = v.get<double>();
  const double scaled = x * 1000.0;
  const auto n = static_cast<int64_t>(std::llround(scaled));
  if (std::fabs(scaled - static_cast<double>(n)) > 0.2) {
    st.problem("event " + std::to_string(index) + ": \"" + key + "\" " + v.dump() +
               " is not a whole number of nanoseconds");
    return false;
  }
  if (static_cast<int64_t>(scaled) != n) {
    st.problem("event " + std::to_string(index) + ": \"" + key + "\" " + v.dump() + " reads as " +
               std::to_string(static_cast<int64_t>(scaled)) + " ns in Perfetto, not " +
               std::to_string(n));
    return false;
  }
  ns = n;
  return true;
}

inline void checkArgs(CheckState& st, const nlohmann::ordered_json& args, size_t index,
                      const std::string& path) {
  for (auto it = args.begin(); it != args.end(); ++it) {
    const auto& v = it.value();
    if (v.is_object()) {
      checkArgs(st, v, index, path + it.key() + ".");
    } else if (v.is_number_float()) {
      const double x = v.get<double>();
      if (std::isfinite(x) && x == std::trunc(x) && std::fabs(x) < 9e18)
        st.problem("event " + std::to_string(index) + ": args." + path + it.key() + " = " +
                   v.dump() + " is integral but written as a float");
    }
  }
}

}  // namespace detail

inline TraceCheck checkTrace(const std::string& text) {
  using Json = nlohmann::ordered_json;
  detail::CheckState st;
  Json doc;
  try {
    doc = Json::parse(text);
  } catch (const std::exception& e) {
    st.problem(std::string("not valid JSON: ") + e.what());
    return st.result;
  }
  if (!doc.is_object() || !doc.contains("traceEvents") || !doc["traceEvents"].is_array()) {
    st.problem("not an object with a \"traceEvents\" array");
    return st.result;
  }
  static const std::set<std::string> kTopKeys = {"traceEvents", "otherData", "metadata",
                                                 "systemTraceEvents", "displayTimeUnit"};
  for (auto it = doc.begin(); it != doc.end(); ++it)
    if (!kTopKeys.count(it.key()))
      st.problem("unknown top-level key \"" + it.key() + "\"");
  if (doc.contains("otherData"))
    st.result.otherData = nlohmann::json::parse(doc["otherData"].dump());

  struct Span {
    int64_t start, end;
  };
  struct FlowEnd {
    int64_t pid, tid, ts;
    size_t index;
    std::string cat, name;
  };
  std::map<std::pair<int64_t, int64_t>, std::vector<Span>> tracks;
  std::map<uint64_t, std::vector<FlowEnd>> starts, finishes;

  const auto& events = doc["traceEvents"];
  for (size_t i = 0; i < events.size(); ++i) {
    const auto& e = events[i];
    const std::string at = "event " + std::to_string(i);
    if (!e.is_object() || !e.contains("ph") || !e["ph"].is_string()) {
      st.problem(at + ": no \"ph\"");
      continue;
    }
    const std::string ph = e["ph"].get<std::string>();
    // Free text before "ts".
    for (auto it = e.begin(); it != e.end() && it.key() != "ts"; ++it)
      if (it.value().is_string() && it.value().get<std::string>().find('\\') != std::string::npos)
        st.problem(at + ": string with a backslash before \"ts\" (key " + it.key() + ")");
    const bool hasPid = e.contains("pid") && e["pid"].is_number_integer();
    const bool hasTid = e.contains("tid") && e["tid"].is_number_integer();
    const int64_t pid = hasPid ? e["pid"].get<int64_t>() : -1;
    const int64_t tid = hasTid ? e["tid"].get<int64_t>() : -1;
    if (ph == "M") {
      if (!e.contains("name") || !e["name"].is_string()) {
        st.problem(at + ": metadata without a name");
        continue;
      }
      const std::string name = e["name"].get<std::string>();
      if (name == "process_name" || name == "thread_name") {
        if (!e.contains("args") || !e["args"].contains("name") || !e["args"]["name"].is_string() ||
            e["args"]["name"].get<std::string>().empty()) {
          st.problem(at + ": " + name + " without args.name");
          continue;
        }
        const std::string value = e["args"]["name"].get<std::string>();
        if (!hasPid || pid < 1)
          st.problem(at + ": " + name + " with pid " + std::to_string(pid));
        if (name == "process_name")
          st.result.processNames[pid] = value;
        else if (!hasTid)
          st.problem(at + ": thread_name without a tid");
        else
          st.result.threadNames[{pid, tid}] = value;
      }
      continue;
    }
    if (ph == "X") {
      ++st.result.slices;
      if (!hasPid || !hasTid || pid < 1 || tid < 0) {
        st.problem(at + ": X event with pid " + std::to_string(pid) + ", tid " +
                   std::to_string(tid));
        continue;
      }
      st.result.pids.insert(pid);
      int64_t ts = 0, dur = 0;
      if (!e.contains("ts") || !e.contains("dur")) {
        st.problem(at + ": X event without ts or dur");
        continue;
      }
      if (!detail::nanoseconds(st, e["ts"], "ts", i, ts) ||
          !detail::nanoseconds(st, e["dur"], "dur", i, dur))
        continue;
      if (dur < 0) {
        st.problem(at + ": negative dur");
        continue;
      }
      tracks[{pid, tid}].push_back({ts, ts + dur});
      if (e.contains("args"))
        detail::checkArgs(st, e["args"], i, "");
      continue;
    }
    if (ph == "s" || ph == "f") {
      int64_t ts = 0;
      if (!hasPid || !hasTid || pid < 1 || !e.contains("ts") ||
          !detail::nanoseconds(st, e["ts"], "ts", i, ts)) {
        st.problem(at + ": flow event without pid >= 1, tid or ts");
        continue;
      }
      if (!e.contains("id") || !e["id"].is_number_unsigned()) {
        st.problem(at + ": flow event without an integer id");
        continue;
      }
      if (ph == "f" && (!e.contains("bp") || e["bp"] != "e"))
        st.problem(at + ": flow end without \"bp\":\"e\"");
      FlowEnd f{pid, tid, ts, i, e.value("cat", ""), e.value("name", "")};
      (ph == "s" ? starts : finishes)[e["id"].get<uint64_t>()].push_back(f);
      continue;
    }
  }

  // Slices on one thread: nested or disjoint.
  for (auto& [key, spans] : tracks) {
    std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
      return a.start != b.start ? a.start < b.start : a.end > b.end;
    });
    std::vector<Span> open;
    for (const auto& s : spans) {
      while (!open.empty() && open.back().end <= s.start)
        open.pop_back();
      if (!open.empty() && s.end > open.back().end) {
        st.problem("pid " + std::to_string(key.first) + " tid " + std::to_string(key.second) +
                   ": slice [" + std::to_string(s.start) + ", " + std::to_string(s.end) +
                   ") ns overlaps [" + std::to_string(open.back().start) + ", " +
                   std::to_string(open.back().end) + ") partly");
        continue;
      }
      open.push_back(s);
    }
    if (!st.result.threadNames.count(key))
      st.problem("pid " + std::to_string(key.first) + " tid " + std::to_string(key.second) +
                 ": slices but no thread_name");
  }
  for (int64_t pid : st.result.pids)
    if (!st.result.processNames.count(pid))
      st.problem("pid " + std::to_string(pid) + ": slices but no process_name");

  // Flows.
  auto inside = [&](const FlowEnd& f) {
    const auto it = tracks.find({f.pid, f.tid});
    if (it == tracks.end())
      return false;
    for (const auto& s : it->second)
      if (s.start <= f.ts && f.ts < s.end)
        return true;
    return false;
  };
  for (const auto& [id, ss] : starts) {
    const auto fit = finishes.find(id);
    if (ss.size() != 1 || fit == finishes.end() || fit->second.size() != 1) {
      st.problem("flow id " + std::to_string(id) + ": " + std::to_string(ss.size()) +
                 " start(s), " + std::to_string(fit == finishes.end() ? 0 : fit->second.size()) +
                 " end(s)");
      continue;
    }
    const auto& s = ss.front();
    const auto& f = fit->second.front();
    if (s.cat != f.cat || s.name != f.name)
      st.problem("flow id " + std::to_string(id) + ": start and end differ in cat or name");
    if (f.ts < s.ts || (f.ts == s.ts && f.index < s.index))
      st.problem("flow id " + std::to_string(id) + ": the end is read before the start");
    if (!inside(s))
      st.problem("flow id " + std::to_string(id) + ": start outside any slice of its thread");
    if (!inside(f))
      st.problem("flow id " + std::to_string(id) + ": end outside any slice of its thread");
    ++st.result.flows;
  }
  for (const auto& [id, fs] : finishes)
    if (!starts.count(id))
      st.problem("flow id " + std::to_string(id) + ": an end without a start");
  return st.result;
}

}  // namespace strata::test

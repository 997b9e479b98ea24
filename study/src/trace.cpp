// Chrome trace-event JSON (the format Perfetto and chrome://tracing open):
// https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU
//
// Written so that Perfetto's JSON importer keeps every event:
//   - slices on one (pid, tid) must nest or be disjoint, or the importer drops
//     the misnested one: times are integer nanoseconds (start and end rounded
//     each, dur = end - start) and slices that overlap in time on one lane go
//     to separate tracks (interval partitioning);
//   - it reads "ts" and "dur" as (int64)(x * 1000.0), truncating: the few
//     values whose nearest double falls just below the nanosecond get a
//     fourth decimal (detail::appendMicros);
//   - "ph", "pid", "tid", "ts" and "dur" come first in each event, before any
//     free text: older importers scan an event's keys up to "ts" with a reader
//     that rejects \u escapes;
//   - pid 0 is the idle process to it: workers are pids 1..K; tids are unique
//     across processes and never equal a pid;
//   - no "displayTimeUnit": some importer versions take it as the unit of ts.
// Hand-rolled text output (std::to_chars into one growing buffer, written in
// 1 MiB blocks) rather than a JSON library or fmt per event: traces of big runs
// have millions of events.
#include "strata/study/trace.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <functional>
#include <limits>
#include <ostream>
#include <queue>
#include <span>
#include <stdexcept>
#include <tuple>

#include "strata/model/error.h"
#include "strata/model/quantity_text.h"

namespace strata {

namespace detail {

namespace {

// Length of the valid UTF-8 sequence starting at s[i] (a byte >= 0x80), or 0
// when it is not one (overlong forms, surrogates and code points above
// U+10FFFF are invalid).
size_t utf8Length(std::string_view s, size_t i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  size_t len = 0;
  unsigned char lo = 0x80, hi = 0xbf;  // allowed range of the second byte
  if (b0 >= 0xc2 && b0 <= 0xdf) {
    len = 2;
  } else if (b0 >= 0xe0 && b0 <= 0xef) {
    len = 3;
    if (b0 == 0xe0)
      lo = 0xa0;
    if (b0 == 0xed)
      hi = 0x9f;
  } else if (b0 >= 0xf0 && b0 <= 0xf4) {
    len = 4;
    if (b0 == 0xf0)
      lo = 0x90;
    if (b0 == 0xf4)
      hi = 0x8f;
  } else {
    return 0;
  }
  if (i + len > s.size())
    return 0;
  const auto b1 = static_cast<unsigned char>(s[i + 1]);
  if (b1 < lo || b1 > hi)
    return 0;
  for (size_t k = 2; k < len; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if (b < 0x80 || b > 0xbf)
      return 0;
  }
  return len;
}

void appendUnsigned(std::string& out, uint64_t v) {
  char buf[24];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, r.ptr);
}

void appendSigned(std::string& out, int64_t v) {
  char buf[24];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, r.ptr);
}

// True when a reader that truncates x * 1000 would read the text "I.FFF" of
// `ns` nanoseconds as ns - 1. Readers get the double either nearest to the
// decimal (strtod: jsoncpp, nlohmann, browsers) or as I + FFF / 1000 summed in
// doubles (Perfetto's own number parser); both are checked.
bool truncationLosesNanosecond(uint64_t ns) {
  const double nearest = static_cast<double>(ns) / 1000.0;
  const double summed = static_cast<double>(ns / 1000) + static_cast<double>(ns % 1000) / 1000.0;
  return static_cast<uint64_t>(nearest * 1000.0) != ns ||
         static_cast<uint64_t>(summed * 1000.0) != ns;
}

}  // namespace

void appendJsonEscaped(std::string& out, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    // The longest run of printable ASCII that needs no escape, at once.
    size_t j = i;
    while (j < n) {
      const auto c = static_cast<unsigned char>(s[j]);
      if (c < 0x20 || c >= 0x7f || c == '"' || c == '\\')
        break;
      ++j;
    }
    out.append(s.data() + i, j - i);
    if (j == n)
      return;
    i = j;
    const auto c = static_cast<unsigned char>(s[i]);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
      ++i;
    } else if (c < 0x20 || c == 0x7f) {
      out += "\\u00";
      out += kHex[c >> 4];
      out += kHex[c & 15];
      ++i;
    } else if (const size_t len = utf8Length(s, i); len > 0) {
      out.append(s.data() + i, len);
      i += len;
    } else {
      out += "\\ufffd";
      ++i;
    }
  }
}

void appendMicros(std::string& out, int64_t ns) {
  const uint64_t a = ns < 0 ? uint64_t{0} - static_cast<uint64_t>(ns) : static_cast<uint64_t>(ns);
  if (ns < 0)
    out += '-';
  appendUnsigned(out, a / 1000);
  const auto f = static_cast<unsigned>(a % 1000);
  const char frac[4] = {'.', static_cast<char>('0' + f / 100), static_cast<char>('0' + f / 10 % 10),
                        static_cast<char>('0' + f % 10)};
  out.append(frac, 4);
  if (truncationLosesNanosecond(a))
    out += '1';
}

void appendNumber(std::string& out, double v) {
  if (!std::isfinite(v)) {
    out += "null";
    return;
  }
  if (v == std::trunc(v) && std::fabs(v) < 9.2e18) {
    appendSigned(out, static_cast<int64_t>(v));
    return;
  }
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);  // shortest that reads back exactly
  out.append(buf, r.ptr);
}

int64_t toNanoseconds(double seconds) {
  STRATA_ENFORCE(std::isfinite(seconds));
  return std::llround(seconds * 1e9);
}

}  // namespace detail

namespace {

using detail::appendJsonEscaped;
using detail::appendMicros;
using detail::appendNumber;
using detail::toNanoseconds;

constexpr int kLanes = 4;  // Track::kCompute .. Track::kReduce

const char* laneName(int lane) {
  switch (static_cast<Track>(lane)) {
    case Track::kCompute:
      return "compute";
    case Track::kSend:
      return "send";
    case Track::kReceive:
      return "receive";
    case Track::kReduce:
      return "reduce";
  }
  return "?";
}

// Average bytes per event as written (simulated resnet50 and alexnet-owt
// traces), for the size estimate.
constexpr uint64_t kBytesPerSlice = 175;
constexpr uint64_t kBytesPerLinkSlice = 85;
constexpr uint64_t kBytesPerFlowEvent = 85;
constexpr uint64_t kBytesPerMetadata = 75;

// One slice on its way out: integer-nanosecond times and its track.
struct Entry {
  int64_t start;
  int64_t end;
  uint32_t index;  // into Timeline::slices or Timeline::linkSlices
  uint32_t track;  // within its lane
};

// Gives each entry (sorted by start) the lowest-numbered track that is free at
// its start; returns the number of tracks. A zero-length slice holds its track
// for one nanosecond, so a slice starting at the same instant takes another
// track instead of nesting under it.
uint32_t assignTracks(std::span<Entry> lane) {
  using Busy = std::pair<int64_t, uint32_t>;  // (free from, track)
  std::priority_queue<Busy, std::vector<Busy>, std::greater<>> busy;
  std::priority_queue<uint32_t, std::vector<uint32_t>, std::greater<>> idle;
  uint32_t tracks = 0;
  for (auto& e : lane) {
    while (!busy.empty() && busy.top().first <= e.start) {
      idle.push(busy.top().second);
      busy.pop();
    }
    if (idle.empty()) {
      e.track = tracks++;
    } else {
      e.track = idle.top();
      idle.pop();
    }
    busy.push({std::max(e.end, e.start + 1), e.track});
  }
  return tracks;
}

// "0-7", "0,2,5-6", "all".
std::string describeRanks(const std::vector<int>& ranks) {
  if (ranks.empty())
    return "all";
  std::string s;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1)
      ++j;
    if (!s.empty())
      s += ',';
    s += std::to_string(ranks[i]);
    if (j > i)
      s += '-' + std::to_string(ranks[j]);
    i = j + 1;
  }
  return s;
}

// Which workers and channels a trace holds.
struct Selection {
  std::vector<char> worker;   // per worker
  std::vector<char> channel;  // per channel
  std::vector<int> workers;   // ascending
};

Selection select(const Plan& plan, const Timeline& timeline, const TraceOptions& options) {
  const int k = plan.scenario.workers;
  Selection sel;
  sel.worker.assign(static_cast<size_t>(k), options.ranks.empty() ? 1 : 0);
  int previous = -1;
  for (int r : options.ranks) {
    if (r < 0 || r >= k)
      throw OptionError(
          "--trace-ranks",
          fmt::format("rank {} is out of range: the step has {} worker{} (ranks 0-{})", r, k,
                      k == 1 ? "" : "s", k - 1));
    if (r <= previous)
      throw OptionError("--trace-ranks", fmt::format("ranks must be ascending without repeats; "
                                                     "{} follows {}",
                                                     r, previous));
    previous = r;
    sel.worker[static_cast<size_t>(r)] = 1;
  }
  for (int w = 0; w < k; ++w)
    if (sel.worker[static_cast<size_t>(w)])
      sel.workers.push_back(w);
  const size_t channels = timeline.channelNames.size();
  const bool knownUsers = timeline.channelUsers.size() == channels;
  sel.channel.assign(channels, options.ranks.empty() || !knownUsers ? 1 : 0);
  if (!options.ranks.empty() && knownUsers)
    for (size_t c = 0; c < channels; ++c) {
      const auto& u = timeline.channelUsers[c];
      for (int w = u.first + u.lane; w <= u.last && w < k; w += std::max(1, u.lanes))
        if (sel.worker[static_cast<size_t>(w)]) {
          sel.channel[c] = 1;
          break;
        }
    }
  return sel;
}

struct Counts {
  uint64_t slices = 0, linkSlices = 0, sends = 0, metadata = 0;
  uint64_t events() const { return slices + linkSlices + 2 * sends + metadata; }
  uint64_t bytes() const {
    return slices * kBytesPerSlice + linkSlices * kBytesPerLinkSlice +
           2 * sends * kBytesPerFlowEvent + metadata * kBytesPerMetadata;
  }
};

Counts count(const Plan& plan, const Timeline& timeline, const Selection& sel) {
  const int k = plan.scenario.workers;
  Counts n;
  std::vector<char> laneUsed(static_cast<size_t>(k) * kLanes, 0);
  for (const auto& s : timeline.slices) {
    if (!sel.worker[static_cast<size_t>(s.worker)])
      continue;
    ++n.slices;
    laneUsed[static_cast<size_t>(s.worker) * kLanes + static_cast<size_t>(s.track)] = 1;
    if (s.track == Track::kSend && s.peer >= 0 && s.peer < k &&
        sel.worker[static_cast<size_t>(s.peer)])
      ++n.sends;
  }
  std::vector<char> channelUsed(timeline.channelNames.size(), 0);
  for (const auto& l : timeline.linkSlices)
    if (sel.channel[static_cast<size_t>(l.channel)]) {
      ++n.linkSlices;
      channelUsed[static_cast<size_t>(l.channel)] = 1;
    }
  // process_name + process_sort_index per worker (and the links), thread_name
  // + thread_sort_index per track (one per used lane; extra tracks of
  // concurrent slices come on top).
  n.metadata = 2 * sel.workers.size();
  for (char used : laneUsed)
    n.metadata += used ? 2 : 0;
  for (char used : channelUsed)
    n.metadata += used ? 2 : 0;
  if (n.linkSlices > 0)
    n.metadata += 2;
  return n;
}

// The events of the Plan's slices and flows, from the Plan alone (no link
// slices: a lower bound of count()).
Counts countPlan(const Plan& plan, const Selection& sel) {
  const int k = plan.scenario.workers;
  Counts n;
  std::vector<char> laneUsed(static_cast<size_t>(k) * kLanes, 0);
  auto slice = [&](int w, Track lane) {
    ++n.slices;
    laneUsed[static_cast<size_t>(w) * kLanes + static_cast<size_t>(lane)] = 1;
  };
  // Workers only: a ps plan's dedicated servers (ranks K and up) are not traced.
  auto selected = [&](int w) { return w < k && sel.worker[static_cast<size_t>(w)] != 0; };
  std::vector<uint32_t> stamp(static_cast<size_t>(k + plan.servers), 0);
  uint32_t now = 0;
  for (const auto& t : plan.tasks) {
    switch (t.kind) {
      case TaskKind::kCompute:
      case TaskKind::kUpdate:
        if (selected(t.worker))
          slice(t.worker, Track::kCompute);
        break;
      case TaskKind::kTransfer:
        for (const auto& f : plan.flowsOf(t)) {
          if (selected(f.src))
            slice(f.src, Track::kSend);
          if (selected(f.dst))
            slice(f.dst, Track::kReceive);
          if (selected(f.src) && selected(f.dst))
            ++n.sends;
        }
        break;
      case TaskKind::kReduce:
        if (t.pattern == PatternKind::kGather) {  // summed at the root only
          if (selected(t.root))
            slice(t.root, Track::kReduce);
          break;
        }
        ++now;
        for (const auto& f : plan.flowsOf(t))
          if (stamp[static_cast<size_t>(f.dst)] != now) {
            stamp[static_cast<size_t>(f.dst)] = now;
            if (selected(f.dst))
              slice(f.dst, Track::kReduce);
          }
        break;
    }
  }
  n.metadata = 2 * sel.workers.size();
  for (char used : laneUsed)
    n.metadata += used ? 2 : 0;
  return n;
}

// Throws the limit's OptionError when `n` is over options.maxEvents.
void checkLimit(const Counts& n, const Selection& sel, const TraceOptions& options, int k,
                const char* atLeast) {
  if (options.maxEvents == 0 || n.events() <= options.maxEvents)
    return;
  const std::string who =
      options.ranks.empty()
          ? fmt::format("all {} workers", k)
          : fmt::format("the {} workers {}", sel.workers.size(), describeRanks(options.ranks));
  throw OptionError(
      "--trace",
      fmt::format("the trace of {} would hold {}{} events (about {}), more than the limit of {} "
                  "events; write fewer workers with --trace-ranks (e.g. --trace-ranks 0-{})",
                  who, atLeast, n.events(), formatBytes(Bytes(double(n.bytes()))),
                  options.maxEvents, std::min(k, 8) - 1));
}

// The events of one trace, appended to a buffer that goes out in blocks.
class Writer {
 public:
  explicit Writer(std::ostream& out) : out_(out) { b_.reserve(kBlock + (64 << 10)); }

  std::string& begin() {
    if (events_++ > 0)
      b_ += ",\n";
    return b_;
  }
  void end() {
    b_ += '}';
    if (b_.size() >= kBlock)
      flush();
  }
  std::string& raw() { return b_; }
  void flush() {
    out_.write(b_.data(), static_cast<std::streamsize>(b_.size()));
    b_.clear();
  }
  uint64_t events() const { return events_; }

  // {"ph":"M","pid":P[,"tid":T],"name":"NAME","args":{"KEY":
  std::string& metadata(uint32_t pid, uint32_t tid, const char* name, const char* key) {
    auto& b = begin();
    b += R"({"ph":"M","pid":)";
    appendUnsigned(b, pid);
    if (tid > 0) {
      b += R"(,"tid":)";
      appendUnsigned(b, tid);
    }
    b += R"(,"name":")";
    b += name;
    b += R"(","args":{")";
    b += key;
    b += "\":";
    return b;
  }
  void stringMetadata(uint32_t pid, uint32_t tid, const char* name, std::string_view value) {
    auto& b = metadata(pid, tid, name, "name");
    b += '"';
    appendJsonEscaped(b, value);
    b += "\"}";
    end();
  }
  void sortIndex(uint32_t pid, uint32_t tid, uint64_t index) {
    auto& b =
        metadata(pid, tid, tid > 0 ? "thread_sort_index" : "process_sort_index", "sort_index");
    appendUnsigned(b, index);
    b += '}';
    end();
  }
  // {"ph":"X","pid":P,"tid":T,"ts":..,"dur":..,   (the caller adds the rest)
  std::string& slice(uint32_t pid, uint32_t tid, int64_t start, int64_t end) {
    auto& b = begin();
    b += R"({"ph":"X","pid":)";
    appendUnsigned(b, pid);
    b += R"(,"tid":)";
    appendUnsigned(b, tid);
    b += R"(,"ts":)";
    appendMicros(b, start);
    b += R"(,"dur":)";
    appendMicros(b, end - start);
    return b;
  }
  void flow(char phase, uint32_t pid, uint32_t tid, int64_t ts, uint64_t id) {
    auto& b = begin();
    b += phase == 's' ? R"({"ph":"s","pid":)" : R"({"ph":"f","bp":"e","pid":)";
    appendUnsigned(b, pid);
    b += R"(,"tid":)";
    appendUnsigned(b, tid);
    b += R"(,"ts":)";
    appendMicros(b, ts);
    b += R"(,"cat":"flow","name":"transfer","id":)";
    appendUnsigned(b, id);
    end();
  }

  static void appendUnsigned(std::string& b, uint64_t v) {
    char buf[24];
    const auto r = std::to_chars(buf, buf + sizeof buf, v);
    b.append(buf, r.ptr);
  }

 private:
  static constexpr size_t kBlock = size_t{1} << 20;
  std::ostream& out_;
  std::string b_;
  uint64_t events_ = 0;
};

// Text of task names that does not depend on the slice, built once per layer
// and collective.
struct Names {
  std::vector<std::string> layer;       // escaped layer names
  std::vector<std::string> collective;  // escaped algorithm names
  std::vector<char> segmented;          // per collective: pipelined in segments
};

// "fwd conv1", "recompute h.1.attn", "update", "ring send step 3 seg 1 round
// 0", "ring sum step 3"; a pipeline's "fwd h.1.attn mb 2", "p2p send step 0
// mb 2" (its micro-batch).
void appendTaskName(std::string& b, const Names& names, const Task& t) {
  switch (t.kind) {
    case TaskKind::kCompute:
      b += t.recompute ? std::string_view("recompute") : toString(t.phase);
      b += ' ';
      b += names.layer[static_cast<size_t>(t.layer)];
      if (t.micro >= 0) {
        b += " mb ";
        appendNumber(b, t.micro);
      }
      return;
    case TaskKind::kUpdate:
      b += "update";
      return;
    case TaskKind::kReduce:
    case TaskKind::kTransfer: {
      const auto c = static_cast<size_t>(t.collective);
      b += names.collective[c];
      b += t.kind == TaskKind::kReduce ? " sum step " : " send step ";
      appendNumber(b, t.step);
      if (names.segmented[c]) {
        b += " seg ";
        appendNumber(b, t.segment);
      }
      if (t.round >= 0) {
        b += " round ";
        appendNumber(b, t.round);
      }
      if (t.micro >= 0) {
        b += " mb ";
        appendNumber(b, t.micro);
      }
      return;
    }
  }
}

}  // namespace

std::vector<int> parseRankList(std::string_view text, int workers, std::string_view option) {
  const std::string opt(option);
  auto trim = [](std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t'))
      s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t'))
      s.remove_suffix(1);
    return s;
  };
  auto rank = [&](std::string_view s, std::string_view item) {
    s = trim(s);
    int v = -1;
    const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
    if (s.empty() || r.ec != std::errc() || r.ptr != s.data() + s.size() || v < 0)
      throw OptionError(opt, fmt::format("'{}' is not a rank or a range of ranks (expected e.g. "
                                         "'0-7' or '0,2,5')",
                                         item));
    if (workers > 0 && v >= workers)
      throw OptionError(opt, fmt::format("rank {} is out of range: the step has {} worker{} "
                                         "(ranks 0-{})",
                                         v, workers, workers == 1 ? "" : "s", workers - 1));
    return v;
  };
  if (trim(text).empty())
    throw OptionError(opt, "empty rank list (expected e.g. '0-7' or '0,2,5')");
  std::vector<int> ranks;
  size_t pos = 0;
  while (true) {
    const size_t comma = text.find(',', pos);
    const auto item =
        trim(text.substr(pos, comma == std::string_view::npos ? text.npos : comma - pos));
    if (item.empty())
      throw OptionError(opt, fmt::format("empty item in rank list '{}'", text));
    const size_t dash = item.find('-');
    if (dash == std::string_view::npos) {
      ranks.push_back(rank(item, item));
    } else {
      const int a = rank(item.substr(0, dash), item);
      const int b = rank(item.substr(dash + 1), item);
      if (b < a)
        throw OptionError(opt, fmt::format("range '{}' ends before it starts", item));
      for (int r = a; r <= b; ++r)
        ranks.push_back(r);
    }
    if (comma == std::string_view::npos)
      break;
    pos = comma + 1;
  }
  std::sort(ranks.begin(), ranks.end());
  const auto twice = std::adjacent_find(ranks.begin(), ranks.end());
  if (twice != ranks.end())
    throw OptionError(opt, fmt::format("rank {} is listed twice in '{}'", *twice, text));
  return ranks;
}

TraceSize estimateTrace(const Plan& plan, const Timeline& timeline, const TraceOptions& options) {
  const auto n = count(plan, timeline, select(plan, timeline, options));
  return {n.events(), n.bytes()};
}

TraceSize checkTraceSize(const Plan& plan, const TraceOptions& options) {
  const Timeline none;
  const auto sel = select(plan, none, options);
  const auto n = countPlan(plan, sel);
  checkLimit(n, sel, options, plan.scenario.workers, "at least ");
  return {n.events(), n.bytes()};
}

void writeTrace(std::ostream& out, const Plan& plan, const Network& net,
                const StepEstimate& estimate, const Timeline& timeline,
                const TraceOptions& options) {
  const int k = plan.scenario.workers;
  // A timeline of another plan (another number of ps steps) would name the
  // wrong tasks, or none: a programming error, never a trace.
  for (const auto& s : timeline.slices)
    if (s.task >= plan.tasks.size() || s.worker < 0 || s.worker >= k)
      throw std::logic_error(fmt::format(
          "writeTrace: a slice of task {} on worker {} is not in the plan ({} tasks, {} workers)",
          s.task, s.worker, plan.tasks.size(), k));
  const auto sel = select(plan, timeline, options);
  const auto counted = count(plan, timeline, sel);
  checkLimit(counted, sel, options, k, "");

  // Slices per (worker, lane), in integer nanoseconds, sorted by start.
  const size_t groups = static_cast<size_t>(k) * kLanes;
  std::vector<uint32_t> groupBegin(groups + 1, 0);
  for (const auto& s : timeline.slices)
    if (sel.worker[static_cast<size_t>(s.worker)])
      ++groupBegin[static_cast<size_t>(s.worker) * kLanes + static_cast<size_t>(s.track) + 1];
  for (size_t g = 0; g < groups; ++g)
    groupBegin[g + 1] += groupBegin[g];
  std::vector<Entry> entries(groupBegin[groups]);
  {
    auto fill = groupBegin;
    for (size_t i = 0; i < timeline.slices.size(); ++i) {
      const auto& s = timeline.slices[i];
      if (!sel.worker[static_cast<size_t>(s.worker)])
        continue;
      const int64_t a = toNanoseconds(s.start);
      const int64_t e = std::max(a, toNanoseconds(s.end));
      entries[fill[static_cast<size_t>(s.worker) * kLanes + static_cast<size_t>(s.track)]++] = {
          a, e, static_cast<uint32_t>(i), 0};
    }
  }
  auto byStart = [](const Entry& x, const Entry& y) {
    return x.start != y.start ? x.start < y.start : x.index < y.index;
  };
  std::vector<uint32_t> tracks(groups, 0);
  for (size_t g = 0; g < groups; ++g) {
    std::span<Entry> lane(entries.data() + groupBegin[g], groupBegin[g + 1] - groupBegin[g]);
    std::sort(lane.begin(), lane.end(), byStart);
    tracks[g] = assignTracks(lane);
  }
  // Link channels: one lane each.
  const size_t channels = timeline.channelNames.size();
  std::vector<uint32_t> channelBegin(channels + 1, 0);
  for (const auto& l : timeline.linkSlices)
    if (sel.channel[static_cast<size_t>(l.channel)])
      ++channelBegin[static_cast<size_t>(l.channel) + 1];
  for (size_t c = 0; c < channels; ++c)
    channelBegin[c + 1] += channelBegin[c];
  std::vector<Entry> linkEntries(channelBegin[channels]);
  {
    auto fill = channelBegin;
    for (size_t i = 0; i < timeline.linkSlices.size(); ++i) {
      const auto& l = timeline.linkSlices[i];
      if (!sel.channel[static_cast<size_t>(l.channel)])
        continue;
      const int64_t a = toNanoseconds(l.start);
      const int64_t e = std::max(a, toNanoseconds(l.end));
      linkEntries[fill[static_cast<size_t>(l.channel)]++] = {a, e, static_cast<uint32_t>(i), 0};
    }
  }
  std::vector<uint32_t> channelTracks(channels, 0);
  for (size_t c = 0; c < channels; ++c) {
    std::span<Entry> lane(linkEntries.data() + channelBegin[c],
                          channelBegin[c + 1] - channelBegin[c]);
    std::sort(lane.begin(), lane.end(), byStart);
    channelTracks[c] = assignTracks(lane);
  }

  // pids: worker w is w + 1, the links K + 1. tids: numbered from K + 2 up,
  // unique across processes, so no tid is ever taken for another process's pid.
  const auto linksPid = static_cast<uint32_t>(k + 1);
  uint32_t nextTid = linksPid + 1;
  std::vector<uint32_t> firstTid(groups, 0), channelFirstTid(channels, 0);

  Writer w(out);
  auto& head = w.raw();
  head += R"({"otherData":{"engine":")";
  appendJsonEscaped(head, estimate.engine);
  head += R"(","network":")";
  appendJsonEscaped(head, net.name);
  head += R"(","strategy":")";
  head += toString(plan.scenario.strategy);
  head += R"(","workers":)";
  appendNumber(head, k);
  head += R"(,"ranks":")";
  head += describeRanks(options.ranks);
  head += R"(","step_s":)";
  appendNumber(head, estimate.step.value());
  head += "},\"traceEvents\":[\n";

  for (int worker : sel.workers) {
    const auto pid = static_cast<uint32_t>(worker + 1);
    w.stringMetadata(pid, 0, "process_name", fmt::format("worker {}", worker));
    w.sortIndex(pid, 0, static_cast<uint64_t>(worker));
    uint64_t order = 0;
    for (int lane = 0; lane < kLanes; ++lane) {
      const size_t g = static_cast<size_t>(worker) * kLanes + static_cast<size_t>(lane);
      firstTid[g] = nextTid;
      for (uint32_t t = 0; t < tracks[g]; ++t) {
        const uint32_t tid = nextTid++;
        const std::string name =
            t == 0 ? laneName(lane) : fmt::format("{} {}", laneName(lane), t + 1);
        w.stringMetadata(pid, tid, "thread_name", name);
        w.sortIndex(pid, tid, order++);
      }
    }
  }
  bool anyLinks = false;
  for (size_t c = 0; c < channels; ++c)
    anyLinks = anyLinks || channelTracks[c] > 0;
  if (anyLinks) {
    w.stringMetadata(linksPid, 0, "process_name", "links");
    w.sortIndex(linksPid, 0, static_cast<uint64_t>(k));
    uint64_t order = 0;
    for (size_t c = 0; c < channels; ++c) {
      channelFirstTid[c] = nextTid;
      for (uint32_t t = 0; t < channelTracks[c]; ++t) {
        const uint32_t tid = nextTid++;
        w.stringMetadata(linksPid, tid, "thread_name",
                         t == 0 ? timeline.channelNames[c]
                                : fmt::format("{} {}", timeline.channelNames[c], t + 1));
        w.sortIndex(linksPid, tid, order++);
      }
    }
  }

  Names names;
  for (const auto& layer : net.layers) {
    names.layer.emplace_back();
    appendJsonEscaped(names.layer.back(), layer.name);
  }
  for (const auto& c : plan.collectives) {
    names.collective.emplace_back();
    appendJsonEscaped(names.collective.back(), c.algorithm);
    names.segmented.push_back(c.segments > 1 ? 1 : 0);
  }

  auto tidOf = [&](const Slice& s, const Entry& e) {
    return firstTid[static_cast<size_t>(s.worker) * kLanes + static_cast<size_t>(s.track)] +
           e.track;
  };
  for (const auto& e : entries) {
    const Slice& s = timeline.slices[e.index];
    const Task& t = plan.tasks[s.task];
    auto& b = w.slice(static_cast<uint32_t>(s.worker + 1), tidOf(s, e), e.start, e.end);
    b += R"(,"cat":")";
    b += toString(t.kind);
    b += R"(","name":")";
    appendTaskName(b, names, t);
    b += R"(","args":{"task":)";
    Writer::appendUnsigned(b, s.task);
    switch (t.kind) {
      case TaskKind::kCompute: {
        const auto& layer = net.layers[static_cast<size_t>(t.layer)];
        const double perExample = t.phase == Phase::kFwd       ? layer.fwdFlops
                                  : t.phase == Phase::kBwdData ? layer.bwdDataFlops
                                                               : layer.bwdWeightsFlops;
        b += R"(,"layer":")";
        b += names.layer[static_cast<size_t>(t.layer)];
        b += R"(","phase":")";
        b += toString(t.phase);
        b += R"(","examples":)";
        appendNumber(b, t.examples);
        b += R"(,"fraction":)";
        appendNumber(b, t.fraction);
        b += R"(,"flops":)";
        appendNumber(b, perExample * t.examples * t.fraction);
        break;
      }
      case TaskKind::kUpdate:
        b += R"(,"params":)";
        appendNumber(b, t.params);
        break;
      case TaskKind::kTransfer:
      case TaskKind::kReduce:
        b += R"(,"bytes":)";
        appendNumber(b, t.bytes.value());
        b += R"(,"collective":)";
        appendNumber(b, t.collective);
        if (t.kind == TaskKind::kReduce) {
          b += R"(,"chunks":)";
          appendNumber(b, t.inputs);
        }
        if (s.peer >= 0) {
          b += R"(,"peer":)";
          appendNumber(b, s.peer);
        }
        break;
    }
    b += '}';
    w.end();
  }
  for (const auto& e : linkEntries) {
    const auto& l = timeline.linkSlices[e.index];
    auto& b = w.slice(linksPid, channelFirstTid[static_cast<size_t>(l.channel)] + e.track, e.start,
                      e.end);
    b += R"(,"cat":"link","name":"busy")";
    w.end();
  }

  // Flows: the k-th send slice of (task, src, dst) to the k-th receive slice
  // of the same, both ends written. "s" binds to the slice enclosing its ts on
  // the sender's track, "f" (bp "e") to the one enclosing its ts on the
  // receiver's: both are placed strictly inside (the middle of) their slice,
  // the receive end no earlier than the send end, so importers that process
  // events in time order see the start first (same ts: file order, "s" first).
  struct End {
    uint32_t task;
    int32_t src, dst;
    uint32_t slice;  // Timeline::slices index: the k-th send pairs with the k-th receive
    uint32_t entry;
  };
  std::vector<End> sends, receives;
  sends.reserve(counted.sends);
  receives.reserve(counted.sends);
  for (size_t i = 0; i < entries.size(); ++i) {
    const Slice& s = timeline.slices[entries[i].index];
    if (s.peer < 0 || s.peer >= k || !sel.worker[static_cast<size_t>(s.peer)])
      continue;
    const auto entry = static_cast<uint32_t>(i);
    if (s.track == Track::kSend)
      sends.push_back({s.task, s.worker, s.peer, entries[i].index, entry});
    else if (s.track == Track::kReceive)
      receives.push_back({s.task, s.peer, s.worker, entries[i].index, entry});
  }
  auto byKey = [](const End& x, const End& y) {
    return std::tie(x.task, x.src, x.dst, x.slice) < std::tie(y.task, y.src, y.dst, y.slice);
  };
  std::sort(sends.begin(), sends.end(), byKey);
  std::sort(receives.begin(), receives.end(), byKey);
  uint64_t flowId = 0;
  for (size_t i = 0, j = 0; i < sends.size() && j < receives.size();) {
    const auto& s = sends[i];
    const auto& r = receives[j];
    const auto ks = std::tuple(s.task, s.src, s.dst), kr = std::tuple(r.task, r.src, r.dst);
    if (ks < kr) {
      ++i;
      continue;
    }
    if (kr < ks) {
      ++j;
      continue;
    }
    ++i;
    ++j;
    const Entry& se = entries[s.entry];
    const Entry& re = entries[r.entry];
    if (se.end <= se.start || re.end <= re.start)
      continue;  // a zero-length slice encloses nothing
    const int64_t sendAt = se.start + (se.end - se.start) / 2;
    const int64_t receiveAt = std::max(re.start + (re.end - re.start) / 2, sendAt);
    if (receiveAt >= re.end)
      continue;  // the receive ended before the send's middle (clocks of different ranks)
    ++flowId;
    w.flow('s', static_cast<uint32_t>(s.src + 1), tidOf(timeline.slices[se.index], se), sendAt,
           flowId);
    w.flow('f', static_cast<uint32_t>(s.dst + 1), tidOf(timeline.slices[re.index], re), receiveAt,
           flowId);
  }
  w.raw() += "\n]}\n";
  w.flush();
}

void writeTrace(std::ostream& out, const Plan& plan, const Network& network,
                const StepEstimate& estimate, const Timeline& timeline) {
  writeTrace(out, plan, network, estimate, timeline, TraceOptions{});
}

}  // namespace strata

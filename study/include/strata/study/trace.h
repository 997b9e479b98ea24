// The trace of one step: Chrome trace-event JSON that ui.perfetto.dev (and
// chrome://tracing) opens, written from a Timeline of either engine.
//
// Format (docs/simulator.md, "Trace"):
//   - one process per worker, pid = worker + 1 ("worker 0" is pid 1: Perfetto
//     treats pid 0 as the idle process), and one process "links" (pid K + 1)
//     with one track per busy link channel (simulator only);
//   - per worker the lanes compute, send, receive, reduce; slices that overlap
//     in time on one lane (concurrent transfers) go to further tracks of that
//     lane ("send 2", "send 3", ...): each slice takes the first track of its
//     lane free at its start, so slices on one track never overlap;
//   - times are integer nanoseconds: start and end are each rounded to a
//     nanosecond and dur = end - start, so slices that touch in the Timeline
//     touch in the trace. "ts" and "dur" are microseconds with three decimals;
//   - a flow arrow ("ph":"s" / "ph":"f", bound to the enclosing slice) from
//     each send slice to its matching receive slice (same task, same source
//     and destination) when both workers are written;
//   - args: integers (bytes, examples, task and collective numbers, ...) are
//     JSON integers, other numbers the shortest text that reads back exactly;
//     every string is escaped (control characters as \u00XX, invalid UTF-8 as
//     U+FFFD).
#pragma once

#include <cstdint>
#include <iosfwd>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "strata/model/timeline.h"

namespace strata {

// Events a trace may hold unless the caller asks for more: about 300 MB of
// JSON, which the Perfetto UI still loads in a browser tab (its in-browser
// trace processor has a 4 GB heap; a resnet50 ring step on 1024 GPUs has 40 M
// events, 5 GB).
inline constexpr uint64_t kDefaultTraceEventLimit = 2'000'000;

struct TraceOptions {
  // Workers whose processes are written, ascending without repeats (as
  // parseRankList returns them); empty: every worker. Link channels are
  // written when one of these workers uses them; flows when both ends are.
  std::vector<int> ranks;
  // The most events the trace may hold; 0: no limit. Checked before anything
  // is written, from estimateTrace().
  uint64_t maxEvents = kDefaultTraceEventLimit;
};

// Parses a rank list: "3", "0-7", "0,2,5" or a mix ("0-3,8,12-15"), spaces
// allowed around items. Returns the ranks ascending. When workers > 0 every
// rank must be below it. Throws OptionError naming `option` for an empty list
// or item, text that is not a rank, a range whose end is below its start, a
// rank listed twice and a rank out of range.
std::vector<int> parseRankList(std::string_view text, int workers,
                               std::string_view option = "--trace-ranks");

// The size of a trace before it is written: events (exact for slices, link
// slices and flows; metadata counted per lane) and bytes (an estimate from the
// average event, within about 20 %).
struct TraceSize {
  uint64_t events = 0;
  uint64_t bytes = 0;
};
TraceSize estimateTrace(const Plan& plan, const Timeline& timeline, const TraceOptions& options);

// The same check from the Plan alone, before the step is simulated or run:
// counts the slices and flows the Plan implies (not the link channels' slices,
// known only after simulating: a lower bound) and throws the OptionError of
// writeTrace when they are already over options.maxEvents, or naming
// --trace-ranks for a rank out of range. Returns the count (events, bytes).
TraceSize checkTraceSize(const Plan& plan, const TraceOptions& options);

// Writes the Chrome trace-event JSON of every worker, within the default size
// limit (TraceOptions{}). Throws OptionError naming --trace when the trace
// would exceed the limit (nothing written).
void writeTrace(std::ostream& out, const Plan& plan, const Network& network,
                const StepEstimate& estimate, const Timeline& timeline);

// Writes the trace of `timeline` (slices of `plan`'s tasks on `network`) with
// the estimate's engine, network, strategy and step time in otherData. Throws
// OptionError naming --trace-ranks for a rank out of range (or not ascending),
// and naming --trace when the trace would hold more than options.maxEvents
// events; in both cases before writing anything. Output is buffered and
// written in large blocks; the caller checks the stream's state afterwards.
void writeTrace(std::ostream& out, const Plan& plan, const Network& network,
                const StepEstimate& estimate, const Timeline& timeline,
                const TraceOptions& options);

// An output file for a trace, by name: gzip-compressed when the name ends in
// ".gz" (e.g. step.json.gz, which ui.perfetto.dev opens as is), plain
// otherwise. It is an AtomicFile (atomic_file.h): the path is checked and a
// temporary file made beside it at construction, so a bad path fails before
// any work; finish() renames the complete trace over the path. A TraceFile
// destroyed without a successful finish() (an exception on the way) removes
// only its temporary file: a file that was at the path stays as it was.
class TraceFile {
 public:
  // Throws OptionError naming `option` when `path` cannot be a trace (not a
  // regular file, a missing folder), WriteError when the system refuses.
  explicit TraceFile(const std::string& path, std::string option = "--trace");
  ~TraceFile();
  TraceFile(const TraceFile&) = delete;
  TraceFile& operator=(const TraceFile&) = delete;

  std::ostream& stream();
  bool compressed() const;
  const std::string& path() const;
  // Flushes, syncs and renames the trace into place. Throws WriteError
  // naming the option and the reason when a write failed (disk full, ...);
  // the temporary file is removed then, and the path is as it was.
  void finish();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

namespace detail {
// Appends `s` to `out` as the inside of a JSON string: quote and backslash
// escaped, control characters (and DEL) as \u00XX, invalid UTF-8 bytes as
// \ufffd, valid UTF-8 copied.
void appendJsonEscaped(std::string& out, std::string_view s);
// Appends integer nanoseconds as microseconds with three decimals
// ("1.000"). Perfetto reads a number x as (int64)(x * 1000.0), truncating;
// for about 1 % of values the double nearest to the decimal text is just below
// the integer and would lose a nanosecond. Those get a fourth decimal "1"
// (+0.1 ns: "1.0011"), which every reader that rounds reads back as the same
// nanosecond and which Perfetto's truncation no longer loses.
void appendMicros(std::string& out, int64_t ns);
// Appends a number: a JSON integer when `v` is integral (and fits int64), the
// shortest text that reads back to `v` otherwise; null when not finite.
void appendNumber(std::string& out, double v);
// Seconds to integer nanoseconds, rounded to nearest.
int64_t toNanoseconds(double seconds);
}  // namespace detail

}  // namespace strata

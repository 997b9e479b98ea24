// The trace writer on hand-made timelines: times in whole nanoseconds, tracks
// of concurrent slices, flows, escaping, exact args, pids, the size limit, rank
// lists and the output file (plain and gzip). Every trace is also run through
// the checker of Perfetto's import rules (tests/trace_checker.h).
#include "strata/study/trace.h"

#include <unistd.h>
#include <zlib.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "../trace_checker.h"
#include "helpers.h"
#include "strata/model/error.h"

using namespace strata;
using strata::test::checkTrace;
using strata::test::presetNetwork;
using Json = nlohmann::json;

namespace {

Plan ringPlan(const Network& net, int k = 2) {
  Scenario sc;
  sc.strategy = Strategy::kRing;
  sc.workers = k;
  sc.batchPerWorker = 4;
  return lowerToPlan(net, sc);
}

// Index of the n-th task of a kind (for compute: of worker 0).
uint32_t taskOf(const Plan& plan, TaskKind kind, int n = 0) {
  for (size_t i = 0; i < plan.tasks.size(); ++i)
    if (plan.tasks[i].kind == kind && (kind != TaskKind::kCompute || plan.tasks[i].worker == 0))
      if (n-- == 0)
        return static_cast<uint32_t>(i);
  FAIL("no such task");
  return 0;
}

std::string traceText(const Plan& plan, const Network& net, const Timeline& tl,
                      const TraceOptions& options = {}, const std::string& engine = "sim") {
  StepEstimate est;
  est.engine = engine;
  est.step = Seconds(4e-6);
  std::ostringstream os;
  writeTrace(os, plan, net, est, tl, options);
  return os.str();
}

// The X events of a trace, and each one's [start, end) in whole nanoseconds.
struct XEvent {
  Json event;
  int64_t start, end;
};
std::vector<XEvent> slicesOf(const Json& j) {
  std::vector<XEvent> out;
  for (const auto& e : j.at("traceEvents"))
    if (e.at("ph") == "X") {
      const auto ts = std::llround(e.at("ts").get<double>() * 1000);
      const auto dur = std::llround(e.at("dur").get<double>() * 1000);
      out.push_back({e, ts, ts + dur});
    }
  return out;
}

std::string micros(int64_t ns) {
  std::string s;
  detail::appendMicros(s, ns);
  return s;
}

std::string threadName(const Json& j, int64_t pid, int64_t tid) {
  for (const auto& e : j.at("traceEvents"))
    if (e.at("ph") == "M" && e.at("name") == "thread_name" && e.at("pid") == pid &&
        e.at("tid") == tid)
      return e.at("args").at("name");
  return "";
}

}  // namespace

TEST_CASE("trace times: microseconds from whole nanoseconds that Perfetto reads back exactly",
          "[trace]") {
  CHECK(micros(0) == "0.000");
  CHECK(micros(1) == "0.001");
  CHECK(micros(999) == "0.999");
  CHECK(micros(1000) == "1.000");
  CHECK(micros(40338171) == "40338.171");
  CHECK(micros(-1000) == "-1.000");
  // The double nearest to 1.001 is 1.000999...; x 1000 truncates to 1000:
  // a fourth decimal keeps Perfetto on 1001 ns.
  CHECK(micros(1001) == "1.0011");
  CHECK(micros(1003) == "1.0031");

  CHECK(detail::toNanoseconds(1.0000004e-6) == 1000);
  CHECK(detail::toNanoseconds(2e-6) == 2000);
  CHECK(detail::toNanoseconds(0.5e-9) == 1);  // to nearest
  CHECK(detail::toNanoseconds(1001.4e-9) == 1001);

  // Every value up to 3 ms and a spread up to 1000 s, read by strtod (then
  // truncated as Perfetto does, or rounded) and by digit sums (Perfetto's own
  // number parser: integer part + fraction digits / 10^digits).
  auto check = [](int64_t ns) {
    const std::string s = micros(ns);
    const double x = std::strtod(s.c_str(), nullptr);
    const size_t dot = s.find('.');
    const double frac = std::strtod(s.substr(dot + 1).c_str(), nullptr);
    const double summed =
        std::strtod(s.substr(0, dot).c_str(), nullptr) + frac / std::pow(10.0, s.size() - dot - 1);
    return static_cast<int64_t>(x * 1000.0) == ns && std::llround(x * 1000.0) == ns &&
           static_cast<int64_t>(summed * 1000.0) == ns;
  };
  int64_t bad = 0;
  for (int64_t ns = 0; ns < 3'000'000; ++ns)
    bad += check(ns) ? 0 : 1;
  for (int64_t ns = 3'000'000; ns < 1'000'000'000'000; ns = ns * 1001 / 1000 + 7)
    bad += check(ns) ? 0 : 1;
  CHECK(bad == 0);
}

TEST_CASE("trace: back-to-back slices touch, never overlap", "[trace]") {
  const auto net = presetNetwork("tiny-cnn");
  const auto plan = ringPlan(net);
  const uint32_t a = taskOf(plan, TaskKind::kCompute, 0), b = taskOf(plan, TaskKind::kCompute, 1);
  Timeline tl;
  // [0, 1.0000004 us) and [1.0000004, 2 us): 1000 ns each.
  tl.slices.push_back({a, 0, Track::kCompute, -1, 0.0, 1.0000004e-6});
  tl.slices.push_back({b, 0, Track::kCompute, -1, 1.0000004e-6, 2e-6});
  // [0.5, 1001.4 ns) and [1001.4, 2000 ns) on worker 1: rounded separately,
  // start and duration gave [1, 1002) and [1001, 2000), 1 ns of overlap.
  tl.slices.push_back({a, 1, Track::kCompute, -1, 0.5e-9, 1001.4e-9});
  tl.slices.push_back({b, 1, Track::kCompute, -1, 1001.4e-9, 2000e-9});
  const auto text = traceText(plan, net, tl);
  const auto check = checkTrace(text);
  INFO(text);
  for (const auto& p : check.problems)
    INFO(p);
  CHECK(check.ok());
  const auto x = slicesOf(Json::parse(text));
  REQUIRE(x.size() == 4);
  CHECK(x[0].start == 0);
  CHECK(x[0].end == 1000);
  CHECK(x[1].start == 1000);
  CHECK(x[1].end == 2000);
  CHECK(x[0].event.at("tid") == x[1].event.at("tid"));  // one track
  CHECK(x[0].event.at("ts").dump() == "0.0");
  CHECK(x[0].event.at("dur").dump() == "1.0");
  CHECK(x[2].start == 1);
  CHECK(x[2].end == 1001);
  CHECK(x[3].start == 1001);
  CHECK(x[3].end == 2000);
  CHECK(x[2].event.at("tid") == x[3].event.at("tid"));
  CHECK(text.find(R"("ts":1.0011,"dur":0.999)") != std::string::npos);
}

TEST_CASE("trace: slices overlapping on one lane go to further tracks", "[trace]") {
  const auto net = presetNetwork("tiny-cnn");
  const auto plan = ringPlan(net);
  const uint32_t t = taskOf(plan, TaskKind::kTransfer);
  const uint32_t c0 = taskOf(plan, TaskKind::kCompute, 0), c1 = taskOf(plan, TaskKind::kCompute, 1);
  Timeline tl;
  tl.slices.push_back({t, 0, Track::kSend, 1, 0.0, 2e-6});
  tl.slices.push_back({t, 0, Track::kSend, 1, 1e-6, 3e-6});
  tl.slices.push_back({t, 0, Track::kSend, 1, 2e-6, 4e-6});  // track 1 is free again at 2 us
  // A zero-length slice and one starting at the same instant: two tracks (in
  // Perfetto the second would nest under the first).
  tl.slices.push_back({c0, 0, Track::kCompute, -1, 1e-6, 1e-6});
  tl.slices.push_back({c1, 0, Track::kCompute, -1, 1e-6, 2e-6});
  const auto text = traceText(plan, net, tl);
  const auto check = checkTrace(text);
  for (const auto& p : check.problems)
    INFO(p);
  CHECK(check.ok());
  const auto j = Json::parse(text);
  const auto x = slicesOf(j);
  REQUIRE(x.size() == 5);
  // Written per worker and lane (compute first), by start.
  CHECK(x[0].event.at("tid") != x[1].event.at("tid"));
  CHECK(threadName(j, 1, x[0].event.at("tid")) == "compute");
  CHECK(threadName(j, 1, x[1].event.at("tid")) == "compute 2");
  const auto sendTid = x[2].event.at("tid");
  CHECK(x[3].event.at("tid") != sendTid);
  CHECK(x[4].event.at("tid") == sendTid);
  CHECK(threadName(j, 1, sendTid) == "send");
  CHECK(threadName(j, 1, x[3].event.at("tid")) == "send 2");
  // tids are unique across processes and never a pid (pids 1..K+1 here 1..3).
  for (const auto& e : x)
    CHECK(e.event.at("tid").get<int>() > 3);
}

TEST_CASE("trace: a flow from each send to its receive, inside both slices", "[trace]") {
  const auto net = presetNetwork("tiny-cnn");
  const auto plan = ringPlan(net);
  const uint32_t t = taskOf(plan, TaskKind::kTransfer);
  Timeline tl;
  // Simulated: the same interval on both ends.
  tl.slices.push_back({t, 0, Track::kSend, 1, 0.0, 2e-6});
  tl.slices.push_back({t, 1, Track::kReceive, 0, 0.0, 2e-6});
  // Measured: the receive posted first; its end after the send's middle.
  tl.slices.push_back({t, 1, Track::kSend, 0, 3e-6, 5e-6});
  tl.slices.push_back({t, 0, Track::kReceive, 1, 2.5e-6, 4.5e-6});
  auto text = traceText(plan, net, tl);
  auto check = checkTrace(text);
  for (const auto& p : check.problems)
    INFO(p);
  CHECK(check.ok());
  CHECK(check.flows == 2);
  std::vector<Json> flows;
  const auto j = Json::parse(text);
  for (const auto& e : j.at("traceEvents"))
    if (e.at("ph") == "s" || e.at("ph") == "f")
      flows.push_back(e);
  REQUIRE(flows.size() == 4);
  // Sorted by task, source, destination: 0 -> 1 first.
  CHECK(flows[0].at("ph") == "s");
  CHECK(flows[0].at("pid") == 1);
  CHECK(std::llround(flows[0].at("ts").get<double>() * 1000) == 1000);  // middle of [0, 2000)
  CHECK(flows[1].at("ph") == "f");
  CHECK(flows[1].at("bp") == "e");
  CHECK(flows[1].at("pid") == 2);
  CHECK(flows[1].at("id") == flows[0].at("id"));
  CHECK(std::llround(flows[1].at("ts").get<double>() * 1000) == 1000);
  // 1 -> 0: send middle 4000 ns, receive middle 3500 ns: the end waits for 4000.
  CHECK(flows[2].at("pid") == 2);
  CHECK(std::llround(flows[2].at("ts").get<double>() * 1000) == 4000);
  CHECK(flows[3].at("pid") == 1);
  CHECK(std::llround(flows[3].at("ts").get<double>() * 1000) == 4000);

  // A receive that ended before the send's middle (clocks of two ranks): no
  // arrow rather than one bound to the wrong slice.
  tl.slices.back() = {t, 0, Track::kReceive, 1, 2.5e-6, 3.9e-6};
  text = traceText(plan, net, tl);
  check = checkTrace(text);
  CHECK(check.ok());
  CHECK(check.flows == 1);
}

TEST_CASE("trace: strings escaped, integers exact, pids from 1", "[trace]") {
  auto net = presetNetwork("tiny-cnn");
  net.layers[0].name = std::string("a\x01\"\\\n\x7f") + "\xff" + "\xc3\xa9";  // ..., bad byte, é
  auto plan = ringPlan(net);
  const uint32_t c = taskOf(plan, TaskKind::kCompute, 0);
  REQUIRE(plan.tasks[c].layer == 0);
  plan.tasks[c].fraction = 1.0 / 3;
  const uint32_t t = taskOf(plan, TaskKind::kTransfer);
  plan.tasks[t].bytes = Bytes(4718592);
  Timeline tl;
  tl.slices.push_back({c, 0, Track::kCompute, -1, 0.0, 1e-6});
  tl.slices.push_back({t, 0, Track::kSend, 1, 1e-6, 2e-6});
  tl.slices.push_back({t, 1, Track::kReceive, 0, 1e-6, 2e-6});
  const auto text = traceText(plan, net, tl, {}, "sim\tx");
  const auto check = checkTrace(text);
  for (const auto& p : check.problems)
    INFO(p);
  CHECK(check.ok());
  CHECK(text.find("\\u0001") != std::string::npos);
  CHECK(text.find("\\u007f") != std::string::npos);
  CHECK(text.find("\\u000a") != std::string::npos);
  CHECK(text.find("\\ufffd") != std::string::npos);
  CHECK(check.otherData.at("engine") == "sim\tx");
  CHECK(check.processNames.at(1) == "worker 0");
  CHECK(check.processNames.at(2) == "worker 1");
  CHECK(check.pids == std::set<int64_t>{1, 2});
  const auto x = slicesOf(Json::parse(text));
  REQUIRE(x.size() == 3);
  const auto& compute = x[0].event.at("args");
  CHECK(compute.at("layer") == std::string("a\x01\"\\\n\x7f") + "\xef\xbf\xbd\xc3\xa9");
  CHECK(compute.at("fraction").get<double>() == 1.0 / 3);  // full precision
  CHECK(compute.at("examples").is_number_integer());
  CHECK(compute.at("examples") == 4);
  CHECK(compute.at("task") == c);
  const auto& send = x[1].event.at("args");
  CHECK(send.at("bytes").is_number_integer());
  CHECK(send.at("bytes") == 4718592);
  CHECK(send.at("peer") == 1);
  CHECK(text.find("4.71859e+06") == std::string::npos);
}

TEST_CASE("trace: the size limit and the rank selection", "[trace]") {
  const auto net = presetNetwork("tiny-cnn");
  const auto plan = ringPlan(net, 3);
  const uint32_t t = taskOf(plan, TaskKind::kTransfer);
  const uint32_t c = taskOf(plan, TaskKind::kCompute, 0);
  Timeline tl;
  for (int w = 0; w < 3; ++w) {
    tl.slices.push_back({c, w, Track::kCompute, -1, 0.0, 1e-6});
    tl.slices.push_back({t, w, Track::kSend, (w + 1) % 3, 1e-6, 2e-6});
    tl.slices.push_back({t, (w + 1) % 3, Track::kReceive, w, 1e-6, 2e-6});
  }
  // 9 slices, 3 flows (6 events), 2 x 3 workers + 2 x 9 lanes... of metadata.
  const auto all = traceText(plan, net, tl);
  const auto j = Json::parse(all);
  const auto estimate = estimateTrace(plan, tl, {});
  CHECK(estimate.events == j.at("traceEvents").size());
  CHECK(estimate.bytes > all.size() / 2);
  CHECK(estimate.bytes < all.size() * 2);

  TraceOptions small;
  small.maxEvents = 10;
  std::ostringstream os;
  StepEstimate est;
  CHECK_THROWS_WITH(writeTrace(os, plan, net, est, tl, small),
                    Catch::StartsWith("--trace: the trace of all 3 workers would hold") &&
                        Catch::Contains("more than the limit of 10 events") &&
                        Catch::Contains("--trace-ranks"));
  CHECK(os.str().empty());  // nothing written
  // Before running the step, from the Plan alone (a lower bound: no links).
  CHECK_THROWS_WITH(checkTraceSize(plan, small),
                    Catch::StartsWith("--trace: the trace of all 3 workers would hold at least "));
  small.maxEvents = 0;  // no limit
  CHECK_NOTHROW(writeTrace(os, plan, net, est, tl, small));
  CHECK(checkTraceSize(plan, small).events > 0);

  TraceOptions some;
  some.ranks = {0, 1};
  const auto text = traceText(plan, net, tl, some);
  const auto check = checkTrace(text);
  for (const auto& p : check.problems)
    INFO(p);
  CHECK(check.ok());
  CHECK(check.pids == std::set<int64_t>{1, 2});
  CHECK(check.slices == 2 + 2 + 2);  // compute, send and receive of workers 0 and 1
  CHECK(check.flows == 1);           // 0 -> 1 only: 1 -> 2 and 2 -> 0 have an end outside
  CHECK(check.otherData.at("ranks") == "0-1");
  CHECK(estimateTrace(plan, tl, some).events == Json::parse(text).at("traceEvents").size());

  some.ranks = {1, 5};
  CHECK_THROWS_WITH(traceText(plan, net, tl, some),
                    "--trace-ranks: rank 5 is out of range: the step has 3 workers (ranks 0-2)");
  CHECK_THROWS_WITH(checkTraceSize(plan, some),
                    "--trace-ranks: rank 5 is out of range: the step has 3 workers (ranks 0-2)");
  some.ranks = {1, 0};
  CHECK_THROWS_WITH(traceText(plan, net, tl, some), Catch::StartsWith("--trace-ranks: ranks must "
                                                                      "be ascending"));
}

TEST_CASE("rank lists: A-B, A,B,C and mixes, one clear message per mistake", "[trace]") {
  CHECK(parseRankList("0-7", 8) == std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7});
  CHECK(parseRankList("0,2,5", 8) == std::vector<int>{0, 2, 5});
  CHECK(parseRankList(" 3 ", 8) == std::vector<int>{3});
  CHECK(parseRankList("12-13, 0-1,5", 0) == std::vector<int>{0, 1, 5, 12, 13});  // K unknown
  CHECK(parseRankList("4-4", 8) == std::vector<int>{4});
  using Catch::Contains;
  CHECK_THROWS_AS(parseRankList("x", 8), OptionError);
  CHECK_THROWS_WITH(parseRankList("", 8),
                    "--trace-ranks: empty rank list (expected e.g. '0-7' or '0,2,5')");
  CHECK_THROWS_WITH(parseRankList("a", 8),
                    "--trace-ranks: 'a' is not a rank or a range of ranks "
                    "(expected e.g. '0-7' or '0,2,5')");
  CHECK_THROWS_WITH(parseRankList("-1", 8), Contains("'-1' is not a rank"));
  CHECK_THROWS_WITH(parseRankList("1-", 8), Contains("'1-' is not a rank"));
  CHECK_THROWS_WITH(parseRankList("0-3-5", 8), Contains("'0-3-5' is not a rank"));
  CHECK_THROWS_WITH(parseRankList("2.5", 8), Contains("'2.5' is not a rank"));
  CHECK_THROWS_WITH(parseRankList("7-3", 8), "--trace-ranks: range '7-3' ends before it starts");
  CHECK_THROWS_WITH(parseRankList("0,,1", 8), "--trace-ranks: empty item in rank list '0,,1'");
  CHECK_THROWS_WITH(parseRankList("0-3,2", 8), "--trace-ranks: rank 2 is listed twice in '0-3,2'");
  CHECK_THROWS_WITH(parseRankList("0-8", 8),
                    "--trace-ranks: rank 8 is out of range: the step has 8 workers (ranks 0-7)");
  CHECK_THROWS_WITH(parseRankList("99999999999", 8), Contains("'99999999999' is not a rank"));
  CHECK_THROWS_WITH(parseRankList("z", 8, "--ranks"), Catch::StartsWith("--ranks: "));
}

TEST_CASE("trace files: plain or gzip by name, bad paths and failures leave nothing", "[trace]") {
  const auto dir =
      std::filesystem::temp_directory_path() / ("strata-trace-test-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string text = std::string(300000, 'x') + "{\"traceEvents\":[]}\n";
  {
    TraceFile f((dir / "t.json").string());
    CHECK_FALSE(f.compressed());
    f.stream() << text;
    f.finish();
    std::ifstream in(dir / "t.json");
    std::stringstream back;
    back << in.rdbuf();
    CHECK(back.str() == text);
  }
  {
    TraceFile f((dir / "t.json.gz").string());
    CHECK(f.compressed());
    f.stream() << "{";  // a small write, then a large block
    f.stream().write(text.data(), static_cast<std::streamsize>(text.size()));
    f.finish();
    gzFile g = gzopen((dir / "t.json.gz").c_str(), "rb");
    REQUIRE(g != nullptr);
    std::string back(text.size() + 10, '\0');
    const int n = gzread(g, back.data(), static_cast<unsigned>(back.size()));
    gzclose(g);
    REQUIRE(n == static_cast<int>(text.size() + 1));
    back.resize(static_cast<size_t>(n));
    CHECK(back == "{" + text);
    CHECK(std::filesystem::file_size(dir / "t.json.gz") < text.size() / 10);
  }
  CHECK_THROWS_WITH(
      TraceFile((dir / "no-such-dir" / "t.json").string()),
      Catch::StartsWith("--trace: cannot write '") && Catch::Contains("No such file or directory"));
  CHECK_THROWS_WITH(TraceFile((dir / "no-such-dir" / "t.json.gz").string(), "--out"),
                    Catch::StartsWith("--out: cannot write '"));
  {
    TraceFile f((dir / "partial.json").string());
    f.stream() << "{\"traceEvents\":[";
    CHECK_FALSE(std::filesystem::exists(dir / "partial.json"));  // a temporary file beside it
  }                                                              // no finish(): an error on the way
  CHECK_FALSE(std::filesystem::exists(dir / "partial.json"));
  {
    // A trace that fails leaves an earlier one as it was (and nothing else).
    const std::string earlier = "an earlier trace\n";
    { std::ofstream(dir / "kept.json.gz", std::ios::binary) << earlier; }
    {
      TraceFile f((dir / "kept.json.gz").string());
      f.stream() << text;
    }
    std::ifstream in(dir / "kept.json.gz", std::ios::binary);
    std::stringstream back;
    back << in.rdbuf();
    CHECK(back.str() == earlier);
    int files = 0;
    for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir))
      ++files;
    CHECK(files == 3);  // t.json, t.json.gz, kept.json.gz
  }
  std::filesystem::remove_all(dir);
}

// Chrome trace-event JSON (the format Perfetto and chrome://tracing open):
// https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU
// Written with fmt rather than a JSON library: traces of big runs have
// millions of slices.
#include <fmt/format.h>

#include <algorithm>
#include <ostream>

#include "strata/model/timeline.h"

namespace strata {

namespace {

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\')
      out += '\\';
    out += c;
  }
  return out;
}

const char* trackName(Track t) {
  switch (t) {
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

std::string taskName(const Plan& plan, const Network& net, const Task& t) {
  switch (t.kind) {
    case TaskKind::kCompute:
      return fmt::format("{} {}", toString(t.phase), net.layers[static_cast<size_t>(t.layer)].name);
    case TaskKind::kUpdate:
      return "update";
    case TaskKind::kReduce:
    case TaskKind::kTransfer: {
      const auto& c = plan.collectives[static_cast<size_t>(t.collective)];
      std::string s = fmt::format("{} {} step {}", c.algorithm,
                                  t.kind == TaskKind::kReduce ? "sum" : "send", t.step);
      if (c.segments > 1)
        s += fmt::format(" seg {}", t.segment);
      if (t.round >= 0)
        s += fmt::format(" round {}", t.round);
      return s;
    }
  }
  return "?";
}

}  // namespace

double overlapSeconds(const Intervals& a, const Intervals& b) {
  double s = 0;
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const double lo = std::max(a[i].first, b[j].first);
    const double hi = std::min(a[i].second, b[j].second);
    if (hi > lo)
      s += hi - lo;
    if (a[i].second < b[j].second) {
      ++i;
    } else {
      ++j;
    }
  }
  return s;
}

void writeTrace(std::ostream& out, const Plan& plan, const Network& net,
                const StepEstimate& estimate, const Timeline& result) {
  const int k = plan.scenario.workers;
  const int linksPid = k;
  const double us = 1e6;  // trace timestamps are in microseconds
  out << "{\"displayTimeUnit\":\"ms\",\"otherData\":{"
      << fmt::format(
             "\"engine\":\"{}\",\"network\":\"{}\",\"strategy\":\"{}\",\"workers\":{},\"step_s\":{:"
             ".9g}",
             escape(estimate.engine), escape(net.name), toString(plan.scenario.strategy), k,
             estimate.step.value())
      << "},\"traceEvents\":[\n";
  bool first = true;
  auto emit = [&](const std::string& event) {
    if (!first)
      out << ",\n";
    first = false;
    out << event;
  };
  for (int w = 0; w < k; ++w) {
    emit(fmt::format(R"({{"ph":"M","name":"process_name","pid":{},"args":{{"name":"worker {}"}}}})",
                     w, w));
    emit(fmt::format(
        R"({{"ph":"M","name":"process_sort_index","pid":{},"args":{{"sort_index":{}}}}})", w, w));
    for (auto t : {Track::kCompute, Track::kSend, Track::kReceive, Track::kReduce})
      emit(fmt::format(
          R"({{"ph":"M","name":"thread_name","pid":{},"tid":{},"args":{{"name":"{}"}}}})", w,
          static_cast<int>(t), trackName(t)));
  }
  emit(fmt::format(R"({{"ph":"M","name":"process_name","pid":{},"args":{{"name":"links"}}}})",
                   linksPid));
  for (const auto& s : result.slices) {
    const Task& t = plan.tasks[s.task];
    std::string args = fmt::format("\"task\":{}", s.task);
    if (t.kind == TaskKind::kCompute) {
      const auto& layer = net.layers[static_cast<size_t>(t.layer)];
      const double perExample = t.phase == Phase::kFwd       ? layer.fwdFlops
                                : t.phase == Phase::kBwdData ? layer.bwdDataFlops
                                                             : layer.bwdWeightsFlops;
      args += fmt::format(
          ",\"layer\":\"{}\",\"phase\":\"{}\",\"examples\":{},\"fraction\":{:.6g},"
          "\"flops\":{:.6g}",
          escape(layer.name), toString(t.phase), t.examples, t.fraction,
          perExample * t.examples * t.fraction);
    } else if (t.kind == TaskKind::kUpdate) {
      args += fmt::format(",\"params\":{:.6g}", t.params);
    } else {
      args += fmt::format(",\"bytes\":{:.6g},\"collective\":{}", t.bytes.value(), t.collective);
      if (t.kind == TaskKind::kReduce)
        args += fmt::format(",\"chunks\":{}", t.inputs);
      if (s.peer >= 0)
        args += fmt::format(",\"peer\":{}", s.peer);
    }
    emit(fmt::format(
        R"({{"ph":"X","cat":"{}","name":"{}","pid":{},"tid":{},"ts":{:.3f},"dur":{:.3f},"args":{{{}}}}})",
        toString(t.kind), escape(taskName(plan, net, t)), s.worker, static_cast<int>(s.track),
        s.start * us, (s.end - s.start) * us, args));
  }
  std::vector<char> named(result.channelNames.size(), 0);
  for (const auto& l : result.linkSlices) {
    const auto c = static_cast<size_t>(l.channel);
    if (!named[c]) {
      named[c] = 1;
      emit(fmt::format(
          R"({{"ph":"M","name":"thread_name","pid":{},"tid":{},"args":{{"name":"{}"}}}})", linksPid,
          l.channel, escape(result.channelNames[c])));
    }
    emit(fmt::format(
        R"({{"ph":"X","cat":"link","name":"busy","pid":{},"tid":{},"ts":{:.3f},"dur":{:.3f}}})",
        linksPid, l.channel, l.start * us, (l.end - l.start) * us));
  }
  out << "\n]}\n";
}

}  // namespace strata

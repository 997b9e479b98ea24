// Gnuplot scripts and readings of the report's figures (figures.h).
#include "figures.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <set>

#include "internal.h"
#include "strata/model/quantity_text.h"
#include "strata/study/validation.h"

namespace strata::reports {

namespace {

// One colour per strategy, the same in every figure (Tableau 10).
std::string colorOf(Strategy s) {
  switch (s) {
    case Strategy::kNaive:
      return "#e15759";
    case Strategy::kRing:
      return "#4e79a7";
    case Strategy::kOwtA:
      return "#59a14f";
    case Strategy::kOwtB:
      return "#f28e2b";
    case Strategy::kOwtC:
      return "#b07aa1";
    case Strategy::kPs:
      return "#9c755f";
  }
  return "#000000";
}

// A gnuplot single-quoted string.
std::string quoted(const std::string& text) {
  std::string out = "'";
  for (char c : text)
    out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

// A field of a datablock line: double-quoted, no double quote inside.
std::string field(std::string text) {
  std::replace(text.begin(), text.end(), '"', '\'');
  return "\"" + text + "\"";
}

std::string datablock(const std::string& name, const std::vector<std::string>& lines) {
  std::string out = "$" + name + " << EOD\n";
  for (const auto& l : lines)
    out += l + "\n";
  return out + "EOD\n";
}

std::string num(double v) {
  return fmt::format("{:.9g}", v);
}

// "plot A, B, ...", one term a line, as a person would write it.
std::string plotCommand(const std::vector<std::string>& terms) {
  return fmt::format("plot {}\n", fmt::join(terms, ", \\\n     "));
}

struct Unit {
  double scale = 1;  // value x scale = figure value
  std::string name;
};

Unit timeUnit(double maxSeconds) {
  if (maxSeconds >= 1)
    return {1, "s"};
  if (maxSeconds >= 1e-3)
    return {1e3, "ms"};
  return {1e6, "us"};
}

Unit byteUnit(double maxBytes) {
  if (maxBytes >= 1024.0 * 1024 * 1024)
    return {1.0 / (1024.0 * 1024 * 1024), "GiB"};
  if (maxBytes >= 1024.0 * 1024)
    return {1.0 / (1024.0 * 1024), "MiB"};
  return {1.0 / 1024, "KiB"};
}

const char* kStyle =
    "set border 3 lw 1 lc rgb '#555555'\n"
    "set tics nomirror textcolor rgb '#333333'\n"
    "set grid lc rgb '#e5e5e5' lw 1\n"
    "set key outside right top Left reverse noautotitle samplen 2 spacing 1.2\n";

// x axis over the worker counts, log2 scale.
std::string workersAxis(const std::vector<int>& ks) {
  std::string tics;
  for (int k : ks)
    tics += fmt::format("{}\"{}\" {}", tics.empty() ? "" : ", ", k, k);
  return fmt::format(
      "set logscale x 2\nset xrange [{}:{}]\nset xtics ({})\nset xlabel 'workers K (log2)'\n",
      num(ks.front() / 1.3), num(ks.back() * 1.3), tics);
}

// Rows of one strategy, K ascending, in the order strategies first appear.
std::vector<std::pair<Strategy, std::vector<const StepEstimate*>>> byStrategy(
    const std::vector<StepEstimate>& rows) {
  std::vector<std::pair<Strategy, std::vector<const StepEstimate*>>> out;
  for (const auto& e : rows) {
    auto it = std::find_if(out.begin(), out.end(),
                           [&](const auto& p) { return p.first == e.scenario.strategy; });
    if (it == out.end()) {
      out.push_back({e.scenario.strategy, {}});
      it = out.end() - 1;
    }
    it->second.push_back(&e);
  }
  for (auto& [s, v] : out)
    std::sort(v.begin(), v.end(), [](const StepEstimate* a, const StepEstimate* b) {
      return a->scenario.workers < b->scenario.workers;
    });
  return out;
}

std::string slug(const std::string& text) {
  std::string out;
  for (char c : text)
    out += std::isalnum(static_cast<unsigned char>(c)) ? char(std::tolower(c)) : '-';
  return out;
}

Bytes maxSent(const StepEstimate& e) {
  Bytes m(0);
  for (const auto& w : e.workers)
    m = std::max(m, w.sent);
  return m;
}

// A line per strategy of `value(row)` against K; `extra` adds plot terms
// (an ideal line, a capacity line).
std::string linesScript(const std::vector<StepEstimate>& rows, const std::vector<int>& ks,
                        const std::string& ylabel, double (*value)(const StepEstimate&, double),
                        double scale, const std::string& extraSetup,
                        const std::vector<std::string>& extraPlots) {
  std::string s = kStyle + workersAxis(ks) + "set ylabel " + quoted(ylabel) + "\n" + extraSetup;
  std::vector<std::string> plots;
  int i = 0;
  for (const auto& [strategy, list] : byStrategy(rows)) {
    std::vector<std::string> lines;
    for (const auto* e : list)
      lines.push_back(fmt::format("{} {}", e->scenario.workers, num(value(*e, scale))));
    const std::string name = fmt::format("s{}", i++);
    s += datablock(name, lines);
    plots.push_back(
        fmt::format("${} using 1:2 with linespoints lw 2 pt 7 ps 0.7 lc rgb '{}' title {}", name,
                    colorOf(strategy), quoted(std::string(toString(strategy)))));
  }
  for (const auto& p : extraPlots)
    plots.push_back(p);
  s += plotCommand(plots);
  return s;
}

// "ring 6.1x, owt-c 5.9x, ..." at K = `k`, best first.
std::string atK(const std::vector<StepEstimate>& rows, int k,
                const std::function<double(const StepEstimate&)>& value,
                const std::function<std::string(double)>& text, bool descending) {
  std::vector<const StepEstimate*> at;
  for (const auto& e : rows)
    if (e.scenario.workers == k)
      at.push_back(&e);
  std::sort(at.begin(), at.end(), [&](const StepEstimate* a, const StepEstimate* b) {
    return descending ? value(*a) > value(*b) : value(*a) < value(*b);
  });
  std::vector<std::string> parts;
  for (const auto* e : at)
    parts.push_back(fmt::format("{} {}", toString(e->scenario.strategy), text(value(*e))));
  return fmt::format("{}", fmt::join(parts, ", "));
}

// "" with one panel; "-NETWORK-CLUSTER" with several networks or clusters;
// "-overlap-off" and the like with several option sets.
std::string panelSuffix(const Panel& p, const ReportRequest& rq) {
  std::string out;
  if (rq.networks.size() > 1 || rq.clusters.size() > 1)
    out = fmt::format("-{}-{}", slug(rq.networks[size_t(p.network)].name),
                      slug(rq.clusters[size_t(p.cluster)].name));
  if (rq.optionSets.size() > 1)
    out += "-" + slug(optionSetLabel(rq, size_t(p.optionSet)));
  return out;
}

// ---- the figures of one panel ------------------------------------------------

Figure speedupFigure(const Panel& p, const std::vector<int>& ks) {
  Figure f;
  f.title = "Speedup over one worker";
  const int k = ks.back();
  f.script = linesScript(
      p.rows, ks, "speedup (x)", [](const StepEstimate& e, double) { return e.speedup; }, 1,
      "set logscale y 2\n", {"x with lines dt 2 lw 1.5 lc rgb '#333333' title 'ideal (K x)'"});
  f.reading = fmt::format(
      "Throughput of K workers over one worker's (b = {} examples each, so the global batch grows "
      "with K: weak scaling); the dashed line is the ideal K x. At K = {}: {} (ideal {}x). The gap "
      "to the line is what communication, idle time and shared resources cost.",
      p.batch, k,
      atK(
          p.rows, k, [](const StepEstimate& e) { return e.speedup; },
          [](double v) { return fmt::format("{:.2f}x", v); }, true),
      k);
  return f;
}

Figure efficiencyFigure(const Panel& p, const std::vector<int>& ks) {
  Figure f;
  f.title = "Parallel efficiency";
  const int k = ks.back();
  f.script = linesScript(p.rows, ks, "efficiency (%)",
                         [](const StepEstimate& e, double) { return e.efficiency * 100; }, 1,
                         "set yrange [0:*]\n",
                         {"100 with lines dt 2 lw 1.5 lc rgb '#333333' title 'ideal (100 %)'"});
  // Where each strategy first falls below 50 %.
  std::vector<std::string> below;
  for (const auto& [strategy, list] : byStrategy(p.rows))
    for (const auto* e : list)
      if (e->efficiency < 0.5) {
        below.push_back(fmt::format("{} at K = {}", toString(strategy), e->scenario.workers));
        break;
      }
  f.reading =
      fmt::format("Speedup divided by K. At K = {}: {}. {}", k,
                  atK(
                      p.rows, k, [](const StepEstimate& e) { return e.efficiency * 100; },
                      [](double v) { return fmt::format("{:.0f} %", v); }, true),
                  below.empty() ? std::string("Every strategy stays above 50 % over the range.")
                                : fmt::format("Below 50 % first: {}.", fmt::join(below, ", ")));
  return f;
}

Figure throughputFigure(const Panel& p, const std::vector<int>& ks) {
  Figure f;
  f.title = "Training throughput";
  f.script = linesScript(p.rows, ks, "examples per second",
                         [](const StepEstimate& e, double) { return e.throughput; }, 1,
                         "set logscale y 10\n", {});
  const StepEstimate* best = nullptr;
  for (const auto& e : p.rows)
    if (e.fitsInMemory && (!best || e.throughput > best->throughput))
      best = &e;
  f.reading = fmt::format(
      "Examples processed per second by all K workers together (K b per step over the step "
      "time). At K = {}: {}. {}",
      ks.back(),
      atK(
          p.rows, ks.back(), [](const StepEstimate& e) { return e.throughput; },
          [](double v) { return fmt::format("{:.4g}/s", v); }, true),
      best
          ? fmt::format("The highest that fits in memory: {} at K = {}, {:.4g} examples/s.",
                        toString(best->scenario.strategy), best->scenario.workers, best->throughput)
          : std::string("No configuration fits in memory."));
  return f;
}

Figure breakdownFigure(const Panel& p, const std::vector<int>& ks) {
  Figure f;
  f.title = "Where the step time goes";
  f.height = 470;
  double maxStep = 0;
  for (const auto& e : p.rows)
    maxStep = std::max(maxStep, e.step.value());
  const Unit u = timeUnit(maxStep);
  std::vector<std::string> lines;
  std::vector<std::pair<double, std::string>> groups;  // label centre, strategy
  int x = 0;
  for (const auto& [strategy, list] : byStrategy(p.rows)) {
    const int first = x;
    for (const auto* e : list) {
      lines.push_back(fmt::format("{} {} {} {} {}", x, num(meanCompute(*e).value() * u.scale),
                                  num(meanExposed(*e).value() * u.scale),
                                  num(meanIdle(*e).value() * u.scale),
                                  field(std::to_string(e->scenario.workers))));
      ++x;
    }
    groups.push_back({(first + x - 1) / 2.0, std::string(toString(strategy))});
    ++x;  // a gap between strategies
  }
  std::string labels;
  for (const auto& [center, name] : groups)
    labels += fmt::format("set label {} at first {}, graph -0.13 center font ',12'\n", quoted(name),
                          num(center));
  f.script = std::string(kStyle) + "set style fill solid 0.92 noborder\n" + "set ylabel " +
             quoted("time per step (" + u.name + ")") +
             "\nset xlabel 'workers K, grouped by strategy' offset 0,-1.2\nset yrange [0:*]\n" +
             fmt::format("set xrange [-0.8:{}]\n", x - 1) + "set grid noxtics\nset bmargin 5\n" +
             labels + datablock("b", lines) +
             "plot $b using 1:($2/2):($1-0.4):($1+0.4):(0):2:xtic(5) with boxxy lc rgb '#4e79a7' "
             "title 'compute', \\\n"
             "     $b using 1:($2+$3/2):($1-0.4):($1+0.4):2:($2+$3) with boxxy lc rgb '#e15759' "
             "title 'exposed communication', \\\n"
             "     $b using 1:($2+$3+$4/2):($1-0.4):($1+0.4):($2+$3):($2+$3+$4) with boxxy lc rgb "
             "'#bab0ac' title 'idle'\n";
  const int k = ks.back();
  f.reading = fmt::format(
      "Each bar is one strategy at one K: compute (forward, backward and update), communication "
      "not hidden behind compute, and idle time (waiting for another worker), each the mean over "
      "workers; the three add up to the step time. Exposed communication at K = {}: {}.",
      k,
      atK(
          p.rows, k, [](const StepEstimate& e) { return meanExposed(e) / e.step * 100; },
          [](double v) { return fmt::format("{:.0f} %", v); }, false));
  return f;
}

Figure bytesFigure(const Panel& p, const std::vector<int>& ks) {
  Figure f;
  f.title = "Bytes on the wire per worker";
  double maxBytes = 1;
  for (const auto& e : p.rows)
    maxBytes = std::max(maxBytes, maxSent(e).value());
  const Unit u = byteUnit(maxBytes);
  std::vector<StepEstimate> multiWorker;
  for (const auto& e : p.rows)
    if (e.scenario.workers > 1)
      multiWorker.push_back(e);
  if (multiWorker.empty())
    multiWorker = p.rows;
  f.script =
      linesScript(p.rows, ks, "sent per step, busiest worker (" + u.name + ")",
                  [](const StepEstimate& e, double scale) { return maxSent(e).value() * scale; },
                  u.scale, "set yrange [0:*]\n", {});
  f.reading = fmt::format(
      "Bytes one worker sends in one step (the busiest worker: the reducer of naive, the owner of "
      "a round in owt-b). A ring sends 2(K-1)/K of the gradients whatever K; a naive reducer "
      "sends (K-1) times them. At K = {}: {}.",
      ks.back(),
      atK(
          p.rows, ks.back(), [](const StepEstimate& e) { return maxSent(e).value(); },
          [](double v) { return formatBytes(Bytes(v)); }, false));
  return f;
}

Figure memoryFigure(const Panel& p, const std::vector<int>& ks, const Cluster& cl) {
  Figure f;
  f.title = "Memory per worker";
  const double capacity = cl.device.memoryCapacity.value();
  double maxBytes = capacity;
  for (const auto& e : p.rows)
    maxBytes = std::max(maxBytes, peakMemory(e).value());
  const Unit u = byteUnit(maxBytes);
  f.script = linesScript(
      p.rows, ks, "peak memory per worker (" + u.name + ")",
      [](const StepEstimate& e, double scale) { return peakMemory(e).value() * scale; }, u.scale,
      "set yrange [0:*]\n",
      {fmt::format("{} with lines dt 2 lw 2 lc rgb '#333333' title {}", num(capacity * u.scale),
                   quoted("device capacity (" + formatBytes(cl.device.memoryCapacity) + ")"))});
  std::vector<std::string> over;
  for (const auto& e : p.rows)
    if (!e.fitsInMemory)
      over.push_back(
          fmt::format("{} at K = {}", toString(e.scenario.strategy), e.scenario.workers));
  f.reading = fmt::format(
      "Peak memory of the most loaded worker (weights, gradients, momentum, activations saved for "
      "backward, communication staging) against the {} of the device. {}",
      formatBytes(cl.device.memoryCapacity),
      over.empty() ? std::string("Every configuration fits.")
                   : fmt::format("Over capacity (left out of the summary's choice): {}.",
                                 fmt::join(over, ", ")));
  return f;
}

Figure scalingFigure(const Panel& p, const std::vector<int>& ks) {
  Figure f;
  f.title = "Weak and strong scaling";
  std::string s =
      kStyle + workersAxis(ks) + "set ylabel 'examples per second'\nset logscale y 10\n";
  std::vector<std::string> plots;
  int i = 0;
  auto series = [&](const std::vector<StepEstimate>& rows, const std::string& dash,
                    const std::string& label) {
    for (const auto& [strategy, list] : byStrategy(rows)) {
      std::vector<std::string> lines;
      for (const auto* e : list)
        lines.push_back(fmt::format("{} {}", e->scenario.workers, num(e->throughput)));
      const std::string name = fmt::format("s{}", i++);
      s += datablock(name, lines);
      plots.push_back(fmt::format(
          "${} using 1:2 with linespoints lw 2 dt {} pt 7 ps 0.6 lc rgb '{}' title {}", name, dash,
          colorOf(strategy), quoted(std::string(toString(strategy)) + label)));
    }
  };
  series(p.rows, "1", fmt::format(" weak (b = {})", p.batch));
  series(p.strong, "2", fmt::format(" strong ({} in all)", p.strongGlobalBatch));
  s += plotCommand(plots);
  f.script = s;
  f.reading = fmt::format(
      "Solid: weak scaling, each worker keeps b = {} examples, so the global batch grows with K. "
      "Dashed: strong scaling, a global batch of {} examples split over K workers (where K divides "
      "it), so each worker's share shrinks and communication weighs more as K grows. At K = {} "
      "(strong): {}.",
      p.batch, p.strongGlobalBatch, ks.back(),
      p.strong.empty()
          ? std::string("no worker count divides the global batch")
          : atK(
                p.strong, ks.back(), [](const StepEstimate& e) { return e.throughput; },
                [](double v) { return fmt::format("{:.4g}/s", v); }, true));
  return f;
}

Figure whatIfFigure(const Panel& p) {
  Figure f;
  f.title = "What if: sensitivity of the step time";
  f.height = 450;
  const auto& ws = whatIfs();
  double maxStep = 0;
  for (const auto& s : p.sensitivity)
    for (auto t : s.step)
      maxStep = std::max(maxStep, t.value());
  const Unit u = timeUnit(maxStep);
  static const char* colors[] = {"#4e79a7", "#e15759", "#59a14f", "#76b7b2", "#f28e2b"};
  std::string script = std::string(kStyle) + "set style fill solid 0.92 noborder\n" +
                       "set ylabel " + quoted("time per step (" + u.name + ")") +
                       "\nset yrange [0:*]\nset grid noxtics\n";
  const int bars = int(ws.size()) + 1;
  std::vector<std::string> tics;
  std::vector<std::vector<std::string>> series(static_cast<size_t>(bars));
  for (size_t i = 0; i < p.sensitivity.size(); ++i) {
    const auto& sens = p.sensitivity[i];
    const double base = double(i) * (bars + 1);
    tics.push_back(fmt::format("\"{}\" {}", toString(sens.strategy), num(base + (bars - 1) / 2.0)));
    for (int b = 0; b < bars && b < int(sens.step.size()); ++b)
      series[size_t(b)].push_back(
          fmt::format("{} {}", num(base + b), num(sens.step[size_t(b)].value() * u.scale)));
  }
  script += fmt::format("set xtics ({})\nset xrange [-0.8:{}]\n", fmt::join(tics, ", "),
                        num(double(p.sensitivity.size()) * (bars + 1) - 1.2));
  std::vector<std::string> plots;
  for (int b = 0; b < bars; ++b) {
    const std::string name = fmt::format("w{}", b);
    script += datablock(name, series[size_t(b)]);
    const std::string label = b == 0 ? std::string("as configured") : ws[size_t(b - 1)].name;
    plots.push_back(
        fmt::format("${} using 1:($2/2):($1-0.45):($1+0.45):(0):2 with boxxy lc rgb '{}' title {}",
                    name, colors[b % 5], quoted(label)));
  }
  script += plotCommand(plots);
  f.script = script;
  // The most and least bandwidth-sensitive strategies.
  std::vector<std::string> parts;
  for (const auto& sens : p.sensitivity) {
    if (sens.step.size() != ws.size() + 1)
      continue;
    std::vector<std::string> changes;
    for (size_t w = 0; w < ws.size(); ++w)
      changes.push_back(
          fmt::format("{} {:+.0f} %", ws[w].name, (sens.step[w + 1] / sens.step[0] - 1) * 100));
    parts.push_back(fmt::format("{}: {}", toString(sens.strategy), fmt::join(changes, ", ")));
  }
  f.reading = fmt::format(
      "The step time at K = {} when one thing about the cluster changes: link bandwidth halved "
      "or doubled, compute twice as fast, latency ten times longer. A strategy whose step moves "
      "with bandwidth is communication-bound; one that moves with compute is compute-bound. "
      "Changes: {}.",
      p.sensitivity.empty() ? 0 : p.sensitivity.front().workers, fmt::join(parts, "; "));
  return f;
}

// The layouts of the panel's largest K for one global batch (strata
// search): throughput against memory, the Pareto front, the device.
Figure searchFigure(const Panel& p, const Cluster& cl, int globalBatch) {
  Figure f;
  f.title =
      fmt::format("Layouts of {} workers for a global batch of {}", p.searchWorkers, globalBatch);
  const double capacity = cl.device.memoryCapacity.value();
  double maxBytes = capacity;
  for (const auto& r : p.search)
    maxBytes = std::max(maxBytes, r.peakMemory.value());
  const Unit u = byteUnit(maxBytes);
  const auto front = paretoFront(p.search);
  std::vector<char> onFront(p.search.size(), 0);
  for (size_t i : front)
    onFront[i] = 1;
  std::vector<std::string> fit, over, line;
  auto point = [&](const SearchRow& r) {
    return fmt::format("{} {}", num(r.peakMemory.value() * u.scale), num(r.estimate.throughput));
  };
  for (size_t i = 0; i < p.search.size(); ++i)
    if (!onFront[i])
      (p.search[i].fits ? fit : over).push_back(point(p.search[i]));
  for (size_t i : front)
    line.push_back(point(p.search[i]));
  // An empty datablock would stop gnuplot: a point outside the plot stands in.
  const std::string none = fmt::format("{} 0", num(-maxBytes * u.scale));
  for (auto* d : {&fit, &over, &line})
    if (d->empty())
      d->push_back(none);
  f.script =
      std::string(kStyle) + datablock("fits", fit) + datablock("over", over) +
      datablock("front", line) +
      fmt::format(
          "set xlabel 'peak memory per worker ({})'\nset ylabel 'examples per "
          "second'\nset xrange [0:{}]\nset yrange [0:*]\n"
          "set arrow from {},graph 0 to {},graph 1 nohead dt 2 lw 2 lc rgb "
          "'#333333'\n",
          u.name, num(maxBytes * u.scale * 1.05), num(capacity * u.scale),
          num(capacity * u.scale)) +
      plotCommand({"$over using 1:2 with points pt 6 ps 0.7 lc rgb '#bbbbbb' title "
                   "'does not fit'",
                   "$fits using 1:2 with points pt 7 ps 0.6 lc rgb '#4e79a7' title 'fits'",
                   "$front using 1:2 with linespoints lw 2 pt 7 ps 0.9 lc rgb '#e15759' "
                   "title 'Pareto front'",
                   "NaN with lines dt 2 lw 2 lc rgb '#333333' title " +
                       quoted("device capacity (" + formatBytes(cl.device.memoryCapacity) + ")")});
  int fitting = 0;
  for (const auto& r : p.search)
    fitting += r.fits ? 1 : 0;
  std::string text = fmt::format(
      "Every layout strata search enumerates for {} workers and a global batch of {} (dp x tp x "
      "pp, schedule, micro-batch, ZeRO, recomputation, sequence parallelism), priced by the "
      "closed form: {} layouts, {} fit in the {} of a device. ",
      p.searchWorkers, globalBatch, p.search.size(), fitting,
      formatBytes(cl.device.memoryCapacity));
  if (front.empty()) {
    text += "None fits: no Pareto front.";
  } else {
    const SearchRow& fastest = p.search[front.back()];
    const SearchRow& leanest = p.search[front.front()];
    text += fmt::format(
        "The fastest that fits: {}, {:.4g} examples/s at {} per worker. The Pareto front (a "
        "layout no other beats on both throughput and memory) holds {} layouts, from {} ({:.4g} "
        "examples/s at {}) to the fastest.",
        describeLayout(fastest.scenario), fastest.estimate.throughput,
        formatBytes(fastest.peakMemory), front.size(), describeLayout(leanest.scenario),
        leanest.estimate.throughput, formatBytes(leanest.peakMemory));
    if (!p.searchWhy.empty())
      text += " " + p.searchWhy;
  }
  f.reading = text;
  return f;
}

// The strategy the links and timeline figures look at: the summary's choice
// at the largest K, else the first.
Strategy focusStrategy(const Panel& p, const std::vector<Verdict>& verdicts) {
  if (!verdicts.empty() && verdicts.back().best)
    return *verdicts.back().best;
  return p.rows.front().scenario.strategy;
}

Figure linksFigure(const Panel& p, Strategy focus) {
  Figure f;
  f.title = "Link utilisation (simulator)";
  std::vector<const Panel::Link*> links;
  for (const auto& l : p.links)
    if (l.strategy == focus)
      links.push_back(&l);
  constexpr size_t kShown = 14;
  const size_t total = links.size();
  if (links.size() > kShown)
    links.resize(kShown);
  f.height = std::max(300, 90 + 26 * int(links.size()));
  std::vector<std::string> lines;
  for (size_t i = 0; i < links.size(); ++i)
    lines.push_back(
        fmt::format("{} {} {}", i, num(links[i]->utilisation * 100), field(links[i]->name)));
  if (lines.empty())
    lines.push_back("0 0 \"(no link carried bytes)\"");
  f.script = std::string(kStyle) + "set style fill solid 0.92 noborder\nset key off\n" +
             "set xlabel 'utilisation: bytes / (bandwidth x step) (%)'\nset xrange [0:*]\n" +
             fmt::format("set yrange [{}:-0.7]\n", num(double(lines.size()) - 0.3)) +
             "set grid noytics\nset lmargin 28\n" + datablock("l", lines) +
             "plot $l using ($2/2):1:(0):2:($1-0.38):($1+0.38):ytic(3) with boxxy lc rgb '" +
             colorOf(focus) + "'\n";
  const int k = p.links.empty() ? 0 : p.links.front().workers;
  f.reading =
      links.empty()
          ? fmt::format("{} at K = {} moves no bytes over links.", toString(focus), k)
          : fmt::format(
                "Each bar is one direction of one link, as the simulator played one step of {} at "
                "K = {}: the bytes it carried over what it could have carried in the step. "
                "Busiest: {} at {:.0f} % ({} moved, busy {}).{} A link near 100 % is the "
                "bottleneck; links well below it wait on latency, dependencies or compute.",
                toString(focus), k, links.front()->name, links.front()->utilisation * 100,
                formatBytes(links.front()->bytes), formatSeconds(links.front()->busy),
                total > kShown ? fmt::format(" The busiest {} of {} are shown.", kShown, total)
                               : std::string());
  return f;
}

Figure timelineFigure(const Panel& p) {
  Figure f;
  const auto& e = p.timelineEstimate;
  const int k = e.scenario.workers;
  const int shown = std::min(k, kTimelineMaxWorkers);
  f.title =
      fmt::format("One step, worker by worker: {} at K = {}", toString(e.scenario.strategy), k);
  f.height = std::max(320, 110 + 52 * shown);
  const Unit u = timeUnit(e.step.value());
  static const std::vector<std::pair<std::string, std::string>> kinds = {{"forward", "#4e79a7"},
                                                                         {"backward", "#76b7b2"},
                                                                         {"update", "#59a14f"},
                                                                         {"transfer", "#e15759"},
                                                                         {"reduce", "#f28e2b"}};
  // Slices of one kind on one lane closer than 0.1 % of the step are drawn
  // as one bar: the same picture, a fraction of the SVG (segmented
  // transfers are thousands of slices).
  std::map<std::pair<std::string, int>, std::vector<std::pair<double, double>>> spans;
  for (const auto& sl : p.timeline.slices) {
    if (sl.track == Track::kReceive || sl.worker >= shown)
      continue;
    const std::string& kind =
        sl.task < p.timelineTaskKind.size() ? p.timelineTaskKind[sl.task] : std::string("?");
    const int lane = 2 * sl.worker + (sl.track == Track::kCompute ? 0 : 1);
    spans[{kind, lane}].push_back({sl.start, sl.end});
  }
  const double joinGap = e.step.value() * 1e-3;
  std::map<std::string, std::vector<std::string>> lines;
  for (auto& [key, list] : spans) {
    std::sort(list.begin(), list.end());
    std::vector<std::pair<double, double>> merged;
    for (const auto& span : list)
      if (!merged.empty() && span.first <= merged.back().second + joinGap)
        merged.back().second = std::max(merged.back().second, span.second);
      else
        merged.push_back(span);
    for (const auto& [start, end] : merged)
      lines[key.first].push_back(
          fmt::format("{} {} {}", num(start * u.scale), num(end * u.scale), key.second));
  }
  std::string tics;
  for (int w = 0; w < shown; ++w)
    tics += fmt::format("{}\"worker {} compute\" {}, \"worker {} communication\" {}", w ? ", " : "",
                        w, 2 * w, w, 2 * w + 1);
  std::string script =
      std::string(kStyle) + "set style fill solid 0.95 noborder\n" + "set xlabel " +
      quoted("time in the step (" + u.name + ")") + "\n" +
      fmt::format("set xrange [0:{}]\n", num(e.step.value() * u.scale)) +
      fmt::format("set yrange [{}:-0.7]\nset ytics ({})\n", 2 * shown - 0.3, tics) +
      "set grid noytics\nset lmargin 30\n";
  std::vector<std::string> plots;
  for (const auto& [kind, color] : kinds) {
    const auto it = lines.find(kind);
    if (it == lines.end())
      continue;
    script += datablock(kind, it->second);
    plots.push_back(
        fmt::format("${} using (($1+$2)/2):3:1:2:($3-0.4):($3+0.4) with boxxy lc rgb '{}' title {}",
                    kind, color, quoted(kind)));
  }
  if (plots.empty())
    plots.push_back("NaN notitle");
  script += plotCommand(plots);
  f.script = script;
  f.reading = fmt::format(
      "One training step of {} with K = {} workers of b = {} examples, as the simulator plays its "
      "Plan{}: for each worker, its compute stream (forward, backward, update) and its "
      "communication (transfers it sends, reductions it runs). Step time {}; mean exposed "
      "communication {} ({:.0f} % of the step), idle {}. Where communication sits under compute, "
      "it is hidden; where compute stops and waits, it is exposed.",
      toString(e.scenario.strategy), k, e.scenario.batchPerWorker,
      shown < k ? fmt::format(" (workers 0 to {} of {} shown)", shown - 1, k) : std::string(),
      formatSeconds(e.step), formatSeconds(meanExposed(e)), meanExposed(e) / e.step * 100,
      formatSeconds(meanIdle(e)));
  return f;
}

// Several clusters: speedup per strategy, one panel per cluster, same axes.
Figure clustersFigure(const Report& report, const ReportRequest& rq, int network) {
  Figure f;
  f.title = "Clusters side by side";
  std::vector<const Panel*> panels;
  for (const auto& p : report.panels)
    if (p.network == network && p.optionSet == 0)
      panels.push_back(&p);
  const int n = int(panels.size());
  const int cols = std::min(n, 3);
  const int rows = (n + cols - 1) / cols;
  f.width = 360 * cols + 40;
  f.height = 340 * rows;
  double ymax = 1;
  for (const auto* p : panels)
    for (const auto& e : p->rows)
      ymax = std::max(ymax, e.speedup);
  std::string script =
      std::string(kStyle) + "set key inside left top Left reverse\n" + workersAxis(rq.workers) +
      "set logscale y 2\n" +
      fmt::format("set yrange [0.5:{}]\n", num(std::max(ymax, double(rq.workers.back())) * 1.2)) +
      "set ylabel 'speedup (x)'\n" + fmt::format("set multiplot layout {},{}\n", rows, cols);
  std::vector<std::string> best;
  int i = 0;
  for (const auto* p : panels) {
    const auto& cl = rq.clusters[p->cluster];
    std::vector<std::string> plots;
    for (const auto& [strategy, list] : byStrategy(p->rows)) {
      std::vector<std::string> lines;
      for (const auto* e : list)
        lines.push_back(fmt::format("{} {}", e->scenario.workers, num(e->speedup)));
      const std::string name = fmt::format("c{}", i++);
      script += datablock(name, lines);
      plots.push_back(
          fmt::format("${} using 1:2 with linespoints lw 2 pt 7 ps 0.6 lc rgb '{}' "
                      "title {}",
                      name, colorOf(strategy), quoted(std::string(toString(strategy)))));
    }
    plots.push_back("x with lines dt 2 lc rgb '#333333' title 'ideal'");
    script += "set title " + quoted(cl.name) + "\n" + plotCommand(plots);
    const auto& v = report.verdicts[size_t(&*p - &report.panels.front())];
    if (!v.empty() && v.back().best)
      best.push_back(fmt::format("{}: {} ({})", cl.name, toString(*v.back().best),
                                 formatSeconds(v.back().step)));
  }
  script += "unset multiplot\n";
  f.script = script;
  f.reading = fmt::format(
      "The speedup of every strategy on each cluster, on the same axes, for {} with b = {}{}. The "
      "fastest strategy that fits at K = {}: {}.",
      rq.networks[size_t(network)].name, rq.batches.front(),
      rq.optionSets.size() > 1 ? " (" + optionSetLabel(rq, 0) + ")" : std::string(),
      rq.workers.back(),
      best.empty() ? std::string("none fits") : fmt::format("{}", fmt::join(best, "; ")));
  return f;
}

// ---- predicted against measured ---------------------------------------------

Figure validationScatter(const std::vector<study::MeasuredPoint>& points) {
  Figure f;
  f.title = "Predicted against measured";
  f.height = 520;
  f.width = 640;
  double lo = 1e300, hi = 0;
  for (const auto& m : points)
    for (double v : {m.step[0].value(), m.step[1].value(), m.step[2].value(), m.spreadMin.value(),
                     m.spreadMax.value()})
      if (v > 0) {
        lo = std::min(lo, v);
        hi = std::max(hi, v);
      }
  if (hi <= 0) {
    lo = 1e-3;
    hi = 1;
  }
  const Unit u = timeUnit(hi);
  // As validate counts them: the held-out rows within claims are predictions
  // (filled); the others (fitted on the network, or outside what the model
  // claims) are drawn hollow and left out of the errors.
  std::vector<double> modelErr, simErr;
  // Per engine and kind: measured, predicted, spread min, spread max (the
  // xerrorbars columns).
  std::array<std::vector<std::string>, 4> blocks;  // model, model other, sim, sim other
  int busy = 0;
  for (const auto& m : points) {
    const bool counted = m.heldOut && m.withinClaims;
    busy += m.busy ? 1 : 0;
    if (counted) {
      modelErr.push_back(std::abs(relativeError(m.step[1], m.step[0])));
      simErr.push_back(std::abs(relativeError(m.step[2], m.step[0])));
    }
    const std::string spread =
        num(m.spreadMin.value() * u.scale) + " " + num(m.spreadMax.value() * u.scale);
    for (size_t e = 0; e < 2; ++e)
      blocks[2 * e + (counted ? 0 : 1)].push_back(
          fmt::format("{} {} {}", num(m.step[0].value() * u.scale),
                      num(m.step[1 + e].value() * u.scale), spread));
  }
  auto median = [](std::vector<double> v) {
    return medianOf(std::vector<Seconds>(v.begin(), v.end())).value();
  };
  auto worst = [](const std::vector<double>& v) {
    return v.empty() ? 0.0 : *std::max_element(v.begin(), v.end());
  };
  // Log axes when the points span a decade or more, else linear from 0 (a
  // log axis over less than a decade shows almost no tick labels).
  const bool logAxes = hi / lo >= 10;
  const double low = logAxes ? lo * u.scale / 1.5 : 0;
  const double high = hi * u.scale * (logAxes ? 1.5 : 1.15);
  std::string script = std::string(kStyle) + "set key inside left top\n" +
                       (logAxes ? "set logscale xy 10\n" : "") + "set size ratio -1\n" +
                       fmt::format("set xrange [{}:{}]\nset yrange [{}:{}]\n", num(low), num(high),
                                   num(low), num(high)) +
                       "set xlabel " + quoted("measured step (" + u.name + "), median and spread") +
                       "\n" + "set ylabel " + quoted("predicted step (" + u.name + ")") + "\n";
  std::vector<std::string> plots = {
      "x with lines dt 2 lw 1.5 lc rgb '#333333' title 'y = x (exact)'"};
  static const char* names[] = {"model", "model, not held out", "simulator",
                                "simulator, not held out"};
  static const int pointTypes[] = {7, 6, 5, 4};  // filled circle, circle, filled square, square
  // The simulator's larger squares first, the model's circles over them: where
  // the two predict the same step both stay visible.
  for (size_t b : {2, 3, 0, 1}) {
    if (blocks[b].empty())
      continue;
    const std::string name = fmt::format("v{}", b);
    script += datablock(name, blocks[b]);
    plots.push_back(fmt::format(
        "${} using 1:2:3:4 with xerrorbars pt {} ps {} lc rgb '{}' title {}", name, pointTypes[b],
        b < 2 ? "0.7" : "1.2", b < 2 ? "#4e79a7" : "#f28e2b", quoted(names[b])));
  }
  f.script = script + plotCommand(plots);
  const size_t counted = modelErr.size();
  f.reading = fmt::format(
      "Each point is one validated configuration ({} in all): the executor's measured median step "
      "(x, with the run-to-run spread as a horizontal bar) against the prediction (y). On the "
      "dashed line a prediction is exact; above it, too slow. {}{}",
      points.size(),
      counted == 0
          ? std::string("No row is a prediction (none was held out of calibration and within "
                        "what the model claims), so no error is claimed; all are drawn hollow.")
          : fmt::format("Over the {} rows held out of calibration and within claims (filled), "
                        "median |error|: model {:.1f} %, simulator {:.1f} %; worst: model {:.1f} "
                        "%, simulator {:.1f} %.{}",
                        counted, median(modelErr) * 100, median(simErr) * 100,
                        worst(modelErr) * 100, worst(simErr) * 100,
                        counted < points.size()
                            ? fmt::format(" {} other rows are drawn hollow and not counted.",
                                          points.size() - counted)
                            : std::string()),
      busy > 0 ? fmt::format(" {} rows ran while other processes used the machine (validate's "
                             "busy flag): their measurements are less certain.",
                             busy)
               : std::string());
  return f;
}

Figure validationPhases(const std::vector<study::MeasuredPoint>& all) {
  Figure f;
  f.title = "Per phase: measured, model, simulator";
  constexpr size_t kShown = 16;
  std::vector<study::MeasuredPoint> points(all.begin(), all.begin() + std::min(all.size(), kShown));
  f.width = std::max(760, 140 + 70 * int(points.size()));
  f.height = 470;
  double hi = 0;
  for (const auto& m : points)
    for (int i = 0; i < 3; ++i)
      hi = std::max({hi, m.compute[size_t(i)].value(), m.communication[size_t(i)].value()});
  const Unit u = timeUnit(hi > 0 ? hi : 1);
  static const char* colors[] = {"#333333", "#4e79a7", "#f28e2b"};
  static const char* names[] = {"measured", "model", "simulator"};
  std::vector<std::vector<std::string>> compute(3), comm(3);
  std::vector<std::string> tics;
  for (size_t r = 0; r < points.size(); ++r) {
    const auto& m = points[r];
    const double base = double(r) * 8;
    tics.push_back(fmt::format("\"{} {} K={}\" {}", m.network, toString(m.strategy), m.workers,
                               num(base + 3)));
    for (size_t i = 0; i < 3; ++i) {
      compute[i].push_back(
          fmt::format("{} {}", num(base + double(i)), num(m.compute[i].value() * u.scale)));
      comm[i].push_back(fmt::format("{} {}", num(base + 4 + double(i)),
                                    num(m.communication[i].value() * u.scale)));
    }
  }
  std::string script = std::string(kStyle) + "set style fill solid 0.92 noborder\n" +
                       "set ylabel " + quoted("time per step (" + u.name + ")") + "\n" +
                       "set yrange [0:*]\nset grid noxtics\nset xtics rotate by -30\n" +
                       fmt::format("set xtics ({})\nset xrange [-1:{}]\n", fmt::join(tics, ", "),
                                   num(double(points.size()) * 8 - 1));
  std::vector<std::string> plots;
  for (size_t i = 0; i < 3; ++i) {
    script +=
        datablock(fmt::format("p{}", i), compute[i]) + datablock(fmt::format("q{}", i), comm[i]);
    plots.push_back(fmt::format(
        "$p{} using 1:($2/2):($1-0.45):($1+0.45):(0):2 with boxxy fs solid 0.92 lc rgb '{}' title "
        "{}",
        i, colors[i], quoted(std::string(names[i]) + " compute")));
    plots.push_back(fmt::format(
        "$q{} using 1:($2/2):($1-0.45):($1+0.45):(0):2 with boxxy fs pattern 4 lc rgb '{}' title "
        "{}",
        i, colors[i], quoted(std::string(names[i]) + " communication")));
  }
  script += plotCommand(plots);
  f.script = script;
  f.reading = fmt::format(
      "For each validated configuration, three bars of compute (mean over workers, solid) and "
      "three of communication (hatched): measured, model, simulator. A phase the model prices "
      "wrong shows here even when the errors cancel in the step.{}",
      all.size() > kShown ? fmt::format(" The first {} of {} rows are shown; all are in "
                                        "data/validation.csv.",
                                        kShown, all.size())
                          : std::string());
  return f;
}

}  // namespace

std::string panelLabel(const Panel& panel, const ReportRequest& request) {
  const std::string set = optionSetLabel(request, size_t(panel.optionSet));
  return fmt::format("{} on {}, b = {}{}", request.networks[size_t(panel.network)].name,
                     request.clusters[size_t(panel.cluster)].name, panel.batch,
                     set.empty() ? "" : ", " + set);
}

std::vector<Figure> makeFigures(const Report& report, const ReportRequest& rq) {
  std::vector<Figure> out;
  auto add = [&](Figure f, const std::string& name, const std::string& section,
                 const std::string& suffix) {
    f.name = name + suffix;
    f.id = "fig-" + f.name;
    f.section = section;
    out.push_back(std::move(f));
  };
  for (size_t i = 0; i < report.panels.size(); ++i) {
    const Panel& p = report.panels[i];
    const std::string sfx = panelSuffix(p, rq);
    const auto& ks = rq.workers;
    add(speedupFigure(p, ks), "speedup", "scaling", sfx);
    add(efficiencyFigure(p, ks), "efficiency", "scaling", sfx);
    add(throughputFigure(p, ks), "throughput", "scaling", sfx);
    if (!p.strong.empty())
      add(scalingFigure(p, ks), "weak-strong", "scaling", sfx);
    add(breakdownFigure(p, ks), "breakdown", "time", sfx);
    add(bytesFigure(p, ks), "bytes", "traffic", sfx);
    add(memoryFigure(p, ks, rq.clusters[size_t(p.cluster)]), "memory", "memory", sfx);
    const Strategy focus = focusStrategy(p, report.verdicts[i]);
    add(linksFigure(p, focus), "links", "traffic", sfx);
    add(timelineFigure(p), "timeline", "time", sfx);
    add(whatIfFigure(p), "whatif", "whatif", sfx);
    if (rq.searchGlobalBatch > 0)
      add(searchFigure(p, rq.clusters[size_t(p.cluster)], rq.searchGlobalBatch), "search", "search",
          sfx);
  }
  if (rq.clusters.size() > 1)
    for (size_t n = 0; n < rq.networks.size(); ++n)
      add(clustersFigure(report, rq, int(n)), "clusters", "clusters",
          rq.networks.size() > 1 ? fmt::format("-{}", slug(rq.networks[n].name)) : std::string());
  if (!rq.measured.empty()) {
    add(validationScatter(rq.measured), "validation", "validation", "");
    add(validationPhases(rq.measured), "validation-phases", "validation", "");
  }
  return out;
}

}  // namespace strata::reports

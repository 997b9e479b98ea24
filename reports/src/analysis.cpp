// buildReport: every number a report shows, priced once (docs/reports.md).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "internal.h"
#include "strata/model/error.h"
#include "strata/model/estimate.h"
#include "strata/model/plan.h"
#include "strata/model/quantity_text.h"
#include "strata/reports/report.h"
#include "strata/sim/simulator.h"
#include "strata/study/validation.h"

namespace strata::reports {

const std::vector<WhatIf>& whatIfs() {
  static const std::vector<WhatIf> list = {
      {"bandwidth x0.5", "every link's bandwidth (and bandwidth table) halved"},
      {"bandwidth x2", "every link's bandwidth (and bandwidth table) doubled"},
      {"compute x2", "every kernel, update and reduction twice as fast"},
      {"latency x10", "every link's latency ten times longer"},
  };
  return list;
}

Cluster applyWhatIf(const Cluster& cluster, size_t index) {
  STRATA_ENFORCE_OP(index, <, whatIfs().size());
  Cluster c = cluster;
  auto scaleBandwidth = [&c](double f) {
    for (auto& level : c.levels) {
      level.link.bandwidth = level.link.bandwidth * f;
      for (auto& point : level.link.bandwidthTable)
        point.bandwidth = point.bandwidth * f;
    }
  };
  switch (index) {
    case 0:
      scaleBandwidth(0.5);
      break;
    case 1:
      scaleBandwidth(2.0);
      break;
    case 2:
      c.device.computeScale *= 2.0;
      c.device.reduceBandwidth = c.device.reduceBandwidth * 2.0;
      break;
    default:
      for (auto& level : c.levels)
        level.link.latency = level.link.latency * 10.0;
      break;
  }
  c.name += " (" + whatIfs()[index].name + ")";
  return c;
}

namespace {

// Strategies of `request` that apply to `net` (owt-* needs an FC part).
std::vector<Strategy> strategiesFor(const ReportRequest& request, const Network& net) {
  std::vector<Strategy> out;
  for (auto s : request.strategies)
    if (!isModelParallel(s) || net.modelParallelFrom > 0)
      out.push_back(s);
  return out;
}

}  // namespace

std::string optionsText(const StrategyOptions& o) {
  return fmt::format("{}, overlap {}, segment {}, bucket {}, FC update per {}, conv sync {}",
                     toString(o.element), o.overlap ? "on" : "off",
                     o.segment.value() > 0 ? formatBytes(o.segment) : "off",
                     o.bucket.value() > 0 ? formatBytes(o.bucket) : "per layer",
                     toString(o.fcUpdate), toString(o.convSync));
}

std::string optionSetLabel(const ReportRequest& request, size_t index) {
  const auto& sets = request.optionSets;
  if (sets.size() <= 1)
    return "";
  auto varies = [&](auto field) {
    for (const auto& o : sets)
      if (!(o.*field == sets.front().*field))
        return true;
    return false;
  };
  const auto& o = sets[index];
  std::vector<std::string> parts;
  if (varies(&StrategyOptions::overlap))
    parts.push_back(fmt::format("overlap {}", o.overlap ? "on" : "off"));
  if (varies(&StrategyOptions::fcUpdate))
    parts.push_back(fmt::format("FC update per {}", toString(o.fcUpdate)));
  if (varies(&StrategyOptions::element))
    parts.push_back(std::string(toString(o.element)));
  if (varies(&StrategyOptions::optimizer))
    parts.push_back(fmt::format("optimizer {}", toString(o.optimizer)));
  if (varies(&StrategyOptions::segment))
    parts.push_back("segment " + formatBytes(o.segment));
  if (varies(&StrategyOptions::bucket))
    parts.push_back("bucket " + formatBytes(o.bucket));
  if (varies(&StrategyOptions::convSync))
    parts.push_back(fmt::format("conv sync {}", toString(o.convSync)));
  return parts.empty() ? fmt::format("option set {}", index + 1)
                       : fmt::format("{}", fmt::join(parts, ", "));
}

namespace {}  // namespace

namespace {

std::string kindOf(const Task& t) {
  switch (t.kind) {
    case TaskKind::kCompute:
      return t.phase == Phase::kFwd ? "forward" : "backward";
    case TaskKind::kUpdate:
      return "update";
    case TaskKind::kTransfer:
      return "transfer";
    case TaskKind::kReduce:
      return "reduce";
  }
  return "?";
}

// Counts the configurations buildReport prices, for the progress callback.
int countWork(const ReportRequest& request) {
  int total = 0;
  const int ks = int(request.workers.size());
  for (const auto& net : request.networks) {
    const int ss = int(strategiesFor(request, net).size());
    const int perCluster = ss * ks * int(request.batches.size())         // weak scaling
                           + (request.batches.size() > 1 ? ss * ks : 0)  // strong (at most)
                           + ss * int(whatIfs().size())                  // what-ifs
                           + ss                                          // links
                           + 1                                           // timeline
                           + (request.searchGlobalBatch > 0 ? 1 : 0);    // layouts
    total += perCluster * int(request.clusters.size() * request.optionSets.size());
  }
  return total;
}

std::string verdictWhy(const std::vector<const StepEstimate*>& atK, const StepEstimate& best,
                       const Cluster& cl) {
  if (best.scenario.workers == 1)
    return fmt::format(
        "one worker: no communication, every strategy runs the same compute; "
        "peak memory {} of {}",
        formatBytes(peakMemory(best)), formatBytes(cl.device.memoryCapacity));
  std::string why;
  // The runner-up among those that fit, for the margin.
  const StepEstimate* second = nullptr;
  for (const auto* e : atK)
    if (e != &best && e->fitsInMemory && (!second || e->step < second->step))
      second = e;
  if (second) {
    const double margin = second->step / best.step - 1;
    why = margin < 0.01
              ? fmt::format("a tie with {} ({}, within 1 %)", toString(second->scenario.strategy),
                            formatSeconds(second->step))
              : fmt::format("{:.0f} % faster than {} ({})", margin * 100,
                            toString(second->scenario.strategy), formatSeconds(second->step));
  } else {
    why = "the only strategy that fits";
  }
  const double exposed = meanExposed(best) / best.step;
  if (exposed < 0.02)
    why += fmt::format("; communication hidden behind compute ({:.1f} % of the step exposed)",
                       exposed * 100);
  else
    why += fmt::format("; exposed communication {:.0f} % of the step{}", exposed * 100,
                       best.bottleneck.empty() ? "" : ", bottleneck " + best.bottleneck);
  why += fmt::format("; peak memory {} of {} per worker", formatBytes(peakMemory(best)),
                     formatBytes(cl.device.memoryCapacity));
  std::vector<std::string> excluded;
  for (const auto* e : atK)
    if (!e->fitsInMemory && e->step < best.step)
      excluded.push_back(
          fmt::format("{} ({})", toString(e->scenario.strategy), formatBytes(peakMemory(*e))));
  if (!excluded.empty())
    why += fmt::format("; faster but out of memory: {}", fmt::join(excluded, ", "));
  return why;
}

}  // namespace

std::vector<size_t> paretoFront(const std::vector<SearchRow>& rows) {
  std::vector<size_t> fitting;
  for (size_t i = 0; i < rows.size(); ++i)
    if (rows[i].fits)
      fitting.push_back(i);
  // Memory ascending, then the fastest first: a layout is on the front when
  // it is faster than every one before it.
  std::stable_sort(fitting.begin(), fitting.end(), [&](size_t a, size_t b) {
    if (rows[a].peakMemory.value() != rows[b].peakMemory.value())
      return rows[a].peakMemory.value() < rows[b].peakMemory.value();
    return rows[a].estimate.throughput > rows[b].estimate.throughput;
  });
  std::vector<size_t> front;
  double best = -1;
  for (size_t i : fitting)
    if (rows[i].estimate.throughput > best) {
      front.push_back(i);
      best = rows[i].estimate.throughput;
    }
  return front;
}

Report buildReport(const ReportRequest& request) {
  STRATA_ENFORCE(!request.networks.empty() && !request.clusters.empty() &&
                 !request.strategies.empty() && !request.workers.empty() &&
                 !request.batches.empty() && !request.optionSets.empty());
  // Each thing once: rows and figures are keyed by these names (a repeated
  // strategy once overran the summary's buffers); front ends refuse repeats
  // with the option or file:line:key, this is the library's own guard.
  auto once = [](const auto& items, auto name) {
    for (size_t i = 0; i < items.size(); ++i)
      for (size_t j = 0; j < i; ++j)
        STRATA_ENFORCE(name(items[i]) != name(items[j]));
  };
  once(request.networks, [](const Network& n) { return n.name; });
  once(request.clusters, [](const Cluster& c) { return c.name; });
  once(request.strategies, [](Strategy s) { return std::string(toString(s)); });
  once(request.workers, [](int k) { return std::to_string(k); });
  once(request.batches, [](int b) { return std::to_string(b); });
  const int total = countWork(request);
  int done = 0;
  auto tick = [&] {
    ++done;
    if (request.progress)
      request.progress(std::min(done, total), total);
  };
  Report report;
  for (size_t n = 0; n < request.networks.size(); ++n) {
    const Network& net = request.networks[n];
    const auto strategies = strategiesFor(request, net);
    if (strategies.empty())
      throw OptionError("--strategies",
                        fmt::format("none of the strategies applies to {}: owt-* needs fully "
                                    "connected layers",
                                    net.name));
    // Panels: cluster-major, then option set.
    const size_t sets = request.optionSets.size();
    for (size_t cv = 0; cv < request.clusters.size() * sets; ++cv) {
      const size_t c = cv / sets;
      const Cluster& cl = request.clusters[c];
      const StrategyOptions& opts = request.optionSets[cv % sets];
      Panel p;
      p.network = int(n);
      p.cluster = int(c);
      p.optionSet = int(cv % sets);
      p.batch = request.batches.front();
      for (size_t bi = 0; bi < request.batches.size(); ++bi)
        for (auto s : strategies)
          for (int k : request.workers) {
            auto e =
                study::evaluate(net, cl, Scenario{s, k, request.batches[bi], opts}, request.engine);
            (bi == 0 ? p.rows : p.otherBatches).push_back(std::move(e));
            tick();
          }
      if (request.batches.size() > 1) {
        const int largest = *std::max_element(request.batches.begin(), request.batches.end());
        p.strongGlobalBatch = globalBatch(request.workers.front(), largest);
        for (auto s : strategies)
          for (int k : request.workers) {
            if (p.strongGlobalBatch % k == 0)
              p.strong.push_back(study::evaluate(
                  net, cl, Scenario{s, k, p.strongGlobalBatch / k, opts}, request.engine));
            tick();
          }
      }
      const int kMax = request.workers.back();
      for (auto s : strategies) {
        Panel::Sensitivity sens{s, kMax, {}};
        const Scenario sc{s, kMax, p.batch, opts};
        for (const auto& e : p.rows)
          if (e.scenario.strategy == s && e.scenario.workers == kMax)
            sens.step.push_back(e.step);
        for (size_t w = 0; w < whatIfs().size(); ++w) {
          sens.step.push_back(study::evaluate(net, applyWhatIf(cl, w), sc, request.engine).step);
          tick();
        }
        p.sensitivity.push_back(std::move(sens));
        const auto sim = sim::simulateScenario(net, cl, sc, sim::Options{});
        for (const auto& l : sim.links)
          p.links.push_back({s, kMax, l.name, l.bandwidth, l.bytes, l.busy, l.utilisation});
        tick();
      }
      // The timeline: the requested configuration, else the fastest strategy
      // that fits at the largest K a Gantt chart shows whole.
      Strategy ts = strategies.front();
      int tk = request.workers.front();
      if (request.timelineStrategy) {
        ts = *request.timelineStrategy;
        tk = request.timelineWorkers;
      } else {
        for (int k : request.workers)
          if (k <= kTimelineMaxWorkers)
            tk = k;
        const StepEstimate* best = nullptr;
        for (const auto& e : p.rows)
          if (e.scenario.workers == tk && (e.fitsInMemory || !best) &&
              (!best || e.step < best->step || !best->fitsInMemory))
            best = &e;
        if (best)
          ts = best->scenario.strategy;
      }
      if (isModelParallel(ts) && net.modelParallelFrom <= 0)
        throw OptionError("--timeline", fmt::format("{} needs fully connected layers; {} has none",
                                                    toString(ts), net.name));
      const Scenario tsc{ts, tk, p.batch, opts};
      const Plan plan = lowerToPlan(net, tsc, cl);
      sim::Options opt;
      opt.timeline = true;
      for (int w = 0; w < std::min(tk, kTimelineMaxWorkers); ++w)
        opt.timelineRanks.push_back(w);
      auto sim = sim::simulate(plan, net, cl, opt);
      p.timelineEstimate = std::move(sim.estimate);
      p.timeline = std::move(sim.timeline);
      for (const auto& t : plan.tasks)
        p.timelineTaskKind.push_back(kindOf(t));
      tick();

      if (request.searchGlobalBatch > 0) {
        SearchSpace space;
        space.workers = kMax;
        space.globalBatch = request.searchGlobalBatch;
        space.base = opts;
        auto found = searchLayouts(net, cl, space);
        p.searchWorkers = kMax;
        p.search = std::move(found.rows);
        p.searchWhy = std::move(found.why);
        tick();
      }

      std::vector<Verdict> verdicts;
      for (int k : request.workers) {
        std::vector<const StepEstimate*> atK;
        for (const auto& e : p.rows)
          if (e.scenario.workers == k)
            atK.push_back(&e);
        Verdict v;
        v.workers = k;
        const StepEstimate* best = nullptr;
        for (const auto* e : atK)
          if (e->fitsInMemory && (!best || e->step < best->step))
            best = e;
        if (best) {
          v.best = best->scenario.strategy;
          v.step = best->step;
          v.why = verdictWhy(atK, *best, cl);
        } else {
          v.why = fmt::format("no strategy fits in the {} of one worker's device",
                              formatBytes(cl.device.memoryCapacity));
        }
        verdicts.push_back(std::move(v));
      }
      report.panels.push_back(std::move(p));
      report.verdicts.push_back(std::move(verdicts));
    }
  }
  return report;
}

}  // namespace strata::reports

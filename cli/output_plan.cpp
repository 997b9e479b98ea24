// `strata plan`: the tasks of one training step, as a table or JSON.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "output.h"
#include "strata/model/limits.h"
#include "strata/model/quantity_text.h"
#include "table.h"

namespace strata::cli {

using nlohmann::ordered_json;

void printPlan(std::ostream& out, const Plan& plan, const Network& net, Format format,
               const std::string& placement) {
  checkPlanPrintable(plan, limits());  // every task and flow is held in memory first
  const auto& sc = plan.scenario;
  auto layerName = [&](int l) {
    return l >= 0 ? net.layers[static_cast<size_t>(l)].name : std::string();
  };
  if (format == Format::kJson) {
    ordered_json j;
    j["network"] = plan.network;
    j["strategy"] = std::string(toString(sc.strategy));
    j["workers"] = sc.workers;
    j["batch_per_worker"] = sc.batchPerWorker;
    if (!placement.empty())
      j["placement"] = placement;
    ordered_json collectives = ordered_json::array();
    for (const auto& c : plan.collectives)
      collectives.push_back({{"algorithm", c.algorithm},
                             {"buffer", std::string(toString(c.buffer))},
                             {"bytes", c.bytes.value()},
                             {"first_layer", layerName(c.firstLayer)},
                             {"last_layer", layerName(c.lastLayer)},
                             {"parts", c.parts},
                             {"segments", c.segments},
                             {"round", c.round},
                             {"tasks", {c.firstTask, c.lastTask}}});
    j["collectives"] = collectives;
    if (plan.iterations > 1) {
      // ps: steps back to back; a job is one key's push, server updates and pull.
      j["steps"] = plan.iterations;
      ordered_json jobs = ordered_json::array();
      for (const auto& pj : plan.jobs)
        jobs.push_back({{"step", pj.iteration},
                        {"priority", pj.priority},
                        {"first_layer", layerName(pj.firstLayer)},
                        {"last_layer", layerName(pj.lastLayer)},
                        {"tasks", {pj.firstTask, pj.lastTask}}});
      j["jobs"] = jobs;
    }
    ordered_json tasks = ordered_json::array();
    for (size_t i = 0; i < plan.tasks.size(); ++i) {
      const auto& t = plan.tasks[i];
      ordered_json task{{"id", i}, {"kind", std::string(toString(t.kind))}};
      if (plan.iterations > 1)
        task["step"] = t.iteration;
      if (t.micro >= 0)
        task["micro_batch"] = t.micro;
      if (t.kind == TaskKind::kUpdate && t.part >= 0)
        task[t.server ? "server_shard" : "shard"] = t.part;
      if (t.kind == TaskKind::kCompute || t.kind == TaskKind::kUpdate) {
        task["worker"] = t.worker;
        if (t.kind == TaskKind::kCompute) {
          task["layer"] = layerName(t.layer);
          task["phase"] = std::string(toString(t.phase));
          if (t.recompute)
            task["recompute"] = true;
          task["examples"] = t.examples;
          task["fraction"] = t.fraction;
        } else {
          task["params"] = t.params;
        }
      } else {
        task["collective"] = t.collective;
        task["step"] = t.step;
        task["segment"] = t.segment;
        task["pattern"] = std::string(toString(t.pattern));
        if (t.root >= 0)
          task["root"] = t.root;
        task["bytes"] = t.bytes.value();
        if (t.kind == TaskKind::kReduce)
          task["chunks_summed"] = t.inputs;
        ordered_json flows = ordered_json::array();
        for (const auto& f : plan.flowsOf(t))
          flows.push_back({f.src, f.dst, f.part});
        task["flows"] = flows;  // [src, dst, part]
      }
      task["deps"] = std::vector<int>(plan.depsOf(t).begin(), plan.depsOf(t).end());
      tasks.push_back(task);
    }
    j["tasks"] = tasks;
    out << j.dump(1) << "\n";
    return;
  }
  out << fmt::format(
      "plan of {}: {}, {} workers x {} examples; {} tasks ({} compute, {} transfer, "
      "{} reduce, {} update), {} collectives\n\n",
      plan.network, toString(sc.strategy), sc.workers, sc.batchPerWorker, plan.tasks.size(),
      plan.count(TaskKind::kCompute), plan.count(TaskKind::kTransfer),
      plan.count(TaskKind::kReduce), plan.count(TaskKind::kUpdate), plan.collectives.size());
  if (!placement.empty())
    out << "placement     " << placement << "\n\n";
  if (plan.iterations > 1)
    out << fmt::format(
        "{} steps back to back; {} ps jobs (a layer's push, server updates and pull), served "
        "one at a time, {} first\n\n",
        plan.iterations, plan.jobs.size(),
        sc.options.psPriority == PsPriority::kFirstNeeded ? "the earliest layer"
        : sc.options.psPriority == PsPriority::kFifo      ? "the earliest ready"
                                                          : "the latest ready");
  if (!plan.collectives.empty()) {
    Table c({"#", "collective", "buffer", "layers", "size", "parts x segments", "round", "tasks"},
            4);
    for (size_t i = 0; i < plan.collectives.size(); ++i) {
      const auto& x = plan.collectives[i];
      const std::string layers = x.firstLayer == x.lastLayer
                                     ? layerName(x.firstLayer)
                                     : layerName(x.lastLayer) + ".." + layerName(x.firstLayer);
      c.add({std::to_string(i), x.algorithm, std::string(toString(x.buffer)), layers,
             formatBytes(x.bytes), fmt::format("{} x {}", x.parts, x.segments),
             x.round >= 0 ? std::to_string(x.round) : "",
             fmt::format("{}-{}", x.firstTask, x.lastTask)});
    }
    c.print(out);
    out << "\n";
  }
  Table t({"id", "kind", "who", "what", "size", "after"}, 4);
  for (size_t i = 0; i < plan.tasks.size(); ++i) {
    const auto& task = plan.tasks[i];
    std::string who, what, size;
    switch (task.kind) {
      case TaskKind::kCompute:
        who = fmt::format("worker {}", task.worker);
        what = fmt::format("{} {}", task.recompute ? "recompute" : toString(task.phase),
                           layerName(task.layer));
        size = task.fraction < 1 ? fmt::format("{:g} ex x 1/{:g}", task.examples, 1 / task.fraction)
                                 : fmt::format("{:g} ex", task.examples);
        break;
      case TaskKind::kUpdate:
        who = fmt::format("worker {}", task.worker);
        what = "update";
        size = fmt::format("{} params", count(task.params));
        break;
      case TaskKind::kTransfer:
      case TaskKind::kReduce: {
        const auto flows = plan.flowsOf(task);
        who = task.pattern == PatternKind::kGather    ? fmt::format("all -> {}", task.root)
              : task.pattern == PatternKind::kScatter ? fmt::format("{} -> all", task.root)
                                                      : std::string(toString(task.pattern));
        if (task.pattern == PatternKind::kPairs ||
            (task.pattern == PatternKind::kRing && flows.size() <= 4)) {
          who.clear();
          for (size_t f = 0; f < flows.size() && f < 4; ++f)
            who += fmt::format("{}{}->{}", f ? " " : "", flows[f].src, flows[f].dst);
          if (flows.size() > 4)
            who += " ...";
        }
        what = fmt::format(
            "#{} {} {} {}", task.collective,
            plan.collectives[static_cast<size_t>(task.collective)].algorithm,
            task.kind == TaskKind::kReduce ? "sum" : "send",
            fmt::format("step {}{}", task.step,
                        task.segment > 0 ||
                                plan.collectives[static_cast<size_t>(task.collective)].segments > 1
                            ? fmt::format(" seg {}", task.segment)
                            : ""));
        size = task.kind == TaskKind::kReduce
                   ? fmt::format("{} x {}", task.inputs, formatBytes(task.bytes))
                   : fmt::format("{} per flow", formatBytes(task.bytes));
        break;
      }
    }
    if (task.micro >= 0)
      what += fmt::format(" (micro-batch {})", task.micro);
    std::string after;
    const auto deps = plan.depsOf(task);
    for (size_t d = 0; d < deps.size() && d < 6; ++d)
      after += fmt::format("{}{}", d ? "," : "", deps[d]);
    if (deps.size() > 6)
      after += fmt::format(",... ({})", deps.size());
    t.add({std::to_string(i), std::string(toString(task.kind)), who, what, size, after});
  }
  t.print(out);
}

}  // namespace strata::cli

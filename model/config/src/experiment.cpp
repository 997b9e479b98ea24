// Loads experiment files: network x cluster x strategies x worker counts.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>

#include "config_node.h"
#include "config_reference.h"
#include "strata/model/checked.h"
#include "strata/model/cluster_loader.h"
#include "strata/model/error.h"
#include "strata/model/network_loader.h"
#include "strata/model/presets.h"
#include "strata/model/validation_suite.h"

namespace fs = std::filesystem;

namespace strata {

std::string resolveReference(ConfigKind kind, const ConfigNode& n) {
  std::string ref = n.asString();
  // The non-throwing forms: a name the file system refuses (too long, say) is
  // a missing file, reported below with the key, not a filesystem_error.
  std::error_code ec;
  if ((ref.find('/') != std::string::npos || ref.ends_with(".yaml") || ref.ends_with(".onnx")) &&
      !fs::exists(ref, ec)) {
    const auto beside = fs::path(n.file()).parent_path() / ref;
    if (fs::exists(beside, ec))
      ref = beside.string();
  }
  try {
    return resolveConfig(kind, ref, n.path());
  } catch (const OptionError& e) {
    n.fail(std::string(e.what()).substr(n.path().size() + 2));
  }
}

std::vector<Strategy> readStrategyList(const ConfigNode& list) {
  std::vector<Strategy> out;
  std::vector<int> lines;
  for (const auto& s : list.items(true)) {
    std::vector<Strategy> named;
    try {
      named = parseStrategies(s.asString(), s.path());
    } catch (const OptionError&) {
      s.fail("unknown strategy '" + s.asString() +
             "' (expected naive, ring, owt-a, owt-b, owt-c, ps or all)");
    }
    for (auto st : named) {
      if (const auto it = std::find(out.begin(), out.end(), st); it != out.end())
        s.fail(
            fmt::format("strategy {} is listed twice (first at line {}{}): each strategy is "
                        "one row",
                        toString(st), lines[static_cast<size_t>(it - out.begin())],
                        s.asString() == "all" ? ", and `all` names every strategy" : ""));
      out.push_back(st);
      lines.push_back(s.line());
    }
  }
  return out;
}

Experiment loadExperiment(const std::string& path) {
  const auto root = ConfigNode::loadFile(path);
  // Validation suites live beside the experiments (configs/experiments/) and
  // say so in `kind`; they are run by `strata validate --suite`.
  if (auto kind = root.get("kind"); kind && kind->asString() != kExperimentKind) {
    if (kind->asString() == kValidationSuiteKind)
      kind->fail(
          "this file is a validation suite, not an experiment: run it with `strata "
          "validate --suite " +
          path + "`");
    kind->fail("unknown kind '" + kind->asString() + "' (expected " + std::string(kExperimentKind) +
               " or " + std::string(kValidationSuiteKind) + ")");
  }
  root.allowOnly({"kind", "name", "description", "network", "cluster", "strategies", "workers",
                  "batch", "options"});
  Experiment ex;
  ex.sourceFile = path;
  ex.name = root.stringOr("name", fs::path(path).stem().string());
  ex.description = root.stringOr("description", "");
  ex.network = loadNetwork(resolveReference(ConfigKind::kNetwork, root.require("network")));
  ex.cluster = loadCluster(resolveReference(ConfigKind::kCluster, root.require("cluster")));

  const auto strategies = root.require("strategies");
  if (strategies.isSequence() && strategies.items().empty())
    strategies.fail("needs at least one strategy");
  ex.strategies = readStrategyList(strategies);
  const auto capacity = ex.cluster.capacity();
  std::vector<int> workerLines;
  for (const auto& w : root.require("workers").items(true)) {
    const int k = w.asPositiveInt();
    if (const auto it = std::find(ex.workers.begin(), ex.workers.end(), k); it != ex.workers.end())
      w.fail(fmt::format("{} workers are listed twice (first at line {}): each count is one row", k,
                         workerLines[static_cast<size_t>(it - ex.workers.begin())]));
    ex.workers.push_back(k);
    workerLines.push_back(w.line());
    ex.workersWhere.push_back(w.where());
    if (capacity >= 0 && ex.workers.back() > capacity)
      w.fail("cluster '" + ex.cluster.name + "' has " + std::to_string(capacity) +
             " devices; cannot place " + std::to_string(ex.workers.back()) + " workers");
  }
  if (ex.workers.empty())
    root.require("workers").fail("needs at least one worker count");
  const auto batchNode = root.require("batch");
  ex.batchPerWorker = batchNode.asPositiveInt();
  ex.optionWhere["--batch"] = batchNode.where();
  for (int k : ex.workers)
    if (int64_t examples = 0;
        !checkedMul(k, ex.batchPerWorker, examples, std::numeric_limits<int>::max()))
      batchNode.fail(
          fmt::format("{} examples per worker x {} workers is a global batch over {} "
                      "examples",
                      ex.batchPerWorker, k, std::numeric_limits<int>::max()));

  if (auto o = root.get("options")) {
    o->allowOnly({"overlap",
                  "fc_update",
                  "segment",
                  "bucket",
                  "element",
                  "optimizer",
                  "allreduce",
                  "conv_sync",
                  "ps_priority",
                  "staleness",
                  "ps_servers",
                  "ps_node",
                  "threads_per_worker",
                  "tp",
                  "sequence_parallel",
                  "zero",
                  "recompute",
                  "pp",
                  "microbatches",
                  "schedule",
                  "virtual_stages",
                  "stage_starts",
                  "placement"});
    auto& opt = ex.options;
    // Each key stands where its option would: fc_update for --fc-update.
    for (const auto& [key, value] : o->entries()) {
      std::string option = "--" + key;
      std::replace(option.begin(), option.end(), '_', '-');
      ex.optionWhere[option] = value.where();
    }
    opt.overlap = o->boolOr("overlap", opt.overlap);
    opt.sequenceParallel = o->boolOr("sequence_parallel", opt.sequenceParallel);
    try {
      if (auto f = o->get("fc_update"))
        opt.fcUpdate = parseFcUpdate(f->asString(), f->path());
      if (auto s = o->get("segment"))
        opt.segment = s->asBytes(true);
      if (auto bk = o->get("bucket"))
        opt.bucket = bk->asBytes(true);
      if (auto el = o->get("element")) {
        opt.element = parseElementType(el->asString(), el->path());
        if (ex.cluster.device.peak[static_cast<size_t>(opt.element)].value() <= 0)
          el->fail("the device of cluster '" + ex.cluster.name + "' has no peak for " +
                   el->asString() + " (device.peak." + el->asString() + ")");
      }
      if (auto op = o->get("optimizer"))
        opt.optimizer = parseOptimizer(op->asString(), op->path());
      if (auto a = o->get("allreduce"))
        opt.gradientSync = parseAllreduceAlgorithm(a->asString(), a->path());
      if (auto c = o->get("conv_sync"))
        opt.convSync = parseAllreduceAlgorithm(c->asString(), c->path());
      if (auto p = o->get("ps_priority"))
        opt.psPriority = parsePsPriority(p->asString(), p->path());
      if (auto st = o->get("staleness")) {
        const double v = st->asDouble();
        if (!(v >= 0 && v <= kMaxStaleness && v == std::floor(v)))
          st->fail(fmt::format("must be a whole number of steps in [0, {}]", kMaxStaleness));
        opt.staleness = static_cast<int>(v);
      }
      if (auto sv = o->get("ps_servers")) {
        const double v = sv->asDouble();
        if (!(v >= 0 && v <= kMaxPsServers && v == std::floor(v)))
          sv->fail(fmt::format("must be a whole number of server nodes in [0, {}]", kMaxPsServers));
        opt.psServers = static_cast<int>(v);
      }
      if (auto pn = o->get("ps_node")) {
        const double v = pn->asDouble();
        if (!(v >= 0 && v <= kMaxPsServers && v == std::floor(v)))
          pn->fail(
              fmt::format("must be a whole number of workers per node in [0, {}]", kMaxPsServers));
        opt.psNode = static_cast<int>(v);
      }
      if (auto t = o->get("tp")) {
        const double v = t->asDouble();
        if (!(v >= 1 && v <= kMaxTensorParallel && v == std::floor(v)))
          t->fail(
              fmt::format("must be a whole number of workers per tensor-parallel group in "
                          "[1, {}]",
                          kMaxTensorParallel));
        opt.tp = static_cast<int>(v);
      }
      if (auto z = o->get("zero")) {
        const double v = z->asDouble();
        if (!(v >= 0 && v <= kMaxZeroStage && v == std::floor(v)))
          z->fail(fmt::format("must be a ZeRO stage in [0, {}]", kMaxZeroStage));
        opt.zero = static_cast<int>(v);
      }
      if (auto r = o->get("recompute"))
        opt.recompute = parseRecompute(r->asString(), r->path());
      // A whole number in [1, most] at `key`, or what it holds.
      const auto whole = [&](const char* key, int most, const char* what, int& into) {
        if (auto n = o->get(key)) {
          const double v = n->asDouble();
          if (!(v >= 1 && v <= most && v == std::floor(v)))
            n->fail(fmt::format("must be a whole number of {} in [1, {}]", what, most));
          into = static_cast<int>(v);
        }
      };
      whole("pp", kMaxPipelineStages, "pipeline stages", opt.pp);
      whole("microbatches", kMaxMicrobatches, "micro-batches", opt.microbatches);
      whole("virtual_stages", kMaxVirtualStages, "chunks per stage", opt.virtualStages);
      if (auto sch = o->get("schedule"))
        opt.schedule = parsePipelineSchedule(sch->asString(), sch->path());
      if (auto pl = o->get("placement"))
        opt.placement = parsePlacement(pl->asString(), pl->path());
      if (auto st = o->get("stage_starts")) {
        opt.stageStarts.clear();
        for (const auto& item : st->items(true))
          opt.stageStarts.push_back(item.asString());
        if (opt.stageStarts.empty())
          st->fail("must list the first layer of each chunk after the first");
      }
      if (auto t = o->get("threads_per_worker")) {
        const double v = t->asDouble();
        if (!(v >= 1 && v <= kMaxThreadsPerWorker && v == std::floor(v)))
          t->fail(
              fmt::format("must be a whole number of threads in [1, {}]", kMaxThreadsPerWorker));
        opt.threadsPerWorker = static_cast<int>(v);
      }
    } catch (const OptionError& e) {
      // Re-raise with the file and line of the option.
      const std::string what = e.what();
      const auto colon = what.find(": ");
      const std::string key = what.substr(0, colon);
      const auto node = o->require(key.substr(key.rfind('.') + 1));
      node.fail(what.substr(colon + 2));
    }
    // Every option given is used by one of the file's strategies (the one
    // rule, optionUnused); the command line may narrow the strategies later.
    std::vector<OptionKey> given;
    for (auto key : kAllOptionKeys)
      if (o->get(std::string(optionFileKey(key))))
        given.push_back(key);
    if (const auto unused = optionUnused(given, ex.strategies, opt))
      o->require(std::string(optionFileKey(unused->key))).fail(unused->why);
  }
  return ex;
}

void throwAtExperimentSource(const Experiment& ex, const OptionError& e, int workers) {
  // OptionError's text is "OPTION: message".
  const std::string what = e.what();
  const auto colon = what.find(": ");
  if (colon == std::string::npos)
    return;
  const std::string option = what.substr(0, colon);
  std::string where;
  if (option == "--workers") {
    const auto it = std::find(ex.workers.begin(), ex.workers.end(), workers);
    const auto i = static_cast<size_t>(it - ex.workers.begin());
    if (it != ex.workers.end() && i < ex.workersWhere.size())
      where = ex.workersWhere[i];
  } else if (const auto it = ex.optionWhere.find(option); it != ex.optionWhere.end()) {
    where = it->second;
  }
  if (!where.empty())
    throw UserError(where + ": " + what.substr(colon + 2));
}

}  // namespace strata

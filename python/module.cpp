// `import strata`: the Python front end over study/ (docs/python.md).
//
// Each function takes what the CLI command of the same name takes, as Python
// values (keyword arguments named like the experiment files' keys:
// fc_update="round", tp=2, overlap=False), hands them as text to the readers
// the CLI uses (study/option_text.h), asks study/ the same question, and
// returns what the CLI writes with --format json (predict, simulate,
// describe, presets) or --format csv (compare, sweep, search: flat records that
// pandas.DataFrame takes as they are) as plain dicts and lists. So the module
// and the CLI accept, refuse and answer alike; the CLI stays the reference.
// A user mistake raises strata.Error (strata.ConfigError for one in a file,
// with its file, line and key) carrying the CLI's one-line message; the GIL
// is released while an engine works.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "strata/model/cluster_loader.h"
#include "strata/model/error.h"
#include "strata/model/estimate.h"
#include "strata/model/limits.h"
#include "strata/model/network_loader.h"
#include "strata/model/presets.h"
#include "strata/model/search.h"
#include "strata/sim/simulator.h"
#include "strata/study/engine.h"
#include "strata/study/estimate_schema.h"
#include "strata/study/network_schema.h"
#include "strata/study/option_text.h"
#include "strata/study/queries.h"

namespace py = pybind11;
using nlohmann::ordered_json;

namespace strata::python {
namespace {

// ---- Python values in ---------------------------------------------------------------

// The text the CLI would be given for `value` (the readers take text):
// True/False -> on/off, numbers as written, a list or tuple as "a,b,c".
std::string textOf(const py::handle& value, const std::string& name) {
  if (py::isinstance<py::bool_>(value))
    return value.cast<bool>() ? "on" : "off";
  if (py::isinstance<py::int_>(value))
    return py::str(value).cast<std::string>();
  if (py::isinstance<py::float_>(value)) {
    const double v = value.cast<double>();
    if (!std::isfinite(v))
      throw OptionError(name, "must be a finite number, got " + py::str(value).cast<std::string>());
    return py::str(value).cast<std::string>();
  }
  if (py::isinstance<py::str>(value))
    return value.cast<std::string>();
  if (py::isinstance<py::list>(value) || py::isinstance<py::tuple>(value)) {
    std::string out;
    bool first = true;
    for (const auto& item : value) {
      if (py::isinstance<py::list>(item) || py::isinstance<py::tuple>(item))
        throw OptionError(name, "takes a flat list, got a list inside it");
      out += (first ? "" : ",") + textOf(item, name);
      first = false;
    }
    if (first)
      throw OptionError(name, "needs at least one value, got an empty list");
    return out;
  }
  throw OptionError(name, "must be a string, a number, True/False or a list of them, got a " +
                              py::str(py::type::of(value).attr("__name__")).cast<std::string>());
}

// A network: a preset name, a file (YAML, ONNX, Hugging Face config.json) or
// a strata.Network already loaded.
Network networkOf(const py::handle& value, const std::string& name) {
  if (py::isinstance<Network>(value))
    return value.cast<Network>();
  if (!py::isinstance<py::str>(value))
    throw OptionError(name, "must be a network preset name, a file path or a strata.Network");
  return loadNetwork(resolveConfig(ConfigKind::kNetwork, value.cast<std::string>(), name));
}

Cluster clusterOf(const py::handle& value, const std::string& name) {
  if (py::isinstance<Cluster>(value))
    return value.cast<Cluster>();
  if (!py::isinstance<py::str>(value))
    throw OptionError(name, "must be a cluster preset name, a file path or a strata.Cluster");
  return loadCluster(resolveConfig(ConfigKind::kCluster, value.cast<std::string>(), name));
}

// A list argument (workers, networks ...): a list, a tuple or one value.
std::vector<py::handle> itemsOf(const py::handle& value) {
  std::vector<py::handle> out;
  if (py::isinstance<py::list>(value) || py::isinstance<py::tuple>(value)) {
    for (const auto& item : value)
      out.push_back(item);
  } else {
    out.push_back(value);
  }
  return out;
}

// The cluster with the network's per-op profile attached (profile=...).
Cluster withProfile(Cluster cluster, const Network& network, const py::object& profile) {
  if (profile.is_none())
    return cluster;
  const auto path = textOf(profile, "profile");
  if (path.empty())
    throw OptionError("profile", "was given an empty path (None: no profile)");
  return study::withProfile(std::move(cluster), network, path, "profile");
}

// The keyword options (**options): each an OptionKey by its file key, set
// over `o` by the CLI's readers; the keys given, for optionUnused.
std::vector<OptionKey> applyOptions(const py::kwargs& options, StrategyOptions& o) {
  std::vector<OptionKey> given;
  for (const auto& [k, value] : options) {
    const auto name = k.cast<std::string>();
    if (value.is_none())
      continue;
    const OptionKey* key = nullptr;
    for (const auto& candidate : kAllOptionKeys)
      if (optionFileKey(candidate) == name)
        key = &candidate;
    if (key == nullptr) {
      std::string known;
      for (auto candidate : kAllOptionKeys)
        known += (known.empty() ? "" : ", ") + std::string(optionFileKey(candidate));
      throw OptionError(name, "is not an option of strata (the options are batch, " + known + ")");
    }
    study::applyOptionText(*key, textOf(value, name), name, o);
    given.push_back(*key);
  }
  return given;
}

void checkUsed(const std::vector<OptionKey>& given, const std::vector<Strategy>& strategies,
               const StrategyOptions& o) {
  if (const auto unused = optionUnused(given, strategies, o))
    throw OptionError(std::string(optionFileKey(unused->key)), unused->why);
}

std::vector<Strategy> strategiesOf(const py::handle& value, const std::string& name) {
  return parseStrategies(textOf(value, name), name);
}

std::optional<double> numberOf(const py::object& value, const std::string& name) {
  if (value.is_none())
    return std::nullopt;
  if (py::isinstance<py::bool_>(value) ||
      !(py::isinstance<py::int_>(value) || py::isinstance<py::float_>(value)))
    throw OptionError(name, "must be a number");
  return value.cast<double>();
}

// One scenario: strategy, workers, batch and the options.
Scenario scenarioOf(const py::handle& strategy, const py::handle& workers, const py::object& batch,
                    const py::kwargs& options) {
  Scenario sc;
  sc.strategy = parseStrategy(textOf(strategy, "strategy"), "strategy");
  sc.workers = study::parsePositive(textOf(workers, "workers"), "workers");
  if (!batch.is_none())
    sc.batchPerWorker = study::parsePositive(textOf(batch, "batch"), "batch");
  const auto given = applyOptions(options, sc.options);
  checkUsed(given, {sc.strategy}, sc.options);
  return sc;
}

// ---- Python values out --------------------------------------------------------------

py::object toPython(const ordered_json& j) {
  switch (j.type()) {
    case ordered_json::value_t::null:
      return py::none();
    case ordered_json::value_t::boolean:
      return py::bool_(j.get<bool>());
    case ordered_json::value_t::number_integer:
      return py::int_(j.get<int64_t>());
    case ordered_json::value_t::number_unsigned:
      return py::int_(j.get<uint64_t>());
    case ordered_json::value_t::number_float:
      return py::float_(j.get<double>());
    case ordered_json::value_t::string:
      return py::str(j.get<std::string>());
    case ordered_json::value_t::array: {
      py::list out;
      for (const auto& item : j)
        out.append(toPython(item));
      return out;
    }
    case ordered_json::value_t::object: {
      py::dict out;
      for (const auto& [key, item] : j.items())
        out[py::str(key)] = toPython(item);
      return out;
    }
    default:
      throw InvariantError("toPython: a JSON value of no known type");
  }
}

py::list records(const std::vector<StepEstimate>& rows) {
  py::list out;
  for (const auto& e : rows)
    out.append(toPython(study::estimateRecord(e)));
  return out;
}

// ---- the functions --------------------------------------------------------------------

py::object presets() {
  return toPython(study::presetsJson());
}

py::object describe(const py::handle& network, const py::handle& element) {
  const auto net = networkOf(network, "network");
  const auto el = parseElementType(textOf(element, "element"), "element");
  return toPython(study::networkJson(net, el));
}

py::object predict(const py::handle& network, const py::handle& cluster, const py::handle& strategy,
                   const py::handle& workers, const py::object& batch, const py::handle& engine,
                   const py::object& profile, const py::object& steps, const py::object& epochs,
                   const py::object& dataset, const py::kwargs& options) {
  const Scenario sc = scenarioOf(strategy, workers, batch, options);
  const auto run =
      study::trainingRun(numberOf(steps, "steps"), numberOf(epochs, "epochs"),
                         numberOf(dataset, "dataset"), sc, {"steps", "epochs", "dataset"});
  const auto eng = study::parsePredictingEngine(textOf(engine, "engine"), "engine");
  const auto net = networkOf(network, "network");
  const auto cl = withProfile(clusterOf(cluster, "cluster"), net, profile);
  StepEstimate est;
  {
    py::gil_scoped_release release;
    est = study::predict(net, cl, sc, eng, run);
  }
  return toPython(study::estimateJson(est));
}

py::list compare(const py::object& network, const py::object& cluster, const py::object& strategies,
                 const py::object& workers, const py::object& experiment, const py::object& batch,
                 const py::handle& engine, const py::object& profile, const py::kwargs& options) {
  Experiment ex;
  if (!experiment.is_none()) {
    ex = loadExperiment(
        resolveConfig(ConfigKind::kExperiment, textOf(experiment, "experiment"), "experiment"));
  } else {
    if (network.is_none())
      throw OptionError("network", "required when no experiment is given");
    if (cluster.is_none())
      throw OptionError("cluster", "required when no experiment is given");
    ex.strategies = {std::begin(kAllStrategies), std::end(kAllStrategies)};
    ex.workers = {1, 2, 4, 8};
  }
  // A value given here is the call's, not the file's (as on the command line).
  if (!network.is_none())
    ex.network = networkOf(network, "network");
  if (!cluster.is_none())
    ex.cluster = clusterOf(cluster, "cluster");
  if (!strategies.is_none())
    ex.strategies = strategiesOf(strategies, "strategies");
  if (!workers.is_none()) {
    ex.workers = study::parsePositiveList(textOf(workers, "workers"), "workers");
    ex.workersWhere.clear();
  }
  if (!batch.is_none()) {
    ex.batchPerWorker = study::parsePositive(textOf(batch, "batch"), "batch");
    ex.optionWhere.erase("--batch");
  }
  const auto given = applyOptions(options, ex.options);
  for (auto key : given)
    ex.optionWhere.erase(std::string(optionFlag(key)));
  checkUsed(given, ex.strategies, ex.options);
  const auto eng = study::parsePredictingEngine(textOf(engine, "engine"), "engine");
  ex.cluster = withProfile(ex.cluster, ex.network, profile);
  std::vector<StepEstimate> rows;
  {
    py::gil_scoped_release release;
    rows = study::compare(ex, eng);
  }
  return records(rows);
}

py::list sweep(const py::handle& networks, const py::handle& clusters, const py::handle& strategies,
               const py::handle& workers, const py::handle& batches, const py::handle& overlaps,
               const py::handle& elements, const py::handle& fcUpdates, const py::handle& engine,
               const py::kwargs& options) {
  study::SweepGrid grid;
  for (const auto& n : itemsOf(networks))
    grid.networks.push_back(networkOf(n, "networks"));
  for (const auto& c : itemsOf(clusters))
    grid.clusters.push_back(clusterOf(c, "clusters"));
  grid.strategies = strategiesOf(strategies, "strategies");
  grid.workers = study::parsePositiveList(textOf(workers, "workers"), "workers");
  grid.batches = study::parsePositiveList(textOf(batches, "batches"), "batches");
  for (const auto& v : study::splitItems(textOf(overlaps, "overlaps"), "overlaps"))
    grid.overlaps.push_back(study::parseOnOff(v, "overlaps"));
  for (const auto& e : study::splitItems(textOf(elements, "elements"), "elements"))
    grid.elements.push_back(parseElementType(e, "elements"));
  for (const auto& u : study::splitItems(textOf(fcUpdates, "fc_updates"), "fc_updates"))
    grid.fcUpdates.push_back(parseFcUpdate(u, "fc_updates"));
  const auto given = applyOptions(options, grid.base);
  StrategyOptions probe = grid.base;
  probe.overlap =
      std::find(grid.overlaps.begin(), grid.overlaps.end(), true) != grid.overlaps.end();
  checkUsed(given, grid.strategies, probe);
  const auto eng = study::parsePredictingEngine(textOf(engine, "engine"), "engine");
  std::vector<StepEstimate> rows;
  {
    py::gil_scoped_release release;
    rows = study::sweep(grid, eng);
  }
  return records(rows);
}

py::object simulate(const py::handle& network, const py::handle& cluster,
                    const py::handle& strategy, const py::handle& workers, const py::object& batch,
                    const py::handle& contention, const py::object& stragglers,
                    const py::handle& jitter, const py::handle& seed, const py::object& psSteps,
                    const py::object& profile, const py::object& trainSteps,
                    const py::object& epochs, const py::object& dataset,
                    const py::kwargs& options) {
  const Scenario sc = scenarioOf(strategy, workers, batch, options);
  checkSimWorkers(sc.workers, limits());  // before anything per worker is made
  sim::Options opt;
  opt.contention = study::parseOnOff(textOf(contention, "contention"), "contention");
  if (!stragglers.is_none()) {
    if (!py::isinstance<py::dict>(stragglers))
      throw OptionError("stragglers", "must be a dict {worker: slowdown}, e.g. {3: 1.5}");
    std::vector<std::string> texts;
    for (const auto& [w, f] : stragglers.cast<py::dict>())
      texts.push_back(textOf(w, "stragglers") + ":" + textOf(f, "stragglers"));
    opt.slowdown = study::parseStragglers(texts, sc.workers, "stragglers");
  }
  opt.jitter =
      study::checkRange(numberOf(py::reinterpret_borrow<py::object>(jitter), "jitter").value_or(0),
                        0, 1, false, "jitter");
  opt.seed = study::parseSeed(textOf(seed, "seed"), "seed");
  const int steps = study::psSteps(psSteps.is_none() ? "" : textOf(psSteps, "ps_steps"), sc,
                                   "ps_steps", "train_steps");
  const auto run =
      study::trainingRun(numberOf(trainSteps, "train_steps"), numberOf(epochs, "epochs"),
                         numberOf(dataset, "dataset"), sc, {"train_steps", "epochs", "dataset"});
  const auto net = networkOf(network, "network");
  const auto cl = withProfile(clusterOf(cluster, "cluster"), net, profile);
  sim::Result result;
  {
    py::gil_scoped_release release;
    result = sim::simulateScenario(net, cl, sc, opt, steps);
    result.estimate.training = priceTrainingRun(run, result.estimate);
  }
  return toPython(study::simulationJson(result));
}

py::list search(const py::handle& network, const py::handle& cluster, const py::handle& workers,
                const py::handle& globalBatch, const py::object& batch, const py::kwargs& options) {
  const int k = study::parsePositive(textOf(workers, "workers"), "workers");
  const int global = study::parsePositive(textOf(globalBatch, "global_batch"), "global_batch");
  int microBatch = 0;
  if (!batch.is_none())
    microBatch = study::parsePositive(textOf(batch, "batch"), "batch");
  StrategyOptions o;
  const auto given = applyOptions(options, o);
  const auto space = study::searchSpace(k, global, microBatch, o, given, true);
  const auto net = networkOf(network, "network");
  const auto cl = clusterOf(cluster, "cluster");
  SearchResult result;
  {
    py::gil_scoped_release release;
    result = searchLayouts(net, cl, space);
  }
  py::list out;
  for (const auto& r : result.rows) {
    ordered_json row;
    row["layout"] = describeLayout(r.scenario);
    row["peak_memory_bytes"] = r.peakMemory.value();
    row.update(study::estimateRecord(r.estimate));
    out.append(toPython(row));
  }
  return out;
}

void setLimitsFrom(const py::object& maxWorkers, const py::object& maxTasks,
                   const py::object& maxEvents, bool allowLarge) {
  Limits l = allowLarge ? largestLimits() : Limits{};
  auto read = [](const py::object& v, const char* name, int64_t& into) {
    if (v.is_none())
      return;
    if (py::isinstance<py::bool_>(v) || !py::isinstance<py::int_>(v) || v.cast<int64_t>() < 1)
      throw OptionError(name, "must be a positive integer");
    into = v.cast<int64_t>();
  };
  read(maxWorkers, "max_workers", l.maxModelWorkers);
  read(maxTasks, "max_tasks", l.maxPlanTasks);
  read(maxEvents, "max_events", l.maxSimEvents);
  setLimits(l);
}

// ---- loaded networks and clusters ------------------------------------------------------

Network loadNetworkArg(const std::string& nameOrPath) {
  return loadNetwork(resolveConfig(ConfigKind::kNetwork, nameOrPath, "network"));
}

Cluster loadClusterArg(const std::string& nameOrPath) {
  return loadCluster(resolveConfig(ConfigKind::kCluster, nameOrPath, "cluster"));
}

}  // namespace
}  // namespace strata::python

PYBIND11_MODULE(_strata, m) {
  using namespace strata;
  using namespace strata::python;
  m.doc() = "strata: how fast a network trains on a cluster under a parallelization strategy";

  // strata.Error: every user mistake (the CLI's exit status 2), a ValueError;
  // strata.ConfigError: one in a file, with file, line and key; a run that
  // failed (a file that could not be written) is strata.RunFailure.
  static py::exception<UserError> error(m, "Error", PyExc_ValueError);
  static py::exception<ConfigError> configError(m, "ConfigError", error.ptr());
  static py::exception<RunFailure> runFailure(m, "RunFailure", PyExc_RuntimeError);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p)
        std::rethrow_exception(p);
    } catch (const ConfigError& e) {
      py::object instance = py::handle(configError.ptr())(e.what());
      instance.attr("file") = e.file();
      instance.attr("line") = e.line();
      instance.attr("key") = e.key();
      PyErr_SetObject(configError.ptr(), instance.ptr());
    } catch (const UserError& e) {
      error(e.what());
    } catch (const RunFailure& e) {
      runFailure(e.what());
    }
  });

  py::class_<Network>(m, "Network",
                      "A network, loaded once (strata.load_network) and passed to any function")
      .def_readonly("name", &Network::name)
      .def_readonly("description", &Network::description)
      .def_property_readonly("params", [](const Network& n) { return n.totalParams(); })
      .def_property_readonly("layers", [](const Network& n) { return n.layers.size(); })
      .def("__repr__", [](const Network& n) {
        return "<strata.Network " + n.name + ": " + std::to_string(n.layers.size()) + " layers, " +
               std::to_string(n.totalParams()) + " parameters>";
      });
  py::class_<Cluster>(m, "Cluster",
                      "A cluster, loaded once (strata.load_cluster) and passed to any function")
      .def_readonly("name", &Cluster::name)
      .def("__repr__", [](const Cluster& c) { return "<strata.Cluster " + c.name + ">"; });

  // The wheel's presets (strata/configs beside the module): __init__.py
  // points the lookup at them when they are there.
  m.def(
      "_set_builtin_configs", [](const std::string& dir) { setBuiltinConfigDir(dir); },
      py::arg("dir"));
  m.def("load_network", &loadNetworkArg, py::arg("network"),
        "A network preset, or a network YAML, ONNX (.onnx) or Hugging Face config (.json) file");
  m.def("load_cluster", &loadClusterArg, py::arg("cluster"), "A cluster preset or YAML file");
  m.def("presets", &presets,
        "The presets by kind and the folders searched, as `strata list --format json`");
  m.def("describe", &describe, py::arg("network"), py::arg("element") = "fp32",
        "One network layer by layer, as `strata describe --format json`");
  m.def("predict", &predict, py::arg("network"), py::arg("cluster"), py::arg("strategy"),
        py::arg("workers"), py::kw_only(), py::arg("batch") = py::none(),
        py::arg("engine") = "model", py::arg("profile") = py::none(), py::arg("steps") = py::none(),
        py::arg("epochs") = py::none(), py::arg("dataset") = py::none(),
        "One step's estimate, as `strata predict --format json`; options as keywords "
        "(fc_update='round', tp=2, overlap=False)");
  m.def("compare", &compare, py::arg("network") = py::none(), py::arg("cluster") = py::none(),
        py::arg("strategies") = py::none(), py::arg("workers") = py::none(), py::kw_only(),
        py::arg("experiment") = py::none(), py::arg("batch") = py::none(),
        py::arg("engine") = "model", py::arg("profile") = py::none(),
        "Strategies x worker counts (all, and 1, 2, 4, 8, or an experiment file's, which the "
        "other arguments override): one flat record each, the columns of `strata compare "
        "--format csv`");
  m.def("sweep", &sweep, py::arg("networks"), py::arg("clusters"), py::arg("strategies") = "all",
        py::arg("workers") = py::make_tuple(1, 2, 4, 8), py::arg("batches") = py::make_tuple(128),
        py::arg("overlaps") = py::make_tuple(true), py::arg("elements") = py::make_tuple("fp32"),
        py::arg("fc_updates") = py::make_tuple("step"), py::kw_only(), py::arg("engine") = "model",
        "Every combination of the lists: one flat record each, the columns of `strata sweep`");
  m.def("simulate", &simulate, py::arg("network"), py::arg("cluster"), py::arg("strategy"),
        py::arg("workers"), py::kw_only(), py::arg("batch") = py::none(),
        py::arg("contention") = true, py::arg("stragglers") = py::none(), py::arg("jitter") = 0.0,
        py::arg("seed") = 1, py::arg("ps_steps") = py::none(), py::arg("profile") = py::none(),
        py::arg("train_steps") = py::none(), py::arg("epochs") = py::none(),
        py::arg("dataset") = py::none(),
        "One step played by the simulator, as `strata simulate --format json`");
  m.def("search", &search, py::arg("network"), py::arg("cluster"), py::arg("workers"),
        py::arg("global_batch"), py::kw_only(), py::arg("batch") = py::none(),
        "Every layout (dp x tp x pp, schedule, micro-batch, ZeRO, recomputation, sp) of the "
        "network on K workers for one global batch, the fitting ones first, fastest first: one "
        "flat record each, the columns of `strata search --format csv`");
  m.def("set_limits", &setLimitsFrom, py::kw_only(), py::arg("max_workers") = py::none(),
        py::arg("max_tasks") = py::none(), py::arg("max_events") = py::none(),
        py::arg("allow_large") = false,
        "The resource limits (docs/configs.md, Limits), as --max-workers, --max-tasks, "
        "--max-events and --allow-large");
}

// writeReport: the report folder (index.html, report.md, figures/, data/).
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "figures.h"
#include "gnuplot.h"
#include "internal.h"
#include "strata/model/atomic_file.h"
#include "strata/model/error.h"
#include "strata/model/quantity_text.h"
#include "strata/study/csv.h"
#include "strata/study/estimate_schema.h"
#include "strata/study/validation.h"

namespace strata::reports {

namespace fs = std::filesystem;
using nlohmann::ordered_json;

namespace {

std::string readFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Each file whole and synced (AtomicFile), though in the staging folder.
void writeFile(const fs::path& p, const std::string& text) {
  writeFileAtomically(p.string(), text, "--out");
}

[[noreturn]] void refused(const std::string& what, const fs::path& p, int error) {
  throw WriteError("--out: cannot " + what + " '" + p.string() + "': " + errnoText(error));
}

// Flushes a file gnuplot wrote (an SVG) to the disk before it is published.
void syncFile(const fs::path& p) {
  const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 || ::fsync(fd) != 0) {
    const int error = errno;
    if (fd >= 0)
      ::close(fd);
    refused("write", p, error);
  }
  ::close(fd);
}

// The report's staging folder. The report is written and drawn in a folder
// of its own beside --out (".NAME.strata-tmp.XXXXXX", by mkdtemp: the same
// file system, so renames move it) and published only when every file is
// complete and synced. A report that fails halfway (gnuplot fails, the disk
// fills, an exception) removes the staging folder (its own, nothing else)
// and leaves no half-written index.html or SVG: --out is as it was. Into a
// new --out the staging folder is renamed whole; into an existing one (an
// earlier report, perhaps with files of the user's beside it) each file is
// renamed over its namesake, so every file there is whole at every moment
// and files the report does not write are kept.
class Staging {
 public:
  explicit Staging(fs::path root) : root_(std::move(root)) {
    std::error_code ec;
    const fs::path parent = root_.parent_path().empty() ? fs::path(".") : root_.parent_path();
    fs::create_directories(parent, ec);
    if (ec)
      throw OptionError("--out", "cannot create " + parent.string() + ": " + ec.message());
    std::string leaf = ".";  // built by appends: GCC 12 warns (-Wrestrict) on "." + s
    leaf += root_.filename().string().substr(0, 200);
    leaf += ".strata-tmp.XXXXXX";
    std::string name = (parent / leaf).string();
    if (::mkdtemp(name.data()) == nullptr) {
      const int error = errno;
      const std::string why = "cannot write a report beside '" + root_.string() + "' (in '" +
                              parent.string() + "'): " + errnoText(error);
      if (error == EACCES || error == EPERM || error == EROFS || error == ENOTDIR ||
          error == ENOENT)
        throw OptionError("--out", why);
      throw WriteError("--out: " + why);
    }
    dir_ = name;
    // mkdtemp's 0700 would become the report folder's: a folder's usual mode.
    const mode_t mask = ::umask(0);
    ::umask(mask);
    ::chmod(dir_.c_str(), 0777 & ~mask);
    fs::create_directories(dir_ / "figures", ec);
    if (!ec)
      fs::create_directories(dir_ / "data", ec);
    if (ec)
      throw WriteError("--out: cannot create " + dir_.string() + ": " + ec.message());
  }
  ~Staging() {
    std::error_code ec;
    if (!dir_.empty())
      fs::remove_all(dir_, ec);
  }
  Staging(const Staging&) = delete;
  Staging& operator=(const Staging&) = delete;

  const fs::path& dir() const { return dir_; }

  // Moves every file into root_ (see the class comment).
  void publish() {
    std::error_code ec;
    std::vector<fs::path> files;
    for (const auto& e : fs::recursive_directory_iterator(dir_))
      if (e.is_regular_file())
        files.push_back(fs::relative(e.path(), dir_));
    for (const auto& f : files)
      if (f.extension() == ".svg")
        syncFile(dir_ / f);
    const fs::path parent = root_.parent_path().empty() ? fs::path(".") : root_.parent_path();
    if (!fs::exists(root_)) {
      if (::rename(dir_.c_str(), root_.c_str()) != 0)
        refused("move the report to", root_, errno);
      dir_.clear();
      syncFolder(parent);
      return;
    }
    // Anything in the way that is not a file is found before a file moves.
    for (const auto& f : files)
      if (fs::exists(root_ / f) && !fs::is_regular_file(root_ / f))
        throw OptionError("--out", "'" + (root_ / f).string() +
                                       "' is in the way of the report's file of that name and "
                                       "is not a regular file");
    for (const auto& f : files) {
      fs::create_directories((root_ / f).parent_path(), ec);
      if (ec)
        throw WriteError("--out: cannot create " + (root_ / f).parent_path().string() + ": " +
                         ec.message());
      if (::rename((dir_ / f).c_str(), (root_ / f).c_str()) != 0)
        refused("write", root_ / f, errno);
    }
    syncFolder(root_);
    syncFolder(root_ / "figures");
    syncFolder(root_ / "data");
  }

 private:
  static void syncFolder(const fs::path& folder) {
    const int fd = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
      return;
    (void)::fsync(fd);  // best effort: the files are whole and in place already
    ::close(fd);
  }

  fs::path root_, dir_;
};

std::string htmlEscape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// A Markdown table cell: no pipes or newlines inside.
std::string mdCell(std::string text) {
  for (auto& c : text)
    if (c == '|' || c == '\n')
      c = c == '|' ? '/' : ' ';
  return text;
}

// ---- data ------------------------------------------------------------------

// One row of data/estimates.csv: the scaling it belongs to, the estimate's
// columns in the one schema (study/estimate_schema.h), and the capacity its
// memory is judged against.
ordered_json estimateRow(const std::string& scaling, const StepEstimate& e, const Cluster& cl) {
  using C = study::EstimateColumn;
  ordered_json j;
  j["scaling"] = scaling;
  j.update(study::estimateRow(e, {C::kEngine,
                                  C::kNetwork,
                                  C::kCluster,
                                  C::kStrategy,
                                  C::kWorkers,
                                  C::kBatchPerWorker,
                                  C::kGlobalBatch,
                                  C::kOverlap,
                                  C::kFcUpdate,
                                  C::kElement,
                                  C::kStep,
                                  C::kThroughput,
                                  C::kSpeedup,
                                  C::kEfficiency,
                                  C::kCompute,
                                  C::kExposedCommunication,
                                  C::kIdle,
                                  C::kCommunication,
                                  C::kSentBytesPerWorker,
                                  C::kReceivedBytesPerWorker,
                                  C::kMemoryBytesPerWorker}));
  j["memory_capacity_bytes"] = cl.device.memoryCapacity.value();
  j.update(study::estimateRow(e, {C::kFitsInMemory, C::kBottleneck}));
  return j;
}

// The headers of the other tables when they have no rows (no link carried a
// byte with K = 1); with rows, the header comes from the rows' keys.
const char* kWhatIfColumns =
    "network,cluster,option_set,strategy,workers,batch_per_worker,what_if,step_s,change";
const char* kLinkColumns =
    "network,cluster,option_set,strategy,workers,batch_per_worker,link,bandwidth_bytes_per_s,bytes,"
    "busy_s,"
    "utilisation";
const char* kSummaryColumns = "network,cluster,option_set,batch_per_worker,workers,best,step_s,why";

// A CSV of flat JSON objects (same keys in each), header from the first.
std::string csvOf(const std::string& header, const ordered_json& rows) {
  std::string out = header + "\n";
  for (const auto& r : rows)
    out += study::csvLine(r) + "\n";
  return out;
}

std::string headerOf(const ordered_json& rows, const char* fallback) {
  return rows.empty() ? std::string(fallback) : study::csvHeader(rows.front());
}

struct Data {
  ordered_json estimates = ordered_json::array();
  ordered_json whatif = ordered_json::array();
  ordered_json links = ordered_json::array();
  ordered_json verdicts = ordered_json::array();
  ordered_json validation = ordered_json::array();
  ordered_json search = ordered_json::array();
};

Data collect(const Report& report, const ReportRequest& rq) {
  Data d;
  for (size_t i = 0; i < report.panels.size(); ++i) {
    const Panel& p = report.panels[i];
    const Cluster& cl = rq.clusters[size_t(p.cluster)];
    const std::string set = optionSetLabel(rq, size_t(p.optionSet));
    for (const auto& e : p.rows)
      d.estimates.push_back(estimateRow("weak", e, cl));
    for (const auto& e : p.otherBatches)
      d.estimates.push_back(estimateRow("weak", e, cl));
    for (const auto& e : p.strong)
      d.estimates.push_back(estimateRow("strong", e, cl));
    for (const auto& s : p.sensitivity)
      for (size_t w = 0; w < s.step.size(); ++w)
        d.whatif.push_back(
            ordered_json{{"network", rq.networks[size_t(p.network)].name},
                         {"cluster", cl.name},
                         {"strategy", std::string(toString(s.strategy))},
                         {"workers", s.workers},
                         {"batch_per_worker", p.batch},
                         {"what_if", w == 0 ? std::string("as configured") : whatIfs()[w - 1].name},
                         {"step_s", s.step[w].value()},
                         {"change", s.step[w] / s.step[0] - 1}});
    for (const auto& l : p.links)
      d.links.push_back(ordered_json{{"network", rq.networks[size_t(p.network)].name},
                                     {"cluster", cl.name},
                                     {"option_set", set},
                                     {"strategy", std::string(toString(l.strategy))},
                                     {"workers", l.workers},
                                     {"batch_per_worker", p.batch},
                                     {"link", l.name},
                                     {"bandwidth_bytes_per_s", l.bandwidth.value()},
                                     {"bytes", l.bytes.value()},
                                     {"busy_s", l.busy.value()},
                                     {"utilisation", l.utilisation}});
    std::vector<char> onFront(p.search.size(), 0);
    for (size_t f : paretoFront(p.search))
      onFront[f] = 1;
    for (size_t r = 0; r < p.search.size(); ++r) {
      const SearchRow& row = p.search[r];
      const auto& o = row.scenario.options;
      d.search.push_back(ordered_json{{"network", rq.networks[size_t(p.network)].name},
                                      {"cluster", cl.name},
                                      {"option_set", set},
                                      {"workers", row.scenario.workers},
                                      {"global_batch", rq.searchGlobalBatch},
                                      {"layout", describeLayout(row.scenario)},
                                      {"dp", dataParallelSize(row.scenario)},
                                      {"tp", o.tp},
                                      {"pp", o.pp},
                                      {"microbatches", o.microbatches},
                                      {"batch_per_worker", row.scenario.batchPerWorker},
                                      {"step_s", row.estimate.step.value()},
                                      {"throughput_per_s", row.estimate.throughput},
                                      {"peak_memory_bytes", row.peakMemory.value()},
                                      {"fits", row.fits},
                                      {"pareto", onFront[r] != 0}});
    }
    for (const auto& v : report.verdicts[i])
      d.verdicts.push_back(ordered_json{
          {"network", rq.networks[size_t(p.network)].name},
          {"cluster", cl.name},
          {"option_set", set},
          {"batch_per_worker", p.batch},
          {"workers", v.workers},
          {"best", v.best ? ordered_json(std::string(toString(*v.best))) : ordered_json(nullptr)},
          {"step_s", v.best ? ordered_json(v.step.value()) : ordered_json(nullptr)},
          {"why", v.why}});
  }
  for (const auto& m : rq.measured)
    d.validation.push_back(ordered_json{{"source", m.source},
                                        {"network", m.network},
                                        {"strategy", std::string(toString(m.strategy))},
                                        {"workers", m.workers},
                                        {"batch_per_worker", m.batchPerWorker},
                                        {"measured_step_s", m.step[0].value()},
                                        {"spread_min_s", m.spreadMin.value()},
                                        {"spread_max_s", m.spreadMax.value()},
                                        {"model_step_s", m.step[1].value()},
                                        {"sim_step_s", m.step[2].value()},
                                        {"model_error", relativeError(m.step[1], m.step[0])},
                                        {"sim_error", relativeError(m.step[2], m.step[0])},
                                        {"held_out", m.heldOut},
                                        {"within_claims", m.withinClaims},
                                        {"busy", m.busy},
                                        {"measured_compute_s", m.compute[0].value()},
                                        {"model_compute_s", m.compute[1].value()},
                                        {"sim_compute_s", m.compute[2].value()},
                                        {"measured_communication_s", m.communication[0].value()},
                                        {"model_communication_s", m.communication[1].value()},
                                        {"sim_communication_s", m.communication[2].value()}});
  return d;
}

ordered_json requestJson(const ReportRequest& rq) {
  ordered_json j;
  j["title"] = rq.title;
  j["engine"] = std::string(study::toString(rq.engine));
  ordered_json nets = ordered_json::array(), clusters = ordered_json::array(),
               strategies = ordered_json::array();
  for (const auto& n : rq.networks)
    nets.push_back(n.name);
  for (const auto& c : rq.clusters)
    clusters.push_back(c.name);
  for (auto s : rq.strategies)
    strategies.push_back(std::string(toString(s)));
  j["networks"] = nets;
  j["clusters"] = clusters;
  j["strategies"] = strategies;
  j["workers"] = rq.workers;
  j["batches"] = rq.batches;
  ordered_json sets = ordered_json::array();
  for (const auto& o : rq.optionSets)
    sets.push_back(study::optionsJson(o));
  j["option_sets"] = sets;
  if (rq.searchGlobalBatch > 0)
    j["search_global_batch"] = rq.searchGlobalBatch;
  return j;
}

// ---- text ----------------------------------------------------------------------

struct Section {
  std::string id, title, intro;
};

const std::vector<Section>& sections() {
  static const std::vector<Section> list = {
      {"scaling", "Scaling",
       "How the step time turns into speed as workers are added, per strategy."},
      {"time", "Where the time goes",
       "Each step split into compute, exposed communication and idle time, and one step played "
       "out worker by worker."},
      {"traffic", "Traffic", "What crosses the links, per worker and per link."},
      {"memory", "Memory", "What each worker holds at its peak, against the device."},
      {"clusters", "Clusters", "The same network on each cluster given."},
      {"whatif", "What if", "How the step responds when the hardware changes."},
      {"search", "Layouts",
       "Every way to lay the network out on the largest worker count for one global batch "
       "(strata search), throughput against memory."},
      {"validation", "Predicted and measured",
       "Predictions beside the executor's measurements (strata validate)."},
  };
  return list;
}

// The summary: one table per panel, the best strategy per K and why.
struct SummaryTable {
  std::string label;
  std::vector<std::array<std::string, 4>> rows;  // K, best, step, why
};

std::vector<SummaryTable> summaryTables(const Report& report, const ReportRequest& rq) {
  std::vector<SummaryTable> out;
  for (size_t i = 0; i < report.panels.size(); ++i) {
    SummaryTable t{panelLabel(report.panels[i], rq), {}};
    for (const auto& v : report.verdicts[i])
      t.rows.push_back({std::to_string(v.workers),
                        v.best ? std::string(toString(*v.best)) : std::string("none fits"),
                        v.best ? formatSeconds(v.step) : std::string("-"), v.why});
    out.push_back(std::move(t));
  }
  return out;
}

std::string provenanceLine(const Provenance& p, const ReportRequest& rq) {
  std::vector<std::string> sets;
  for (const auto& o : rq.optionSets)
    sets.push_back(optionsText(o));
  return fmt::format("strata {} (revision {}), {}; engine: {}; options: {}", p.version, p.revision,
                     p.date,
                     rq.engine == study::Engine::kSimulator ? "simulator" : "closed-form model",
                     fmt::join(sets, " | "));
}

const char* kCss =
    R"(body{font-family:system-ui,-apple-system,"Segoe UI",Helvetica,Arial,sans-serif;
max-width:1100px;margin:2em auto;padding:0 1.2em;color:#222;line-height:1.45}
h1{font-size:1.7em;margin-bottom:.2em}h2{border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:2em}
.meta{color:#666;font-size:.92em}
nav ul{columns:2;font-size:.95em}
table{border-collapse:collapse;margin:.8em 0;font-size:.92em}
th,td{border:1px solid #ddd;padding:.3em .6em;text-align:left;vertical-align:top}
th{background:#f4f4f4}td.num{text-align:right;white-space:nowrap}
figure{margin:1.5em 0;padding:.8em;border:1px solid #e4e4e4;border-radius:6px;background:#fff}
figure svg{max-width:100%;height:auto;display:block;margin:0 auto}
figcaption{margin-top:.6em;font-size:.95em}
pre{background:#f6f6f6;padding:.7em;overflow-x:auto;font-size:.85em}
details{margin:.4em 0}summary{cursor:pointer})";

}  // namespace

namespace {
void writeStaged(const Report& report, const ReportRequest& rq, const fs::path& root,
                 const std::string& gnuplot);
}  // namespace

void writeReport(const Report& report, const ReportRequest& rq, const std::string& dir,
                 const std::string& gnuplot) {
  fs::path target = fs::path(dir).lexically_normal();
  if (target.filename().empty())  // "out/"
    target = target.parent_path();
  if (fs::exists(target) && !fs::is_directory(target))
    throw OptionError("--out", "'" + dir + "' exists and is not a folder");
  Staging staging(target);
  const fs::path& root = staging.dir();
  try {
    writeStaged(report, rq, root, gnuplot);
    staging.publish();
  } catch (const WriteError& e) {
    // Name the file as the user will look for it: under --out, not under the
    // staging folder that is removed on the way out.
    std::string what = e.what();
    const std::string staged = root.string(), final = target.string();
    for (auto at = what.find(staged); at != std::string::npos;
         at = what.find(staged, at + final.size()))
      what.replace(at, staged.size(), final);
    throw WriteError(what);
  }
}

namespace {

// Every file of the report into `root` (the staging folder).
void writeStaged(const Report& report, const ReportRequest& rq, const fs::path& root,
                 const std::string& gnuplot) {
  // ---- data ----
  const Data d = collect(report, rq);
  writeFile(root / "data" / "estimates.csv",
            csvOf(study::csvHeader(estimateRow("weak", StepEstimate{}, Cluster{})), d.estimates));
  writeFile(root / "data" / "whatif.csv", csvOf(headerOf(d.whatif, kWhatIfColumns), d.whatif));
  writeFile(root / "data" / "links.csv", csvOf(headerOf(d.links, kLinkColumns), d.links));
  writeFile(root / "data" / "summary.csv",
            csvOf(headerOf(d.verdicts, kSummaryColumns), d.verdicts));
  if (!d.validation.empty())
    writeFile(root / "data" / "validation.csv", csvOf(headerOf(d.validation, ""), d.validation));
  if (!d.search.empty())
    writeFile(root / "data" / "search.csv", csvOf(headerOf(d.search, ""), d.search));

  // ---- figures ----
  const auto figures = makeFigures(report, rq);
  std::vector<std::string> svgs;
  for (const auto& f : figures) {
    const std::string gp = f.name + ".gp";
    writeFile(root / "figures" / gp,
              fmt::format("# {}\n# Drawn by strata report; `gnuplot {}` (in this folder) redraws "
                          "{}.svg.\nset terminal svg size {},{} noenhanced font 'Helvetica,12' "
                          "background rgb 'white'\nset output '{}.svg'\n{}",
                          f.title, gp, f.name, f.width, f.height, f.name, f.script));
    runGnuplot(gnuplot, (root / "figures").string(), gp);
    svgs.push_back(inlineSvg(readFile(root / "figures" / (f.name + ".svg")), f.id));
  }

  ordered_json figs = ordered_json::array();
  for (const auto& f : figures)
    figs.push_back(ordered_json{{"id", f.id},
                                {"title", f.title},
                                {"section", f.section},
                                {"file", "figures/" + f.name + ".svg"},
                                {"script", "figures/" + f.name + ".gp"},
                                {"reading", f.reading}});
  ordered_json json;
  json["report"] = requestJson(rq);
  json["summary"] = d.verdicts;
  json["estimates"] = d.estimates;
  json["what_if"] = d.whatif;
  json["links"] = d.links;
  json["validation"] = d.validation;
  if (!d.search.empty())
    json["search"] = d.search;
  json["figures"] = figs;
  ordered_json configs = ordered_json::array();
  for (const auto& c : rq.provenance.configs)
    configs.push_back({{"kind", c.kind}, {"path", c.path}});
  json["provenance"] = {{"version", rq.provenance.version},
                        {"revision", rq.provenance.revision},
                        {"date", rq.provenance.date},
                        {"command", rq.provenance.command},
                        {"configs", configs}};
  writeFile(root / "data" / "report.json", json.dump(2) + "\n");

  const auto summary = summaryTables(report, rq);
  const auto& p = rq.provenance;

  // ---- report.md ----
  std::string md = fmt::format("# {}\n\n_{}_\n\n", rq.title, provenanceLine(p, rq));
  md += "## Summary\n\nThe fastest strategy that fits in memory, per worker count.\n\n";
  for (const auto& t : summary) {
    md += fmt::format("### {}\n\n| K | best | step | why |\n|---:|---|---:|---|\n", t.label);
    for (const auto& r : t.rows)
      md += fmt::format("| {} | {} | {} | {} |\n", r[0], r[1], r[2], mdCell(r[3]));
    md += "\n";
  }
  for (const auto& s : sections()) {
    std::string body;
    for (const auto& f : figures)
      if (f.section == s.id)
        body += fmt::format("### {}\n\n![{}](figures/{}.svg)\n\n{}\n\n", f.title, f.title, f.name,
                            f.reading);
    if (!body.empty())
      md += fmt::format("## {}\n\n{}\n\n{}", s.title, s.intro, body);
  }
  md += fmt::format(
      "## Provenance\n\n{}\n\nRegenerate this report:\n\n```sh\n{}\n```\n\nData: "
      "data/estimates.csv, data/whatif.csv, data/links.csv, data/summary.csv{}{}, and all of it "
      "in data/report.json. Each figure's gnuplot script is beside its SVG (figures/*.gp).\n\n",
      provenanceLine(p, rq), p.command, d.validation.empty() ? "" : ", data/validation.csv",
      d.search.empty() ? "" : ", data/search.csv");
  for (const auto& c : p.configs)
    md += fmt::format("### {} `{}`\n\n```yaml\n{}\n```\n\n", c.kind, c.path, c.text);
  writeFile(root / "report.md", md);

  // ---- index.html ----
  std::string h;
  h += "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
       "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  h += "<title>" + htmlEscape(rq.title) + "</title>\n<style>\n" + kCss + "\n</style>\n</head>\n";
  h += "<body>\n<header>\n<h1>" + htmlEscape(rq.title) + "</h1>\n<p class=\"meta\">" +
       htmlEscape(provenanceLine(p, rq)) + "</p>\n</header>\n";
  h += "<nav>\n<ul>\n<li><a href=\"#summary\">Summary</a></li>\n";
  for (const auto& s : sections()) {
    bool any = false;
    for (const auto& f : figures)
      any = any || f.section == s.id;
    if (any)
      h += "<li><a href=\"#" + s.id + "\">" + htmlEscape(s.title) + "</a></li>\n";
  }
  h += "<li><a href=\"#provenance\">Provenance</a></li>\n</ul>\n</nav>\n";
  h += "<section id=\"summary\">\n<h2>Summary</h2>\n<p>The fastest strategy that fits in memory, "
       "per worker count, and why.</p>\n";
  for (const auto& t : summary) {
    h += "<h3>" + htmlEscape(t.label) +
         "</h3>\n<table>\n<thead><tr><th>K</th><th>best</th>"
         "<th>step</th><th>why</th></tr></thead>\n<tbody>\n";
    for (const auto& r : t.rows)
      h += fmt::format(
          "<tr><td class=\"num\">{}</td><td>{}</td><td class=\"num\">{}</td><td>{}"
          "</td></tr>\n",
          htmlEscape(r[0]), htmlEscape(r[1]), htmlEscape(r[2]), htmlEscape(r[3]));
    h += "</tbody>\n</table>\n";
  }
  h += "</section>\n";
  for (const auto& s : sections()) {
    std::string body;
    for (size_t i = 0; i < figures.size(); ++i) {
      const auto& f = figures[i];
      if (f.section != s.id)
        continue;
      body += "<figure id=\"" + f.id + "\">\n" + svgs[i] + "\n<figcaption><strong>" +
              htmlEscape(f.title) + ".</strong> " + htmlEscape(f.reading) +
              "</figcaption>\n</figure>\n";
    }
    if (!body.empty())
      h += "<section id=\"" + s.id + "\">\n<h2>" + htmlEscape(s.title) + "</h2>\n<p>" +
           htmlEscape(s.intro) + "</p>\n" + body + "</section>\n";
  }
  h += "<section id=\"provenance\">\n<h2>Provenance</h2>\n<p>" + htmlEscape(provenanceLine(p, rq)) +
       "</p>\n<p>Regenerate this report:</p>\n<pre><code>" + htmlEscape(p.command) +
       "</code></pre>\n<p>The numbers behind every figure are in data/ beside this page (CSV, and "
       "all of it in data/report.json); each figure's gnuplot script is in figures/.</p>\n";
  for (const auto& c : p.configs)
    h += "<details>\n<summary>" + htmlEscape(c.kind) + " " + htmlEscape(c.path) +
         "</summary>\n<pre><code>" + htmlEscape(c.text) + "</code></pre>\n</details>\n";
  h += "</section>\n</body>\n</html>\n";
  writeFile(root / "index.html", h);
}

}  // namespace

}  // namespace strata::reports

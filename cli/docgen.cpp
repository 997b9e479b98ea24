// strata_docgen: the man page and the bash completion of `strata`, generated
// from the command line itself (the App main builds: app.h, commands.h), so
// neither can name a subcommand or an option the program does not have, or
// miss one it has. The build runs it (cli/CMakeLists.txt):
//
//   strata_docgen man  strata.1    troff, for man(1)
//   strata_docgen bash strata      a bash completion script (complete -F _strata strata)
//
// Option values the completion offers come from the same enums the readers
// parse (strategies, elements, optimizers, allreduce algorithms ...);
// networks, clusters and experiments from `strata list` when completing.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "app.h"
#include "commands.h"
#include "strata/model/allreduce_algorithm.h"
#include "strata/model/cluster.h"
#include "strata/model/strategy.h"

namespace strata::cli {
namespace {

// One option of a subcommand, as a person types it.
struct OptionDoc {
  std::vector<std::string> names;  // "-n", "--network"; empty for a positional
  std::string positional;          // the positional's name, "" otherwise
  std::string help;
  bool takesValue = true;
};

struct CommandDoc {
  std::string name, description, footer;
  std::vector<OptionDoc> options;
};

std::vector<CommandDoc> commandsOf(CLI::App& app) {
  std::vector<CommandDoc> out;
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
    CommandDoc c{sub->get_name(), sub->get_description(), sub->get_footer(), {}};
    for (const CLI::Option* o : sub->get_options()) {
      OptionDoc d;
      for (const auto& s : o->get_snames())
        d.names.push_back("-" + s);
      for (const auto& l : o->get_lnames())
        d.names.push_back("--" + l);
      if (d.names.empty())
        d.positional = o->get_name();
      d.help = o->get_description();
      d.takesValue = o->get_items_expected_max() != 0;
      c.options.push_back(d);
    }
    out.push_back(c);
  }
  return out;
}

template <class E, size_t N>
std::string words(const E (&values)[N]) {
  std::string out;
  for (auto v : values)
    out += (out.empty() ? "" : " ") + std::string(toString(v));
  return out;
}

// The values an option takes, by its long name: what completion offers.
// "@network", "@cluster", "@experiment": the presets of that kind, at
// completion time, beside file names.
std::map<std::string, std::string> optionValues() {
  using A = AllreduceAlgorithm;
  const A algorithms[] = {A::kNaive, A::kRing, A::kHalvingDoubling, A::kDirect, A::kHierarchical,
                          A::kTree,  A::kAuto};
  const Optimizer optimizers[] = {Optimizer::kSgd, Optimizer::kMomentum, Optimizer::kAdam,
                                  Optimizer::kAdamW};
  const FcUpdate updates[] = {FcUpdate::kStep, FcUpdate::kRound};
  const PsPriority priorities[] = {PsPriority::kFirstNeeded, PsPriority::kFifo,
                                   PsPriority::kLastReady};
  const Recompute recomputes[] = {Recompute::kNone, Recompute::kSelective, Recompute::kFull};
  const PipelineSchedule schedules[] = {PipelineSchedule::kGpipe, PipelineSchedule::k1f1b,
                                        PipelineSchedule::kInterleaved};
  const Placement placements[] = {Placement::kTpPpDp, Placement::kTpDpPp};
  const std::string strategies = words(kAllStrategies);
  return {
      {"--format", "table json csv"},
      {"--engine", "model sim"},
      {"--device", "cpu cuda"},
      {"--strategy", strategies},
      {"--strategies", strategies + " all"},
      {"--element", words(kAllElementTypes)},
      {"--elements", words(kAllElementTypes)},
      {"--optimizer", words(optimizers)},
      {"--allreduce", words(algorithms)},
      {"--conv-sync", words(algorithms)},
      {"--fc-update", words(updates)},
      {"--fc-updates", words(updates)},
      {"--ps-priority", words(priorities)},
      {"--recompute", words(recomputes)},
      {"--schedule", words(schedules)},
      {"--placement", words(placements)},
      {"--overlap", "on off"},
      {"--overlaps", "on off"},
      {"--contention", "on off"},
      {"--sequence-parallel", "on off"},
      {"--network", "@network"},
      {"--networks", "@network"},
      {"--cluster", "@cluster"},
      {"--clusters", "@cluster"},
  };
}

// ---- man page -----------------------------------------------------------------------

// Text as troff reads it: backslashes escaped, a line starting with a dot or
// a quote protected, hyphens as minus signs where they are options.
std::string roff(const std::string& text) {
  std::string out;
  bool lineStart = true;
  for (char c : text) {
    if (lineStart && (c == '.' || c == '\''))
      out += "\\&";
    if (c == '\\')
      out += "\\e";
    else if (c == '-')
      out += "\\-";
    else
      out += c;
    lineStart = c == '\n';
  }
  return out;
}

void writeMan(std::ostream& out, CLI::App& app, const std::vector<CommandDoc>& commands) {
  out << ".\\\" Generated by strata_docgen from strata's command line; do not edit.\n";
  out << ".TH STRATA 1 \"\" \"" << roff(versionText()) << "\" \"User Commands\"\n";
  out << ".SH NAME\nstrata \\- how fast a network trains on a cluster under a parallelization "
         "strategy\n";
  out << ".SH SYNOPSIS\n.B strata\n.I command\n[\\fIoptions\\fR]\n.br\n.B strata\n\\-\\-help "
         "| \\-\\-version\n";
  out << ".SH DESCRIPTION\n" << roff(app.get_description()) << "\n.PP\n";
  out << "strata answers three ways over one vocabulary: a closed-form cost model, a "
         "discrete-event simulator that plays the strategy's plan on a simulated cluster, and "
         "an executor that runs the same plan for real (CPU threads, MPI ranks, CUDA devices) "
         "and measures it.\n";
  out << ".SH COMMANDS\n";
  for (const auto& c : commands)
    out << ".TP\n.B " << c.name << "\n" << roff(c.description) << "\n";
  for (const auto& c : commands) {
    out << ".SH \"STRATA " << roff(c.name) << "\"\n";
    out << roff(c.description) << "\n";
    for (const auto& o : c.options) {
      out << ".TP\n";
      if (!o.positional.empty()) {
        out << ".I " << roff(o.positional) << "\n";
      } else {
        std::string names;
        for (const auto& n : o.names)
          names += (names.empty() ? "" : ", ") + std::string("\\fB") + roff(n) + "\\fR";
        out << names << (o.takesValue ? " \\fIvalue\\fR" : "") << "\n";
      }
      out << roff(o.help.empty() ? "(no description)" : o.help) << "\n";
    }
    if (!c.footer.empty())
      out << ".PP\n.nf\n" << roff(c.footer) << "\n.fi\n";
  }
  out << ".SH ENVIRONMENT\n.TP\n.B STRATA_CONFIG_DIR\n"
      << roff(
             "Folders of presets (networks/, clusters/, experiments/), colon-separated, "
             "searched before the installed configs.")
      << "\n";
  out << ".SH EXIT STATUS\n.TP\n.B 0\nsuccess\n.TP\n.B 1\n"
      << roff(
             "a failure at run time (a worker failed, a peer timed out, an output not written) "
             "or an internal error")
      << "\n.TP\n.B 2\n"
      << roff(
             "a user mistake: a bad option, an unknown name, a config naming its file, line and "
             "key")
      << "\n";
  out << ".SH SEE ALSO\n"
      << roff(
             "The README and docs/ of the strata source: configs.md, cost-model.md, "
             "simulator.md, executor.md, validation.md, python.md.")
      << "\n";
}

// ---- bash completion --------------------------------------------------------------

// A bash word list, single-quoted.
std::string quoted(const std::string& text) {
  return "'" + text + "'";
}

void writeBash(std::ostream& out, const std::vector<CommandDoc>& commands) {
  const auto values = optionValues();
  std::string names;
  for (const auto& c : commands)
    names += (names.empty() ? "" : " ") + c.name;
  out << "# bash completion for strata: generated by strata_docgen from strata's command line;\n"
         "# do not edit. Install as share/bash-completion/completions/strata, or source it.\n"
         "\n"
         "# The presets of one kind (network, cluster, experiment), from the strata being\n"
         "# completed.\n"
         "_strata_presets() {\n"
         "  \"$1\" list --format csv 2>/dev/null | while IFS=, read -r kind name; do\n"
         "    [[ \"$kind\" == \"$2\" ]] && printf '%s\\n' \"$name\"\n"
         "  done\n"
         "}\n"
         "\n"
         "_strata() {\n"
         "  local cur=\"${COMP_WORDS[COMP_CWORD]}\" prev=\"${COMP_WORDS[COMP_CWORD-1]}\"\n"
         "  local cmd=\"\" i words=\"\" kind=\"\" opts=\"\" valued=\"\"\n"
         "  for ((i = 1; i < COMP_CWORD; i++)); do\n"
         "    case \"${COMP_WORDS[i]}\" in\n"
         "      -*) ;;\n"
         "      *) cmd=\"${COMP_WORDS[i]}\"; break ;;\n"
         "    esac\n"
         "  done\n"
         "  if [[ -z \"$cmd\" ]]; then\n"
         "    COMPREPLY=($(compgen -W "
      << quoted(names + " --help --version")
      << " -- \"$cur\"))\n"
         "    return\n"
         "  fi\n";
  // Per command: its option names, and which of them take a value.
  out << "  case \"$cmd\" in\n";
  for (const auto& c : commands) {
    std::string opts, valued;
    for (const auto& o : c.options) {
      for (const auto& n : o.names) {
        opts += (opts.empty() ? "" : " ") + n;
        if (o.takesValue)
          valued += " " + n + " ";
      }
    }
    out << "    " << c.name << ")\n      opts=" << quoted(opts)
        << "\n      valued=" << quoted(valued) << "\n";
    // A positional naming a network (describe) or an experiment (compare).
    if (c.name == "describe")
      out << "      kind=network\n";
    else if (c.name == "compare")
      out << "      kind=experiment\n";
    out << "      ;;\n";
  }
  out << "    *) return ;;\n  esac\n";
  // The value of an option: its words, presets, or files (-o default).
  out << "  if [[ \"$valued\" == *\" $prev \"* ]]; then\n"
         "    case \"$cmd $prev\" in\n";
  // Each command's own: -s is one strategy in predict, a list in compare.
  for (const auto& c : commands)
    for (const auto& o : c.options) {
      std::string v, patterns;
      for (const auto& n : o.names) {
        if (auto it = values.find(n); it != values.end())
          v = it->second;
        if (!patterns.empty())
          patterns += '|';  // appends: GCC 12 warns (-Wrestrict) on "|" + s
        patterns += quoted(c.name + " " + n);
      }
      if (v.empty())
        continue;
      out << "      " << patterns << ")\n";
      if (v[0] == '@')
        out << "        words=\"$(_strata_presets \"${COMP_WORDS[0]}\" " << v.substr(1)
            << ")\" ;;\n";
      else
        out << "        words=" << quoted(v) << " ;;\n";
    }
  out << "      *) return ;;  # a number, a size, a path: bash completes files\n"
         "    esac\n"
         "    COMPREPLY=($(compgen -W \"$words\" -- \"$cur\"))\n"
         "    return\n"
         "  fi\n"
         "  if [[ \"$cur\" == -* || -z \"$kind\" ]]; then\n"
         "    COMPREPLY=($(compgen -W \"$opts\" -- \"$cur\"))\n"
         "    return\n"
         "  fi\n"
         "  COMPREPLY=($(compgen -W \"$(_strata_presets \"${COMP_WORDS[0]}\" \"$kind\")\" -- "
         "\"$cur\"))\n"
         "}\n"
         "complete -o default -F _strata strata\n";
}

}  // namespace
}  // namespace strata::cli

int main(int argc, char** argv) {
  using namespace strata::cli;
  if (argc != 3 || (std::string(argv[1]) != "man" && std::string(argv[1]) != "bash")) {
    std::cerr << "usage: strata_docgen man|bash OUTPUT\n";
    return 2;
  }
  CLI::App app;
  describeApp(app);
  int fakeArgc = 1;
  char name[] = "strata";
  char* fakeArgv[] = {name, nullptr};
  char** fakeArgvPointer = fakeArgv;
  const auto registered = addAllCommands(app, Process{&fakeArgc, &fakeArgvPointer});
  (void)registered;
  const auto commands = commandsOf(app);
  std::ostringstream text;
  if (std::string(argv[1]) == "man")
    writeMan(text, app, commands);
  else
    writeBash(text, commands);
  std::ofstream out(argv[2]);
  out << text.str();
  out.close();
  if (!out) {
    std::cerr << "strata_docgen: cannot write " << argv[2] << "\n";
    return 1;
  }
  return 0;
}

// The report's figures: for each, a gnuplot script (data inline as gnuplot
// datablocks, so the script alone redraws the figure) and a one-paragraph
// reading of what it shows, written from the same numbers.
#pragma once

#include <string>
#include <vector>

#include "strata/reports/report.h"

namespace strata::reports {

struct Figure {
  std::string id;       // HTML id: "fig-speedup", "fig-speedup-resnet50-dgx-h100", ...
  std::string name;     // file stem under figures/: "speedup", ...
  std::string section;  // the HTML section it belongs to
  std::string title;
  std::string reading;  // one paragraph
  std::string script;   // gnuplot commands after the terminal and output lines
  int width = 760, height = 430;
};

// Every figure of `report`, in the order the page shows them.
std::vector<Figure> makeFigures(const Report& report, const ReportRequest& request);

// "resnet50 on dgx-h100, b = 128": the panel's label.
std::string panelLabel(const Panel& panel, const ReportRequest& request);

}  // namespace strata::reports

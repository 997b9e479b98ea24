// Drawing figures with gnuplot (Debian's gnuplot-nox, SVG terminal).
#pragma once

#include <string>

namespace strata::reports {

// Runs `gnuplot script` inside `dir` (the script names its own output).
// Throws RunFailure with gnuplot's message when it fails.
void runGnuplot(const std::string& gnuplot, const std::string& dir, const std::string& script);

// gnuplot's SVG made fit for inlining in an HTML page beside other figures:
// the XML declaration and DOCTYPE dropped, and every id (and every reference
// to one: href="#id", url(#id)) prefixed with `prefix`, since each figure
// defines the same point symbols and ids must be unique in a page.
std::string inlineSvg(const std::string& svg, const std::string& prefix);

}  // namespace strata::reports

// Reading option values typed by a person, for every front end: the CLI
// (--fc-update round) and the Python module (fc_update="round") hand the same
// text to the same readers, so they accept and refuse the same values with
// the same message. `option` is the name the front end shows in errors
// ("--fc-update" on the command line, "fc_update" in Python); every reader
// throws OptionError(option, why) on a bad value.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "strata/model/strategy.h"
#include "strata/model/units.h"

namespace strata::study {

// "a,b,c" -> {"a", "b", "c"}; a trailing comma gives an empty last item.
std::vector<std::string> splitList(const std::string& text);
// The items of a list option (--networks, --overlaps ...): at least one, each
// once (refuseRepeats); empty items are each reader's to reject.
std::vector<std::string> splitItems(const std::string& text, const std::string& option);
// "1,2,4" -> {1, 2, 4}; every item a positive int, each once.
std::vector<int> parsePositiveList(const std::string& text, const std::string& option);
// One positive integer (options that take a single value).
int parsePositive(const std::string& text, const std::string& option);
// A byte size such as "1MiB", "25 MB" or 0 (off).
Bytes parseSize(const std::string& text, const std::string& option);
// A seed: a non-negative integer below 2^64.
uint64_t parseSeed(const std::string& text, const std::string& option);
// on|true or off|false.
bool parseOnOff(const std::string& text, const std::string& option);
// A finite number in [low, high) (or [low, high] when `highIncluded`).
double checkRange(double value, double low, double high, bool highIncluded,
                  const std::string& option);
// "3:1.5" -> worker 3 runs 1.5x slower, into `slowdown` (resized as needed).
void parseStraggler(const std::string& text, std::vector<double>& slowdown, int workers,
                    const std::string& option = "--straggler");
// Every straggler given: the slowdown per worker; a worker given twice is an
// error (the last factor would win silently).
std::vector<double> parseStragglers(const std::vector<std::string>& texts, int workers,
                                    const std::string& option = "--straggler");

// Sets the option `key` of `o` from `text` (on|off, a size, a stage count, a
// list of stage starts ...), checked against the same bounds everywhere
// (model/limits.h, strategy.h). `option` names it in errors.
void applyOptionText(OptionKey key, const std::string& text, const std::string& option,
                     StrategyOptions& o);

}  // namespace strata::study

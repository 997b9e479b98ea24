// Error types shared by every layer of strata.
//
// User mistakes (a bad config, an unknown name, a bad command-line option) are
// typed exceptions carrying where the mistake is; the CLI prints what() on one
// line and exits with status 2. Failures at run time (RunFailure) print one
// line and exit with status 1. Broken invariants are InvariantError, raised by
// STRATA_ENFORCE with both operands printed. Libraries never call exit().
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace strata {

// A mistake the user can fix: bad input, unknown preset, impossible request.
class UserError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A mistake inside a config file: names the file, the line (1-based, 0 when
// unknown) and the key path (e.g. "layers[3].kernel").
class ConfigError : public UserError {
 public:
  ConfigError(std::string file, int line, std::string key, const std::string& message);

  const std::string& file() const { return file_; }
  int line() const { return line_; }
  const std::string& key() const { return key_; }

 private:
  std::string file_;
  int line_;
  std::string key_;
};

// A mistake on the command line or in an API argument: names the option.
class OptionError : public UserError {
 public:
  OptionError(const std::string& option, const std::string& message)
      : UserError(option + ": " + message) {}
};

// A failure at run time that is neither a user mistake nor a bug in strata:
// a worker failed (or a fault was injected), a peer died or timed out. The CLI
// prints it on one line and exits with status 1.
class RunFailure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The operating system refused a write that was the user's to ask for: a
// full disk (ENOSPC), a quota, an I/O error. Not a user mistake, so a
// RunFailure (exit status 1), and what() carries the reason (strerror).
class WriteError : public RunFailure {
 public:
  using RunFailure::RunFailure;
};

// An internal invariant does not hold: a bug in strata, not a user mistake.
class InvariantError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

namespace detail {
template <class A, class B>
[[noreturn]] void enforceFailed(const char* file, int line, const char* expr, const A& a,
                                const B& b) {
  std::ostringstream os;
  os << file << ":" << line << ": STRATA_ENFORCE(" << expr << ") failed: " << a << " vs " << b;
  throw InvariantError(os.str());
}
[[noreturn]] void enforceFailed(const char* file, int line, const char* expr);
}  // namespace detail

}  // namespace strata

// Checks a binary comparison and, when false, throws InvariantError printing
// both operands: STRATA_ENFORCE_OP(k, <=, size).
#define STRATA_ENFORCE_OP(a, op, b)                                                     \
  do {                                                                                  \
    const auto& strata_a_ = (a);                                                        \
    const auto& strata_b_ = (b);                                                        \
    if (!(strata_a_ op strata_b_))                                                      \
      ::strata::detail::enforceFailed(__FILE__, __LINE__, #a " " #op " " #b, strata_a_, \
                                      strata_b_);                                       \
  } while (0)

// Checks a condition and throws InvariantError naming it when false.
#define STRATA_ENFORCE(cond)                                      \
  do {                                                            \
    if (!(cond))                                                  \
      ::strata::detail::enforceFailed(__FILE__, __LINE__, #cond); \
  } while (0)

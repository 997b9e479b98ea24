// Replays fuzz findings: runs one config loader on one file, as the fuzz
// target that found it did (fuzz/config_loaders.h), and passes when the loader
// rejects the file with a UserError that names it. Another exception fails;
// a crash or a sanitizer report ends the process, which fails the test too.
//
// Usage: config_replay LOADER FILE   (LOADER: network, cluster, experiment,
// suite, profile). Exit status 0: rejected cleanly; 1: anything else.
#include <exception>
#include <iostream>
#include <string>

#include "config_loaders.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: config_replay LOADER FILE\n";
    return 1;
  }
  const std::string file = argv[2];
  try {
    const auto loader = strata::fuzz::parseLoader(argv[1]);
    const std::string message = strata::fuzz::load(loader, file);
    if (message.empty()) {
      std::cout << file << ": loaded, but a regression input must be rejected\n";
      return 1;
    }
    std::cout << "rejected: " << message << "\n";
    if (message.find(file) == std::string::npos) {
      std::cout << "the message does not name the file " << file << "\n";
      return 1;
    }
    return 0;
  } catch (const std::exception& e) {
    std::cout << file << ": not a UserError: " << e.what() << "\n";
  } catch (...) {
    std::cout << file << ": threw something that is not a std::exception\n";
  }
  return 1;
}

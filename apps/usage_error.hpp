#pragma once
// A command line that cannot run as given: a flag out of range, a flag the chosen schedule
// ignores, an output that would overwrite an input. `tandem` prints it as
// "tandem: error: ..." and exits with 2, like CLI11's own parse errors (docs/cli.md).
#include <stdexcept>
#include <string>

namespace tandem::apps {

class UsageError : public std::runtime_error {
 public:
  explicit UsageError(const std::string& what) : std::runtime_error(what) {}
};

// Exit codes of `tandem` (docs/cli.md).
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;  // the run, a config, a data or profile file failed
inline constexpr int kExitUsage = 2;    // the command line itself is wrong

}  // namespace tandem::apps

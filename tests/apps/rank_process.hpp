#pragma once
// Finding one rank's process of a job a test launched, to kill it.
#include <sys/types.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace tandem::apps::testing {

// The pid of the `tandem train` rank `rank` whose environment holds `mark` (a variable the test
// set on the launcher, which its ranks inherit); -1 when there is none.
inline pid_t find_rank(const std::string& mark, int rank) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(entry.path() / "environ", std::ios::binary);
    std::string env((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (env.find(mark) != std::string::npos &&
        env.find(std::string("TANDEM_RANK=") + std::to_string(rank) + '\0') != std::string::npos) {
      return static_cast<pid_t>(std::stol(name));
    }
  }
  return -1;
}

}  // namespace tandem::apps::testing

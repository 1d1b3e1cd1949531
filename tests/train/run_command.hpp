#pragma once
// Runs a shell command (a `tandem` invocation, a launched job) and returns its exit code and
// its output, stderr included.
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace tandem::apps::testing {

struct CommandResult {
  int code = -1;  // the exit status; -1 when it did not exit normally or did not start
  std::string output;
};

inline CommandResult run_command(const std::string& command) {
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  CommandResult r;
  if (pipe == nullptr) return r;
  std::array<char, 4096> buffer{};
  while (std::fgets(buffer.data(), buffer.size(), pipe) != nullptr) r.output += buffer.data();
  const int status = ::pclose(pipe);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

}  // namespace tandem::apps::testing

// Start-up of a program linking libtandem.so that only calls tandem::version(): wall time from
// spawn to exit, and its peak resident memory (wait4's ru_maxrss), against an anchor program that
// links nothing of Tandem. The CUDA back end is a plugin loaded on first use
// (runtime/plugin.hpp), so neither figure includes cudart, cuBLAS or NCCL (docs/benchmarks.md).
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <string>

#include "benches/json_line_reporter.hpp"

extern char** environ;

namespace tandem {
namespace {

struct Start {
  double seconds = 0;
  double max_rss_mb = 0;
};

// Runs `program` once, its output to /dev/null; throws when it cannot start or fails.
Start start_once(const char* program) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  char* argv[] = {const_cast<char*>(program), nullptr};
  const auto t0 = std::chrono::steady_clock::now();
  pid_t pid = 0;
  const int spawned = posix_spawn(&pid, program, &actions, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) throw std::runtime_error(std::string("cannot start ") + program);
  int status = 0;
  rusage usage{};
  if (wait4(pid, &status, 0, &usage) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    throw std::runtime_error(std::string(program) + " failed");
  }
  const auto t1 = std::chrono::steady_clock::now();
  return {std::chrono::duration<double>(t1 - t0).count(),
          static_cast<double>(usage.ru_maxrss) / 1024.0};
}

void run(benchmark::State& state, const char* program) {
  double peak = 0;
  for (auto _ : state) {
    const Start s = start_once(program);
    state.SetIterationTime(s.seconds);
    peak = std::max(peak, s.max_rss_mb);
  }
  state.counters["max_rss_mb"] = peak;
}

void BM_StartVersionProbe(benchmark::State& state) {
  run(state, TANDEM_VERSION_PROBE);
}
void BM_StartAnchor(benchmark::State& state) {
  run(state, TANDEM_STARTUP_ANCHOR);
}

BENCHMARK(BM_StartAnchor)->UseManualTime()->Unit(benchmark::kMillisecond)->MinTime(1.0);
BENCHMARK(BM_StartVersionProbe)->UseManualTime()->Unit(benchmark::kMillisecond)->MinTime(1.0);

}  // namespace
}  // namespace tandem

int main(int argc, char** argv) {
  return tandem::bench::run_benchmarks(argc, argv, "startup");
}

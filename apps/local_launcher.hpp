#pragma once
// `tandem launch`'s engine: starts N copies of a command on this machine as the ranks of one
// job (TANDEM_RANK, TANDEM_WORLD_SIZE, TANDEM_LOCAL_RANK, TANDEM_MASTER on a free loopback
// port, TANDEM_JOB_TOKEN: the given token or a fresh one), prefixes every line they print with
// their rank, and waits for all of them.
//
// A rank that fails ends the job: the others see it lost on the control plane and exit by
// themselves within seconds; any still running `grace` later are terminated (SIGTERM, then
// SIGKILL), so the launcher never hangs on a stuck rank.
#include <chrono>
#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace tandem::apps {

struct LaunchOptions {
  int processes = 1;
  std::vector<std::string> command;  // argv; command[0] the executable (PATH when no '/')
  // After the first rank fails: how long the others get to exit by themselves.
  std::chrono::milliseconds grace{std::chrono::seconds(20)};
  // Extra environment for every rank ("NAME=value").
  std::vector<std::string> env;
  // An elastic job goes on when a rank other than 0 fails (the others re-plan onto themselves):
  // only rank 0's failure starts the grace.
  bool elastic = false;
  // The job's token; empty: a fresh one (32 random bytes, hex), so that no process outside the
  // job joins it even on this host.
  std::string job_token;
};

struct RankExit {
  int rank = 0;
  int status = 0;  // exit status, or 128 + signal
  // Set when the launcher itself signalled the rank: it was still running `grace` after rank
  // `failed_rank`, the first to fail, had failed.
  struct Overrun {
    int failed_rank = 0;
    std::chrono::milliseconds grace{0};
  };
  std::optional<Overrun> overran;
  // "rank 1 exited with status 1", "rank 2 was killed by signal 9", "rank 2 did not exit
  // within the 5 s grace after rank 1 failed; tandem launch killed it".
  std::string describe() const;
};

struct LaunchResult {
  std::vector<RankExit> ranks;  // by rank
  bool ok() const;
};

// Runs the job; each line a rank prints goes to `out` (stdout and stderr alike) as
// "[rank R] line". Throws std::runtime_error when a rank cannot be started (the ones started
// are terminated first).
LaunchResult launch_local(const LaunchOptions& options, std::ostream& out);

// From a signal handler's context or any thread: terminate the ranks of the job in progress
// (SIGTERM to each; `tandem launch` forwards SIGTERM and SIGHUP this way).
void terminate_launched_ranks();

}  // namespace tandem::apps

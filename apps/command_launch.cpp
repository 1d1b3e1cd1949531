// `tandem launch -n N [--grace S] [train|bench] CONFIG [ARGS...]`: runs a multi-process job
// on this machine, N ranks of `tandem train CONFIG ARGS...` (or bench), their output prefixed
// with the rank; exits non-zero when any rank fails. `tandem launch -n N -- PROGRAM [ARGS...]`
// starts any program as the ranks instead (an application of the embedding API that joins
// with Launch::from_environment()), with the same variables and token. Across nodes the
// launchers clusters already have start the same ranks (docs/transport.md).
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "apps/commands.hpp"
#include "apps/local_launcher.hpp"
#include "apps/usage_error.hpp"
#include "train/process_group.hpp"

namespace tandem::apps {
namespace {

extern "C" void forward_termination(int) {
  terminate_launched_ranks();
}

std::string self_executable() {
  std::error_code ec;
  const auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) throw std::runtime_error("launch: cannot find this executable (/proc/self/exe)");
  return p.string();
}

}  // namespace

std::optional<std::vector<std::string>> split_launch_program(int& argc, char** argv) {
  if (argc < 3 || std::string_view(argv[1]) != "launch") return std::nullopt;
  for (int i = 2; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--") {
      std::vector<std::string> program(argv + i + 1, argv + argc);
      argc = i;
      return program;
    }
    if (a == "-n" || a == "--processes" || a == "--grace") {
      ++i;  // its value
    } else if (!a.starts_with("-")) {
      return std::nullopt;  // the ranks' command began: what follows is theirs
    }
  }
  return std::nullopt;
}

void add_launch_command(CLI::App& app, std::optional<std::vector<std::string>> after_dashes) {
  struct Args {
    int processes = 0;
    double grace_s = 20;
    bool elastic = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand(
      "launch",
      "run N local processes as one job: tandem launch -n N [train|bench] CONFIG "
      "[ARGS...], or tandem launch -n N -- PROGRAM [ARGS...]; output prefixed with each rank");
  sub->add_option("-n,--processes", args->processes, "how many processes (ranks)")
      ->required()
      ->check(CLI::Range(1, 256));
  sub->add_option("--grace", args->grace_s,
                  "seconds the other ranks get to exit by themselves after one failed, before "
                  "they are terminated")
      ->check(CLI::Range(0.0, 3600.0));
  sub->add_flag("--elastic", args->elastic,
                "the job goes on when a rank other than 0 is lost: the others re-plan onto "
                "themselves and resume from the last checkpoint (`tandem train --elastic`)");
  // Everything from the first positional on ([train|bench] CONFIG [ARGS...]) is the ranks'
  // command, flags included.
  sub->prefix_command();
  sub->footer(
      "Every rank runs `tandem [train|bench] CONFIG ARGS...` (default: train), or, after `--`, "
      "PROGRAM ARGS... with TANDEM_RANK, TANDEM_WORLD_SIZE, TANDEM_LOCAL_RANK, TANDEM_MASTER "
      "and TANDEM_JOB_TOKEN set (an application joins with tandem::Launch::from_environment()).");
  sub->callback([args, sub, after_dashes = std::move(after_dashes)] {
    std::vector<std::string> rest = sub->remaining();
    const bool program = after_dashes.has_value();
    if (program && !rest.empty()) {
      throw UsageError("launch: give either a config or `-- PROGRAM`, not both");
    }
    if (program) rest = *after_dashes;
    std::string command = "train";
    if (!program && !rest.empty() && (rest.front() == "train" || rest.front() == "bench")) {
      command = rest.front();
      rest.erase(rest.begin());
    }
    if (rest.empty()) {
      throw UsageError(program ? "launch: give the program the ranks run after --"
                               : "launch: give the config the ranks run");
    }
    LaunchOptions o;
    o.processes = args->processes;
    o.grace = std::chrono::milliseconds(static_cast<int64_t>(args->grace_s * 1000));
    // The token the user set (TANDEM_JOB_TOKEN or TANDEM_JOB_TOKEN_FILE) is the job's;
    // otherwise launch_local draws one.
    o.job_token = train::environment_job_token();
    if (program) {
      o.command = rest;
    } else {
      o.command = {self_executable(), command};
      o.command.insert(o.command.end(), rest.begin(), rest.end());
    }
    if (args->elastic) {
      if (program || command != "train") {
        throw UsageError(
            "launch: --elastic is for `tandem train` jobs (a program's config says "
            "cluster.elastic)");
      }
      o.elastic = true;
      o.command.push_back("--elastic");
    }
    // Ctrl-C reaches the ranks directly (one process group); a SIGTERM or SIGHUP sent to the
    // launcher alone is passed on, so no rank outlives it.
    struct sigaction sa {};
    sa.sa_handler = forward_termination;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, nullptr);
    sigaction(SIGHUP, &sa, nullptr);
    signal(SIGINT, SIG_IGN);  // the ranks stop at their next boundary; wait for them
    const LaunchResult result = launch_local(o, std::cout);
    if (o.elastic && result.ranks.front().status == 0) {
      // Rank 0 finished the job: the ranks lost on the way were re-planned around.
      for (const RankExit& r : result.ranks) {
        if (r.status != 0)
          std::cout << "launch: " << r.describe() << "; the job went on without it\n";
      }
      return;
    }
    if (!result.ok()) {
      std::string what;
      int failed = 0;
      for (const RankExit& r : result.ranks) {
        if (r.status == 0) continue;
        what += (failed++ == 0 ? "" : "; ") + r.describe();
      }
      throw std::runtime_error("launch: " + std::to_string(failed) + " of " +
                               std::to_string(o.processes) + " ranks failed: " + what);
    }
  });
}

}  // namespace tandem::apps

#pragma once
// Real processes of tandem_pipeline_rank for the multi-process tests: starting them (stderr to
// a file each, optionally stdout to a pipe), waiting for them against a deadline, killing
// whatever is left when a test ends early, and comparing what the ranks wrote with the
// in-process run of the same case.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "models/safetensors.hpp"
#include "runtime/scheduler.hpp"
#include "split_pipeline_case.hpp"

extern char** environ;

namespace tandem::transport::testing {

using Clock = std::chrono::steady_clock;

inline std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

struct Exit {
  int status = 0;        // as ProcessGroup::wait returns it
  Clock::time_point at;  // when it was seen
};

// A fresh directory for a test's ranks, removed with it: /tmp/tandem-<suite>-<test>-<pid>-<n>,
// one level whatever the parameterized test's name (its '/' become '-').
class ScratchDir {
 public:
  ScratchDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = std::string("tandem-") + info->test_suite_name() + "-" + info->name() + "-" +
                       std::to_string(getpid()) + "-" + std::to_string(count_++);
    for (char& c : name) {
      if (c == '/') c = '-';
    }
    path_ = std::filesystem::temp_directory_path() / name;
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::filesystem::path& path() const { return path_; }

 private:
  static inline int count_ = 0;
  std::filesystem::path path_;
};

// Child processes that are killed and reaped, if still running, when the group goes.
class ProcessGroup {
 public:
  ProcessGroup() = default;
  ~ProcessGroup() {
    for (Child& c : children_) {
      if (c.status) continue;
      kill(c.pid, SIGKILL);
      int status = 0;
      waitpid(c.pid, &status, 0);
    }
  }
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  // Starts `args` (args[0] looked up in PATH) with the environment plus `env` ("NAME=value"),
  // stderr to `stderr_path`, stdout to `stdout_fd` when it is not -1 (else inherited). Returns
  // the child's index, or -1 when it could not start.
  int start(const std::vector<std::string>& args, const std::filesystem::path& stderr_path,
            const std::vector<std::string>& env = {}, int stdout_fd = -1) {
    std::vector<char*> argv;
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    std::vector<char*> envp;
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string_view var = *e;
      bool replaced = false;
      for (const std::string& mine : env) {
        const std::string_view name = std::string_view(mine).substr(0, mine.find('=') + 1);
        replaced = replaced || var.substr(0, name.size()) == name;
      }
      if (!replaced) envp.push_back(*e);
    }
    for (const std::string& e : env) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 2, stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0644);
    if (stdout_fd >= 0) posix_spawn_file_actions_adddup2(&actions, stdout_fd, 1);
    pid_t pid = -1;
    const int rc = posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) return -1;
    children_.push_back({pid, stderr_path, std::nullopt, {}});
    return static_cast<int>(children_.size()) - 1;
  }

  pid_t pid(int child) const { return children_.at(static_cast<std::size_t>(child)).pid; }
  std::string stderr_text(int child) const {
    return read_text(children_.at(static_cast<std::size_t>(child)).stderr_path);
  }

  // The exit status of a child (128 + signal when a signal ended it), or -1 after killing it
  // when `deadline` passed first.
  int wait(int child, Clock::time_point deadline) { return wait_all({child}, deadline)[0].status; }

  // Waits for all of `children` at once, so that each one's exit time is when it exited.
  std::vector<Exit> wait_all(const std::vector<int>& children, Clock::time_point deadline) {
    for (;;) {
      bool running = false;
      for (int i : children) running = poll(children_.at(static_cast<std::size_t>(i))) || running;
      if (!running) break;
      if (Clock::now() > deadline) {
        for (int i : children) {
          Child& c = children_.at(static_cast<std::size_t>(i));
          if (c.status) continue;
          kill(c.pid, SIGKILL);
          int status = 0;
          waitpid(c.pid, &status, 0);
          c.status = -1;
          c.exited = Clock::now();
        }
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    std::vector<Exit> out;
    for (int i : children) {
      const Child& c = children_.at(static_cast<std::size_t>(i));
      out.push_back({*c.status, c.exited});
    }
    return out;
  }

 private:
  struct Child {
    pid_t pid;
    std::filesystem::path stderr_path;
    std::optional<int> status;
    Clock::time_point exited;
  };

  // Whether the child still runs (reaping it, and noting when, once it ended).
  static bool poll(Child& c) {
    if (c.status) return false;
    int status = 0;
    const pid_t r = waitpid(c.pid, &status, WNOHANG);
    if (r == 0) return true;
    c.status = r < 0 ? -2 : WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    c.exited = Clock::now();
    return false;
  }
  std::vector<Child> children_;
};

// The arguments of rank `rank` of `world` running `name` over channel `kind`.
inline std::vector<std::string> rank_args(int rank, int world, const std::string& master,
                                          const std::string& kind, const std::string& name,
                                          const std::filesystem::path& out) {
  return {TANDEM_PIPELINE_RANK_EXE,
          "--rank",
          std::to_string(rank),
          "--world",
          std::to_string(world),
          "--master",
          master,
          "--channel",
          kind,
          "--case",
          name,
          "--out",
          out.string()};
}

// The in-process run of a case, the reference of every spread one.
struct InProcessRun {
  std::vector<double> losses;
  models::ParamSet params;
};

inline InProcessRun run_in_process(const std::string& name) {
  const models::Model model = split_case_model(name);
  actors::Pipeline local(split_case_spec(name, model), make_work_sharing({}));
  InProcessRun r;
  r.losses = local.run().losses;
  r.params = local.params();
  return r;
}

// What `world` ranks wrote in `out` equals `want` bit for bit: the losses and every weight.
inline void expect_ranks_wrote(const std::filesystem::path& out, int world,
                               const InProcessRun& want) {
  std::ifstream in(out / "losses.txt");
  std::vector<double> losses;
  for (std::string line; std::getline(in, line);)
    losses.push_back(std::strtod(line.c_str(), nullptr));
  EXPECT_EQ(losses, want.losses);
  models::ParamSet got;
  for (int rank = 0; rank < world; ++rank) {
    const auto file = out / ("rank-" + std::to_string(rank) + ".safetensors");
    ASSERT_TRUE(std::filesystem::exists(file)) << file;
    got.merge(models::read_safetensors(file).tensors);
  }
  ASSERT_EQ(got.size(), want.params.size());
  for (std::int64_t i = 0; i < want.params.size(); ++i) {
    const std::string& n = want.params.name(i);
    ASSERT_TRUE(got.contains(n)) << n;
    EXPECT_EQ(got.at(n).to_float_vector(), want.params[i].to_float_vector()) << n;
  }
}

}  // namespace tandem::transport::testing

#include "apps/local_launcher.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "runtime/hmac.hpp"

extern char** environ;

namespace tandem::apps {
namespace {

constexpr int kMaxRanks = 256;
// The ranks of the job in progress, for terminate_launched_ranks (signal-safe: plain atomics).
std::array<std::atomic<pid_t>, kMaxRanks> g_pids{};

std::uint16_t free_loopback_port() {
  asio::io_context io;
  asio::ip::tcp::acceptor a(io, {asio::ip::make_address("127.0.0.1"), 0});
  return a.local_endpoint().port();
}

std::string fresh_token() {
  std::array<std::byte, 32> bytes{};
  random_bytes(bytes);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string t;
  for (const std::byte b : bytes) {
    t += kHex[std::to_integer<unsigned>(b) >> 4];
    t += kHex[std::to_integer<unsigned>(b) & 0xf];
  }
  return t;
}

// The job's variables replace any of the same name this process has; launcher variables of
// other conventions stay (TANDEM_RANK wins over them, launch_env.hpp).
std::vector<std::string> rank_env(const std::vector<std::string>& job) {
  std::vector<std::string> out;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string var = *e;
    const std::string name = var.substr(0, var.find('='));
    bool replaced = false;
    for (const std::string& j : job) replaced = replaced || j.substr(0, j.find('=')) == name;
    // A token file would clash with the job's token (setting both is an error).
    replaced = replaced || name == "TANDEM_JOB_TOKEN_FILE";
    if (!replaced) out.push_back(var);
  }
  out.insert(out.end(), job.begin(), job.end());
  return out;
}

struct Rank {
  pid_t pid = -1;
  int fd = -1;          // read end of its stdout+stderr
  std::string partial;  // a line not yet ended
  bool exited = false;
  int status = 0;
  bool overran = false;  // still running when the grace ended: the launcher signalled it
};

void terminate_all(std::vector<Rank>& ranks, int sig) {
  for (Rank& r : ranks) {
    if (r.pid > 0 && !r.exited) ::kill(r.pid, sig);
  }
}

// The grace after the first failure is over: the ranks still running are the launcher's to end.
void end_overrunning(std::vector<Rank>& ranks) {
  for (Rank& r : ranks) r.overran = r.pid > 0 && !r.exited;
  terminate_all(ranks, SIGTERM);
}

}  // namespace

std::string RankExit::describe() const {
  if (overran) {
    std::ostringstream grace;
    grace << static_cast<double>(overran->grace.count()) / 1000.0;
    std::string s = "rank " + std::to_string(rank) + " did not exit within the " + grace.str() +
                    " s grace after rank " + std::to_string(overran->failed_rank) +
                    " failed; tandem launch ";
    if (status == 128 + SIGKILL) return s + "killed it";
    if (status == 128 + SIGTERM) return s + "terminated it";
    if (status > 128) {
      return s + "terminated it, and it was killed by signal " + std::to_string(status - 128);
    }
    return s + "terminated it, and it exited with status " + std::to_string(status);
  }
  if (status > 128) {
    return "rank " + std::to_string(rank) + " was killed by signal " + std::to_string(status - 128);
  }
  return "rank " + std::to_string(rank) + " exited with status " + std::to_string(status);
}

bool LaunchResult::ok() const {
  for (const RankExit& r : ranks) {
    if (r.status != 0) return false;
  }
  return true;
}

void terminate_launched_ranks() {
  for (auto& p : g_pids) {
    const pid_t pid = p.load();
    if (pid > 0) ::kill(pid, SIGTERM);
  }
}

LaunchResult launch_local(const LaunchOptions& options, std::ostream& out) {
  const int n = options.processes;
  if (n < 1 || n > kMaxRanks) {
    throw std::invalid_argument("launch: -n must be 1-" + std::to_string(kMaxRanks) + ", got " +
                                std::to_string(n));
  }
  if (options.command.empty()) throw std::invalid_argument("launch: no command");
  const std::string master = "127.0.0.1:" + std::to_string(free_loopback_port());
  const std::string token = options.job_token.empty() ? fresh_token() : options.job_token;
  std::vector<Rank> ranks(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    int pipe_fds[2];
    if (::pipe2(pipe_fds, O_CLOEXEC) != 0) {
      terminate_all(ranks, SIGKILL);
      throw std::runtime_error(std::string("launch: pipe: ") + std::strerror(errno));
    }
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDOUT_FILENO);
    posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDERR_FILENO);
    std::vector<std::string> job = {"TANDEM_RANK=" + std::to_string(r),
                                    "TANDEM_WORLD_SIZE=" + std::to_string(n),
                                    "TANDEM_LOCAL_RANK=" + std::to_string(r),
                                    "TANDEM_MASTER=" + master, "TANDEM_JOB_TOKEN=" + token};
    job.insert(job.end(), options.env.begin(), options.env.end());
    const std::vector<std::string> env = rank_env(job);
    std::vector<char*> envp, argv;
    for (const std::string& e : env) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
    for (const std::string& a : options.command) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    pid_t pid = -1;
    // A program named without a '/' is looked up in PATH, as a shell would.
    const int rc = ::posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&actions);
    ::close(pipe_fds[1]);
    if (rc != 0) {
      ::close(pipe_fds[0]);
      terminate_all(ranks, SIGKILL);
      for (Rank& k : ranks) {
        if (k.pid > 0) ::waitpid(k.pid, nullptr, 0);
      }
      throw std::runtime_error("launch: cannot start rank " + std::to_string(r) + " (" +
                               options.command[0] + "): " + std::strerror(rc));
    }
    ranks[static_cast<size_t>(r)].pid = pid;
    ranks[static_cast<size_t>(r)].fd = pipe_fds[0];
    g_pids[static_cast<size_t>(r)].store(pid);
  }

  const auto emit = [&out](int r, const std::string& line) {
    out << "[rank " << r << "] " << line << '\n' << std::flush;
  };
  const auto drain = [&](int r, Rank& k) {
    char buf[4096];
    const ssize_t got = ::read(k.fd, buf, sizeof buf);
    if (got <= 0) {
      if (got < 0 && errno == EINTR) return;
      if (!k.partial.empty()) emit(r, k.partial);
      k.partial.clear();
      ::close(k.fd);
      k.fd = -1;
      return;
    }
    k.partial.append(buf, static_cast<size_t>(got));
    for (size_t nl; (nl = k.partial.find('\n')) != std::string::npos;) {
      emit(r, k.partial.substr(0, nl));
      k.partial.erase(0, nl + 1);
    }
  };

  using Clock = std::chrono::steady_clock;
  std::optional<Clock::time_point> first_failure;
  int first_failed = -1;
  bool terminated = false, killed = false;
  for (;;) {
    std::vector<pollfd> fds;
    std::vector<int> who;
    for (int r = 0; r < n; ++r) {
      if (ranks[static_cast<size_t>(r)].fd >= 0) {
        fds.push_back({ranks[static_cast<size_t>(r)].fd, POLLIN, 0});
        who.push_back(r);
      }
    }
    bool all_exited = true;
    for (int r = 0; r < n; ++r) {
      Rank& k = ranks[static_cast<size_t>(r)];
      if (k.exited) continue;
      int status = 0;
      if (::waitpid(k.pid, &status, WNOHANG) == k.pid) {
        k.exited = true;
        g_pids[static_cast<size_t>(r)].store(0);
        k.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        if (k.status != 0 && !first_failure && (!options.elastic || r == 0)) {
          first_failure = Clock::now();
          first_failed = r;
        }
      } else {
        all_exited = false;
      }
    }
    if (all_exited && fds.empty()) break;
    if (first_failure && !all_exited) {
      const auto since = Clock::now() - *first_failure;
      if (!terminated && since > options.grace) {
        end_overrunning(ranks);
        terminated = true;
      } else if (!killed && since > options.grace + std::chrono::seconds(5)) {
        terminate_all(ranks, SIGKILL);
        killed = true;
      }
    }
    if (fds.empty()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    const int ready = ::poll(fds.data(), fds.size(), 50);
    if (ready <= 0) continue;
    for (size_t i = 0; i < fds.size(); ++i) {
      if ((fds[i].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
        drain(who[i], ranks[static_cast<size_t>(who[i])]);
      }
    }
  }
  LaunchResult result;
  for (int r = 0; r < n; ++r) {
    const Rank& k = ranks[static_cast<size_t>(r)];
    RankExit exit{r, k.status, std::nullopt};
    if (k.overran) exit.overran = RankExit::Overrun{first_failed, options.grace};
    result.ranks.push_back(exit);
  }
  return result;
}

}  // namespace tandem::apps

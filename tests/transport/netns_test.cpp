// Three "hosts" made of network namespaces: tdm<pid>a, b and c, each with a veth whose other end
// is a port of a bridge in a fourth namespace, tdm<pid>s, and an address in 10.213.7.0/24 (on
// those veths only: the namespaces see nothing else, so no other address can be a target). One
// rank of a 3-stage pipeline runs in each namespace (`ip netns exec`, UCX_TLS=tcp so that UCX
// could not fall back on shared memory) and the ranks reach each other only over the bridge;
// the losses and every weight must equal the in-process run.
//
// Creating namespaces needs CAP_SYS_ADMIN: without it (or without `ip`) the test skips, saying
// why. The namespaces are deleted when the test ends, however it ends; namespaces with the
// prefix left by a test process that died are deleted before new ones are made.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <ostream>
#include <string>
#include <vector>

#include "rank_processes.hpp"

namespace tandem::transport {
namespace {

using namespace std::chrono_literals;
namespace tt = tandem::transport::testing;

constexpr const char* kPrefix = "tdm";
constexpr const char* kSubnet = "10.213.7.";  // .1, .2, .3: the hosts a, b, c

// Runs `ip ARGS...` to its end; its stderr in `err`. The exit status, or -1 when `ip` could
// not start.
int ip(const std::vector<std::string>& args, const std::filesystem::path& scratch,
       std::string* err = nullptr) {
  std::vector<std::string> argv = {"ip"};
  argv.insert(argv.end(), args.begin(), args.end());
  const auto err_file = scratch / "ip.err";
  tt::ProcessGroup group;
  if (group.start(argv, err_file) != 0) return -1;
  const int status = group.wait(0, tt::Clock::now() + 30s);
  if (err != nullptr) *err = tt::read_text(err_file);
  return status;
}

// Deletes the namespaces tdm<pid>{a,b,c,s} whose process is gone: a test that was killed.
void delete_leftovers(const std::filesystem::path& scratch) {
  std::vector<std::string> gone;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/run/netns", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(kPrefix, 0) != 0) continue;
    std::size_t i = std::string(kPrefix).size();
    std::size_t j = i;
    while (j < name.size() && std::isdigit(static_cast<unsigned char>(name[j]))) ++j;
    // Exactly this test's names: the prefix, a pid, one of the letters Hosts uses.
    if (j == i || j - i > 9 || j + 1 != name.size() ||
        std::string("abcs").find(name[j]) == std::string::npos)
      continue;
    const auto pid = static_cast<pid_t>(std::stol(name.substr(i, j - i)));
    if (kill(pid, 0) == 0 || errno != ESRCH) continue;
    gone.push_back(name);
  }
  for (const std::string& name : gone) ip({"netns", "del", name}, scratch);
}

// The four namespaces and their links; deletes what it made, however the test ends.
class Hosts {
 public:
  explicit Hosts(std::filesystem::path scratch)
      : scratch_(std::move(scratch)), base_(kPrefix + std::to_string(getpid())) {}
  ~Hosts() {
    // Deleting a namespace deletes its veth ends, and with them their peers.
    for (auto it = made_.rbegin(); it != made_.rend(); ++it) ip({"netns", "del", *it}, scratch_);
  }
  Hosts(const Hosts&) = delete;
  Hosts& operator=(const Hosts&) = delete;

  std::string name(char host) const { return base_ + host; }
  static std::string address(int rank) { return kSubnet + std::to_string(rank + 1); }

  // Empty when all went well, else the first failure: "ip ARGS: stderr".
  std::string add_namespace(char host) {
    const std::string n = name(host);
    std::string err;
    const int status = ip({"netns", "add", n}, scratch_, &err);
    if (status == -1) return "cannot run ip (iproute2)";
    if (status != 0) return "ip netns add " + n + ": " + err;
    made_.push_back(n);
    return run({"-n", n, "link", "set", "lo", "up"});
  }

  // After add_namespace('s'): the bridge in namespace s and hosts a, b, c on it.
  std::string build() {
    for (char h : {'a', 'b', 'c'}) {
      if (std::string e = add_namespace(h); !e.empty()) return e;
    }
    const std::string s = name('s');
    std::vector<std::vector<std::string>> steps = {
        {"-n", s, "link", "add", "br0", "type", "bridge"},
        {"-n", s, "link", "set", "br0", "up"},
    };
    for (int rank = 0; rank < 3; ++rank) {
      const char h = static_cast<char>('a' + rank);
      const std::string port = std::string("p") + h;
      steps.push_back(
          {"-n", s, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", name(h)});
      steps.push_back({"-n", s, "link", "set", port, "master", "br0"});
      steps.push_back({"-n", s, "link", "set", port, "up"});
      steps.push_back({"-n", name(h), "addr", "add", address(rank) + "/24", "dev", "eth0"});
      steps.push_back({"-n", name(h), "link", "set", "eth0", "up"});
    }
    for (const auto& step : steps) {
      if (std::string e = run(step); !e.empty()) return e;
    }
    return {};
  }

 private:
  std::string run(const std::vector<std::string>& args) {
    std::string err;
    if (ip(args, scratch_, &err) == 0) return {};
    std::string cmd = "ip";
    for (const std::string& a : args) cmd += " " + a;
    return cmd + ": " + err;
  }

  std::filesystem::path scratch_;
  std::string base_;
  std::vector<std::string> made_;
};

struct HostsCase {
  const char* channel;
  const char* name;
};

std::ostream& operator<<(std::ostream& os, const HostsCase& c) {
  return os << c.channel << "_" << c.name;
}

class ThreeHosts : public ::testing::TestWithParam<HostsCase> {};

TEST_P(ThreeHosts, TrainExactlyAsOneProcess) {
  const std::string channel = GetParam().channel;
  const std::string name = GetParam().name;
  tt::ScratchDir dir;
  delete_leftovers(dir.path());
  Hosts hosts(dir.path());
  if (std::string e = hosts.add_namespace('s'); !e.empty()) {
    GTEST_SKIP() << "cannot create network namespaces (needs root, CAP_SYS_ADMIN, and iproute2): "
                 << e;
  }
  const std::string failed = hosts.build();
  ASSERT_TRUE(failed.empty()) << failed;

  const tt::InProcessRun want = tt::run_in_process(name);
  const std::string master = Hosts::address(0) + ":29500";  // a port of host a's own stack
  tt::ProcessGroup ranks;
  for (int rank = 0; rank < 3; ++rank) {
    std::vector<std::string> args = {"ip", "netns", "exec",
                                     hosts.name(static_cast<char>('a' + rank))};
    for (std::string a : tt::rank_args(rank, 3, master, channel, name, dir.path())) {
      args.push_back(std::move(a));
    }
    args.insert(args.end(), {"--listen", Hosts::address(rank)});
    const int child =
        ranks.start(args, dir.path() / ("rank-" + std::to_string(rank) + ".err"), {"UCX_TLS=tcp"});
    ASSERT_EQ(child, rank) << "cannot start ip netns exec";
  }
  const auto deadline = tt::Clock::now() + 60s;
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_EQ(ranks.wait(rank, deadline), 0)
        << "rank " << rank << " in " << hosts.name(static_cast<char>('a' + rank))
        << " (-1: killed at the deadline); its stderr:\n"
        << ranks.stderr_text(rank);
  }
  tt::expect_ranks_wrote(dir.path(), 3, want);
}

INSTANTIATE_TEST_SUITE_P(
    Channels, ThreeHosts,
    ::testing::Values(HostsCase{"tcp", "mlp3_1f1b"}, HostsCase{"tcp", "mlp3_pipedream"},
                      HostsCase{"ucx", "mlp3_1f1b"}, HostsCase{"ucx", "mlp3_pipedream"}),
    [](const auto& test) { return std::string(test.param.channel) + "_" + test.param.name; });

}  // namespace
}  // namespace tandem::transport

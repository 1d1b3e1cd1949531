// A pipeline spread over two real processes (tandem_pipeline_rank), joined by the rendezvous
// and the tcp data plane over 127.0.0.1: the losses and every weight equal the in-process run
// bit for bit. A process that does not finish within a minute is killed and the test fails.
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "../apps/temp_dir.hpp"
#include "models/safetensors.hpp"
#include "runtime/scheduler.hpp"
#include "split_pipeline_case.hpp"

extern char** environ;

namespace tandem::transport {
namespace {

using namespace std::chrono_literals;
namespace tt = tandem::transport::testing;

std::uint16_t free_port() {
  asio::io_context io;
  asio::ip::tcp::acceptor a(io, {asio::ip::make_address("127.0.0.1"), 0});
  return a.local_endpoint().port();
}

pid_t spawn(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = -1;
  if (posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ) != 0) return -1;
  return pid;
}

// The exit status of `pid`, or -1 after killing it when `deadline` passed first.
int wait_for(pid_t pid, std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    int status = 0;
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (r < 0) return -2;
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(20ms);
  }
}

class TwoProcesses : public ::testing::TestWithParam<const char*> {};

TEST_P(TwoProcesses, TrainExactlyAsOneProcess) {
  const std::string name = GetParam();
  const models::Model model = tt::split_case_model(name);
  actors::Pipeline local(tt::split_case_spec(name, model), make_work_sharing({}));
  const actors::PipelineResult expected = local.run();

  apps::testing::TempDir dir;
  const std::string port = std::to_string(free_port());
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  pid_t pids[2];
  for (int rank = 0; rank < 2; ++rank) {
    pids[rank] =
        spawn({TANDEM_PIPELINE_RANK_EXE, std::to_string(rank), port, name, dir.path().string()});
    ASSERT_GT(pids[rank], 0) << "cannot start " << TANDEM_PIPELINE_RANK_EXE;
  }
  EXPECT_EQ(wait_for(pids[0], deadline), 0) << "rank 0 (its stderr is above)";
  EXPECT_EQ(wait_for(pids[1], deadline), 0) << "rank 1 (its stderr is above)";

  std::ifstream in(dir.path() / "losses.txt");
  std::vector<double> losses;
  for (std::string line; std::getline(in, line);)
    losses.push_back(std::strtod(line.c_str(), nullptr));
  EXPECT_EQ(losses, expected.losses);
  models::ParamSet got = models::read_safetensors(dir.path() / "rank-0.safetensors").tensors;
  got.merge(models::read_safetensors(dir.path() / "rank-1.safetensors").tensors);
  const models::ParamSet want = local.params();
  ASSERT_EQ(got.size(), want.size());
  for (std::int64_t i = 0; i < want.size(); ++i) {
    ASSERT_TRUE(got.contains(want.name(i))) << want.name(i);
    EXPECT_EQ(got.at(want.name(i)).to_float_vector(), want[i].to_float_vector()) << want.name(i);
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, TwoProcesses,
                         ::testing::Values("mlp_1f1b", "mlp_pipedream", "gpt_1f1b"));

}  // namespace
}  // namespace tandem::transport

// A pipeline spread over 2 and 4 real processes (tandem_pipeline_rank), joined by the rendezvous
// and a data-plane channel (tcp over 127.0.0.1, or ucx): the losses and every weight equal the
// in-process run bit for bit, for 1F1B (flushes) and PipeDream (weight versions that must follow
// the same rules when the stages live in different processes). A process that does not finish
// within a minute is killed and the test fails.
#include <gtest/gtest.h>

#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <chrono>
#include <ostream>
#include <sstream>
#include <string>

#include "rank_processes.hpp"

namespace tandem::transport {
namespace {

using namespace std::chrono_literals;
namespace tt = tandem::transport::testing;

std::uint16_t free_port() {
  asio::io_context io;
  asio::ip::tcp::acceptor a(io, {asio::ip::make_address("127.0.0.1"), 0});
  return a.local_endpoint().port();
}

struct Spread {
  const char* channel;
  const char* name;
  int world;
};

std::ostream& operator<<(std::ostream& os, const Spread& s) {
  return os << s.channel << "_" << s.name << "_on_" << s.world;
}

class Processes : public ::testing::TestWithParam<Spread> {};

TEST_P(Processes, TrainExactlyAsOneProcess) {
  const Spread& s = GetParam();
  const tt::InProcessRun want = tt::run_in_process(s.name);

  tt::ScratchDir dir;
  // free_port() closes the port it found: another test may take it before rank 0 listens
  // there (seen under ctest -j2), which rank 0 reports at once; then the job starts again on
  // another port.
  for (int attempt = 1;; ++attempt) {
    const std::string master = "127.0.0.1:" + std::to_string(free_port());
    tt::ProcessGroup ranks;
    for (int rank = 0; rank < s.world; ++rank) {
      const int child =
          ranks.start(tt::rank_args(rank, s.world, master, s.channel, s.name, dir.path()),
                      dir.path() / ("rank-" + std::to_string(rank) + ".err"));
      ASSERT_EQ(child, rank) << "cannot start " << TANDEM_PIPELINE_RANK_EXE;
    }
    const auto deadline = tt::Clock::now() + 60s;
    const int first = ranks.wait(0, deadline);
    if (first != 0 && attempt < 3 &&
        ranks.stderr_text(0).find("Address already in use") != std::string::npos) {
      continue;  // the others are killed with `ranks`
    }
    EXPECT_EQ(first, 0) << "rank 0 (-1: killed at the deadline); its stderr:\n"
                        << ranks.stderr_text(0);
    for (int rank = 1; rank < s.world; ++rank) {
      EXPECT_EQ(ranks.wait(rank, deadline), 0)
          << "rank " << rank << " (-1: killed at the deadline); its stderr:\n"
          << ranks.stderr_text(rank);
    }
    break;
  }
  tt::expect_ranks_wrote(dir.path(), s.world, want);
}

std::string spread_name(const ::testing::TestParamInfo<Spread>& test) {
  std::ostringstream s;
  s << test.param;
  return s.str();
}

INSTANTIATE_TEST_SUITE_P(
    Tcp, Processes,
    ::testing::Values(Spread{"tcp", "mlp_1f1b", 2}, Spread{"tcp", "mlp_pipedream", 2},
                      Spread{"tcp", "gpt_1f1b", 2}, Spread{"tcp", "mlp_1f1b", 4},
                      Spread{"tcp", "mlp_pipedream", 4}, Spread{"tcp", "gpt_pipedream", 4}),
    spread_name);

// UCX as it picks its transports on one host: shared memory.
INSTANTIATE_TEST_SUITE_P(Ucx, Processes,
                         ::testing::Values(Spread{"ucx", "mlp_1f1b", 2},
                                           Spread{"ucx", "gpt_1f1b", 2},
                                           Spread{"ucx", "mlp_1f1b", 4},
                                           Spread{"ucx", "mlp_pipedream", 4},
                                           Spread{"ucx", "gpt_pipedream", 4}),
                         spread_name);

}  // namespace
}  // namespace tandem::transport

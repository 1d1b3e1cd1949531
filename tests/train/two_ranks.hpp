#pragma once
// Ranks 0 and 1 of a job whose processes are threads of this process, on one control plane over
// 127.0.0.1: for the tests of what ranks exchange (evaluations, the agreement on the job).
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <thread>

#include "train/process_group.hpp"

namespace tandem::train::testing {

inline std::uint16_t free_port() {
  asio::io_context io;
  asio::ip::tcp::acceptor a(io, {asio::ip::make_address("127.0.0.1"), 0});
  return a.local_endpoint().port();
}

struct TwoRanks {
  std::unique_ptr<ProcessGroup> zero, one;

  // `heartbeat_timeout`: the silence after which a rank counts as lost.
  explicit TwoRanks(std::chrono::milliseconds heartbeat_timeout = std::chrono::seconds(3)) {
    const std::uint16_t port = free_port();
    const auto options = [&](int rank) {
      ProcessGroupOptions o;
      o.env.rank = rank;
      o.env.world_size = 2;
      o.env.master_host = "127.0.0.1";
      o.env.master_port = port;
      o.host = "127.0.0.1";
      o.heartbeat_timeout = heartbeat_timeout;
      return o;
    };
    std::thread joining([&] { one = std::make_unique<ProcessGroup>(options(1)); });
    zero = std::make_unique<ProcessGroup>(options(0));
    joining.join();
  }
  // A rank reset without shutdown() is gone already (what a kill looks like).
  ~TwoRanks() {
    if (one) one->shutdown();
    zero->shutdown();
  }
  TwoRanks(const TwoRanks&) = delete;
  TwoRanks& operator=(const TwoRanks&) = delete;
};

}  // namespace tandem::train::testing

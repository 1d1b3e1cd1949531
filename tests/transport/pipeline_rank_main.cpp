// One rank of a pipeline spread over two processes, for tests/transport/multi_process_test.cpp:
//   tandem_pipeline_rank RANK MASTER_PORT CASE OUT_DIR
// Builds its half of the case's pipeline (PipelineSpec::hosts) with a TcpChannel, registers the
// channel's port with the rendezvous (rank 0 listens on MASTER_PORT), connects to the other
// rank's channel, trains, and writes its stages' weights (OUT_DIR/rank-R.safetensors) and, on
// rank 0, the losses (OUT_DIR/losses.txt, hex floats). Exit status 0 only if all went well.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>

#include "models/safetensors.hpp"
#include "runtime/scheduler.hpp"
#include "split_pipeline_case.hpp"
#include "transport/rendezvous.hpp"
#include "transport/tcp_channel.hpp"

int main(int argc, char** argv) {
  using namespace tandem;
  using namespace tandem::transport;
  using namespace std::chrono_literals;
  namespace tt = tandem::transport::testing;
  if (argc != 5) {
    std::fprintf(stderr, "usage: tandem_pipeline_rank RANK MASTER_PORT CASE OUT_DIR\n");
    return 2;
  }
  const int rank = std::atoi(argv[1]);
  const auto master_port = static_cast<std::uint16_t>(std::atoi(argv[2]));
  const std::string name = argv[3];
  const std::filesystem::path out = argv[4];
  try {
    const models::Model model = tt::split_case_model(name);
    actors::PipelineSpec spec = tt::split_case_spec(name, model);
    spec.hosts = [rank](Endpoint e) { return tt::split_rank_of(e) == rank; };
    TcpChannel* channel = nullptr;
    spec.make_channel = [&](ActorSystem& system) {
      TcpChannelOptions o;
      o.job = 0x5eed;
      o.rank = rank;
      o.types = tt::pipeline_wire_types();
      o.on_error = [rank](const TcpChannelError& e) {
        std::fprintf(stderr, "rank %d: channel: %s: %s\n", rank, e.peer.c_str(), e.what.c_str());
      };
      auto ch = std::make_unique<TcpChannel>(system, std::move(o));
      channel = ch.get();
      return ch;
    };
    auto pipeline = std::make_unique<actors::Pipeline>(std::move(spec), make_work_sharing({}));

    RendezvousOptions ro;
    ro.rank = rank;
    ro.world_size = 2;
    ro.master_host = "127.0.0.1";
    ro.master_port = master_port;
    ro.host_name = "127.0.0.1";
    ro.job_token = "multi-process-test";
    const std::uint16_t port = channel->port();
    ro.blob = {std::byte(port & 0xff), std::byte(port >> 8)};
    Rendezvous rendezvous(ro);
    for (const PeerInfo& peer : rendezvous.join(30s)) {
      if (static_cast<int>(peer.rank) == rank) continue;
      if (peer.blob.size() != 2) throw std::runtime_error("a peer's blob is not a port");
      const auto peer_port = static_cast<std::uint16_t>(
          std::to_integer<unsigned>(peer.blob[0]) | std::to_integer<unsigned>(peer.blob[1]) << 8);
      channel->add_peer({static_cast<int>(peer.rank), peer.host, peer_port});
    }
    for (Endpoint e = 0; e < tt::kSplitEndpoints; ++e) {
      if (tt::split_rank_of(e) != rank) channel->route(e, tt::split_rank_of(e));
    }
    channel->start();
    const actors::PipelineResult result = pipeline->run();
    models::write_safetensors(out / ("rank-" + std::to_string(rank) + ".safetensors"),
                              pipeline->params());
    if (rank == 0) {
      std::ofstream losses(out / "losses.txt");
      for (double l : result.losses) {
        char buf[64];
        std::snprintf(buf, sizeof buf, "%a\n", l);
        losses << buf;
      }
      if (!losses) throw std::runtime_error("cannot write the losses");
    }
    // Neither closes its channel while the other may still read from it.
    rendezvous.barrier("trained", 30s);
    pipeline.reset();
    rendezvous.shutdown();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
    return 1;
  }
}

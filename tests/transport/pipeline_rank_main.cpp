// One rank of a pipeline spread over N processes, for the tests that start real processes
// (multi_process_test.cpp, netns_test.cpp, lost_rank_test.cpp):
//   tandem_pipeline_rank --rank R --world N --master HOST:PORT --channel tcp|ucx --case NAME
//                        --out DIR [--listen ADDR] [--host-name NAME] [--progress-at B]
// Builds its part of the case's pipeline (PipelineSpec::hosts, split_rank_of) with a data-plane
// channel of the given kind, publishes how to reach it in its rendezvous blob (tcp: the port and
// ADDR, where it listens, default 127.0.0.1; ucx: the worker's address; UCX_TLS picks UCX's
// transports), joins the rendezvous (rank 0's control plane listens on the master address),
// connects to every other rank's channel, trains, and writes its stages' weights
// (DIR/rank-R.safetensors) and, on rank 0, the losses (DIR/losses.txt, hex floats). NAME
// (default: ADDR) is how the other ranks name this one. With --progress-at, rank 0 prints
// "progress B" on stdout once minibatch B's loss is in, so a test knows the run is under way.
//
// A lost peer (the rendezvous's heartbeats or a failed data-plane connection) ends the run
// through Pipeline::stop_with_error with a message naming the lost rank and its host, printed on
// stderr. Exit status 0 only if all went well.

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>

#include "models/safetensors.hpp"
#include "runtime/log.hpp"
#include "runtime/scheduler.hpp"
#include "split_pipeline_case.hpp"
#include "transport/rendezvous.hpp"
#include "transport/tcp_channel.hpp"
#include "transport/ucx_channel.hpp"

namespace {

using namespace tandem;
using namespace tandem::transport;
using namespace std::chrono_literals;
namespace tt = tandem::transport::testing;

struct Args {
  int rank = -1;
  int world = 0;
  std::string master_host;
  std::uint16_t master_port = 0;
  std::string channel;
  std::string case_name;
  std::filesystem::path out;
  std::string listen = "127.0.0.1";
  std::string host_name;
  long long progress_at = -1;
};

int to_int(const std::string& flag, const std::string& value) {
  std::size_t used = 0;
  const int v = std::stoi(value, &used);
  if (used != value.size()) throw std::invalid_argument(flag + ": '" + value + "' is no number");
  return v;
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) throw std::invalid_argument(flag + " needs a value");
    const std::string v = argv[i + 1];
    if (flag == "--rank") {
      a.rank = to_int(flag, v);
    } else if (flag == "--world") {
      a.world = to_int(flag, v);
    } else if (flag == "--master") {
      const auto colon = v.rfind(':');
      if (colon == std::string::npos) throw std::invalid_argument("--master wants HOST:PORT");
      a.master_host = v.substr(0, colon);
      a.master_port = static_cast<std::uint16_t>(to_int(flag, v.substr(colon + 1)));
    } else if (flag == "--channel") {
      a.channel = v;
    } else if (flag == "--case") {
      a.case_name = v;
    } else if (flag == "--out") {
      a.out = v;
    } else if (flag == "--listen") {
      a.listen = v;
    } else if (flag == "--host-name") {
      a.host_name = v;
    } else if (flag == "--progress-at") {
      a.progress_at = to_int(flag, v);
    } else {
      throw std::invalid_argument("unknown flag " + flag);
    }
  }
  if (a.rank < 0 || a.world < 1 || a.rank >= a.world || a.master_host.empty() ||
      a.case_name.empty() || a.out.empty()) {
    throw std::invalid_argument(
        "usage: tandem_pipeline_rank --rank R --world N --master HOST:PORT --channel tcp|ucx "
        "--case NAME --out DIR [--listen ADDR] [--host-name NAME] [--progress-at B]");
  }
  if (a.channel != "tcp" && a.channel != "ucx") {
    throw std::invalid_argument("unknown channel kind '" + a.channel + "' (tcp or ucx)");
  }
  if (a.host_name.empty()) a.host_name = a.listen;
  return a;
}

// Ends the run from the rendezvous's and the channel's threads, naming the lost rank by the
// host name it registered with (the rendezvous table, filled once join() returned).
class LostPeers {
 public:
  explicit LostPeers(int rank) : rank_(rank) {}

  void set_pipeline(actors::Pipeline* p) { pipeline_.store(p); }
  void set_hosts(const std::vector<PeerInfo>& peers) {
    std::lock_guard lock(mu_);
    for (const PeerInfo& p : peers) hosts_[static_cast<int>(p.rank)] = p.host;
  }

  // Whether a peer was reported lost.
  bool any() const { return any_.load(); }

  void lost(int peer, const std::string& host, const std::string& how) {
    any_.store(true);
    const std::string why =
        "lost rank " + std::to_string(peer) + " on host " + host_of(peer, host) + ": " + how;
    std::fprintf(stderr, "rank %d: %s\n", rank_, why.c_str());
    if (actors::Pipeline* p = pipeline_.load()) p->stop_with_error(why);
  }

 private:
  std::string host_of(int peer, const std::string& fallback) {
    std::lock_guard lock(mu_);
    const auto it = hosts_.find(peer);
    return it != hosts_.end() ? it->second : fallback;
  }

  const int rank_;
  std::atomic<actors::Pipeline*> pipeline_{nullptr};
  std::atomic<bool> any_{false};
  std::mutex mu_;
  std::map<int, std::string> hosts_;
};

// The data-plane channel of the chosen kind: made by the pipeline (make()), then told where
// the peers are from their rendezvous blobs. Its failures end the run through `lost`.
class DataPlane {
 public:
  DataPlane(const Args& a, LostPeers& lost) : a_(a), lost_(lost) {}

  std::unique_ptr<ActorChannel> make(ActorSystem& system) {
    if (a_.channel == "tcp") {
      TcpChannelOptions o;
      o.credentials = tt::fixed_credentials(kJob);
      o.rank = a_.rank;
      o.listen_host = a_.listen;
      o.types = tt::pipeline_wire_types();
      // The pipeline's stop_with_error() stops the system, with the reason run() throws.
      o.stop_system_on_error = false;
      o.on_error = [this](const ChannelError& e) { failed(e.peer_rank, e.peer, e.what); };
      auto ch = std::make_unique<TcpChannel>(system, std::move(o));
      tcp_ = ch.get();
      return ch;
    }
    UcxChannelOptions o;
    o.credentials = tt::fixed_credentials(kJob);
    o.rank = a_.rank;
    o.types = tt::pipeline_wire_types();
    o.stop_system_on_error = false;
    // A refusal that failed nothing (a proof in a peer's name that did not check) is a
    // stranger's.
    o.on_error = [this](const ChannelError& e) {
      failed(e.fatal ? e.peer_rank : -1, e.peer, e.what);
    };
    auto ch = std::make_unique<UcxChannel>(system, std::move(o));
    ucx_ = ch.get();
    return ch;
  }

  // Where peers reach this channel: for tcp the port (2 bytes, little endian) and the host to
  // connect to; for ucx the worker's address.
  std::vector<std::byte> blob() const {
    if (ucx_ != nullptr) return ucx_->worker_address();
    const std::uint16_t port = tcp_->port();
    std::vector<std::byte> b = {std::byte(port & 0xff), std::byte(port >> 8)};
    for (char c : a_.listen) b.push_back(static_cast<std::byte>(c));
    return b;
  }

  void add_peer(const PeerInfo& peer) {
    const int rank = static_cast<int>(peer.rank);
    if (ucx_ != nullptr) {
      ucx_->add_peer({rank, peer.host, peer.blob});
      return;
    }
    if (peer.blob.size() < 3) {
      throw std::runtime_error("rank " + std::to_string(rank) + " (" + peer.host +
                               ") published no tcp address (" + std::to_string(peer.blob.size()) +
                               " bytes)");
    }
    TcpPeer p;
    p.rank = rank;
    p.port = static_cast<std::uint16_t>(std::to_integer<unsigned>(peer.blob[0]) |
                                        std::to_integer<unsigned>(peer.blob[1]) << 8);
    for (std::size_t i = 2; i < peer.blob.size(); ++i) {
      p.host.push_back(static_cast<char>(std::to_integer<unsigned char>(peer.blob[i])));
    }
    tcp_->add_peer(std::move(p));
  }

  void route(Endpoint e, int rank) {
    if (ucx_ != nullptr) {
      ucx_->route(e, rank);
    } else {
      tcp_->route(e, rank);
    }
  }

  void start() {
    if (ucx_ != nullptr) {
      ucx_->start();
    } else {
      tcp_->start();
    }
  }

  // Joins the channel's thread: no failure is reported afterwards.
  void close() {
    if (ucx_ != nullptr) ucx_->close(2s);
    if (tcp_ != nullptr) tcp_->close(2s);
  }

 private:
  static constexpr std::uint64_t kJob = 0x5eed;

  void failed(int peer_rank, const std::string& peer, const std::string& what) {
    if (peer_rank < 0) {
      // A stranger or an unattributable message: reported, the run goes on.
      std::fprintf(stderr, "rank %d: %s data plane: %s: %s\n", a_.rank, a_.channel.c_str(),
                   peer.c_str(), what.c_str());
      return;
    }
    lost_.lost(peer_rank, peer, a_.channel + " data plane: " + peer + ": " + what);
  }

  const Args& a_;
  LostPeers& lost_;
  TcpChannel* tcp_ = nullptr;
  UcxChannel* ucx_ = nullptr;
};

int run_rank(const Args& a) {
  const models::Model model = tt::split_case_model(a.case_name);
  const int stages = tt::split_case(a.case_name).stages;
  if (a.world > stages) {
    throw std::invalid_argument(std::to_string(a.world) + " ranks for " + std::to_string(stages) +
                                " stages");
  }
  LostPeers lost(a.rank);
  actors::PipelineSpec spec = tt::split_case_spec(a.case_name, model);
  spec.hosts = [&a, stages](Endpoint e) { return tt::split_rank_of(e, stages, a.world) == a.rank; };
  if (a.rank == 0 && a.progress_at >= 0) {
    spec.on_minibatch = [at = a.progress_at](std::int64_t b,
                                             const tandem::actors::MinibatchReport&) {
      if (b != at) return;
      std::printf("progress %lld\n", static_cast<long long>(b));
      std::fflush(stdout);
    };
  }
  DataPlane channel(a, lost);
  spec.make_channel = [&channel](ActorSystem& system) { return channel.make(system); };
  auto pipeline = std::make_unique<actors::Pipeline>(std::move(spec), make_work_sharing({}));
  lost.set_pipeline(pipeline.get());
  // Before the pipeline goes, however this function ends: no more stop_with_error() on it, and the
  // channel's thread (which may be inside one) joined, since ~Pipeline destroys what
  // stop_with_error() locks before the channel.
  struct Detach {
    LostPeers& lost;
    DataPlane& channel;
    ~Detach() {
      lost.set_pipeline(nullptr);
      channel.close();
    }
  } detach{lost, channel};

  RendezvousOptions ro;
  ro.rank = a.rank;
  ro.world_size = a.world;
  ro.master_host = a.master_host;
  ro.master_port = a.master_port;
  ro.host_name = a.host_name;
  ro.job_token = "multi-process-test";
  ro.blob = channel.blob();
  ro.on_lost = [&lost](const LostRank& r) { lost.lost(r.rank, r.host, "rendezvous: " + r.reason); };
  Rendezvous rendezvous(ro);
  const std::vector<PeerInfo>& peers = rendezvous.join(30s);
  lost.set_hosts(peers);
  for (const PeerInfo& peer : peers) {
    if (static_cast<int>(peer.rank) != a.rank) channel.add_peer(peer);
  }
  for (Endpoint e = 0; e < tt::split_endpoints(a.case_name); ++e) {
    const int owner = tt::split_rank_of(e, stages, a.world);
    if (owner != a.rank) channel.route(e, owner);
  }
  try {
    channel.start();
    const actors::PipelineResult result = pipeline->run();
    models::write_safetensors(a.out / ("rank-" + std::to_string(a.rank) + ".safetensors"),
                              pipeline->params());
    if (a.rank == 0) {
      std::ofstream losses(a.out / "losses.txt");
      for (double l : result.losses) {
        char buf[64];
        std::snprintf(buf, sizeof buf, "%a\n", l);
        losses << buf;
      }
      if (!losses) throw std::runtime_error("cannot write the losses");
    }
    // No rank closes its channel while another may still read from it.
    rendezvous.barrier("trained", 30s);
  } catch (...) {
    // A rank that ends because it lost a peer leaves in order, so that the others name the
    // rank that was lost, not this one (they learn of the loss themselves, or from rank 0).
    // Any other failure leaves abruptly: the others must see this rank as lost.
    if (lost.any()) rendezvous.shutdown(5s);
    throw;
  }
  rendezvous.shutdown();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // The library's logger is made on first use; the channel's and the rendezvous's threads may
  // both log first when a peer is lost. Made here, before any thread starts.
  (void)tandem::log::logger();
  int rank = -1;
  try {
    const Args a = parse(argc, argv);
    rank = a.rank;
    return run_rank(a);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
    return 1;
  }
}

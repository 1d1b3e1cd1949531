// Tensor transfer between two processes through the data plane a pipeline uses: an actor of
// one process's ActorSystem sends a message carrying one f32 tensor through a channel, an actor
// of the other process receives it (a freshly allocated tensor, as a stage does). Two figures
// per size, to set beside ucx_perftest's tag_bw and tag_lat on the same machine (scripts/
// bench-transport runs both and prints the ratios):
//   bandwidth: one-way streaming with at most `window` messages in flight; the receiver
//              returns credit every window/2 messages and at the end; the time runs from the
//              first send to the final acknowledgement.
//   latency:   ping-pong, the receiver sending the tensor it received straight back; reported
//              one way (half the round trip), as ucx_perftest reports tag_lat.
// Without --rank the bench is rank 0 and starts itself as rank 1; the two meet through a
// Rendezvous on 127.0.0.1, whose blob carries each side's channel address.
//   usage: bench_transport [--channel tcp|ucx] [--sizes 65536,1048576,16777216] [--reps 3]
//                          [--window 32] [--bw-mib 1024] [--lat-mib 256] [--workers 1]
//                          [--tcp-lanes 2] [--host ADDR --peer-host ADDR --peer-netns NS]
// --peer-netns starts rank 1 with `ip netns exec NS` (across a veth pair).
#include <fmt/format.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "runtime/actor_system.hpp"
#include "runtime/scheduler.hpp"
#include "transport/rendezvous.hpp"
#include "transport/tcp_channel.hpp"
#if TANDEM_BENCH_UCX
#include "transport/ucx_channel.hpp"
#endif

extern char** environ;

namespace tandem::bench {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using transport::Endpoint;

constexpr std::uint64_t kJob = 0x7b3e1c5a;

// Both ranks derive the same credentials alone: a job nonce whose job id is kJob, no token.
transport::JobCredentials bench_credentials() {
  transport::JobCredentials c;
  for (std::size_t i = 0; i < 8; ++i) c.job[i] = static_cast<std::uint8_t>(kJob >> (8 * i));
  return c;
}
constexpr Endpoint kDriver = 0;  // rank 0's actor
constexpr Endpoint kPeer = 1;    // rank 1's actor
constexpr auto kSetupTimeout = 60s;
// One measurement (a window's worth of 16 MiB messages on a slow link included) ends well
// within this; past it the bench reports the stall instead of hanging.
constexpr auto kRoundTimeout = 300s;
#if TANDEM_BENCH_UCX
constexpr bool kHaveUcx = true;
#else
constexpr bool kHaveUcx = false;
#endif

enum class Mode : std::uint16_t { stream = 0, echo = 1 };

struct Chunk {
  static constexpr std::string_view kName = "bench.transport.chunk";
  static constexpr Lane kLane = Lane::forward;
  std::uint64_t seq;
  std::uint32_t total;  // messages in this measurement
  Mode mode;
  std::uint16_t ack_every;  // stream: credit after this many messages
};
struct Ack {
  static constexpr std::string_view kName = "bench.transport.ack";
  std::uint64_t received;
};
// Rank 0's main thread starts a measurement through its local actor.
struct Go {
  static constexpr std::string_view kName = "bench.transport.go";
  std::uint32_t unused;
};

transport::WireTypes wire_types() {
  transport::WireTypes t;
  t.add<Chunk>().add<Ack>();
  return t;
}

struct Options {
  std::string channel = "tcp";
  std::vector<std::size_t> sizes{64u << 10, 1u << 20, 16u << 20};
  int reps = 3;
  std::uint32_t window = 32;
  double bw_mib = 1024;  // bytes streamed per bandwidth measurement
  double lat_mib = 256;  // bytes sent one way per latency measurement
  std::size_t workers = 1;
  int tcp_lanes = transport::kDefaultTcpLanes;  // TCP streams per peer (tcp channel)
  // Bytes of rendezvous receives in flight per peer (ucx channel; 0: no bound).
  long long ucx_receive_bytes = -1;  // -1: the channel's default
  // This rank's address (its channel listens there; rank 0's rendezvous too), rank 1's, and the
  // network namespace rank 1 starts in (`ip netns exec`): two "hosts" joined by a veth pair.
  std::string host = "127.0.0.1";
  std::string peer_host;  // empty: host
  std::string peer_netns;
  std::string master = "127.0.0.1";  // rank 1: rank 0's address
  int rank = -1;                     // -1: rank 0, and start rank 1
  std::uint16_t port = 0;
  std::string token;
};

// The whole of `text` as a T, or an error naming the flag and the text.
template <typename T>
T number(const std::string& flag, const std::string& text) {
  T v{};
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (ec != std::errc{} || ptr != end || text.empty()) {
    throw std::invalid_argument(fmt::format("{}: '{}' is not a number in range", flag, text));
  }
  return v;
}

std::vector<std::size_t> parse_sizes(const std::string& text) {
  std::vector<std::size_t> out;
  std::size_t pos = 0;
  while (pos < text.size()) {
    const std::size_t comma = std::min(text.find(',', pos), text.size());
    const std::size_t v = number<std::size_t>("--sizes", text.substr(pos, comma - pos));
    if (v < 4 || v % 4 != 0)
      throw std::invalid_argument("--sizes: " + std::to_string(v) +
                                  " is not a positive multiple of 4");
    out.push_back(v);
    pos = comma + 1;
  }
  if (out.empty()) throw std::invalid_argument("--sizes: empty");
  return out;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
      return argv[++i];
    };
    if (a == "--channel") {
      o.channel = value();
    } else if (a == "--sizes") {
      o.sizes = parse_sizes(value());
    } else if (a == "--reps") {
      o.reps = number<int>(a, value());
    } else if (a == "--window") {
      o.window = number<std::uint32_t>(a, value());
    } else if (a == "--bw-mib") {
      o.bw_mib = number<double>(a, value());
    } else if (a == "--lat-mib") {
      o.lat_mib = number<double>(a, value());
    } else if (a == "--workers") {
      o.workers = number<std::size_t>(a, value());
    } else if (a == "--tcp-lanes") {
      o.tcp_lanes = number<int>(a, value());
    } else if (a == "--ucx-receive-bytes") {
      o.ucx_receive_bytes = number<long long>(a, value());
    } else if (a == "--host") {
      o.host = value();
    } else if (a == "--peer-host") {
      o.peer_host = value();
    } else if (a == "--peer-netns") {
      o.peer_netns = value();
    } else if (a == "--master") {
      o.master = value();
    } else if (a == "--rank") {
      o.rank = number<int>(a, value());
    } else if (a == "--port") {
      o.port = number<std::uint16_t>(a, value());
    } else if (a == "--token") {
      o.token = value();
    } else if (a == "--list-channels") {
      std::printf("tcp%s\n", kHaveUcx ? " ucx" : "");
      std::exit(0);
    } else if (a == "-h" || a == "--help") {
      std::printf(
          "usage: bench_transport [--channel tcp|ucx] [--sizes B,B,...] [--reps N] [--window N]\n"
          "                       [--bw-mib M] [--lat-mib M] [--workers N] [--tcp-lanes N]\n"
          "                       [--ucx-receive-bytes B]\n"
          "                       [--host ADDR] [--peer-host ADDR] [--peer-netns NS]\n"
          "                       [--list-channels]\n");
      std::exit(0);
    } else {
      throw std::invalid_argument("unknown argument '" + a + "' (see --help)");
    }
  }
  if (o.channel != "tcp" && o.channel != "ucx") {
    throw std::invalid_argument("--channel: '" + o.channel + "' is neither tcp nor ucx");
  }
  if (o.window < 2 || o.window > 4096) throw std::invalid_argument("--window: 2 to 4096");
  if (o.reps < 1) throw std::invalid_argument("--reps: at least 1");
  if (o.ucx_receive_bytes < -1) {
    throw std::invalid_argument("--ucx-receive-bytes: 0 (no bound) or more");
  }
  return o;
}

// Where a measurement reports back to rank 0's main thread. A mutex and condition variable:
// it is woken once per measurement, so its cost is not in the figures.
class Signal {
 public:
  void reset() {
    std::lock_guard lock(mu_);
    done_ = false;
    error_.clear();
  }
  void raise(std::string error = {}) {
    std::lock_guard lock(mu_);
    if (done_) return;
    done_ = true;
    error_ = std::move(error);
    cv_.notify_all();
  }
  // Throws when the measurement failed or stalled.
  void wait(const std::string& what) {
    std::unique_lock lock(mu_);
    if (!cv_.wait_for(lock, kRoundTimeout, [&] { return done_; })) {
      throw std::runtime_error(what + ": no completion within " +
                               std::to_string(kRoundTimeout.count()) + " s");
    }
    if (!error_.empty()) throw std::runtime_error(what + ": " + error_);
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::string error_;
};

// Rank 0's actor: streams (credit-limited) or plays ping-pong, then raises the signal.
class Driver final : public Actor {
 public:
  Driver(transport::Channel** channel, Signal* signal)
      : Actor("bench.driver"), channel_(channel), signal_(signal) {}

  // Called by the main thread while the actor is idle; the Go message that follows orders it
  // before the actor's reads.
  void arm(Mode mode, Tensor payload, std::uint32_t total, std::uint32_t window) {
    mode_ = mode;
    payload_ = std::move(payload);
    total_ = total;
    window_ = window;
    sent_ = 0;
    done_ = 0;
  }

 protected:
  void on_message(Message& msg) override {
    if (msg.is<Go>()) {
      if (mode_ == Mode::echo) {
        send_chunk();
      } else {
        fill();
      }
    } else if (msg.is<Chunk>()) {  // an echo came back
      if (++done_ == total_) {
        signal_->raise();
      } else {
        send_chunk();
      }
    } else if (msg.is<Ack>()) {
      done_ = msg.as<Ack>().received;
      if (done_ == total_) {
        signal_->raise();
      } else {
        fill();
      }
    }
  }

 private:
  void fill() {
    while (sent_ < total_ && sent_ - done_ < window_) send_chunk();
  }
  void send_chunk() {
    const Chunk c{sent_, static_cast<std::uint32_t>(total_), mode_,
                  static_cast<std::uint16_t>(std::max<std::uint64_t>(1, window_ / 2))};
    ++sent_;
    const SendResult r = (*channel_)->send(kDriver, kPeer, make_message(c, {payload_}));
    if (!r.ok()) signal_->raise("the channel refused a send (the peer or the channel stopped)");
  }

  transport::Channel** channel_;
  Signal* signal_;
  Mode mode_ = Mode::stream;
  Tensor payload_;
  std::uint64_t total_ = 0;
  std::uint64_t window_ = 0;
  std::uint64_t sent_ = 0;
  std::uint64_t done_ = 0;
};

// Rank 1's actor: counts and acknowledges a stream, or sends each tensor straight back.
class Responder final : public Actor {
 public:
  explicit Responder(transport::Channel** channel) : Actor("bench.responder"), channel_(channel) {}

 protected:
  void on_message(Message& msg) override {
    const Chunk c = msg.as<Chunk>();
    if (c.mode == Mode::echo) {
      (void)(*channel_)->send(kPeer, kDriver, make_message(c, std::move(msg.tensors)));
      return;
    }
    ++received_;
    if (received_ == c.total || received_ % c.ack_every == 0) {
      (void)(*channel_)->send(kPeer, kDriver, make_message(Ack{received_}));
    }
    if (received_ == c.total) received_ = 0;
  }

 private:
  transport::Channel** channel_;
  std::uint64_t received_ = 0;
};

// A channel of either kind behind what the bench needs: the address to publish, connecting to
// the other rank, closing.
class BenchChannel {
 public:
  virtual ~BenchChannel() = default;
  virtual transport::ActorChannel& channel() = 0;
  virtual std::vector<std::byte> address() = 0;
  virtual void connect(const transport::PeerInfo& other, Endpoint remote) = 0;
  virtual std::string errors() = 0;
  virtual void close() = 0;
};

class TcpBenchChannel final : public BenchChannel {
 public:
  TcpBenchChannel(ActorSystem& system, int rank, int lanes, const std::string& host,
                  Signal* signal) {
    transport::TcpChannelOptions o;
    o.credentials = bench_credentials();
    o.rank = rank;
    o.lanes = lanes;
    o.listen_host = host;
    o.types = wire_types();
    o.on_error = [signal](const transport::ChannelError& e) {
      signal->raise(e.peer + ": " + e.what);
    };
    channel_ = std::make_unique<transport::TcpChannel>(system, std::move(o));
  }
  transport::ActorChannel& channel() override { return *channel_; }
  std::vector<std::byte> address() override {
    const std::uint16_t p = channel_->port();
    return {static_cast<std::byte>(p & 0xff), static_cast<std::byte>(p >> 8)};
  }
  void connect(const transport::PeerInfo& other, Endpoint remote) override {
    if (other.blob.size() != 2) {
      throw std::runtime_error(fmt::format("rank {}: its blob of {} bytes is no tcp port",
                                           other.rank, other.blob.size()));
    }
    const auto port = static_cast<std::uint16_t>(std::to_integer<unsigned>(other.blob[0]) |
                                                 std::to_integer<unsigned>(other.blob[1]) << 8);
    const int r = static_cast<int>(other.rank);
    channel_->add_peer({r, other.host, port});
    channel_->route(remote, r);
    channel_->start();
    if (!channel_->wait_connected(kSetupTimeout)) {
      throw std::runtime_error(fmt::format("tcp channel: rank {} at {}:{} did not connect: {}", r,
                                           other.host, port, errors()));
    }
  }
  std::string errors() override {
    std::string out;
    for (const auto& e : channel_->errors()) out += e.peer + ": " + e.what + "; ";
    return out.empty() ? "no error reported" : out;
  }
  void close() override { channel_->close(); }

 private:
  std::unique_ptr<transport::TcpChannel> channel_;
};

#if TANDEM_BENCH_UCX
// UCX picks its transports from UCX_TLS in the environment (both processes inherit it).
class UcxBenchChannel final : public BenchChannel {
 public:
  UcxBenchChannel(ActorSystem& system, int rank, long long receive_bytes, Signal* signal) {
    transport::UcxChannelOptions o;
    if (receive_bytes >= 0) o.rendezvous_receive_bytes = static_cast<std::size_t>(receive_bytes);
    o.credentials = bench_credentials();
    o.rank = rank;
    o.types = wire_types();
    o.on_error = [signal](const transport::ChannelError& e) {
      signal->raise(e.peer + ": " + e.what);
    };
    channel_ = std::make_unique<transport::UcxChannel>(system, std::move(o));
  }
  transport::ActorChannel& channel() override { return *channel_; }
  std::vector<std::byte> address() override { return channel_->worker_address(); }
  void connect(const transport::PeerInfo& other, Endpoint remote) override {
    const int r = static_cast<int>(other.rank);
    channel_->add_peer({r, other.host, other.blob});
    channel_->route(remote, r);
    channel_->start();
    if (!channel_->wait_connected(kSetupTimeout)) {
      throw std::runtime_error(
          fmt::format("ucx channel: rank {} did not say hello: {}", r, errors()));
    }
  }
  std::string errors() override {
    std::string out;
    for (const auto& e : channel_->errors()) out += e.peer + ": " + e.what + "; ";
    return out.empty() ? "no error reported" : out;
  }
  void close() override { channel_->close(); }

 private:
  std::unique_ptr<transport::UcxChannel> channel_;
};
#endif

std::unique_ptr<BenchChannel> make_channel(const Options& o, ActorSystem& system, int rank,
                                           Signal* signal) {
  if (o.channel == "tcp")
    return std::make_unique<TcpBenchChannel>(system, rank, o.tcp_lanes, o.host, signal);
#if TANDEM_BENCH_UCX
  return std::make_unique<UcxBenchChannel>(system, rank, o.ucx_receive_bytes, signal);
#else
  throw std::runtime_error(
      "--channel ucx: this build has no UCX channel (transport/ucx_channel.cpp not built)");
#endif
}

pid_t spawn_rank1(int argc, char** argv, const Options& o, std::uint16_t port) {
  const std::string exe = std::filesystem::read_symlink("/proc/self/exe").string();
  std::vector<std::string> args;
  if (!o.peer_netns.empty()) args = {"ip", "netns", "exec", o.peer_netns};
  args.push_back(exe);
  for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);
  const std::string peer_host = o.peer_host.empty() ? o.host : o.peer_host;
  for (const std::string& a : {std::string("--rank"), std::string("1"), std::string("--port"),
                               std::to_string(port), std::string("--token"), o.token,
                               std::string("--master"), o.host, std::string("--host"), peer_host}) {
    args.push_back(a);
  }
  std::vector<char*> cargs;
  for (std::string& a : args) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  pid_t pid = -1;
  if (posix_spawnp(&pid, cargs[0], nullptr, nullptr, cargs.data(), environ) != 0) {
    throw std::runtime_error("cannot start rank 1 (" + args[0] + "): " + std::strerror(errno));
  }
  return pid;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string size_name(std::size_t bytes) {
  if (bytes % (1u << 20) == 0) return std::to_string(bytes >> 20) + " MiB";
  if (bytes % (1u << 10) == 0) return std::to_string(bytes >> 10) + " KiB";
  return std::to_string(bytes) + " B";
}

std::string runs_text(const std::vector<double>& runs, int decimals) {
  std::string out;
  for (const double r : runs) out += fmt::format("{}{:.{}f}", out.empty() ? "" : " ", r, decimals);
  return out;
}

int run(int argc, char** argv) {
  Options o = parse(argc, argv);
  const bool root = o.rank < 0;
  const int rank = root ? 0 : o.rank;
  if (rank != 0 && rank != 1) throw std::invalid_argument("--rank: 0 or 1");
  if (root) o.token = fmt::format("bench-transport-{}", getpid());

  Signal signal;
  ActorSystem system(make_work_sharing({.workers = o.workers}));
  transport::Channel* channel_ptr = nullptr;
  Driver* driver = rank == 0 ? system.spawn<Driver>(&channel_ptr, &signal) : nullptr;
  Responder* responder = rank == 1 ? system.spawn<Responder>(&channel_ptr) : nullptr;
  std::unique_ptr<BenchChannel> ch = make_channel(o, system, rank, &signal);
  channel_ptr = &ch->channel();
  if (rank == 0) {
    ch->channel().bind(kDriver, driver);
  } else {
    ch->channel().bind(kPeer, responder);
  }

  transport::RendezvousOptions ro;
  ro.rank = rank;
  ro.world_size = 2;
  ro.master_host = rank == 0 ? o.host : o.master;
  ro.master_port = o.port;
  ro.job_token = o.token;
  ro.host_name = o.host;
  ro.blob = ch->address();
  // Streaming keeps both cores busy: a late heartbeat must not end the job.
  ro.heartbeat_timeout = 60s;
  transport::Rendezvous rendezvous(ro);
  pid_t child = -1;
  if (root) child = spawn_rank1(argc, argv, o, rendezvous.port());
  const auto& peers = rendezvous.join(kSetupTimeout);
  ch->connect(peers[static_cast<std::size_t>(1 - rank)], rank == 0 ? kPeer : kDriver);
  rendezvous.barrier("connected", kSetupTimeout);

  nlohmann::json results = nlohmann::json::object();
  if (rank == 0) {
    std::printf(
        "bench_transport: channel %s, 2 processes on 127.0.0.1, %zu worker(s) each, "
        "window %u, %d repetitions (median, then every run)\n",
        o.channel.c_str(), o.workers, o.window, o.reps);
    std::printf("%-8s  %-34s  %-34s\n", "size", "bandwidth GB/s (1e9 B/s)", "latency us (one way)");
    for (const std::size_t size : o.sizes) {
      Tensor payload = Tensor::empty({static_cast<std::int64_t>(size / 4)}, DType::f32);
      std::memset(payload.raw_data(), 0x3c, size);
      const double mib = static_cast<double>(size) / (1 << 20);
      const auto bw_n =
          static_cast<std::uint32_t>(std::max<double>(o.window, std::ceil(o.bw_mib / mib)));
      const auto lat_n =
          static_cast<std::uint32_t>(std::clamp<double>(std::ceil(o.lat_mib / mib), 20, 5000));
      auto measure = [&](Mode mode, std::uint32_t n) {
        signal.reset();
        driver->arm(mode, payload, n, o.window);
        const auto t0 = Clock::now();
        (void)system.send(driver, Go{0});
        signal.wait(fmt::format("{} of {} messages of {}",
                                mode == Mode::echo ? "ping-pong" : "stream", n, size_name(size)));
        return std::chrono::duration<double>(Clock::now() - t0).count();
      };
      // Warm-up: connections, allocator, page faults of the receive buffers.
      (void)measure(Mode::stream, std::min<std::uint32_t>(bw_n, 4 * o.window));
      (void)measure(Mode::echo, std::min<std::uint32_t>(lat_n, 20));
      std::vector<double> gbps, lat_us;
      for (int r = 0; r < o.reps; ++r) {
        gbps.push_back(static_cast<double>(size) * bw_n / measure(Mode::stream, bw_n) / 1e9);
        lat_us.push_back(measure(Mode::echo, lat_n) / (2.0 * lat_n) * 1e6);
      }
      std::printf("%-8s  %-34s  %-34s\n", size_name(size).c_str(),
                  fmt::format("{:.3f} [{}]", median(gbps), runs_text(gbps, 3)).c_str(),
                  fmt::format("{:.1f} [{}]", median(lat_us), runs_text(lat_us, 1)).c_str());
      std::fflush(stdout);
      results[fmt::format("bandwidth/{}", size)] = {
          {"real_ns", static_cast<double>(size) / median(gbps)},  // per message
          {"iterations", bw_n},
          {"counters", {{"GB_per_s", median(gbps)}}},
          {"runs", gbps}};
      results[fmt::format("latency/{}", size)] = {{"real_ns", median(lat_us) * 1e3},
                                                  {"iterations", lat_n},
                                                  {"counters", {{"one_way_us", median(lat_us)}}},
                                                  {"runs", lat_us}};
    }
  }
  // Rank 1 waits here, answering through its actor, until rank 0 has measured everything.
  rendezvous.barrier("measured", 3600s);
  ch->close();
  system.stop();
  rendezvous.shutdown(kSetupTimeout);
  if (rank == 0) {
    int status = 0;
    waitpid(child, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      std::fprintf(stderr, "bench_transport: rank 1 failed (status %d)\n", status);
      return 1;
    }
    const nlohmann::json line = {{"suite", "transport"},
                                 {"channel", o.channel},
                                 {"window", o.window},
                                 {"reps", o.reps},
                                 {"results", results}};
    std::printf("BENCH_JSON %s\n", line.dump().c_str());
  }
  return 0;
}

}  // namespace
}  // namespace tandem::bench

int main(int argc, char** argv) {
  try {
    return tandem::bench::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_transport: %s\n", e.what());
    return 1;
  }
}

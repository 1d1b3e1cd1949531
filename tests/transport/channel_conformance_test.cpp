// The conformance suite of the data planes: one set of cases run against every channel (`local`,
// `tcp`, and `ucx` with UCX's default transports and with UCX_TLS=tcp), through the public
// channel API only (bind, add_peer, route, start, wait_connected, send, close, errors, stats), so
// that it holds whatever moves the bytes underneath. Two processes are played by two
// ActorSystems of this process (one ActorSystem and one LocalChannel for `local`): rank 0 owns
// endpoints 0 and 2, rank 1 owns 1 and 3. Where a case needs a rank 1 that misbehaves, it is
// played by hand (a raw TCP stream, a bare UCX worker). What is particular to one channel (tcp
// lanes and handshakes, ucx rendezvous and membership) stays in that channel's own tests. Waits
// have generous timeouts so that a failure shows as an error, never as a hang; nothing asserts
// on timing.
#include <gtest/gtest.h>

#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/write.hpp>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "actors/messages.hpp"
#include "actors/pipeline_wire_types.hpp"
#include "numbered_message.hpp"
#include "runtime/actor_system.hpp"
#include "runtime/dtype.hpp"
#include "runtime/scheduler.hpp"
#include "transport/cuda_ipc_channel.hpp"
#include "transport/local_channel.hpp"
#include "transport/tcp_channel.hpp"
#include "transport/ucx_channel.hpp"
#include "ucx_fake_peer.hpp"
#include "wire_test_helpers.hpp"

namespace tandem::transport {
namespace {

using testing::bf16_tensor;
using testing::eventually;
using testing::expect_same_message;
using testing::f32_tensor;
using testing::i32_tensor;
using testing::tag_of;

using namespace std::chrono_literals;
using Bytes = std::vector<std::byte>;
namespace act = tandem::actors;

constexpr std::uint64_t kJob = 0x6c0f0e11;
constexpr auto kLong = 30s;
// A message of this tag kind makes a Receiver stop itself: `local`'s peer that goes away.
constexpr int kVanishKind = 200;

JobCredentials credentials() {
  return testing::fixed_credentials(kJob, "channel conformance token");
}

// Keeps what arrives, as testing::Collector does. While its gate is closed its handler holds
// the worker (a peer that does not read); a message of kind kVanishKind stops it.
class Receiver final : public Actor {
 public:
  explicit Receiver(std::string name) : Actor(std::move(name)) {}

  bool wait_for(std::size_t n) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, kLong, [&] { return got_.size() >= n; });
  }
  std::vector<Message> take() {
    std::lock_guard lock(mu_);
    return std::move(got_);
  }
  void set_gate(bool open) {
    std::lock_guard lock(mu_);
    gate_open_ = open;
    cv_.notify_all();
  }

 protected:
  void on_message(Message& msg) override {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return gate_open_; });
    if (msg.tag().kind == kVanishKind) {
      stop_self();
      return;
    }
    got_.push_back(std::move(msg));
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool gate_open_ = true;
  std::vector<Message> got_;
};

// Rank 1 played by hand against a real rank 0: it proves itself, then sends what the test
// gives it, or goes without a goodbye.
class FakeRank1 {
 public:
  virtual ~FakeRank1() = default;
  // After rank 0 started: connects and proves itself as rank 1.
  virtual void join() = 0;
  // One whole wire frame (wire_message.hpp) as rank 1's next message. `gone_ok`: rank 0 may
  // have closed its side already, so the transport may refuse it.
  virtual void send(const Bytes& frame, bool gone_ok = false) = 0;
  virtual void vanish() = 0;
};

struct Stats {
  std::uint64_t messages_sent = 0;
  std::uint64_t delivered = 0;
  std::uint64_t dropped = 0;
};

// The two ranks of a job under test, with a Receiver bound to each endpoint.
class Ranks {
 public:
  explicit Ranks(int systems) {
    for (int i = 0; i < systems; ++i) {
      systems_.push_back(std::make_unique<ActorSystem>(make_work_sharing({.workers = 2})));
    }
    static constexpr const char* kNames[] = {"e0", "e1", "e2", "e3"};
    for (Endpoint e = 0; e < 4; ++e) receivers_[e] = system(rank_of(e)).spawn<Receiver>(kNames[e]);
  }
  // A closed gate would hold a worker that the systems' destructors join.
  virtual ~Ranks() {
    for (Receiver* r : receivers_) r->set_gate(true);
  }
  Ranks(const Ranks&) = delete;
  Ranks& operator=(const Ranks&) = delete;

  static int rank_of(Endpoint e) { return e % 2; }
  ActorSystem& system(int rank) { return *systems_[rank % systems_.size()]; }
  Receiver* at(Endpoint e) { return receivers_[e]; }

  virtual ActorChannel& channel(int rank) = 0;
  virtual void start(int rank) = 0;
  virtual bool wait_connected(int rank) = 0;
  virtual void close(int rank) = 0;
  // Each waits for the other's goodbye.
  void close_both() {
    std::thread t([&] { close(0); });
    close(1);
    t.join();
  }
  virtual std::vector<ChannelError> errors(int rank) const = 0;
  virtual std::optional<Stats> stats(int rank) const = 0;
  // Junk from a stranger (no peer of the job) to `rank`; returns once `rank` reported it.
  virtual void send_garbage(int rank) = 0;

  SendResult send(Endpoint from, Endpoint to, Message msg) {
    return channel(rank_of(from)).send(from, to, std::move(msg));
  }
  void start_both() {
    start(0);
    start(1);
  }
  bool connected() { return wait_connected(0) && wait_connected(1); }

  std::unique_ptr<FakeRank1> fake;  // rank 1, where it is played by hand

 private:
  std::vector<std::unique_ptr<ActorSystem>> systems_;
  Receiver* receivers_[4] = {};
};

// --- local: one ActorSystem, one LocalChannel ---

class LocalRanks final : public Ranks {
 public:
  LocalRanks() : Ranks(1), channel_(system(0)) {
    for (Endpoint e = 0; e < 4; ++e) channel_.bind(e, at(e));
  }
  ActorChannel& channel(int) override { return channel_; }
  void start(int) override {}
  bool wait_connected(int) override { return true; }
  // A LocalChannel ends with its ActorSystem.
  void close(int) override { system(0).stop(); }
  std::vector<ChannelError> errors(int) const override { return {}; }
  std::optional<Stats> stats(int) const override { return std::nullopt; }
  void send_garbage(int) override {}

 private:
  LocalChannel channel_;
};

struct LocalTransport {
  static constexpr const char* kName = "local";
  static constexpr bool kNetwork = false;
  static constexpr const char* kLost = "";
  static std::unique_ptr<Ranks> pair() { return std::make_unique<LocalRanks>(); }
  static std::unique_ptr<Ranks> with_fake() { return nullptr; }
};

// --- tcp and ucx: one channel per rank ---

// `T` says how its channel is made, reached and misled (TcpTransport, UcxTransport).
template <class T>
class ChannelRanks final : public Ranks {
 public:
  using C = typename T::Channel;
  struct WithFake {};

  ChannelRanks() : Ranks(2) {
    for (int rank = 0; rank < 2; ++rank) make(rank, T::options(rank));
    for (int rank = 0; rank < 2; ++rank) {
      channels_[rank]->add_peer(T::peer(*channels_[1 - rank], 1 - rank));
      route_the_others(rank);
    }
  }
  // Rank 0 real, rank 1 a FakeRank1 that proved itself.
  explicit ChannelRanks(WithFake) : Ranks(2) {
    typename T::Options o = T::options(0);
    o.close_linger = 100ms;  // the fake never says goodbye
    make(0, std::move(o));
    fake = T::fake(*channels_[0]);
    route_the_others(0);
    channels_[0]->start();
    fake->join();
    EXPECT_TRUE(channels_[0]->wait_connected(kLong));
  }

  ActorChannel& channel(int rank) override { return *channels_[rank]; }
  void start(int rank) override { channels_[rank]->start(); }
  bool wait_connected(int rank) override { return channels_[rank]->wait_connected(kLong); }
  void close(int rank) override {
    if (channels_[rank]) channels_[rank]->close();
  }
  std::vector<ChannelError> errors(int rank) const override { return channels_[rank]->errors(); }
  std::optional<Stats> stats(int rank) const override {
    const auto s = channels_[rank]->stats();
    return Stats{s.messages_sent, s.delivered, s.dropped};
  }
  void send_garbage(int rank) override {
    strangers_.push_back(T::garbage(*channels_[rank]));
    (void)eventually([&] { return !channels_[rank]->errors().empty(); });
  }

 private:
  void make(int rank, typename T::Options o) {
    channels_[rank] = std::make_unique<C>(system(rank), std::move(o));
    for (Endpoint e = 0; e < 4; ++e) {
      if (rank_of(e) == rank) channels_[rank]->bind(e, at(e));
    }
  }
  // After the peer was added.
  void route_the_others(int rank) {
    for (Endpoint e = 0; e < 4; ++e) {
      if (rank_of(e) != rank) channels_[rank]->route(e, 1 - rank);
    }
  }

  // Declared before the channels: they go after them.
  std::vector<std::shared_ptr<void>> strangers_;
  std::unique_ptr<C> channels_[2];
};

class TcpFake final : public FakeRank1 {
 public:
  explicit TcpFake(std::uint16_t port, ProofPurpose purpose = ProofPurpose::kDataTcp)
      : port_(port), purpose_(purpose), socket_(io_) {}
  void join() override {
    socket_.connect({asio::ip::make_address("127.0.0.1"), port_});
    testing::tcp_client_handshake(socket_, credentials(), 1, 0, 0, 1, purpose_);
  }
  void send(const Bytes& frame, bool gone_ok) override {
    std::error_code ec;
    asio::write(socket_, asio::buffer(frame), ec);
    if (!gone_ok) {
      EXPECT_FALSE(ec) << ec.message();
    }
  }
  void vanish() override {
    std::error_code ec;
    socket_.close(ec);
  }

 private:
  std::uint16_t port_;
  ProofPurpose purpose_;
  asio::io_context io_;
  asio::ip::tcp::socket socket_;
};

struct TcpTransport {
  static constexpr const char* kName = "tcp";
  static constexpr bool kNetwork = true;
  static constexpr const char* kLost = "without a goodbye";
  using Channel = TcpChannel;
  using Options = TcpChannelOptions;

  static Options options(int rank) {
    Options o;
    o.credentials = credentials();
    o.rank = rank;
    o.types = act::pipeline_wire_types();
    o.close_linger = 2s;
    return o;
  }
  static TcpPeer peer(const TcpChannel& c, int rank) { return {rank, "127.0.0.1", c.port()}; }
  static std::unique_ptr<FakeRank1> fake(TcpChannel& rank0) {
    rank0.add_peer({1, "127.0.0.1", 1});  // never dialled: rank 1 connects to rank 0
    return std::make_unique<TcpFake>(rank0.port());
  }
  static std::shared_ptr<void> garbage(TcpChannel& c) { return garbage_at(c.port()); }
  // Random bytes on a live port, from a connection kept open.
  static std::shared_ptr<void> garbage_at(std::uint16_t port) {
    struct Stranger {
      asio::io_context io;
      asio::ip::tcp::socket socket{io};
    };
    auto s = std::make_shared<Stranger>();
    s->socket.connect({asio::ip::make_address("127.0.0.1"), port});
    Bytes junk(64);
    std::mt19937 rng(9);
    for (auto& x : junk) x = static_cast<std::byte>(rng());
    asio::write(s->socket, asio::buffer(junk));
    return s;
  }
  static std::unique_ptr<Ranks> pair() { return std::make_unique<ChannelRanks<TcpTransport>>(); }
  static std::unique_ptr<Ranks> with_fake() {
    return std::make_unique<ChannelRanks<TcpTransport>>(ChannelRanks<TcpTransport>::WithFake{});
  }
};

// The cuda-ipc channel on host tensors: tcp's frames and handshake (its own proof purpose);
// without a GPU every peer is on staging. Its device paths are cuda_ipc_channel_test's.
struct CudaIpcTransport {
  static constexpr const char* kName = "cuda_ipc";
  static constexpr bool kNetwork = true;
  static constexpr const char* kLost = "without a goodbye";
  using Channel = CudaIpcChannel;
  using Options = CudaIpcChannelOptions;

  static Options options(int rank) {
    Options o;
    o.credentials = credentials();
    o.rank = rank;
    o.types = act::pipeline_wire_types();
    o.close_linger = 2s;
    o.warn = [](const std::string&) {};  // the fallback's one warning: expected here
    return o;
  }
  static CudaIpcPeer peer(const CudaIpcChannel& c, int rank) {
    return {rank, "127.0.0.1", c.port()};
  }
  static std::unique_ptr<FakeRank1> fake(CudaIpcChannel& rank0) {
    rank0.add_peer({1, "127.0.0.1", 1});  // never dialled: rank 1 connects to rank 0
    return std::make_unique<TcpFake>(rank0.port(), ProofPurpose::kDataCudaIpc);
  }
  static std::shared_ptr<void> garbage(CudaIpcChannel& c) {
    return TcpTransport::garbage_at(c.port());
  }
  static std::unique_ptr<Ranks> pair() {
    return std::make_unique<ChannelRanks<CudaIpcTransport>>();
  }
  static std::unique_ptr<Ranks> with_fake() {
    return std::make_unique<ChannelRanks<CudaIpcTransport>>(
        ChannelRanks<CudaIpcTransport>::WithFake{});
  }
};

class UcxFake final : public FakeRank1 {
 public:
  UcxFake(const std::string& transports, UcxChannel& rank0)
      : peer_(transports, kJob), rank0_(rank0) {
    rank0.add_peer({1, "fake", peer_.address()});
  }
  void join() override {
    peer_.connect(rank0_.worker_address());
    peer_.handshake(credentials());
    // The channel's proof travels on the endpoint it opens for the fake's hello; the fake
    // vanishes only once that endpoint is wired (ucx_fake_peer.hpp, UCX 1.13's abort).
    EXPECT_TRUE(peer_.channel_proof().has_value());
  }
  void send(const Bytes& frame, bool gone_ok) override { peer_.send_frame(++seq_, frame, gone_ok); }
  void vanish() override { peer_.vanish(); }

 private:
  testing::UcxFakePeer peer_;
  UcxChannel& rank0_;
  std::uint64_t seq_ = 0;
};

struct UcxDefaultTls {
  static constexpr const char* kName = "ucx_default";
  static constexpr const char* kTls = "";  // UCX's choice: shared memory in one process
};
struct UcxTcpTls {
  static constexpr const char* kName = "ucx_tcp";
  static constexpr const char* kTls = "tcp";
};

template <class Tls>
struct UcxTransport {
  static constexpr const char* kName = Tls::kName;
  static constexpr bool kNetwork = true;
  static constexpr const char* kLost = "lost";
  using Channel = UcxChannel;
  using Options = UcxChannelOptions;

  static Options options(int rank) {
    Options o;
    o.credentials = credentials();
    o.rank = rank;
    o.types = act::pipeline_wire_types();
    o.transports = Tls::kTls;
    o.close_linger = 5s;
    return o;
  }
  static UcxPeer peer(const UcxChannel& c, int rank) {
    return {rank, "127.0.0.1", c.worker_address()};
  }
  static std::unique_ptr<FakeRank1> fake(UcxChannel& rank0) {
    return std::make_unique<UcxFake>(Tls::kTls, rank0);
  }
  // An active message without a channel header, from a worker no rank owns.
  static std::shared_ptr<void> garbage(UcxChannel& c) {
    auto s = std::make_shared<testing::UcxFakePeer>(Tls::kTls, kJob);
    s->connect(c.worker_address());
    s->send_raw(Bytes(40, std::byte{0x5a}), {});
    return s;
  }
  static std::unique_ptr<Ranks> pair() { return std::make_unique<ChannelRanks<UcxTransport>>(); }
  static std::unique_ptr<Ranks> with_fake() {
    return std::make_unique<ChannelRanks<UcxTransport>>(
        typename ChannelRanks<UcxTransport>::WithFake{});
  }
};

// --- messages ---

using testing::numbered;

// 16 MiB, 0-element and scalar tensors, 64 B, 64 KiB and 1 MiB ones, several in one message and
// an undefined one among them.
Message sized(int sender, std::int64_t seq) {
  const float v = static_cast<float>(seq * 7 + sender);
  std::vector<Tensor> ts;
  switch (seq % 6) {
    case 0:
      ts = {f32_tensor({4 << 20}, v)};
      break;
    case 1:
      ts = {f32_tensor({0}, v), i32_tensor({0, 4}, 1), bf16_tensor({3, 0, 2}, v)};
      break;
    case 2:
      ts = {f32_tensor({16}, v), f32_tensor({}, v)};
      break;
    case 3:
      ts = {f32_tensor({16 << 10}, v), i32_tensor({8 << 10, 2}, static_cast<std::int32_t>(seq)),
            Tensor(), bf16_tensor({3, 5}, v)};
      break;
    case 4:
      ts = {bf16_tensor({0}, v)};
      break;
    default:
      ts = {f32_tensor({256 << 10}, v), i32_tensor({2 << 20}, static_cast<std::int32_t>(seq))};
      break;
  }
  const act::TensorMeta meta = act::TensorMeta::of(ts[0]);
  return make_message(act::BackwardTensor{meta}, std::move(ts), tag_of(seq, 0, 1, sender));
}

// 1 MiB in every other message: what a sender queues faster than a link drains.
Message bulky(int sender, std::int64_t seq) {
  const Tensor t = seq % 2 == 0 ? f32_tensor({256 << 10}, static_cast<float>(seq + sender))
                                : i32_tensor({seq % 9 + 1}, static_cast<std::int32_t>(seq));
  return make_message(act::ForwardTensor{act::TensorMeta::of(t)}, {t}, tag_of(seq, 0, 1, sender));
}

// Every sender's first `n` messages arrived, in order and exact, as `make(sender, seq)` makes
// them (n < 0: any prefix, none twice).
void expect_in_order(const std::vector<Message>& got, const std::vector<int>& senders,
                     std::int64_t n, const std::function<Message(int, std::int64_t)>& make) {
  std::map<int, std::int64_t> next;
  for (int s : senders) next[s] = 0;
  for (const Message& m : got) {
    const int s = m.tag().kind;
    ASSERT_TRUE(next.contains(s)) << "unknown sender " << s;
    ASSERT_EQ(m.tag().minibatch, next[s]) << "sender " << s;
    expect_same_message(m, make(s, next[s]));
    ++next[s];
  }
  if (n < 0) return;
  for (int s : senders) EXPECT_EQ(next[s], n) << "sender " << s;
}

// The dtypes the runtime has. The switch (no default: -Wswitch) stops the build when one is
// added, until it is listed here too.
constexpr DType kAllDTypes[] = {DType::f32, DType::bf16, DType::i32};
constexpr bool listed(DType d) {
  switch (d) {
    case DType::f32:
    case DType::bf16:
    case DType::i32:
      return true;
  }
  return false;
}
static_assert(listed(kAllDTypes[0]) && listed(kAllDTypes[1]) && listed(kAllDTypes[2]));

// A tensor of `dtype` whose bytes are random bits from `seed` (NaNs with payloads, subnormals,
// negative zeros among them), then the special values of the dtype at its start.
Tensor random_bits(DType dtype, Shape shape, std::uint32_t seed) {
  Tensor t = Tensor::empty(std::move(shape), dtype);
  auto* p = static_cast<std::byte*>(t.raw_data());
  std::mt19937 rng(seed);
  for (std::size_t i = 0; i < t.nbytes(); ++i) p[i] = static_cast<std::byte>(rng());
  const std::vector<std::uint32_t> specials =
      dtype == DType::bf16 ? std::vector<std::uint32_t>{0x7fc1, 0xffff, 0x8000, 0x0001, 0x7f80}
      : dtype == DType::f32
          ? std::vector<std::uint32_t>{0x7fc00001, 0xffffffff, 0x80000000, 0x00000001, 0xff800000}
          : std::vector<std::uint32_t>{0x80000000, 0x7fffffff, 0xffffffff, 0, 1};
  const std::size_t size = dtype_size(dtype);
  for (std::size_t i = 0; i < specials.size() && (i + 1) * size <= t.nbytes(); ++i) {
    std::memcpy(p + i * size, &specials[i], size);  // little-endian: the low bytes
  }
  return t;
}

Message of_dtype(int sender, std::int64_t seq) {
  const DType d = kAllDTypes[static_cast<std::size_t>(seq) % std::size(kAllDTypes)];
  const auto seed = static_cast<std::uint32_t>(seq * 31 + sender);
  std::vector<Tensor> ts{random_bits(d, {1031}, seed), random_bits(d, {3, 5, 7}, seed + 1)};
  const act::TensorMeta meta = act::TensorMeta::of(ts[0]);
  return make_message(act::ForwardTensor{meta}, std::move(ts), tag_of(seq, 0, 1, sender));
}

// --- the suite ---

template <class T>
class ChannelConformance : public ::testing::Test {
 protected:
  // Both ranks started and connected.
  static std::unique_ptr<Ranks> connected() {
    auto r = T::pair();
    r->start_both();
    EXPECT_TRUE(r->connected());
    return r;
  }
};

struct TransportName {
  template <class T>
  static std::string GetName(int) {
    return T::kName;
  }
};

using Transports = ::testing::Types<LocalTransport, TcpTransport, UcxTransport<UcxDefaultTls>,
                                    UcxTransport<UcxTcpTls>, CudaIpcTransport>;
TYPED_TEST_SUITE(ChannelConformance, Transports, TransportName);

#define SKIP_WITHOUT_NETWORK()                                                               \
  if (!TypeParam::kNetwork) {                                                                \
    GTEST_SKIP() << TypeParam::kName                                                         \
                 << " hands Message objects over in one process: no bytes, no peer process"; \
  }

TYPED_TEST(ChannelConformance, KeepsTheOrderOfEverySenderToEveryPeer) {
  auto r = this->connected();
  constexpr std::int64_t kN = 400;
  std::vector<std::thread> senders;
  senders.emplace_back([&] {
    for (std::int64_t i = 0; i < kN; ++i) ASSERT_TRUE(r->send(0, 1, numbered(0, i)).ok());
  });
  senders.emplace_back([&] {
    for (std::int64_t i = 0; i < kN; ++i) ASSERT_TRUE(r->send(2, 1, numbered(2, i)).ok());
  });
  senders.emplace_back([&] {
    for (std::int64_t i = 0; i < kN; ++i) ASSERT_TRUE(r->send(3, 0, numbered(3, i)).ok());
  });
  for (auto& t : senders) t.join();
  // A send to an endpoint of the sender's own rank stays in its process.
  ASSERT_TRUE(r->send(1, 3, numbered(1, 0)).ok());
  ASSERT_TRUE(r->at(1)->wait_for(2 * kN));
  ASSERT_TRUE(r->at(0)->wait_for(kN));
  ASSERT_TRUE(r->at(3)->wait_for(1));
  expect_in_order(r->at(1)->take(), {0, 2}, kN, numbered);
  expect_in_order(r->at(0)->take(), {3}, kN, numbered);
  expect_in_order(r->at(3)->take(), {1}, 1, numbered);
  r->close_both();
  EXPECT_TRUE(r->errors(0).empty());
  EXPECT_TRUE(r->errors(1).empty());
  if (const auto s0 = r->stats(0), s1 = r->stats(1); s0 && s1) {
    EXPECT_EQ(s0->messages_sent, 2u * kN);
    EXPECT_EQ(s1->delivered, 2u * kN);
    EXPECT_EQ(s0->delivered, static_cast<std::uint64_t>(kN));
    EXPECT_EQ(s1->dropped, 0u);
  }
}

TYPED_TEST(ChannelConformance, LargeEmptyAndSeveralTensorsArriveExactAndInOrder) {
  auto r = this->connected();
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
  constexpr std::int64_t kN = 6;  // every kind once, without minutes of checked 16 MiB copies
#else
  constexpr std::int64_t kN = 18;
#endif
  std::thread other([&] {
    for (std::int64_t i = 0; i < kN; ++i) ASSERT_TRUE(r->send(2, 1, sized(2, i)).ok());
  });
  std::thread back([&] {
    for (std::int64_t i = 0; i < kN; ++i) ASSERT_TRUE(r->send(1, 0, sized(1, i)).ok());
  });
  for (std::int64_t i = 0; i < kN; ++i) ASSERT_TRUE(r->send(0, 1, sized(0, i)).ok());
  other.join();
  back.join();
  ASSERT_TRUE(r->at(1)->wait_for(2 * kN));
  ASSERT_TRUE(r->at(0)->wait_for(kN));
  expect_in_order(r->at(1)->take(), {0, 2}, kN, sized);
  expect_in_order(r->at(0)->take(), {1}, kN, sized);
  r->close_both();
  EXPECT_TRUE(r->errors(0).empty());
  EXPECT_TRUE(r->errors(1).empty());
}

TYPED_TEST(ChannelConformance, EveryDtypeArrivesBitExact) {
  auto r = this->connected();
  constexpr auto kN = static_cast<std::int64_t>(2 * std::size(kAllDTypes));
  for (std::int64_t i = 0; i < kN; ++i) {
    ASSERT_TRUE(r->send(0, 1, of_dtype(0, i)).ok());
    ASSERT_TRUE(r->send(3, 2, of_dtype(3, i)).ok());
  }
  ASSERT_TRUE(r->at(1)->wait_for(kN));
  ASSERT_TRUE(r->at(2)->wait_for(kN));
  expect_in_order(r->at(1)->take(), {0}, kN, of_dtype);
  expect_in_order(r->at(2)->take(), {3}, kN, of_dtype);
  r->close_both();
  EXPECT_TRUE(r->errors(0).empty());
  EXPECT_TRUE(r->errors(1).empty());
}

TYPED_TEST(ChannelConformance, MessagesForAStoppedSystemAreNotDelivered) {
  auto r = this->connected();
  ASSERT_TRUE(r->send(0, 1, sized(0, 2)).ok());
  ASSERT_TRUE(r->at(1)->wait_for(1));
  r->system(1).stop();
  if (!TypeParam::kNetwork) {
    // In one process the sender learns it at once.
    EXPECT_EQ(r->send(0, 1, sized(0, 2)).status, SendStatus::system_stopped);
    return;
  }
  // Small and 16 MiB messages arrive after the receiving system stopped: dropped, no error.
  ASSERT_TRUE(r->send(0, 1, sized(0, 2)).ok());
  ASSERT_TRUE(r->send(0, 1, sized(0, 0)).ok());
  ASSERT_TRUE(eventually([&] { return r->stats(1)->dropped == 2; }));
  EXPECT_EQ(r->stats(1)->delivered, 1u);
  EXPECT_EQ(r->at(1)->take().size(), 1u);
  r->close_both();
  EXPECT_TRUE(r->errors(0).empty());
  EXPECT_TRUE(r->errors(1).empty());
}

TYPED_TEST(ChannelConformance, ALostPeerIsReportedAndLaterSendsToItFail) {
  if (!TypeParam::kNetwork) {
    // In one process a peer that goes is an actor that stopped.
    auto r = this->connected();
    ASSERT_TRUE(r->send(0, 1, make_message(act::Credit{1}, {}, tag_of(0, 0, 1, kVanishKind))).ok());
    ASSERT_TRUE(eventually([&] { return r->at(1)->stopped(); }));
    EXPECT_EQ(r->send(0, 1, numbered(0, 1)).status, SendStatus::target_stopped);
    return;
  }
  auto r = TypeParam::with_fake();
  const WireTypes types = act::pipeline_wire_types();
  r->fake->send(encode_wire_message(kJob, 1, 0, numbered(1, 0), types));
  ASSERT_TRUE(r->at(0)->wait_for(1));
  r->fake->vanish();
  ASSERT_TRUE(eventually([&] { return !r->errors(0).empty(); }));
  const auto errors = r->errors(0);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].peer_rank, 1);
  EXPECT_NE(errors[0].peer.find("rank 1"), std::string::npos) << errors[0].peer;
  EXPECT_TRUE(errors[0].fatal);
  EXPECT_NE(errors[0].what.find(TypeParam::kLost), std::string::npos) << errors[0].what;
  EXPECT_TRUE(eventually([&] { return r->system(0).stopped(); }));  // after the report
  EXPECT_EQ(r->send(0, 1, numbered(0, 1)).status, SendStatus::target_stopped);
  r->close(0);
}

// A forward tensor f32[2, 3] from endpoint 1 to 0, minibatch 5, as a whole wire frame.
Bytes forward_frame() {
  const Tensor t = f32_tensor({2, 3}, 1.f);
  return encode_wire_message(
      kJob, 1, 0, make_message(act::ForwardTensor{act::TensorMeta::of(t)}, {t}, tag_of(5, 0, 2, 1)),
      act::pipeline_wire_types());
}

void put_u64(Bytes& f, std::size_t at, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) f[at + i] = static_cast<std::byte>((v >> (8 * i)) & 0xff);
}

// Offsets in forward_frame(): prefix 16, fixed meta 44 (job at 16, from at 24, type at 32),
// body 24, then the tensor.
constexpr std::size_t kJobAt = 16, kFromAt = 24, kTypeAt = 32, kTensorAt = 16 + 44 + 24;

struct Refusal {
  std::string name;
  std::function<void(Bytes&)> edit;
  std::string expected;  // in the error's text
};

TYPED_TEST(ChannelConformance, AMalformedFrameFromAPeerStopsTheRunNamingPeerAndTag) {
  SKIP_WITHOUT_NETWORK();
  const std::vector<Refusal> cases = {
      {"dtype", [](Bytes& f) { f[kTensorAt + 1] = std::byte{7}; }, "not a dtype"},
      {"type", [](Bytes& f) { f[kTypeAt] ^= std::byte{1}; }, "not a known type"},
      {"job", [](Bytes& f) { put_u64(f, kJobAt, kJob + 1); }, "field 'job'"},
      {"shape", [](Bytes& f) { put_u64(f, kTensorAt + 4, 3); }, "f32[3, 3]"},
      {"owner", [](Bytes& f) { f[kFromAt] = std::byte{2}; },
       "endpoint 2 does not belong to this peer"},
  };
  for (const Refusal& c : cases) {
    SCOPED_TRACE(c.name);
    auto r = TypeParam::with_fake();
    // A good message is delivered ...
    r->fake->send(forward_frame());
    ASSERT_TRUE(r->at(0)->wait_for(1));
    // ... a bad one stops the run.
    Bytes bad = forward_frame();
    c.edit(bad);
    r->fake->send(bad);
    ASSERT_TRUE(eventually([&] { return !r->errors(0).empty(); }));
    const auto errors = r->errors(0);
    ASSERT_EQ(errors.size(), 1u);
    EXPECT_EQ(errors[0].peer_rank, 1);
    EXPECT_NE(errors[0].peer.find("rank 1"), std::string::npos) << errors[0].peer;
    EXPECT_TRUE(errors[0].fatal);
    EXPECT_NE(errors[0].what.find(c.expected), std::string::npos) << errors[0].what;
    // Errors found after the envelope name the message's type and tag.
    const std::string from = c.name == "owner" ? "2" : "1";
    const std::string type = c.name == "type" ? "" : "'pipeline.forward_tensor' ";
    EXPECT_NE(errors[0].what.find(type + "from endpoint " + from + " to 0, minibatch 5"),
              std::string::npos)
        << errors[0].what;
    EXPECT_TRUE(eventually([&] { return r->system(0).stopped(); }));  // after the report
    // Later sends to that peer fail; what it sends is not delivered.
    EXPECT_EQ(r->send(0, 1, numbered(0, 1)).status, SendStatus::target_stopped);
    r->fake->send(forward_frame(), /*gone_ok=*/true);
    r->close(0);
    EXPECT_EQ(r->stats(0)->delivered, 1u);
    EXPECT_EQ(r->errors(0).size(), 1u);
  }
}

TYPED_TEST(ChannelConformance, GarbageFromAStrangerIsRefusedAndTheRunGoesOn) {
  SKIP_WITHOUT_NETWORK();
  auto r = this->connected();
  r->send_garbage(0);
  const auto errors = r->errors(0);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].peer_rank, -1);
  EXPECT_FALSE(errors[0].fatal);
  EXPECT_NE(errors[0].what.find("magic"), std::string::npos) << errors[0].what;
  // A stranger does not stop the run: the peers still talk.
  EXPECT_FALSE(r->system(0).stopped());
  ASSERT_TRUE(r->send(1, 0, numbered(1, 0)).ok());
  ASSERT_TRUE(r->send(0, 1, numbered(0, 0)).ok());
  ASSERT_TRUE(r->at(0)->wait_for(1));
  ASSERT_TRUE(r->at(1)->wait_for(1));
  r->close_both();
  EXPECT_TRUE(r->errors(1).empty());
}

// Sends bulky(from, 0), bulky(from, 1), ... to `to` on its own thread until joined or a send
// fails; counts the sends that returned ok, and checks that a failed one failed as a closed
// channel's does.
class Sender {
 public:
  Sender(Ranks& r, Endpoint from, Endpoint to)
      : thread_([this, &r, from, to] {
          for (std::int64_t i = 0; !stop_.load(); ++i) {
            const SendResult res = r.send(from, to, bulky(from, i));
            if (!res.ok()) {
              EXPECT_TRUE(res.status == SendStatus::system_stopped ||
                          res.status == SendStatus::target_stopped)
                  << to_string(res.status);
              return;
            }
            ok_.fetch_add(1);
          }
        }) {}
  ~Sender() { join(); }
  std::int64_t ok() const { return ok_.load(); }
  void join() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
  }

 private:
  std::atomic<bool> stop_{false};
  std::atomic<std::int64_t> ok_{0};
  std::thread thread_;
};

TYPED_TEST(ChannelConformance, ClosingWhileSendingReturnsAndDeliversNothingTwice) {
  auto r = this->connected();
  {
    Sender there(*r, 0, 1);
    Sender back(*r, 3, 2);
    ASSERT_TRUE(r->at(1)->wait_for(8));
    ASSERT_TRUE(r->at(2)->wait_for(8));
    r->close(0);
    // Closed: sends fail instead of vanishing; closing again is harmless.
    EXPECT_EQ(r->send(0, 1, numbered(0, 0)).status, SendStatus::system_stopped);
    r->close(0);
    there.join();
    back.join();
    r->close(1);
    // What rank 0 accepted before it closed was written before its goodbye.
    if (TypeParam::kNetwork) {
      EXPECT_EQ(r->stats(1)->delivered, static_cast<std::uint64_t>(there.ok()));
    }
  }
  // Each side got a prefix of what the other sent, in order, none twice.
  expect_in_order(r->at(1)->take(), {0}, -1, bulky);
  expect_in_order(r->at(2)->take(), {3}, -1, bulky);
  for (int rank = 0; rank < 2; ++rank) {
    for (const auto& e : r->errors(rank))
      ADD_FAILURE() << "rank " << rank << ": " << e.peer << ": " << e.what;
  }
}

TYPED_TEST(ChannelConformance, MessagesQueuedBeforeThePeerReadsAllArriveInOrder) {
  auto r = TypeParam::pair();
  constexpr std::int64_t kBatch = 16;
  std::int64_t sent = 0;
  const auto send_batch = [&] {
    for (std::int64_t i = 0; i < kBatch; ++i, ++sent) {
      ASSERT_TRUE(r->send(0, 1, bulky(0, sent)).ok());
      ASSERT_TRUE(r->send(3, 2, bulky(3, sent)).ok());
    }
  };
  // Before any rank started: the sends wait in their queues.
  r->at(1)->set_gate(false);
  r->at(2)->set_gate(false);
  send_batch();
  // Rank 0 started, rank 1 not yet: nobody reads rank 0's messages.
  r->start(0);
  send_batch();
  // Both started, the receiving actors still not taking any message.
  r->start(1);
  ASSERT_TRUE(r->connected());
  send_batch();
  r->at(1)->set_gate(true);
  r->at(2)->set_gate(true);
  ASSERT_TRUE(r->at(1)->wait_for(static_cast<std::size_t>(sent)));
  ASSERT_TRUE(r->at(2)->wait_for(static_cast<std::size_t>(sent)));
  expect_in_order(r->at(1)->take(), {0}, sent, bulky);
  expect_in_order(r->at(2)->take(), {3}, sent, bulky);
  r->close_both();
  EXPECT_TRUE(r->errors(0).empty());
  EXPECT_TRUE(r->errors(1).empty());
}

}  // namespace
}  // namespace tandem::transport

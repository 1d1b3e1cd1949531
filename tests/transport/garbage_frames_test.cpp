// Hostile input on the two live ports of a job, from raw sockets: the control plane's
// (Rendezvous rank 0) and the data plane's (TcpChannel). Each stranger sends one kind of bad
// input (random bytes from a fixed seed, a frame cut short then closed, a frame announcing a
// huge body, a valid frame of another job) and must be refused with its own error naming it and
// why, one error per connection, with nothing allocated for the announced size and no crash;
// then the legitimate job must go on as if nothing happened: ranks join during and after the
// garbage, two channels still exchange tensors. Strangers come one at a time and each waits for
// its error, so the errors are checked in order; every wait has a generous timeout and nothing
// asserts on timing.
#include <gtest/gtest.h>

#include <array>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/read.hpp>
#include <asio/write.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "collector_actor.hpp"
#include "raw_joiner.hpp"
#include "runtime/actor_system.hpp"
#include "runtime/scheduler.hpp"
#include "transport/control_frame.hpp"
#include "transport/rendezvous.hpp"
#include "transport/tcp_channel.hpp"
#include "transport/wire_message.hpp"
#include "wire_test_helpers.hpp"

namespace tandem::transport {
namespace {

using namespace std::chrono_literals;
using asio::ip::tcp;
using Bytes = std::vector<std::byte>;

constexpr auto kLong = 20s;
constexpr std::uint32_t kSeed = 20261123;
const std::string kToken = "garbage-test-token";
constexpr std::uint64_t kJob = 0x5eed0b0e;

// The data plane's credentials: a job nonce whose job id is kJob, and the token.
JobCredentials credentials() {
  return testing::fixed_credentials(kJob, kToken);
}
// The data plane's limit in these tests: a tensor announced above it is refused from its head.
constexpr std::uint64_t kMaxData = 64u << 20;

void expect_contains(const std::string& text, std::string_view part) {
  EXPECT_NE(text.find(part), std::string::npos) << "'" << text << "' lacks '" << part << "'";
}

Bytes random_bytes(std::mt19937& rng, std::size_t n) {
  Bytes out(n);
  for (auto& b : out) b = static_cast<std::byte>(rng());
  return out;
}

// Connects to `port`, writes `bytes`, half-closes and reads until the other side closes (or
// kLong passes); returns what came back. A side that refuses early may reset the connection
// while this one still writes: the write's error is expected then, not a failure.
Bytes talk(std::uint16_t port, const Bytes& bytes) {
  asio::io_context io;
  tcp::socket s(io);
  s.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
  std::error_code ec;
  if (!bytes.empty()) asio::write(s, asio::buffer(bytes), ec);
  s.shutdown(tcp::socket::shutdown_send, ec);
  Bytes got;
  std::array<std::byte, 4096> buf{};
  std::function<void()> read = [&] {
    s.async_read_some(asio::buffer(buf), [&](std::error_code e, std::size_t n) {
      got.insert(got.end(), buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(n));
      if (!e) read();
    });
  };
  read();
  io.run_for(kLong);
  return got;
}

// Polls a growing list (no callback to wait on) until it holds at least `n` entries.
template <class F>
auto wait_size(F list, std::size_t n) {
  const auto deadline = std::chrono::steady_clock::now() + kLong;
  auto got = list();
  while (got.size() < n && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(5ms);
    got = list();
  }
  return got;
}

// --- the control plane ---

RendezvousOptions rendezvous_options(int rank, int world, std::uint16_t port) {
  RendezvousOptions o;
  o.rank = rank;
  o.world_size = world;
  o.master_host = "127.0.0.1";
  o.master_port = port;
  o.job_token = kToken;
  o.host_name = "host-" + std::to_string(rank);
  // Far above the interval: a loaded machine must not lose a rank.
  o.heartbeat_interval = 100ms;
  o.heartbeat_timeout = 5000ms;
  return o;
}

// Through the handshake as `rank` of `world`, then a hello proved with `token`; returns what
// rank 0 sent after its challenge.
Bytes proven_hello(std::uint16_t port, std::uint32_t rank, std::uint32_t world,
                   std::string_view token = kToken) {
  testing::RawJoiner j(port, JoinRequest{rank, world, fresh_nonce()});
  j.challenge();
  j.write(encode_frame(j.hello(PeerInfo{rank, "stranger", {}, ""}, token)));
  return j.finish();
}

std::string refusal_in(const Bytes& reply) {
  try {
    const ControlMessage m = decode_frame(reply);
    const auto* r = std::get_if<Refused>(&m);
    return r ? r->reason : "(not a refusal: " + std::string(frame_type_name(frame_type(m))) + ")";
  } catch (const FrameError& e) {
    return std::string("(no refusal frame: ") + e.what() + ")";
  }
}

// One stranger on rank 0's port: `bytes`, then rank 0 must log exactly one more refusal that
// contains `reason`; `answered` says whether rank 0 also tells the stranger why (it does for
// every frame it could read; a connection closed mid-frame gets no answer).
class ControlStrangers {
 public:
  explicit ControlStrangers(const Rendezvous& r0) : r0_(r0) {}

  void send(const Bytes& bytes, std::string_view reason, bool answered) {
    check(talk(r0_.port(), bytes), reason, answered);
  }
  // `reply`: what a stranger that is gone got back.
  void check(const Bytes& reply, std::string_view reason, bool answered) {
    SCOPED_TRACE("stranger #" + std::to_string(count_) + " expecting '" + std::string(reason) +
                 "'");
    ++count_;
    const auto refused = wait_size([this] { return r0_.refused(); }, count_);
    ASSERT_EQ(refused.size(), count_) << "one refusal per connection";
    expect_contains(refused.back(), "from 127.0.0.1:");
    expect_contains(refused.back(), reason);
    if (answered) {
      expect_contains(refusal_in(reply), reason);
    } else {
      EXPECT_TRUE(reply.empty()) << refusal_in(reply);
    }
  }
  std::size_t count() const { return count_; }
  std::uint16_t port() const { return r0_.port(); }

 private:
  const Rendezvous& r0_;
  std::size_t count_ = 0;
};

// Every kind of garbage a stranger can send before registering.
void control_garbage(ControlStrangers& s, std::mt19937& rng, std::uint32_t world) {
  // Random bytes: a header is all rank 0 reads before refusing them.
  for (int i = 0; i < 12; ++i) {
    Bytes junk = random_bytes(rng, kFrameHeaderSize + rng() % 8192);
    if (junk[0] == std::byte{0x54}) junk[0] = std::byte{0};  // never the magic by chance
    s.send(junk, "bad magic", true);
  }
  // Random bytes behind a valid magic and version: an unknown type or an oversized payload.
  for (int i = 0; i < 8; ++i) {
    Bytes junk = encode_frame(Heartbeat{});
    junk[4] = std::byte{static_cast<unsigned char>(kControlVersion)};
    junk[5] = std::byte{0};
    junk[6] = std::byte{static_cast<unsigned char>(15 + rng() % 200)};  // type 15..214
    const Bytes tail = random_bytes(rng, 4 + rng() % 512);
    std::copy(tail.begin(), tail.begin() + 4, junk.begin() + 8);
    junk.insert(junk.end(), tail.begin() + 4, tail.end());
    s.send(junk, "unknown frame type", true);
  }
  // A join request cut short, inside the header and inside the payload, then closed: nothing
  // to answer, but the refusal says where it was cut.
  const Bytes full = encode_frame(JoinRequest{1, world, fresh_nonce()});
  for (const std::size_t cut : {std::size_t{1}, std::size_t{7}, kFrameHeaderSize - 1}) {
    s.send(Bytes(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(cut)),
           "closed mid-frame (" + std::to_string(cut) + " of 12 header bytes)", false);
  }
  for (const std::size_t cut : {kFrameHeaderSize, kFrameHeaderSize + 9, full.size() - 1}) {
    s.send(Bytes(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(cut)),
           "closed mid-frame (" + std::to_string(cut - kFrameHeaderSize) + " of " +
               std::to_string(full.size() - kFrameHeaderSize) +
               " bytes of a 'join-request' payload)",
           false);
  }
  // Headers announcing huge payloads: refused from the header, before any allocation.
  for (const std::uint32_t size : {kMaxHelloPayload + 1, kMaxFramePayload, 0xffffffffu}) {
    Bytes huge(full.begin(), full.begin() + kFrameHeaderSize);
    for (int i = 0; i < 4; ++i) huge[8 + i] = static_cast<std::byte>((size >> (8 * i)) & 0xff);
    s.send(huge, "payload of " + std::to_string(size) + " bytes exceeds the limit", true);
  }
  // Valid frames, but not in the order of a join.
  s.send(encode_frame(Hello{PeerInfo{1, "stranger", {}, ""}, {}}), "expected a join request first",
         true);
  // Proven frames of another job: a wrong token, none, another world.
  const std::uint16_t port = s.port();
  s.check(proven_hello(port, 1, world, "another-job"), "did not prove it holds the job token",
          true);
  s.check(proven_hello(port, 1, world, ""), "did not prove it holds the job token", true);
  s.check(proven_hello(port, 1, world + 3), "says the world has", true);
}

TEST(GarbageFrames, RendezvousRefusesEachStrangerAndTheJobGoesOn) {
  constexpr int kWorld = 3;
  std::mt19937 rng(kSeed);
  Rendezvous r0(rendezvous_options(0, kWorld, 0));
  const std::uint16_t port = r0.port();
  ControlStrangers strangers(r0);

  // Rank 1 registers, and waits for rank 2 while the garbage comes.
  Rendezvous r1(rendezvous_options(1, kWorld, port));
  std::string r1_error;
  std::thread r1_join([&] {
    try {
      r1.join(kLong + kLong);
    } catch (const std::exception& e) {
      r1_error = e.what();
    }
  });
  control_garbage(strangers, rng, kWorld);
  const std::size_t before_join = strangers.count();

  // The job is unharmed: rank 2 joins, everyone sees the table.
  Rendezvous r2(rendezvous_options(2, kWorld, port));
  std::string r0_error, r2_error;
  std::thread r0_join([&] {
    try {
      r0.join(kLong);
    } catch (const std::exception& e) {
      r0_error = e.what();
    }
  });
  try {
    r2.join(kLong);
  } catch (const std::exception& e) {
    r2_error = e.what();
  }
  r0_join.join();
  r1_join.join();
  ASSERT_EQ(r0_error, "");
  ASSERT_EQ(r1_error, "");
  ASSERT_EQ(r2_error, "");
  EXPECT_EQ(r2.peers().size(), 3u);
  EXPECT_EQ(r1.peers()[2].host, "host-2");

  // Garbage while the job runs: still refused, still harmless.
  {
    Bytes junk = random_bytes(rng, 3000);
    junk[0] = std::byte{0};
    const Bytes reply = talk(port, junk);
    expect_contains(refusal_in(reply), "bad magic");
    const Bytes claim = proven_hello(port, 2, kWorld);
    expect_contains(refusal_in(claim), "rank 2 has already registered");
    const auto refused = wait_size([&] { return r0.refused(); }, before_join + 2);
    EXPECT_EQ(refused.size(), before_join + 2);
  }
  std::vector<std::string> errors(kWorld);
  std::vector<std::thread> ranks;
  Rendezvous* all[] = {&r0, &r1, &r2};
  for (int r = 0; r < kWorld; ++r) {
    ranks.emplace_back([&, r] {
      try {
        all[r]->barrier("after garbage", kLong);
        all[r]->set("from-" + std::to_string(r), {static_cast<std::byte>(r)});
        const Bytes v = all[r]->get("from-" + std::to_string((r + 1) % kWorld), kLong);
        if (v != Bytes{static_cast<std::byte>((r + 1) % kWorld)}) errors[r] = "wrong value";
        all[r]->barrier("done", kLong);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : ranks) t.join();
  for (int r = 0; r < kWorld; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
  {
    std::vector<std::thread> leave;
    for (int r = 1; r < kWorld; ++r) leave.emplace_back([&, r] { all[r]->shutdown(kLong); });
    r0.shutdown(kLong);
    for (auto& t : leave) t.join();
  }
  EXPECT_TRUE(r0.lost().empty());
  EXPECT_TRUE(r1.lost().empty());
  EXPECT_TRUE(r2.lost().empty());
}

// --- the data plane ---

struct Payload {
  static constexpr std::string_view kName = "garbage_test.payload";
  static constexpr Lane kLane = Lane::forward;
  std::uint32_t seq;
};

WireTypes wire_types() {
  WireTypes t;
  t.add<Payload>();
  return t;
}

// Byte offsets in a frame of one Payload with one tensor.
constexpr std::size_t kDataBytesAt = 8;  // in the prefix
constexpr std::size_t kTensorAt = kWirePrefixBytes + 44 + sizeof(Payload);

Tensor f32_tensor(Shape shape, float base) {
  Tensor t = Tensor::empty(std::move(shape), DType::f32);
  for (std::int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = base + 0.5f * i;
  return t;
}

void put_u64(Bytes& b, std::size_t at, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) b[at + i] = static_cast<std::byte>((v >> (8 * i)) & 0xff);
}

using testing::Collector;

TcpChannelOptions channel_options(int rank) {
  TcpChannelOptions o;
  o.credentials = credentials();
  o.rank = rank;
  o.types = wire_types();
  o.max_data_bytes = kMaxData;
  o.close_linger = 2s;
  // A peer that sends garbage is cut off and reported; this test then checks that the other
  // peer's traffic is untouched, which a stopped system would hide.
  o.stop_system_on_error = false;
  return o;
}

// Plays a peer rank by hand on A's port: a valid handshake (hello and proof both ways), then
// whatever the test writes.
class FakePeer {
 public:
  FakePeer(std::uint16_t port, std::uint32_t rank) : socket_(io_) {
    socket_.connect({asio::ip::make_address("127.0.0.1"), port});
    testing::tcp_client_handshake(socket_, credentials(), rank, 0);
  }
  void write(const Bytes& bytes) {
    std::error_code ec;
    asio::write(socket_, asio::buffer(bytes), ec);
  }

 private:
  asio::io_context io_;
  tcp::socket socket_;
};

// One stranger on a channel's port: exactly one more error, from an unidentified connection,
// whose text contains `what`.
class DataStrangers {
 public:
  explicit DataStrangers(const TcpChannel& ch) : ch_(ch), count_(ch.errors().size()) {}

  void send(const Bytes& bytes, std::string_view what) {
    SCOPED_TRACE("stranger expecting '" + std::string(what) + "'");
    (void)talk(ch_.port(), bytes);
    ++count_;
    const auto errors = wait_size([this] { return ch_.errors(); }, count_);
    ASSERT_EQ(errors.size(), count_) << "one error per connection";
    EXPECT_EQ(errors.back().peer_rank, -1);
    expect_contains(errors.back().peer, "connection from 127.0.0.1:");
    expect_contains(errors.back().what, what);
  }

 private:
  const TcpChannel& ch_;
  std::size_t count_;
};

TEST(GarbageFrames, TcpChannelRefusesEachStrangerAndTwoChannelsStillExchange) {
  std::mt19937 rng(kSeed + 1);
  ActorSystem sys_a(make_work_sharing({.workers = 1}));
  ActorSystem sys_b(make_work_sharing({.workers = 1}));
  auto* a0 = sys_a.spawn<Collector>();
  auto* b1 = sys_b.spawn<Collector>();
  // A is rank 0; B is rank 1; ranks 2 and 3 are played by raw sockets.
  TcpChannel a(sys_a, channel_options(0));
  TcpChannel b(sys_b, channel_options(1));
  a.bind(0, a0);
  b.bind(1, b1);
  a.add_peer({1, "127.0.0.1", b.port()});
  a.add_peer({2, "127.0.0.1", 1});  // never dialled: higher ranks connect to rank 0
  a.add_peer({3, "127.0.0.1", 1});
  b.add_peer({0, "127.0.0.1", a.port()});
  a.route(1, 1);
  a.route(2, 2);
  a.route(3, 3);
  b.route(0, 0);
  a.start();
  b.start();
  ASSERT_TRUE(b.wait_connected(kLong));

  DataStrangers strangers(a);
  // Random bytes.
  for (int i = 0; i < 12; ++i) {
    Bytes junk = random_bytes(rng, kWirePrefixBytes + rng() % 8192);
    if (junk[0] == std::byte{0x54}) junk[0] = std::byte{0};  // never a magic by chance
    strangers.send(junk, "is not a Tandem data frame");
  }
  // A hello cut short, in its prefix and in its meta part, then closed.
  const Bytes full = encode_wire_hello({kJob, 2, 0, 1, {}});
  for (const std::size_t cut :
       {std::size_t{1}, std::size_t{9}, kWirePrefixBytes - 1, kWirePrefixBytes, full.size() - 1}) {
    strangers.send(Bytes(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(cut)),
                   "closed before its hello");
  }
  // A first frame announcing a huge body: a hello with data, a message before any hello.
  {
    Bytes huge = full;
    put_u64(huge, kDataBytesAt, std::uint64_t{1} << 40);
    strangers.send(huge, std::to_string(kWireHelloMetaBytes) +
                             " meta and 1099511627776 data bytes for a hello");
    Bytes message = Bytes(kWirePrefixBytes + 60);
    const Bytes head = encode_wire_head(kJob, 2, 0, make_message(Payload{1}), wire_types());
    std::copy(head.begin(), head.begin() + kWirePrefixBytes, message.begin());
    put_u64(message, kDataBytesAt, ~std::uint64_t{0});
    strangers.send(message, "the first frame is not a hello");
  }
  // Valid hellos that do not belong here: another job, a rank that is no peer, a rank already
  // connected (B).
  strangers.send(encode_wire_hello({kJob + 1, 2, 0, 1, {}}), "but this job is");
  strangers.send(encode_wire_hello({kJob, 9, 0, 1, {}}), "rank 9 is not a peer that connects here");
  strangers.send(encode_wire_hello({kJob, 1, 0, 1, {}}), "rank 1 is already connected");
  // Lanes after the first that do not fit the connection: before its lane 0, another count
  // of lanes than lane 0 said (B connects with the default two), a lane already connected.
  strangers.send(encode_wire_hello({kJob, 2, 1, 2, {}}), "lane 1 of rank 2 before its lane 0");
  strangers.send(encode_wire_hello({kJob, 1, 1, 3, {}}),
                 "lane 1 of 3 lanes, but rank 1's lane 0 said 2");
  strangers.send(encode_wire_hello({kJob, 1, 1, 2, {}}), "lane 1 of rank 1 is already connected");
  // A valid hello for a rank that may connect, then no proof, or one that does not check (made
  // without the token, or garbage in a proof's frame): the connection never becomes rank 2's.
  strangers.send(encode_wire_hello({kJob, 2, 0, 1, {}}), "closed before its proof");
  {
    Bytes forged = encode_wire_hello({kJob, 2, 0, 1, {}});
    const Bytes proof = encode_wire_proof({{}, {}});
    forged.insert(forged.end(), proof.begin(), proof.end());
    strangers.send(forged, "data-plane proof of rank 2 (lane 0) does not check");
    Bytes long_proof = encode_wire_hello({kJob, 2, 0, 1, {}});
    Bytes bad = encode_wire_proof({{}, {}});
    put_u64(bad, kDataBytesAt, std::uint64_t{1} << 40);
    long_proof.insert(long_proof.end(), bad.begin(), bad.end());
    strangers.send(long_proof, "meta and 1099511627776 data bytes for a proof");
  }

  // Peers that say a valid hello and then misbehave: cut off and named, B untouched.
  const std::size_t before_peers = a.errors().size();
  {
    // Rank 2 announces a 4 GiB tensor (consistent head, beyond the channel's limit): refused
    // from the head, before allocating it.
    FakePeer p2(a.port(), 2);
    const Tensor t = f32_tensor({2, 3}, 1.f);
    Bytes frame = encode_wire_message(kJob, 2, 0, make_message(Payload{7}, {t}), wire_types());
    frame.resize(kTensorAt + 4 + 2 * 8 + 8);  // the head alone: no data follows
    put_u64(frame, kTensorAt + 4, std::uint64_t{1} << 20);
    put_u64(frame, kTensorAt + 12, std::uint64_t{1} << 10);
    put_u64(frame, kTensorAt + 20, std::uint64_t{4} << 30);
    put_u64(frame, kDataBytesAt, std::uint64_t{4} << 30);
    p2.write(frame);
    const auto errors = wait_size([&] { return a.errors(); }, before_peers + 1);
    ASSERT_EQ(errors.size(), before_peers + 1);
    EXPECT_EQ(errors.back().peer_rank, 2);
    expect_contains(errors.back().peer, "rank 2");
    expect_contains(errors.back().what, "'garbage_test.payload' from endpoint 2 to 0");
    expect_contains(errors.back().what, "exceeds the limit of " + std::to_string(kMaxData));
  }
  {
    // Rank 3 sends a good message, then a frame cut in the middle of its tensor and closes.
    FakePeer p3(a.port(), 3);
    const Tensor t = f32_tensor({64, 16}, 2.f);
    const Bytes good = encode_wire_message(kJob, 3, 0, make_message(Payload{3}, {t}), wire_types());
    p3.write(good);
    ASSERT_TRUE(a0->wait_for(1));
    EXPECT_EQ(a0->take().front().as<Payload>().seq, 3u);
    Bytes cut = good;
    cut.resize(good.size() / 2);
    p3.write(cut);
  }
  {
    const auto errors = wait_size([&] { return a.errors(); }, before_peers + 2);
    ASSERT_EQ(errors.size(), before_peers + 2);
    EXPECT_EQ(errors.back().peer_rank, 3);
    expect_contains(errors.back().what, "reading the tensors of 'garbage_test.payload'");
  }
  EXPECT_EQ(a.send(0, 2, make_message(Payload{0})).status, SendStatus::target_stopped);

  // The legitimate peers still talk, both ways, tensors intact.
  EXPECT_FALSE(sys_a.stopped());
  const Tensor x = f32_tensor({128, 32}, -3.f);
  ASSERT_TRUE(a.send(0, 1, make_message(Payload{41}, {x})).ok());
  ASSERT_TRUE(b.send(1, 0, make_message(Payload{42}, {x})).ok());
  ASSERT_TRUE(b1->wait_for(1));
  ASSERT_TRUE(a0->wait_for(1));
  for (const Message& m : {b1->take().front(), a0->take().front()}) {
    ASSERT_EQ(m.tensors.size(), 1u);
    EXPECT_EQ(m.tensors[0].to_float_vector(), x.to_float_vector());
  }
  std::thread closer([&] { a.close(); });
  b.close();
  closer.join();
  EXPECT_TRUE(b.errors().empty());
  EXPECT_EQ(a.errors().size(), before_peers + 2);
}

}  // namespace
}  // namespace tandem::transport

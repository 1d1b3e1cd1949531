// The control plane with ranks as threads of one process over 127.0.0.1. Every blocking call
// has a timeout, so a failure shows as an error, never as a hang; no test asserts on timing
// beyond those generous bounds.
#include "transport/rendezvous.hpp"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <asio/io_context.hpp>
#include <asio/ip/host_name.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/read.hpp>
#include <asio/write.hpp>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "raw_joiner.hpp"
#include "runtime/log.hpp"

namespace tandem::transport {
namespace {

using namespace std::chrono_literals;
using asio::ip::tcp;

constexpr std::chrono::milliseconds kLong = 10s;
const std::string kToken = "job-secret";

std::vector<std::byte> bytes_of(std::string_view s) {
  const auto b = std::as_bytes(std::span(s.data(), s.size()));
  return {b.begin(), b.end()};
}

std::vector<std::byte> blob_of(int n) {
  return {std::byte{0xb1}, static_cast<std::byte>(n), std::byte{0}, static_cast<std::byte>(n * 7)};
}

RendezvousOptions options(int rank, int world, std::uint16_t port,
                          const std::string& token = kToken) {
  RendezvousOptions o;
  o.rank = rank;
  o.world_size = world;
  o.master_host = "127.0.0.1";
  o.master_port = port;
  o.job_token = token;
  o.host_name = "host-" + std::to_string(rank);
  o.blob = blob_of(rank);
  o.devices = "cpu:" + std::to_string(rank);
  // Far above the interval: a loaded machine (sanitizers, parallel tests) must not lose a rank.
  o.heartbeat_interval = 100ms;
  o.heartbeat_timeout = 5000ms;
  return o;
}

// Runs fn(rank) on a thread per rank; returns each rank's exception message, "" when none.
std::vector<std::string> run_ranks(const std::vector<int>& ranks,
                                   const std::function<void(int)>& fn) {
  std::vector<std::string> errors(ranks.size());
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    threads.emplace_back([&, i] {
      try {
        fn(ranks[i]);
      } catch (const std::exception& e) {
        errors[i] = e.what();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  return errors;
}

std::vector<int> all_ranks(int world) {
  std::vector<int> r(static_cast<std::size_t>(world));
  for (int i = 0; i < world; ++i) r[static_cast<std::size_t>(i)] = i;
  return r;
}

void expect_no_errors(const std::vector<std::string>& errors) {
  for (std::size_t i = 0; i < errors.size(); ++i) EXPECT_EQ(errors[i], "") << "thread " << i;
}

void expect_contains(const std::string& text, std::string_view part) {
  EXPECT_NE(text.find(part), std::string::npos) << "'" << text << "' lacks '" << part << "'";
}

// Collects the on_lost callbacks of one rank.
class LostWatcher {
 public:
  std::function<void(const LostRank&)> callback() {
    return [this](const LostRank& l) {
      std::lock_guard lock(mu_);
      seen_.push_back(l);
      cv_.notify_all();
    };
  }
  std::optional<LostRank> wait_for(int rank, std::chrono::milliseconds timeout) {
    std::unique_lock lock(mu_);
    std::optional<LostRank> found;
    cv_.wait_for(lock, timeout, [&] {
      for (const LostRank& l : seen_) {
        if (l.rank == rank) found = l;
      }
      return found.has_value();
    });
    return found;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<LostRank> seen_;
};

// A port nothing listens on (bound, read, released).
std::uint16_t free_port() {
  asio::io_context io;
  tcp::acceptor a(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  return a.local_endpoint().port();
}

// Sends raw bytes to the rendezvous port (half-closing after them when asked) and returns what
// comes back until the other side closes, or 10 s pass.
std::vector<std::byte> exchange(std::uint16_t port, const std::vector<std::byte>& bytes,
                                bool half_close) {
  asio::io_context io;
  tcp::socket s(io);
  s.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
  if (!bytes.empty()) asio::write(s, asio::buffer(bytes));
  if (half_close) s.shutdown(tcp::socket::shutdown_send);
  std::vector<std::byte> got;
  std::array<std::byte, 4096> buf{};
  std::function<void()> read = [&] {
    s.async_read_some(asio::buffer(buf), [&](std::error_code ec, std::size_t n) {
      got.insert(got.end(), buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(n));
      if (!ec) read();
    });
  };
  read();
  io.run_for(kLong);
  return got;
}

std::string refusal_in(const std::vector<std::byte>& reply) {
  const ControlMessage m = decode_frame(reply);
  const auto* r = std::get_if<Refused>(&m);
  return r ? r->reason : "(not a refusal: " + std::string(frame_type_name(frame_type(m))) + ")";
}

// rank 0's refusals once there are at least n of them (or after 10 s).
std::vector<std::string> refusals(const Rendezvous& r0, std::size_t n) {
  const auto deadline = std::chrono::steady_clock::now() + kLong;
  std::vector<std::string> r = r0.refused();
  while (r.size() < n && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(10ms);
    r = r0.refused();
  }
  return r;
}

JoinRequest join_request(std::uint32_t rank, std::uint32_t world) {
  return JoinRequest{rank, world, fresh_nonce()};
}

// A raw process through the whole handshake: join request, challenge, then `self`'s hello
// with a proof made with `token`; returns what rank 0 sent after the challenge.
std::vector<std::byte> raw_join(std::uint16_t port, std::uint32_t world, PeerInfo self,
                                const std::string& token = kToken) {
  testing::RawJoiner j(port, join_request(self.rank, world));
  j.challenge();
  j.write(encode_frame(j.hello(std::move(self), token)));
  return j.finish();
}

TEST(Rendezvous, FourRanksJoinSeeEachOtherBarrierAndShareKeys) {
  constexpr int kWorld = 4;
  std::vector<std::unique_ptr<Rendezvous>> rv(kWorld);
  rv[0] = std::make_unique<Rendezvous>(options(0, kWorld, 0));
  const std::uint16_t port = rv[0]->port();
  ASSERT_NE(port, 0);
  for (int r = 1; r < kWorld; ++r) rv[r] = std::make_unique<Rendezvous>(options(r, kWorld, port));

  expect_no_errors(run_ranks(all_ranks(kWorld), [&](int r) {
    Rendezvous& me = *rv[static_cast<std::size_t>(r)];
    const std::vector<PeerInfo>& peers = me.join(kLong);
    ASSERT_EQ(peers.size(), static_cast<std::size_t>(kWorld));
    for (int p = 0; p < kWorld; ++p) {
      const PeerInfo& info = peers[static_cast<std::size_t>(p)];
      EXPECT_EQ(info.rank, static_cast<std::uint32_t>(p));
      EXPECT_EQ(info.host, "host-" + std::to_string(p));
      EXPECT_EQ(info.blob, blob_of(p));
      EXPECT_EQ(info.devices, "cpu:" + std::to_string(p));
    }
    EXPECT_EQ(&me.peers(), &peers);
    me.barrier("joined", kLong);
    me.set("addr/" + std::to_string(r), blob_of(100 + r));
    for (int q = 0; q < kWorld; ++q) {
      EXPECT_EQ(me.get("addr/" + std::to_string(q), kLong), blob_of(100 + q));
    }
    // A name is reusable once its barrier completed; many in a row keep their order.
    me.barrier("joined", kLong);
    for (int i = 0; i < 20; ++i) me.barrier("step", kLong);
    // A later set replaces the value; a barrier orders it before the others' reads.
    if (r == 1) me.set("addr/1", blob_of(7));
    me.barrier("replaced", kLong);
    EXPECT_EQ(me.get("addr/1", kLong), blob_of(7));
    me.barrier("done", kLong);
    me.shutdown(kLong);
  }));
  for (const auto& r : rv) EXPECT_TRUE(r->lost().empty()) << "rank " << r->rank();
  EXPECT_TRUE(rv[0]->refused().empty());
}

TEST(Rendezvous, GetBlocksUntilAnotherRankSets) {
  Rendezvous r0(options(0, 2, 0));
  Rendezvous r1(options(1, 2, r0.port()));
  expect_no_errors(run_ranks({0, 1}, [&](int r) {
    Rendezvous& me = r == 0 ? r0 : r1;
    me.join(kLong);
    if (r == 1) {
      // Rank 0 sets the key only after this barrier, which rank 1 enters from another thread
      // a little after asking; so the get almost always waits at rank 0 for the set (and
      // must return the value either way).
      std::thread late([&] {
        std::this_thread::sleep_for(100ms);
        me.barrier("asked", kLong);
      });
      EXPECT_EQ(me.get("late", kLong), blob_of(42));
      late.join();
    } else {
      me.barrier("asked", kLong);
      me.set("late", blob_of(42));
    }
    me.barrier("done", kLong);
    me.shutdown(kLong);
  }));
}

TEST(Rendezvous, GetAndBarrierTimeOutWithAClearError) {
  Rendezvous r0(options(0, 2, 0));
  Rendezvous r1(options(1, 2, r0.port()));
  expect_no_errors(run_ranks({0, 1}, [&](int r) { (r == 0 ? r0 : r1).join(kLong); }));
  try {
    r1.get("never-set", 200ms);
    ADD_FAILURE() << "get of a key nobody sets returned";
  } catch (const RendezvousError& e) {
    expect_contains(e.what(), "get 'never-set' timed out");
  }
  try {
    r1.barrier("alone", 200ms);
    ADD_FAILURE() << "a barrier only rank 1 entered completed";
  } catch (const RendezvousError& e) {
    expect_contains(e.what(), "barrier 'alone' timed out");
  }
  expect_no_errors(run_ranks({0, 1}, [&](int r) { (r == 0 ? r0 : r1).shutdown(kLong); }));
}

TEST(Rendezvous, WrongOrMissingTokenIsRefusedAndTheJobStillCompletes) {
  Rendezvous r0(options(0, 2, 0));
  const std::uint16_t port = r0.port();
  // The rank finds out first: rank 0's proof does not check with its token.
  for (const std::string token : {"wrong-secret", ""}) {
    Rendezvous intruder(options(1, 2, port, token));
    try {
      intruder.join(kLong);
      ADD_FAILURE() << "a rank with token '" << token << "' joined";
    } catch (const RendezvousError& e) {
      expect_contains(e.what(), "rank 0 at 127.0.0.1:" + std::to_string(port) +
                                    " could not prove that it holds this job's token");
    }
  }
  Rendezvous r1(options(1, 2, port));
  expect_no_errors(run_ranks({0, 1}, [&](int r) {
    Rendezvous& me = r == 0 ? r0 : r1;
    me.join(kLong);
    me.barrier("ok", kLong);
    me.shutdown(kLong);
  }));
  const std::vector<std::string> refused = refusals(r0, 2);
  ASSERT_EQ(refused.size(), 2u);
  for (const std::string& r : refused) {
    expect_contains(r, "from 127.0.0.1:");
    expect_contains(r, "rank 1 refused rank 0: rank 1 could not verify rank 0's proof");
  }
  EXPECT_TRUE(r0.lost().empty());
  EXPECT_TRUE(r1.lost().empty());
}

TEST(Rendezvous, JobsWithoutATokenJoinWithTheEmptyOne) {
  Rendezvous r0(options(0, 2, 0, ""));
  Rendezvous r1(options(1, 2, r0.port(), ""));
  expect_no_errors(run_ranks({0, 1}, [&](int r) {
    Rendezvous& me = r == 0 ? r0 : r1;
    me.join(kLong);
    me.barrier("ok", kLong);
    me.shutdown(kLong);
  }));
  EXPECT_EQ(r1.job_nonce(), r0.job_nonce());
  EXPECT_EQ(r1.credentials().token, "");
}

TEST(Rendezvous, EveryRankLearnsTheJobNonceAndCredentials) {
  Rendezvous r0(options(0, 3, 0));
  Rendezvous r1(options(1, 3, r0.port()));
  Rendezvous r2(options(2, 3, r0.port()));
  const JobNonce job = r0.job_nonce();  // known from construction
  EXPECT_THROW((void)r1.job_nonce(), RendezvousError);
  EXPECT_THROW((void)r1.credentials(), RendezvousError);
  Rendezvous* all[] = {&r0, &r1, &r2};
  expect_no_errors(run_ranks({0, 1, 2}, [&](int r) { all[r]->join(kLong); }));
  for (Rendezvous* r : all) {
    EXPECT_EQ(r->job_nonce(), job) << "rank " << r->rank();
    const JobCredentials c = r->credentials();
    EXPECT_EQ(c.token, kToken);
    EXPECT_EQ(c.job, job);
  }
  // Another job draws another nonce.
  Rendezvous other(options(0, 2, 0));
  EXPECT_NE(other.job_nonce(), job);
  expect_no_errors(run_ranks({0, 1, 2}, [&](int r) { all[r]->shutdown(kLong); }));
}

// Plays rank 0 on a port: answers the join request with a challenge whose proof is made with
// `token`, then records every byte the rank sends until it closes.
class FakeRankZero {
 public:
  explicit FakeRankZero(std::string token)
      : acceptor_(io_, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)),
        token_(std::move(token)),
        thread_([this] { serve(); }) {}
  ~FakeRankZero() { thread_.join(); }
  std::uint16_t port() const { return acceptor_.local_endpoint().port(); }
  // Every frame the rank sent, the join request first; call after the rank gave up.
  std::vector<ControlMessage> frames() {
    thread_.join();
    thread_ = std::thread([] {});
    std::vector<ControlMessage> out;
    std::span<const std::byte> rest(got_);
    while (rest.size() >= kFrameHeaderSize) {
      const FrameHeader h = decode_header(rest.first(kFrameHeaderSize), kMaxFramePayload);
      out.push_back(decode_payload(h.type, rest.subspan(kFrameHeaderSize, h.payload_size)));
      rest = rest.subspan(kFrameHeaderSize + h.payload_size);
    }
    return out;
  }
  const std::vector<std::byte>& bytes() const { return got_; }

 private:
  void serve() {
    tcp::socket s(io_);
    acceptor_.accept(s);
    std::array<std::byte, kFrameHeaderSize> header{};
    asio::read(s, asio::buffer(header));
    const FrameHeader h = decode_header(header, kMaxHelloPayload);
    std::vector<std::byte> payload(h.payload_size);
    asio::read(s, asio::buffer(payload));
    got_.assign(header.begin(), header.end());
    got_.insert(got_.end(), payload.begin(), payload.end());
    const auto request = std::get<JoinRequest>(decode_payload(h.type, payload));
    Challenge ch{fresh_nonce(), fresh_nonce(), {}};
    ch.proof = make_proof(token_, {ProofPurpose::kControlAdmit, ch.job, 0, request.rank, 0,
                                   ch.server_nonce, request.client_nonce});
    asio::write(s, asio::buffer(encode_frame(ch)));
    std::array<std::byte, 4096> buf{};
    std::error_code ec;
    for (;;) {
      const std::size_t n = s.read_some(asio::buffer(buf), ec);
      got_.insert(got_.end(), buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(n));
      if (ec) break;
    }
  }

  asio::io_context io_;
  tcp::acceptor acceptor_;
  std::string token_;
  std::vector<std::byte> got_;
  std::thread thread_;
};

TEST(Rendezvous, ARankZeroThatCannotProveTheTokenLearnsNothing) {
  for (const std::string fake_token : {"another-job", ""}) {
    FakeRankZero fake(fake_token);
    RendezvousOptions o = options(1, 2, fake.port());
    o.blob = bytes_of("SECRET-UCX-ADDRESS");
    Rendezvous r1(o);
    try {
      r1.join(kLong);
      ADD_FAILURE() << "joined a rank 0 that used token '" << fake_token << "'";
    } catch (const RendezvousError& e) {
      expect_contains(e.what(), "rank 0 at 127.0.0.1:" + std::to_string(fake.port()) +
                                    " could not prove that it holds this job's token");
    }
    const std::vector<ControlMessage> frames = fake.frames();
    // The join request (rank, world, a nonce) and why it was refused; no hello, no host, blob or
    // devices, nothing made with the token.
    ASSERT_EQ(frames.size(), 2u);
    const auto& request = std::get<JoinRequest>(frames[0]);
    EXPECT_EQ(request.rank, 1u);
    EXPECT_EQ(request.world_size, 2u);
    expect_contains(std::get<Refused>(frames[1]).reason, "could not verify rank 0's proof");
    const std::string seen(reinterpret_cast<const char*>(fake.bytes().data()), fake.bytes().size());
    EXPECT_EQ(seen.find("host-1"), std::string::npos);
    EXPECT_EQ(seen.find("SECRET-UCX-ADDRESS"), std::string::npos);
    EXPECT_EQ(seen.find("cpu:1"), std::string::npos);
  }
}

TEST(Rendezvous, AWrongProofOrAReplayedHelloIsRefusedAndTheJobGoesOn) {
  Rendezvous old_job(options(0, 2, 0));
  const JoinRequest request = join_request(1, 2);
  // A hello rank 1 made for the old job, recorded by someone on the path.
  Hello recorded;
  {
    testing::RawJoiner j(old_job.port(), request);
    j.challenge();
    recorded = j.hello(PeerInfo{1, "raw", {}, ""}, kToken);
  }
  Rendezvous r0(options(0, 2, 0));
  const std::uint16_t port = r0.port();
  // Replayed to the new job, and to the old one on a new connection, with the same client nonce:
  // the server nonce (and the new job's nonce) differ, so the proof fails.
  for (const std::uint16_t target : {port, old_job.port()}) {
    testing::RawJoiner j(target, request);
    j.challenge();
    j.write(encode_frame(recorded));
    expect_contains(refusal_in(j.finish()), "rank 1 did not prove it holds the job token");
  }
  // A proof made with another token, or none.
  for (const std::string token : {"wrong", ""}) {
    expect_contains(refusal_in(raw_join(port, 2, PeerInfo{1, "raw", {}, ""}, token)),
                    "rank 1 did not prove it holds the job token");
  }
  const std::vector<std::string> refused = refusals(r0, 3);
  ASSERT_EQ(refused.size(), 3u);
  for (const std::string& r : refused) {
    expect_contains(r, "from 127.0.0.1:");
    expect_contains(r, "did not prove it holds the job token");
  }
  // The same exchange with the right token against this connection's challenge registers.
  testing::RawJoiner j(port, join_request(1, 2));
  j.challenge();
  j.write(encode_frame(j.hello(PeerInfo{1, "raw", {}, ""}, kToken)));
  const ControlMessage table = j.read_frame();
  ASSERT_TRUE(std::holds_alternative<PeerTable>(table));
  EXPECT_EQ(std::get<PeerTable>(table).peers.at(1).host, "raw");
  EXPECT_EQ(r0.join(kLong).size(), 2u);
}

TEST(Rendezvous, DuplicateRankAndWorldMismatchAreRefused) {
  Rendezvous r0(options(0, 3, 0));
  const std::uint16_t port = r0.port();
  {
    Rendezvous wrong_world(options(2, 5, port));
    try {
      wrong_world.join(kLong);
      ADD_FAILURE() << "a rank of a world of 5 joined a world of 3";
    } catch (const RendezvousError& e) {
      expect_contains(e.what(), "says the world has 5 ranks, rank 0 says 3");
    }
  }
  // Two processes claim rank 1: whichever registers first joins, the other is refused.
  Rendezvous a(options(1, 3, port));
  Rendezvous b(options(1, 3, port));
  Rendezvous r2(options(2, 3, port));
  Rendezvous* by_rank[] = {&r0, &a, &r2, &b};
  const std::vector<std::string> errors = run_ranks({0, 1, 2, 3}, [&](int i) {
    by_rank[i]->join(kLong);
    by_rank[i]->barrier("all", kLong);
  });
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[2], "");
  EXPECT_TRUE(errors[1].empty() != errors[3].empty()) << errors[1] << " / " << errors[3];
  expect_contains(errors[1] + errors[3], "rank 1 has already registered from 127.0.0.1:");
  expect_no_errors(run_ranks({0, 1, 2}, [&](int i) {
    Rendezvous& me = i == 0 ? r0 : i == 2 ? r2 : (errors[1].empty() ? a : b);
    me.shutdown(kLong);
  }));
}

TEST(Rendezvous, GarbageAndMalformedFramesOnTheListeningPortAreRefusedCleanly) {
  RendezvousOptions o0 = options(0, 2, 0);
  o0.hello_timeout = 300ms;
  Rendezvous r0(o0);
  const std::uint16_t port = r0.port();
  auto text = [](std::string_view s) {
    const auto b = std::as_bytes(std::span(s.data(), s.size()));
    return std::vector<std::byte>(b.begin(), b.end());
  };

  // Not our protocol at all.
  expect_contains(refusal_in(exchange(port, text("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), true)),
                  "bad magic");
  // A join request cut short, then the connection closed: nothing to answer.
  const std::vector<std::byte> request = encode_frame(join_request(1, 2));
  EXPECT_TRUE(exchange(port, {request.begin(), request.begin() + 20}, true).empty());
  // A header announcing a gigabyte: refused from the header, nothing allocated.
  std::vector<std::byte> huge = request;
  huge.resize(kFrameHeaderSize);
  huge[11] = std::byte{0x40};
  expect_contains(refusal_in(exchange(port, huge, true)), "exceeds the limit");
  // A valid frame, but not a join request.
  expect_contains(refusal_in(exchange(port, encode_frame(Heartbeat{}), true)),
                  "expected a join request first");
  // A proven hello naming a rank outside the world.
  expect_contains(refusal_in(raw_join(port, 2, PeerInfo{7, "raw", {}, ""})), "outside 1..1");
  // A hello whose text field is not printable.
  {
    testing::RawJoiner j(port, join_request(1, 2));
    j.challenge();
    Hello dirty = j.hello(PeerInfo{1, "raw", {}, ""}, kToken);
    dirty.self.host = "evil\x1b[2J";
    j.write(encode_frame(dirty));
    expect_contains(refusal_in(j.finish()), "non-printable");
  }
  // Silence: refused once the hello deadline passes.
  expect_contains(refusal_in(exchange(port, {}, false)), "no hello within");
  // Random bytes.
  std::vector<std::byte> noise(70000);
  for (std::size_t i = 0; i < noise.size(); ++i) noise[i] = static_cast<std::byte>(i * 131 + 7);
  EXPECT_FALSE(exchange(port, noise, true).empty());

  const std::vector<std::string> refused = refusals(r0, 8);
  ASSERT_EQ(refused.size(), 8u);
  expect_contains(refused[1], "connection closed mid-frame");

  // The job is unharmed: the real rank 1 joins.
  Rendezvous r1(options(1, 2, port));
  expect_no_errors(run_ranks({0, 1}, [&](int r) {
    Rendezvous& me = r == 0 ? r0 : r1;
    me.join(kLong);
    me.barrier("after garbage", kLong);
    me.shutdown(kLong);
  }));
  EXPECT_TRUE(r0.lost().empty());
}

TEST(Rendezvous, RankClosedAbruptlyIsReportedLostByEveryOtherRank) {
  constexpr int kWorld = 4;
  std::vector<LostWatcher> watchers(kWorld);
  std::vector<std::unique_ptr<Rendezvous>> rv(kWorld);
  for (int r = 0; r < kWorld; ++r) {
    RendezvousOptions o = options(r, kWorld, r == 0 ? 0 : rv[0]->port());
    o.on_lost = watchers[static_cast<std::size_t>(r)].callback();
    rv[static_cast<std::size_t>(r)] = std::make_unique<Rendezvous>(std::move(o));
  }
  expect_no_errors(run_ranks(all_ranks(kWorld), [&](int r) {
    rv[static_cast<std::size_t>(r)]->join(kLong);
    rv[static_cast<std::size_t>(r)]->barrier("up", kLong);
  }));
  rv[2].reset();  // no shutdown(): as if the process died
  for (const int r : {0, 1, 3}) {
    const std::optional<LostRank> lost = watchers[static_cast<std::size_t>(r)].wait_for(2, kLong);
    ASSERT_TRUE(lost.has_value()) << "rank " << r << " did not report rank 2";
    EXPECT_EQ(lost->host, "host-2");
    expect_contains(lost->reason, "without goodbye");
    ASSERT_EQ(rv[static_cast<std::size_t>(r)]->lost().size(), 1u);
    EXPECT_EQ(rv[static_cast<std::size_t>(r)]->lost()[0].rank, 2);
  }
  // Nothing waits on a lost rank: blocking calls fail at once, naming it.
  try {
    rv[1]->barrier("after loss", kLong);
    ADD_FAILURE() << "a barrier completed without rank 2";
  } catch (const RendezvousError& e) {
    expect_contains(e.what(), "rank 2 ('host-2') lost");
  }
  expect_no_errors(
      run_ranks({1, 3, 0}, [&](int r) { rv[static_cast<std::size_t>(r)]->shutdown(kLong); }));
}

TEST(Rendezvous, SilentRankIsDeclaredLostByHeartbeat) {
  constexpr int kWorld = 3;
  std::vector<LostWatcher> watchers(kWorld);
  std::vector<std::unique_ptr<Rendezvous>> rv(kWorld);
  for (int r = 0; r < kWorld; ++r) {
    RendezvousOptions o = options(r, kWorld, r == 0 ? 0 : rv[0]->port());
    o.on_lost = watchers[static_cast<std::size_t>(r)].callback();
    if (r == 2) {  // connected, but never heartbeats after its hello
      o.heartbeat_interval = 1h;
      o.heartbeat_timeout = 2h;
    } else {
      o.heartbeat_timeout = 3000ms;
    }
    rv[static_cast<std::size_t>(r)] = std::make_unique<Rendezvous>(std::move(o));
  }
  expect_no_errors(
      run_ranks(all_ranks(kWorld), [&](int r) { rv[static_cast<std::size_t>(r)]->join(kLong); }));
  for (const int r : {0, 1}) {
    const std::optional<LostRank> lost = watchers[static_cast<std::size_t>(r)].wait_for(2, kLong);
    ASSERT_TRUE(lost.has_value()) << "rank " << r << " did not report rank 2";
    EXPECT_EQ(lost->host, "host-2");
    expect_contains(lost->reason, "no heartbeat for");
  }
  // Rank 0 closed the silent rank's connection, which therefore reports rank 0 lost.
  const std::optional<LostRank> master = watchers[2].wait_for(0, kLong);
  ASSERT_TRUE(master.has_value());
  EXPECT_EQ(master->host, "host-0");
  expect_no_errors(run_ranks(all_ranks(kWorld),
                             [&](int r) { rv[static_cast<std::size_t>(r)]->shutdown(kLong); }));
}

TEST(Rendezvous, LostRankZeroIsReportedByEveryOtherRank) {
  constexpr int kWorld = 3;
  std::vector<LostWatcher> watchers(kWorld);
  std::vector<std::unique_ptr<Rendezvous>> rv(kWorld);
  for (int r = 0; r < kWorld; ++r) {
    RendezvousOptions o = options(r, kWorld, r == 0 ? 0 : rv[0]->port());
    o.on_lost = watchers[static_cast<std::size_t>(r)].callback();
    rv[static_cast<std::size_t>(r)] = std::make_unique<Rendezvous>(std::move(o));
  }
  expect_no_errors(
      run_ranks(all_ranks(kWorld), [&](int r) { rv[static_cast<std::size_t>(r)]->join(kLong); }));
  rv[0].reset();
  for (const int r : {1, 2}) {
    const std::optional<LostRank> lost = watchers[static_cast<std::size_t>(r)].wait_for(0, kLong);
    ASSERT_TRUE(lost.has_value()) << "rank " << r << " did not report rank 0";
    EXPECT_EQ(lost->host, "host-0");
    try {
      rv[static_cast<std::size_t>(r)]->get("anything", kLong);
      ADD_FAILURE() << "get returned after rank 0 was lost";
    } catch (const RendezvousError& e) {
      expect_contains(e.what(), "rank 0 ('host-0') lost");
    }
  }
  expect_no_errors(
      run_ranks({1, 2}, [&](int r) { rv[static_cast<std::size_t>(r)]->shutdown(kLong); }));
}

TEST(Rendezvous, JoinTimesOutNamingTheMissingRanks) {
  Rendezvous r0(options(0, 3, 0));
  Rendezvous r1(options(1, 3, r0.port()));
  const std::vector<std::string> errors = run_ranks({0, 1}, [&](int r) {
    if (r == 0) {
      r0.join(2000ms);
    } else {
      r1.join(kLong);
    }
  });
  // Rank 1 registers well within rank 0's deadline unless the machine stalls; then rank 0
  // names it too and refuses it late. Either way rank 1 hears from rank 0 rather than waiting
  // for its own deadline.
  expect_contains(errors[0], "join timed out on rank 0");
  expect_contains(errors[1], "refused rank 1");
  if (errors[0].find("rank(s) 2 never registered") != std::string::npos) {
    expect_contains(errors[1], "rank(s) 2 never registered");
  } else {
    expect_contains(errors[0], "rank(s) 1, 2 never registered");
  }
}

TEST(Rendezvous, UnreachableMasterTimesOut) {
  Rendezvous r1(options(1, 2, free_port()));
  try {
    r1.join(300ms);
    ADD_FAILURE() << "joined with no rank 0";
  } catch (const RendezvousError& e) {
    expect_contains(e.what(), "not reachable");
  }
}

TEST(Rendezvous, RanksStartedBeforeRankZeroRetryUntilItListens) {
  const std::uint16_t port = free_port();
  Rendezvous r1(options(1, 2, port));
  std::string error;
  std::thread joiner([&] {
    try {
      r1.join(kLong);
      r1.barrier("up", kLong);
    } catch (const std::exception& e) {
      error = e.what();
    }
  });
  Rendezvous r0(options(0, 2, port));
  EXPECT_EQ(r0.port(), port);
  EXPECT_EQ(r0.join(kLong).size(), 2u);
  r0.barrier("up", kLong);
  joiner.join();
  EXPECT_EQ(error, "");
  expect_no_errors(run_ranks({0, 1}, [&](int r) { (r == 0 ? r0 : r1).shutdown(kLong); }));
}

TEST(Rendezvous, AWorldOfOneNeedsNoNetwork) {
  RendezvousOptions o = options(0, 1, 0);
  o.master_host = "";
  Rendezvous r0(o);
  EXPECT_EQ(r0.port(), 0);
  ASSERT_EQ(r0.join(kLong).size(), 1u);
  EXPECT_EQ(r0.peers()[0].host, "host-0");
  r0.barrier("solo", kLong);
  r0.set("k", blob_of(1));
  EXPECT_EQ(r0.get("k", kLong), blob_of(1));
  r0.shutdown(kLong);
}

TEST(Rendezvous, MisuseIsRefusedWhereItHappens) {
  EXPECT_THROW(Rendezvous{options(2, 2, 0)}, std::invalid_argument);
  RendezvousOptions slow = options(0, 1, 0);
  slow.heartbeat_timeout = slow.heartbeat_interval;
  EXPECT_THROW(Rendezvous{slow}, std::invalid_argument);
  RendezvousOptions bad_host = options(0, 1, 0);
  bad_host.host_name = "a\tb";
  EXPECT_THROW(Rendezvous{bad_host}, std::invalid_argument);

  Rendezvous r1(options(1, 2, free_port()));
  EXPECT_THROW(r1.set("k", {}), RendezvousError);  // before join
  EXPECT_THROW(r1.peers(), RendezvousError);
  Rendezvous solo(options(0, 1, 0));
  solo.join(kLong);
  EXPECT_THROW(solo.set("", {}), std::invalid_argument);
  EXPECT_THROW(solo.set("line\nbreak", {}), std::invalid_argument);
  EXPECT_THROW(solo.barrier(std::string(kMaxTextField + 1, 'b'), kLong), std::invalid_argument);
  EXPECT_THROW(solo.set("big", std::vector<std::byte>(kMaxValueField + 1)), std::invalid_argument);
  solo.shutdown();
  EXPECT_THROW(solo.barrier("late", kLong), RendezvousError);
}

TEST(Rendezvous, TakenValuesLeaveNothingAtRankZero) {
  constexpr int kWorld = 3;
  constexpr std::size_t kValueBytes = 100u << 10;
  std::vector<std::unique_ptr<Rendezvous>> rv(kWorld);
  rv[0] = std::make_unique<Rendezvous>(options(0, kWorld, 0));
  for (int r = 1; r < kWorld; ++r) {
    rv[static_cast<std::size_t>(r)] =
        std::make_unique<Rendezvous>(options(r, kWorld, rv[0]->port()));
  }
  const auto value_of = [](int i) {
    std::vector<std::byte> v(kValueBytes, static_cast<std::byte>(i));
    v.back() = static_cast<std::byte>(i * 7);
    return v;
  };
  expect_no_errors(run_ranks(all_ranks(kWorld), [&](int r) {
    Rendezvous& me = *rv[static_cast<std::size_t>(r)];
    me.join(kLong);
    // Rank 0 itself sets, takes or watches in turn; values travel every way.
    for (int i = 0; i < 200; ++i) {
      const std::string key = "value/" + std::to_string(i);
      if (r == i % kWorld) me.set(key, value_of(i));
      if (r == (i + 1) % kWorld) {
        ASSERT_EQ(me.take(key, kLong), value_of(i)) << key;
      }
      me.barrier("taken", kLong);
      if (r == 0) {
        ASSERT_EQ(me.stored_bytes(), 0u) << "after " << key;
      }
      me.barrier("checked", kLong);
    }
    if (r != 0) {
      EXPECT_EQ(me.stored_bytes(), 0u);
    }
  }));
  expect_no_errors(
      run_ranks({1, 2, 0}, [&](int r) { rv[static_cast<std::size_t>(r)]->shutdown(kLong); }));
}

TEST(Rendezvous, ATakenKeyIsGoneAndItsBytesAreCounted) {
  Rendezvous r0(options(0, 2, 0));
  Rendezvous r1(options(1, 2, r0.port()));
  expect_no_errors(run_ranks({0, 1}, [&](int r) {
    Rendezvous& me = r == 0 ? r0 : r1;
    me.join(kLong);
    if (r == 1) me.set("key", blob_of(3));
    me.barrier("set", kLong);
    if (r == 0) {
      EXPECT_EQ(me.stored_bytes(), 3u + blob_of(3).size());
      EXPECT_EQ(me.get("key", kLong), blob_of(3));  // a get leaves it
      EXPECT_EQ(me.stored_bytes(), 3u + blob_of(3).size());
    }
    me.barrier("got", kLong);
    if (r == 1) {
      EXPECT_EQ(me.take("key", kLong), blob_of(3));
    }
    me.barrier("taken", kLong);
    if (r == 0) {
      EXPECT_EQ(me.stored_bytes(), 0u);
      try {
        me.get("key", 200ms);
        ADD_FAILURE() << "a taken key was still there";
      } catch (const RendezvousError& e) {
        expect_contains(e.what(), "get 'key' timed out");
      }
    }
    me.barrier("done", kLong);
    me.shutdown(kLong);
  }));
}

// A progress callback a test steers from outside.
struct FakeProgress {
  std::atomic<std::uint64_t> completed{0};
  std::atomic<bool> has_work{false};
  std::string waiting_for;
  std::function<RankProgress()> callback() {
    return [this] { return RankProgress{completed.load(), has_work.load(), waiting_for}; };
  }
};

constexpr std::string_view kWaitingFor = "stage 1 replica 0: B(4, 0..2) waits for F(4, 0..2)";

TEST(Rendezvous, AStalledRankEndsTheJobNamingWhatItWaitsFor) {
  constexpr int kWorld = 3;
  constexpr auto kStall = 2000ms;
  std::vector<LostWatcher> watchers(kWorld);
  std::vector<FakeProgress> progress(kWorld);
  progress[2].has_work = true;  // frozen with work: stalled
  progress[2].waiting_for = std::string(kWaitingFor);
  progress[1].has_work = true;  // moves slowly (below)
  // rank 0: idle throughout
  std::vector<std::unique_ptr<Rendezvous>> rv(kWorld);
  for (int r = 0; r < kWorld; ++r) {
    RendezvousOptions o = options(r, kWorld, r == 0 ? 0 : rv[0]->port());
    o.on_lost = watchers[static_cast<std::size_t>(r)].callback();
    o.progress = progress[static_cast<std::size_t>(r)].callback();
    o.stall_timeout = kStall;
    rv[static_cast<std::size_t>(r)] = std::make_unique<Rendezvous>(std::move(o));
  }
  std::atomic<bool> stop{false};
  std::thread slow([&] {
    while (!stop) {
      std::this_thread::sleep_for(200ms);
      ++progress[1].completed;
    }
  });
  expect_no_errors(
      run_ranks(all_ranks(kWorld), [&](int r) { rv[static_cast<std::size_t>(r)]->join(kLong); }));
  for (int r = 0; r < kWorld; ++r) {
    const std::optional<LostRank> lost =
        watchers[static_cast<std::size_t>(r)].wait_for(2, kStall + 8s);
    ASSERT_TRUE(lost.has_value()) << "rank " << r << " did not report the stalled rank 2";
    EXPECT_EQ(lost->host, "host-2");
    expect_contains(lost->reason, "stalled: no progress for");
    expect_contains(lost->reason, "with work waiting (" + std::string(kWaitingFor) + ")");
  }
  try {
    rv[1]->barrier("after stall", kLong);
    ADD_FAILURE() << "a barrier completed after rank 2 stalled";
  } catch (const RendezvousError& e) {
    expect_contains(e.what(), "rank 2 ('host-2') lost: stalled");
  }
  // The slow rank and the idle rank 0 are never reported, however long it takes.
  std::this_thread::sleep_for(2 * kStall);
  stop = true;
  slow.join();
  for (const int r : {0, 1}) {
    const std::vector<LostRank> lost = rv[static_cast<std::size_t>(r)]->lost();
    ASSERT_EQ(lost.size(), 1u) << "rank " << r;
    EXPECT_EQ(lost[0].rank, 2);
  }
  expect_no_errors(
      run_ranks({1, 2, 0}, [&](int r) { rv[static_cast<std::size_t>(r)]->shutdown(kLong); }));
}

TEST(Rendezvous, ProgressingAndIdleRanksAreNeverStalled) {
  constexpr int kWorld = 3;
  constexpr auto kStall = 1000ms;
  std::vector<FakeProgress> progress(kWorld);
  progress[0].has_work = true;  // rank 0 progresses too
  progress[1].has_work = true;
  progress[2].waiting_for = "nothing: idle between segments";  // has_work false, frozen
  std::vector<std::unique_ptr<Rendezvous>> rv(kWorld);
  for (int r = 0; r < kWorld; ++r) {
    RendezvousOptions o = options(r, kWorld, r == 0 ? 0 : rv[0]->port());
    o.progress = progress[static_cast<std::size_t>(r)].callback();
    o.stall_timeout = kStall;
    rv[static_cast<std::size_t>(r)] = std::make_unique<Rendezvous>(std::move(o));
  }
  std::atomic<bool> stop{false};
  std::thread moving([&] {
    while (!stop) {
      std::this_thread::sleep_for(100ms);
      ++progress[0].completed;
      ++progress[1].completed;
    }
  });
  expect_no_errors(run_ranks(all_ranks(kWorld), [&](int r) {
    Rendezvous& me = *rv[static_cast<std::size_t>(r)];
    me.join(kLong);
    std::this_thread::sleep_for(5 * kStall);
    me.barrier("still here", kLong);
  }));
  stop = true;
  moving.join();
  for (const auto& r : rv) EXPECT_TRUE(r->lost().empty()) << "rank " << r->rank();
  expect_no_errors(
      run_ranks({1, 2, 0}, [&](int r) { rv[static_cast<std::size_t>(r)]->shutdown(kLong); }));
}

TEST(Rendezvous, AStalledRankZeroReportsItselfToEveryRank) {
  constexpr int kWorld = 3;
  std::vector<LostWatcher> watchers(kWorld);
  FakeProgress frozen;
  frozen.has_work = true;
  frozen.waiting_for = "stage 0 replica 0: F(9, 0..2) waits for its input";
  std::vector<std::unique_ptr<Rendezvous>> rv(kWorld);
  for (int r = 0; r < kWorld; ++r) {
    RendezvousOptions o = options(r, kWorld, r == 0 ? 0 : rv[0]->port());
    o.on_lost = watchers[static_cast<std::size_t>(r)].callback();
    if (r == 0) o.progress = frozen.callback();
    o.stall_timeout = 1500ms;
    rv[static_cast<std::size_t>(r)] = std::make_unique<Rendezvous>(std::move(o));
  }
  expect_no_errors(
      run_ranks(all_ranks(kWorld), [&](int r) { rv[static_cast<std::size_t>(r)]->join(kLong); }));
  for (int r = 0; r < kWorld; ++r) {
    const std::optional<LostRank> lost = watchers[static_cast<std::size_t>(r)].wait_for(0, 10s);
    ASSERT_TRUE(lost.has_value()) << "rank " << r << " did not report the stalled rank 0";
    EXPECT_EQ(lost->host, "host-0");
    expect_contains(lost->reason, "stalled: no progress for");
    expect_contains(lost->reason, frozen.waiting_for);
  }
  try {
    rv[2]->get("anything", kLong);
    ADD_FAILURE() << "get returned after rank 0 stalled";
  } catch (const RendezvousError& e) {
    expect_contains(e.what(), "rank 0 ('host-0') lost: stalled");
  }
  expect_no_errors(
      run_ranks({1, 2, 0}, [&](int r) { rv[static_cast<std::size_t>(r)]->shutdown(kLong); }));
}

// Holds `count` idle connections to rank 0 from a child process, which has its own descriptor
// limit; the child exits (closing them) when this object goes.
class IdleFlood {
 public:
  IdleFlood(std::uint16_t port, int count) {
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(port);
    inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
    int up[2];
    int down[2];
    if (pipe(up) != 0 || pipe(down) != 0) throw std::runtime_error("pipe failed");
    pid_ = fork();
    if (pid_ == 0) {
      close(up[0]);
      close(down[1]);
      child(to, count, up[1], down[0]);
    }
    close(up[1]);
    close(down[0]);
    from_child_ = up[0];
    to_child_ = down[1];
  }
  ~IdleFlood() {
    close(to_child_);
    close(from_child_);
    int status = 0;
    waitpid(pid_, &status, 0);
  }
  // Waits until the child has made `n` connections (100 at a time); false if it failed.
  bool wait_connected(int n) {
    while (connected_ < n) {
      char c = 0;
      if (read(from_child_, &c, 1) != 1 || c != '+') return false;
      connected_ += 100;
    }
    return true;
  }

 private:
  // Only system calls here: the parent has threads, and this runs after fork().
  [[noreturn]] static void child(const sockaddr_in& to, int count, int up, int down) {
    rlimit limit{};
    getrlimit(RLIMIT_NOFILE, &limit);
    limit.rlim_cur = limit.rlim_max;
    setrlimit(RLIMIT_NOFILE, &limit);
    for (int i = 1; i <= count; ++i) {
      const int fd = socket(AF_INET, SOCK_STREAM, 0);
      if (fd < 0 || connect(fd, reinterpret_cast<const sockaddr*>(&to), sizeof to) != 0) {
        (void)!write(up, "E", 1);
        _exit(1);
      }
      if (i % 100 == 0) (void)!write(up, "+", 1);
    }
    char c = 0;
    (void)!read(down, &c, 1);  // until the parent closes its end
    _exit(0);
  }

  pid_t pid_ = -1;
  int from_child_ = -1;
  int to_child_ = -1;
  int connected_ = 0;
};

// Restores the descriptor limit it lowered.
class DescriptorLimit {
 public:
  explicit DescriptorLimit(rlim_t soft) {
    getrlimit(RLIMIT_NOFILE, &saved_);
    rlimit lowered = saved_;
    lowered.rlim_cur = std::min(soft, saved_.rlim_max);
    setrlimit(RLIMIT_NOFILE, &lowered);
  }
  ~DescriptorLimit() { setrlimit(RLIMIT_NOFILE, &saved_); }

 private:
  rlimit saved_{};
};

TEST(Rendezvous, AThousandIdleStrangersDoNotKeepTheJobOut) {
  constexpr int kWorld = 3;
  constexpr int kStrangers = 1100;
  // Rank 0's process may hold 256 descriptors: it can only keep up by dropping strangers, not
  // by outwaiting them (their hello deadline is far beyond the join's).
  const DescriptorLimit limit(256);
  std::vector<std::unique_ptr<Rendezvous>> rv(kWorld);
  RendezvousOptions o0 = options(0, kWorld, 0);
  o0.hello_timeout = 120s;
  rv[0] = std::make_unique<Rendezvous>(o0);
  const std::uint16_t port = rv[0]->port();
  for (int r = 1; r < kWorld; ++r) {
    rv[static_cast<std::size_t>(r)] = std::make_unique<Rendezvous>(options(r, kWorld, port));
  }
  IdleFlood flood(port, kStrangers);
  ASSERT_TRUE(flood.wait_connected(300));
  // The job joins while the strangers keep coming.
  std::thread rest([&] { EXPECT_TRUE(flood.wait_connected(kStrangers)); });
  expect_no_errors(run_ranks(all_ranks(kWorld), [&](int r) {
    Rendezvous& me = *rv[static_cast<std::size_t>(r)];
    me.join(30s);
    me.barrier("joined", kLong);
    me.set("k/" + std::to_string(r), blob_of(r));
    EXPECT_EQ(me.get("k/" + std::to_string((r + 1) % kWorld), kLong), blob_of((r + 1) % kWorld));
    me.barrier("done", kLong);
  }));
  rest.join();
  // All but the newest few were dropped, oldest first, each logged.
  const std::vector<std::string> refused = refusals(*rv[0], kStrangers - 16);
  const auto dropped = std::count_if(refused.begin(), refused.end(), [](const std::string& r) {
    return r.find("dropped, the oldest of more than 16 connections") != std::string::npos;
  });
  EXPECT_GE(dropped, kStrangers - 16);
  expect_no_errors(
      run_ranks({1, 2, 0}, [&](int r) { rv[static_cast<std::size_t>(r)]->shutdown(kLong); }));
}

// Captures what the library logs while it lives.
class LogCapture {
 public:
  LogCapture() {
    log::set_handler([this](log::Level, std::string_view line) {
      const std::lock_guard lock(mu_);
      lines_.emplace_back(line);
    });
  }
  ~LogCapture() { log::set_handler({}); }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;
  std::vector<std::string> lines_with(std::string_view part) const {
    const std::lock_guard lock(mu_);
    std::vector<std::string> out;
    for (const std::string& line : lines_) {
      if (line.find(part) != std::string::npos) out.push_back(line);
    }
    return out;
  }

 private:
  mutable std::mutex mu_;
  std::vector<std::string> lines_;
};

TEST(Rendezvous, ARankWaitingForRankZeroSaysSoUntilItJoins) {
  const LogCapture log;
  const std::uint16_t port = free_port();
  const std::string waiting = "waiting for rank 0 at 127.0.0.1:" + std::to_string(port) + " (";
  RendezvousOptions o1 = options(1, 2, port);
  o1.join_log_interval = 200ms;
  Rendezvous r1(o1);
  std::string error;
  std::thread joiner([&] {
    try {
      r1.join(kLong);
    } catch (const std::exception& e) {
      error = e.what();
    }
  });
  // Rank 0 comes late: by then the rank said a few times where it waits and why.
  const auto deadline = std::chrono::steady_clock::now() + kLong;
  while (log.lines_with(waiting).size() < 2 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(20ms);
  }
  const std::vector<std::string> before = log.lines_with(waiting);
  ASSERT_GE(before.size(), 2u);
  expect_contains(before[0], "s): not reachable yet (");
  Rendezvous r0(options(0, 2, port));
  r0.join(kLong);
  joiner.join();
  ASSERT_EQ(error, "");
  const std::size_t at_join = log.lines_with(waiting).size();
  std::this_thread::sleep_for(600ms);
  EXPECT_EQ(log.lines_with(waiting).size(), at_join) << "still waiting after the join";
  expect_no_errors(run_ranks({0, 1}, [&](int r) { (r == 0 ? r0 : r1).shutdown(kLong); }));
}

TEST(Rendezvous, RankZeroWarnsWhenItsHostNameIsLoopback) {
  const std::string name = asio::ip::host_name();
  asio::io_context io;
  std::error_code ec;
  const auto found = tcp::resolver(io).resolve(name, "0", ec);
  if (ec || found.empty() || !found.begin()->endpoint().address().is_loopback()) {
    GTEST_SKIP() << "this host's name '" << name << "' does not resolve to a loopback address";
  }
  const LogCapture log;
  {
    RendezvousOptions o = options(0, 2, 0);
    o.master_host = name;
    Rendezvous r0(o);
  }
  const std::vector<std::string> warned = log.lines_with("resolves to the loopback address");
  ASSERT_EQ(warned.size(), 1u);
  expect_contains(warned[0], "'" + name + "'");
  expect_contains(warned[0], "ranks on other hosts cannot reach it");
  expect_contains(warned[0], "MASTER_ADDR");
  // An address, "localhost", or a world of one say what they mean: no warning.
  for (const std::string host : {"127.0.0.1", "localhost"}) {
    RendezvousOptions o = options(0, 2, 0);
    o.master_host = host;
    Rendezvous r0(o);
  }
  RendezvousOptions solo = options(0, 1, 0);
  solo.master_host = name;
  Rendezvous r0(solo);
  EXPECT_EQ(log.lines_with("resolves to the loopback address").size(), 1u);
}

}  // namespace
}  // namespace tandem::transport

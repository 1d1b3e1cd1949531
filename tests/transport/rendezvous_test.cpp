// The control plane with ranks as threads of one process over 127.0.0.1. Every blocking call
// has a timeout, so a failure shows as an error, never as a hang; no test asserts on timing
// beyond those generous bounds.
#include "transport/rendezvous.hpp"

#include <gtest/gtest.h>

#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/write.hpp>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace tandem::transport {
namespace {

using namespace std::chrono_literals;
using asio::ip::tcp;

constexpr std::chrono::milliseconds kLong = 10s;
const std::string kToken = "job-secret";

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

Hello hello_frame(std::uint32_t rank, std::uint32_t world) {
  Hello h;
  h.world_size = world;
  h.has_token = true;
  h.token_digest = token_digest(kToken);
  h.self = PeerInfo{rank, "raw", {}, ""};
  return h;
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
  for (const std::string token : {"wrong-secret", ""}) {
    Rendezvous intruder(options(1, 2, port, token));
    try {
      intruder.join(kLong);
      ADD_FAILURE() << "a rank with token '" << token << "' joined";
    } catch (const RendezvousError& e) {
      expect_contains(e.what(), "refused rank 1");
      expect_contains(e.what(), token.empty() ? "has no job token" : "job token does not match");
    }
  }
  Rendezvous r1(options(1, 2, port));
  expect_no_errors(run_ranks({0, 1}, [&](int r) {
    Rendezvous& me = r == 0 ? r0 : r1;
    me.join(kLong);
    me.barrier("ok", kLong);
    me.shutdown(kLong);
  }));
  const std::vector<std::string> refused = r0.refused();
  ASSERT_EQ(refused.size(), 2u);
  expect_contains(refused[0], "from 127.0.0.1:");
  expect_contains(refused[0], "job token does not match");
  expect_contains(refused[1], "has no job token");
  EXPECT_TRUE(r0.lost().empty());
  EXPECT_TRUE(r1.lost().empty());
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
  // A hello cut short, then the connection closed: nothing to answer.
  const std::vector<std::byte> hello = encode_frame(hello_frame(1, 2));
  EXPECT_TRUE(exchange(port, {hello.begin(), hello.begin() + 20}, true).empty());
  // A header announcing a gigabyte: refused from the header, nothing allocated.
  std::vector<std::byte> huge = encode_frame(hello_frame(1, 2));
  huge.resize(kFrameHeaderSize);
  huge[11] = std::byte{0x40};
  expect_contains(refusal_in(exchange(port, huge, true)), "exceeds the limit");
  // A valid frame, but not a hello.
  expect_contains(refusal_in(exchange(port, encode_frame(Heartbeat{}), true)),
                  "expected a hello first");
  // A valid hello naming a rank outside the world.
  expect_contains(refusal_in(exchange(port, encode_frame(hello_frame(7, 2)), true)),
                  "outside 1..1");
  // A hello whose text field is not printable.
  Hello dirty = hello_frame(1, 2);
  dirty.self.host = "evil\x1b[2J";
  expect_contains(refusal_in(exchange(port, encode_frame(dirty), true)), "non-printable");
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

}  // namespace
}  // namespace tandem::transport

// The tcp data plane's membership proof (tcp_channel.hpp): a connection counts as a rank's only
// once its proof checks. Strangers with the right format and job id but no proof, a wrong one
// or a reflected one are refused while two real channels exchange messages; a stranger that
// claims a rank first does not take its place; channels with different tokens do not connect
// and say why; a flood of idle connections does not starve the listener. Channels of one
// process over 127.0.0.1, raw sockets for the strangers; waits have generous timeouts and
// nothing asserts on timing.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/read.hpp>
#include <asio/write.hpp>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "actors/messages.hpp"
#include "collector_actor.hpp"
#include "runtime/scheduler.hpp"
#include "split_pipeline_case.hpp"
#include "transport/tcp_channel.hpp"
#include "wire_test_helpers.hpp"

namespace tandem::transport {
namespace {

using namespace std::chrono_literals;
using asio::ip::tcp;
namespace act = tandem::actors;
using Bytes = std::vector<std::byte>;

constexpr std::uint64_t kJob = 0x51c0ffee;
constexpr auto kLong = 20s;

JobCredentials credentials(const std::string& token = "the job's token") {
  return testing::fixed_credentials(kJob, token);
}

using testing::Collector;

TcpChannelOptions options(int rank, const JobCredentials& c = credentials()) {
  TcpChannelOptions o;
  o.credentials = c;
  o.rank = rank;
  o.types = testing::pipeline_wire_types();
  o.close_linger = 2s;
  return o;
}

Message credit(std::uint64_t n) {
  return make_message(act::Credit{static_cast<std::int64_t>(n)});
}

// Rank 0 (`a`, endpoint 0) and rank 1 (`b`, endpoint 1); `more` peers of `a` (ranks 2..) that
// never connect. start() starts a; b starts when the test says.
struct Pair {
  explicit Pair(TcpChannelOptions oa = options(0), TcpChannelOptions ob = options(1), int more = 0)
      : sys_a(make_work_sharing({.workers = 1})), sys_b(make_work_sharing({.workers = 1})) {
    a0 = sys_a.spawn<Collector>("a0");
    b1 = sys_b.spawn<Collector>("b1");
    a = std::make_unique<TcpChannel>(sys_a, std::move(oa));
    b = std::make_unique<TcpChannel>(sys_b, std::move(ob));
    a->bind(0, a0);
    b->bind(1, b1);
    a->add_peer({1, "127.0.0.1", b->port()});
    for (int r = 2; r < 2 + more; ++r) {
      a->add_peer({r, "127.0.0.1", 1});  // never dialled: higher ranks connect to rank 0
      a->route(r, r);
    }
    b->add_peer({0, "127.0.0.1", a->port()});
    a->route(1, 1);
    b->route(0, 0);
  }
  // Messages both ways arrive.
  void exchange(std::uint64_t n) {
    for (std::uint64_t i = 0; i < n; ++i) {
      ASSERT_TRUE(a->send(0, 1, credit(i)).ok());
      ASSERT_TRUE(b->send(1, 0, credit(i)).ok());
    }
    ASSERT_TRUE(b1->wait_for(n));
    ASSERT_TRUE(a0->wait_for(n));
  }
  void close() {
    std::thread t([&] { a->close(); });
    b->close();
    t.join();
  }

  ActorSystem sys_a, sys_b;
  Collector *a0, *b1;
  std::unique_ptr<TcpChannel> a, b;
};

// The errors of `ch` once there are `n` (or kLong passed).
std::vector<ChannelError> wait_errors(const TcpChannel& ch, std::size_t n) {
  const auto deadline = std::chrono::steady_clock::now() + kLong;
  while (ch.errors().size() < n && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(5ms);
  }
  return ch.errors();
}

void expect_contains(const std::string& text, std::string_view part) {
  EXPECT_NE(text.find(part), std::string::npos) << "'" << text << "' lacks '" << part << "'";
}

// A raw connection to a channel's port that says hello as `rank` (right format and job id)
// and reads the answer; `theirs` is the listener's hello.
struct Stranger {
  Stranger(std::uint16_t port, std::uint32_t rank, const JobNonce& nonce = fresh_nonce())
      : socket(io), mine(nonce) {
    socket.connect({asio::ip::make_address("127.0.0.1"), port});
    asio::write(socket, asio::buffer(encode_wire_hello({kJob, rank, 0, 1, mine})));
    const Bytes hello = testing::read_handshake_frame(socket, kWireHelloMetaBytes);
    theirs = decode_wire_hello(std::span(hello).subspan(kWirePrefixBytes));
  }
  void write(const Bytes& bytes) {
    std::error_code ec;
    asio::write(socket, asio::buffer(bytes), ec);
  }

  asio::io_context io;
  tcp::socket socket;
  JobNonce mine;
  WireHello theirs;
};

TEST(TcpChannelProof, ForgedHellosWithoutAGoodProofAreRefusedWhileThePeersTalk) {
  Pair p(options(0), options(1), /*more=*/1);
  p.a->start();
  p.b->start();
  ASSERT_TRUE(p.b->wait_connected(kLong));
  p.exchange(3);
  const JobCredentials wrong = credentials("another token");
  struct Case {
    std::string name;
    std::function<Bytes(const Stranger&)> after_hello;  // empty: closes instead
    std::string expected;
  };
  const std::vector<Case> cases = {
      {"no proof", nullptr, "closed before its proof"},
      {"wrong token",
       [&](const Stranger& s) {
         return encode_wire_proof(testing::tcp_proof(wrong, 2, 0, 0, s.mine, s.theirs.nonce));
       },
       "data-plane proof of rank 2 (lane 0) does not check"},
      {"another rank's proof",
       [&](const Stranger& s) {
         return encode_wire_proof(
             testing::tcp_proof(credentials(), 1, 0, 0, s.mine, s.theirs.nonce));
       },
       "does not check"},
      {"a stale proof (another nonce of the listener)",
       [&](const Stranger& s) {
         return encode_wire_proof(testing::tcp_proof(credentials(), 2, 0, 0, s.mine, JobNonce{}));
       },
       "does not check"},
      {"a message instead",
       [](const Stranger&) {
         return encode_wire_message(kJob, 2, 0, credit(9), testing::pipeline_wire_types());
       },
       "the frame after the hello is not a proof"},
  };
  std::size_t n = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    {
      Stranger s(p.a->port(), 2);
      EXPECT_EQ(s.theirs.rank, 0u);
      if (c.after_hello) s.write(c.after_hello(s));
    }
    const auto errors = wait_errors(*p.a, ++n);
    ASSERT_EQ(errors.size(), n);
    EXPECT_EQ(errors.back().peer_rank, -1);
    EXPECT_FALSE(errors.back().fatal);  // a stranger's refusal fails nothing
    expect_contains(errors.back().peer, "connection from 127.0.0.1:");
    expect_contains(errors.back().what, c.expected);
  }
  // Rank 2 never became anyone's: sends to it still wait, and nothing in its name arrived.
  EXPECT_TRUE(p.a->send(0, 2, credit(1)).ok());
  EXPECT_FALSE(p.sys_a.stopped());
  p.exchange(6);
  EXPECT_EQ(p.a->stats().strangers, cases.size());
  p.close();
  EXPECT_TRUE(p.b->errors().empty());
}

TEST(TcpChannelProof, AStrangerClaimingARankFirstDoesNotTakeItsPlace) {
  Pair p;
  p.a->start();
  // The stranger says hello as rank 1 before rank 1 connects, and stays.
  Stranger s(p.a->port(), 1);
  EXPECT_EQ(s.theirs.rank, 0u);
  p.b->start();
  ASSERT_TRUE(p.a->wait_connected(kLong));
  ASSERT_TRUE(p.b->wait_connected(kLong));
  p.exchange(4);
  // Its proof, whatever it is, comes too late and does not check.
  s.write(encode_wire_proof({s.mine, {}}));
  const auto errors = wait_errors(*p.a, 1);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].peer_rank, -1);
  expect_contains(errors[0].what, "does not check");
  p.exchange(8);
  p.close();
  EXPECT_TRUE(p.b->errors().empty());
}

TEST(TcpChannelProof, ChannelsWithDifferentTokensDoNotConnectAndSayWhy) {
  TcpChannelOptions oa = options(0, credentials("token of a"));
  TcpChannelOptions ob = options(1, credentials("token of b"));
  ob.connect_timeout = 2s;
  Pair p(std::move(oa), std::move(ob));
  p.a->start();
  p.b->start();
  EXPECT_FALSE(p.b->wait_connected(kLong));
  const auto b_errors = p.b->errors();
  ASSERT_EQ(b_errors.size(), 1u);
  EXPECT_EQ(b_errors[0].peer_rank, 0);
  expect_contains(b_errors[0].what, "refused the proof; do both hold this job's token and nonce?");
  const auto a_errors = wait_errors(*p.a, 1);
  ASSERT_GE(a_errors.size(), 1u);
  EXPECT_EQ(a_errors[0].peer_rank, -1);
  expect_contains(a_errors[0].what, "data-plane proof of rank 1 (lane 0) does not check");
  p.close();
}

// Plays rank 0's listener for a connecting channel and answers its proof with the channel's own
// proof, reflected (its own hello's nonce echoed, or a fresh one).
TEST(TcpChannelProof, AReflectedProofIsRefused) {
  for (const bool echo_nonce : {true, false}) {
    SCOPED_TRACE(echo_nonce ? "nonce echoed" : "own nonce");
    asio::io_context io;
    tcp::acceptor listener(io, {asio::ip::make_address("127.0.0.1"), 0});
    ActorSystem sys(make_work_sharing({.workers = 1}));
    auto* b1 = sys.spawn<Collector>("b1");
    TcpChannelOptions o = options(1);
    o.lanes = 1;
    TcpChannel b(sys, o);
    b.bind(1, b1);
    b.add_peer({0, "127.0.0.1", listener.local_endpoint().port()});
    b.route(0, 0);
    b.start();
    tcp::socket s(io);
    listener.accept(s);
    const Bytes hello = testing::read_handshake_frame(s, kWireHelloMetaBytes);
    const WireHello theirs = decode_wire_hello(std::span(hello).subspan(kWirePrefixBytes));
    const JobNonce mine = echo_nonce ? theirs.nonce : fresh_nonce();
    asio::write(s, asio::buffer(encode_wire_hello({kJob, 0, 0, 1, mine})));
    const Bytes proof = testing::read_handshake_frame(s, kWireProofMetaBytes);
    WireProof reflected = decode_wire_proof(std::span(proof).subspan(kWirePrefixBytes));
    reflected.nonce = mine;
    asio::write(s, asio::buffer(encode_wire_proof(reflected)));
    EXPECT_FALSE(b.wait_connected(kLong));
    const auto errors = b.errors();
    ASSERT_EQ(errors.size(), 1u);
    EXPECT_EQ(errors[0].peer_rank, 0);
    expect_contains(errors[0].what, "data-plane proof of rank 0 (lane 0) does not check");
    b.close();
  }
}

// --- a flood of idle connections ---

// Lowers the soft limit on open files for the test's scope.
class FileLimit {
 public:
  explicit FileLimit(rlim_t soft) {
    EXPECT_EQ(::getrlimit(RLIMIT_NOFILE, &saved_), 0);
    rlimit lowered = saved_;
    lowered.rlim_cur = std::min(soft, saved_.rlim_max);
    EXPECT_EQ(::setrlimit(RLIMIT_NOFILE, &lowered), 0);
  }
  ~FileLimit() { ::setrlimit(RLIMIT_NOFILE, &saved_); }
  FileLimit(const FileLimit&) = delete;
  FileLimit& operator=(const FileLimit&) = delete;

 private:
  rlimit saved_{};
};

// A child process that opens `count` connections to the port read from `in`, writes how many
// it opened to `out`, and holds them until `in` closes. Only async-signal-safe calls: it is
// forked from a process with threads.
[[noreturn]] void flood(int in, int out, int count) {
  std::uint16_t port = 0;
  if (::read(in, &port, sizeof port) != sizeof port) ::_exit(1);
  sockaddr_in at{};
  at.sin_family = AF_INET;
  at.sin_port = htons(port);
  at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int opened = 0;
  for (int i = 0; i < count; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) break;
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&at), sizeof at) == 0) ++opened;
  }
  if (::write(out, &opened, sizeof opened) != sizeof opened) ::_exit(1);
  char c = 0;
  while (::read(in, &c, 1) > 0) {
  }
  ::_exit(0);
}

struct Flooder {
  explicit Flooder(int count) {
    EXPECT_EQ(::pipe(to_child), 0);
    EXPECT_EQ(::pipe(from_child), 0);
    pid = ::fork();
    if (pid == 0) {
      ::close(to_child[1]);
      ::close(from_child[0]);
      flood(to_child[0], from_child[1], count);
    }
    ::close(to_child[0]);
    ::close(from_child[1]);
  }
  void start(std::uint16_t port) { EXPECT_EQ(::write(to_child[1], &port, sizeof port), 2); }
  int opened() {
    int n = -1;
    EXPECT_EQ(::read(from_child[0], &n, sizeof n), static_cast<ssize_t>(sizeof n));
    return n;
  }
  ~Flooder() {
    ::close(to_child[1]);
    ::close(from_child[0]);
    int status = 0;
    ::waitpid(pid, &status, 0);
  }

  int to_child[2] = {-1, -1};
  int from_child[2] = {-1, -1};
  pid_t pid = -1;
};

TEST(TcpChannelProof, AThousandIdleConnectionsDoNotStarveTheListener) {
  // Forked before the channels' threads exist; two children, so that neither needs more
  // files than the usual limit.
  Flooder f1(550), f2(550);
  FileLimit limit(1024);
  TcpChannelOptions oa = options(0);
  // Unproven connections would be held long: only the bound on them lets rank 1 in.
  oa.hello_timeout = 60s;
  const std::size_t held = oa.max_pending_connections;
  Pair p(std::move(oa), options(1));
  p.a->start();
  f1.start(p.a->port());
  f2.start(p.a->port());
  EXPECT_EQ(f1.opened() + f2.opened(), 1100);
  p.b->start();
  ASSERT_TRUE(p.b->wait_connected(kLong)) << (p.b->errors().empty() ? "" : p.b->errors()[0].what);
  ASSERT_TRUE(p.a->wait_connected(kLong));
  p.exchange(20);
  EXPECT_GE(p.a->stats().strangers, 1100u - held);
  p.close();
  EXPECT_TRUE(p.b->errors().empty());
}

}  // namespace
}  // namespace tandem::transport

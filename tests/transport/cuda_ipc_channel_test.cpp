// The cuda-ipc data plane: its own frames (pure functions), then CudaIpcChannels over 127.0.0.1
// with the processes played by ActorSystems of one process (no GPU needed: host tensors in
// order, the fallback to staging said once, strangers, a lost peer, acknowledgements of nothing
// held, close), then with a GPU: cuda tensors between two real processes on cuda:0 by IPC, and
// two channels of one process, where CUDA refuses to map a process's own handle, falling back
// to staging. The GPU tests skip without a device.
#include "transport/cuda_ipc_channel.hpp"

#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>

#include <asio/connect.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/read.hpp>
#include <asio/write.hpp>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "actors/messages.hpp"
#include "actors/pipeline_wire_types.hpp"
#include "collector_actor.hpp"
#include "runtime/scheduler.hpp"
#include "transport/cuda_ipc_frame.hpp"
#include "wire_test_helpers.hpp"

extern char** environ;

namespace tandem::transport {
namespace {

using testing::Collector;
using testing::f32_tensor;
using testing::i32_tensor;
using testing::tag_of;
using namespace std::chrono_literals;
using asio::ip::tcp;
namespace act = tandem::actors;

constexpr std::uint64_t kJob = 0x5eed1c0a;
constexpr auto kLong = 20s;
constexpr const char* kChildEnv = "TANDEM_CUDA_IPC_CHANNEL_PORT";

JobCredentials credentials() {
  return testing::fixed_credentials(kJob, "cuda-ipc channel test token");
}

CudaIpcChannelOptions options(int rank, std::vector<std::string>* warnings = nullptr) {
  CudaIpcChannelOptions o;
  o.credentials = credentials();
  o.rank = rank;
  o.types = act::pipeline_wire_types();
  o.connect_timeout = kLong;
  o.hello_timeout = kLong;
  o.stop_system_on_error = false;
  o.close_linger = 200ms;
  if (warnings != nullptr) o.warn = [warnings](const std::string& w) { warnings->push_back(w); };
  return o;
}

Message numbered(std::int64_t seq, Tensor t) {
  return make_message(act::ForwardTensor{act::TensorMeta::of(t)}, {t}, tag_of(seq, 0, 1, 0));
}

// Waits up to kLong for `done`.
template <class Done>
bool eventually(Done done) {
  const auto until = std::chrono::steady_clock::now() + kLong;
  while (!done()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

bool connect_pair(CudaIpcChannel& a, Actor* a0, CudaIpcChannel& b, Actor* b1) {
  a.bind(0, a0);
  b.bind(1, b1);
  a.add_peer({1, "127.0.0.1", b.port()});
  b.add_peer({0, "127.0.0.1", a.port()});
  a.route(1, 1);
  b.route(0, 0);
  a.start();
  b.start();
  return a.wait_connected(kLong) && b.wait_connected(kLong);
}

// --- the frames ---

CudaIpcTensor descriptor(std::uint64_t seq) {
  CudaIpcTensor d;
  d.dtype = DType::f32;
  d.shape = {4, 8};
  d.seq = seq;
  d.bytes = 128;
  d.segment_bytes = 4096;
  d.offset = 256;
  d.memory[0] = std::byte{7};
  d.event[3] = std::byte{9};
  return d;
}

std::span<const std::byte> body_of(const std::vector<std::byte>& frame) {
  return std::span(frame).subspan(kCudaIpcPrefixBytes);
}

TEST(CudaIpcFrame, EveryKindRoundTrips) {
  const CudaIpcSlots s{{1, 3}, {descriptor(5), descriptor(5)}};
  const auto frame = encode_cuda_ipc_slots(s);
  ASSERT_TRUE(is_cuda_ipc_frame(frame));
  const CudaIpcPrefix pre = decode_cuda_ipc_prefix(std::span(frame).first(kCudaIpcPrefixBytes));
  EXPECT_EQ(pre.kind, CudaIpcFrameKind::tensors);
  EXPECT_EQ(pre.body_bytes, frame.size() - kCudaIpcPrefixBytes);
  const CudaIpcSlots got = decode_cuda_ipc_slots(body_of(frame), 1 << 20);
  EXPECT_EQ(got.slots, s.slots);
  EXPECT_EQ(got.tensors, s.tensors);
  EXPECT_EQ(decode_cuda_ipc_ack(body_of(encode_cuda_ipc_ack(0x1122334455))), 0x1122334455u);
  const CudaIpcProbe probe =
      decode_cuda_ipc_probe(body_of(encode_cuda_ipc_probe({true, descriptor(0), ""})));
  EXPECT_TRUE(probe.ok);
  EXPECT_EQ(probe.tensor, descriptor(0));
  const CudaIpcProbe no =
      decode_cuda_ipc_probe(body_of(encode_cuda_ipc_probe({false, {}, "no GPU"})));
  EXPECT_FALSE(no.ok);
  EXPECT_EQ(no.why, "no GPU");
  const CudaIpcProbe answer =
      decode_cuda_ipc_answer(body_of(encode_cuda_ipc_answer({false, {}, "x"})));
  EXPECT_FALSE(answer.ok);
  EXPECT_EQ(answer.why, "x");
  EXPECT_FALSE(is_cuda_ipc_frame(encode_wire_goodbye()));
}

TEST(CudaIpcFrame, WhatComesFromOutsideIsChecked) {
  auto frame = encode_cuda_ipc_ack(1);
  const auto prefix = [&frame] { return std::span(frame).first(kCudaIpcPrefixBytes); };
  frame[4] = std::byte{2};  // version
  EXPECT_THROW(decode_cuda_ipc_prefix(prefix()), WireError);
  frame = encode_cuda_ipc_ack(1);
  frame[6] = std::byte{9};  // kind
  EXPECT_THROW(decode_cuda_ipc_prefix(prefix()), WireError);
  frame = encode_cuda_ipc_ack(1);
  frame[8] = std::byte{9};  // an ack of 9 bytes
  EXPECT_THROW(decode_cuda_ipc_prefix(prefix()), WireError);
  frame = encode_cuda_ipc_probe({false, {}, ""});
  frame[14] = std::byte{1};  // a body far above the limit
  EXPECT_THROW(decode_cuda_ipc_prefix(prefix()), WireError);
  // Slots out of order, more slots than descriptors, every truncation.
  auto slots = encode_cuda_ipc_slots({{3, 1}, {descriptor(1), descriptor(1)}});
  EXPECT_THROW(decode_cuda_ipc_slots(body_of(slots), 1 << 20), WireError);
  slots = encode_cuda_ipc_slots({{1, 3}, {descriptor(1), descriptor(1)}});
  slots[kCudaIpcPrefixBytes] = std::byte{3};
  EXPECT_THROW(decode_cuda_ipc_slots(body_of(slots), 1 << 20), WireError);
  slots = encode_cuda_ipc_slots({{1}, {descriptor(1)}});
  const auto body = body_of(slots);
  for (std::size_t n = 0; n < body.size(); ++n) {
    EXPECT_THROW(decode_cuda_ipc_slots(body.first(n), 1 << 20), WireError) << n;
  }
  // A descriptor above the receiver's limit.
  EXPECT_THROW(decode_cuda_ipc_slots(body, 64), WireError);
  EXPECT_THROW(decode_cuda_ipc_answer(body_of(encode_cuda_ipc_answer({true, {}, ""})).first(0)),
               WireError);
}

// --- channels in one process, host tensors ---

TEST(CudaIpcChannel, HostTensorsArriveInOrderAndTheFallbackIsSaidOnce) {
  ActorSystem sys_a(make_work_sharing({.workers = 1}));
  ActorSystem sys_b(make_work_sharing({.workers = 1}));
  auto* a0 = sys_a.spawn<Collector>("a0");
  auto* b1 = sys_b.spawn<Collector>("b1");
  std::vector<std::string> warnings_a, warnings_b;
  CudaIpcChannel a(sys_a, options(0, &warnings_a));
  CudaIpcChannel b(sys_b, options(1, &warnings_b));
  ASSERT_TRUE(connect_pair(a, a0, b, b1));
  constexpr std::int64_t kN = 50;
  for (std::int64_t i = 0; i < kN; ++i) {
    const Tensor t = i % 2 == 0 ? f32_tensor({i % 5 + 1, 3}, static_cast<float>(i))
                                : i32_tensor({i % 7 + 1}, static_cast<std::int32_t>(i));
    ASSERT_TRUE(a.send(0, 1, numbered(i, t)).ok());
    ASSERT_TRUE(b.send(1, 0, numbered(i, t)).ok());
  }
  ASSERT_TRUE(b1->wait_for(kN));
  ASSERT_TRUE(a0->wait_for(kN));
  for (Collector* c : {a0, b1}) {
    const std::vector<Message> got = c->take();
    for (std::int64_t i = 0; i < kN; ++i) {
      EXPECT_EQ(got[static_cast<std::size_t>(i)].env.tag.minibatch, i);
      const Tensor t = i % 2 == 0 ? f32_tensor({i % 5 + 1, 3}, static_cast<float>(i))
                                  : i32_tensor({i % 7 + 1}, static_cast<std::int32_t>(i));
      EXPECT_EQ(testing::bytes_of(got[static_cast<std::size_t>(i)].tensors[0]),
                testing::bytes_of(t));
    }
  }
  if (cuda_device_count() == 0) {
    // No GPU: neither side can export, so IPC serves no peer, and each channel says so once.
    ASSERT_TRUE(eventually([&] { return !a.refusals().empty() && !b.refusals().empty(); }));
    EXPECT_FALSE(a.serves_ipc(1));
    EXPECT_FALSE(b.serves_ipc(0));
    EXPECT_EQ(a.refusals()[0].peer_rank, 1);
    EXPECT_NE(a.refusals()[0].why.find("cannot export"), std::string::npos) << a.refusals()[0].why;
  }
  a.close();
  b.close();
  EXPECT_EQ(warnings_a.size(), 1u);
  EXPECT_EQ(warnings_b.size(), 1u);
  EXPECT_EQ(a.stats().ipc_tensors_sent, 0u);
  EXPECT_EQ(a.stats().messages_sent, static_cast<std::uint64_t>(kN));
  EXPECT_TRUE(a.errors().empty());
  EXPECT_TRUE(b.errors().empty());
  // close() is idempotent, and later sends are refused.
  a.close();
  EXPECT_EQ(a.send(0, 1, numbered(0, f32_tensor({1}, 0.f))).status, SendStatus::system_stopped);
}

// A raw rank 1 that proves itself to the channel (rank 0) over `s`.
void prove_as_rank1(tcp::socket& s) {
  const JobCredentials c = credentials();
  const JobNonce mine = fresh_nonce();
  asio::write(s, asio::buffer(encode_wire_hello({job_id_of(c.job), 1, 0, 1, mine})));
  const auto hello = testing::read_handshake_frame(s, kWireHelloMetaBytes);
  const WireHello theirs = decode_wire_hello(std::span(hello).subspan(kWirePrefixBytes));
  const ProofContext ctx{ProofPurpose::kDataCudaIpc, c.job, 1, 0, 0, mine, theirs.nonce};
  asio::write(s, asio::buffer(encode_wire_proof({mine, make_proof(c.token, ctx)})));
  (void)testing::read_handshake_frame(s, kWireProofMetaBytes);
}

struct Listening {
  ActorSystem sys{make_work_sharing({.workers = 1})};
  Collector* a0 = sys.spawn<Collector>("a0");
  CudaIpcChannel a{sys, options(0)};
  Listening() {
    a.bind(0, a0);
    a.add_peer({1, "127.0.0.1", 1});
    a.route(1, 1);
    a.start();
  }
  tcp::socket connect(asio::io_context& io) {
    tcp::socket s(io);
    s.connect({asio::ip::make_address("127.0.0.1"), a.port()});
    return s;
  }
};

TEST(CudaIpcChannel, StrangersAreRefusedAndTheRealRankStillConnects) {
  Listening l;
  asio::io_context io;
  tcp::socket garbage = l.connect(io);
  asio::write(garbage, asio::buffer(std::string(64, 'x')));
  tcp::socket wrong = l.connect(io);  // a hello and a proof of another token
  const JobNonce mine = fresh_nonce();
  asio::write(wrong, asio::buffer(encode_wire_hello({kJob, 1, 0, 1, mine})));
  (void)testing::read_handshake_frame(wrong, kWireHelloMetaBytes);
  asio::write(wrong, asio::buffer(encode_wire_proof({mine, {}})));
  ASSERT_TRUE(eventually([&] { return l.a.stats().strangers >= 2; }));
  tcp::socket real = l.connect(io);
  prove_as_rank1(real);
  EXPECT_TRUE(l.a.wait_connected(kLong));
  for (const ChannelError& e : l.a.errors()) EXPECT_EQ(e.peer_rank, -1) << e.what;
}

TEST(CudaIpcChannel, AnAcknowledgementOfNothingHeldFailsThePeer) {
  Listening l;
  asio::io_context io;
  tcp::socket s = l.connect(io);
  prove_as_rank1(s);
  ASSERT_TRUE(l.a.wait_connected(kLong));
  asio::write(s, asio::buffer(encode_cuda_ipc_ack(9)));
  ASSERT_TRUE(eventually([&] { return !l.a.errors().empty(); }));
  const ChannelError e = l.a.errors()[0];
  EXPECT_EQ(e.peer_rank, 1);
  EXPECT_NE(e.what.find('9'), std::string::npos) << e.what;
  EXPECT_EQ(l.a.send(0, 1, numbered(0, f32_tensor({1}, 0.f))).status, SendStatus::target_stopped);
}

TEST(CudaIpcChannel, ATensorsFrameNotFollowedByItsMessageFailsThePeer) {
  Listening l;
  asio::io_context io;
  tcp::socket s = l.connect(io);
  prove_as_rank1(s);
  ASSERT_TRUE(l.a.wait_connected(kLong));
  asio::write(s, asio::buffer(encode_cuda_ipc_slots({{0}, {descriptor(1)}})));
  asio::write(s, asio::buffer(encode_cuda_ipc_ack(1)));
  ASSERT_TRUE(eventually([&] { return !l.a.errors().empty(); }));
  EXPECT_NE(l.a.errors()[0].what.find("not followed"), std::string::npos) << l.a.errors()[0].what;
}

TEST(CudaIpcChannel, APeerLostWithoutGoodbyeIsReported) {
  Listening l;
  {
    asio::io_context io;
    tcp::socket s = l.connect(io);
    prove_as_rank1(s);
    ASSERT_TRUE(l.a.wait_connected(kLong));
  }  // closed without a goodbye
  ASSERT_TRUE(eventually([&] { return !l.a.errors().empty(); }));
  // Closed with the channel's probe unread, the socket may end in a reset rather than an end of
  // stream: either way the peer is gone.
  EXPECT_EQ(l.a.errors()[0].peer_rank, 1);
  EXPECT_TRUE(l.a.errors()[0].fatal);
  EXPECT_EQ(l.a.send(0, 1, numbered(0, f32_tensor({1}, 0.f))).status, SendStatus::target_stopped);
}

// --- with a GPU ---

std::vector<float> pattern(std::int64_t n, std::int64_t seed) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < v.size(); ++i) {
    v[i] = static_cast<float>((i * 31 + static_cast<std::size_t>(seed)) % 1000) * 0.25f - 3.0f;
  }
  return v;
}

Tensor cuda_pattern(std::int64_t seq) {
  const std::int64_t rows = 17 + seq, cols = 33;
  return Tensor::from_vector(pattern(rows * cols, seq), {rows, cols}).to(Device::cuda(0));
}

constexpr std::int64_t kGpuMessages = 8;

int run_child(std::uint16_t port) {
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  const std::string filter = "--gtest_filter=CudaIpcChannelChild.*";
  const std::string env = std::string(kChildEnv) + "=" + std::to_string(port);
  std::vector<char*> argv{const_cast<char*>(self.c_str()), const_cast<char*>(filter.c_str()),
                          nullptr};
  std::vector<char*> envp;
  for (char** e = environ; *e != nullptr; ++e) envp.push_back(*e);
  envp.push_back(const_cast<char*>(env.c_str()));
  envp.push_back(nullptr);
  pid_t pid = 0;
  if (posix_spawn(&pid, self.c_str(), nullptr, nullptr, argv.data(), envp.data()) != 0) return -1;
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

void expect_patterns(const std::vector<Message>& got) {
  ASSERT_EQ(got.size(), static_cast<std::size_t>(kGpuMessages));
  for (std::int64_t i = 0; i < kGpuMessages; ++i) {
    const Tensor& t = got[static_cast<std::size_t>(i)].tensors[0];
    EXPECT_TRUE(t.device().is_cuda()) << i;
    EXPECT_EQ(t.to(Device::cpu()).to_float_vector(), pattern((17 + i) * 33, i)) << i;
  }
}

TEST(CudaIpcChannel, TwoProcessesOnOneGpuExchangeCudaTensorsByIpc) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  ActorSystem sys(make_work_sharing({.workers = 1}));
  auto* a0 = sys.spawn<Collector>("a0");
  CudaIpcChannel a(sys, options(0));
  a.bind(0, a0);
  a.add_peer({1, "127.0.0.1", 1});
  a.route(1, 1);
  a.start();
  std::thread child([&a] { EXPECT_EQ(run_child(a.port()), 0); });
  ASSERT_TRUE(a.wait_connected(kLong));
  ASSERT_TRUE(eventually([&] { return a.serves_ipc(1); })) << a.refusals().size();
  for (std::int64_t i = 0; i < kGpuMessages; ++i) {
    ASSERT_TRUE(a.send(0, 1, numbered(i, cuda_pattern(i))).ok());
  }
  // The child checks what it got and sends it back, by IPC too.
  ASSERT_TRUE(a0->wait_for(kGpuMessages));
  expect_patterns(a0->take());
  child.join();
  a.close();
  EXPECT_EQ(a.stats().ipc_tensors_sent, static_cast<std::uint64_t>(kGpuMessages));
  EXPECT_EQ(a.stats().ipc_tensors_received, static_cast<std::uint64_t>(kGpuMessages));
  EXPECT_EQ(a.stats().acks_received, static_cast<std::uint64_t>(kGpuMessages));
  EXPECT_EQ(a.stats().staged, 0u);
  EXPECT_TRUE(a.errors().empty());
}

// The child's half (runs only when the test above starts it).
TEST(CudaIpcChannelChild, ReceivesChecksAndSendsBack) {
  const char* port = std::getenv(kChildEnv);
  if (port == nullptr) GTEST_SKIP() << "started by TwoProcessesOnOneGpuExchangeCudaTensorsByIpc";
  ActorSystem sys(make_work_sharing({.workers = 1}));
  auto* b1 = sys.spawn<Collector>("b1");
  CudaIpcChannel b(sys, options(1));
  b.bind(1, b1);
  b.add_peer({0, "127.0.0.1", static_cast<std::uint16_t>(std::stoi(port))});
  b.route(0, 0);
  b.start();
  ASSERT_TRUE(b.wait_connected(kLong));
  ASSERT_TRUE(b1->wait_for(kGpuMessages));
  const std::vector<Message> got = b1->take();
  expect_patterns(got);
  ASSERT_TRUE(eventually([&] { return b.serves_ipc(0); }));
  for (const Message& m : got) ASSERT_TRUE(b.send(1, 0, m).ok());
  b.close();
  EXPECT_EQ(b.stats().ipc_tensors_sent, static_cast<std::uint64_t>(kGpuMessages));
  EXPECT_TRUE(b.errors().empty());
}

// In one process CUDA refuses to map the process's own handles: the probe fails, the channels
// say so once, and cuda tensors travel staged through host memory, byte-exact.
TEST(CudaIpcChannel, WhereIpcIsRefusedCudaTensorsAreStaged) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  ActorSystem sys_a(make_work_sharing({.workers = 1}));
  ActorSystem sys_b(make_work_sharing({.workers = 1}));
  auto* a0 = sys_a.spawn<Collector>("a0");
  auto* b1 = sys_b.spawn<Collector>("b1");
  std::vector<std::string> warnings;
  CudaIpcChannel a(sys_a, options(0, &warnings));
  CudaIpcChannel b(sys_b, options(1));
  ASSERT_TRUE(connect_pair(a, a0, b, b1));
  ASSERT_TRUE(eventually([&] { return !a.refusals().empty(); }));
  EXPECT_FALSE(a.serves_ipc(1));
  for (std::int64_t i = 0; i < kGpuMessages; ++i) {
    ASSERT_TRUE(a.send(0, 1, numbered(i, cuda_pattern(i))).ok());
  }
  ASSERT_TRUE(b1->wait_for(kGpuMessages));
  const std::vector<Message> got = b1->take();
  for (std::int64_t i = 0; i < kGpuMessages; ++i) {
    EXPECT_EQ(got[static_cast<std::size_t>(i)].tensors[0].to(Device::cpu()).to_float_vector(),
              pattern((17 + i) * 33, i));
  }
  a.close();
  b.close();
  EXPECT_EQ(a.stats().ipc_tensors_sent, 0u);
  EXPECT_EQ(a.stats().staged, static_cast<std::uint64_t>(kGpuMessages));
  EXPECT_EQ(warnings.size(), 1u);
}

}  // namespace
}  // namespace tandem::transport

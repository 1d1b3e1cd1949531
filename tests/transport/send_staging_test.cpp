// Sends that never wait on a device: SendStaging on its own, then the tcp and ucx channels with
// a staging whose copies run on a cpu stream the test holds back (the deferred device of the
// executor tests, for a channel): a send returns before its copy, the message leaves after it
// and no later message overtakes it, a copy that fails fails the peer, and close() lets staged
// messages leave first. The source tensor is dropped right after each send, so a copy that did
// not keep it alive reads freed memory (AddressSanitizer's builds catch it). Waits have
// generous timeouts; nothing asserts on timing.
#include "transport/send_staging.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <memory>
#include <stdexcept>
#include <thread>

#include "actors/messages.hpp"
#include "collector_actor.hpp"
#include "runtime/scheduler.hpp"
#include "split_pipeline_case.hpp"
#include "test_credentials.hpp"
#include "transport/tcp_channel.hpp"
#include "transport/ucx_channel.hpp"
#include "wire_test_helpers.hpp"

namespace tandem::transport {
namespace {

using namespace std::chrono_literals;
using testing::Collector;
using testing::f32_tensor;
using testing::i32_tensor;
using testing::tag_of;
namespace act = tandem::actors;

constexpr auto kLong = 30s;

// A cpu stream whose work waits until open() (or the gate's end): the copies the test holds.
class Gate {
 public:
  Gate() {
    stream_.enqueue([f = opened_.get_future().share()] { f.wait(); });
  }
  ~Gate() { open(); }
  Gate(const Gate&) = delete;
  Gate& operator=(const Gate&) = delete;

  void open() {
    if (!open_) opened_.set_value();
    open_ = true;
  }
  Stream& stream() { return stream_; }

 private:
  std::promise<void> opened_;
  bool open_ = false;
  Stream stream_{Device::cpu()};
};

// Staging of the f32 tensors (the "device" ones here) on `stream`.
std::shared_ptr<SendStaging> staging_on(Stream stream) {
  SendStagingOptions o;
  o.needs_copy = [](const Tensor& t) { return t.dtype() == DType::f32; };
  o.stream_for = [stream](Device) { return stream; };
  return std::make_shared<SendStaging>(std::move(o));
}

Message tensor_message(Tensor t, std::int64_t seq) {
  return make_message(act::ForwardTensor{act::TensorMeta::of(t)}, {std::move(t)},
                      tag_of(seq, 0, 1, 0));
}

TEST(SendStaging, CopiesTheTensorsItIsToldToOnTheStreamAndWaitsForNone) {
  Gate gate;
  const std::shared_ptr<SendStaging> staging_ptr = staging_on(gate.stream());
  SendStaging& staging = *staging_ptr;
  const Tensor f = f32_tensor({3, 4}, 1.5f);
  const Tensor i = i32_tensor({5}, 7);
  Message msg = tensor_message(f, 0);
  msg.tensors.push_back(i);
  const std::vector<Event> copies = staging.stage(msg);
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_FALSE(copies[0].query()) << "the copy ran though its stream is held";
  EXPECT_FALSE(msg.tensors[0].shares_storage(f));
  EXPECT_TRUE(msg.tensors[1].shares_storage(i)) << "an i32 tensor needs no copy here";
  gate.open();
  copies[0].synchronize();
  EXPECT_EQ(msg.tensors[0].describe(), f.describe());
  EXPECT_EQ(testing::bytes_of(msg.tensors[0]), testing::bytes_of(f));
}

TEST(SendStaging, ByDefaultLeavesHostTensorsAlone) {
  SendStaging staging;
  const Tensor f = f32_tensor({2, 2}, 3.f);
  Message msg = tensor_message(f, 0);
  EXPECT_TRUE(staging.stage(msg).empty());
  EXPECT_TRUE(msg.tensors[0].shares_storage(f));
}

template <class Ch>
struct Options;
template <>
struct Options<TcpChannel> {
  using type = TcpChannelOptions;
};
template <>
struct Options<UcxChannel> {
  using type = UcxChannelOptions;
};

// Ranks 0 and 1 of one channel type, each in its own actor system: a0 sends to b1.
template <class Ch>
struct Pair {
  explicit Pair(std::shared_ptr<SendStaging> staging)
      : sys_a(make_work_sharing({.workers = 1})), sys_b(make_work_sharing({.workers = 1})) {
    a0 = sys_a.spawn<Collector>("a0");
    b1 = sys_b.spawn<Collector>("b1");
    a = std::make_unique<Ch>(sys_a, options(0, std::move(staging)));
    b = std::make_unique<Ch>(sys_b, options(1, nullptr));
    a->bind(0, a0);
    b->bind(1, b1);
    a->add_peer(peer_of(*b, 1));
    b->add_peer(peer_of(*a, 0));
    a->route(1, 1);
    b->route(0, 0);
    a->start();
    b->start();
  }
  ~Pair() { close_both(); }
  bool connected() { return a->wait_connected(kLong) && b->wait_connected(kLong); }
  void close_both() {
    std::thread t([this] { a->close(); });
    b->close();
    t.join();
  }

  static auto options(int rank, std::shared_ptr<SendStaging> staging) {
    typename Options<Ch>::type o;
    o.credentials = testing::fixed_credentials(0x5eed, "staging test");
    o.rank = rank;
    o.types = testing::pipeline_wire_types();
    o.staging = std::move(staging);
    o.stop_system_on_error = false;
    return o;
  }
  static TcpPeer peer_of(TcpChannel& c, int rank) { return {rank, "127.0.0.1", c.port()}; }
  static UcxPeer peer_of(UcxChannel& c, int rank) {
    return {rank, "127.0.0.1", c.worker_address()};
  }

  ActorSystem sys_a, sys_b;
  Collector *a0 = nullptr, *b1 = nullptr;
  std::unique_ptr<Ch> a, b;
};

template <class Ch>
class StagedSend : public ::testing::Test {};
using Channels = ::testing::Types<TcpChannel, UcxChannel>;
TYPED_TEST_SUITE(StagedSend, Channels);

TYPED_TEST(StagedSend, ReturnsBeforeItsCopyAndNoLaterMessageOvertakesIt) {
  Gate gate;
  Pair<TypeParam> p(staging_on(gate.stream()));
  ASSERT_TRUE(p.connected());
  const Tensor f = f32_tensor({64, 33}, 2.25f);
  const Tensor i = i32_tensor({9}, 4);
  const std::vector<std::byte> f_bytes = testing::bytes_of(f);
  {
    Tensor dropped = f.clone();  // the only handle, gone after the send
    ASSERT_TRUE(p.a->send(0, 1, tensor_message(std::move(dropped), 0)).ok());
  }
  ASSERT_TRUE(p.a->send(0, 1, tensor_message(i, 1)).ok());
  EXPECT_EQ(p.a->stats().staged, 1u);
  // Held: the staged message may not leave, and the i32 one may not pass it.
  std::this_thread::sleep_for(200ms);
  EXPECT_TRUE(p.b1->take().empty()) << "a message left before the copy it waits for ran";
  gate.open();
  ASSERT_TRUE(p.b1->wait_for(2));
  const std::vector<Message> got = p.b1->take();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].tag().minibatch, 0);
  EXPECT_EQ(got[1].tag().minibatch, 1);
  EXPECT_EQ(testing::bytes_of(got[0].tensors[0]), f_bytes);
  EXPECT_EQ(testing::bytes_of(got[1].tensors[0]), testing::bytes_of(i));
  EXPECT_TRUE(p.a->errors().empty());
}

TYPED_TEST(StagedSend, ACopyThatFailsFailsThePeerNamingIt) {
  Stream stream(Device::cpu());
  Pair<TypeParam> p(staging_on(stream));
  ASSERT_TRUE(p.connected());
  // A failed cpu stream skips its later work and fails every event recorded after it.
  stream.enqueue([] { throw std::runtime_error("the device fell off the bus"); });
  ASSERT_TRUE(p.a->send(0, 1, tensor_message(f32_tensor({4}, 1.f), 0)).ok());
  const auto deadline = std::chrono::steady_clock::now() + kLong;
  while (p.a->errors().empty() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(5ms);
  }
  const std::vector<ChannelError> errors = p.a->errors();
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].peer_rank, 1);
  EXPECT_TRUE(errors[0].fatal);
  EXPECT_NE(errors[0].what.find("copying a device tensor to host memory failed"), std::string::npos)
      << errors[0].what;
  EXPECT_NE(errors[0].what.find("the device fell off the bus"), std::string::npos);
  EXPECT_EQ(p.a->send(0, 1, tensor_message(i32_tensor({2}, 1), 1)).status,
            SendStatus::target_stopped);
}

TYPED_TEST(StagedSend, CloseLetsStagedMessagesLeaveBeforeItsGoodbye) {
  Gate gate;
  Pair<TypeParam> p(staging_on(gate.stream()));
  ASSERT_TRUE(p.connected());
  ASSERT_TRUE(p.a->send(0, 1, tensor_message(f32_tensor({128}, 0.5f), 0)).ok());
  std::thread opener([&gate] {
    std::this_thread::sleep_for(300ms);
    gate.open();
  });
  // Only the sender closes: a peer that said goodbye takes no more messages.
  p.a->close();
  opener.join();
  ASSERT_TRUE(p.b1->wait_for(1));
  const std::vector<Message> got = p.b1->take();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].tensors[0].numel(), 128);
  EXPECT_EQ(p.a->send(0, 1, tensor_message(i32_tensor({2}, 1), 1)).status,
            SendStatus::system_stopped);
}

// The default staging on a real device: a cuda tensor leaves through a copy stream and pinned
// host memory, byte-exact, and the source may be dropped at once. Skipped without a GPU.
TYPED_TEST(StagedSend, CudaTensorsLeaveThroughTheDefaultStaging) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  Pair<TypeParam> p(nullptr);
  ASSERT_TRUE(p.connected());
  const Tensor host = f32_tensor({256, 1024}, 0.75f);
  {
    Tensor on_gpu = host.to(Device::cuda(0));
    ASSERT_TRUE(p.a->send(0, 1, tensor_message(std::move(on_gpu), 0)).ok());
  }
  ASSERT_TRUE(p.a->send(0, 1, tensor_message(i32_tensor({3}, 5), 1)).ok());
  ASSERT_TRUE(p.b1->wait_for(2));
  const std::vector<Message> got = p.b1->take();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].tag().minibatch, 0);
  EXPECT_TRUE(got[0].tensors[0].device().is_cpu());
  EXPECT_EQ(testing::bytes_of(got[0].tensors[0]), testing::bytes_of(host));
  EXPECT_EQ(p.a->stats().staged, 1u);
}

}  // namespace
}  // namespace tandem::transport

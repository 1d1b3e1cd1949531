// What is particular to the tcp data plane (what every channel does is in
// channel_conformance_test.cpp): the wire format's round trip and refusals (pure functions),
// stripes over lanes, then TcpChannels over 127.0.0.1 with the processes played by ActorSystems
// of one process: large messages striped over 1 to 8 lanes, lane counts and lanes that never
// come, a peer that closes mid-frame, and a pipeline run by two Pipelines (one per "process":
// own actor system, own channel, PipelineSpec::hosts) that must train exactly as the in-process
// one. Waits have generous timeouts so that a failure shows as an error, never as a hang;
// nothing asserts on timing.
#include "transport/tcp_channel.hpp"

#include <gtest/gtest.h>

#include <asio/connect.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/read.hpp>
#include <asio/write.hpp>
#include <cstring>
#include <functional>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "../actors/pipeline_harness.hpp"
#include "actors/messages.hpp"
#include "collector_actor.hpp"
#include "numbered_message.hpp"
#include "runtime/scheduler.hpp"
#include "split_pipeline_case.hpp"
#include "transport/wire_stripes.hpp"
#include "wire_test_helpers.hpp"

namespace tandem::transport {
namespace {

using testing::bf16_tensor;
using testing::bytes_of;
using testing::expect_same_message;
using testing::f32_tensor;
using testing::i32_tensor;
using testing::tag_of;

using namespace std::chrono_literals;
using asio::ip::tcp;
namespace act = tandem::actors;

constexpr std::uint64_t kJob = 0x7a3d2c11;
constexpr auto kLong = 20s;

// The job's credentials: a nonce whose job id is kJob, and a token.
JobCredentials credentials() {
  return testing::fixed_credentials(kJob, "tcp channel test token");
}

WireTypes pipeline_types() {
  return testing::pipeline_wire_types();
}

// One of each message the pipeline sends, tensors of each dtype and several shapes.
std::vector<Message> pipeline_messages() {
  std::vector<Message> out;
  for (const Tensor& t :
       {f32_tensor({3, 5}, 1.5f), f32_tensor({2, 3, 4, 2}, -7.f), f32_tensor({}, 42.f),
        f32_tensor({0, 4}, 0.f), i32_tensor({7}, 11), i32_tensor({2, 9}, -4),
        bf16_tensor({4, 6}, 3.f), bf16_tensor({1, 1, 5}, -1.f)}) {
    out.push_back(
        make_message(act::ForwardTensor{act::TensorMeta::of(t, 8)}, {t}, tag_of(3, 0, 4, 1, 1)));
    out.push_back(
        make_message(act::BackwardTensor{act::TensorMeta::of(t)}, {t}, tag_of(5, 4, 8, 2)));
  }
  // Several tensors, a sim tensor (shape only) and an undefined one.
  out.push_back(make_message(act::ForwardTensor{act::TensorMeta::of(f32_tensor({2, 2}, 1.f))},
                             {f32_tensor({2, 2}, 1.f), i32_tensor({3}, 0),
                              Tensor::empty({8, 16}, DType::bf16, Device::sim()), Tensor()},
                             tag_of(0, 0, 2, 0)));
  out.push_back(make_message(act::StartRun{}));
  out.push_back(make_message(act::OpDone{0x1234567890ull}));
  out.push_back(make_message(act::SyncDone{-2}));
  out.push_back(make_message(act::Credit{17}));
  out.push_back(make_message(act::LossReport{2.718281828, 6, 4, 24}, {}, tag_of(9, 2, 8, 0)));
  out.push_back(make_message(act::StopRequest{}));
  out.push_back(make_message(act::StopAt{12}));
  out.push_back(make_message(act::StageFinished{3}));
  for (Message& m : out) m.env.flags = 0x5a;
  return out;
}

// --- the wire format ---

TEST(WireMessage, EveryPipelineMessageRoundTrips) {
  const WireTypes types = pipeline_types();
  const WireRules rules{kJob, &types};
  int n = 0;
  for (const Message& sent : pipeline_messages()) {
    SCOPED_TRACE(std::string(message_type_name(sent.type())) + " #" + std::to_string(n++));
    const std::vector<std::byte> frame = encode_wire_message(kJob, 7, 2, sent, types);
    const WireMessage got = decode_wire_message(frame, rules);
    EXPECT_EQ(got.from, 7);
    EXPECT_EQ(got.to, 2);
    expect_same_message(got.msg, sent);
    // The typed body reads back as sent.
    if (sent.is<act::LossReport>()) {
      EXPECT_EQ(got.msg.as<act::LossReport>().loss_sum, 2.718281828);
      EXPECT_EQ(got.msg.as<act::LossReport>().rows_total, 24u);
    }
    if (sent.is<act::ForwardTensor>()) {
      EXPECT_TRUE(got.msg.as<act::ForwardTensor>().meta.describes(got.msg.tensors[0]));
    }
  }
}

TEST(WireMessage, EveryTruncationIsRefused) {
  const WireTypes types = pipeline_types();
  const WireRules rules{kJob, &types};
  for (const Message& sent : pipeline_messages()) {
    const std::vector<std::byte> frame = encode_wire_message(kJob, 1, 0, sent, types);
    for (std::size_t n = 0; n < frame.size(); ++n) {
      EXPECT_THROW(decode_wire_message(std::span(frame).first(n), rules), WireError)
          << message_type_name(sent.type()) << " cut at " << n << " of " << frame.size();
    }
    std::vector<std::byte> longer = frame;
    longer.push_back(std::byte{0});
    EXPECT_THROW(decode_wire_message(longer, rules), WireError);
  }
}

TEST(WireMessage, GarbageIsRefusedNeverCrashes) {
  const WireTypes types = pipeline_types();
  const WireRules rules{kJob, &types};
  std::mt19937 rng(5);
  const std::vector<std::byte> valid =
      encode_wire_message(kJob, 1, 0, make_message(act::Credit{4}, {f32_tensor({3}, 1.f)}), types);
  int refused = 0;
  for (int round = 0; round < 4000; ++round) {
    std::vector<std::byte> frame;
    if (round % 2 == 0) {
      frame.resize(rng() % 200);
      for (auto& b : frame) b = static_cast<std::byte>(rng());
    } else {
      // A valid frame with a few bytes flipped: gets past the magic more often.
      frame = valid;
      for (int k = 0; k < 3; ++k)
        frame[rng() % frame.size()] ^= static_cast<std::byte>(1 + rng() % 255);
    }
    try {
      (void)decode_wire_message(frame, rules);
    } catch (const WireError&) {
      ++refused;
    }
  }
  EXPECT_GT(refused, 3000);
}

// A valid frame of one forward tensor f32[2, 3], then `edit` applied to its bytes.
std::string refusal(const std::function<void(std::vector<std::byte>&)>& edit,
                    WireRules rules = {}) {
  static const WireTypes types = pipeline_types();
  if (rules.types == nullptr) rules = {kJob, &types};
  const Tensor t = f32_tensor({2, 3}, 1.f);
  std::vector<std::byte> frame = encode_wire_message(
      kJob, 1, 0, make_message(act::ForwardTensor{act::TensorMeta::of(t)}, {t}, tag_of(5, 0, 2, 1)),
      types);
  edit(frame);
  try {
    (void)decode_wire_message(frame, rules);
  } catch (const WireError& e) {
    return e.what();
  }
  return "<accepted>";
}

void put_u64(std::vector<std::byte>& f, std::size_t at, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) f[at + i] = static_cast<std::byte>((v >> (8 * i)) & 0xff);
}

// Offsets in the frame of refusal(): prefix 16, fixed meta 44, body 24, then the tensor.
constexpr std::size_t kMetaAt = 16, kTypeAt = 32, kLaneAt = 36, kBodySizeAt = 38,
                      kTensorAt = 16 + 44 + 24;

TEST(WireMessage, RefusalsNameTheFieldAndTheMessage) {
  EXPECT_EQ(refusal([](auto&) {}), "<accepted>");
  EXPECT_NE(refusal([](auto& f) { f[0] = std::byte{'X'}; }).find("not a Tandem data frame"),
            std::string::npos);
  EXPECT_NE(refusal([](auto& f) { f[4] = std::byte{9}; }).find("version"), std::string::npos);
  const std::string job = refusal([](auto& f) { put_u64(f, kMetaAt, kJob + 1); });
  EXPECT_NE(job.find("field 'job'"), std::string::npos) << job;
  // Errors after the envelope name the message's type and tag.
  EXPECT_NE(job.find("'pipeline.forward_tensor' from endpoint 1 to 0, minibatch 5 samples [0, 2)"),
            std::string::npos)
      << job;
  EXPECT_NE(refusal([](auto& f) { f[kTypeAt] ^= std::byte{1}; }).find("not a known type"),
            std::string::npos);
  EXPECT_NE(refusal([](auto& f) { f[kLaneAt] = std::byte{2}; }).find("travels on lane forward"),
            std::string::npos);
  EXPECT_NE(refusal([](auto& f) { f[kLaneAt] = std::byte{7}; }).find("not a lane"),
            std::string::npos);
  EXPECT_NE(refusal([](auto& f) { f[kBodySizeAt] = std::byte{8}; }).find("body bytes"),
            std::string::npos);
  EXPECT_NE(refusal([](auto& f) { f[kTensorAt] = std::byte{3}; }).find("storage"),
            std::string::npos);
  EXPECT_NE(refusal([](auto& f) { f[kTensorAt + 1] = std::byte{7}; }).find("not a dtype"),
            std::string::npos);
  EXPECT_NE(refusal([](auto& f) { f[kTensorAt + 2] = std::byte{9}; }).find("rank"),
            std::string::npos);
  // dims[0] = 3 instead of 2: 72 bytes announced for a tensor of 24 bytes... refused by count.
  const std::string count = refusal([](auto& f) { put_u64(f, kTensorAt + 4, 3); });
  EXPECT_NE(count.find("f32[3, 3]"), std::string::npos) << count;
  EXPECT_NE(refusal([](auto& f) { put_u64(f, kTensorAt + 4, ~std::uint64_t{0}); }).find("dims"),
            std::string::npos);
  // The prefix's data size disagrees with the tensors.
  EXPECT_NE(refusal([](auto& f) { put_u64(f, 8, 8); }).find("announces"), std::string::npos);
  // Oversized: more than the receiver's limit.
  static const WireTypes types = pipeline_types();
  const std::string big = refusal([](auto&) {}, WireRules{kJob, &types, 16});
  EXPECT_NE(big.find("exceeds the limit of 16 bytes"), std::string::npos) << big;
}

TEST(WireMessage, OversizedHeadersAreRefusedBeforeAnyAllocation) {
  std::vector<std::byte> prefix = encode_wire_goodbye();
  prefix[4 + 2] = std::byte{0xff};  // meta bytes 0xff for a goodbye
  EXPECT_THROW(decode_wire_prefix(prefix), WireError);
  const WireTypes types = pipeline_types();
  std::vector<std::byte> frame =
      encode_wire_message(kJob, 1, 0, make_message(act::Credit{1}), types);
  frame[6] = std::byte{0xff};
  frame[7] = std::byte{0xff};  // 65535 meta bytes: above kMaxWireMetaBytes
  EXPECT_THROW(decode_wire_prefix(std::span(frame).first(kWirePrefixBytes)), WireError);
}

TEST(WireMessage, TheEncoderRefusesWhatAReceiverWould) {
  WireTypes few;
  few.add<act::Credit>();
  EXPECT_THROW(encode_wire_head(kJob, 0, 1, make_message(act::StopAt{1}), few), WireError);
  Message wrong_lane = make_message(act::Credit{1});
  wrong_lane.env.lane = Lane::forward;
  EXPECT_THROW(encode_wire_head(kJob, 0, 1, wrong_lane, few), WireError);
  std::vector<Tensor> many(kMaxWireTensors + 1, f32_tensor({1}, 0.f));
  EXPECT_THROW(encode_wire_head(kJob, 0, 1, make_message(act::Credit{1}, many), few), WireError);
  EXPECT_THROW(
      encode_wire_head(kJob, 0, 1, make_message(act::Credit{1}, {f32_tensor({64}, 0.f)}), few, 100),
      WireError);
}

TEST(WireMessage, SimTensorsCostALinkTheirBytes) {
  const WireTypes types = pipeline_types();
  const WireRules rules{kJob, &types};
  // 3 MiB + 16 bytes: more than one of the zero blocks a sim tensor is written from.
  const Tensor sim = Tensor::empty({768 * 1024 + 4}, DType::f32, Device::sim());
  const Message sent =
      make_message(act::ForwardTensor{act::TensorMeta::of(sim)}, {sim}, tag_of(0, 0, 2, 0));
  const std::vector<std::byte> head = encode_wire_head(kJob, 0, 1, sent, types);
  std::size_t payload = 0;
  for (const auto& span : wire_payload(sent)) payload += span.size();
  EXPECT_EQ(payload, sim.nbytes());
  const std::vector<std::byte> frame = encode_wire_message(kJob, 0, 1, sent, types);
  ASSERT_EQ(frame.size(), head.size() + sim.nbytes());
  const WireMessage got = decode_wire_message(frame, rules);
  ASSERT_EQ(got.msg.tensors.size(), 1u);
  EXPECT_TRUE(got.msg.tensors[0].device().is_sim());
  EXPECT_EQ(got.msg.tensors[0].shape(), sim.shape());
  // A frame without the sim tensor's bytes is refused.
  std::vector<std::byte> short_frame(frame.begin(), frame.begin() + static_cast<long>(head.size()));
  EXPECT_THROW(decode_wire_message(short_frame, rules), WireError);
}

TEST(WireMessage, HelloRoundTrips) {
  const JobNonce nonce = fresh_nonce();
  const std::vector<std::byte> f = encode_wire_hello({kJob, 3, 0, 1, nonce});
  ASSERT_EQ(f.size(), kWirePrefixBytes + kWireHelloMetaBytes);
  const WirePrefix p = decode_wire_prefix(std::span(f).first(kWirePrefixBytes));
  EXPECT_EQ(p.kind, WireFrameKind::hello);
  const WireHello h = decode_wire_hello(std::span(f).subspan(kWirePrefixBytes));
  EXPECT_EQ(h.job, kJob);
  EXPECT_EQ(h.rank, 3u);
  EXPECT_EQ(h.nonce, nonce);
}

TEST(WireMessage, ProofRoundTrips) {
  WireProof sent{fresh_nonce(), {}};
  sent.proof[0] = 0xab;
  sent.proof[31] = 0xcd;
  const std::vector<std::byte> f = encode_wire_proof(sent);
  ASSERT_EQ(f.size(), kWirePrefixBytes + kWireProofMetaBytes);
  const WirePrefix p = decode_wire_prefix(std::span(f).first(kWirePrefixBytes));
  EXPECT_EQ(p.kind, WireFrameKind::proof);
  EXPECT_EQ(p.meta_bytes, kWireProofMetaBytes);
  const WireProof got = decode_wire_proof(std::span(f).subspan(kWirePrefixBytes));
  EXPECT_EQ(got.nonce, sent.nonce);
  EXPECT_EQ(got.proof, sent.proof);
}

// The WireError of decoding `f`'s meta part with `decode`, or "<accepted>".
template <class Decode>
std::string meta_refusal(const std::vector<std::byte>& f, Decode decode) {
  try {
    (void)decode(std::span(f).subspan(kWirePrefixBytes));
  } catch (const WireError& e) {
    return e.what();
  }
  return "<accepted>";
}

TEST(WireMessage, HandshakeFramesCutShortOrTooLongAreRefusedNamingTheField) {
  const std::vector<std::byte> hello = encode_wire_hello({kJob, 3, 0, 1, fresh_nonce()});
  const std::vector<std::byte> proof = encode_wire_proof({fresh_nonce(), {}});
  const auto decode_hello = [](auto meta) { return decode_wire_hello(meta); };
  const auto decode_proof = [](auto meta) { return decode_wire_proof(meta); };
  // Truncated: every cut of the meta part names the field it falls in.
  for (std::size_t cut = 0; cut < kWireHelloMetaBytes; ++cut) {
    const std::vector<std::byte> f(hello.begin(),
                                   hello.end() - static_cast<std::ptrdiff_t>(cut + 1));
    const std::string why = meta_refusal(f, decode_hello);
    const std::string field = cut < sizeof(JobNonce) ? "field 'nonce'" : "field '";
    EXPECT_NE(why.find(field), std::string::npos) << why;
    EXPECT_NE(why.find("truncated"), std::string::npos) << why;
  }
  for (std::size_t cut = 0; cut < kWireProofMetaBytes; ++cut) {
    const std::vector<std::byte> f(proof.begin(),
                                   proof.end() - static_cast<std::ptrdiff_t>(cut + 1));
    const std::string why = meta_refusal(f, decode_proof);
    const std::string field = cut < sizeof(JobProof) ? "field 'proof'" : "field 'nonce'";
    EXPECT_NE(why.find(field), std::string::npos) << why;
  }
  // Oversized: a byte past the last field, in the meta part and as the prefix announces it.
  std::vector<std::byte> longer = hello;
  longer.push_back(std::byte{0});
  EXPECT_NE(meta_refusal(longer, decode_hello).find("field 'nonce': 1 trailing bytes"),
            std::string::npos)
      << meta_refusal(longer, decode_hello);
  longer = proof;
  longer.push_back(std::byte{0});
  EXPECT_NE(meta_refusal(longer, decode_proof).find("field 'proof': 1 trailing bytes"),
            std::string::npos)
      << meta_refusal(longer, decode_proof);
  for (const auto* frame : {&hello, &proof}) {
    std::vector<std::byte> prefix(frame->begin(), frame->begin() + kWirePrefixBytes);
    prefix[6] = static_cast<std::byte>(std::to_integer<int>(prefix[6]) + 1);  // meta bytes + 1
    try {
      (void)decode_wire_prefix(prefix);
      ADD_FAILURE() << "an oversized handshake frame accepted";
    } catch (const WireError& e) {
      EXPECT_NE(std::string(e.what()).find("field 'meta bytes'"), std::string::npos) << e.what();
    }
    put_u64(prefix, 8, 1);  // data bytes: a handshake frame has none
    prefix[6] = (*frame)[6];
    EXPECT_THROW(decode_wire_prefix(prefix), WireError);
  }
  // Another version (2: hellos without a nonce) is refused by the prefix.
  std::vector<std::byte> old(hello.begin(), hello.begin() + kWirePrefixBytes);
  old[4] = std::byte{2};
  try {
    (void)decode_wire_prefix(old);
    ADD_FAILURE() << "version 2 accepted";
  } catch (const WireError& e) {
    EXPECT_NE(std::string(e.what()).find("field 'version'"), std::string::npos) << e.what();
  }
}

TEST(WireMessage, HelloNamesItsLaneAndRefusesImpossibleOnes) {
  const std::vector<std::byte> f = encode_wire_hello({kJob, 3, 2, 5, fresh_nonce()});
  const WireHello h = decode_wire_hello(std::span(f).subspan(kWirePrefixBytes));
  EXPECT_EQ(h.lane, 2u);
  EXPECT_EQ(h.lanes, 5u);
  const auto refused = [](WireHello bad, const std::string& what) {
    const std::vector<std::byte> g = encode_wire_hello(bad);
    try {
      (void)decode_wire_hello(std::span(g).subspan(kWirePrefixBytes));
      ADD_FAILURE() << "accepted lane " << bad.lane << " of " << bad.lanes;
    } catch (const WireError& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  refused({kJob, 3, 0, 0, {}}, "lanes");
  refused({kJob, 3, 0, kMaxWireLanes + 1, {}}, "lanes");
  refused({kJob, 3, 2, 2, {}}, "2 of 2 lanes");
}

TEST(WireStripes, LanesCoverTheDataPartExactlyInOrder) {
  for (const std::uint64_t bytes :
       {std::uint64_t{0}, std::uint64_t{100}, kWireStripeMinBytes - 1, kWireStripeMinBytes,
        std::uint64_t{1} << 20, (std::uint64_t{16} << 20) + 13, std::uint64_t{300001}}) {
    for (int lanes = 1; lanes <= kMaxWireLanes; ++lanes) {
      std::uint64_t next = 0;
      for (int lane = 0; lane < lanes; ++lane) {
        const WireByteRange r = wire_stripe(bytes, lanes, lane);
        EXPECT_EQ(r.offset, next) << bytes << " bytes, lane " << lane << " of " << lanes;
        if (r.length > 0 && r.offset + r.length < bytes) {
          EXPECT_EQ((r.offset + r.length) % kWireStripeAlign, 0u);
        }
        next = r.offset + r.length;
      }
      EXPECT_EQ(next, bytes) << lanes << " lanes";
      const bool whole = lanes == 1 || bytes < kWireStripeMinBytes;
      EXPECT_EQ(wire_stripe(bytes, lanes, 0).length == bytes, whole) << bytes << " " << lanes;
    }
  }
  // Two lanes split a 1 MiB tensor in halves.
  EXPECT_EQ(wire_stripe(1 << 20, 2, 1), (WireByteRange{1 << 19, 1 << 19}));
  EXPECT_THROW((void)wire_stripe(10, 2, 2), std::invalid_argument);
}

TEST(WireStripes, SlicesCrossTensorBoundaries) {
  std::vector<std::byte> a(10), b(0), c(7);
  const std::vector<std::span<const std::byte>> parts{a, b, c};
  const auto wire_slice = [&parts](WireByteRange range) {
    std::vector<std::span<const std::byte>> out;
    for_each_wire_piece(parts, range, [&out](std::span<const std::byte> s) { out.push_back(s); });
    return out;
  };
  const auto got = wire_slice({8, 5});  // a[8, 10) and c[0, 3)
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].data(), a.data() + 8);
  EXPECT_EQ(got[0].size(), 2u);
  EXPECT_EQ(got[1].data(), c.data());
  EXPECT_EQ(got[1].size(), 3u);
  EXPECT_TRUE(wire_slice({17, 0}).empty());
  const auto tail = wire_slice({12, 5});
  ASSERT_EQ(tail.size(), 1u);
  EXPECT_EQ(tail[0].data(), c.data() + 2);
  EXPECT_EQ(tail[0].size(), 5u);
}

// --- channels over 127.0.0.1 ---

using testing::Collector;

TcpChannelOptions channel_options(int rank) {
  TcpChannelOptions o;
  o.credentials = credentials();
  o.rank = rank;
  o.types = pipeline_types();
  o.close_linger = 2s;
  return o;
}

// Closes two channels at once: each waits for the other's goodbye.
void close_both(TcpChannel& a, TcpChannel& b) {
  std::thread t([&] { a.close(); });
  b.close();
  t.join();
}

using testing::numbered;

// Rank 0 (endpoint 0 on `a0`) and rank 1 (endpoint 1 on `b1`) connected to each other.
bool connect_pair(TcpChannel& a, Actor* a0, TcpChannel& b, Actor* b1) {
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

// Messages large enough to be striped (several tensors, boundaries that are no stripe's, a sim
// tensor) and small ones between them arrive whole and in order over 1, 2, 3 and 8 lanes.
Message striped(std::int64_t seq) {
  const auto pattern = [seq](std::int64_t n) {
    std::vector<std::int32_t> v(static_cast<std::size_t>(n));
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<std::int32_t>(i * 7919 + seq);
    return Tensor::from_vector(v, {n});
  };
  std::vector<Tensor> ts;
  switch (seq % 4) {
    case 0:
      ts = {pattern(262144 + seq)};  // 1 MiB and a little
      break;
    case 1:
      ts = {pattern(3), pattern(100003), f32_tensor({5}, 1.f), pattern(70001)};
      break;
    case 2:
      ts = {Tensor::empty({300000}, DType::f32, Device::sim()), pattern(1)};
      break;
    default:
      ts = {pattern(5)};  // too small to stripe
      break;
  }
  const act::ForwardTensor head{act::TensorMeta::of(ts[0])};
  return make_message(head, std::move(ts), tag_of(seq, 0, 1, 0));
}

TEST(TcpChannel, LargeMessagesAreStripedOverTheLanesAndArriveWhole) {
  for (const int lanes : {1, 2, 3, 8}) {
    SCOPED_TRACE(std::to_string(lanes) + " lanes");
    ActorSystem sys_a(make_work_sharing({.workers = 1}));
    ActorSystem sys_b(make_work_sharing({.workers = 1}));
    auto* a0 = sys_a.spawn<Collector>("a0");
    auto* b1 = sys_b.spawn<Collector>("b1");
    TcpChannelOptions oa = channel_options(0);
    TcpChannelOptions ob = channel_options(1);
    oa.lanes = 1;  // the accepting side follows the connecting one's hello
    ob.lanes = lanes;
    TcpChannel a(sys_a, oa);
    TcpChannel b(sys_b, ob);
    ASSERT_TRUE(connect_pair(a, a0, b, b1));
    constexpr std::int64_t kN = 24;
    for (std::int64_t i = 0; i < kN; ++i) {
      ASSERT_TRUE(a.send(0, 1, striped(i)).ok());
      ASSERT_TRUE(b.send(1, 0, striped(i)).ok());
    }
    ASSERT_TRUE(b1->wait_for(kN));
    ASSERT_TRUE(a0->wait_for(kN));
    for (Collector* c : {a0, b1}) {
      const std::vector<Message> got = c->take();
      ASSERT_EQ(got.size(), static_cast<std::size_t>(kN));
      for (std::int64_t i = 0; i < kN; ++i) expect_same_message(got[i], striped(i));
    }
    close_both(a, b);
    EXPECT_TRUE(a.errors().empty());
    EXPECT_TRUE(b.errors().empty());
    // 3 of every 4 messages are large enough.
    const std::uint64_t expected = lanes > 1 ? kN / 4 * 3 : 0;
    EXPECT_EQ(a.stats().striped, expected);
    EXPECT_EQ(b.stats().striped, expected);
  }
}

// Waits until `ch` reported an error (or the long timeout passed).
std::vector<ChannelError> wait_error(TcpChannel& ch) {
  const auto deadline = std::chrono::steady_clock::now() + kLong;
  while (ch.errors().empty() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(5ms);
  }
  return ch.errors();
}

// Plays rank 1 by hand: a valid handshake, then whatever the test writes.
class FakePeer {
 public:
  // `lanes`: how many the hello announces (the fake opens only lane 0).
  explicit FakePeer(std::uint16_t port, std::uint16_t lanes = 1) : socket_(io_) {
    socket_.connect({asio::ip::make_address("127.0.0.1"), port});
    testing::tcp_client_handshake(socket_, credentials(), 1, 0, 0, lanes);
  }
  void write(const std::vector<std::byte>& bytes) { asio::write(socket_, asio::buffer(bytes)); }

 private:
  asio::io_context io_;
  tcp::socket socket_;
};

TEST(TcpChannel, RefusesALaneCountOutsideOneToEight) {
  ActorSystem sys(make_work_sharing({.workers = 1}));
  for (const int lanes : {0, kMaxWireLanes + 1}) {
    TcpChannelOptions o = channel_options(0);
    o.lanes = lanes;
    try {
      TcpChannel a(sys, o);
      ADD_FAILURE() << lanes << " lanes accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(std::to_string(lanes) + " lanes, outside [1, 8]"),
                std::string::npos)
          << e.what();
    }
  }
}

TEST(TcpChannel, APeerWhoseOtherLanesNeverComeFailsTheWait) {
  ActorSystem sys(make_work_sharing({.workers = 1}));
  auto* a0 = sys.spawn<Collector>("a0");
  TcpChannelOptions o = channel_options(0);
  o.hello_timeout = 200ms;
  TcpChannel a(sys, o);
  a.bind(0, a0);
  a.add_peer({1, "127.0.0.1", 1});
  a.route(1, 1);
  a.start();
  FakePeer peer(a.port(), 3);
  EXPECT_FALSE(a.wait_connected(kLong));
  const auto errors = a.errors();
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].peer_rank, 1);
  EXPECT_NE(errors[0].what.find("1 of its 3 lanes connected within 0.2 s"), std::string::npos)
      << errors[0].what;
  a.close();
}

TEST(TcpChannel, APeerThatClosesMidFrameIsReported) {
  ActorSystem sys(make_work_sharing({.workers = 1}));
  auto* a0 = sys.spawn<Collector>("a0");
  TcpChannel a(sys, channel_options(0));
  a.bind(0, a0);
  a.add_peer({1, "127.0.0.1", 1});
  a.route(1, 1);
  a.start();
  {
    FakePeer peer(a.port());
    std::vector<std::byte> frame =
        encode_wire_message(kJob, 1, 0, numbered(1, 0), pipeline_types());
    frame.erase(frame.end() - 5, frame.end());
    peer.write(frame);
  }  // closed without a goodbye, mid-frame
  const auto errors = wait_error(a);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].peer_rank, 1);
  EXPECT_NE(errors[0].what.find("reading"), std::string::npos) << errors[0].what;
  a.close();
}

// --- a pipeline split across two channels ---

struct PipelineCase {
  std::string name;
  std::string model;  // mlp | gpt
  schedules::ScheduleKind kind;
};

std::ostream& operator<<(std::ostream& os, const PipelineCase& c) {
  return os << c.name;
}

class SplitPipeline : public ::testing::TestWithParam<PipelineCase> {};

TEST_P(SplitPipeline, TrainsExactlyAsInOneProcess) {
  using namespace act::testing;
  const PipelineCase& c = GetParam();
  const models::Model model = c.model == "gpt" ? tiny_gpt() : tiny_mlp();
  schedules::ScheduleParams p;
  p.kind = c.kind;
  p.stages = 4;
  p.replicas = {1, 1, 1, 1};
  const bool async = c.kind == schedules::ScheduleKind::pipedream;
  p.slices = async ? 1 : 4;
  p.minibatch_size = 8;
  p.minibatches = async ? 9 : 3;
  auto spec_of = [&] {
    act::PipelineSpec spec;
    spec.model = &model;
    spec.plan = even_plan(model, p);
    spec.optimizer = sgd_momentum();
    spec.seed = 11;
    spec.data = [&](std::int64_t b) { return make_minibatch(model, 8, b); };
    spec.cpu_threads_per_replica = 1;
    return spec;
  };
  act::Pipeline local(spec_of(), make_scheduler(true));
  const act::PipelineResult expected = local.run();

  // Two processes' worth of pipelines, each with its own actor system and tcp channel: stages
  // 0-1, the loader (endpoint 4) and the coordinator (5) in rank 0, stages 2-3 in rank 1.
  const auto rank_of = [](Endpoint e) { return e == 2 || e == 3 ? 1 : 0; };
  std::mutex mu;
  std::vector<std::string> errors;
  TcpChannel* channels[2] = {nullptr, nullptr};
  std::unique_ptr<act::Pipeline> ranks[2];
  for (int rank = 0; rank < 2; ++rank) {
    act::PipelineSpec spec = spec_of();
    spec.hosts = [rank, rank_of](Endpoint e) { return rank_of(e) == rank; };
    spec.make_channel = [&, rank](ActorSystem& system) {
      TcpChannelOptions o = channel_options(rank);
      o.on_error = [&mu, &errors](const ChannelError& e) {
        std::lock_guard lock(mu);
        errors.push_back(e.peer + ": " + e.what);
      };
      auto ch = std::make_unique<TcpChannel>(system, std::move(o));
      channels[rank] = ch.get();
      return ch;
    };
    ranks[rank] = std::make_unique<act::Pipeline>(std::move(spec), make_scheduler(true));
  }
  for (int rank = 0; rank < 2; ++rank) {
    channels[rank]->add_peer({1 - rank, "127.0.0.1", channels[1 - rank]->port()});
    for (Endpoint e = 0; e < 6; ++e) {
      if (rank_of(e) != rank) channels[rank]->route(e, 1 - rank);
    }
  }
  channels[0]->start();
  channels[1]->start();
  act::PipelineResult got[2];
  std::string failed[2];
  std::thread other([&] {
    try {
      got[1] = ranks[1]->run();
    } catch (const std::exception& e) {
      failed[1] = e.what();
    }
  });
  try {
    got[0] = ranks[0]->run();
  } catch (const std::exception& e) {
    failed[0] = e.what();
  }
  other.join();
  {
    std::lock_guard lock(mu);
    std::string all;
    for (const auto& x : errors) all += "\n  " + x;
    ASSERT_TRUE(failed[0].empty() && failed[1].empty() && errors.empty())
        << "rank 0: " << failed[0] << "\nrank 1: " << failed[1] << all;
  }
  EXPECT_GT(channels[0]->stats().messages_sent, 0u);
  EXPECT_GT(channels[1]->stats().messages_sent, 0u);
  EXPECT_EQ(got[0].losses, expected.losses);
  EXPECT_TRUE(got[1].losses.empty());  // the coordinator runs in rank 0
  EXPECT_EQ(got[0].stages.size(), 2u);
  EXPECT_EQ(got[1].stages.size(), 2u);
  EXPECT_TRUE(ranks[0]->hosts_stage(1) && !ranks[0]->hosts_stage(2));
  EXPECT_THROW((void)ranks[0]->stage(3), std::out_of_range);
  models::ParamSet have = ranks[0]->params();
  have.merge(ranks[1]->params());
  const models::ParamSet want = local.params();
  ASSERT_EQ(have.size(), want.size());
  for (std::int64_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(have.at(want.name(i)).to_float_vector(), want[i].to_float_vector()) << want.name(i);
  }
  // Orderly ends: each channel waits for the other's goodbye.
  std::thread closer([&] { ranks[1].reset(); });
  ranks[0].reset();
  closer.join();
}

INSTANTIATE_TEST_SUITE_P(
    Schedules, SplitPipeline,
    ::testing::Values(PipelineCase{"mlp_gpipe", "mlp", schedules::ScheduleKind::gpipe},
                      PipelineCase{"mlp_1f1b", "mlp", schedules::ScheduleKind::one_f_one_b},
                      PipelineCase{"gpt_1f1b", "gpt", schedules::ScheduleKind::one_f_one_b},
                      PipelineCase{"mlp_pipedream", "mlp", schedules::ScheduleKind::pipedream}),
    [](const auto& test) { return test.param.name; });

}  // namespace
}  // namespace tandem::transport

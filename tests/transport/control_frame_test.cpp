#include "transport/control_frame.hpp"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace tandem::transport {
namespace {

std::vector<std::byte> bytes(std::string_view s) {
  const auto b = std::as_bytes(std::span(s.data(), s.size()));
  return {b.begin(), b.end()};
}

PeerInfo peer(std::uint32_t rank) {
  return PeerInfo{rank, "host-" + std::to_string(rank),
                  bytes(std::string("ucx-address\0\xff", 13) + std::to_string(rank)),
                  "cpu:0,cuda:" + std::to_string(rank)};
}

JobNonce nonce_of(std::uint8_t seed) {
  JobNonce n{};
  for (std::size_t i = 0; i < n.size(); ++i) n[i] = static_cast<std::uint8_t>(seed + 3 * i);
  return n;
}

// One of every message, with non-trivial contents; the new ones of version 2 first.
std::vector<ControlMessage> samples() {
  Hello hello;
  hello.self = peer(2);
  hello.proof = nonce_of(9);
  Hello bare;
  bare.self = PeerInfo{0, "h", {}, ""};
  return {hello,
          JoinRequest{3, 4, nonce_of(1)},
          Challenge{nonce_of(2), nonce_of(3), nonce_of(4)},
          KvTake{0x0123456789abcdefull, "gloo/rank2"},
          Heartbeat{42, true, "stage 1 replica 0: B(4, 0..2) waits for F(4, 0..2)"},
          bare,
          Refused{"the job token does not match rank 0's"},
          PeerTable{{peer(0), peer(1), peer(2)}},
          BarrierEnter{"epoch 3"},
          BarrierRelease{"epoch 3"},
          KvSet{"gloo/rank1", bytes(std::string("\0\1\2\3", 4))},
          KvSet{"empty", {}},
          KvGet{0xfedcba9876543210ull, "gloo/rank1"},
          KvValue{7, bytes("value")},
          Heartbeat{},
          RankLost{3, "node-3", "no heartbeat for 3.0 s"},
          Goodbye{}};
}

void set_payload_length(std::vector<std::byte>& frame, std::uint32_t n) {
  for (int i = 0; i < 4; ++i)
    frame[8 + static_cast<std::size_t>(i)] = std::byte((n >> (8 * i)) & 0xff);
}

std::string error_of(std::span<const std::byte> frame,
                     std::uint32_t max_payload = kMaxFramePayload) {
  try {
    decode_frame(frame, max_payload);
  } catch (const FrameError& e) {
    return e.what();
  }
  return "";
}

TEST(ControlFrame, EveryMessageRoundTrips) {
  for (const ControlMessage& m : samples()) {
    const std::vector<std::byte> frame = encode_frame(m);
    ASSERT_GE(frame.size(), kFrameHeaderSize);
    const FrameHeader h = decode_header(std::span(frame).first(kFrameHeaderSize), kMaxFramePayload);
    EXPECT_EQ(h.type, frame_type(m));
    EXPECT_EQ(h.payload_size, frame.size() - kFrameHeaderSize);
    EXPECT_EQ(decode_frame(frame), m) << frame_type_name(frame_type(m));
  }
}

TEST(ControlFrame, HeaderLayoutIsLittleEndian) {
  const std::vector<std::byte> frame = encode_frame(Heartbeat{});
  const std::vector<std::byte> expected = {
      std::byte{'T'}, std::byte{'D'}, std::byte{'C'}, std::byte{'P'}, std::byte{2}, std::byte{0},
      std::byte{9},   std::byte{0},   std::byte{13},  std::byte{0},   std::byte{0}, std::byte{0}};
  // completed (8), has_work (1), an empty waiting_for (4)
  ASSERT_EQ(frame.size(), kFrameHeaderSize + 13);
  EXPECT_EQ(std::vector<std::byte>(frame.begin(), frame.begin() + kFrameHeaderSize), expected);
}

TEST(ControlFrame, EveryTruncationIsRefused) {
  for (const ControlMessage& m : samples()) {
    const std::vector<std::byte> frame = encode_frame(m);
    // Cut anywhere: the whole-frame decoder notices the missing bytes.
    for (std::size_t n = 0; n < frame.size(); ++n) {
      EXPECT_NE(error_of(std::span(frame).first(n)), "")
          << frame_type_name(frame_type(m)) << " cut at " << n;
    }
    // The header patched to match the cut: the payload decoder notices a field running out.
    for (std::size_t n = kFrameHeaderSize; n < frame.size(); ++n) {
      std::vector<std::byte> cut(frame.begin(), frame.begin() + static_cast<std::ptrdiff_t>(n));
      set_payload_length(cut, static_cast<std::uint32_t>(n - kFrameHeaderSize));
      EXPECT_NE(error_of(cut), "") << frame_type_name(frame_type(m)) << " payload cut at " << n;
    }
  }
}

TEST(ControlFrame, TrailingBytesAreRefused) {
  for (const ControlMessage& m : samples()) {
    std::vector<std::byte> frame = encode_frame(m);
    frame.push_back(std::byte{0});
    set_payload_length(frame, static_cast<std::uint32_t>(frame.size() - kFrameHeaderSize));
    EXPECT_NE(error_of(frame).find("trailing"), std::string::npos)
        << frame_type_name(frame_type(m)) << ": " << error_of(frame);
  }
}

TEST(ControlFrame, BadHeadersAreRefused) {
  const std::vector<std::byte> good = encode_frame(BarrierEnter{"x"});
  std::vector<std::byte> f = good;
  f[0] = std::byte{'G'};
  EXPECT_NE(error_of(f).find("bad magic"), std::string::npos) << error_of(f);
  f = good;
  f[4] = std::byte{1};  // version 1 (a token digest in the hello) is no longer spoken
  EXPECT_NE(error_of(f).find("protocol version 1, this build speaks version 2"), std::string::npos)
      << error_of(f);
  for (const std::uint8_t type : {0, 15, 255}) {
    f = good;
    f[6] = std::byte{type};
    EXPECT_NE(error_of(f).find("unknown frame type"), std::string::npos) << error_of(f);
  }
  // A length over the caller's bound is refused from the header alone.
  f = good;
  set_payload_length(f, 0xffffffffu);
  EXPECT_NE(error_of(f).find("exceeds the limit"), std::string::npos) << error_of(f);
  const std::vector<std::byte> hello = encode_frame(samples()[0]);
  EXPECT_EQ(error_of(hello, kMaxHelloPayload), "");
  EXPECT_NE(error_of(hello, 8).find("exceeds the limit of 8"), std::string::npos);
}

TEST(ControlFrame, FieldsAreValidated) {
  // Text must be printable ASCII.
  EXPECT_NE(error_of(encode_frame(BarrierEnter{"bad\nname"})).find("non-printable byte 0x0a"),
            std::string::npos);
  Hello h = std::get<Hello>(samples()[0]);
  h.self.host = "host\x1b[31m";
  EXPECT_NE(error_of(encode_frame(h)).find("field 'host'"), std::string::npos);
  h.self.host = "";
  EXPECT_NE(error_of(encode_frame(h)).find("field 'host': is empty"), std::string::npos);
  // A flag is 0 or 1.
  std::vector<std::byte> f = encode_frame(Heartbeat{1, true, ""});
  f[kFrameHeaderSize + 8] = std::byte{2};
  EXPECT_NE(error_of(f).find("field 'has_work': is 2, expected 0 or 1"), std::string::npos)
      << error_of(f);
  // A field longer than its limit.
  EXPECT_NE(error_of(encode_frame(KvGet{1, std::string(kMaxTextField + 1, 'k')}))
                .find("exceeds the limit of 4096"),
            std::string::npos);
  // A peer count the payload cannot hold is refused before anything is reserved.
  std::vector<std::byte> table = encode_frame(PeerTable{{peer(0)}});
  for (int i = 0; i < 4; ++i)
    table[kFrameHeaderSize + static_cast<std::size_t>(i)] = std::byte{0xff};
  EXPECT_NE(error_of(table).find("field 'count'"), std::string::npos) << error_of(table);
  // Entries in rank order.
  EXPECT_NE(error_of(encode_frame(PeerTable{{peer(0), peer(2)}})).find("entries are in rank order"),
            std::string::npos);
  EXPECT_NE(error_of(encode_frame(PeerTable{})).find("field 'count'"), std::string::npos);
}

TEST(ControlFrame, RandomBytesDecodeOrFailCleanly) {
  // Random buffers, half of them behind a valid header so the payload decoders see them:
  // each either decodes or raises FrameError, nothing else.
  std::mt19937 rng(1234);
  const std::vector<ControlMessage> all = samples();
  int decoded = 0;
  for (int i = 0; i < 20000; ++i) {
    std::vector<std::byte> f;
    if (i % 2 == 0) {
      f = encode_frame(all[static_cast<std::size_t>(i / 2) % all.size()]);
      f.resize(kFrameHeaderSize);
    }
    const std::size_t extra = rng() % 64;
    for (std::size_t k = 0; k < extra; ++k) f.push_back(static_cast<std::byte>(rng() & 0xff));
    if (i % 2 == 0) set_payload_length(f, static_cast<std::uint32_t>(f.size() - kFrameHeaderSize));
    try {
      decode_frame(f);
      ++decoded;
    } catch (const FrameError&) {
    }
  }
  // Heartbeat and goodbye headers with no payload decode; most random payloads do not.
  EXPECT_GT(decoded, 0);
  EXPECT_LT(decoded, 20000);
}

TEST(ControlFrame, PrintableEscapesAndCuts) {
  EXPECT_EQ(printable("ok text"), "ok text");
  EXPECT_EQ(printable(std::string("a\nb\0\\", 5)), "a\\x0ab\\x00\\x5c");
  EXPECT_EQ(printable("abcdef", 6), "abcdef");
  EXPECT_EQ(printable("abcdefg", 6), "abc...");
  EXPECT_EQ(printable("ab\ncdef", 6), "ab...");  // an escape is never cut in half
  EXPECT_EQ(printable("abcdef", 2), "..");
  // Whatever the input, the result fits a text field.
  const std::string worst(3 * kMaxTextField, '\\');
  EXPECT_LE(printable(worst, kMaxTextField).size(), kMaxTextField);
  EXPECT_EQ(decode_frame(encode_frame(Refused{printable(worst, kMaxTextField)})),
            ControlMessage(Refused{printable(worst, kMaxTextField)}));
}

// The frames of version 2, one decoder at a time: a cut anywhere names the field it cut, a
// nonce or proof of another length than 32 names its field, text beyond its limit names its
// field, and a payload beyond the caller's bound is refused from the header.
struct FieldCase {
  ControlMessage message;
  std::vector<std::string> fields;  // in wire order, each a 32-byte digest field or not
  std::vector<bool> digest;
};

std::vector<FieldCase> version_2_frames() {
  return {
      {JoinRequest{1, 2, nonce_of(5)},
       {"rank", "world_size", "client_nonce"},
       {false, false, true}},
      {Challenge{nonce_of(6), nonce_of(7), nonce_of(8)},
       {"server_nonce", "job", "proof"},
       {true, true, true}},
      {Hello{peer(1), nonce_of(9)},
       {"rank", "host", "blob", "devices", "proof"},
       {false, false, false, false, true}},
      {KvTake{7, "key"}, {"request", "key"}, {false, false}},
      {Heartbeat{5, true, "waits"},
       {"completed", "has_work", "waiting_for"},
       {false, false, false}},
  };
}

// Byte offsets (in the payload) where each field of `c` starts, by encoding growing prefixes.
std::vector<std::size_t> field_starts(const FieldCase& c) {
  // Every field after the first is found as the first cut whose error names it.
  const std::vector<std::byte> frame = encode_frame(c.message);
  std::vector<std::size_t> starts(c.fields.size(), 0);
  std::size_t next = 1;
  for (std::size_t n = 0; n < frame.size() - kFrameHeaderSize && next < c.fields.size(); ++n) {
    std::vector<std::byte> cut(frame.begin(),
                               frame.begin() + static_cast<std::ptrdiff_t>(kFrameHeaderSize + n));
    set_payload_length(cut, static_cast<std::uint32_t>(n));
    if (error_of(cut).find("field '" + c.fields[next] + "'") != std::string::npos) {
      starts[next++] = n;
    }
  }
  return starts;
}

TEST(ControlFrame, EveryCutOfAVersion2FrameNamesTheFieldItCut) {
  for (const FieldCase& c : version_2_frames()) {
    const std::vector<std::byte> frame = encode_frame(c.message);
    EXPECT_EQ(decode_frame(frame), c.message);
    const std::vector<std::size_t> starts = field_starts(c);
    for (std::size_t f = 1; f < starts.size(); ++f) {
      EXPECT_GT(starts[f], starts[f - 1]) << frame_type_name(frame_type(c.message)) << " field '"
                                          << c.fields[f] << "' never named by a cut";
    }
    for (std::size_t n = 0; n + kFrameHeaderSize < frame.size(); ++n) {
      std::size_t f = starts.size() - 1;
      while (f > 0 && starts[f] > n) --f;
      std::vector<std::byte> cut(frame.begin(),
                                 frame.begin() + static_cast<std::ptrdiff_t>(kFrameHeaderSize + n));
      set_payload_length(cut, static_cast<std::uint32_t>(n));
      const std::string e = error_of(cut);
      EXPECT_NE(e.find("field '" + c.fields[f] + "'"), std::string::npos)
          << frame_type_name(frame_type(c.message)) << " cut at " << n << ": " << e;
      EXPECT_NE(e.find("truncated frame"), std::string::npos) << e;
    }
  }
}

TEST(ControlFrame, ANonceOrProofOfAnotherLengthIsRefusedNamingIt) {
  for (const FieldCase& c : version_2_frames()) {
    const std::vector<std::byte> frame = encode_frame(c.message);
    const std::vector<std::size_t> starts = field_starts(c);
    for (std::size_t f = 0; f < c.fields.size(); ++f) {
      if (!c.digest[f]) continue;
      for (const std::uint32_t length : {0u, 31u, 33u, 0xffffffffu}) {
        std::vector<std::byte> bad = frame;
        for (int i = 0; i < 4; ++i) {
          bad[kFrameHeaderSize + starts[f] + static_cast<std::size_t>(i)] =
              std::byte((length >> (8 * i)) & 0xff);
        }
        const std::string e = error_of(bad);
        EXPECT_NE(e.find("field '" + c.fields[f] + "': length " + std::to_string(length) +
                         ", expected 32"),
                  std::string::npos)
            << frame_type_name(frame_type(c.message)) << ": " << e;
      }
    }
  }
}

TEST(ControlFrame, OversizedVersion2FramesAndFieldsAreRefused) {
  // Text beyond its limit, naming the field.
  EXPECT_NE(error_of(encode_frame(KvTake{1, std::string(kMaxTextField + 1, 'k')}))
                .find("field 'key': length 4097 exceeds the limit of 4096"),
            std::string::npos);
  EXPECT_NE(error_of(encode_frame(Heartbeat{1, true, std::string(kMaxTextField + 1, 'w')}))
                .find("field 'waiting_for': length 4097 exceeds the limit of 4096"),
            std::string::npos);
  EXPECT_NE(error_of(encode_frame(Heartbeat{1, true, "tab	here"}))
                .find("field 'waiting_for': holds a non-printable byte 0x09"),
            std::string::npos);
  // A frame a stranger sends beyond the bound before its hello: refused from the header.
  for (const FieldCase& c : version_2_frames()) {
    std::vector<std::byte> frame = encode_frame(c.message);
    set_payload_length(frame, kMaxHelloPayload + 1);
    EXPECT_NE(error_of(std::span(frame).first(kFrameHeaderSize), kMaxHelloPayload)
                  .find("exceeds the limit of " + std::to_string(kMaxHelloPayload)),
              std::string::npos);
    frame.resize(kFrameHeaderSize);
    EXPECT_NO_THROW(decode_header(frame, kMaxHelloPayload + 1));
  }
  // A hello whose blob fills the hello bound is still under it (a joining rank's UCX address).
  Hello big{peer(1), nonce_of(1)};
  big.self.blob.assign(kMaxBlobField, std::byte{1});
  big.self.host.assign(kMaxTextField, 'h');
  big.self.devices.assign(kMaxTextField, 'd');
  EXPECT_EQ(error_of(encode_frame(big), kMaxHelloPayload), "");
}

}  // namespace
}  // namespace tandem::transport

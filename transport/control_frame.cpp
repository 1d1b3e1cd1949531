#include "transport/control_frame.hpp"

#include <fmt/format.h>

#include <cstring>
#include <limits>
#include <type_traits>

#include "transport/byte_reader.hpp"

namespace tandem::transport {
namespace {

class Writer {
 public:
  void u8(std::uint8_t v) { out_.push_back(static_cast<std::byte>(v)); }
  void u16(std::uint16_t v) { put(v, 2); }
  void u32(std::uint32_t v) { put(v, 4); }
  void u64(std::uint64_t v) { put(v, 8); }
  void bytes(std::span<const std::byte> b) {
    u32(checked_size(b.size()));
    out_.insert(out_.end(), b.begin(), b.end());
  }
  void text(std::string_view s) { bytes(std::as_bytes(std::span(s.data(), s.size()))); }
  void digest(std::span<const std::uint8_t> d) { bytes(std::as_bytes(d)); }
  std::vector<std::byte>& out() { return out_; }

 private:
  void put(std::uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out_.push_back(static_cast<std::byte>((v >> (8 * i)) & 0xff));
  }
  static std::uint32_t checked_size(std::size_t n) {
    if (n > std::numeric_limits<std::uint32_t>::max()) {
      throw FrameError("control frame: a field of " + std::to_string(n) + " bytes is too large");
    }
    return static_cast<std::uint32_t>(n);
  }
  std::vector<std::byte> out_;
};

// A control frame's payload; errors are FrameErrors naming the frame and the field.
class Reader final : public ByteReader {
 public:
  Reader(std::span<const std::byte> in, std::string_view frame) : ByteReader(in), frame_(frame) {}

  std::vector<std::byte> bytes(std::string_view field, std::size_t limit) {
    const std::span<const std::byte> b = sized(field, limit);
    return {b.begin(), b.end()};
  }
  std::string text(std::string_view field, std::size_t limit) {
    const std::span<const std::byte> b = sized(field, limit);
    std::string s(b.size(), '\0');
    for (std::size_t i = 0; i < b.size(); ++i) {
      const auto c = std::to_integer<unsigned char>(b[i]);
      if (c < 0x20 || c > 0x7e) {
        fail(field, "holds a non-printable byte 0x" + hex(c) + " at offset " + std::to_string(i));
      }
      s[i] = static_cast<char>(c);
    }
    return s;
  }
  // A nonce or proof: length-prefixed like any bytes, but of exactly out.size() bytes.
  void digest(std::string_view field, std::span<std::uint8_t> out) {
    const std::uint32_t n = u32(field);
    if (n != out.size()) {
      fail(field, "length " + std::to_string(n) + ", expected " + std::to_string(out.size()));
    }
    raw(field, out.data(), n);
  }
  bool flag(std::string_view field) {
    const std::uint8_t v = u8(field);
    if (v > 1) fail(field, "is " + std::to_string(v) + ", expected 0 or 1");
    return v == 1;
  }
  void finish() {
    if (left() != 0) {
      throw FrameError("control frame '" + std::string(frame_) + "': " + std::to_string(left()) +
                       " trailing bytes after the last field");
    }
  }
  [[noreturn]] void fail(std::string_view field, const std::string& why) const override {
    throw FrameError("control frame '" + std::string(frame_) + "', field '" + std::string(field) +
                     "': " + why);
  }

 private:
  static std::string hex(unsigned v) {
    static constexpr char kDigits[] = "0123456789abcdef";
    return {kDigits[(v >> 4) & 0xf], kDigits[v & 0xf]};
  }
  std::span<const std::byte> sized(std::string_view field, std::size_t limit) {
    const std::uint32_t n = u32(field);
    if (n > limit) {
      fail(field, "length " + std::to_string(n) + " exceeds the limit of " + std::to_string(limit));
    }
    return take(field, n);
  }

  std::string_view frame_;
};

}  // namespace

FrameType frame_type(const ControlMessage& m) {
  return std::visit(
      [](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, Hello>) return FrameType::kHello;
        if constexpr (std::is_same_v<T, Refused>) return FrameType::kRefused;
        if constexpr (std::is_same_v<T, PeerTable>) return FrameType::kPeerTable;
        if constexpr (std::is_same_v<T, BarrierEnter>) return FrameType::kBarrierEnter;
        if constexpr (std::is_same_v<T, BarrierRelease>) return FrameType::kBarrierRelease;
        if constexpr (std::is_same_v<T, KvSet>) return FrameType::kKvSet;
        if constexpr (std::is_same_v<T, KvGet>) return FrameType::kKvGet;
        if constexpr (std::is_same_v<T, KvValue>) return FrameType::kKvValue;
        if constexpr (std::is_same_v<T, Heartbeat>) return FrameType::kHeartbeat;
        if constexpr (std::is_same_v<T, RankLost>) return FrameType::kRankLost;
        if constexpr (std::is_same_v<T, Goodbye>) return FrameType::kGoodbye;
        if constexpr (std::is_same_v<T, JoinRequest>) return FrameType::kJoinRequest;
        if constexpr (std::is_same_v<T, Challenge>) return FrameType::kChallenge;
        if constexpr (std::is_same_v<T, KvTake>) return FrameType::kKvTake;
      },
      m);
}

namespace {

void write_peer(Writer& w, const PeerInfo& p) {
  w.u32(p.rank);
  w.text(p.host);
  w.bytes(p.blob);
  w.text(p.devices);
}

PeerInfo read_peer(Reader& r) {
  PeerInfo p;
  p.rank = r.u32("rank");
  p.host = r.text("host", kMaxTextField);
  if (p.host.empty()) r.fail("host", "is empty");
  p.blob = r.bytes("blob", kMaxBlobField);
  p.devices = r.text("devices", kMaxTextField);
  return p;
}

void write_payload(Writer& w, const ControlMessage& m) {
  std::visit(
      [&w](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, Hello>) {
          write_peer(w, v.self);
          w.digest(v.proof);
        } else if constexpr (std::is_same_v<T, JoinRequest>) {
          w.u32(v.rank);
          w.u32(v.world_size);
          w.digest(v.client_nonce);
        } else if constexpr (std::is_same_v<T, Challenge>) {
          w.digest(v.server_nonce);
          w.digest(v.job);
          w.digest(v.proof);
        } else if constexpr (std::is_same_v<T, Refused>) {
          w.text(v.reason);
        } else if constexpr (std::is_same_v<T, PeerTable>) {
          w.u32(static_cast<std::uint32_t>(v.peers.size()));
          for (const PeerInfo& p : v.peers) write_peer(w, p);
        } else if constexpr (std::is_same_v<T, BarrierEnter> || std::is_same_v<T, BarrierRelease>) {
          w.text(v.name);
        } else if constexpr (std::is_same_v<T, KvSet>) {
          w.text(v.key);
          w.bytes(v.value);
        } else if constexpr (std::is_same_v<T, KvGet> || std::is_same_v<T, KvTake>) {
          w.u64(v.request);
          w.text(v.key);
        } else if constexpr (std::is_same_v<T, KvValue>) {
          w.u64(v.request);
          w.bytes(v.value);
        } else if constexpr (std::is_same_v<T, RankLost>) {
          w.u32(v.rank);
          w.text(v.host);
          w.text(v.reason);
        } else if constexpr (std::is_same_v<T, Heartbeat>) {
          w.u64(v.completed);
          w.u8(v.has_work ? 1 : 0);
          w.text(v.waiting_for);
        } else {
          static_assert(std::is_same_v<T, Goodbye>);
        }
      },
      m);
}

}  // namespace

std::string_view frame_type_name(FrameType type) {
  switch (type) {
    case FrameType::kHello:
      return "hello";
    case FrameType::kRefused:
      return "refused";
    case FrameType::kPeerTable:
      return "peer-table";
    case FrameType::kBarrierEnter:
      return "barrier-enter";
    case FrameType::kBarrierRelease:
      return "barrier-release";
    case FrameType::kKvSet:
      return "kv-set";
    case FrameType::kKvGet:
      return "kv-get";
    case FrameType::kKvValue:
      return "kv-value";
    case FrameType::kHeartbeat:
      return "heartbeat";
    case FrameType::kRankLost:
      return "rank-lost";
    case FrameType::kGoodbye:
      return "goodbye";
    case FrameType::kJoinRequest:
      return "join-request";
    case FrameType::kChallenge:
      return "challenge";
    case FrameType::kKvTake:
      return "kv-take";
  }
  return "unknown";
}

std::vector<std::byte> encode_frame(const ControlMessage& message) {
  Writer w;
  w.u32(kControlMagic);
  w.u16(kControlVersion);
  w.u16(static_cast<std::uint16_t>(frame_type(message)));
  w.u32(0);  // payload length, patched below
  write_payload(w, message);
  std::vector<std::byte>& out = w.out();
  const std::size_t payload = out.size() - kFrameHeaderSize;
  if (payload > kMaxFramePayload) {
    throw FrameError("control frame '" + std::string(frame_type_name(frame_type(message))) +
                     "': " + std::to_string(payload) + " payload bytes exceed the limit of " +
                     std::to_string(kMaxFramePayload));
  }
  for (int i = 0; i < 4; ++i) {
    out[8 + static_cast<std::size_t>(i)] = static_cast<std::byte>((payload >> (8 * i)) & 0xff);
  }
  return std::move(out);
}

FrameHeader decode_header(std::span<const std::byte> bytes, std::uint32_t max_payload) {
  if (bytes.size() != kFrameHeaderSize) {
    throw FrameError("control frame header: " + std::to_string(bytes.size()) + " bytes, expected " +
                     std::to_string(kFrameHeaderSize));
  }
  Reader r(bytes, "header");
  const std::uint32_t magic = r.u32("magic");
  if (magic != kControlMagic) {
    throw FrameError(
        fmt::format("control frame header: bad magic {:#010x} (not a Tandem "
                    "control-plane peer)",
                    magic));
  }
  const std::uint16_t version = r.u16("version");
  const std::uint16_t type = r.u16("type");
  if (version != kControlVersion) {
    throw FrameError("control frame header: protocol version " + std::to_string(version) +
                     ", this build speaks version " + std::to_string(kControlVersion));
  }
  if (type < static_cast<std::uint16_t>(FrameType::kHello) ||
      type > static_cast<std::uint16_t>(kLastFrameType)) {
    throw FrameError("control frame header: unknown frame type " + std::to_string(type));
  }
  const std::uint32_t size = r.u32("payload length");
  if (size > max_payload) {
    throw FrameError("control frame header: payload of " + std::to_string(size) +
                     " bytes exceeds the limit of " + std::to_string(max_payload) + " for '" +
                     std::string(frame_type_name(static_cast<FrameType>(type))) + "'");
  }
  return {static_cast<FrameType>(type), size};
}

ControlMessage decode_payload(FrameType type, std::span<const std::byte> payload) {
  Reader r(payload, frame_type_name(type));
  ControlMessage m;
  switch (type) {
    case FrameType::kHello: {
      Hello h;
      h.self = read_peer(r);
      r.digest("proof", h.proof);
      m = std::move(h);
      break;
    }
    case FrameType::kJoinRequest: {
      JoinRequest j;
      j.rank = r.u32("rank");
      j.world_size = r.u32("world_size");
      r.digest("client_nonce", j.client_nonce);
      m = j;
      break;
    }
    case FrameType::kChallenge: {
      Challenge c;
      r.digest("server_nonce", c.server_nonce);
      r.digest("job", c.job);
      r.digest("proof", c.proof);
      m = c;
      break;
    }
    case FrameType::kRefused:
      m = Refused{r.text("reason", kMaxTextField)};
      break;
    case FrameType::kPeerTable: {
      const std::uint32_t n = r.u32("count");
      // Each peer takes at least 16 bytes (rank and three lengths): a count the payload cannot
      // hold is refused before anything is reserved.
      if (n == 0 || n > kMaxWorldSize || n > r.left() / 16) {
        r.fail("count", std::to_string(n) + " peers cannot be in " + std::to_string(r.left()) +
                            " bytes (or is outside 1.." + std::to_string(kMaxWorldSize) + ")");
      }
      PeerTable t;
      t.peers.reserve(n);
      for (std::uint32_t i = 0; i < n; ++i) {
        t.peers.push_back(read_peer(r));
        if (t.peers.back().rank != i) {
          r.fail("rank", "entry " + std::to_string(i) + " names rank " +
                             std::to_string(t.peers.back().rank) + " (entries are in rank order)");
        }
      }
      m = std::move(t);
      break;
    }
    case FrameType::kBarrierEnter:
      m = BarrierEnter{r.text("name", kMaxTextField)};
      break;
    case FrameType::kBarrierRelease:
      m = BarrierRelease{r.text("name", kMaxTextField)};
      break;
    case FrameType::kKvSet: {
      KvSet s;
      s.key = r.text("key", kMaxTextField);
      s.value = r.bytes("value", kMaxValueField);
      m = std::move(s);
      break;
    }
    case FrameType::kKvGet: {
      KvGet g;
      g.request = r.u64("request");
      g.key = r.text("key", kMaxTextField);
      m = std::move(g);
      break;
    }
    case FrameType::kKvValue: {
      KvValue v;
      v.request = r.u64("request");
      v.value = r.bytes("value", kMaxValueField);
      m = std::move(v);
      break;
    }
    case FrameType::kKvTake: {
      KvTake t;
      t.request = r.u64("request");
      t.key = r.text("key", kMaxTextField);
      m = std::move(t);
      break;
    }
    case FrameType::kHeartbeat: {
      Heartbeat h;
      h.completed = r.u64("completed");
      h.has_work = r.flag("has_work");
      h.waiting_for = r.text("waiting_for", kMaxTextField);
      m = std::move(h);
      break;
    }
    case FrameType::kRankLost: {
      RankLost l;
      l.rank = r.u32("rank");
      l.host = r.text("host", kMaxTextField);
      l.reason = r.text("reason", kMaxTextField);
      m = std::move(l);
      break;
    }
    case FrameType::kGoodbye:
      m = Goodbye{};
      break;
    default:
      throw FrameError("control frame: unknown frame type " +
                       std::to_string(static_cast<unsigned>(type)));
  }
  r.finish();
  return m;
}

ControlMessage decode_frame(std::span<const std::byte> bytes, std::uint32_t max_payload) {
  if (bytes.size() < kFrameHeaderSize) {
    throw FrameError("control frame: " + std::to_string(bytes.size()) +
                     " bytes, shorter than its " + std::to_string(kFrameHeaderSize) +
                     "-byte header (truncated frame)");
  }
  const FrameHeader h = decode_header(bytes.first(kFrameHeaderSize), max_payload);
  const std::span<const std::byte> rest = bytes.subspan(kFrameHeaderSize);
  if (rest.size() != h.payload_size) {
    throw FrameError("control frame '" + std::string(frame_type_name(h.type)) + "': header says " +
                     std::to_string(h.payload_size) + " payload bytes, buffer holds " +
                     std::to_string(rest.size()));
  }
  return decode_payload(h.type, rest);
}

std::string printable(std::string_view text, std::size_t limit) {
  static constexpr char kDigits[] = "0123456789abcdef";
  const std::size_t keep = limit > 3 ? limit - 3 : 0;  // room left beside the "..." of a cut
  std::string out;
  std::size_t cut = 0;  // the longest escaped prefix that fits beside the "..."
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c >= 0x20 && c <= 0x7e && c != '\\') {
      out.push_back(ch);
    } else {
      out += {'\\', 'x', kDigits[c >> 4], kDigits[c & 0xf]};
    }
    if (out.size() <= keep) cut = out.size();
    if (out.size() > limit) break;
  }
  if (out.size() <= limit) return out;
  out.resize(cut);
  out.append(std::min<std::size_t>(3, limit), '.');
  return out;
}

}  // namespace tandem::transport

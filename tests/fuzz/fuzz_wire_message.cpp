// libFuzzer target for the data plane's frame decoders (transport/wire_message.hpp), what a
// process reads from a peer's data connection: any bytes either decode to one frame (a message,
// or a handshake's hello or proof) or raise WireError; a frame that decodes encodes again to one
// that decodes to the same fields (a message: the same envelope, tensors and bytes).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "actors/messages.hpp"
#include "transport/wire_message.hpp"

namespace {

namespace tt = tandem::transport;

const tt::WireTypes& pipeline_types() {
  namespace ta = tandem::actors;
  static const tt::WireTypes types = [] {
    tt::WireTypes t;
    t.add<ta::ForwardTensor>()
        .add<ta::BackwardTensor>()
        .add<ta::Credit>()
        .add<ta::LossReport>()
        .add<ta::GradNormReport>()
        .add<ta::StopRequest>()
        .add<ta::StopAt>()
        .add<ta::StageFinished>();
    return t;
  }();
  return types;
}

bool same_tensors(const tandem::Message& a, const tandem::Message& b) {
  if (a.tensors.size() != b.tensors.size()) return false;
  const auto pa = tt::wire_payload(a);
  const auto pb = tt::wire_payload(b);
  if (pa.size() != pb.size()) return false;
  for (std::size_t i = 0; i < pa.size(); ++i) {
    if (pa[i].size() != pb[i].size() ||
        std::memcmp(pa[i].data(), pb[i].data(), pa[i].size()) != 0) {
      return false;
    }
  }
  return true;
}

void message_round_trip(std::span<const std::byte> bytes, const tt::WireRules& rules) {
  const tt::WireMessage first = tt::decode_wire_message(bytes, rules);
  const std::vector<std::byte> again =
      tt::encode_wire_message(rules.job, first.from, first.to, first.msg, pipeline_types());
  const tt::WireMessage second = tt::decode_wire_message(again, rules);
  if (second.from != first.from || second.to != first.to ||
      second.msg.env.type != first.msg.env.type || second.msg.env.lane != first.msg.env.lane ||
      second.msg.env.flags != first.msg.env.flags || !(second.msg.env.tag == first.msg.env.tag) ||
      std::memcmp(second.msg.env.body, first.msg.env.body, sizeof(first.msg.env.body)) != 0 ||
      !same_tensors(first.msg, second.msg)) {
    __builtin_trap();
  }
}

// A handshake frame (prefix and meta part, nothing after): decoded, encoded again byte for byte.
void handshake_round_trip(std::span<const std::byte> bytes, tt::WireFrameKind kind) {
  const auto meta = bytes.subspan(tt::kWirePrefixBytes);
  std::vector<std::byte> again;
  if (kind == tt::WireFrameKind::hello) {
    again = tt::encode_wire_hello(tt::decode_wire_hello(meta));
  } else {
    again = tt::encode_wire_proof(tt::decode_wire_proof(meta));
  }
  if (again.size() != bytes.size() || std::memcmp(again.data(), bytes.data(), bytes.size()) != 0) {
    __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const tt::WireRules rules{.job = 7, .types = &pipeline_types(), .max_data_bytes = 1u << 20};
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  try {
    if (size < tt::kWirePrefixBytes) {
      (void)tt::decode_wire_message(bytes, rules);  // refuses it, naming the prefix
      return 0;
    }
    const tt::WirePrefix pre = tt::decode_wire_prefix(bytes.first(tt::kWirePrefixBytes));
    if ((pre.kind == tt::WireFrameKind::hello || pre.kind == tt::WireFrameKind::proof) &&
        size == tt::kWirePrefixBytes + pre.meta_bytes) {
      handshake_round_trip(bytes, pre.kind);
    } else if (pre.kind == tt::WireFrameKind::hello || pre.kind == tt::WireFrameKind::proof) {
      // Cut short or too long: the meta part's decoder must refuse it.
      const auto meta = bytes.subspan(tt::kWirePrefixBytes);
      if (pre.kind == tt::WireFrameKind::hello) {
        (void)tt::decode_wire_hello(meta);
      } else {
        (void)tt::decode_wire_proof(meta);
      }
      __builtin_trap();  // accepted a meta part of another size than its kind's
    } else {
      message_round_trip(bytes, rules);
    }
  } catch (const tt::WireError&) {
    return 0;
  }
  return 0;
}

// libFuzzer target for the data plane's frame decoder (transport/wire_message.hpp), what a
// process reads from a peer's data connection: any bytes either decode to one message frame or
// raise WireError; a message that decodes encodes again to a frame that decodes to the same
// envelope, tensors and bytes.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "actors/messages.hpp"
#include "transport/wire_message.hpp"

namespace {

const tandem::transport::WireTypes& pipeline_types() {
  namespace ta = tandem::actors;
  static const tandem::transport::WireTypes types = [] {
    tandem::transport::WireTypes t;
    t.add<ta::ForwardTensor>()
        .add<ta::BackwardTensor>()
        .add<ta::Credit>()
        .add<ta::LossReport>()
        .add<ta::StopRequest>()
        .add<ta::StopAt>()
        .add<ta::StageFinished>();
    return t;
  }();
  return types;
}

bool same_tensors(const tandem::Message& a, const tandem::Message& b) {
  if (a.tensors.size() != b.tensors.size()) return false;
  const auto pa = tandem::transport::wire_payload(a);
  const auto pb = tandem::transport::wire_payload(b);
  if (pa.size() != pb.size()) return false;
  for (std::size_t i = 0; i < pa.size(); ++i) {
    if (pa[i].size() != pb[i].size() ||
        std::memcmp(pa[i].data(), pb[i].data(), pa[i].size()) != 0) {
      return false;
    }
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace tt = tandem::transport;
  const tt::WireRules rules{.job = 7, .types = &pipeline_types(), .max_data_bytes = 1u << 20};
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  tt::WireMessage first;
  try {
    first = tt::decode_wire_message(bytes, rules);
  } catch (const tt::WireError&) {
    return 0;
  }
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
  return 0;
}

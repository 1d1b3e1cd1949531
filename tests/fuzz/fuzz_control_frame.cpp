// libFuzzer target for the control plane's frame decoder (transport/control_frame.hpp), what
// rank 0 reads from any process that connects to its port and what a joining rank reads from
// whatever answers at the master address: any bytes either decode to one frame (of any type,
// the join's request, challenge and proven hello, kv-take and heartbeats with progress
// included) or raise FrameError; a frame that decodes encodes back to the same bytes (nothing
// is read that the frame does not hold, nothing held is dropped). The seeds hold one frame of
// every type (tests/fuzz/corpus/control_frame/).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "transport/control_frame.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace tt = tandem::transport;
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  tt::ControlMessage message;
  try {
    // A hello's limit first, as rank 0 applies it to a connection that has not said hello.
    message = tt::decode_frame(bytes, tt::kMaxHelloPayload);
  } catch (const tt::FrameError&) {
    return 0;
  }
  const std::vector<std::byte> again = tt::encode_frame(message);
  if (again.size() != size || std::memcmp(again.data(), data, size) != 0) __builtin_trap();
  return 0;
}

#pragma once
// Which bytes of a message's data part travel on which stream of a multi-stream connection
// (TcpChannel's lanes). Both ends compute the split from the data size alone, so the stripes
// carry no framing: lane 0 has the message's head and the first stripe, lane k the k-th stripe,
// each lane in the order of the messages.
//
// Why stripe at all: over loopback one TCP stream is bound by the per-socket work the sender's
// and the receiver's threads serialise on; two streams let them overlap (ucx_perftest stripes
// its rendezvous over two interfaces the same way). Small messages stay whole on lane 0.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace tandem::transport {

// Messages whose data part is smaller travel whole on lane 0.
inline constexpr std::uint64_t kWireStripeMinBytes = std::uint64_t{256} << 10;
// Stripe boundaries fall on multiples of this (pages of the receiving tensors).
inline constexpr std::uint64_t kWireStripeAlign = 4096;

struct WireByteRange {
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
  bool operator==(const WireByteRange&) const = default;
};

// The bytes of a `data_bytes` data part that lane `lane` of `lanes` carries: contiguous ranges
// in lane order covering the data part exactly (some possibly empty).
WireByteRange wire_stripe(std::uint64_t data_bytes, int lanes, int lane);

// Calls `piece(span)` for each piece of `parts` (a data part as consecutive spans) that falls in
// `range`, in order; nothing is allocated (it runs for every message a channel sends).
template <class Byte, class Piece>
void for_each_wire_piece(const std::vector<std::span<Byte>>& parts, WireByteRange range,
                         Piece&& piece) {
  std::uint64_t at = 0;  // offset of the current part in the data part
  const std::uint64_t end = range.offset + range.length;
  for (const std::span<Byte> part : parts) {
    if (at >= end) break;
    const std::uint64_t part_end = at + part.size();
    if (part_end > range.offset) {
      const std::uint64_t from = std::max(at, range.offset) - at;
      const std::uint64_t to = std::min(part_end, end) - at;
      if (to > from) piece(part.subspan(from, to - from));
    }
    at = part_end;
  }
}

}  // namespace tandem::transport

#include "transport/wire_stripes.hpp"

#include <algorithm>
#include <stdexcept>

namespace tandem::transport {

WireByteRange wire_stripe(std::uint64_t data_bytes, int lanes, int lane) {
  if (lanes < 1 || lane < 0 || lane >= lanes) {
    throw std::invalid_argument("wire_stripe: lane outside [0, lanes)");
  }
  if (lanes == 1 || data_bytes < kWireStripeMinBytes) {
    return lane == 0 ? WireByteRange{0, data_bytes} : WireByteRange{data_bytes, 0};
  }
  const auto n = static_cast<std::uint64_t>(lanes);
  const std::uint64_t piece =
      ((data_bytes + n - 1) / n + kWireStripeAlign - 1) / kWireStripeAlign * kWireStripeAlign;
  const std::uint64_t from = std::min(data_bytes, piece * static_cast<std::uint64_t>(lane));
  const std::uint64_t to = std::min(data_bytes, from + piece);
  return {from, to - from};
}

}  // namespace tandem::transport

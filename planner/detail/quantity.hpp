#pragma once
// Numbers with units in configs: "25 GB/s", "100 Gbit/s", "80 GiB".
#include <optional>
#include <string_view>

namespace tandem::planner::detail {

// Bytes per second. A bare number means GB/s. nullopt when not understood.
std::optional<double> parse_bandwidth(std::string_view text);
// Bytes. A bare number means bytes. nullopt when not understood.
std::optional<double> parse_bytes(std::string_view text);

}  // namespace tandem::planner::detail

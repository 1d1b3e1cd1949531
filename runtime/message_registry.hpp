#pragma once
// Names of message types, so errors and traces can say "ping" instead of 0x1c3a...
#include <cstdint>
#include <string_view>

namespace tandem {

constexpr std::uint32_t message_type_id(std::string_view name) {
  std::uint32_t h = 2166136261u;  // FNV-1a
  for (char c : name) {
    h ^= static_cast<std::uint8_t>(c);
    h *= 16777619u;
  }
  return h;
}

// Registers `name` under `id`; two different names with one id is a programming error.
void register_message_type(std::uint32_t id, std::string_view name);
// The registered name, or "<unknown type 0x...>".
std::string_view message_type_name(std::uint32_t id);

}  // namespace tandem

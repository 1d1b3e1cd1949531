#include "transport/collective_group.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <vector>

namespace tandem::transport {

std::string members_text(std::span<const Endpoint> group, const char* separator) {
  std::string out;
  for (std::size_t i = 0; i < group.size(); ++i) {
    if (i > 0) out += separator;
    out += std::to_string(group[i]);
  }
  return out;
}

std::string group_key(std::span<const Endpoint> group) {
  std::string text = members_text(group, ",");
  if (text.size() <= 512) return text;
  std::uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a
  for (const char c : text) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
  return fmt::format("{}..{}.n{}.{:016x}", group.front(), group.back(), group.size(), h);
}

int member_rank(std::span<const Endpoint> group, Endpoint member, const std::string& where) {
  const auto at = std::find(group.begin(), group.end(), member);
  if (at == group.end()) {
    throw std::invalid_argument(
        fmt::format("{}: endpoint {} is not a member", where, std::to_string(member)));
  }
  std::vector<Endpoint> sorted(group.begin(), group.end());
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
    throw std::invalid_argument(where + ": the group names a member twice");
  }
  return static_cast<int>(at - group.begin());
}

}  // namespace tandem::transport

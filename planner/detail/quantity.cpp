#include "planner/detail/quantity.hpp"

#include <cctype>
#include <charconv>
#include <cmath>
#include <string>
#include <utility>

namespace tandem::planner::detail {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// Splits "12.5 GB/s" into 12.5 and "GB/s".
std::optional<std::pair<double, std::string_view>> split(std::string_view text) {
  text = trim(text);
  double value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end == text.data() || !std::isfinite(value)) return std::nullopt;
  return std::pair{value, trim(text.substr(static_cast<std::size_t>(end - text.data())))};
}

template <std::size_t N>
std::optional<double> scaled(std::string_view text, double bare_scale,
                             const std::pair<std::string_view, double> (&units)[N]) {
  const auto parts = split(text);
  if (!parts) return std::nullopt;
  if (parts->second.empty()) return parts->first * bare_scale;
  for (const auto& [name, scale] : units) {
    if (parts->second == name) return parts->first * scale;
  }
  return std::nullopt;
}

}  // namespace

std::optional<double> parse_bandwidth(std::string_view text) {
  static constexpr std::pair<std::string_view, double> units[] = {
      {"B/s", 1.0},      {"KB/s", 1e3},     {"MB/s", 1e6},        {"GB/s", 1e9},
      {"TB/s", 1e12},    {"KiB/s", 1024.0}, {"MiB/s", 1048576.0}, {"GiB/s", 1073741824.0},
      {"bit/s", 0.125},  {"Kbit/s", 125.0}, {"Mbit/s", 125e3},    {"Gbit/s", 125e6},
      {"Tbit/s", 125e9},
  };
  return scaled(text, 1e9, units);
}

std::optional<double> parse_bytes(std::string_view text) {
  static constexpr std::pair<std::string_view, double> units[] = {
      {"B", 1.0},         {"KB", 1e3},           {"MB", 1e6},
      {"GB", 1e9},        {"TB", 1e12},          {"KiB", 1024.0},
      {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0},
  };
  return scaled(text, 1.0, units);
}

}  // namespace tandem::planner::detail

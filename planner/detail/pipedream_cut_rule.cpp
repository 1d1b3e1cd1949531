#include "planner/detail/pipedream_cut_rule.hpp"

#include <cstddef>
#include <cstdint>

namespace tandem::planner::detail {
namespace {

// The layers each layer reads (the model input left out).
std::vector<std::vector<int>> readers_of(const Profile& profile) {
  const auto n = profile.layers.size();
  std::vector<std::vector<int>> readers(n);
  for (std::size_t l = 0; l < n; ++l) {
    const std::vector<int>& inputs = profile.layers[l].inputs;
    if (inputs.empty()) {
      if (l > 0) readers[l - 1].push_back(static_cast<int>(l));
      continue;
    }
    for (const int p : inputs) {
      if (p >= 0) readers[static_cast<std::size_t>(p)].push_back(static_cast<int>(l));
    }
  }
  return readers;
}

}  // namespace

std::vector<double> pipedream_cut_bytes(const Profile& profile) {
  const auto n = profile.layers.size();
  std::vector<double> cuts(n);
  if (!is_graph(profile)) {
    for (std::size_t l = 0; l < n; ++l) cuts[l] = profile.layers[l].activation_bytes;
    return cuts;
  }
  const std::vector<std::vector<int>> readers = readers_of(profile);
  // ancestors[l]: bit p set when layer p precedes layer l (a path p -> ... -> l).
  const std::size_t words = (n + 63) / 64;
  std::vector<std::vector<std::uint64_t>> ancestors(n, std::vector<std::uint64_t>(words));
  for (std::size_t p = 0; p < n; ++p) {
    for (const int r : readers[p]) {
      auto& into = ancestors[static_cast<std::size_t>(r)];
      for (std::size_t w = 0; w < words; ++w) into[w] |= ancestors[p][w];
      into[p / 64] |= std::uint64_t{1} << (p % 64);
    }
  }
  const auto precedes = [&](std::size_t p, std::size_t x) {
    return ((ancestors[x][p / 64] >> (p % 64)) & 1U) != 0;
  };
  std::vector<char> charged(n);
  for (std::size_t c = 0; c + 1 < n; ++c) {
    std::fill(charged.begin(), charged.end(), 0);
    for (std::size_t x = 0; x <= c; ++x) {
      bool maximal = true;
      for (const int r : readers[x]) maximal = maximal && static_cast<std::size_t>(r) > c;
      if (!maximal) continue;
      charged[x] = 1;
      for (std::size_t p = 0; p < x; ++p) {
        if (!precedes(p, x)) continue;
        for (const int r : readers[p]) {
          const auto y = static_cast<std::size_t>(r);
          if (y != x && !precedes(y, x)) charged[p] = 1;
        }
      }
    }
    for (std::size_t l = 0; l <= c; ++l) {
      if (charged[l] != 0) cuts[c] += profile.layers[l].activation_bytes;
    }
  }
  cuts[n - 1] = profile.layers[n - 1].activation_bytes;
  return cuts;
}

}  // namespace tandem::planner::detail

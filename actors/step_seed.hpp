#pragma once
// The dropout seed of a minibatch: masks differ per minibatch and repeat across runs with the
// same seed, and single-device training uses the same function, so a pipeline reproduces it.
#include <cstdint>

namespace tandem::actors {

inline std::uint64_t step_seed(std::uint64_t seed, std::int64_t minibatch) {
  std::uint64_t x = seed * 0x9e3779b97f4a7c15ULL + static_cast<std::uint64_t>(minibatch) + 1;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace tandem::actors

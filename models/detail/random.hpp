#pragma once

#include <cmath>
#include <cstdint>

namespace tandem::models::detail {

// Counter-based randomness: every value is a pure function of (key, counter), so results do
// not depend on thread count, slicing or call order.
inline std::uint64_t mix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

inline std::uint64_t hash_combine(std::uint64_t a, std::uint64_t b) {
  return mix64(a ^ mix64(b + 0x632be59bd9b4e019ull));
}

// Uniform in [0, 1) with 24 random bits (exact in f32).
inline float uniform01(std::uint64_t key, std::uint64_t counter) {
  return static_cast<float>(hash_combine(key, counter) >> 40) * (1.0f / 16777216.0f);
}

// Standard normal (Box-Muller on two 53-bit uniforms).
inline double normal01(std::uint64_t key, std::uint64_t counter) {
  const std::uint64_t h1 = hash_combine(key, 2 * counter);
  const std::uint64_t h2 = hash_combine(key, 2 * counter + 1);
  const double u1 = (static_cast<double>(h1 >> 11) + 1.0) * (1.0 / 9007199254740993.0);
  const double u2 = static_cast<double>(h2 >> 11) * (1.0 / 9007199254740992.0);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

}  // namespace tandem::models::detail

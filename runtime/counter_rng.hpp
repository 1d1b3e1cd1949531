#pragma once
// Platform-stable random numbers, the one generator of the project. The standard library's
// engines and distributions differ between implementations, and a seed must reproduce a
// model's weights, a generated dataset or a plan anywhere, so the arithmetic is written out.
//
// The core is counter-based: every value is a pure function of (key, counter) through the
// SplitMix64 finalizer, so results do not depend on thread count, slicing or call order.
// RngStream is the stream adaptor for code that draws values one after another (shuffles,
// genetic algorithms, procedural data): xoshiro256** whose state comes from the same core.
#include <cmath>
#include <cstdint>
#include <numbers>

namespace tandem {

// SplitMix64: the state x advanced by the golden gamma, then mixed. Also a good 64-bit hash.
constexpr std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// The counter-based generator: 64 random bits for (key, counter). Also combines two hashes.
constexpr std::uint64_t counter_hash(std::uint64_t key, std::uint64_t counter) {
  return splitmix64(key ^ splitmix64(counter + 0x632be59bd9b4e019ULL));
}

// Uniform in [0, 1) with 24 random bits (exact in f32).
inline float counter_uniform_f32(std::uint64_t key, std::uint64_t counter) {
  return static_cast<float>(counter_hash(key, counter) >> 40) * (1.0f / 16777216.0f);
}

// Standard normal (Box-Muller on two 53-bit uniforms, counters 2 c and 2 c + 1).
inline double counter_normal(std::uint64_t key, std::uint64_t counter) {
  const std::uint64_t h1 = counter_hash(key, 2 * counter);
  const std::uint64_t h2 = counter_hash(key, 2 * counter + 1);
  const double u1 = (static_cast<double>(h1 >> 11) + 1.0) * (1.0 / 9007199254740993.0);
  const double u2 = static_cast<double>(h2 >> 11) * (1.0 / 9007199254740992.0);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

// Key of a stream: item `index` of stream `stream` under `seed` gets its own generator, so any
// item can be produced alone, in any order, with the same values.
constexpr std::uint64_t stream_key(std::uint64_t seed, std::uint64_t stream, std::uint64_t index) {
  return splitmix64(splitmix64(splitmix64(seed) ^ stream) ^ index);
}

// xoshiro256**: values one after another.
class RngStream {
 public:
  // State words splitmix64(seed + i * gamma), i = 0..3: SplitMix64's own sequence from `seed`
  // (the planner's streams).
  static RngStream from_seed(std::uint64_t seed) {
    RngStream r;
    for (std::uint64_t& word : r.s_) {
      word = splitmix64(seed);
      seed += 0x9e3779b97f4a7c15ULL;
    }
    return r;
  }
  // State words chained, s_i = splitmix64(s_{i-1}) from s_{-1} = key (the datasets' streams,
  // keyed by stream_key()).
  static RngStream from_key(std::uint64_t key) {
    RngStream r;
    for (std::uint64_t& word : r.s_) {
      key = splitmix64(key);
      word = key;
    }
    return r;
  }

  std::uint64_t next() {
    const std::uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const std::uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }

  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }

  // Uniform integer in [0, n), n >= 1, without modulo bias (rejection).
  std::uint64_t below(std::uint64_t n) {
    const std::uint64_t limit = ~std::uint64_t{0} - (~std::uint64_t{0} % n);
    std::uint64_t x = next();
    while (x >= limit) x = next();
    return x % n;
  }

  // Uniform in [0, bound), bound >= 1, with one draw (Lemire's multiply-shift on 32 bits; the
  // bias is below 2^-32 for small bounds): for hot loops over small ranges.
  std::uint32_t below_fast(std::uint32_t bound) {
    return static_cast<std::uint32_t>(((next() >> 32) * bound) >> 32);
  }

  // Standard normal through Box-Muller (both values used).
  double normal() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    const double u1 = 1.0 - uniform();  // (0, 1]: log is finite
    const double u2 = uniform();
    const double r = std::sqrt(-2.0 * std::log(u1));
    const double a = 2.0 * std::numbers::pi * u2;
    spare_ = r * std::sin(a);
    has_spare_ = true;
    return r * std::cos(a);
  }

 private:
  RngStream() = default;
  static std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

  std::uint64_t s_[4] = {};
  double spare_ = 0.0;
  bool has_spare_ = false;
};

}  // namespace tandem

#pragma once
// Platform-stable random numbers for data generation. std::normal_distribution and friends
// differ between standard libraries, and generated datasets must be the same everywhere a
// seed is given, so the conversions are written out here.
#include <cmath>
#include <cstdint>
#include <numbers>

namespace tandem::models::data::detail {

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Key for a counter-based stream: sample `index` of stream `stream` under `seed` gets its
// own generator, so any sample can be produced alone, in any order, with the same values.
inline uint64_t stream_key(uint64_t seed, uint64_t stream, uint64_t index) {
  return splitmix64(splitmix64(splitmix64(seed) ^ stream) ^ index);
}

// xoshiro256** seeded through SplitMix64.
class Rng {
 public:
  explicit Rng(uint64_t seed) {
    for (auto& s : s_) {
      seed = splitmix64(seed);
      s = seed;
    }
  }

  uint64_t next() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
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

  // Uniform integer in [0, n), without modulo bias.
  uint64_t below(uint64_t n) {
    const uint64_t limit = ~uint64_t{0} - (~uint64_t{0} % n);
    uint64_t x = next();
    while (x >= limit) x = next();
    return x % n;
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
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
  double spare_ = 0.0;
  bool has_spare_ = false;
};

}  // namespace tandem::models::data::detail

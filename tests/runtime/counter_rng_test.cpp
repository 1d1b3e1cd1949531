// The project's one generator: the published SplitMix64 sequence, pure counter-based values,
// and the stream adaptor's two seedings and ranges.
#include "runtime/counter_rng.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <set>

namespace tandem {
namespace {

constexpr std::uint64_t kGamma = 0x9e3779b97f4a7c15ULL;

TEST(CounterRng, SplitMix64MatchesThePublishedSequence) {
  // SplitMix64 from state 1234567 (Vigna's reference; also Rosetta Code's test vector).
  const std::uint64_t expected[] = {6457827717110365317ULL, 3203168211198807973ULL,
                                    9817491932198370423ULL, 4593380528125082431ULL,
                                    16408922859458223821ULL};
  std::uint64_t state = 1234567;
  for (const std::uint64_t want : expected) {
    EXPECT_EQ(splitmix64(state), want);
    state += kGamma;
  }
}

TEST(CounterRng, ValuesArePureFunctionsOfKeyAndCounter) {
  // Any order, any repetition: the same value for the same (key, counter).
  for (std::uint64_t c = 0; c < 100; ++c) {
    EXPECT_EQ(counter_hash(42, c), counter_hash(42, c));
    EXPECT_NE(counter_hash(42, c), counter_hash(43, c));
    const float u = counter_uniform_f32(7, c);
    EXPECT_GE(u, 0.0f);
    EXPECT_LT(u, 1.0f);
  }
  double sum = 0, squares = 0;
  constexpr int kDraws = 20000;
  for (int c = 0; c < kDraws; ++c) {
    const double x = counter_normal(3, static_cast<std::uint64_t>(c));
    ASSERT_TRUE(std::isfinite(x));
    sum += x;
    squares += x * x;
  }
  EXPECT_NEAR(sum / kDraws, 0.0, 0.05);
  EXPECT_NEAR(squares / kDraws, 1.0, 0.05);
}

TEST(CounterRng, StreamSeedings) {
  // from_seed: state words are SplitMix64's own sequence; from_key: chained. The first output
  // of xoshiro256** is rotl(s1 * 5, 7) * 9.
  const auto first_output = [](std::uint64_t s1) {
    const std::uint64_t x = s1 * 5;
    return ((x << 7) | (x >> 57)) * 9;
  };
  EXPECT_EQ(RngStream::from_seed(99).next(), first_output(splitmix64(99 + kGamma)));
  EXPECT_EQ(RngStream::from_key(99).next(), first_output(splitmix64(splitmix64(99))));
  auto a = RngStream::from_key(stream_key(1, 2, 3));
  auto b = RngStream::from_key(stream_key(1, 2, 3));
  for (int i = 0; i < 100; ++i) EXPECT_EQ(a.next(), b.next());
}

TEST(CounterRng, StreamRanges) {
  auto rng = RngStream::from_seed(5);
  std::set<std::uint64_t> seen;
  for (int i = 0; i < 2000; ++i) {
    const std::uint64_t x = rng.below(7);
    ASSERT_LT(x, 7u);
    seen.insert(x);
    ASSERT_LT(rng.below_fast(5), 5u);
    const double u = rng.uniform(2.0, 3.0);
    ASSERT_GE(u, 2.0);
    ASSERT_LT(u, 3.0);
  }
  EXPECT_EQ(seen.size(), 7u);
}

}  // namespace
}  // namespace tandem

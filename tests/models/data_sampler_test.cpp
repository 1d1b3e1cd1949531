#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <vector>

#include "models/data/minibatch_sampler.hpp"

namespace tandem::models::data {
namespace {

TEST(MinibatchSamplerTest, EachEpochIsAPermutationCutIntoFullMinibatches) {
  MinibatchSampler s(103, 10, 42);
  EXPECT_EQ(s.batches_per_epoch(), 10);
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    std::set<int64_t> seen;
    for (int64_t k = 0; k < 10; ++k) {
      const auto idx = s.indices(epoch * 10 + k);
      ASSERT_EQ(idx.size(), 10u);
      for (int64_t i : idx) {
        EXPECT_GE(i, 0);
        EXPECT_LT(i, 103);
        EXPECT_TRUE(seen.insert(i).second) << "index " << i << " twice in epoch " << epoch;
      }
    }
    EXPECT_EQ(seen.size(), 100u);
  }
}

TEST(MinibatchSamplerTest, IndicesArePureFunctionsOfSeedAndStep) {
  MinibatchSampler a(50, 8, 7), b(50, 8, 7), other(50, 8, 8);
  std::vector<std::vector<int64_t>> forward;
  for (int64_t step = 0; step < 20; ++step) forward.push_back(a.indices(step));
  // Any order of access (a resumed run, another loader) gives the same minibatches.
  for (int64_t step = 19; step >= 0; --step)
    EXPECT_EQ(b.indices(step), forward[static_cast<size_t>(step)]);
  bool differs = false;
  for (int64_t step = 0; step < 20; ++step)
    differs |= other.indices(step) != forward[static_cast<size_t>(step)];
  EXPECT_TRUE(differs);
  // Epochs are shuffled differently.
  EXPECT_NE(a.permutation(0), a.permutation(1));
  std::vector<int64_t> sorted = a.permutation(0);
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 50; ++i) EXPECT_EQ(sorted[static_cast<size_t>(i)], i);
}

TEST(MinibatchSamplerTest, UnshuffledVisitsInOrderAndBadSizesThrow) {
  MinibatchSampler s(9, 4, 1, /*shuffle=*/false);
  EXPECT_EQ(s.indices(0), (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(s.indices(1), (std::vector<int64_t>{4, 5, 6, 7}));
  EXPECT_EQ(s.indices(2), (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_THROW(MinibatchSampler(3, 4, 1), std::invalid_argument);
  EXPECT_THROW(MinibatchSampler(3, 0, 1), std::invalid_argument);
  EXPECT_THROW(s.indices(-1), std::invalid_argument);
}

}  // namespace
}  // namespace tandem::models::data

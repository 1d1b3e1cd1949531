#include "planner/gpipe_partitioner.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

namespace tandem::planner {
namespace {

// Every choice of stages - 1 cut positions among the n - 1 gaps.
double brute_force(int n, int stages, const std::function<double(int, int)>& cost) {
  double best = std::numeric_limits<double>::infinity();
  std::vector<int> ends;
  std::function<void(int)> go = [&](int begin) {
    if (static_cast<int>(ends.size()) == stages - 1) {
      double worst = 0;
      int b = 0;
      for (const int e : ends) {
        worst = std::max(worst, cost(b, e));
        b = e;
      }
      best = std::min(best, std::max(worst, cost(b, n)));
      return;
    }
    for (int e = begin + 1; e < n; ++e) {
      ends.push_back(e);
      go(e);
      ends.pop_back();
    }
  };
  go(0);
  return best;
}

double bottleneck_of(const ContiguousPartition& p, const std::function<double(int, int)>& cost) {
  double worst = 0;
  int begin = 0;
  for (const int end : p.ends) {
    EXPECT_LT(begin, end);
    worst = std::max(worst, cost(begin, end));
    begin = end;
  }
  return worst;
}

TEST(GPipePartitioner, SmallExample) {
  const std::vector<double> w{1, 2, 3, 4, 5, 6};
  const ContiguousPartition p = partition_min_max(w, 3);
  EXPECT_DOUBLE_EQ(p.bottleneck, 9);  // [1 2 3 | 4 5 | 6] or [1 2 3 4 | 5 | 6]-style ties
  EXPECT_EQ(p.ends.back(), 6);
  EXPECT_EQ(p.ends.size(), 3u);
}

TEST(GPipePartitioner, EqualsBruteForceOnSums) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> weight(0.0, 10.0);
  for (int trial = 0; trial < 200; ++trial) {
    const int n = 1 + trial % 10;
    const int stages = 1 + (trial / 10) % n;
    std::vector<double> w(n);
    for (double& x : w) x = weight(rng);
    std::vector<double> prefix(n + 1, 0);
    for (int i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + w[i];
    const auto cost = [&](int b, int e) { return prefix[e] - prefix[b]; };
    const ContiguousPartition p = partition_min_max(w, stages);
    ASSERT_EQ(static_cast<int>(p.ends.size()), stages);
    EXPECT_NEAR(p.bottleneck, brute_force(n, stages, cost), 1e-12);
    EXPECT_NEAR(bottleneck_of(p, cost), p.bottleneck, 1e-12);
  }
}

TEST(GPipePartitioner, EqualsBruteForceOnArbitraryCosts) {
  // Non-monotone costs (a per-stage overhead, a cut penalty) and infeasible stages.
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> weight(0.0, 10.0);
  for (int trial = 0; trial < 200; ++trial) {
    const int n = 2 + trial % 9;
    const int stages = 1 + (trial / 9) % n;
    std::vector<double> w(n), penalty(n + 1);
    for (double& x : w) x = weight(rng);
    for (double& x : penalty) x = weight(rng);
    const double cap = 12 + weight(rng) * 3;
    const auto cost = [&](int b, int e) {
      double sum = penalty[b] * 0.3 + penalty[e] * 0.3;
      for (int i = b; i < e; ++i) sum += w[i];
      return sum > cap ? std::numeric_limits<double>::infinity() : sum;
    };
    const ContiguousPartition p = partition_min_max(n, stages, cost);
    const double expected = brute_force(n, stages, cost);
    if (std::isinf(expected)) {
      EXPECT_TRUE(std::isinf(p.bottleneck));
      continue;
    }
    EXPECT_NEAR(p.bottleneck, expected, 1e-12);
    EXPECT_NEAR(bottleneck_of(p, cost), p.bottleneck, 1e-12);
  }
}

TEST(GPipePartitioner, RejectsMoreStagesThanLayers) {
  const std::vector<double> w{1, 2, 3};
  try {
    partition_min_max(w, 4);
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "partition: cannot cut 3 layers into 4 stages");
  }
  EXPECT_THROW(partition_min_max(w, 0), std::invalid_argument);
}

}  // namespace
}  // namespace tandem::planner

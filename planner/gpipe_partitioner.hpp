#pragma once
// Exact min-max contiguous partition (the GPipe / flush-schedule partitioner).
#include <functional>
#include <span>
#include <vector>

namespace tandem::planner {

struct ContiguousPartition {
  std::vector<int> ends;  // stage s holds items [ends[s-1], ends[s]), ends.back() == n
  double bottleneck = 0;  // max over stages of cost(stage)
};

// Cuts items [0, n) into exactly `stages` non-empty contiguous stages minimising the largest
// cost(begin, end). Any cost function (monotone or not, infinite for "does not fit"); O(n^2 k)
// evaluations. Throws std::invalid_argument when stages < 1 or stages > n.
ContiguousPartition partition_min_max(int n, int stages,
                                      const std::function<double(int, int)>& cost);

// The same with cost = sum of weights, via prefix sums.
ContiguousPartition partition_min_max(std::span<const double> weights, int stages);

}  // namespace tandem::planner

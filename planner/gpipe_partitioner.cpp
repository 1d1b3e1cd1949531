#include "planner/gpipe_partitioner.hpp"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>

namespace tandem::planner {
namespace {

template <typename Cost>
ContiguousPartition solve(int n, int stages, const Cost& cost) {
  if (stages < 1) throw std::invalid_argument("partition: need at least one stage");
  if (stages > n) {
    throw std::invalid_argument("partition: cannot cut " + std::to_string(n) + " layers into " +
                                std::to_string(stages) + " stages");
  }
  constexpr double kInf = std::numeric_limits<double>::infinity();
  const auto width = static_cast<std::size_t>(n) + 1;
  // best[k * width + j]: items [0, j) in k + 1 stages; from[...]: where the last stage begins.
  std::vector<double> best(static_cast<std::size_t>(stages) * width, kInf);
  std::vector<int> from(best.size(), -1);
  for (int j = 1; j <= n; ++j) {
    best[j] = cost(0, j);
    from[j] = 0;
  }
  for (int k = 1; k < stages; ++k) {
    for (int j = k + 1; j <= n - (stages - 1 - k); ++j) {
      double& cell = best[k * width + j];
      for (int i = k; i < j; ++i) {
        const double head = best[(k - 1) * width + i];
        if (!(head < cell)) continue;
        const double value = std::max(head, cost(i, j));
        if (value < cell) {
          cell = value;
          from[k * width + j] = i;
        }
      }
    }
  }
  ContiguousPartition result;
  result.bottleneck = best[(stages - 1) * width + n];
  result.ends.assign(stages, n);
  int end = n;
  for (int k = stages - 1; k >= 0; --k) {
    result.ends[k] = end;
    const int begin = from[k * width + end];
    // Every cell on the path has a predecessor unless all costs were infinite.
    end = begin < 0 ? k : begin;
  }
  return result;
}

}  // namespace

ContiguousPartition partition_min_max(int n, int stages,
                                      const std::function<double(int, int)>& cost) {
  return solve(n, stages, cost);
}

ContiguousPartition partition_min_max(std::span<const double> weights, int stages) {
  std::vector<double> prefix(weights.size() + 1, 0);
  for (std::size_t i = 0; i < weights.size(); ++i) prefix[i + 1] = prefix[i] + weights[i];
  return solve(static_cast<int>(weights.size()), stages,
               [&](int begin, int end) { return prefix[end] - prefix[begin]; });
}

}  // namespace tandem::planner

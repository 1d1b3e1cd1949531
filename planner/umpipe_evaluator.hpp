#pragma once
// The makespan of one UMPIPE chromosome (packed cut rows, see cuts_of in umpipe_problem.hpp).
#include <cstdint>
#include <span>
#include <vector>

#include "planner/umpipe_problem.hpp"

namespace tandem::planner {

// One individual at a time: visits each stage's cuts (set bits) in order; a slice finds the
// neighbour's slices it overlaps with bit scans. O(P (B/64 + cuts)).
class UmpipeEvaluator {
 public:
  explicit UmpipeEvaluator(const UmpipeProblem& problem);
  // `cuts`: umpipe_gene_words(P, B) words, forward rows then backward rows.
  double makespan(std::span<const std::uint64_t> cuts);

 private:
  const UmpipeProblem* problem_;
  std::vector<double> upstream_, current_, forward_end_;
  bool constant_delays_ = true;  // then arrivals grow with the sample index
};

}  // namespace tandem::planner

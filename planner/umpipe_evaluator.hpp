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
  // t(0..B) per stage and direction (forward of stage s at s, backward at P + s), and the
  // delays per boundary (empty: none; one: every boundary).
  std::vector<std::vector<double>> times_, delays_;
  std::vector<double> upstream_, current_, forward_end_;
  bool constant_delays_ = true;  // then arrivals grow with the sample index
};

// The makespan of one slicing (UmpipeEvaluator on its cut rows). Throws std::invalid_argument
// when a partition is not a composition of B or the stage count differs.
double umpipe_makespan(const UmpipeProblem& problem, const UmpipeSlices& slices);

}  // namespace tandem::planner

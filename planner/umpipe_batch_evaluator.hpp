#pragma once
// Makespans of a whole population of UMPIPE chromosomes (packed cut rows, see cuts_of in
// umpipe_problem.hpp) at once.
#include <cstdint>
#include <span>
#include <vector>

#include "planner/umpipe_problem.hpp"

namespace tandem::planner {

namespace detail {
// A stage's costs in one direction as the batch kernels take them: the compute time t(b) and
// the delay d(b) of sending a b-sample slice on, both affine or both tabulated (t(0..B)).
struct UmpipeLane {
  bool affine = false;
  double fixed = 0, per_sample = 0, delay_fixed = 0, delay_per_sample = 0;
  const double* time = nullptr;
  const double* delay = nullptr;
};
}  // namespace detail

// A whole population at once (the TiDGAP idea): individuals become SIMD lanes and every stage
// is one branch-free scan over the samples with running maxima (device and arrival times) and
// sums (slice lengths), then one reverse scan that spreads each slice's arrival time at the
// next stage over its samples. Gives exactly the same numbers as UmpipeEvaluator.
class UmpipeBatchEvaluator {
 public:
  explicit UmpipeBatchEvaluator(const UmpipeProblem& problem);
  // `genes`: makespans.size() individuals of umpipe_gene_words(P, B) words, back to back.
  void evaluate(std::span<const std::uint64_t> genes, std::span<double> makespans);

 private:
  const UmpipeProblem* problem_;
  std::vector<detail::UmpipeLane> lanes_;  // forward of stage s at 2 s, backward at 2 s + 1
  std::vector<std::uint64_t> lane_bits_;   // [word][lane]: one row of every lane
  std::vector<double> upstream_, current_, send_, device_, length_, ready_, forward_device_;
  std::vector<double> no_delay_;
};

}  // namespace tandem::planner

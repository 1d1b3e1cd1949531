#pragma once
// Makespans of a whole population of UMPIPE chromosomes (packed cut rows, see cuts_of in
// umpipe_problem.hpp) at once.
#include <cstdint>
#include <span>
#include <vector>

#include "planner/detail/umpipe_lanes.hpp"
#include "planner/umpipe_problem.hpp"

namespace tandem::planner {

// Which batch kernels to run: the AVX-512 ones where the CPU has them, or the portable ones
// (compiler-vectorized) everywhere. Both give the same numbers.
enum class UmpipeKernels { best, portable };

// A whole population at once (the TiDGAP idea): individuals become SIMD lanes and every stage
// is one branch-free scan over the samples with running maxima (device and arrival times),
// then one reverse scan that spreads each slice's arrival time at the next stage over its
// samples. When every link delay is constant, arrivals never decrease along the samples and
// a slice looks only at its last sample's arrival. Gives exactly the same numbers as
// UmpipeEvaluator.
class UmpipeBatchEvaluator {
 public:
  explicit UmpipeBatchEvaluator(const UmpipeProblem& problem,
                                UmpipeKernels kernels = UmpipeKernels::best);
  // `genes`: makespans.size() individuals of umpipe_gene_words(P, B) words, back to back.
  void evaluate(std::span<const std::uint64_t> genes, std::span<double> makespans);
  // Whether the AVX-512 kernels run.
  bool wide() const { return wide_; }

 private:
  const UmpipeProblem* problem_;
  bool wide_ = false;
  bool monotone_ = true;                   // every link delay is the same for all slice sizes
  std::vector<detail::UmpipeLane> lanes_;  // forward of stage s at 2 s, backward at 2 s + 1
  std::vector<std::uint64_t> lane_bits_;   // [row][word][lane]: the block's genes
  std::vector<double> upstream_, current_, send_, device_, forward_device_, scratch_;
  std::vector<double> no_delay_;
};

}  // namespace tandem::planner

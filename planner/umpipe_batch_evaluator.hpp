#pragma once
// Makespans of a whole population of UMPIPE chromosomes (packed cut rows, see cuts_of in
// umpipe_problem.hpp) at once.
#include <cstdint>
#include <memory>
#include <span>

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
  UmpipeBatchEvaluator(UmpipeBatchEvaluator&&) noexcept;
  UmpipeBatchEvaluator& operator=(UmpipeBatchEvaluator&&) noexcept;
  ~UmpipeBatchEvaluator();
  // `genes`: makespans.size() individuals of umpipe_gene_words(P, B) words, back to back.
  void evaluate(std::span<const std::uint64_t> genes, std::span<double> makespans);
  // Whether the AVX-512 kernels run.
  bool wide() const { return wide_; }

 private:
  const UmpipeProblem* problem_;
  bool wide_ = false;
  struct State;  // the kernels' cost lanes and working buffers
  std::unique_ptr<State> state_;
};

}  // namespace tandem::planner

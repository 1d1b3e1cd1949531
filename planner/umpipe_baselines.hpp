#pragma once
// Slice plans UMPIPE's GA is measured against, and seeded with.
#include "planner/umpipe_problem.hpp"

namespace tandem::planner {

struct UmpipeCandidate {
  UmpipeSlices slices;
  double makespan = 0;
};

// GPipe's choice: m equal slices on every stage, the best m in 1..B.
UmpipeCandidate best_equal_slices(const UmpipeProblem& problem);

// Per stage, the slice size b minimising (f(b) + g(b)) / b (the largest on ties), repeated,
// with the remainder as the last slice; the same partition forward and backward.
UmpipeCandidate local_greedy_slices(const UmpipeProblem& problem);

// One partition for all stages, from a DP on an estimate of the makespan. With h(b) the
// slowest stage's f+g for b samples and H(b) the sum over stages, a composition costs about
// sum_j h(b_j) (the bottleneck's busy time) plus H(c) - h(c) for its largest slice c (that
// slice's trip through the other stages). For every cap c the DP finds the composition with
// slices <= c minimising sum_j h(b_j); forward runs the slices smallest first, backward
// largest first (small slices at both ends shorten fill and drain), and the candidate whose
// simulated makespan is lowest wins.
UmpipeCandidate global_greedy_slices(const UmpipeProblem& problem);

}  // namespace tandem::planner

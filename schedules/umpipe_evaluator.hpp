#pragma once
#include <cstdint>
#include <vector>

#include "schedules/cost.hpp"

namespace tandem::schedules {

// The makespan of one UMPIPE minibatch, for the planner's genetic algorithm that evaluates
// thousands of slicings: the same timing rules as Simulator on the umpipe schedule (each stage
// runs its forward slices in order, then its backward slices in order; a slice starts once
// every sample it needs has arrived), computed directly from the compositions in
// O(stages x slices) with the costs tabulated once and buffers reused.
class UmpipeEvaluator {
 public:
  // forward[s], backward[s]: stage s's duration for a slice of b samples, b = 1..minibatch.
  // delay[s]: a message between stage s and s + 1 carrying a slice of b samples (one entry
  // for all boundaries, or p - 1 entries).
  UmpipeEvaluator(std::int64_t minibatch, const std::vector<Cost>& forward,
                  const std::vector<Cost>& backward, const std::vector<Cost>& delay = {Cost{}});

  // forward_slices[s], backward_slices[s]: compositions of the minibatch (slice sizes in sample
  // order). Throws ScheduleError if one is not.
  double makespan(const std::vector<std::vector<std::int64_t>>& forward_slices,
                  const std::vector<std::vector<std::int64_t>>& backward_slices);

  int stages() const { return stages_; }

 private:
  double stage_pass(const std::vector<std::int64_t>& sizes, const double* cost, double free,
                    bool upstream, int boundary);

  int stages_;
  std::int64_t minibatch_;
  std::vector<double> forward_, backward_, delay_;  // [stage or boundary][b], b = 0..minibatch
  // Ends and sample bounds of the neighbouring stage's slices, and of the current stage's.
  std::vector<double> prev_end_, cur_end_;
  std::vector<std::int64_t> prev_bound_, cur_bound_;
  std::vector<double> free_;  // per stage: when its forwards are done
};

}  // namespace tandem::schedules

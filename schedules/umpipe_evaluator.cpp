#include "schedules/umpipe_evaluator.hpp"

#include <algorithm>
#include <string>

#include "schedules/schedule_error.hpp"

namespace tandem::schedules {
namespace {

void tabulate(const Cost& cost, std::int64_t minibatch, std::vector<double>& out) {
  for (std::int64_t b = 0; b <= minibatch; ++b) out.push_back(b == 0 ? 0.0 : cost(b));
}

}  // namespace

UmpipeEvaluator::UmpipeEvaluator(std::int64_t minibatch, const std::vector<Cost>& forward,
                                 const std::vector<Cost>& backward, const std::vector<Cost>& delay)
    : stages_(static_cast<int>(forward.size())), minibatch_(minibatch) {
  if (minibatch < 1) throw ScheduleError("umpipe evaluator: minibatch must be at least 1");
  if (forward.empty() || backward.size() != forward.size()) {
    throw ScheduleError("umpipe evaluator: need one forward and one backward cost per stage (" +
                        std::to_string(forward.size()) + " and " + std::to_string(backward.size()) +
                        " given)");
  }
  if (delay.size() != 1 && static_cast<int>(delay.size()) != stages_ - 1) {
    throw ScheduleError("umpipe evaluator: need one delay or one per stage boundary (" +
                        std::to_string(stages_ - 1) + "), got " + std::to_string(delay.size()));
  }
  for (const auto& c : forward) tabulate(c, minibatch, forward_);
  for (const auto& c : backward) tabulate(c, minibatch, backward_);
  for (int s = 0; s + 1 < stages_; ++s)
    tabulate(delay[delay.size() == 1 ? 0 : s], minibatch, delay_);
  free_.resize(stages_);
}

// One stage's slices in order. The first pass of a stage (no upstream data) sees prev_* empty.
// `upstream` edges carry the neighbour's slice sizes across `boundary` with its delay.
double UmpipeEvaluator::stage_pass(const std::vector<std::int64_t>& sizes, const double* cost,
                                   double free, bool upstream, int boundary) {
  cur_end_.clear();
  cur_bound_.clear();
  const double* delay = boundary >= 0 ? delay_.data() + boundary * (minibatch_ + 1) : nullptr;
  std::size_t j = 0;
  std::int64_t begin = 0;
  for (const std::int64_t size : sizes) {
    const std::int64_t end = begin + size;
    double ready = free;
    if (upstream) {
      // Neighbour slices overlapping [begin, end): prev_bound_ holds their ends.
      while (prev_bound_[j] <= begin) ++j;
      for (std::size_t k = j; k < prev_bound_.size(); ++k) {
        const std::int64_t lo = k == 0 ? 0 : prev_bound_[k - 1];
        if (lo >= end) break;
        ready = std::max(ready, prev_end_[k] + delay[prev_bound_[k] - lo]);
      }
    }
    free = ready + cost[size];
    cur_end_.push_back(free);
    cur_bound_.push_back(end);
    begin = end;
  }
  std::swap(prev_end_, cur_end_);
  std::swap(prev_bound_, cur_bound_);
  return free;
}

double UmpipeEvaluator::makespan(const std::vector<std::vector<std::int64_t>>& forward_slices,
                                 const std::vector<std::vector<std::int64_t>>& backward_slices) {
  if (static_cast<int>(forward_slices.size()) != stages_ ||
      static_cast<int>(backward_slices.size()) != stages_) {
    throw ScheduleError("umpipe evaluator: need slices for each of the " + std::to_string(stages_) +
                        " stages");
  }
  for (const auto* all : {&forward_slices, &backward_slices}) {
    for (int s = 0; s < stages_; ++s) {
      std::int64_t sum = 0;
      for (const auto b : (*all)[s]) {
        if (b < 1)
          throw ScheduleError("umpipe evaluator: a slice of stage " + std::to_string(s) +
                              " is empty or negative");
        sum += b;
      }
      if (sum != minibatch_) {
        throw ScheduleError("umpipe evaluator: the slices of stage " + std::to_string(s) +
                            " sum to " + std::to_string(sum) + ", not " +
                            std::to_string(minibatch_));
      }
    }
  }
  const std::int64_t row = minibatch_ + 1;
  for (int s = 0; s < stages_; ++s) {
    free_[s] = stage_pass(forward_slices[s], forward_.data() + s * row, 0.0, s > 0, s - 1);
  }
  double makespan = 0;
  // The backward of the last stage waits only for its own forwards (same device).
  for (int s = stages_ - 1; s >= 0; --s) {
    const double end = stage_pass(backward_slices[s], backward_.data() + s * row, free_[s],
                                  s + 1 < stages_, s + 1 < stages_ ? s : -1);
    makespan = std::max(makespan, end);
  }
  return makespan;
}

}  // namespace tandem::schedules

#include "planner/umpipe_baselines.hpp"

#include <algorithm>
#include <limits>

#include "planner/umpipe_evaluator.hpp"

namespace tandem::planner {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

double both(const UmpipeStageCost& stage, int b) {
  return stage.forward(b) + stage.backward(b);
}

}  // namespace

UmpipeCandidate best_equal_slices(const UmpipeProblem& problem) {
  UmpipeEvaluator evaluator(problem);
  UmpipeCandidate best;
  best.makespan = kInf;
  for (int m = 1; m <= problem.minibatch; ++m) {
    UmpipeSlices slices = equal_slices(problem.stage_count(), problem.minibatch, m);
    const double makespan = evaluator.makespan(cuts_of(slices, problem.minibatch));
    if (makespan < best.makespan) best = {std::move(slices), makespan};
  }
  return best;
}

UmpipeCandidate local_greedy_slices(const UmpipeProblem& problem) {
  problem.validate();
  const int samples = problem.minibatch;
  UmpipeCandidate result;
  for (const UmpipeStageCost& stage : problem.stages) {
    int chosen = 1;
    for (int b = 2; b <= samples; ++b) {
      if (both(stage, b) / b <= both(stage, chosen) / chosen) chosen = b;
    }
    std::vector<int> sizes(static_cast<std::size_t>(samples / chosen), chosen);
    if (samples % chosen != 0) sizes.push_back(samples % chosen);
    result.slices.forward.push_back(sizes);
    result.slices.backward.push_back(std::move(sizes));
  }
  result.makespan = umpipe_makespan(problem, result.slices);
  return result;
}

UmpipeCandidate global_greedy_slices(const UmpipeProblem& problem) {
  UmpipeEvaluator evaluator(problem);
  const int samples = problem.minibatch;
  std::vector<double> slowest(static_cast<std::size_t>(samples) + 1, 0);
  for (int b = 1; b <= samples; ++b) {
    for (const UmpipeStageCost& stage : problem.stages) {
      slowest[b] = std::max(slowest[b], both(stage, b));
    }
  }
  UmpipeCandidate best;
  best.makespan = kInf;
  std::vector<double> cost(static_cast<std::size_t>(samples) + 1);
  std::vector<int> last(static_cast<std::size_t>(samples) + 1);
  for (int cap = 1; cap <= samples; ++cap) {
    // cost[r]: cheapest composition of r samples into slices of at most `cap`.
    cost[0] = 0;
    for (int r = 1; r <= samples; ++r) {
      cost[r] = kInf;
      for (int b = 1; b <= std::min(r, cap); ++b) {
        const double value = cost[r - b] + slowest[b];
        if (value < cost[r]) {
          cost[r] = value;
          last[r] = b;
        }
      }
    }
    std::vector<int> forward;
    for (int r = samples; r > 0; r -= last[r]) forward.push_back(last[r]);
    std::sort(forward.begin(), forward.end());
    std::vector<int> backward(forward.rbegin(), forward.rend());
    UmpipeSlices slices;
    slices.forward.assign(problem.stages.size(), forward);
    slices.backward.assign(problem.stages.size(), backward);
    const double makespan = evaluator.makespan(cuts_of(slices, problem.minibatch));
    if (makespan < best.makespan) best = {std::move(slices), makespan};
  }
  return best;
}

}  // namespace tandem::planner

#pragma once
// Prefix sums of the PipeDream layers' costs, the one form in which the DP (plan_pipedream) and
// the model of PipeDream's optimizer (pipedream_optimizer_model.hpp) read them: any stage's
// totals in one subtraction, whatever its length.
#include <span>
#include <vector>

#include "planner/pipedream_dp.hpp"

namespace tandem::planner::detail {

// For a stage of layers i..j, x[j + 1] - x[i], for each of the sums below (N + 1 entries).
struct LayerSums {
  explicit LayerSums(std::span<const PipeDreamLayer> layers);

  std::vector<double> compute;  // compute_ms
  std::vector<double> weights;  // parameter_bytes
  std::vector<double> memory;   // memory_bytes
  // parameter_bytes + memory_bytes, added per layer before they are summed: a stage's one
  // version of weights and one minibatch's kept bytes, rounded as the DP's memory bound reads it.
  std::vector<double> footprint;
  // Not summed: layer l's activation_bytes (N entries), what crosses a cut after layer l.
  std::vector<double> activation;
};

}  // namespace tandem::planner::detail

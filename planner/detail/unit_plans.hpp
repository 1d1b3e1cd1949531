#pragma once
// How a stage replicated on units of an outer topology level is laid out, the same for
// plan_pipedream and the model of PipeDream's optimizer (pipedream_optimizer_model.hpp).
#include <cstddef>
#include <utility>
#include <vector>

#include "planner/pipedream_dp.hpp"

namespace tandem::planner::detail {

// A stage on several units of level k > 1 runs the same plan of level k-1 on each of them:
// stage s of `merged` holds stage s's workers of every unit, in unit order. Call once per unit,
// in order, starting from an empty `merged` (a unit's plan has at least one stage).
inline void add_unit_plan(std::vector<PipeDreamStage>& merged,
                          std::vector<PipeDreamStage> unit_plan) {
  if (merged.empty()) {
    merged = std::move(unit_plan);
    return;
  }
  for (std::size_t s = 0; s < merged.size(); ++s) {
    merged[s].workers.insert(merged[s].workers.end(), unit_plan[s].workers.begin(),
                             unit_plan[s].workers.end());
  }
}

}  // namespace tandem::planner::detail

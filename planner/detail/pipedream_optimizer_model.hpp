#pragma once
// PipeDream's own optimizer (msr-fiddle/pipedream, optimizer/optimizer_graph_hierarchical.py)
// as a cost model of plan_pipedream: what `--cost-model pipedream` plans with.
#include <span>

#include "planner/pipedream_dp.hpp"

namespace tandem::planner::detail {

// The plan PipeDream's optimizer chooses, with its predicted time per minibatch. Its objective
// differs from ours (docs/architecture.md#planner) in three ways: a replicated stage's weight sync
// is added to its compute, not overlapped (at level k > 1 the single-stage case divides the sync by
// the unit count of level k-1, the split case does not: both as PipeDream does); every stage but
// the first pays 2 a / (B r) for the activation a at each of its cuts, r being its own
// replicas; and every worker is used (a straight pipeline has exactly one stage per unit at
// every level). Ties go to the first split in (split layer, replicas) order. The memory bound,
// when finite, is PipeDream's rule: ceil((M - m) / r) x (kept bytes + weights) of a stage with
// r of the level's M units, m of them for its layers and the ones before. Stages and
// workers as plan_pipedream lays them out. Throws std::runtime_error when no plan exists.
PipeDreamPlan plan_as_pipedream_optimizer(std::span<const PipeDreamLayer> layers,
                                          std::span<const PipeDreamLevel> levels,
                                          const PipeDreamOptions& options);

}  // namespace tandem::planner::detail

#pragma once
// PipeDream's partitioning DP over a hierarchical topology (docs/architecture.md#planner), with
// stage replication, a configurable weight-sync factor and a per-worker memory bound.
#include <limits>
#include <span>
#include <vector>

namespace tandem::planner {

// Costs of one layer for one minibatch. Any consistent units: times in ms, sizes in bytes,
// bandwidths in bytes per ms make every term of the objective a time in ms.
struct PipeDreamLayer {
  double compute_ms = 0;        // forward + backward
  double parameter_bytes = 0;   // one version of the weights (w)
  double activation_bytes = 0;  // output (a): crosses a cut after this layer, both ways
  double memory_bytes = 0;      // kept per in-flight minibatch
};

// Level k joins `units` units of level k-1 (workers for the first level) at `bandwidth`.
struct PipeDreamLevel {
  int units = 1;
  double bandwidth = 1;
};

// How many weight versions a stage keeps (docs/schedules.md).
enum class WeightVersions {
  stashing,       // PipeDream: ceil(D / r), as many as its in-flight minibatches
  vertical_sync,  // p (the pipeline's depth) on every stage; needs replicate = false
};

// What the objective charges a stage (docs/planner.md compares the two on VGG16).
enum class CostModel {
  // docs/architecture.md#planner: a replicated stage costs max(compute, sync) / r (sync overlaps
  // compute), a cut 2 a / B once, and workers may stay idle when they do not help.
  overlapped,
  // PipeDream's own optimizer (optimizer_graph_hierarchical.py), to compare with its
  // published predictions: sync added to compute, activations divided by the replicas on
  // both cuts of a stage, every worker used (detail/pipedream_optimizer_model.hpp has the
  // rules). PipeDream's sync factor is 4.
  pipedream,
};

struct PipeDreamOptions {
  // sync_k(m, W) = sync_factor (m-1) W / (m B_k): 2 for a ring all-reduce of the gradients.
  double sync_factor = 2.0;
  // Per worker: versions * parameter_bytes + in_flight * memory_bytes of its stage, where
  // in_flight = ceil(D / r) minibatches (D: workers of this stage and every stage after it,
  // r: the stage's replicas) and versions follow `versions`.
  double memory_per_worker = std::numeric_limits<double>::infinity();
  // false: one worker per stage, at every level (schedules that cannot replicate).
  bool replicate = true;
  WeightVersions versions = WeightVersions::stashing;
  CostModel cost_model = CostModel::overlapped;
};

struct PipeDreamStage {
  int begin = 0;  // layers [begin, end)
  int end = 0;
  std::vector<int> workers;  // global worker indices, innermost level fastest
  double compute_ms = 0;
  int in_flight = 1;        // minibatches each replica keeps: ceil(D / r)
  int versions = 1;         // weight versions each replica keeps
  double memory_bytes = 0;  // per worker

  int replicas() const { return static_cast<int>(workers.size()); }
};

struct PipeDreamPlan {
  double time_per_minibatch = 0;  // the DP's objective: the slowest stage or link
  std::vector<PipeDreamStage> stages;
  int noam = 1;  // ceil(R / r_0): minibatches the input stage admits
  int workers_used() const;
};

// Optimal plan; workers may stay idle when using them does not help. Throws
// std::invalid_argument on malformed input and std::runtime_error when no plan fits the
// memory bound. Exact for one level; with several levels the memory bound is applied
// conservatively inside a unit (every worker outside it is assumed downstream), so a plan
// never exceeds it but a tighter one may be missed. Cost: O(N^3 M_k^2) per inner level and
// O(N^2 M_K^2) for the outermost at worst, much less in practice (splits that cannot beat the
// best so far are skipped: 256 layers on 8 x 16 workers take about 7 ms, see
// docs/benchmarks.md); vertical sync under a finite bound solves once per depth bound
// P = 1..min(N, workers) (exact for one level, conservative for several). With
// CostModel::pipedream: PipeDream's optimizer's plan and prediction, O(N^3 M_k^2) per level.
PipeDreamPlan plan_pipedream(std::span<const PipeDreamLayer> layers,
                             std::span<const PipeDreamLevel> levels,
                             const PipeDreamOptions& options = {});

}  // namespace tandem::planner

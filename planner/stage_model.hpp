#pragma once
// What a profiled model's layers cost as stages on a cluster: the simulator's per-stage costs,
// the bandwidth between two workers and where a worker runs. The planner's partitioners and the
// schedule ranking both charge a cut through these, so their predictions agree.
#include "planner/cluster.hpp"
#include "planner/profile.hpp"
#include "schedules/plan.hpp"

namespace tandem::planner {

// Layers [begin, end) of a profile as one stage: fixed and per-sample parts of F, B and W, the
// weights, the activations kept per sample and the output sent on per sample.
struct StageModel {
  double f_fixed = 0, f_sample = 0, b_fixed = 0, b_sample = 0, w_fixed = 0, w_sample = 0;
  double weight_bytes = 0, activation_per_sample = 0, output_per_sample = 0;
  double step = 0;  // the optimizer's update of the stage's weights
};

StageModel stage_model(const Profile& profile, int begin, int end);

// Worker w of the cluster: innermost level fastest.
schedules::Placement worker_placement(const Cluster& cluster, int worker);

// Bandwidth (bytes per ms) between workers a and b: the level where they first share a unit.
double bandwidth_between(const Cluster& cluster, int a, int b);

}  // namespace tandem::planner

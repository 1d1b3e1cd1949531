#pragma once
// From a profile and a cluster to a plan (schedules::Plan) with its predicted cost: the part
// of `tandem plan` that is not printing.
#include <cstdint>
#include <string>
#include <vector>

#include "planner/cluster.hpp"
#include "planner/pipedream_dp.hpp"
#include "planner/profile.hpp"
#include "planner/umpipe_ga.hpp"
#include "schedules/plan.hpp"
#include "schedules/schedule_kind.hpp"

namespace tandem::planner {

struct PlanRequest {
  schedules::ScheduleKind schedule = schedules::ScheduleKind::pipedream;
  int minibatch = 0;  // samples per minibatch; 0: the profile's
  int slices = 0;     // equal-slice schedules: 0 picks the fastest count in 1..minibatch
  int stages = 0;     // schedules without replication: 0 uses every worker
  // umpipe only. ga.progress, when set, hears of every generation of the search: plan_pipeline
  // passes it on unchanged and the plan does not depend on it.
  UmpipeGaOptions ga;
  // pipedream and pipedream-vsync: the DP's objective. CostModel::pipedream uses the
  // cluster's sync_factor if it gives one, else PipeDream's 4.
  CostModel cost_model = CostModel::overlapped;
};

struct PlannedStage {
  double compute_ms = 0;    // forward + backward of its layers for one minibatch
  double memory_bytes = 0;  // per worker
  int in_flight = 1;        // minibatches (PipeDream) or slices kept at the peak
  int versions = 1;         // weight versions kept (PipeDream: in_flight; vertical sync: p)
  std::vector<int> workers;
};

struct PlannedPipeline {
  schedules::Plan plan;
  std::string method;  // how it was found, for people
  // Flush schedules: the simulated makespan of one minibatch. PipeDream: the DP's steady-state
  // time per minibatch (its slowest stage or link).
  double time_per_minibatch_ms = 0;
  double bubble = 0;  // idle share of the used workers' time
  std::vector<PlannedStage> stages;
  int workers = 0;  // in the cluster
  int noam = 0;     // PipeDream: minibatches admitted at once
  // UMPIPE: the best equal-slice GPipe makespan, for comparison.
  double equal_slices_ms = 0;
  // PipeDream: the simulator's steady-state time per minibatch for the chosen plan (0: not
  // simulated), beside the DP's estimate in time_per_minibatch_ms.
  double simulated_ms = 0;
};

// Supported schedules: pipedream (the DP, replication allowed), pipedream-vsync (the DP, one
// worker per stage, p weight versions per stage), gpipe,
// 1f1b, zb-h1 and zb-2p (min-max partition, equal slices), umpipe (min-max partition, GA slices).
// Throws std::runtime_error with a message for people: more stages than layers, nothing fits
// the memory bound, an unsupported schedule.
PlannedPipeline plan_pipeline(const Profile& profile, const Cluster& cluster,
                              const PlanRequest& request);

}  // namespace tandem::planner

#pragma once
// A plan's predicted step on a profile and a cluster: the simulator run on the plan's own cut
// (virtual stages for chunked schedules), with each cut's link and each replicated stage's
// weight sync from the cluster. What the schedule ranking compares.
#include <vector>

#include "planner/cluster.hpp"
#include "planner/profile.hpp"
#include "schedules/plan.hpp"

namespace tandem::planner {

struct CutPrediction {
  // Flush schedules: one minibatch's makespan. Asynchronous ones: the steady-state time per
  // minibatch (the makespan's growth from n to 2n minibatches over n, without fill and drain).
  double step_ms = 0;
  double bubble = 0;                 // idle share of the devices' time
  std::vector<double> memory_bytes;  // per device: weights x versions kept + peak activations
  std::vector<int> peak_in_flight;   // per device
};

// Replica r of stage s runs on worker plan.schedule.device_of(s, r) of the cluster. Throws
// schedules::ScheduleError when the schedule cannot run the plan.
CutPrediction simulate_cut(const Profile& profile, const Cluster& cluster,
                           const schedules::Plan& plan);

// The plan with the slice count in 1..minibatch its schedule runs fastest; schedules that take
// whole minibatches (PipeDream, vertical sync) keep one. Throws schedules::ScheduleError with
// the last refusal when no count runs.
schedules::Plan fastest_slices(const Profile& profile, const Cluster& cluster,
                               schedules::Plan plan);

}  // namespace tandem::planner

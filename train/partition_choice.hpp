#pragma once
// `partition: auto`: the planner picks a pipeline's stages, their replicas and devices (and,
// where the schedule takes them, slices) from a profile of the model and a cluster; with
// `schedule: auto` it ranks every schedule on its own plans and the fastest becomes the job's.
// A step of its own, after a job is read and before it is checked against the machine, so the
// planned stages meet the same checks as stages written by hand.
#include <cstdint>
#include <optional>

#include "planner/cluster.hpp"
#include "planner/profile.hpp"
#include "planner/schedule_ranking.hpp"
#include "train/job_spec.hpp"

namespace tandem::train {

struct PartitionInputs {
  planner::Profile profile;  // one entry per layer of the model
  planner::Cluster cluster;
  bool allow_async = false;  // schedule auto: rank pipedream, pipedream-vsync and 2bw too
};

// Fills `pipeline`'s stages (which must be empty) from the planner's plan: replicas and devices
// as planned, each host a rank in the order the plan first names it (one process per host), and
// the slices where `pipeline` gives none. `minibatch` is one pipeline minibatch's samples.
// Returns the ranking when the schedule is "auto". Throws JobError at "pipeline.partition" when
// the planner finds no plan, at "pipeline.cluster" for a device the cluster names that is none,
// at "pipeline.schedule" when auto finds no schedule (naming why each was dropped).
std::optional<planner::ScheduleRanking> plan_partition(PipelineLayout& pipeline,
                                                       std::int64_t minibatch,
                                                       const PartitionInputs& inputs);

}  // namespace tandem::train

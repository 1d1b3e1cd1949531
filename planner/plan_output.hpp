#pragma once
// What `tandem plan` prints and writes.
#include <string>

#include "planner/pipeline_planner.hpp"
#include "planner/schedule_ranking.hpp"

namespace tandem::planner {

// A table for people: stages, replicas, workers, slices, predicted time, bubble, memory.
std::string format_plan(const PlannedPipeline& planned);

// `schedule: auto`'s table: per candidate its schedule, stages x replicas, slices, predicted
// step time, bubble and peak memory per device, the pick marked, and why each dropped one was
// dropped.
std::string format_ranking(const ScheduleRanking& ranking);

// The `pipeline:` section of a config (docs/config.md), as YAML text: schedule, slices
// (a count, or per stage {forward: [...], backward: [...]} for umpipe), chunks (when more
// than 1), rematerialize (when set) and stages with their
// layer ranges ("0-4", inclusive), replicas and device (`devices: [...]`, one per replica, when
// the replicas are on different devices).
std::string pipeline_yaml(const PlannedPipeline& planned);

// The plan as JSON (`tandem plan --json`): schedule, method, predicted time per minibatch,
// bubble, slices, and per stage its inclusive layer range, replicas' placements, workers,
// compute time, memory per worker, minibatches in flight and weight versions.
std::string plan_json(const PlannedPipeline& planned);

}  // namespace tandem::planner

#pragma once
// From the embedding API's plan to the one the actors run: kept apart from both so that either
// side can change without the other.
#include <string_view>

#include "schedules/plan.hpp"
#include "schedules/schedule_kind.hpp"
#include "tandem/tandem.hpp"
#include "train/job_spec.hpp"

namespace tandem::api {

// Throws tandem::Error (ErrorCode::plan) for Schedule::automatic, which names no schedule.
schedules::ScheduleKind schedule_kind(Schedule schedule);
// The API's Schedule of a config's schedule name ("1f1b", "2bw", "auto", ...).
Schedule api_schedule(std::string_view name);

// The API's plan as a job's pipeline layout (train/job_spec.hpp). Throws tandem::Error
// (ErrorCode::plan) naming the stage and field of an empty stage or an unknown device.
train::PipelineLayout pipeline_layout(const Plan& plan);

}  // namespace tandem::api

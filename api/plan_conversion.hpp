#pragma once
// From the embedding API's plan to the one the actors run: kept apart from both so that either
// side can change without the other.
#include "schedules/plan.hpp"
#include "schedules/schedule_kind.hpp"
#include "tandem/tandem.hpp"
#include "train/job_spec.hpp"

namespace tandem::api {

schedules::ScheduleKind schedule_kind(Schedule schedule);

// The API's plan as a job's pipeline layout (train/job_spec.hpp). Throws tandem::Error
// (ErrorCode::plan) naming the stage and field of an empty stage or an unknown device.
train::PipelineLayout pipeline_layout(const Plan& plan);

// A plan of `minibatches` minibatches for a model of `num_layers` layers, through the one
// conversion every job takes (train/job_plan.hpp). Throws tandem::Error naming the field,
// schedules::ScheduleError for what the schedule or the model's layers refuse.
schedules::Plan internal_plan(const Plan& plan, std::int64_t minibatches, int num_layers);

}  // namespace tandem::api

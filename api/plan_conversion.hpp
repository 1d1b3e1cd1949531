#pragma once
// From the embedding API's plan to the one the actors run: kept apart from both so that either
// side can change without the other.
#include "schedules/plan.hpp"
#include "schedules/schedule_kind.hpp"
#include "tandem/tandem.hpp"

namespace tandem::api {

schedules::ScheduleKind schedule_kind(Schedule schedule);

// A plan of `minibatches` minibatches. Throws std::invalid_argument naming the stage and field
// (stages' layers and devices are checked later, against the model, by the pipeline).
schedules::Plan internal_plan(const Plan& plan, std::int64_t minibatches);

}  // namespace tandem::api

#pragma once
// The JSON form of a schedule's parameters, written the same way wherever a file carries them
// (a checkpoint's plan, a pipeline trace's "tandem" object) so one reader's expectations hold
// for both. Each reader parses it itself: a checkpoint refuses what a trace tolerates.
#include <nlohmann/json.hpp>

#include "schedules/schedule_params.hpp"

namespace tandem::train {

// {"kind", "stages", "slices", "minibatch_size", "replicas", "chunks", "rematerialize",
// "minibatches", "forward_slices", "backward_slices"}; kind as schedules::to_string writes it.
nlohmann::json schedule_to_json(const schedules::ScheduleParams& params);

}  // namespace tandem::train

#pragma once
#include "schedules/action_list.hpp"

namespace tandem::schedules {

// Proves an action list runnable before anything runs; throws ScheduleError otherwise:
// - well formed: right device count, fields in range (every slice non-empty and within
//   [0, samples) of its minibatch), no samples computed twice on a stage;
// - complete: every F has its B (and its W where the stage splits B), every F's input comes
//   from upstream, every B's gradient from downstream;
// - no deadlock: the message names the first stuck action of every device and what it waits
//   for;
// - versions: each F/B/W finds its weight version (weight_version()) published and the stage
//   never holds more versions than versions_kept(); STEP rounds count up from 0.
void validate(const ActionList& list);

}  // namespace tandem::schedules

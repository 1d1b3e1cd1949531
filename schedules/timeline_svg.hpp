#pragma once
#include <string>

#include "schedules/action_list.hpp"
#include "schedules/simulator.hpp"

namespace tandem::schedules {

// An SVG picture of a simulated timeline, like the papers' figures: one row per device, one
// box per action (class "op"), F/B/W/SYNC/STEP coloured, chunks shaded, numbered by slice
// (the text form's token), a time axis below. Needs the result's timeline.
std::string timeline_svg(const ActionList& list, const SimulationResult& result);

}  // namespace tandem::schedules

#pragma once
#include <string>

#include "schedules/action_list.hpp"
#include "schedules/simulator.hpp"

namespace tandem::schedules {

// What `tandem simulate` prints, from a list and its simulation (with timeline).

// Makespan, bubble, then per device: stage, replica, busy, idle, bubble, peak in-flight
// (slices and samples), memory.
std::string format_report(const ActionList& list, const SimulationResult& result);

// One row per device, `width` columns for the makespan; each action shows its token
// ("F3", "B0") followed by a fill ('-' F, '=' B, '~' W, 'S' STEP, 'Y' SYNC); '.' is idle.
std::string format_ascii_timeline(const ActionList& list, const SimulationResult& result,
                                  int width = 100);

// The same as JSON: {"schedule", "makespan", "bubble", "devices": [...], "timeline": [...]}.
std::string format_json(const ActionList& list, const SimulationResult& result);

}  // namespace tandem::schedules

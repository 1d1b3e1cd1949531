#pragma once
#include <string>
#include <string_view>

#include "schedules/action_list.hpp"

namespace tandem::schedules {

// The text form of an action list, one line per device:
//
//   # comments and blank lines are skipped
//   schedule 1f1b stages=4 slices=8
//   d0: F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7 STEP
//   d1: ...
//
// The header (optional; default `schedule custom` with one stage per line) takes stages=P
// (default: the replicas' count, else one stage per line), replicas=2,1,1, chunks=V,
// slices=M, minibatch=B (samples, default M), minibatches=N and the flag remat. UMPIPE's
// compositions are not in the header: its slices are written out in the tokens.
// Devices are numbered stage by stage (replicas of stage 0 first) and must appear in order.
// An F, B or W token names by default the n-th slice overall: `F9` with slices=8 is slice 1
// (of 8 equal slices) of minibatch 1. A slice that is not one of the equal ones is explicit:
// `F0[2:5)` is samples [2,5) of minibatch 0, which must lie within the minibatch (minibatch=B,
// default: the slice count). A suffix `c1` names chunk 1. STEP and SYNC take
// their round only when it differs from their count so far on the device (`STEP7`).
std::string format_actions(const ActionList& list);

// Throws ScheduleError naming the line, column and token of the first error.
ActionList parse_actions(std::string_view text);

// One action as a token of the text form, without round context ("F3", "B0[2:5)c1", "STEP").
std::string format_action(const ScheduleParams& params, const Action& action);

}  // namespace tandem::schedules

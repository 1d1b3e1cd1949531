#pragma once
#include <string_view>
#include <vector>

namespace tandem::schedules {

enum class ScheduleKind {
  naive,            // model parallel, one slice at a time through the whole pipeline
  gpipe,            // all F, then all B; optional re-materialization
  one_f_one_b,      // 1F1B with flush (PipeDream-Flush)
  pipedream,        // asynchronous 1F1B-RR with weight stashing
  pipedream_vsync,  // asynchronous 1F1B with vertical sync
  pipedream_2bw,    // double-buffered weights, no flush
  interleaved,      // Megatron's interleaved 1F1B with v chunks per device
  zb_h1,            // zero bubble H1: B split into B and W
  zb_v,             // zero bubble V: two chunks per device in V order, B and W split
  zb_2p,            // zero bubble at twice 1F1B's activations: 2p - 1 - 2s warm-up forwards
  umpipe,           // unequal slices, per stage, forward and backward
  custom,           // a hand-written order (text form) with flush semantics: one version
  forward,          // forward only (prediction): F of every slice, no B, W, SYNC or STEP
};

// Names as in configs and on the command line: naive, gpipe, 1f1b, pipedream,
// pipedream-vsync, 2bw, interleaved, zb-h1, zb-v, zb-2p, umpipe, custom, forward.
std::string_view to_string(ScheduleKind kind);
// Throws ScheduleError listing the valid names.
ScheduleKind parse_schedule_kind(std::string_view name);

// The names a pipeline's `schedule:` may take, in the table's order: every kind but `naive`
// (no pipeline), `custom` (an order given as text, not by name) and `forward` (it trains
// nothing: prediction picks it, never a config).
std::vector<std::string_view> pipeline_schedule_names();

// Flush schedules update once per minibatch and keep one version; the others never flush.
bool is_asynchronous(ScheduleKind kind);

// Whether the schedule trains: false for `forward`, whose last stage has no targets and hands
// its outputs to the coordinator instead of a loss.
bool trains(ScheduleKind kind);

}  // namespace tandem::schedules

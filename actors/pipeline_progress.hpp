#pragma once
// Whether a pipeline's actors in this process move: what a watchdog samples (the control
// plane's heartbeat carries it) to tell a rank that lives but makes no progress (a kernel that
// never returns, a deadlock, frozen workers) from one that waits for another rank.
#include <cstdint>
#include <string>

namespace tandem::actors {

struct PipelineProgress {
  // Progress events of this process's stage replicas (messages handled, actions completed) and
  // of its loader and coordinator (messages handled) since the pipeline was made. Never
  // decreases; its rate means nothing, only whether it moves.
  std::uint64_t completed = 0;
  // Something here could be doing something and is not visibly finishing: a stage replica with
  // an action or handler running, device work in flight or messages delivered and not handled;
  // the loader or coordinator inside a handler (a data source or on_minibatch that hangs) or
  // with messages not handled. False while every stage waits for inputs from elsewhere (or for
  // its SYNC's peers), and before and after run().
  bool has_work = false;
  // Empty unless has_work: one line per actor with work, e.g. "stage 1 replica 0: running
  // F(mb 4, [0,2)) for 31.2 s", "loader: handling a message for 12.0 s".
  std::string waiting_for;
};

}  // namespace tandem::actors

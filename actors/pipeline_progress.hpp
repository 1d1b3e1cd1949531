#pragma once
// Whether a pipeline's stages in this process move: what a watchdog samples (the control
// plane's heartbeat carries it) to tell a rank that lives but makes no progress (a kernel that
// never returns, a deadlock, frozen workers) from one that waits for another rank.
#include <cstdint>
#include <string>

namespace tandem::actors {

struct PipelineProgress {
  // Progress events of this process's stage replicas since the pipeline was made: messages
  // handled and actions completed. Never decreases; its rate means nothing, only whether it
  // moves.
  std::uint64_t completed = 0;
  // Some stage replica here has something it could be doing and is not visibly finishing: an
  // action running, device work in flight, messages delivered and not handled. False while
  // every stage waits for inputs from elsewhere (or for its replicas' gradients), and before
  // and after run().
  bool has_work = false;
  // Empty unless has_work: one line per stage replica with work, e.g. "stage 1 replica 0:
  // running F(mb 4, [0,2)) for 31.2 s".
  std::string waiting_for;
};

}  // namespace tandem::actors

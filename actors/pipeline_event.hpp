#pragma once
// What the loader and the coordinator report as a run goes, for traces: the stages report
// through StageObserver, these two actors through this hook. Called on their actors' threads;
// keep it short. Unset (the default), it costs one branch per minibatch and per loss report.
#include <chrono>
#include <cstdint>
#include <functional>

namespace tandem::actors {

struct PipelineEvent {
  enum class Kind : std::uint8_t {
    // The loader built minibatch `minibatch` (start..finish) and sent its tensors to the
    // stages right after, or, when it built it ahead while the admission window was full, as
    // soon as the window let it in.
    loader_send,
    // The coordinator took the loss of samples [begin, end) of `minibatch` (start..end);
    // `complete`: it was the minibatch's last.
    coordinator_loss,
  };
  Kind kind = Kind::loader_send;
  std::int64_t minibatch = 0;  // of this run (0 = the run's first)
  std::int64_t begin = 0, end = 0;
  bool complete = false;
  std::chrono::steady_clock::time_point start, finish;
};

using PipelineEventHook = std::function<void(const PipelineEvent&)>;

}  // namespace tandem::actors

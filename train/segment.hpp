#pragma once
// One pipeline run: in this process, or as this rank's part of a multi-process job. Training
// runs one per stretch between checkpoints (train/session.hpp), `tandem bench` one for its sim
// stages. Across processes every rank calls run_segment with the same spec and segment number;
// the protocol between them is:
//   prepare, construct the Pipeline, connect, run, release (also when the run fails);
//   rank 0, where the loader runs, tells the others how many minibatches the segment ran
//     ("segment/N/ran/K": a stop may have cut it short);
//   each rank > 0 hands rank 0 its replicas' statistics ("segment/N/state/K",
//     train/stage_state.hpp); the stages' weights and optimizer states stay on their ranks;
//   every rank waits for the others before its data plane closes (ProcessGroup::end_segment).
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "actors/pipeline.hpp"
#include "runtime/thread_budget.hpp"
#include "train/stage_state.hpp"

namespace tandem::train {

class ProcessGroup;
class ProcessPlacement;

struct SegmentOptions {
  // A multi-process job (not owned), its placement and this segment's number (every rank's the
  // same, each used once per job). Null: everything runs here.
  ProcessGroup* group = nullptr;
  const ProcessPlacement* placement = nullptr;
  int segment = 0;
  // Collect the stages' latest weights, optimizer states and older weight versions (what the
  // next segment or a checkpoint starts from); off, only the replicas' statistics travel.
  bool gather_state = true;
  // Called with the pipeline once it exists and with null once it ran (or failed), on the
  // calling thread: how a caller reaches the pipeline to stop it.
  std::function<void(actors::Pipeline*)> on_running;
  // Worker threads running this process's stages; 0: one per hardware thread.
  std::size_t threads = 0;
  // Threads shared with other sessions of the process (runtime/thread_budget.hpp): the workers
  // run stages only while they hold one, and the cpu stages' kernels split its size, not the
  // machine's cores. Null: none.
  std::shared_ptr<ThreadBudget> shared_threads;
};

struct SegmentResult {
  // The pipeline's result, with the job's minibatch count on every rank; its stage statistics
  // are every replica's at rank 0 (by device), this rank's elsewhere.
  actors::PipelineResult pipeline;
  // By stage, the state after the segment of each stage some replica of which runs here (every
  // stage in one process). Empty without gather_state.
  std::vector<StageState> states;
};

// Throws what the pipeline or the group throws (actors::PipelineError, RendezvousError), and
// std::invalid_argument for a group without a placement.
SegmentResult run_segment(actors::PipelineSpec spec, const SegmentOptions& options);

// The minibatches rank 0 says a segment of `segment_length` ran: a decimal count within
// [0, segment_length]. Throws std::runtime_error quoting the malformed bytes.
int64_t ran_minibatches(std::span<const std::byte> bytes, int64_t segment_length);

}  // namespace tandem::train

#pragma once
// A checkpoint of a multi-process job, written by every rank and committed by rank 0, in two
// phases (train/checkpoint.hpp's open/write/commit):
//   rank 0 opens the step directory and tells each rank its name ("ckpt/<segment>/open/<k>");
//   every rank writes the files of the stages whose replica 0 it runs, in parallel, straight
//     into that directory, and reports each file's size and SHA-256 ("ckpt/<segment>/files/<k>");
//   once every rank reported, rank 0 writes the manifest and then `latest`, and tells each rank
//     the outcome ("ckpt/<segment>/done/<k>").
// Until `latest` is written the previous checkpoint is the one read, so a rank killed during
// either phase loses nothing; no stage's tensors pass through rank 0. On node-local disks (a
// checkpoint directory that is not shared) each rank's directory holds its files, the manifest
// (on rank 0's disk) names the rank and host of each, and each rank prunes its own directory to
// the checkpoints rank 0 keeps.
#include <filesystem>
#include <utility>
#include <vector>

#include "train/checkpoint.hpp"

namespace tandem::train {

class ProcessGroup;

// A stage this rank writes, with what its file holds.
struct OwnStageFile {
  int stage = 0;
  StageCheckpoint contents;
};

// Writes `checkpoint` (step, model, plan, optimizer, seed, data position, parent; its `stages`
// are ignored) into `dir`: `own` are this rank's stage files (every stage in one process:
// `group` null). Every rank of a job calls it with the same `segment` (used once per job).
// Returns the step directory. Throws CheckpointError naming the rank that failed and why
// (rank 0 then leaves the previous checkpoint as `latest`), FileError for this rank's I/O, and
// what the group throws for a lost rank.
std::filesystem::path write_job_checkpoint(ProcessGroup* group, int segment,
                                           const std::filesystem::path& dir,
                                           const Checkpoint& checkpoint,
                                           const std::vector<OwnStageFile>& own,
                                           const CheckpointWriteOptions& options = {});

}  // namespace tandem::train

#pragma once
// Tied parameters in checkpoints (models/tied_params.hpp): a checkpoint stores each tied
// parameter once, as its leader (the group's first copy), in the file of the stage holding the
// leader's layer. Every other copy (a follower) is left out of its stage's file, weights and
// optimizer state alike, and a reader fills it from the leader's stored values, whichever
// stage file holds them: so a resume under another plan gives each of its stages the copies its
// layers use, and a file keeps one tensor per tied parameter.
//
// A follower is left out only where the leader's stage stores the same weight version (and the
// same optimizer step count): copies of one version are equal, but under an asynchronous
// schedule the stages keep different versions, and a version only the follower's stage keeps
// is stored with it. A follower a file holds is read as it is.
#include <cstdint>
#include <functional>
#include <map>

#include "models/model.hpp"
#include "schedules/plan.hpp"
#include "train/checkpoint.hpp"

namespace tandem::train {

// Leaves the follower copies out of `contents`, what stage `stage` of `plan` writes at step
// `step` (its replicas' weight versions and optimizer states). Nothing changes for a model
// without ties.
void leave_out_tied_copies(StageCheckpoint& contents, const models::Model& model,
                           const schedules::Plan& plan, int stage, std::int64_t step);

// Fills into each stage of `stages` (stage files of a checkpoint written under `plan`, by stage)
// the follower copies its file left out, from the leaders' values: each weight version from the
// leader's same version (same replica, else replica 0), each optimizer state entry from the
// leader's optimizer at the same step count. `read` reads another stage of the checkpoint when a
// leader lives there. Each weight version's parameters come back in the model's order. Throws
// CheckpointError naming the file and the tensor when the leader's stage holds no such version
// or optimizer state.
void fill_tied_copies(std::map<int, StageCheckpoint>& stages, const models::Model& model,
                      const schedules::Plan& plan, const std::function<StageCheckpoint(int)>& read);

}  // namespace tandem::train

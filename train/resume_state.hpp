#pragma once
// Where a resumed run continues: a checkpoint (train/checkpoint.hpp) read and checked against
// the job it continues, as the weights, optimizer states and older weight versions its first
// segment starts from.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "actors/pipeline.hpp"
#include "models/model.hpp"
#include "models/param_set.hpp"
#include "schedules/plan.hpp"
#include "train/checkpoint.hpp"
#include "train/job_spec.hpp"

namespace tandem::train {

struct ResumeState {
  int64_t first_step = 0;   // the checkpoint's step
  models::ParamSet params;  // the whole model's weights (replica 0's newest version)
  std::vector<actors::OptimizerState> optimizer_states;             // per stage
  std::vector<std::map<int64_t, models::ParamSet>> older_versions;  // per stage, by version
  CheckpointRef parent;  // the checkpoint itself: the next one's parent
  // One line saying how the checkpoint was laid out on another plan ("resharded from 3-stage
  // pipedream [0-1|2-3|4-5] to 2-stage pipedream [0-2|3-5]: stashed versions mapped exactly",
  // or "...: versions not mappable (...): fresh start of pipedream from the newest weights");
  // empty when the plan is the checkpoint's own.
  std::string reshard_note;
  // The checkpoint's history, and the note when there is one: what the run's next checkpoints
  // carry (Checkpoint::history).
  std::vector<std::string> history;
};

// Reads the checkpoint at `path` for a run of `steps` steps of `job` through `plan`, which may
// differ from the plan that wrote it (train/reshard.hpp): each stage of `plan` takes its
// layers' tensors from whichever stage files hold them. Only the stages `needs_stage` names
// (unset: all) are built, and only the stage files holding their layers (and the leaders of
// the tied copies they hold: train/tied_checkpoint.hpp) are read: `params`
// then holds those stages' layers, and the other stages' optimizer states and versions are
// empty. Throws CheckpointError naming the checkpoint when it is unreadable, of another model,
// optimizer or seed, at or past the run's last step, not at a stop boundary of `plan`'s
// schedule, or missing a weight, a tensor of the right size or (same plan) a weight version the
// minibatches in flight at its step replay. `model_name` is what the checkpoint must record as
// the model.
ResumeState read_resume_state(const std::filesystem::path& path, const JobSpec& job,
                              const models::Model& model, const std::string& model_name,
                              const schedules::Plan& plan, int64_t steps,
                              const std::function<bool(int stage)>& needs_stage = {});

}  // namespace tandem::train

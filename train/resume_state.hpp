#pragma once
// Where a resumed run continues: a checkpoint (train/checkpoint.hpp) read and checked against
// the job it continues, as the weights, optimizer states and older weight versions its first
// segment starts from.
#include <cstdint>
#include <filesystem>
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
};

// Reads the checkpoint at `path` for a run of `steps` steps of `job` through `plan`. Throws
// CheckpointError naming the checkpoint when it is unreadable, of another model, plan,
// optimizer or seed, at or past the run's last step, not at a stop boundary of the schedule,
// or missing a weight, a tensor of the right size or a weight version the minibatches in
// flight at its step replay.
// `model_name` is what the checkpoint must record as the model.
ResumeState read_resume_state(const std::filesystem::path& path, const JobSpec& job,
                              const models::Model& model, const std::string& model_name,
                              const schedules::Plan& plan, int64_t steps);

}  // namespace tandem::train

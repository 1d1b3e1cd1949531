#pragma once
// How a resume lays a checkpoint's stages out on the run's plan, which may cut the model into
// other stages, replicate them otherwise or run another schedule (docs/checkpoints.md,
// "Resuming under another plan"). Tensors are found by their global names: parameter
// "<layer>.<name>" (models::Model::param_name) in the file of the stage that held the layer,
// optimizer state "<kind>.<parameter>" (models::Optimizer::state(); kinds hold no '.') beside it.
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "actors/pipeline.hpp"
#include "models/model.hpp"
#include "models/optimizer.hpp"
#include "models/param_set.hpp"
#include "schedules/plan.hpp"
#include "train/checkpoint.hpp"

namespace tandem::train {

// The stage of `plan` that holds each of the model's `num_layers` layers (with several chunks
// per stage: the stage whose chunk it is; a stage's file holds all its chunks).
std::vector<int> stage_of_layers(const schedules::Plan& plan, int num_layers);

// The layers of `stage` of `plan`, all its chunks, in order.
std::vector<int> layers_of_stage(const schedules::Plan& plan, int num_layers, int stage);

// Where the weight versions that minibatches in flight use come from under the new plan.
enum class ReshardKind {
  same_layout,  // the checkpoint's own stages and versions (a missing version is refused)
  exact,        // flush schedules on both sides: the same numbers, laid out anew
  mapped,       // the same asynchronous schedule: every version the new stages need is stored
  fresh_start,  // every older version a copy of the newest weights, as a new run of the schedule
};

struct Reshard {
  ReshardKind kind = ReshardKind::same_layout;
  std::string note;  // one line saying what happened; empty when the plan is the same
};

// Decides from the manifest alone (no stage file is read), so that every process resuming a
// part of the new plan decides alike. `plan` is the new plan; the checkpoint's plan must cover
// the model's `num_layers` layers (the caller checks).
Reshard plan_reshard(const CheckpointManifest& manifest, const schedules::Plan& plan,
                     int num_layers);

// What one stage of the new plan starts from.
struct ResumedStage {
  models::ParamSet params;  // its newest weights
  actors::OptimizerState optimizer;
  std::map<std::int64_t, models::ParamSet> older_versions;  // by version number
};

// Stage `stage` of `plan` from the checkpoint's stages `old` (by stage; those holding its
// layers, each already checked against the model) as `reshard` decided. Throws CheckpointError
// naming `path` when the optimizer states it takes disagree on their step count or do not
// make one optimizer's state.
ResumedStage reshard_stage(const std::filesystem::path& path, const Reshard& reshard,
                           const Checkpoint& checkpoint, const std::map<int, StageCheckpoint>& old,
                           const models::Model& model, const models::Optimizer& optimizer,
                           const schedules::Plan& plan, int stage);

// Layer `layer`'s newest weights (replica 0) in `stage`, read from a checkpoint.
models::ParamSet newest_layer_weights(const StageCheckpoint& stage, const models::Model& model,
                                      int layer);

}  // namespace tandem::train

#include "train/resume_state.hpp"

#include <set>
#include <string>

#include "models/delay_correction.hpp"
#include "models/optimizer.hpp"
#include "schedules/pipeline_rules.hpp"
#include "schedules/schedule_kind.hpp"
#include "schedules/weight_versions.hpp"
#include "train/model_identity.hpp"
#include "train/reshard.hpp"
#include "train/tied_checkpoint.hpp"

namespace tandem::train {
namespace {

// The checkpoint belongs to this run: its seed (the data order and dropout follow it), a step
// left to train, a stop boundary of this run's schedule.
void check_position(const std::filesystem::path& path, const Checkpoint& ck, const JobSpec& job,
                    const schedules::Plan& plan, int64_t steps) {
  if (ck.seed != job.train.seed) {
    throw CheckpointError(path.string() + ": written by a run with train.seed " +
                          std::to_string(ck.seed) + ", this config has " +
                          std::to_string(job.train.seed) +
                          " (the seed orders the data: another would train other minibatches)");
  }
  if (ck.step >= steps) {
    throw CheckpointError(path.string() + ": the checkpoint is at step " + std::to_string(ck.step) +
                          " of a run of " + std::to_string(steps) +
                          " steps: nothing left to train (give more with --steps)");
  }
  const int64_t boundary = schedules::stop_boundary(plan.schedule, ck.step);
  if (boundary != ck.step) {
    throw CheckpointError(path.string() + ": step " + std::to_string(ck.step) + " (written by a " +
                          std::string(schedules::to_string(ck.plan.schedule.kind)) + " run of " +
                          std::to_string(ck.plan.stages.size()) +
                          " stages) is not a stop boundary of this run's " +
                          std::string(schedules::to_string(plan.schedule.kind)) + " schedule of " +
                          std::to_string(plan.stages.size()) + " stages (the next is step " +
                          std::to_string(boundary) + ")");
  }
}

// The checkpoint's stages cover the model's layers (the model's description is the same, so
// only an edited manifest fails here).
void check_covers_model(const std::filesystem::path& path, const schedules::Plan& plan,
                        const models::Model& model) {
  try {
    plan.validate(model.num_layers());
  } catch (const std::exception& e) {
    throw CheckpointError(path.string() + ": the checkpoint's plan does not fit the model's " +
                          std::to_string(model.num_layers()) + " layers: " + e.what());
  }
}

// The model's parameters of `layers` (names, shapes, dtypes).
models::ParamSet model_params(const models::Model& model, const std::vector<int>& layers) {
  models::ParamSet out;
  for (const int l : layers) out.merge(model.init_params(0, l, l + 1, Device::sim()));
  return out;
}

// The checkpoint's stages that hold the layers of the new stages in `stages`, read (with the
// tied copies their files left out filled from the files holding the leaders), each
// checked against the model before anything uses it: the optimizers' updates run over each
// parameter's element count, whatever the state's tensors hold.
std::map<int, StageCheckpoint> read_old_stages(const CheckpointManifest& manifest,
                                               const std::set<int>& stages,
                                               const schedules::Plan& plan,
                                               const models::Model& model,
                                               const models::Optimizer& optimizer) {
  const int num_layers = model.num_layers();
  const schedules::Plan& old = manifest.checkpoint.plan;
  const std::vector<int> owners = stage_of_layers(old, num_layers);
  std::set<int> wanted;
  for (const int s : stages) {
    for (const int l : layers_of_stage(plan, num_layers, s)) {
      wanted.insert(owners[static_cast<std::size_t>(l)]);
    }
  }
  std::map<int, StageCheckpoint> out;
  for (const int o : wanted) {
    out.emplace(o, read_checkpoint_stage(manifest, static_cast<std::size_t>(o)));
  }
  // A tied parameter's copies that a file left out come from the file holding its leader.
  fill_tied_copies(out, model, old, [&manifest](int stage) {
    return read_checkpoint_stage(manifest, static_cast<std::size_t>(stage));
  });
  for (const auto& [o, stage] : out) {
    check_stage_tensors(stage, model_params(model, layers_of_stage(old, num_layers, o)), optimizer);
  }
  return out;
}

// Asynchronous schedules replay the minibatches in flight at the checkpoint at the versions
// they had: the stages built must hold those.
void check_in_flight_versions(const std::filesystem::path& path, const ResumeState& state,
                              const schedules::ScheduleParams& sp, const std::set<int>& stages) {
  const int64_t step = state.first_step;
  for (const int st : stages) {
    const auto& older = state.older_versions[static_cast<size_t>(st)];
    const int64_t first = schedules::weight_version(sp, st, step);
    const int64_t latest = schedules::update_rounds(sp, st, step);
    for (int64_t v = first; v < latest; ++v) {
      if (older.count(v) == 0) {
        throw CheckpointError(path.string() + ": stage " + std::to_string(st) +
                              " holds no weight version " + std::to_string(v) +
                              ", which the minibatches in flight at step " + std::to_string(step) +
                              " use (a checkpoint of this schedule keeps versions " +
                              std::to_string(first) + " to " + std::to_string(latest) + ")");
      }
    }
  }
}

// The state built holds every weight of the layers it was asked for.
void check_every_weight(const std::filesystem::path& path, const models::ParamSet& params,
                        const models::ParamSet& expected) {
  for (int64_t i = 0; i < expected.size(); ++i) {
    if (!params.contains(expected.name(i)) ||
        params.at(expected.name(i)).shape() != expected[i].shape()) {
      throw CheckpointError(path.string() + ": weight '" + expected.name(i) +
                            "' is missing or of another shape");
    }
  }
}

std::set<int> stages_needed(const schedules::Plan& plan,
                            const std::function<bool(int)>& needs_stage) {
  std::set<int> out;
  for (int s = 0; s < static_cast<int>(plan.stages.size()); ++s) {
    if (!needs_stage || needs_stage(s)) out.insert(s);
  }
  return out;
}

}  // namespace

ResumeState read_resume_state(const std::filesystem::path& path, const JobSpec& job,
                              const models::Model& model, const std::string& model_name,
                              const schedules::Plan& plan, int64_t steps,
                              const std::function<bool(int stage)>& needs_stage) {
  const CheckpointManifest manifest =
      read_checkpoint_manifest(path, {.model = model_name,
                                      .model_layers = model_identity(model),
                                      .optimizer = job.train.optimizer.kind});
  const Checkpoint& ck = manifest.checkpoint;
  check_position(path, ck, job, plan, steps);
  check_covers_model(path, ck.plan, model);
  const Reshard reshard = plan_reshard(manifest, plan, model.num_layers());
  // A corrected run's state holds its master weights too; the delay does not change the check.
  const auto optimizer = models::make_optimizer(
      job.train.optimizer,
      job.pipeline ? job.pipeline->async_correction : models::AsyncCorrection::none, 0);
  // Its state has no entries for the model's buffers: check_state must know which they are.
  optimizer->attach(model);
  const std::set<int> stages = stages_needed(plan, needs_stage);
  const std::map<int, StageCheckpoint> old =
      read_old_stages(manifest, stages, plan, model, *optimizer);

  ResumeState out;
  out.first_step = ck.step;
  out.parent = ck.origin;
  out.reshard_note = reshard.note;
  out.history = ck.history;
  if (!reshard.note.empty())
    out.history.push_back("step " + std::to_string(ck.step) + ": " + reshard.note);
  out.optimizer_states.resize(plan.stages.size());
  out.older_versions.resize(plan.stages.size());
  std::set<int> layers;
  for (const int s : stages) {
    ResumedStage st = reshard_stage(path, reshard, ck, old, model, *optimizer, plan, s);
    out.optimizer_states[static_cast<size_t>(s)] = std::move(st.optimizer);
    out.older_versions[static_cast<size_t>(s)] = std::move(st.older_versions);
    for (const int l : layers_of_stage(plan, model.num_layers(), s)) layers.insert(l);
  }
  // In layer order, whatever the stages' chunks.
  const std::vector<int> owners = stage_of_layers(ck.plan, model.num_layers());
  for (const int l : layers) {
    out.params.merge(newest_layer_weights(old.at(owners[static_cast<size_t>(l)]), model, l));
  }
  check_in_flight_versions(path, out, plan.schedule, stages);
  check_every_weight(path, out.params,
                     model_params(model, std::vector<int>(layers.begin(), layers.end())));
  return out;
}

}  // namespace tandem::train

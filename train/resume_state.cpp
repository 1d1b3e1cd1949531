#include "train/resume_state.hpp"

#include <string>

#include "models/optimizer.hpp"
#include "schedules/pipeline_rules.hpp"
#include "schedules/weight_versions.hpp"

namespace tandem::train {
namespace {

// The checkpoint belongs to this run: its seed, a step left to train, a stop boundary.
void check_position(const std::filesystem::path& path, const Checkpoint& ck, const JobSpec& job,
                    const schedules::Plan& plan, int64_t steps) {
  if (ck.seed != job.train.seed) {
    throw CheckpointError(path.string() + ": written by a run with train.seed " +
                          std::to_string(ck.seed) + ", this config has " +
                          std::to_string(job.train.seed));
  }
  if (ck.step >= steps) {
    throw CheckpointError(path.string() + ": the checkpoint is at step " + std::to_string(ck.step) +
                          " of a run of " + std::to_string(steps) +
                          " steps: nothing left to train (give more with --steps)");
  }
  if (schedules::stop_boundary(plan.schedule, ck.step) != ck.step) {
    throw CheckpointError(path.string() + ": step " + std::to_string(ck.step) +
                          " is not a stop boundary of this schedule");
  }
}

// Every tensor is checked against the model before it is used: the optimizers' updates run
// over each parameter's element count, whatever the state's tensors hold.
void check_tensors(const Checkpoint& ck, const JobSpec& job, const models::Model& model,
                   const schedules::Plan& plan) {
  const auto optimizer = models::make_optimizer(job.train.optimizer);
  for (size_t s = 0; s < ck.stages.size(); ++s) {
    const schedules::LayerRange& layers = plan.stages[s].layers;
    check_stage_tensors(ck.stages[s], model.init_params(0, layers.begin, layers.end, Device::sim()),
                        *optimizer);
  }
}

// Replicas agree at a checkpoint (every round complete): replica 0's newest version, the older
// ones and its optimizer state.
void take_stage(const std::filesystem::path& path, const StageCheckpoint& st, ResumeState& out) {
  const CheckpointWeights* newest = nullptr;
  for (const CheckpointWeights& w : st.weights) {
    if (w.replica == 0 && (newest == nullptr || w.version > newest->version)) newest = &w;
  }
  if (newest == nullptr) {
    throw CheckpointError(path.string() + ": a stage holds no weights of replica 0");
  }
  out.params.merge(newest->params);
  std::map<int64_t, models::ParamSet> older;
  for (const CheckpointWeights& w : st.weights) {
    if (w.replica == 0 && w.version < newest->version) older.emplace(w.version, w.params);
  }
  out.older_versions.push_back(std::move(older));
  actors::OptimizerState os;
  for (const CheckpointOptimizer& o : st.optimizers) {
    if (o.replica == 0) os = {o.state, o.steps};
  }
  out.optimizer_states.push_back(std::move(os));
}

// Asynchronous schedules replay the minibatches in flight at the checkpoint at the versions
// they had: the checkpoint must hold those.
void check_in_flight_versions(const std::filesystem::path& path, const ResumeState& state,
                              const schedules::ScheduleParams& sp) {
  const int64_t step = state.first_step;
  for (int st = 0; st < sp.stages; ++st) {
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

// The checkpoint must hold every weight of the model.
void check_every_weight(const std::filesystem::path& path, const models::ParamSet& params,
                        const models::Model& model) {
  const models::ParamSet expected = model.init_params(0, 0, model.num_layers(), Device::sim());
  for (int64_t i = 0; i < expected.size(); ++i) {
    if (!params.contains(expected.name(i)) ||
        params.at(expected.name(i)).shape() != expected[i].shape()) {
      throw CheckpointError(path.string() + ": weight '" + expected.name(i) +
                            "' is missing or of another shape");
    }
  }
}

}  // namespace

ResumeState read_resume_state(const std::filesystem::path& path, const JobSpec& job,
                              const models::Model& model, const std::string& model_name,
                              const schedules::Plan& plan, int64_t steps) {
  CheckpointExpectations expect;
  expect.model = model_name;
  expect.plan = plan;
  expect.optimizer = job.train.optimizer.kind;
  const Checkpoint ck = read_checkpoint(path, expect);
  check_position(path, ck, job, plan, steps);
  check_tensors(ck, job, model, plan);
  ResumeState out;
  out.first_step = ck.step;
  out.parent = ck.origin;
  for (const StageCheckpoint& st : ck.stages) take_stage(path, st, out);
  check_in_flight_versions(path, out, plan.schedule);
  check_every_weight(path, out.params, model);
  return out;
}

}  // namespace tandem::train

#include "models/delayed_training.hpp"

#include <stdexcept>
#include <string>
#include <utility>

namespace tandem::models {

DelayedTrainer::DelayedTrainer(const DelayedTrainingSpec& spec, const ParamSet& initial)
    : model_(spec.model), lr_at_(spec.lr_at), lr_(spec.optimizer.lr) {
  if (model_ == nullptr) throw std::invalid_argument("delayed training: no model");
  int next = 0;
  for (std::size_t s = 0; s < spec.stages.size(); ++s) {
    const DelayedStage& ds = spec.stages[s];
    const std::string where = "delayed training: stage " + std::to_string(s);
    if (ds.begin != next || ds.end <= ds.begin || ds.end > model_->num_layers()) {
      throw std::invalid_argument(where + ": layers [" + std::to_string(ds.begin) + ", " +
                                  std::to_string(ds.end) + ") do not follow layer " +
                                  std::to_string(next) + " within the model's " +
                                  std::to_string(model_->num_layers()));
    }
    if (ds.delay < 0) throw std::invalid_argument(where + ": delay must be >= 0");
    next = ds.end;
    Stage st;
    st.delay = ds.delay;
    for (int l = ds.begin; l < ds.end; ++l) {
      for (const ParamSpec& ps : model_->layer(l).param_specs())
        st.names.push_back(model_->param_name(l, ps.name));
    }
    try {
      st.optimizer = make_optimizer(spec.optimizer, spec.correction, ds.delay);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(where + ": " + e.what());
    }
    st.optimizer->attach(*model_);
    st.versions.push_back(initial.subset(st.names).clone());
    stages_.push_back(std::move(st));
  }
  if (next != model_->num_layers()) {
    throw std::invalid_argument("delayed training: the stages end at layer " +
                                std::to_string(next) + ", the model has " +
                                std::to_string(model_->num_layers()));
  }
}

StepOutput DelayedTrainer::step(const Tensor& inputs, const Tensor& targets,
                                std::uint64_t step_seed) {
  // Version max(0, t - delay) is the oldest one kept (see the trimming below).
  ParamSet used;
  for (const Stage& st : stages_) used.merge(st.versions.front());
  StepOutput out = train_step(*model_, used, inputs, targets, step_seed);
  const double lr = lr_at_ ? lr_at_(steps_) : lr_;
  for (Stage& st : stages_) {
    // The newest version's handles are kept in `versions`: the update writes new tensors
    // (copy-on-write), so every older version stays as it was.
    ParamSet next = st.versions.back();
    st.optimizer->set_lr(lr);
    st.optimizer->step(next, out.grads.subset(st.names));
    st.versions.push_back(std::move(next));
    while (static_cast<int>(st.versions.size()) > st.delay + 1) st.versions.pop_front();
  }
  ++steps_;
  return out;
}

ParamSet DelayedTrainer::params() const {
  ParamSet out;
  for (const Stage& st : stages_) out.merge(st.versions.back());
  return out;
}

const Optimizer& DelayedTrainer::optimizer(int stage) const {
  return *stages_.at(static_cast<std::size_t>(stage)).optimizer;
}

}  // namespace tandem::models

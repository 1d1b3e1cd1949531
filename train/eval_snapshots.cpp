#include "train/eval_snapshots.hpp"

#include <set>
#include <utility>

#include "schedules/pipeline_rules.hpp"
#include "train/eval_exchange.hpp"
#include "train/process_group.hpp"
#include "train/process_placement.hpp"

namespace tandem::train {

EvalSnapshots::EvalSnapshots(const models::Model& model, const models::data::Dataset& eval,
                             const TrainSpec& train, const schedules::ScheduleParams& params,
                             int64_t first, std::vector<int64_t> steps, Progress& progress,
                             EvalJob job)
    : model_(model),
      eval_(eval),
      train_(train),
      params_(params),
      first_(first),
      steps_(std::move(steps)),
      progress_(progress),
      job_(job) {
  std::set<int> contributors;
  for (int st = 0; st < params_.stages; ++st) {
    if (runs_here(st)) ++stages_here_;
    if (job_.group != nullptr)
      contributors.insert(job_.placement->rank_of(params_.device_of(st, 0)));
  }
  if (job_.group == nullptr) return;
  std::vector<int64_t> ahead;
  for (int64_t step : steps_) {
    if (step > first_) ahead.push_back(step);
  }
  exchange_ = std::make_unique<EvalExchange>(
      *job_.group, std::move(contributors), params_.stages, job_.segment, std::move(ahead),
      [this](int64_t step, const std::map<int, models::ParamSet>& stages) {
        complete_locally(step, stages);
      });
}

EvalSnapshots::~EvalSnapshots() {
  exchange_.reset();
}

bool EvalSnapshots::runs_here(int stage) const {
  return job_.group == nullptr ||
         job_.placement->rank_of(params_.device_of(stage, 0)) == job_.group->rank();
}

void EvalSnapshots::on_event(const actors::StageEvent& e) {
  if (e.action.op != schedules::Op::STEP) return;
  if (e.replica == 0 ? e.weights == nullptr : stages_here_ > 0) return;
  for (int64_t step : steps_) {
    if (step <= first_) continue;
    const int64_t round = schedules::update_rounds(params_, e.stage, step - first_) - 1;
    if (round != e.action.minibatch) continue;
    std::map<int, models::ParamSet> stages;
    {
      std::lock_guard lock(mu_);
      if (completed_.count(step) > 0) continue;
      auto& parts = parts_[step];
      // A process running no stage's replica 0 tells when its replicas reached the step.
      if (e.replica == 0) parts.emplace(e.stage, *e.weights);
      if (static_cast<int>(parts.size()) < stages_here_) return;
      stages = std::move(parts);
      parts_.erase(step);
      completed_.insert(step);
    }
    if (exchange_) {
      exchange_->add(step, stages);
    } else {
      complete_locally(step, stages);
    }
  }
}

void EvalSnapshots::complete_locally(int64_t step, const std::map<int, models::ParamSet>& stages) {
  models::ParamSet whole;
  for (const auto& [s, w] : stages) whole.merge(w);
  progress_.add_eval(step, evaluate_params(model_, whole, eval_, train_.eval->samples,
                                           train_.minibatch, Device::cpu()));
}

void EvalSnapshots::finish() {
  if (exchange_) exchange_->finish();
}

}  // namespace tandem::train

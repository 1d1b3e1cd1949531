#include "train/eval_snapshots.hpp"

#include <optional>

#include "schedules/pipeline_rules.hpp"

namespace tandem::train {

EvalSnapshots::EvalSnapshots(const models::Model& model, const models::data::Dataset& eval,
                             const TrainSpec& train, const schedules::ScheduleParams& params,
                             int64_t first, std::vector<int64_t> steps, Progress& progress)
    : model_(model),
      eval_(eval),
      train_(train),
      params_(params),
      first_(first),
      steps_(std::move(steps)),
      progress_(progress) {}

void EvalSnapshots::on_event(const actors::StageEvent& e) {
  if (e.action.op != schedules::Op::STEP || e.replica != 0 || e.weights == nullptr) return;
  for (int64_t step : steps_) {
    if (step <= first_) continue;
    const int64_t round = schedules::update_rounds(params_, e.stage, step - first_) - 1;
    if (round != e.action.minibatch) continue;
    std::optional<models::ParamSet> whole;
    {
      std::lock_guard lock(mu_);
      auto& parts = parts_[step];
      parts.emplace(e.stage, *e.weights);
      if (static_cast<int>(parts.size()) < params_.stages) return;
      whole.emplace();
      for (auto& [s, w] : parts) whole->merge(w);
      parts_.erase(step);
    }
    progress_.add_eval(step, evaluate_params(model_, *whole, eval_, train_.eval->samples,
                                             train_.minibatch, Device::cpu()));
  }
}

}  // namespace tandem::train

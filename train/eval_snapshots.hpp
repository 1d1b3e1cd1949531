#pragma once
// Held-out evaluation in the middle of a run, without stopping it: every stage's replica 0
// hands over the weights it published at the update round that completes step E (a copy of
// tensor handles: updates are copy-on-write, so the copy never changes), and the stage that
// completes the set evaluates the whole model on its own thread.
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

#include "actors/stage_event.hpp"
#include "models/data/dataset.hpp"
#include "models/model.hpp"
#include "models/param_set.hpp"
#include "schedules/schedule_params.hpp"
#include "train/job_spec.hpp"
#include "train/progress.hpp"

namespace tandem::train {

class EvalSnapshots {
 public:
  // A segment starting at step `first` evaluates at each of `steps` past it and hands the
  // results to `progress`.
  EvalSnapshots(const models::Model& model, const models::data::Dataset& eval,
                const TrainSpec& train, const schedules::ScheduleParams& params, int64_t first,
                std::vector<int64_t> steps, Progress& progress);

  // The pipeline's observer, on the stages' threads.
  void on_event(const actors::StageEvent& e);

 private:
  const models::Model& model_;
  const models::data::Dataset& eval_;
  const TrainSpec& train_;
  const schedules::ScheduleParams params_;
  const int64_t first_;
  const std::vector<int64_t> steps_;
  Progress& progress_;
  std::mutex mu_;
  std::map<int64_t, std::map<int, models::ParamSet>> parts_;
};

}  // namespace tandem::train

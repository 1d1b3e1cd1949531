#pragma once
// Held-out evaluation in the middle of a run, without stopping it: every stage's replica 0
// hands over the weights it published at the update round that completes step E (a copy of
// tensor handles: updates are copy-on-write, so the copy never changes). In one process the
// stage that completes the set evaluates the whole model on its own thread. In a multi-process
// job each rank collects the stages whose replica 0 it runs, and train/eval_exchange.hpp brings
// the ranks' parts to rank 0, which evaluates there: the same weights and the same evaluation,
// so the same results at the same steps as in one process.
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

#include "actors/stage_event.hpp"
#include "models/data/dataset.hpp"
#include "models/model.hpp"
#include "models/param_set.hpp"
#include "schedules/schedule_params.hpp"
#include "train/job_spec.hpp"
#include "train/progress.hpp"

namespace tandem::train {

class EvalExchange;
class ProcessGroup;
class ProcessPlacement;

// A segment of a multi-process job: its group and placement (not owned) and its number.
struct EvalJob {
  ProcessGroup* group = nullptr;
  const ProcessPlacement* placement = nullptr;
  int segment = 0;
};

class EvalSnapshots {
 public:
  // A segment starting at step `first` evaluates at each of `steps` past it and hands the
  // results to `progress` (at rank 0 of a job: `job.group` set).
  EvalSnapshots(const models::Model& model, const models::data::Dataset& eval,
                const TrainSpec& train, const schedules::ScheduleParams& params, int64_t first,
                std::vector<int64_t> steps, Progress& progress, EvalJob job = {});
  // Waits for rank 0's evaluations in progress (when finish() was not called: a failed run).
  ~EvalSnapshots();

  // The pipeline's observer, on the stages' threads.
  void on_event(const actors::StageEvent& e);

  // In a job, on every rank after the segment's pipeline ran: ranks > 0 tell rank 0 which of
  // the segment's evaluation steps they did not reach (a stop), rank 0 evaluates every step
  // all stages reached and returns. Throws what the exchange threw (a lost rank, a malformed
  // part). Nothing to do in one process.
  void finish();

 private:
  // Evaluates the whole model's weights (by stage) at `step` here and reports it.
  void complete_locally(int64_t step, const std::map<int, models::ParamSet>& stages);
  bool runs_here(int stage) const;

  const models::Model& model_;
  const models::data::Dataset& eval_;
  const TrainSpec& train_;
  const schedules::ScheduleParams params_;
  const int64_t first_;
  const std::vector<int64_t> steps_;
  Progress& progress_;
  const EvalJob job_;
  int stages_here_ = 0;  // stages whose replica 0 runs in this process
  std::unique_ptr<EvalExchange> exchange_;
  std::mutex mu_;
  std::map<int64_t, std::map<int, models::ParamSet>> parts_;
  std::set<int64_t> completed_;
};

}  // namespace tandem::train

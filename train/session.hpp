#pragma once
// Training from a Config, through the pipeline runtime: the config's pipeline section (none: one
// stage on the CPU) becomes a schedules::Plan and runs through actors::Pipeline, so a
// single-device run is a one-stage pipeline and there is one training path. Minibatch b is the
// sampler's minibatch b (seeded by train.seed), update round k follows the learning-rate
// schedule at step k, and every log_every steps the window's mean loss, accuracy and throughput
// are reported; with train.eval the held-out data is evaluated every eval.every steps on the
// weights the stages published at that step. Checkpoints every N steps and at the end; a run
// resumes from one.
#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "actors/pipeline.hpp"
#include "actors/stage_actor.hpp"
#include "models/data/dataset.hpp"
#include "models/model.hpp"
#include "models/param_set.hpp"
#include "schedules/plan.hpp"
#include "train/checkpoint.hpp"
#include "train/job_spec.hpp"

namespace tandem::train {

class ProcessGroup;
class ProcessPlacement;

struct EvalResult {
  double loss = 0;      // mean over predictions
  double accuracy = 0;  // share of correct predictions
  int64_t samples = 0;
  int64_t predictions = 0;  // samples, or tokens for language models
};

struct StepRecord {
  int64_t step = 0;                // steps done (1-based)
  int64_t steps = 0;               // steps of the run
  double loss = 0;                 // mean training loss over the steps since the previous record
  std::optional<double> accuracy;  // training accuracy over the same steps (classification)
  double samples_per_s = 0;        // over the same steps
  double elapsed_s = 0;
  double eta_s = 0;
  double lr = 0;
  // This process's resident memory when the record was made (absent where the system does not
  // say): what shows a leak over a long run.
  std::optional<double> resident_mib;
  std::optional<EvalResult> eval;  // when the held-out data was evaluated at this step
  // Per stage replica, stage by stage: the seconds its actions ran within this record's window
  // (busy / window_s is its utilization; the rest is bubble and waiting for messages).
  struct StageBusy {
    int stage = 0, replica = 0;
    double busy_s = 0;
  };
  std::vector<StageBusy> stages;
  double window_s = 0;
};

struct TrainSummary {
  int64_t steps = 0;          // steps done (fewer than asked when stopped)
  int64_t first_step = 0;     // a resumed run: the checkpoint's step
  std::vector<float> losses;  // every step's training loss (from first_step on)
  double final_loss = 0;      // mean over the last log window
  std::optional<double> final_accuracy;
  std::optional<EvalResult> eval;  // after the last step (with train.eval)
  // Markov text: the generator's entropy rate and the best loss reachable on its windows.
  std::optional<double> entropy_rate;
  std::optional<double> optimal_loss;
  double seconds = 0;
  double samples_per_s = 0;
  uint64_t params_fingerprint = 0;
  std::string model;
  std::string train_data;
  // One per stage replica, stage by stage: over all segments of the run.
  std::vector<actors::StageStats> stages;
  double pipeline_seconds = 0;  // the pipeline's wall time (busy + idle of a replica)
  std::vector<std::filesystem::path> checkpoints;  // written, in order
  bool stopped = false;                            // ended early by request_stop()
};

struct SessionOptions {
  std::optional<int64_t> steps;  // overrides train.steps
  // Write a Chrome trace of the run here (train/pipeline_trace.hpp); with checkpoints, of the
  // first segment (until the first checkpoint). In a multi-process job rank 0 writes one trace
  // of every rank's stages (train/job_trace.hpp).
  std::optional<std::filesystem::path> trace;
  // Write checkpoints into this directory (train/checkpoint.hpp): every checkpoint_every steps
  // (rounded up to the schedule's stop boundary; 0: only at the end) and at the end.
  std::optional<std::filesystem::path> checkpoint_dir;
  int64_t checkpoint_every = 0;
  int checkpoint_keep = 2;
  // Continue the run a checkpoint (a directory written by checkpoint_dir) stopped at.
  std::optional<std::filesystem::path> resume;
  // A multi-process job (not owned; outlives the trainer): this process runs the stage
  // replicas the config places on its rank and rank 0 the loader and coordinator. Rank 0
  // reports, evaluates and writes checkpoints for the whole model (the others hand it their
  // stages after each segment); the others' summaries cover their own stages. Periodic
  // evaluation (train.eval.every) runs only in a single process. Null: everything here.
  ProcessGroup* group = nullptr;
};

// The config's training (and, with train.eval, held-out) data, checked against the model: the
// same per-sample size and dtype, no class beyond its outputs, at least one minibatch. Throws
// JobError naming the data or train.eval section.
struct TrainData {
  std::shared_ptr<const models::data::Dataset> train, eval;
};
TrainData load_train_data(const JobSpec& job, const models::Model& model);

class Session {
 public:
  // Builds the model, the data and the plan; throws JobError when the data does not fit the
  // model or a stage sits on a device without data (sim), CheckpointError when the checkpoint to
  // resume from is unreadable or of another model or plan.
  explicit Session(JobSpec job, SessionOptions options = {});
  ~Session();

  // Trains to train.steps (or the override); calls on_record (on a pipeline thread, in step
  // order) every train.log_every steps, at every evaluation and after the last step. Once per
  // Session. Throws actors::PipelineError, or std::runtime_error when the loss is not finite
  // (the run stops at once, naming the step).
  TrainSummary run(const std::function<void(const StepRecord&)>& on_record = {});

  // From any thread (a signal handler's watcher, an embedding service): the run ends at the
  // next stop boundary, writes its checkpoint when checkpointing, and run() returns with
  // TrainSummary::stopped.
  void request_stop();

  // Evaluates the current weights (the initial ones before run(), the trained ones after) on
  // the held-out data (first train.eval.samples samples).
  EvalResult evaluate() const;

  const JobSpec& job() const { return job_; }
  const models::Model& model() const { return model_; }
  const schedules::Plan& plan() const { return plan_; }
  // The whole model's weights: initial (or resumed) before run(), trained after.
  const models::ParamSet& params() const { return params_; }
  const models::data::Dataset& train_data() const { return *data_.train; }
  const models::data::Dataset* eval_data() const { return data_.eval.get(); }
  int64_t steps() const { return steps_; }
  int64_t first_step() const { return first_step_; }
  int64_t parameters() const { return params_.numel(); }

 private:
  struct Stop;
  JobSpec job_;
  SessionOptions options_;
  models::Model model_;
  TrainData data_;
  schedules::Plan plan_;
  int64_t steps_;
  int64_t first_step_ = 0;
  models::ParamSet params_;
  std::vector<actors::OptimizerState> optimizer_states_;  // per stage, when resumed
  // Per stage, the older weight versions the next segment's first forwards use (asynchronous
  // schedules keep minibatches in flight across a checkpoint: they are replayed at these).
  std::vector<std::map<int64_t, models::ParamSet>> older_versions_;
  // The next checkpoint's parent: the one resumed from, then the last one written (the run's
  // lineage, which pruning keeps).
  std::optional<CheckpointRef> parent_checkpoint_;
  std::unique_ptr<Stop> stop_;
  std::unique_ptr<ProcessPlacement> placement_;  // with a group
  bool ran_ = false;
};

// The held-out loss and accuracy of `params` on the first `samples` samples of `eval`, in
// chunks of `minibatch`, on `device`.
EvalResult evaluate_params(const models::Model& model, const models::ParamSet& params,
                           const models::data::Dataset& eval, int64_t samples, int64_t minibatch,
                           Device device);

// The learning rate of step `step` (0-based) of a run of `steps` steps: warm-up steps ramp
// linearly up to lr; the decay runs from lr at the first step after warm-up towards
// final_fraction * lr, which it would reach one step after the last.
double scheduled_lr(const LrSchedule& schedule, double lr, int64_t step, int64_t steps);

}  // namespace tandem::train

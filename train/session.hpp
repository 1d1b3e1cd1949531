#pragma once
// Training from a Config, through the pipeline runtime: the config's pipeline section (none: one
// stage on the CPU) becomes a schedules::Plan and runs through actors::Pipeline, so a
// single-device run is a one-stage pipeline and there is one training path. Minibatch b is the
// sampler's minibatch b (seeded by train.seed), update round k follows the learning-rate
// schedule at step k, and every log_every steps the window's mean loss, accuracy and throughput
// are reported; with train.eval the held-out data is evaluated every eval.every steps on the
// weights the stages published at that step. Checkpoints every N steps and at the end; a run
// resumes from one.
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "actors/minibatch_data.hpp"
#include "actors/pipeline.hpp"
#include "actors/stage_actor.hpp"
#include "models/data/dataset.hpp"
#include "models/model.hpp"
#include "models/param_set.hpp"
#include "runtime/thread_budget.hpp"
#include "schedules/plan.hpp"
#include "train/checkpoint.hpp"
#include "train/evaluation.hpp"
#include "train/job_inputs.hpp"
#include "train/job_spec.hpp"
#include "train/lr_schedule.hpp"
#include "train/step_record.hpp"
#include "train/train_data.hpp"

namespace tandem::train {

class EvalSnapshots;
class ProcessGroup;
class ProcessPlacement;
class Progress;
struct StageState;

struct SessionOptions {
  std::optional<int64_t> steps;  // overrides train.steps
  // Write a Chrome trace of the run here (train/pipeline_trace.hpp); with checkpoints, of the
  // first segment (until the first checkpoint). In a multi-process job rank 0 writes one trace
  // of every rank's stages (train/job_trace.hpp).
  std::optional<std::filesystem::path> trace;
  // Write checkpoints into this directory (train/checkpoint.hpp): every checkpoint_every steps
  // (0: only at the end) and at the end.
  std::optional<std::filesystem::path> checkpoint_dir;
  // A checkpoint resumes only at a stop boundary of its plan (schedules::stop_boundary: under
  // PipeDream with replicas, a multiple of the replica counts' least common multiple). With
  // checkpoints, an interval or a run length that is not one is refused at construction with
  // the nearest that are, unless `round_checkpoint_every` (elastic jobs, whose re-planned
  // replicas move the boundaries): then the interval is rounded up, said in checkpoint_note(),
  // and the run's length is left as it is.
  int64_t checkpoint_every = 0;
  bool round_checkpoint_every = false;
  int checkpoint_keep = 2;  // 0: every checkpoint is kept
  // The front end's names of the options above, for its messages ("--checkpoint-every").
  std::string steps_option = "steps";
  std::string checkpoint_every_option = "checkpoint_every";
  std::string checkpoint_keep_option = "keep";
  // Continue the run a checkpoint (a directory written by checkpoint_dir) stopped at.
  std::optional<std::filesystem::path> resume;
  // A multi-process job (not owned; outlives the trainer): this process runs the stage
  // replicas the config places on its rank, holds only their weights and optimizer state, and
  // writes their checkpoint files (train/job_checkpoint.hpp); rank 0 runs the loader and
  // coordinator, commits checkpoints, reports and evaluates (the others send it their weights
  // at each train.eval.every step, train/eval_exchange.hpp, and at the end for the final
  // evaluation, train/job_weights.hpp); the others' summaries cover their own stages. Null:
  // everything here.
  ProcessGroup* group = nullptr;
  // A multi-process job: the other ranks send rank 0 their weights at the end of the run, so
  // that its whole_params() holds the whole model (the embedding API's Session::weights()).
  bool gather_weights = false;
  // Worker threads running this process's stages; 0: one per hardware thread.
  std::size_t threads = 0;
  // Threads shared with other sessions (SegmentOptions::shared_threads); null: none.
  std::shared_ptr<ThreadBudget> shared_threads;
  // Called on every rank after each checkpoint but the run's last (segment number, step):
  // true ends the run there, as a stop does (TrainSummary::stopped). Every rank of a job must
  // answer alike (train/elastic_job.hpp decides at rank 0 and tells the others).
  std::function<bool(int segment, int64_t step)> end_after_checkpoint;
};

class Session {
 public:
  // Builds the model, the data and the plan; throws JobError when the data does not fit the
  // model or a stage sits on a device without data (sim), CheckpointError when the checkpoint to
  // resume from is unreadable or of another model or optimizer (another plan is laid out anew:
  // train/resume_state.hpp).
  explicit Session(JobSpec job, SessionOptions options = {}, JobInputs inputs = {});
  ~Session();

  // Trains to train.steps (or the override); calls on_record (on a pipeline thread or, at
  // rank 0 of a job, the evaluations' thread; in step order) every train.log_every steps, at
  // every evaluation and after the last step. Once per Session. Throws actors::PipelineError, or
  // std::runtime_error when the loss is not finite (the run stops at once, naming the step).
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
  // The weights of the layers this process runs (in one process the whole model's): initial (or
  // resumed) before run(), trained after.
  const models::ParamSet& params() const { return params_; }
  // After run(): on rank 0 of a multi-process job with SessionOptions::gather_weights, the whole
  // model's weights; otherwise params().
  const models::ParamSet& whole_params() const { return whole_params_ ? *whole_params_ : params_; }
  // A config's job: its training data (a job built in code brings a DataSource instead).
  const models::data::Dataset& train_data() const { return *data_.train; }
  const models::data::Dataset* eval_data() const { return data_.eval.get(); }
  int64_t steps() const { return steps_; }
  int64_t first_step() const { return first_step_; }
  // How a resume laid the checkpoint out on this plan, when it is another plan (one line,
  // ResumeState::reshard_note); empty otherwise.
  const std::string& resume_note() const { return resume_note_; }
  // The checkpoints run() wrote so far, in order: after a failed run, what it left behind.
  const std::vector<std::filesystem::path>& checkpoints_written() const {
    return checkpoints_written_;
  }
  // How round_checkpoint_every changed the interval (one line); empty when it did not.
  const std::string& checkpoint_note() const { return checkpoint_note_; }
  // The whole model's parameter count (a process of a job holds only its stages' weights).
  int64_t parameters() const;
  // What checkpoints record as the model.
  std::string model_name() const;

 private:
  struct Stop;
  // The steps of periodic evaluation (train.eval.every) after the first.
  std::vector<int64_t> eval_steps() const;
  // Where the segment starting at step `at` ends: the next checkpoint or the run's end.
  int64_t segment_end(int64_t at) const;
  void check_stop_boundaries();
  actors::PipelineSpec segment_spec(int64_t at, int64_t end, const actors::DataSource& data,
                                    Progress& progress, EvalSnapshots* snapshots) const;
  // Throws when a loss was not finite.
  static void check_diverged(const Progress& progress);
  // The next segment starts from what this one ended with.
  void keep_state(std::vector<StageState> states);
  void add_segment(TrainSummary& s, const actors::PipelineResult& result, bool first) const;
  // Every rank writes the stages whose replica 0 it runs (train/job_checkpoint.hpp).
  void write_checkpoint_at(int segment, int64_t at, const std::vector<StageState>& states,
                           TrainSummary& s);
  // Some replica of `stage` runs in this process (every stage without a group).
  bool hosts_stage(int stage) const;
  // This process writes `stage`'s checkpoint files and reports its weights: it runs replica 0.
  bool writes_stage(int stage) const;
  // The layers of the stages `stages` selects, ascending; of those this process hosts.
  std::vector<schedules::LayerRange> layers_of(const std::function<bool(int stage)>& stages) const;
  std::vector<schedules::LayerRange> hosted_layers() const;
  // The initial weights of the hosted layers.
  models::ParamSet initial_params() const;
  // The entries of `params` for the layers of `ranges`, in model order.
  models::ParamSet subset_of(const models::ParamSet& params,
                             const std::vector<schedules::LayerRange>& ranges) const;
  // The current weights of the stages this process writes, in model order.
  models::ParamSet own_weights() const;
  // After the last segment: the final evaluation and record, and the run's totals.
  void finish(TrainSummary& s, Progress& progress, int64_t at,
              std::chrono::steady_clock::time_point start);

  JobSpec job_;
  SessionOptions options_;
  JobInputs inputs_;
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
  std::vector<std::filesystem::path> checkpoints_written_;
  std::string resume_note_;
  std::string checkpoint_note_;
  std::optional<models::ParamSet> whole_params_;  // see whole_params()
  std::vector<std::string> history_;  // Checkpoint::history of the checkpoints this run writes
  std::unique_ptr<Stop> stop_;
  std::unique_ptr<ProcessPlacement> placement_;  // with a group
  bool ran_ = false;
};

}  // namespace tandem::train

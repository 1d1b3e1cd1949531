#pragma once
// Pipeline training from a Config: the config's pipeline section becomes a schedules::Plan and
// runs through actors::Pipeline on every core. Minibatch b is the single-device Trainer's
// minibatch b (same sampler, same seed), the learning rate of update round k is the config's
// schedule at step k, and progress is reported in the Trainer's StepRecord form, so
// format_progress and --metrics-json read the same for both.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "actors/stage_actor.hpp"
#include "apps/config.hpp"
#include "apps/trainer.hpp"
#include "models/model.hpp"
#include "schedules/plan.hpp"

namespace tandem::apps {

struct PipelineSummary {
  TrainSummary train;
  std::vector<actors::StageStats> stages;  // one per stage replica, stage by stage
  double seconds = 0;                      // the pipeline's wall time (busy + idle of a replica)
};

// True when the config asks for more than one device: several stages or replicas. (One stage
// with one replica runs the single-device Trainer.)
bool is_pipeline(const Config& config);

class PipelineTrainer {
 public:
  // Builds the model, the data and the plan; throws ConfigError when the data does not fit the
  // model or a stage sits on a device without data (sim).
  explicit PipelineTrainer(Config config, TrainerOptions options = {});

  // Trains train.steps (or the override) minibatches; calls on_record (on the pipeline's
  // coordinator thread, in step order) every train.log_every minibatches and after the last.
  // Once per PipelineTrainer. Throws actors::PipelineError, or std::runtime_error when the loss
  // diverges.
  PipelineSummary run(const std::function<void(const StepRecord&)>& on_record = {});

  const Config& config() const { return config_; }
  const models::Model& model() const { return model_; }
  const schedules::Plan& plan() const { return plan_; }
  const models::data::Dataset& train_data() const { return *data_.train; }
  int64_t parameters() const { return parameters_; }
  int64_t steps() const { return steps_; }

 private:
  Config config_;
  models::Model model_;
  TrainData data_;
  schedules::Plan plan_;
  int64_t steps_;
  int64_t parameters_ = 0;
  bool ran_ = false;
};

// "schedule pipedream, 4 stages: layers 0-1 | 2-3 | 4-5 | 6-7, replicas 1-1-1-1, 1 slice of 32
// samples per minibatch, on cpu"
std::string format_plan_line(const schedules::Plan& plan);

// One row per stage replica: stage, replica, device, busy s, idle s (wall - busy), busy share,
// peak weight versions, peak kept activations.
std::string format_stage_table(const PipelineSummary& summary);

}  // namespace tandem::apps

#pragma once
// Single-device training from a Config: the reference loop that pipelines must reproduce.
// Each step takes minibatch `step` of the shuffled training set (MinibatchSampler, seeded by
// train.seed), runs models::train_step with the optimizer, and records the loss. Every
// log_every steps it reports the window's mean loss, accuracy and throughput; with train.eval
// it evaluates on held-out data.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "apps/config.hpp"
#include "models/data/dataset.hpp"
#include "models/model.hpp"
#include "models/optimizer.hpp"
#include "models/param_set.hpp"

namespace tandem::apps {

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
  std::optional<EvalResult> eval;  // when the held-out data was evaluated at this step
};

struct TrainSummary {
  int64_t steps = 0;
  std::vector<float> losses;  // every step's training loss
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
};

struct TrainerOptions {
  std::optional<int64_t> steps;  // overrides train.steps
};

class Trainer {
 public:
  // Builds the model, the datasets and the optimizer; throws ConfigError when the config cannot
  // run on one device or the data does not fit the model.
  explicit Trainer(Config config, TrainerOptions options = {});

  // Trains; calls on_record at every log point (and after the last step). Once per Trainer:
  // a second call throws std::logic_error (the sampler and optimizer state would not match).
  TrainSummary run(const std::function<void(const StepRecord&)>& on_record = {});

  // Evaluates the current parameters on the held-out data (first train.eval.samples samples).
  EvalResult evaluate() const;

  const Config& config() const { return config_; }
  const models::Model& model() const { return model_; }
  const models::ParamSet& params() const { return params_; }
  const models::data::Dataset& train_data() const { return *train_; }
  const models::data::Dataset* eval_data() const { return eval_.get(); }
  int64_t steps() const { return steps_; }

 private:
  Config config_;
  models::Model model_;
  Device device_;
  std::shared_ptr<const models::data::Dataset> train_, eval_;
  models::ParamSet params_;
  std::unique_ptr<models::Optimizer> optimizer_;
  int64_t steps_;
  bool ran_ = false;
};

// The config's training (and, with train.eval, held-out) data, checked against the model: the
// same per-sample size and dtype, no class beyond its outputs, at least one minibatch. Throws
// ConfigError naming the data or train.eval section.
struct TrainData {
  std::shared_ptr<const models::data::Dataset> train, eval;
};
TrainData load_train_data(const Config& config, const models::Model& model);

// The held-out loss and accuracy of `params` on the first `samples` samples of `eval`, in
// chunks of `minibatch`, on `device`.
EvalResult evaluate_params(const models::Model& model, const models::ParamSet& params,
                           const models::data::Dataset& eval, int64_t samples, int64_t minibatch,
                           Device device);

// The learning rate of step `step` (0-based) of a run of `steps` steps: warm-up steps ramp
// linearly up to lr; the decay runs from lr at the first step after warm-up towards
// final_fraction * lr, which it would reach one step after the last.
double scheduled_lr(const LrSchedule& schedule, double lr, int64_t step, int64_t steps);

// Throws ConfigError unless the config describes one device: no pipeline section, or one
// stage with one replica covering all `num_layers` layers on a device with data.
void check_single_device(const Config& config, int num_layers);

}  // namespace tandem::apps

#include "apps/trainer.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numbers>
#include <stdexcept>

#include "models/data/markov_text.hpp"
#include "models/data/minibatch_sampler.hpp"
#include "models/train_step.hpp"

namespace tandem::apps {
namespace {

namespace data = models::data;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Dropout masks differ per step but repeat exactly across runs with the same seed.
uint64_t step_seed(uint64_t seed, int64_t step) {
  uint64_t x = seed * 0x9e3779b97f4a7c15ULL + static_cast<uint64_t>(step) + 1;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

int64_t model_outputs(const models::ModelSpec& s) {
  if (s.name == "mlp") return s.widths.back();
  if (s.name == "gpt") return s.vocab;
  return s.classes;
}

Device single_device(const Config& c) {
  return c.pipeline ? c.pipeline->stages.front().device : Device::cpu();
}

// The batch in the model's layout (an MLP takes images flattened) on the run's device.
Tensor prepare(const Tensor& t, const Shape& shape, Device device) {
  Tensor out = t.shape() == shape ? t : t.reshape(shape);
  return device == out.device() ? out : out.to(device);
}

}  // namespace

double scheduled_lr(const LrSchedule& schedule, double lr, int64_t step, int64_t steps) {
  if (step < schedule.warmup_steps) {
    return lr * static_cast<double>(step + 1) / static_cast<double>(schedule.warmup_steps);
  }
  if (schedule.kind == "constant") return lr;
  // Progress reaches 1 one step after the last, so the last step still learns.
  const int64_t span = steps - schedule.warmup_steps;
  if (span <= 0) return lr;
  const double progress =
      static_cast<double>(step - schedule.warmup_steps) / static_cast<double>(span);
  const double final_lr = schedule.final_fraction * lr;
  if (schedule.kind == "linear") return lr + (final_lr - lr) * progress;
  return final_lr + (lr - final_lr) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
}

void check_single_device(const Config& config, int num_layers) {
  if (!config.pipeline) return;
  const PipelineConfig& p = *config.pipeline;
  if (p.stages.size() != 1) {
    throw ConfigError(p.where, "pipeline.stages",
                      std::to_string(p.stages.size()) +
                          " stages: `tandem train` runs on one device; give one stage");
  }
  const StageConfig& s = p.stages.front();
  if (s.replicas != 1) {
    throw ConfigError(s.where, "pipeline.stages[0].replicas",
                      "`tandem train` runs on one device; replicas must be 1");
  }
  const int64_t last = s.last_layer < 0 ? num_layers - 1 : s.last_layer;
  if (s.first_layer != 0 || last != num_layers - 1) {
    throw ConfigError(s.where, "pipeline.stages[0].layers",
                      "a single stage must hold all layers 0-" + std::to_string(num_layers - 1) +
                          ", got " + std::to_string(s.first_layer) + "-" + std::to_string(last));
  }
  if (!s.device.has_data()) {
    throw ConfigError(s.where, "pipeline.stages[0].device",
                      "device " + s.device.str() + " holds no data; training needs cpu or cuda");
  }
}

TrainData load_train_data(const Config& config, const models::Model& model) {
  const TrainConfig& t = config.train;
  data::Datasets sets;
  try {
    sets = data::make_datasets(config.data, t.eval ? t.eval->samples : 0);
  } catch (const std::invalid_argument& e) {
    throw ConfigError(config.data_where, "data", e.what());
  }
  const auto& train = sets.train;
  if (t.eval && !sets.eval) {
    throw ConfigError(
        config.train_where, "train.eval",
        "data '" + data::data_kind_name(config.data) + "' names no eval files to evaluate on");
  }

  // The data must fit the model: same per-sample size and dtype, no class beyond its outputs.
  const Shape model_sample = model.input_shape(1);
  const int64_t model_numel = shape_numel(model_sample);
  if (shape_numel(train->input_shape()) != model_numel ||
      train->input_dtype() != model.input_dtype()) {
    throw ConfigError(config.data_where, "data",
                      train->describe() + " gives samples " + shape_str(train->input_shape()) +
                          " " + std::string(dtype_name(train->input_dtype())) +
                          ", the model takes " + shape_str(model_sample) + " " +
                          std::string(dtype_name(model.input_dtype())));
  }
  if (train->classes() > model_outputs(config.model)) {
    throw ConfigError(config.data_where, "data",
                      train->describe() + " has " + std::to_string(train->classes()) +
                          " classes, the model only " +
                          std::to_string(model_outputs(config.model)) + " outputs");
  }
  if (train->size() < t.minibatch) {
    throw ConfigError(config.data_where, "data",
                      train->describe() + " holds fewer samples than one minibatch of " +
                          std::to_string(t.minibatch));
  }

  return TrainData{sets.train, t.eval ? sets.eval : nullptr};
}

EvalResult evaluate_params(const models::Model& model, const models::ParamSet& params,
                           const data::Dataset& eval, int64_t samples, int64_t minibatch,
                           Device device) {
  EvalResult r;
  const int64_t n = std::min(samples, eval.size());
  double loss_sum = 0;
  int64_t correct = 0;
  std::vector<int64_t> idx;
  for (int64_t first = 0; first < n; first += minibatch) {
    const int64_t b = std::min(minibatch, n - first);
    idx.resize(static_cast<size_t>(b));
    for (int64_t i = 0; i < b; ++i) idx[static_cast<size_t>(i)] = first + i;
    const data::Batch batch = eval.get(idx);
    const models::EvalOutput out =
        models::evaluate(model, params, prepare(batch.inputs, model.input_shape(b), device),
                         prepare(batch.targets, model.target_shape(b), device));
    loss_sum += static_cast<double>(out.loss) * static_cast<double>(out.count);
    correct += out.correct;
    r.predictions += out.count;
  }
  r.samples = n;
  if (r.predictions > 0) {
    r.loss = loss_sum / static_cast<double>(r.predictions);
    r.accuracy = static_cast<double>(correct) / static_cast<double>(r.predictions);
  }
  return r;
}

Trainer::Trainer(Config config, TrainerOptions options)
    : config_(std::move(config)),
      model_(models::Model::build(config_.model)),
      device_(single_device(config_)),
      steps_(options.steps.value_or(config_.train.steps)) {
  check_single_device(config_, model_.num_layers());
  if (steps_ < 1) throw std::invalid_argument("steps must be >= 1");
  const TrainConfig& t = config_.train;
  TrainData sets = load_train_data(config_, model_);
  train_ = sets.train;
  eval_ = sets.eval;

  try {
    optimizer_ = models::make_optimizer(t.optimizer);
  } catch (const std::invalid_argument& e) {
    throw ConfigError(config_.train_where, "train.optimizer", e.what());
  }
  params_ = model_.init_params(t.seed);
  if (device_ != Device::cpu()) {
    for (int64_t i = 0; i < params_.size(); ++i) params_[i] = params_[i].to(device_);
  }
}

EvalResult Trainer::evaluate() const {
  if (!eval_) return {};
  return evaluate_params(model_, params_, *eval_, config_.train.eval->samples,
                         config_.train.minibatch, device_);
}

TrainSummary Trainer::run(const std::function<void(const StepRecord&)>& on_record) {
  if (ran_) throw std::logic_error("Trainer::run called twice");
  ran_ = true;
  const TrainConfig& t = config_.train;
  const bool classification = train_->task() == data::Task::classification;
  data::MinibatchSampler sampler(train_->size(), t.minibatch, t.seed);
  const Shape in_shape = model_.input_shape(t.minibatch);
  const Shape target_shape = model_.target_shape(t.minibatch);

  TrainSummary summary;
  summary.model = config_.model.describe();
  summary.train_data = train_->describe();
  summary.losses.reserve(static_cast<size_t>(steps_));
  if (const auto* markov = dynamic_cast<const data::MarkovText*>(train_.get())) {
    summary.entropy_rate = markov->entropy_rate();
    summary.optimal_loss = markov->optimal_loss();
  }

  double train_seconds = 0;  // excludes evaluation, so throughput is training's
  double window_seconds = 0, window_loss = 0;
  int64_t window_steps = 0, window_correct = 0, window_count = 0;
  const Clock::time_point start = Clock::now();
  for (int64_t step = 0; step < steps_; ++step) {
    const Clock::time_point step_start = Clock::now();
    optimizer_->set_lr(scheduled_lr(t.lr_schedule, t.optimizer.lr, step, steps_));
    const data::Batch batch = train_->get(sampler.indices(step));
    const models::StepOutput out =
        models::train_step(model_, params_, *optimizer_, prepare(batch.inputs, in_shape, device_),
                           prepare(batch.targets, target_shape, device_), step_seed(t.seed, step));
    const double dt = seconds_since(step_start);
    if (!std::isfinite(out.loss)) {
      throw std::runtime_error("training diverged at step " + std::to_string(step + 1) + " (loss " +
                               std::to_string(out.loss) + "); try a smaller train.optimizer.lr");
    }
    summary.losses.push_back(out.loss);
    train_seconds += dt;
    window_seconds += dt;
    window_loss += out.loss;
    window_correct += out.correct;
    window_count += out.count;
    ++window_steps;

    const int64_t done = step + 1;
    const bool last = done == steps_;
    const bool eval_now = eval_ && ((t.eval->every > 0 && done % t.eval->every == 0) || last);
    if (done % t.log_every != 0 && !last && !eval_now) continue;

    StepRecord r;
    r.step = done;
    r.steps = steps_;
    r.loss = window_loss / static_cast<double>(window_steps);
    if (classification && window_count > 0) {
      r.accuracy = static_cast<double>(window_correct) / static_cast<double>(window_count);
    }
    r.samples_per_s =
        window_seconds > 0 ? static_cast<double>(window_steps * t.minibatch) / window_seconds : 0;
    r.lr = optimizer_->lr();
    if (eval_now) r.eval = evaluate();
    r.elapsed_s = seconds_since(start);
    r.eta_s = train_seconds / static_cast<double>(done) * static_cast<double>(steps_ - done);
    summary.final_loss = r.loss;
    summary.final_accuracy = r.accuracy;
    if (r.eval && last) summary.eval = r.eval;
    if (on_record) on_record(r);
    window_seconds = window_loss = 0;
    window_steps = window_correct = window_count = 0;
  }
  summary.steps = steps_;
  summary.seconds = seconds_since(start);
  summary.samples_per_s =
      train_seconds > 0 ? static_cast<double>(steps_ * t.minibatch) / train_seconds : 0;
  summary.params_fingerprint = params_.fingerprint();
  return summary;
}

}  // namespace tandem::apps

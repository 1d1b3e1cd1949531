#include "train/train_data.hpp"

#include <stdexcept>
#include <string>

#include "train/job_error.hpp"

namespace tandem::train {
namespace {

namespace data = models::data;

// The logits of one sample: what class ids must stay below.
int64_t model_outputs(const models::Model& model) {
  return model.activation_shapes(1).back().back();
}

}  // namespace

TrainData load_train_data(const JobSpec& job, const models::Model& model) {
  const TrainSpec& t = job.train;
  data::Datasets sets;
  try {
    sets = data::make_datasets(job.data, t.eval ? t.eval->samples : 0);
  } catch (const std::invalid_argument& e) {
    throw JobError("data", e.what());
  }
  const auto& train = sets.train;
  if (t.eval && !sets.eval) {
    throw JobError("train.eval", "data '" + data::data_kind_name(job.data) +
                                     "' names no eval files to evaluate on");
  }

  // The data must fit the model: same per-sample size and dtype, no class beyond its outputs.
  const Shape model_sample = model.input_shape(1);
  const int64_t model_numel = shape_numel(model_sample);
  if (shape_numel(train->input_shape()) != model_numel ||
      train->input_dtype() != model.input_dtype()) {
    throw JobError("data", train->describe() + " gives samples " + shape_str(train->input_shape()) +
                               " " + std::string(dtype_name(train->input_dtype())) +
                               ", the model takes " + shape_str(model_sample) + " " +
                               std::string(dtype_name(model.input_dtype())));
  }
  // Regression targets are f32, every other task's class ids (or tokens) i32.
  const DType targets = train->task() == data::Task::regression ? DType::f32 : DType::i32;
  if (targets != model.target_dtype()) {
    throw JobError("data", train->describe() + " gives " + std::string(dtype_name(targets)) +
                               " targets, the model's loss " + model.loss().name() + " takes " +
                               std::string(dtype_name(model.target_dtype())));
  }
  if (train->task() != data::Task::regression && train->classes() > model_outputs(model)) {
    throw JobError("data", train->describe() + " has " + std::to_string(train->classes()) +
                               " classes, the model only " + std::to_string(model_outputs(model)) +
                               " outputs");
  }
  if (train->size() < step_samples(t)) {
    throw JobError("data", train->describe() + " holds fewer samples than one step's " +
                               std::to_string(step_samples(t)) + " (train.minibatch " +
                               std::to_string(t.minibatch) + " x train.accumulate " +
                               std::to_string(t.accumulate) + ")");
  }

  return TrainData{sets.train, t.eval ? sets.eval : nullptr};
}

}  // namespace tandem::train

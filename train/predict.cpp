#include "train/predict.hpp"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>
#include <system_error>
#include <utility>

#include "actors/minibatch_data.hpp"
#include "actors/pipeline.hpp"
#include "runtime/scheduler.hpp"
#include "runtime/thread_budget.hpp"
#include "schedules/schedule_error.hpp"
#include "train/checkpoint.hpp"
#include "train/model_file.hpp"
#include "train/model_identity.hpp"
#include "train/predict_inputs.hpp"
#include "train/tied_weights.hpp"

namespace tandem::train {
namespace fs = std::filesystem;

namespace {

std::string shape_text(const Shape& shape) {
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    out += (i == 0 ? "" : ", ") + std::to_string(shape[i]);
  }
  return out + "]";
}

void check_inputs(const models::Model& model, const Tensor& inputs) {
  if (!inputs.defined() || inputs.rank() == 0 || inputs.dim(0) < 1) {
    throw PredictError("predict: inputs " + inputs.describe() + ": need at least one row");
  }
  const std::int64_t n = inputs.dim(0);
  if (n > std::numeric_limits<std::int32_t>::max()) {
    // Message tags carry sample indices in 32 bits.
    throw PredictError("predict: " + std::to_string(n) + " input rows, more than " +
                       std::to_string(std::numeric_limits<std::int32_t>::max()));
  }
  const Shape expected = model.input_shape(n);
  if (inputs.dtype() != model.input_dtype() || inputs.shape() != expected) {
    throw PredictError("predict: inputs " + inputs.describe() + ", but the model reads " +
                       std::string(dtype_name(model.input_dtype())) + shape_text(expected));
  }
  // A row holding a NaN or an infinity gives outputs that mean nothing, as for a file's.
  require_finite_rows(inputs, "predict: inputs");
}

schedules::Plan forward_plan(const models::Model& model, const schedules::Plan& plan,
                             std::int64_t samples, const PredictOptions& options) {
  int busiest = 1;
  for (const schedules::StagePlan& st : plan.stages) {
    busiest = std::max(busiest, static_cast<int>(st.replicas.size()));
    for (const schedules::Placement& pl : st.replicas) {
      if (!Device::parse(pl.device).has_data()) {
        throw PredictError("predict: a stage runs on " + pl.device +
                           ", which computes no values; predict needs cpu or cuda");
      }
    }
  }
  schedules::ScheduleParams params;
  params.kind = schedules::ScheduleKind::forward;
  const int wanted = options.slices > 0 ? options.slices : std::max(plan.schedule.slices, busiest);
  params.slices = static_cast<int>(std::min<std::int64_t>(wanted, samples));
  params.minibatch_size = samples;
  params.minibatches = 1;
  schedules::Plan out = schedules::Plan::make(plan.stages, params);
  try {
    out.validate(model.num_layers());
  } catch (const schedules::ScheduleError& e) {
    throw PredictError(std::string("predict: ") + e.what());
  }
  return out;
}

}  // namespace

void check_weights(const models::Model& model, const models::ParamSet& weights,
                   const std::string& source) {
  const std::string where = source.empty() ? "predict: weights" : source;
  std::int64_t expected = 0;
  for (int l = 0; l < model.num_layers(); ++l) {
    for (const models::ParamSpec& ps : model.layer(l).param_specs()) {
      const std::string name = model.param_name(l, ps.name);
      ++expected;
      if (!weights.contains(name)) {
        throw PredictError(where + ": no tensor '" + name + "' (the model's parameter, shape " +
                           shape_text(ps.shape) + ")");
      }
      const Tensor& t = weights.at(name);
      if (t.shape() != ps.shape || t.dtype() != DType::f32) {
        throw PredictError(where + ": tensor '" + name + "' is " + t.describe() +
                           ", but the model's parameter is f32" + shape_text(ps.shape));
      }
    }
  }
  if (weights.size() != expected) {
    for (std::int64_t i = 0; i < weights.size(); ++i) {
      bool known = false;
      for (int l = 0; l < model.num_layers() && !known; ++l) {
        for (const models::ParamSpec& ps : model.layer(l).param_specs()) {
          known = known || model.param_name(l, ps.name) == weights.name(i);
        }
      }
      if (!known) {
        throw PredictError(where + ": tensor '" + weights.name(i) +
                           "' is no parameter of the model");
      }
    }
    throw PredictError(where + ": " + std::to_string(weights.size()) + " tensors for " +
                       std::to_string(expected) + " parameters");
  }
}

PredictResult predict(const models::Model& model, const schedules::Plan& plan,
                      const models::ParamSet& weights, const Tensor& inputs,
                      const PredictOptions& options) {
  check_inputs(model, inputs);
  check_weights(model, weights);
  const std::int64_t n = inputs.dim(0);
  actors::PipelineSpec spec;
  spec.model = &model;
  spec.plan = forward_plan(model, plan, n, options);
  const int slices = spec.plan.schedule.slices;
  spec.initial_params = weights;
  const Tensor host = inputs.device().is_cuda() ? inputs.to(Device::cpu()) : inputs;
  spec.data = [host, n](std::int64_t) {
    actors::MinibatchData d;
    d.pieces.push_back({{0, n}, host, Tensor()});
    return d;
  };
  if (options.shared_threads) spec.cpu_threads = static_cast<int>(options.shared_threads->size());
  actors::Pipeline pipeline(
      std::move(spec), make_work_sharing(WorkSharingOptions{
                           .workers = options.threads, .shared_threads = options.shared_threads}));
  actors::PipelineResult r = pipeline.run();
  PredictResult out;
  out.outputs = std::move(r.outputs.at(0));
  out.seconds = r.seconds;
  out.slices = slices;
  return out;
}

models::ParamSet load_predict_weights(const fs::path& path, const models::Model& model,
                                      const std::string& model_name) {
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (ec || !fs::exists(status)) {
    throw PredictError(path.string() + ": no such checkpoint directory or weights file");
  }
  if (fs::is_directory(status)) {
    const Checkpoint checkpoint = read_checkpoint(path);
    if (checkpoint.model != model_name) {
      throw PredictError(path.string() + ": the checkpoint holds another model:\n  " +
                         checkpoint.model + "\nnot this one:\n  " + model_name);
    }
    if (!checkpoint.model_layers.empty()) {
      if (const auto diff = identity_difference(checkpoint.model_layers, model_identity(model))) {
        throw PredictError(path.string() + ": the checkpoint holds another model: " + *diff);
      }
    }
    // A tied parameter's copies that the stage files left out take its leader's values.
    models::ParamSet weights = with_tied_copies(newest_weights(checkpoint), model);
    check_weights(model, weights, path.string());
    return weights;
  }
  return read_model_file(path, model, model_name);
}

}  // namespace tandem::train

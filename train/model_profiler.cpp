#include "train/model_profiler.hpp"

#include <algorithm>
#include <chrono>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "models/data/data_spec.hpp"
#include "models/model.hpp"
#include "train/job_error.hpp"

namespace tandem::train {
namespace {

namespace data = models::data;
using Clock = std::chrono::steady_clock;

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

struct LayerRun {
  double forward_ms = 0, backward_input_ms = 0, backward_weight_ms = 0;
  Tensor y;  // the layer's output: the next layer's input
  double memory_bytes = 0;
};

// `first`: layer 0, whose backward runs fused without dx (Model::backward's need_dx = false).
LayerRun time_layer(const models::Layer& layer, models::ParamView params, const Tensor& x,
                    bool first, const ProfileOptions& options) {
  models::Context ctx;
  ctx.training = true;
  ctx.seed = 1;
  const Tensor dy = Tensor::full(layer.output_shape(x.shape()), 0.01f, layer.output_dtype());
  std::vector<Tensor> grads;
  for (const Tensor& p : params) grads.push_back(Tensor::zeros(p.shape(), p.dtype()));
  const models::GradSink sink{grads, 1.0f, 0.0f};
  std::vector<double> forward, backward_input, backward_weight;
  LayerRun run;
  for (int round = 0; round < options.warmup + options.repeats; ++round) {
    const auto t0 = Clock::now();
    models::ForwardResult f = layer.forward(ctx, params, x);
    const auto t1 = Clock::now();
    if (round == 0) {
      // What the forward keeps for the backward, each storage once.
      std::vector<const Tensor*> seen;
      for (const Tensor& t : f.saved) {
        if (!t.defined()) continue;
        const bool again = std::any_of(seen.begin(), seen.end(),
                                       [&](const Tensor* s) { return s->shares_storage(t); });
        if (!again) run.memory_bytes += static_cast<double>(t.nbytes());
        seen.push_back(&t);
      }
    }
    Clock::time_point t2 = t1;
    if (first) {
      layer.backward_into(ctx, params, f.saved, dy, false, sink);
    } else {
      const Tensor dx = layer.backward_input(ctx, params, f.saved, dy);
      t2 = Clock::now();
      layer.backward_weight_into(ctx, f.saved, dy, sink);
    }
    const auto t3 = Clock::now();
    if (round >= options.warmup) {
      forward.push_back(ms_between(t0, t1));
      backward_input.push_back(ms_between(t1, t2));
      backward_weight.push_back(ms_between(t2, t3));
    }
    if (round + 1 == options.warmup + options.repeats) run.y = f.y;
  }
  run.forward_ms = median(forward);
  run.backward_input_ms = median(backward_input);
  run.backward_weight_ms = median(backward_weight);
  return run;
}

// The intercept at zero samples of the line through (1, at_one) and (samples, at_all).
double fixed_part(double at_one, double at_all, int64_t samples) {
  if (samples <= 1) return 0;
  const double b = static_cast<double>(samples);
  return std::clamp((b * at_one - at_all) / (b - 1), 0.0, at_all);
}

}  // namespace

planner::Profile profile_model(const JobSpec& job, const ProfileOptions& options,
                               const ProfileProgress& progress) {
  if (options.repeats < 1) throw std::invalid_argument("profile: repeats must be >= 1");
  if (options.warmup < 0) throw std::invalid_argument("profile: warmup must be >= 0");
  const int64_t minibatch = options.minibatch > 0 ? options.minibatch : job.train.minibatch;
  if (minibatch < 1 || minibatch > 1'000'000'000) {
    throw std::invalid_argument("profile: minibatch must be in 1..1e9");
  }
  const models::Model model = models::Model::build(job.model);

  data::Datasets sets;
  try {
    sets = data::make_datasets(job.data, 0);
  } catch (const std::invalid_argument& e) {
    throw JobError("data", e.what());
  }
  const data::Dataset& dataset = *sets.train;
  const Shape sample = model.input_shape(1);
  if (shape_numel(dataset.input_shape()) != shape_numel(sample) ||
      dataset.input_dtype() != model.input_dtype()) {
    throw JobError("data",
                   dataset.describe() + " gives samples " + shape_str(dataset.input_shape()) + " " +
                       std::string(dtype_name(dataset.input_dtype())) + ", the model takes " +
                       shape_str(sample) + " " + std::string(dtype_name(model.input_dtype())));
  }
  if (dataset.size() < minibatch) {
    throw JobError("data", dataset.describe() + " holds fewer samples than the minibatch of " +
                               std::to_string(minibatch));
  }

  // The first `minibatch` samples, in the model's layout (an MLP takes images flattened).
  std::vector<int64_t> indices(static_cast<std::size_t>(minibatch));
  std::iota(indices.begin(), indices.end(), int64_t{0});
  const Tensor inputs = dataset.get(indices).inputs.reshape(model.input_shape(minibatch));
  const models::ParamSet params = model.init_params(job.train.seed);

  planner::Profile profile;
  profile.model = job.model.describe();
  profile.device = "cpu";
  profile.minibatch = static_cast<int>(minibatch);
  Tensor x = inputs;
  Tensor one = inputs.slice(0, 1).clone();
  const int layers = model.num_layers();
  for (int i = 0; i < layers; ++i) {
    const models::Layer& layer = model.layer(i);
    const models::ParamView layer_params = model.layer_params(params, i);
    const LayerRun all = time_layer(layer, layer_params, x, i == 0, options);
    planner::LayerProfile entry;
    entry.name = layer.describe();
    entry.forward_ms = all.forward_ms;
    entry.backward_weight_ms = all.backward_weight_ms;
    entry.backward_ms = all.backward_input_ms + all.backward_weight_ms;
    entry.activation_bytes = static_cast<double>(all.y.nbytes());
    for (const Tensor& p : layer_params) entry.parameter_bytes += static_cast<double>(p.nbytes());
    entry.memory_bytes = all.memory_bytes;
    if (options.fixed_parts && minibatch > 1) {
      const LayerRun single = time_layer(layer, layer_params, one, i == 0, options);
      entry.forward_fixed_ms = fixed_part(single.forward_ms, entry.forward_ms, minibatch);
      entry.backward_fixed_ms = fixed_part(single.backward_input_ms + single.backward_weight_ms,
                                           entry.backward_ms, minibatch);
      one = single.y;
    }
    profile.layers.push_back(entry);
    x = all.y;
    if (progress) progress(i, layers, entry);
  }
  return profile;
}

}  // namespace tandem::train

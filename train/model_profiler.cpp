#include "train/model_profiler.hpp"

#include <algorithm>
#include <barrier>
#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "models/data/data_spec.hpp"
#include "models/kernels/cpu/threading.hpp"
#include "models/model.hpp"
#include "models/optimizer.hpp"
#include "train/job_error.hpp"
#include "train/profile_edges.hpp"

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
  if (n == 0) return 0;  // not measured
  return n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

// One layer's medians.
struct LayerRun {
  double forward_ms = 0, backward_input_ms = 0, backward_weight_ms = 0, step_ms = 0;
  double output_bytes = 0;  // the layer's output
  double memory_bytes = 0;  // what its forward keeps for its backward
};

// Each round's times of one layer in one copy of the measurement.
struct Rounds {
  std::vector<double> forward, backward_input, backward_weight, step;
};

// What the forward keeps for the backward, each storage once.
double saved_bytes(const std::vector<Tensor>& saved) {
  double bytes = 0;
  std::vector<const Tensor*> seen;
  for (const Tensor& t : saved) {
    if (!t.defined()) continue;
    const bool again = std::any_of(seen.begin(), seen.end(),
                                   [&](const Tensor* s) { return s->shares_storage(t); });
    if (!again) bytes += static_cast<double>(t.nbytes());
    seen.push_back(&t);
  }
  return bytes;
}

// One copy of the measurement: round after round, every layer's forward in order, then every
// layer's B and W in reverse (each layer's dy the input gradient of the layer after it), then
// the optimizer's update of each layer's weights (`params`, the copy's own), as a training step
// runs them; so each op finds the caches as training leaves them, not warm from its own last
// run. Layer 0's backward runs fused without dx (Model::backward's need_dx = false).
// `before_round` lines the copies up, so that their rounds overlap.
std::vector<Rounds> time_rounds(const models::Model& model, const models::ParamSet& params,
                                const Tensor& x, const ProfileOptions& options,
                                const models::OptimizerSpec& spec,
                                const std::function<void()>& before_round,
                                std::vector<LayerRun>& shapes) {
  const int layers = model.num_layers();
  models::Context ctx;
  ctx.training = true;
  ctx.seed = 1;
  // Each layer's own copy of its weights (an update must not find them shared, or it copies
  // them), named by position: the optimizer keys its state by name.
  std::vector<std::unique_ptr<models::Optimizer>> optimizers;
  std::vector<models::ParamSet> layer_params(static_cast<std::size_t>(layers));
  std::vector<models::ParamSet> layer_grads(static_cast<std::size_t>(layers));
  for (int l = 0; l < layers; ++l) {
    const auto k = static_cast<std::size_t>(l);
    const models::ParamView p = model.layer_params(params, l);
    for (std::size_t i = 0; i < p.size(); ++i) {
      layer_params[k].add(std::to_string(i), p[i].clone());
      layer_grads[k].add(std::to_string(i), Tensor::zeros(p[i].shape(), p[i].dtype()));
    }
    optimizers.push_back(models::make_optimizer(spec));
  }
  std::vector<Rounds> out(static_cast<std::size_t>(layers));
  shapes.assign(static_cast<std::size_t>(layers), LayerRun{});
  std::vector<models::ForwardResult> kept(static_cast<std::size_t>(layers));
  for (int round = 0; round < options.warmup + options.repeats; ++round) {
    if (before_round) before_round();
    const bool timed = round >= options.warmup;
    // Each layer reads its sources (a graph's edges; the previous layer in a chain).
    std::vector<Tensor> values(static_cast<std::size_t>(layers));
    std::vector<Tensor> xs;
    for (int l = 0; l < layers; ++l) {
      const auto k = static_cast<std::size_t>(l);
      xs.clear();
      for (const int from : model.sources(l)) {
        xs.push_back(from == models::Model::kModelInput ? x
                                                        : values[static_cast<std::size_t>(from)]);
      }
      const models::Layer& layer = model.layer(l);
      const models::ParamView view = layer_params[k].range(0, layer_params[k].size());
      const auto t0 = Clock::now();
      kept[k] =
          layer.arity() == 1 ? layer.forward(ctx, view, xs[0]) : layer.forward_n(ctx, view, xs);
      if (timed) out[k].forward.push_back(ms_between(t0, Clock::now()));
      values[k] = kept[k].y;
      shapes[k].output_bytes = static_cast<double>(values[k].nbytes());
      shapes[k].memory_bytes = saved_bytes(kept[k].saved);
    }
    // The gradient reaching each layer's output, summed over its readers (untimed).
    std::vector<Tensor> grad(static_cast<std::size_t>(layers));
    grad.back() = Tensor::full(values.back().shape(), 0.01f, values.back().dtype());
    values.assign(values.size(), Tensor());
    for (int l = layers - 1; l >= 0; --l) {
      const auto k = static_cast<std::size_t>(l);
      const models::Layer& layer = model.layer(l);
      const models::ParamView view =
          std::as_const(layer_params[k]).range(0, layer_params[k].size());
      const models::GradSink sink{layer_grads[k].range(0, layer_grads[k].size()), 1.0f, 0.0f};
      const std::vector<int>& sources = model.sources(l);
      const Tensor dy = std::move(grad[k]);
      std::vector<Tensor> dxs;
      const auto t0 = Clock::now();
      auto t1 = t0;
      if (layer.arity() > 1) {
        std::vector<bool> want;
        for (const int from : sources) want.push_back(from != models::Model::kModelInput);
        dxs = layer.backward_input_n(ctx, view, kept[k].saved, dy, want);
        t1 = Clock::now();
        layer.backward_weight_into(ctx, kept[k].saved, dy, sink);  // a merge with weights
      } else if (sources[0] == models::Model::kModelInput) {
        layer.backward_into(ctx, view, kept[k].saved, dy, false, sink);
        dxs.emplace_back();
      } else {
        dxs.push_back(layer.backward_input(ctx, view, kept[k].saved, dy));
        t1 = Clock::now();
        layer.backward_weight_into(ctx, kept[k].saved, dy, sink);
      }
      const auto t2 = Clock::now();
      for (std::size_t i = 0; i < sources.size(); ++i) {
        if (sources[i] == models::Model::kModelInput) continue;
        Tensor& g = grad[static_cast<std::size_t>(sources[i])];
        if (!g.defined()) {
          g = dxs[i];
          continue;
        }
        Tensor sum = Tensor::empty(g.shape());
        models::cpu_kernels().add(g.data<float>(), dxs[i].data<float>(), sum.data<float>(),
                                  sum.numel());
        g = std::move(sum);
      }
      kept[k] = {};
      if (timed) {
        out[k].backward_input.push_back(ms_between(t0, t1));
        out[k].backward_weight.push_back(ms_between(t1, t2));
      }
    }
    for (int l = 0; l < layers; ++l) {
      const auto k = static_cast<std::size_t>(l);
      const auto t0 = Clock::now();
      if (options.step && !layer_params[k].empty()) {
        optimizers[k]->step(layer_params[k], layer_grads[k]);
      }
      if (timed && options.step) out[k].step.push_back(ms_between(t0, Clock::now()));
    }
  }
  return out;
}

// `options.concurrent` copies at once, each on its own thread, weights and input, and on
// cores / copies threads of the kernels' pool (at least one); each layer's medians are over
// every copy's rounds.
std::vector<LayerRun> time_model(const models::Model& model, const models::ParamSet& params,
                                 const Tensor& x, const ProfileOptions& options,
                                 const models::OptimizerSpec& spec) {
  const int copies = options.concurrent;
  std::vector<std::vector<Rounds>> rounds(static_cast<std::size_t>(copies));
  std::vector<LayerRun> shapes;
  if (copies == 1) {
    rounds[0] = time_rounds(model, params, x, options, spec, {}, shapes);
  } else {
    const int threads = std::max(1, models::cpu::num_threads() / copies);
    std::barrier line_up(copies);
    std::vector<std::thread> workers;
    std::vector<std::exception_ptr> errors(static_cast<std::size_t>(copies));
    std::vector<std::vector<LayerRun>> copy_shapes(static_cast<std::size_t>(copies));
    for (int c = 0; c < copies; ++c) {
      workers.emplace_back([&, c] {
        const auto k = static_cast<std::size_t>(c);
        try {
          const Tensor input = x.clone();
          models::cpu::run_on_threads(threads, [&] {
            rounds[k] = time_rounds(
                model, params, input, options, spec, [&] { line_up.arrive_and_wait(); },
                copy_shapes[k]);
          });
        } catch (...) {
          errors[k] = std::current_exception();
          line_up.arrive_and_drop();  // the others go on without this copy
        }
      });
    }
    for (std::thread& t : workers) t.join();
    for (const std::exception_ptr& e : errors) {
      if (e) std::rethrow_exception(e);
    }
    shapes = std::move(copy_shapes[0]);
  }
  for (std::size_t l = 0; l < shapes.size(); ++l) {
    Rounds all;
    for (const std::vector<Rounds>& copy : rounds) {
      const Rounds& r = copy[l];
      for (auto [to, from] :
           {std::pair{&all.forward, &r.forward}, std::pair{&all.backward_input, &r.backward_input},
            std::pair{&all.backward_weight, &r.backward_weight}, std::pair{&all.step, &r.step}}) {
        to->insert(to->end(), from->begin(), from->end());
      }
    }
    shapes[l].forward_ms = median(all.forward);
    shapes[l].backward_input_ms = median(all.backward_input);
    shapes[l].backward_weight_ms = median(all.backward_weight);
    shapes[l].step_ms = median(all.step);
  }
  return shapes;
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
  if (options.concurrent < 1 || options.concurrent > 256) {
    throw std::invalid_argument("profile: concurrent must be in 1..256");
  }
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
  profile.concurrent = options.concurrent;
  const std::vector<LayerRun> all = time_model(model, params, inputs, options, job.train.optimizer);
  std::vector<LayerRun> single;
  if (options.fixed_parts && minibatch > 1) {
    ProfileOptions at_one = options;
    at_one.step = false;  // the update does not depend on the samples
    single = time_model(model, params, inputs.slice(0, 1).clone(), at_one, job.train.optimizer);
  }
  const int layers = model.num_layers();
  const std::vector<double> cuts = model.cut_elements(1);
  for (int i = 0; i < layers; ++i) {
    const auto k = static_cast<std::size_t>(i);
    planner::LayerProfile entry;
    entry.name = model.layer(i).describe();
    entry.forward_ms = all[k].forward_ms;
    entry.backward_weight_ms = all[k].backward_weight_ms;
    entry.backward_ms = all[k].backward_input_ms + all[k].backward_weight_ms;
    // What crosses the cut after the layer (a graph's skip edges too); a graph's profile then
    // gets its edges and each layer's own output instead (add_profile_edges, below).
    entry.activation_bytes =
        model.is_chain() ? all[k].output_bytes : 4 * cuts[k] * static_cast<double>(minibatch);
    for (const Tensor& p : model.layer_params(params, i)) {
      entry.parameter_bytes += static_cast<double>(p.nbytes());
    }
    entry.memory_bytes = all[k].memory_bytes;
    entry.step_ms = all[k].step_ms;
    if (!single.empty()) {
      entry.forward_fixed_ms = fixed_part(single[k].forward_ms, entry.forward_ms, minibatch);
      entry.backward_fixed_ms = fixed_part(
          single[k].backward_input_ms + single[k].backward_weight_ms, entry.backward_ms, minibatch);
    }
    profile.layers.push_back(entry);
    if (progress) progress(i, layers, entry);
  }
  add_profile_edges(model, minibatch, profile);
  return profile;
}

}  // namespace tandem::train

#include "models/train_step.hpp"

#include <stdexcept>

#include "models/grad_norm.hpp"
#include "models/loss.hpp"

namespace tandem::models {
namespace {

void check_batch(const Model& model, const Tensor& inputs, const Tensor& targets, const char* who) {
  if (!inputs.defined() || !targets.defined() || inputs.rank() == 0) {
    throw std::invalid_argument(std::string(who) + ": inputs and targets must be defined tensors");
  }
  const std::int64_t batch = inputs.dim(0);
  if (inputs.shape() != model.input_shape(batch) || inputs.dtype() != model.input_dtype()) {
    throw std::invalid_argument(std::string(who) + ": inputs " + inputs.describe() +
                                " do not fit " + model.spec().describe() + " (want " +
                                std::string(dtype_name(model.input_dtype())) +
                                shape_str(model.input_shape(batch)) + ")");
  }
  if (targets.shape() != model.target_shape(batch) || targets.dtype() != model.target_dtype()) {
    throw std::invalid_argument(std::string(who) + ": targets " + targets.describe() +
                                " do not fit the loss " + model.loss().name() + " (want " +
                                std::string(dtype_name(model.target_dtype())) +
                                shape_str(model.target_shape(batch)) + ")");
  }
}

ParamSet empty_like(const ParamSet& params) {
  ParamSet out;
  for (std::int64_t i = 0; i < params.size(); ++i) {
    out.add(params.name(i),
            Tensor::empty(params[i].shape(), params[i].dtype(), params[i].device()));
  }
  return out;
}

struct ForwardLoss {
  Model::RangeForward fwd;
  LossResult loss;
};

ForwardLoss forward_loss(const Model& model, const ParamSet& params, const Tensor& inputs,
                         const Tensor& targets, const Context& ctx) {
  ForwardLoss r{model.forward(ctx, params, inputs, 0, model.num_layers()), {}};
  const float scale = 1.0f / static_cast<float>(std::max<std::int64_t>(1, targets.numel()));
  // dlogits only when a backward follows.
  r.loss = model.loss().compute(ctx, r.fwd.y, targets, ctx.keep_saved, scale);
  r.fwd.y = Tensor();  // logits are no longer needed
  return r;
}

StepOutput finish(const LossResult& loss) {
  StepOutput out;
  out.loss = static_cast<float>(loss.loss_sum /
                                static_cast<double>(std::max<std::int64_t>(1, loss.count)));
  out.correct = loss.correct;
  out.count = loss.count;
  return out;
}

}  // namespace

StepOutput train_step(const Model& model, const ParamSet& params, const Tensor& inputs,
                      const Tensor& targets, std::uint64_t step_seed) {
  check_batch(model, inputs, targets, "train_step");
  const Context ctx{true, step_seed, 0};
  ForwardLoss fl = forward_loss(model, params, inputs, targets, ctx);
  StepOutput out = finish(fl.loss);
  out.grads = empty_like(params);
  model.backward(ctx, params, fl.fwd.saved, fl.loss.dlogits, 0, model.num_layers(), false,
                 out.grads);
  sum_tied_copies(cpu_kernels(), model.ties(), out.grads);
  return out;
}

StepOutput train_step(const Model& model, ParamSet& params, Optimizer& optimizer,
                      const Tensor& inputs, const Tensor& targets, std::uint64_t step_seed) {
  // The optimizer leaves the model's buffers to their layers (Optimizer::attach).
  if (model.has_buffers() && optimizer.model() == nullptr) optimizer.attach(model);
  const std::optional<FusedUpdate> fused = optimizer.fused_update();
  bool unique = true;
  for (std::int64_t i = 0; i < params.size(); ++i) unique = unique && params[i].storage_unique();
  // Tied copies need their gradients summed before the update, so they cannot be fused; buffers
  // take their statistics' sums in their gradient slots, not an update.
  if (!fused || !unique || !model.ties().empty() || model.has_buffers()) {
    StepOutput out =
        train_step(model, static_cast<const ParamSet&>(params), inputs, targets, step_seed);
    optimizer.step(params, out.grads);
    return out;
  }
  check_batch(model, inputs, targets, "train_step");
  const Context ctx{true, step_seed, 0};
  ForwardLoss fl = forward_loss(model, params, inputs, targets, ctx);
  // Each layer writes p = beta * p + alpha * g straight into its weights, after it computed
  // its input gradient (which needs them); no gradient tensor is stored.
  model.backward(ctx, params, fl.fwd.saved, fl.loss.dlogits, 0, model.num_layers(), false, params,
                 fused->alpha, fused->beta);
  optimizer.note_fused_step();
  return finish(fl.loss);
}

StepOutput train_step(const Model& model, ParamSet& params, Optimizer& optimizer,
                      const Tensor& inputs, const Tensor& targets, std::uint64_t step_seed,
                      const StepOptions& options) {
  if (!options.clip_norm && !options.report_norm) {
    return train_step(model, params, optimizer, inputs, targets, step_seed);
  }
  if (model.has_buffers() && optimizer.model() == nullptr) optimizer.attach(model);
  StepOutput out =
      train_step(model, static_cast<const ParamSet&>(params), inputs, targets, step_seed);
  const GradNormLayout layout(model);
  const Kernels& k = cpu_kernels();
  out.grad_norm = gradient_norm(k, layout, out.grads);
  if (options.clip_norm) {
    scale_gradients(k, layout, out.grads, clip_coefficient(out.grad_norm, *options.clip_norm));
  }
  optimizer.step(params, out.grads);
  return out;
}

EvalOutput evaluate(const Model& model, const ParamSet& params, const Tensor& inputs,
                    const Tensor& targets) {
  check_batch(model, inputs, targets, "evaluate");
  Context ctx{false, 0, 0};
  ctx.keep_saved = false;
  const ForwardLoss fl = forward_loss(model, params, inputs, targets, ctx);
  const StepOutput s = finish(fl.loss);
  return {s.loss, s.correct, s.count};
}

}  // namespace tandem::models

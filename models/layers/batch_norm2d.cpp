#include "models/layers/batch_norm2d.hpp"

#include <stdexcept>

#include "models/detail/checks.hpp"

namespace tandem::models {
namespace {

// Parameter order (param_specs()).
constexpr std::size_t kWeight = 0;
constexpr std::size_t kBias = 1;
constexpr std::size_t kRunningMean = 2;
constexpr std::size_t kRunningVar = 3;
constexpr std::size_t kCount = 4;

// A [c] tensor of `value` on k's device.
Tensor filled(const Kernels& k, std::int64_t c, float value) {
  Tensor t = k.empty({c});
  k.fill(detail::ptr(t), c, value);
  return t;
}

}  // namespace

BatchNorm2d::BatchNorm2d(std::int64_t channels, float eps, float momentum)
    : channels_(channels), eps_(eps), momentum_(momentum) {
  if (channels <= 0) {
    throw std::invalid_argument("BatchNorm2d: channels must be positive, got " +
                                std::to_string(channels));
  }
  if (!(eps > 0) || !(momentum >= 0 && momentum <= 1)) {
    throw std::invalid_argument("BatchNorm2d: need eps > 0 and momentum in [0, 1]");
  }
}

std::string BatchNorm2d::describe() const {
  return "batch_norm2d(" + std::to_string(channels_) + ")";
}

std::vector<ParamSpec> BatchNorm2d::param_specs() const {
  return {{"weight", {channels_}, Init::ones, 1.0f, 1},
          {"bias", {channels_}, Init::zeros, 1.0f, 1},
          {"running_mean", {channels_}, Init::zeros, 1.0f, 1, false},
          {"running_var", {channels_}, Init::ones, 1.0f, 1, false},
          {"count", {1}, Init::zeros, 1.0f, 1, false}};
}

Shape BatchNorm2d::output_shape(const Shape& input) const {
  if (input.size() != 4 || input[1] != channels_) {
    throw std::invalid_argument(describe() + ": input shape " + shape_str(input) +
                                " is not [batch, " + std::to_string(channels_) + ", H, W]");
  }
  return input;
}

ForwardResult BatchNorm2d::forward(const Context& ctx, ParamView params, const Tensor& x) const {
  const Kernels& k = ctx.k();
  const std::string who = describe();
  detail::require_params(k, params, param_specs(), who);
  const Tensor x32 = detail::as_f32(k, x, who, "input");
  output_shape(x32.shape());
  const std::int64_t n = x32.dim(0);
  const std::int64_t hw = x32.dim(2) * x32.dim(3);
  using detail::ptr;
  Tensor y = k.empty(x32.shape());
  ForwardResult r{y, {}};
  if (ctx.training) {
    Tensor xhat = k.empty(x32.shape());
    Tensor rstd = k.empty({channels_});
    Tensor sums = k.empty({2 * channels_ + 1});
    k.batch_norm_forward(ptr(x32), ptr(params[kWeight]), ptr(params[kBias]), ptr(y), ptr(xhat),
                         ptr(rstd), ptr(sums), n, channels_, hw, eps_);
    if (ctx.keep_saved) r.saved = {xhat, rstd, sums};
    return r;
  }
  k.batch_norm_inference(ptr(x32), ptr(params[kWeight]), ptr(params[kBias]),
                         ptr(params[kRunningMean]), ptr(params[kRunningVar]), ptr(y), n, channels_,
                         hw, eps_);
  if (ctx.keep_saved) {
    // xhat under the running statistics, for the weight gradient (gamma 1, beta 0).
    Tensor xhat = k.empty(x32.shape());
    k.batch_norm_inference(ptr(x32), ptr(filled(k, channels_, 1.0f)),
                           ptr(filled(k, channels_, 0.0f)), ptr(params[kRunningMean]),
                           ptr(params[kRunningVar]), ptr(xhat), n, channels_, hw, eps_);
    r.saved = {xhat};
  }
  return r;
}

SavedLayout BatchNorm2d::saved_layout(std::size_t /*k*/) const {
  return SavedLayout::not_splittable;
}

Tensor BatchNorm2d::backward_input(const Context& ctx, ParamView params, Saved& saved,
                                   const Tensor& dy) const {
  const Kernels& k = ctx.k();
  const std::string who = describe();
  detail::require_params(k, params, param_specs(), who);
  detail::require_saved(saved, ctx.training ? 3 : 1, who);
  const Tensor& xhat = saved[0];
  const Tensor dy32 = detail::as_f32(k, dy, who, "output gradient");
  detail::require_f32_shape(k, dy32, xhat.shape(), who, "output gradient");
  const std::int64_t n = xhat.dim(0);
  const std::int64_t hw = xhat.dim(2) * xhat.dim(3);
  using detail::ptr;
  Tensor dx = k.empty(xhat.shape());
  if (ctx.training) {
    k.batch_norm_backward_input(ptr(dy32), ptr(xhat), ptr(saved[1]), ptr(params[kWeight]), ptr(dx),
                                n, channels_, hw);
  } else {
    // The running statistics are constants: dx = gamma * dy / sqrt(running_var + eps), the
    // inference map applied to dy with a zero mean and no shift.
    const Tensor zeros = filled(k, channels_, 0.0f);
    k.batch_norm_inference(ptr(dy32), ptr(params[kWeight]), ptr(zeros), ptr(zeros),
                           ptr(params[kRunningVar]), ptr(dx), n, channels_, hw, eps_);
  }
  return dx;
}

void BatchNorm2d::backward_weight_into(const Context& ctx, const Saved& saved, const Tensor& dy,
                                       const GradSink& sink) const {
  const Kernels& k = ctx.k();
  const std::string who = describe();
  detail::require_sink(k, sink, param_specs(), who);
  detail::require_saved(saved, ctx.training ? 3 : 1, who);
  const Tensor& xhat = saved[0];
  const Tensor dy32 = detail::as_f32(k, dy, who, "output gradient");
  detail::require_f32_shape(k, dy32, xhat.shape(), who, "output gradient");
  const std::int64_t n = xhat.dim(0);
  const std::int64_t hw = xhat.dim(2) * xhat.dim(3);
  using detail::ptr;
  k.batch_norm_backward_weight(ptr(dy32), ptr(xhat), ptr(sink.grads[kWeight]),
                               ptr(sink.grads[kBias]), n, channels_, hw, sink.alpha, sink.beta);
  if (ctx.training) {
    // The buffers' slots: this slice's sums, scaled and accumulated like any gradient (a row
    // sum over one row is alpha * x + beta * out).
    const float* sums = ptr(saved[2]);
    k.column_sum(sums, 1, channels_, sink.alpha, sink.beta, ptr(sink.grads[kRunningMean]));
    k.column_sum(sums + channels_, 1, channels_, sink.alpha, sink.beta,
                 ptr(sink.grads[kRunningVar]));
    k.column_sum(sums + 2 * channels_, 1, 1, sink.alpha, sink.beta, ptr(sink.grads[kCount]));
  } else {
    // Evaluation sees no batch statistics: nothing to add to the running ones.
    for (const std::size_t i : {kRunningMean, kRunningVar, kCount}) {
      Tensor& t = sink.grads[i];
      k.scale(ptr(t), t.numel(), sink.beta);
    }
  }
}

void BatchNorm2d::update_buffers(const Kernels& k, ParamView params, std::span<const Tensor> grads,
                                 std::span<Tensor> out) const {
  const std::string who = describe();
  detail::require_params(k, params, param_specs(), who);
  if (grads.size() != params.size() || out.size() != params.size()) {
    throw std::invalid_argument(who + ": update_buffers needs " + std::to_string(params.size()) +
                                " gradients and outputs");
  }
  using detail::ptr;
  k.batch_norm_update_running(ptr(grads[kRunningMean]), ptr(grads[kRunningVar]), ptr(grads[kCount]),
                              ptr(params[kRunningMean]), ptr(params[kRunningVar]),
                              ptr(params[kCount]), ptr(out[kRunningMean]), ptr(out[kRunningVar]),
                              ptr(out[kCount]), channels_, momentum_);
}

}  // namespace tandem::models

#include "models/layers/layer_norm.hpp"

#include <stdexcept>

#include "models/detail/checks.hpp"

namespace tandem::models {

LayerNorm::LayerNorm(std::int64_t dim, float eps) : dim_(dim), eps_(eps) {
  if (dim <= 0)
    throw std::invalid_argument("LayerNorm: dim must be positive, got " + std::to_string(dim));
}

std::string LayerNorm::describe() const {
  return "layer_norm(" + std::to_string(dim_) + ")";
}

std::vector<ParamSpec> LayerNorm::param_specs() const {
  return {{"weight", {dim_}, Init::ones, 1.0f, 1}, {"bias", {dim_}, Init::zeros, 1.0f, 1}};
}

Shape LayerNorm::output_shape(const Shape& input) const {
  if (input.empty() || input.back() != dim_) {
    throw std::invalid_argument(describe() + ": input shape " + shape_str(input) +
                                " does not end in " + std::to_string(dim_));
  }
  return input;
}

ForwardResult LayerNorm::forward(const Context& ctx, ParamView params, const Tensor& x) const {
  const Kernels& k = ctx.k();
  const std::string who = describe();
  detail::require_params(k, params, param_specs(), who);
  const Tensor x32 = detail::as_f32(k, x, who, "input");
  output_shape(x32.shape());
  const std::int64_t rows = x32.numel() / dim_;
  Tensor y = k.empty(x32.shape());
  Tensor xhat = k.empty(x32.shape());
  Tensor rstd = k.empty({rows});
  using detail::ptr;
  k.layer_norm_forward(ptr(x32), ptr(params[0]), ptr(params[1]), ptr(y), ptr(xhat), ptr(rstd), rows,
                       dim_, eps_);
  ForwardResult r{y, {}};
  if (ctx.keep_saved) r.saved = {xhat, rstd};
  return r;
}

Tensor LayerNorm::backward_input(const Context& ctx, ParamView params, Saved& saved,
                                 const Tensor& dy) const {
  const Kernels& k = ctx.k();
  const std::string who = describe();
  detail::require_params(k, params, param_specs(), who);
  detail::require_saved(saved, 2, who);
  const Tensor dy32 = detail::as_f32(k, dy, who, "output gradient");
  detail::require_f32_shape(k, dy32, saved[0].shape(), who, "output gradient");
  Tensor dx = k.empty(dy32.shape());
  using detail::ptr;
  k.layer_norm_backward_input(ptr(dy32), ptr(saved[0]), ptr(saved[1]), ptr(params[0]), ptr(dx),
                              saved[1].numel(), dim_);
  return dx;
}

void LayerNorm::backward_weight_into(const Context& ctx, const Saved& saved, const Tensor& dy,
                                     const GradSink& sink) const {
  const Kernels& k = ctx.k();
  const std::string who = describe();
  detail::require_sink(k, sink, param_specs(), who);
  detail::require_saved(saved, 2, who);
  const Tensor dy32 = detail::as_f32(k, dy, who, "output gradient");
  detail::require_f32_shape(k, dy32, saved[0].shape(), who, "output gradient");
  using detail::ptr;
  k.layer_norm_backward_weight(ptr(dy32), ptr(saved[0]), ptr(sink.grads[0]), ptr(sink.grads[1]),
                               saved[1].numel(), dim_, sink.alpha, sink.beta);
}

}  // namespace tandem::models

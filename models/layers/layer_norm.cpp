#include "models/layers/layer_norm.hpp"

#include <stdexcept>

#include "models/detail/checks.hpp"
#include "models/kernels/cpu/layer_norm.hpp"

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
  const std::string who = describe();
  detail::require_params(params, param_specs(), who);
  const Tensor x32 = detail::as_f32(x, who, "input");
  output_shape(x32.shape());
  const std::int64_t rows = x32.numel() / dim_;
  Tensor y = detail::new_f32(x32.shape());
  Tensor xhat = detail::new_f32(x32.shape());
  Tensor rstd = detail::new_f32({rows});
  cpu::layer_norm_forward(x32.data<float>(), params[0].data<float>(), params[1].data<float>(),
                          y.data<float>(), xhat.data<float>(), rstd.data<float>(), rows, dim_,
                          eps_);
  ForwardResult r{y, {}};
  if (ctx.keep_saved) r.saved = {xhat, rstd};
  return r;
}

Tensor LayerNorm::backward_input(const Context& /*ctx*/, ParamView params, Saved& saved,
                                 const Tensor& dy) const {
  const std::string who = describe();
  detail::require_params(params, param_specs(), who);
  detail::require_saved(saved, 2, who);
  const Tensor dy32 = detail::as_f32(dy, who, "output gradient");
  detail::require_f32_shape(dy32, saved[0].shape(), who, "output gradient");
  Tensor dx = detail::new_f32(dy32.shape());
  cpu::layer_norm_backward_input(dy32.data<float>(), saved[0].data<float>(), saved[1].data<float>(),
                                 params[0].data<float>(), dx.data<float>(), saved[1].numel(), dim_);
  return dx;
}

void LayerNorm::backward_weight_into(const Context& /*ctx*/, const Saved& saved, const Tensor& dy,
                                     const GradSink& sink) const {
  const std::string who = describe();
  detail::require_sink(sink, param_specs(), who);
  detail::require_saved(saved, 2, who);
  const Tensor dy32 = detail::as_f32(dy, who, "output gradient");
  detail::require_f32_shape(dy32, saved[0].shape(), who, "output gradient");
  cpu::layer_norm_backward_weight(dy32.data<float>(), saved[0].data<float>(),
                                  sink.grads[0].data<float>(), sink.grads[1].data<float>(),
                                  saved[1].numel(), dim_, sink.alpha, sink.beta);
}

}  // namespace tandem::models

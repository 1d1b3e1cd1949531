#include "models/layers/linear.hpp"

#include <stdexcept>

#include "models/detail/checks.hpp"
#include "models/detail/linear_ops.hpp"

namespace tandem::models {

Linear::Linear(std::int64_t in, std::int64_t out, cpu::Activation act, bool bias)
    : in_(in), out_(out), act_(act), bias_(bias) {
  if (in <= 0 || out <= 0) {
    throw std::invalid_argument("Linear: features must be positive, got " + std::to_string(in) +
                                " -> " + std::to_string(out));
  }
}

std::string Linear::describe() const {
  std::string s = "linear(" + std::to_string(in_) + "->" + std::to_string(out_);
  if (act_ != cpu::Activation::none) s += std::string(", ") + cpu::activation_name(act_);
  if (!bias_) s += ", no bias";
  return s + ")";
}

std::vector<ParamSpec> Linear::param_specs() const {
  std::vector<ParamSpec> specs;
  // He initialisation in front of a ReLU, as in Conv2d (see there).
  const bool he = act_ == cpu::Activation::relu;
  specs.push_back({"weight", {out_, in_}, Init::uniform_fan_in, he ? kHeScale : 1.0f, in_});
  if (bias_) {
    specs.push_back({"bias", {out_}, he ? Init::zeros : Init::uniform_fan_in, 1.0f, in_});
  }
  return specs;
}

Shape Linear::output_shape(const Shape& input) const {
  if (input.empty() || input.back() != in_) {
    throw std::invalid_argument(describe() + ": input shape " + shape_str(input) +
                                " does not end in in_features " + std::to_string(in_));
  }
  Shape out = input;
  out.back() = out_;
  return out;
}

LayerCost Linear::cost(const Shape& input) const {
  const double rows = static_cast<double>(shape_numel(output_shape(input)) / out_);
  const double mac = rows * static_cast<double>(in_) * static_cast<double>(out_);
  return {2 * mac, 2 * mac, 2 * mac};
}

ForwardResult Linear::forward(const Context& ctx, ParamView params, const Tensor& x) const {
  const Kernels& k = ctx.k();
  const std::string who = describe();
  detail::require_params(k, params, param_specs(), who);
  const Tensor x32 = detail::as_f32(k, x, who, "input");
  const Shape out_shape = output_shape(x32.shape());
  const std::int64_t rows = x32.numel() / in_;
  Tensor y = k.empty(out_shape);
  Tensor pre;
  if (act_ == cpu::Activation::gelu) pre = k.empty(out_shape);
  detail::linear_forward(k, detail::ptr(x32), rows, in_, detail::ptr(params[0]),
                         bias_ ? detail::ptr(params[1]) : nullptr, out_, act_, detail::ptr(y),
                         pre.defined() ? detail::ptr(pre) : nullptr);
  ForwardResult r{y, {}};
  if (ctx.keep_saved) {
    r.saved.push_back(x32);
    if (cpu::backward_reads_output(act_)) r.saved.push_back(y);
    if (act_ == cpu::Activation::gelu) r.saved.push_back(pre);
  }
  return r;
}

Tensor Linear::grad_pre_activation(const Kernels& k, const Saved& saved, const Tensor& dy,
                                   const GradSink* sink) const {
  const std::string who = describe();
  detail::require_saved(saved, act_ == cpu::Activation::none ? 1 : 2, who);
  const Tensor& x = saved[0];
  const Tensor dy32 = detail::as_f32(k, dy, who, "output gradient");
  detail::require_f32_shape(k, dy32, output_shape(x.shape()), who, "output gradient");
  const std::int64_t rows = x.numel() / in_;
  float* db = nullptr;
  if (sink != nullptr && bias_) db = detail::ptr(sink->grads[1]);
  if (act_ == cpu::Activation::none) {
    if (db != nullptr) k.column_sum(detail::ptr(dy32), rows, out_, sink->alpha, sink->beta, db);
    return dy32;
  }
  Tensor dz = k.empty(dy32.shape());
  k.act_backward_bias(detail::ptr(dy32), detail::ptr(saved[1]), detail::ptr(dz), rows, out_, act_,
                      db, sink != nullptr ? sink->alpha : 1.0f,
                      sink != nullptr ? sink->beta : 0.0f);
  return dz;
}

Tensor Linear::backward_input(const Context& ctx, ParamView params, Saved& saved,
                              const Tensor& dy) const {
  const Kernels& k = ctx.k();
  detail::require_params(k, params, param_specs(), describe());
  const Tensor dz = grad_pre_activation(k, saved, dy, nullptr);
  const Tensor& x = saved[0];
  Tensor dx = k.empty(x.shape());
  detail::linear_backward_input(k, detail::ptr(dz), x.numel() / in_, in_, detail::ptr(params[0]),
                                out_, detail::ptr(dx));
  return dx;
}

void Linear::backward_weight_into(const Context& ctx, const Saved& saved, const Tensor& dy,
                                  const GradSink& sink) const {
  const Kernels& k = ctx.k();
  detail::require_sink(k, sink, param_specs(), describe());
  const Tensor dz = grad_pre_activation(k, saved, dy, &sink);
  const Tensor& x = saved[0];
  detail::linear_backward_weight(k, detail::ptr(dz), detail::ptr(x), x.numel() / in_, in_, out_,
                                 sink.alpha, sink.beta, detail::ptr(sink.grads[0]));
}

Tensor Linear::backward_into(const Context& ctx, ParamView params, Saved& saved, const Tensor& dy,
                             bool need_dx, const GradSink& sink) const {
  const Kernels& k = ctx.k();
  const std::string who = describe();
  detail::require_params(k, params, param_specs(), who);
  detail::require_sink(k, sink, param_specs(), who);
  // The bias gradient may be written first (backward never reads the bias); the weight
  // gradient only after dx, since the sink may alias the weight (fused SGD).
  const Tensor dz = grad_pre_activation(k, saved, dy, &sink);
  const Tensor& x = saved[0];
  const std::int64_t rows = x.numel() / in_;
  Tensor dx;
  if (need_dx) {
    dx = k.empty(x.shape());
    detail::linear_backward_input(k, detail::ptr(dz), rows, in_, detail::ptr(params[0]), out_,
                                  detail::ptr(dx));
  }
  detail::linear_backward_weight(k, detail::ptr(dz), detail::ptr(x), rows, in_, out_, sink.alpha,
                                 sink.beta, detail::ptr(sink.grads[0]));
  return dx;
}

}  // namespace tandem::models

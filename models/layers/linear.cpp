#include "models/layers/linear.hpp"

#include <stdexcept>

#include "models/detail/checks.hpp"
#include "models/detail/linear_ops.hpp"

namespace tandem::models {
namespace {

// The three products, at bf16 precision where the kernels ask for it (Kernels::bf16_products):
// the input and the pre-activation gradient rounded to bf16 once each, by the caller, and read
// by every product that needs them; the weight through its cached copy; f32 accumulation and
// outputs. Else all f32.

const BFloat16* bf16_ptr(const Tensor& t) {
  return static_cast<const BFloat16*>(t.raw_data());
}

// `t` in the dtype the products read: bf16 at bf16 precision (rounded once), else itself.
Tensor operand(const Kernels& k, const Tensor& t) {
  if (!k.bf16_products() || t.dtype() == DType::bf16) return t;
  Tensor out = k.empty(t.shape(), DType::bf16);
  k.to_bf16(detail::ptr(t), static_cast<BFloat16*>(out.raw_data()), t.numel());
  return out;
}

void forward_product(const Kernels& k, const Tensor& x, std::int64_t rows, std::int64_t in,
                     const Tensor& w, const float* b, std::int64_t out, cpu::Activation act,
                     Tensor& y, Tensor& pre) {
  float* pre_ptr = pre.defined() ? detail::ptr(pre) : nullptr;
  if (k.bf16_products()) {
    const Tensor w16 = k.bf16_copy(w);
    detail::linear_forward_bf16(k, bf16_ptr(x), rows, in, bf16_ptr(w16), b, out, act,
                                detail::ptr(y), pre_ptr);
    return;
  }
  detail::linear_forward(k, detail::ptr(x), rows, in, detail::ptr(w), b, out, act, detail::ptr(y),
                         pre_ptr);
}

void input_gradient(const Kernels& k, const Tensor& dz, std::int64_t rows, std::int64_t in,
                    const Tensor& w, std::int64_t out, Tensor& dx) {
  if (k.bf16_products()) {
    const Tensor w16 = k.bf16_copy(w);
    detail::linear_backward_input_bf16(k, bf16_ptr(dz), rows, in, bf16_ptr(w16), out,
                                       detail::ptr(dx));
    return;
  }
  detail::linear_backward_input(k, detail::ptr(dz), rows, in, detail::ptr(w), out, detail::ptr(dx));
}

void weight_gradient(const Kernels& k, const Tensor& dz, const Tensor& x, std::int64_t rows,
                     std::int64_t in, std::int64_t out, const GradSink& sink) {
  if (k.bf16_products()) {
    const Tensor x16 = operand(k, x);
    detail::linear_backward_weight_bf16(k, bf16_ptr(dz), bf16_ptr(x16), rows, in, out, sink.alpha,
                                        sink.beta, detail::ptr(sink.grads[0]));
    // Where the sink is the weight itself (a fused update), its new values are written in
    // place, so a bf16 copy of the old ones must not outlive them.
    k.drop_bf16_copy(sink.grads[0]);
    return;
  }
  detail::linear_backward_weight(k, detail::ptr(dz), detail::ptr(x), rows, in, out, sink.alpha,
                                 sink.beta, detail::ptr(sink.grads[0]));
}

}  // namespace

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
  // At bf16 the rounded input is what backward reads too: kept instead of the f32 one.
  const Tensor xk = operand(k, x32);
  forward_product(k, xk, rows, in_, params[0], bias_ ? detail::ptr(params[1]) : nullptr, out_, act_,
                  y, pre);
  ForwardResult r{y, {}};
  if (ctx.keep_saved) {
    r.saved.push_back(xk);
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
  Tensor dy32 = detail::as_f32(k, dy, who, "output gradient");
  detail::require_f32_shape(k, dy32, output_shape(x.shape()), who, "output gradient");
  if (k.bf16_products()) {
    // The gradient arrives in bf16, like the activations the forward's product rounds: so the
    // bias gradient reads the values the products do, and a pipeline whose stages send bf16
    // (PipelineSpec::wire_dtype) rounds nothing that one device does not.
    Tensor rounded = k.empty(dy32.shape());
    k.round_to_bf16(detail::ptr(dy32), detail::ptr(rounded), dy32.numel());
    dy32 = rounded;
  }
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
  const Tensor dz = operand(k, grad_pre_activation(k, saved, dy, nullptr));
  const Tensor& x = saved[0];
  Tensor dx = k.empty(x.shape());
  input_gradient(k, dz, x.numel() / in_, in_, params[0], out_, dx);
  return dx;
}

void Linear::backward_weight_into(const Context& ctx, const Saved& saved, const Tensor& dy,
                                  const GradSink& sink) const {
  const Kernels& k = ctx.k();
  detail::require_sink(k, sink, param_specs(), describe());
  const Tensor dz = operand(k, grad_pre_activation(k, saved, dy, &sink));
  const Tensor& x = saved[0];
  weight_gradient(k, dz, x, x.numel() / in_, in_, out_, sink);
}

Tensor Linear::backward_into(const Context& ctx, ParamView params, Saved& saved, const Tensor& dy,
                             bool need_dx, const GradSink& sink) const {
  const Kernels& k = ctx.k();
  const std::string who = describe();
  detail::require_params(k, params, param_specs(), who);
  detail::require_sink(k, sink, param_specs(), who);
  // The bias gradient may be written first (backward never reads the bias); the weight
  // gradient only after dx, since the sink may alias the weight (fused SGD).
  const Tensor dz = operand(k, grad_pre_activation(k, saved, dy, &sink));
  const Tensor& x = saved[0];
  const std::int64_t rows = x.numel() / in_;
  Tensor dx;
  if (need_dx) {
    dx = k.empty(x.shape());
    input_gradient(k, dz, rows, in_, params[0], out_, dx);
  }
  weight_gradient(k, dz, x, rows, in_, out_, sink);
  return dx;
}

}  // namespace tandem::models

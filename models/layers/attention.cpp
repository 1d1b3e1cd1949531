#include "models/layers/attention.hpp"

#include <stdexcept>

#include "models/detail/checks.hpp"
#include "models/detail/linear_ops.hpp"
#include "models/kernels/cpu/attention.hpp"
#include "models/kernels/cpu/reduce.hpp"

namespace tandem::models {
namespace {

constexpr std::size_t kForwardSaved = 4;  // x, qkv, probs, att

}  // namespace

CausalSelfAttention::CausalSelfAttention(std::int64_t d_model, std::int64_t heads,
                                         float proj_init_scale)
    : d_(d_model), heads_(heads), proj_scale_(proj_init_scale) {
  if (d_model <= 0 || heads <= 0 || d_model % heads != 0) {
    throw std::invalid_argument("CausalSelfAttention: d_model " + std::to_string(d_model) +
                                " must be a positive multiple of heads " + std::to_string(heads));
  }
}

std::string CausalSelfAttention::describe() const {
  return "attention(d=" + std::to_string(d_) + ", heads=" + std::to_string(heads_) + ")";
}

std::vector<ParamSpec> CausalSelfAttention::param_specs() const {
  return {{"qkv.weight", {3 * d_, d_}, Init::normal, 0.02f, d_},
          {"qkv.bias", {3 * d_}, Init::zeros, 1.0f, 1},
          {"proj.weight", {d_, d_}, Init::normal, 0.02f * proj_scale_, d_},
          {"proj.bias", {d_}, Init::zeros, 1.0f, 1}};
}

Shape CausalSelfAttention::output_shape(const Shape& input) const {
  if (input.size() != 3 || input[2] != d_) {
    throw std::invalid_argument(describe() + ": input shape " + shape_str(input) +
                                " is not [batch, seq, " + std::to_string(d_) + "]");
  }
  return input;
}

LayerCost CausalSelfAttention::cost(const Shape& input) const {
  output_shape(input);
  const double n = static_cast<double>(input[0] * input[1]);
  const double d = static_cast<double>(d_);
  const double t = static_cast<double>(input[1]);
  // Projections: 4 d^2 multiply-adds per token. Scores and weighted sum: only the causal half,
  // t (t + 1) / 2 pairs of d-long dot products, twice.
  const double proj = 2 * n * 4 * d * d;
  const double core = 2 * 2 * static_cast<double>(input[0]) * (t * (t + 1) / 2) * d;
  return {proj + core, proj + 2 * core, proj};
}

ForwardResult CausalSelfAttention::forward(const Context& ctx, ParamView params,
                                           const Tensor& x) const {
  const std::string who = describe();
  detail::require_params(params, param_specs(), who);
  const Tensor x32 = detail::as_f32(x, who, "input");
  const Shape shape = output_shape(x32.shape());
  const std::int64_t b = shape[0];
  const std::int64_t t = shape[1];
  const std::int64_t n = b * t;
  Tensor qkv = detail::new_f32({b, t, 3 * d_});
  Tensor probs = detail::new_f32({b, heads_, t, t});
  Tensor att = detail::new_f32(shape);
  Tensor y = detail::new_f32(shape);
  detail::linear_forward(x32.data<float>(), n, d_, params[0].data<float>(), params[1].data<float>(),
                         3 * d_, cpu::Activation::none, qkv.data<float>(), nullptr);
  cpu::causal_attention_forward(qkv.data<float>(), att.data<float>(), probs.data<float>(), b, t,
                                heads_, d_ / heads_);
  detail::linear_forward(att.data<float>(), n, d_, params[2].data<float>(), params[3].data<float>(),
                         d_, cpu::Activation::none, y.data<float>(), nullptr);
  ForwardResult r{y, {}};
  if (ctx.keep_saved) r.saved = {x32, qkv, probs, att};
  return r;
}

Tensor CausalSelfAttention::backward_input(const Context& /*ctx*/, ParamView params, Saved& saved,
                                           const Tensor& dy) const {
  const std::string who = describe();
  detail::require_params(params, param_specs(), who);
  detail::require_saved(saved, kForwardSaved, who);
  saved.resize(kForwardSaved);  // drop gradients of an earlier backward_input
  const Tensor& x = saved[0];
  const Tensor& qkv = saved[1];
  const Tensor dy32 = detail::as_f32(dy, who, "output gradient");
  detail::require_f32_shape(dy32, x.shape(), who, "output gradient");
  const std::int64_t b = x.dim(0);
  const std::int64_t t = x.dim(1);
  const std::int64_t n = b * t;
  Tensor datt = detail::new_f32(x.shape());
  detail::linear_backward_input(dy32.data<float>(), n, d_, params[2].data<float>(), d_,
                                datt.data<float>());
  Tensor dqkv = detail::new_f32(qkv.shape());
  cpu::causal_attention_backward(qkv.data<float>(), saved[2].data<float>(), datt.data<float>(),
                                 dqkv.data<float>(), b, t, heads_, d_ / heads_);
  Tensor dx = detail::new_f32(x.shape());
  detail::linear_backward_input(dqkv.data<float>(), n, d_, params[0].data<float>(), 3 * d_,
                                dx.data<float>());
  saved.push_back(dqkv);
  return dx;
}

void CausalSelfAttention::backward_weight_into(const Context& /*ctx*/, const Saved& saved,
                                               const Tensor& dy, const GradSink& sink) const {
  const std::string who = describe();
  detail::require_sink(sink, param_specs(), who);
  if (saved.size() != kForwardSaved + 1) {
    throw std::invalid_argument(who + ": backward_weight needs backward_input to run first");
  }
  const Tensor& x = saved[0];
  const Tensor& att = saved[3];
  const Tensor& dqkv = saved[4];
  const Tensor dy32 = detail::as_f32(dy, who, "output gradient");
  detail::require_f32_shape(dy32, x.shape(), who, "output gradient");
  const std::int64_t n = x.dim(0) * x.dim(1);
  const float a = sink.alpha;
  const float bt = sink.beta;
  detail::linear_backward_weight(dqkv.data<float>(), x.data<float>(), n, d_, 3 * d_, a, bt,
                                 sink.grads[0].data<float>());
  cpu::column_sum(dqkv.data<float>(), n, 3 * d_, a, bt, sink.grads[1].data<float>());
  detail::linear_backward_weight(dy32.data<float>(), att.data<float>(), n, d_, d_, a, bt,
                                 sink.grads[2].data<float>());
  cpu::column_sum(dy32.data<float>(), n, d_, a, bt, sink.grads[3].data<float>());
}

}  // namespace tandem::models

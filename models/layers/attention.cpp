#include "models/layers/attention.hpp"

#include <stdexcept>

#include "models/detail/attention_ops.hpp"
#include "models/detail/checks.hpp"
#include "models/detail/linear_ops.hpp"

namespace tandem::models {
namespace {

// x, qkv, probs [b, heads, t, t] (or, with fused attention, each row's log-sum-exp [b, heads,
// t]), att
constexpr std::size_t kForwardSaved = 4;

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
  const Kernels& k = ctx.k();
  const std::string who = describe();
  detail::require_params(k, params, param_specs(), who);
  const Tensor x32 = detail::as_f32(k, x, who, "input");
  const Shape shape = output_shape(x32.shape());
  const std::int64_t b = shape[0];
  const std::int64_t t = shape[1];
  const std::int64_t n = b * t;
  using detail::ptr;
  Tensor qkv = k.empty({b, t, 3 * d_});
  Tensor att = k.empty(shape);
  Tensor y = k.empty(shape);
  detail::linear_forward(k, ptr(x32), n, d_, ptr(params[0]), ptr(params[1]), 3 * d_,
                         Activation::none, ptr(qkv), nullptr);
  Tensor probs = detail::causal_attention_forward(k, ptr(qkv), ptr(att), b, t, heads_, d_ / heads_);
  detail::linear_forward(k, ptr(att), n, d_, ptr(params[2]), ptr(params[3]), d_, Activation::none,
                         ptr(y), nullptr);
  ForwardResult r{y, {}};
  if (ctx.keep_saved) r.saved = {x32, qkv, probs, att};
  return r;
}

Tensor CausalSelfAttention::backward_input(const Context& ctx, ParamView params, Saved& saved,
                                           const Tensor& dy) const {
  const Kernels& k = ctx.k();
  const std::string who = describe();
  detail::require_params(k, params, param_specs(), who);
  detail::require_saved(saved, kForwardSaved, who);
  saved.resize(kForwardSaved);  // drop gradients of an earlier backward_input
  const Tensor& x = saved[0];
  const Tensor& qkv = saved[1];
  const Tensor dy32 = detail::as_f32(k, dy, who, "output gradient");
  detail::require_f32_shape(k, dy32, x.shape(), who, "output gradient");
  const std::int64_t b = x.dim(0);
  const std::int64_t t = x.dim(1);
  const std::int64_t n = b * t;
  using detail::ptr;
  Tensor datt = k.empty(x.shape());
  detail::linear_backward_input(k, ptr(dy32), n, d_, ptr(params[2]), d_, ptr(datt));
  Tensor dqkv = k.empty(qkv.shape());
  detail::causal_attention_backward(k, ptr(qkv), ptr(saved[3]), saved[2], ptr(datt), ptr(dqkv), b,
                                    t, heads_, d_ / heads_);
  Tensor dx = k.empty(x.shape());
  detail::linear_backward_input(k, ptr(dqkv), n, d_, ptr(params[0]), 3 * d_, ptr(dx));
  saved.push_back(dqkv);
  return dx;
}

void CausalSelfAttention::backward_weight_into(const Context& ctx, const Saved& saved,
                                               const Tensor& dy, const GradSink& sink) const {
  const Kernels& k = ctx.k();
  const std::string who = describe();
  detail::require_sink(k, sink, param_specs(), who);
  if (saved.size() != kForwardSaved + 1) {
    throw std::invalid_argument(who + ": backward_weight needs backward_input to run first");
  }
  const Tensor& x = saved[0];
  const Tensor& att = saved[3];
  const Tensor& dqkv = saved[4];
  const Tensor dy32 = detail::as_f32(k, dy, who, "output gradient");
  detail::require_f32_shape(k, dy32, x.shape(), who, "output gradient");
  const std::int64_t n = x.dim(0) * x.dim(1);
  const float a = sink.alpha;
  const float bt = sink.beta;
  using detail::ptr;
  detail::linear_backward_weight(k, ptr(dqkv), ptr(x), n, d_, 3 * d_, a, bt, ptr(sink.grads[0]));
  k.column_sum(ptr(dqkv), n, 3 * d_, a, bt, ptr(sink.grads[1]));
  detail::linear_backward_weight(k, ptr(dy32), ptr(att), n, d_, d_, a, bt, ptr(sink.grads[2]));
  k.column_sum(ptr(dy32), n, d_, a, bt, ptr(sink.grads[3]));
}

}  // namespace tandem::models

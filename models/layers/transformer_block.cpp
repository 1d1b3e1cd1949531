#include "models/layers/transformer_block.hpp"

#include <cmath>
#include <stdexcept>

#include "models/detail/attention_ops.hpp"
#include "models/detail/checks.hpp"
#include "models/detail/linear_ops.hpp"
#include "models/detail/meta.hpp"
#include "models/layers/dropout.hpp"

namespace tandem::models {
namespace {

// Parameter indices.
enum : std::size_t {
  kLn1W,
  kLn1B,
  kQkvW,
  kQkvB,
  kProjW,
  kProjB,
  kLn2W,
  kLn2B,
  kFcW,
  kFcB,
  kOutW,
  kOutB
};
// Saved by forward.
enum : std::size_t {
  kXhat1,
  kRstd1,
  kH1,
  kQkv,
  kProbs,
  kAtt,
  kXhat2,
  kRstd2,
  kH2,
  kPre,
  kF,
  kDropKey,
  kForwardSaved
};
// Appended by backward_input: gradients of the inner maps' outputs.
enum : std::size_t { kDm = kForwardSaved, kDpre, kDh2, kDa, kDqkv, kDh1, kAllSaved };

constexpr float kLnEps = 1e-5f;

}  // namespace

TransformerBlock::TransformerBlock(std::int64_t d_model, std::int64_t heads, std::int64_t d_ff,
                                   float dropout, std::uint64_t salt, std::int64_t n_layers)
    : d_(d_model),
      heads_(heads),
      d_ff_(d_ff),
      dropout_(dropout),
      salt_(salt),
      proj_scale_(1.0f /
                  std::sqrt(2.0f * static_cast<float>(std::max<std::int64_t>(1, n_layers)))) {
  if (d_model <= 0 || heads <= 0 || d_model % heads != 0 || d_ff <= 0) {
    throw std::invalid_argument("TransformerBlock: d_model " + std::to_string(d_model) +
                                " must be a positive multiple of heads " + std::to_string(heads) +
                                " and d_ff " + std::to_string(d_ff) + " positive");
  }
  if (!(dropout >= 0.0f && dropout < 1.0f)) {
    throw std::invalid_argument("TransformerBlock: dropout must be in [0, 1), got " +
                                std::to_string(dropout));
  }
}

std::string TransformerBlock::describe() const {
  return "transformer_block(d=" + std::to_string(d_) + ", heads=" + std::to_string(heads_) +
         ", d_ff=" + std::to_string(d_ff_) + ", dropout=" + std::to_string(dropout_) + ")";
}

std::vector<ParamSpec> TransformerBlock::param_specs() const {
  const float out_std = 0.02f * proj_scale_;
  return {{"ln1.weight", {d_}, Init::ones, 1.0f, 1},
          {"ln1.bias", {d_}, Init::zeros, 1.0f, 1},
          {"attn.qkv.weight", {3 * d_, d_}, Init::normal, 0.02f, d_},
          {"attn.qkv.bias", {3 * d_}, Init::zeros, 1.0f, 1},
          {"attn.proj.weight", {d_, d_}, Init::normal, out_std, d_},
          {"attn.proj.bias", {d_}, Init::zeros, 1.0f, 1},
          {"ln2.weight", {d_}, Init::ones, 1.0f, 1},
          {"ln2.bias", {d_}, Init::zeros, 1.0f, 1},
          {"mlp.fc.weight", {d_ff_, d_}, Init::normal, 0.02f, d_},
          {"mlp.fc.bias", {d_ff_}, Init::zeros, 1.0f, 1},
          {"mlp.proj.weight", {d_, d_ff_}, Init::normal, out_std, d_ff_},
          {"mlp.proj.bias", {d_}, Init::zeros, 1.0f, 1}};
}

Shape TransformerBlock::output_shape(const Shape& input) const {
  if (input.size() != 3 || input[2] != d_) {
    throw std::invalid_argument(describe() + ": input shape " + shape_str(input) +
                                " is not [batch, seq, " + std::to_string(d_) + "]");
  }
  return input;
}

LayerCost TransformerBlock::cost(const Shape& input) const {
  output_shape(input);
  const double n = static_cast<double>(input[0] * input[1]);
  const double d = static_cast<double>(d_);
  const double t = static_cast<double>(input[1]);
  const double maps = 2 * n * (4 * d * d + 2 * d * static_cast<double>(d_ff_));
  const double core = 2 * 2 * static_cast<double>(input[0]) * (t * (t + 1) / 2) * d;
  return {maps + core, maps + 2 * core, maps};
}

ForwardResult TransformerBlock::forward(const Context& ctx, ParamView p, const Tensor& x) const {
  const Kernels& k = ctx.k();
  const std::string who = describe();
  detail::require_params(k, p, param_specs(), who);
  const Tensor x32 = detail::as_f32(k, x, who, "input");
  const Shape shape = output_shape(x32.shape());
  const std::int64_t b = shape[0];
  const std::int64_t t = shape[1];
  const std::int64_t n = b * t;
  const bool drop = ctx.training && dropout_ > 0.0f;
  auto f = [](Tensor& v) { return detail::ptr(v); };
  auto pf = [&](std::size_t i) { return detail::ptr(p[i]); };

  Tensor xhat1 = k.empty(shape), rstd1 = k.empty({n}), h1 = k.empty(shape);
  k.layer_norm_forward(detail::ptr(x32), pf(kLn1W), pf(kLn1B), f(h1), f(xhat1), f(rstd1), n, d_,
                       kLnEps);
  Tensor qkv = k.empty({b, t, 3 * d_});
  detail::linear_map_forward(k, f(h1), n, d_, p[kQkvW], pf(kQkvB), 3 * d_, Activation::none, f(qkv),
                             nullptr);
  Tensor att = k.empty(shape);
  // The probabilities, or with fused attention each row's log-sum-exp.
  Tensor probs = detail::causal_attention_forward(k, f(qkv), f(att), b, t, heads_, d_ / heads_);
  Tensor a = k.empty(shape);
  detail::linear_map_forward(k, f(att), n, d_, p[kProjW], pf(kProjB), d_, Activation::none, f(a),
                             nullptr);
  const detail::DropoutKey key{Dropout::key(ctx.seed, salt_), ctx.sample_begin};
  const std::int64_t per_sample = t * d_;
  if (drop) k.dropout_apply(f(a), f(a), b, per_sample, dropout_, key.key, key.first_sample);
  Tensor x1 = k.empty(shape);
  k.add(detail::ptr(x32), f(a), f(x1), n * d_);

  Tensor xhat2 = k.empty(shape), rstd2 = k.empty({n}), h2 = k.empty(shape);
  k.layer_norm_forward(f(x1), pf(kLn2W), pf(kLn2B), f(h2), f(xhat2), f(rstd2), n, d_, kLnEps);
  Tensor pre = k.empty({b, t, d_ff_});
  Tensor hidden = k.empty({b, t, d_ff_});
  detail::linear_map_forward(k, f(h2), n, d_, p[kFcW], pf(kFcB), d_ff_, Activation::gelu, f(hidden),
                             f(pre));
  Tensor m = k.empty(shape);
  detail::linear_map_forward(k, f(hidden), n, d_ff_, p[kOutW], pf(kOutB), d_, Activation::none,
                             f(m), nullptr);
  const std::uint64_t key2 = key.key ^ 0x9e3779b97f4a7c15ull;  // second dropout of the block
  if (drop) k.dropout_apply(f(m), f(m), b, per_sample, dropout_, key2, key.first_sample);
  Tensor y = x1;  // y = x1 + m, in place: x1 itself is not needed by backward
  k.add(f(x1), f(m), f(y), n * d_);

  ForwardResult r{y, {}};
  if (ctx.keep_saved) {
    r.saved = {xhat1, rstd1, h1, qkv, probs,  att,
               xhat2, rstd2, h2, pre, hidden, drop ? detail::encode_dropout(key) : Tensor()};
  }
  return r;
}

SavedLayout TransformerBlock::saved_layout(std::size_t k) const {
  return k == kDropKey ? SavedLayout::dropout_record : SavedLayout::rows;
}

Tensor TransformerBlock::backward_input(const Context& ctx, ParamView p, Saved& s,
                                        const Tensor& dy) const {
  const Kernels& k = ctx.k();
  const std::string who = describe();
  detail::require_params(k, p, param_specs(), who);
  detail::require_saved(s, kForwardSaved, who);
  s.resize(kForwardSaved);  // drop gradients of an earlier backward_input
  const Shape shape = s[kXhat1].shape();
  Tensor dy32 = detail::as_f32(k, dy, who, "output gradient");
  detail::require_f32_shape(k, dy32, shape, who, "output gradient");
  const std::int64_t b = shape[0];
  const std::int64_t t = shape[1];
  const std::int64_t n = b * t;
  auto f = [](Tensor& v) { return detail::ptr(v); };
  auto pf = [&](std::size_t i) { return detail::ptr(p[i]); };
  const bool drop = s[kDropKey].defined();
  detail::DropoutKey key;
  if (drop) key = detail::decode_dropout(s[kDropKey]);
  const std::int64_t per_sample = t * d_;

  // MLP branch: m = dropout(W2 gelu(W1 h2)).
  Tensor dm = dy32;
  if (drop) {
    dm = k.empty(shape);
    k.dropout_apply(f(dy32), f(dm), b, per_sample, dropout_, key.key ^ 0x9e3779b97f4a7c15ull,
                    key.first_sample);
  }
  Tensor dpre = k.empty({b, t, d_ff_});
  detail::linear_map_backward_input(k, f(dm), n, d_ff_, p[kOutW], d_, f(dpre));
  k.act_backward(f(dpre), f(s[kPre]), f(dpre), n * d_ff_, Activation::gelu);
  Tensor dh2 = k.empty(shape);
  detail::linear_map_backward_input(k, f(dpre), n, d_, p[kFcW], d_ff_, f(dh2));
  Tensor dx1 = k.empty(shape);
  k.layer_norm_backward_input(f(dh2), f(s[kXhat2]), f(s[kRstd2]), pf(kLn2W), f(dx1), n, d_);
  k.add(f(dx1), f(dy32), f(dx1), n * d_);

  // Attention branch: a = dropout(Wp attention(Wqkv h1)).
  Tensor da = dx1;
  if (drop) {
    da = k.empty(shape);
    k.dropout_apply(f(dx1), f(da), b, per_sample, dropout_, key.key, key.first_sample);
  }
  Tensor datt = k.empty(shape);
  detail::linear_map_backward_input(k, f(da), n, d_, p[kProjW], d_, f(datt));
  Tensor dqkv = k.empty({b, t, 3 * d_});
  detail::causal_attention_backward(k, f(s[kQkv]), f(s[kAtt]), s[kProbs], f(datt), f(dqkv), b, t,
                                    heads_, d_ / heads_);
  Tensor dh1 = datt;  // datt is dead: reuse its memory
  detail::linear_map_backward_input(k, f(dqkv), n, d_, p[kQkvW], 3 * d_, f(dh1));
  Tensor dx = k.empty(shape);
  k.layer_norm_backward_input(f(dh1), f(s[kXhat1]), f(s[kRstd1]), pf(kLn1W), f(dx), n, d_);
  k.add(f(dx), f(dx1), f(dx), n * d_);

  s.push_back(dm);
  s.push_back(dpre);
  s.push_back(dh2);
  s.push_back(da);
  s.push_back(dqkv);
  s.push_back(dh1);
  return dx;
}

void TransformerBlock::backward_weight_into(const Context& ctx, const Saved& s,
                                            const Tensor& /*dy*/, const GradSink& sink) const {
  const Kernels& k = ctx.k();
  const std::string who = describe();
  detail::require_sink(k, sink, param_specs(), who);
  if (s.size() != kAllSaved) {
    throw std::invalid_argument(who + ": backward_weight needs backward_input to run first");
  }
  const std::int64_t n = s[kRstd1].numel();
  auto f = [&](std::size_t i) { return detail::ptr(s[i]); };
  auto g = [&](std::size_t i) { return detail::ptr(sink.grads[i]); };
  auto w = [&](std::size_t i) -> Tensor& { return sink.grads[i]; };
  const float a = sink.alpha;
  const float bt = sink.beta;
  detail::linear_map_backward_weight(k, f(kDm), f(kF), n, d_ff_, d_, a, bt, w(kOutW));
  k.column_sum(f(kDm), n, d_, a, bt, g(kOutB));
  detail::linear_map_backward_weight(k, f(kDpre), f(kH2), n, d_, d_ff_, a, bt, w(kFcW));
  k.column_sum(f(kDpre), n, d_ff_, a, bt, g(kFcB));
  k.layer_norm_backward_weight(f(kDh2), f(kXhat2), g(kLn2W), g(kLn2B), n, d_, a, bt);
  detail::linear_map_backward_weight(k, f(kDa), f(kAtt), n, d_, d_, a, bt, w(kProjW));
  k.column_sum(f(kDa), n, d_, a, bt, g(kProjB));
  detail::linear_map_backward_weight(k, f(kDqkv), f(kH1), n, d_, 3 * d_, a, bt, w(kQkvW));
  k.column_sum(f(kDqkv), n, 3 * d_, a, bt, g(kQkvB));
  k.layer_norm_backward_weight(f(kDh1), f(kXhat1), g(kLn1W), g(kLn1B), n, d_, a, bt);
}

}  // namespace tandem::models

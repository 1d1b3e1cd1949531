#include "models/layers/seq_attention.hpp"

#include <stdexcept>

#include "models/detail/checks.hpp"

namespace tandem::models {
namespace {

using detail::ptr;

// q, e, u = q W [b, Td, He], probabilities [b, Td, Te]; B appends dU.
constexpr std::size_t kForwardSaved = 4;

}  // namespace

SeqAttention::SeqAttention(std::int64_t query_width, std::int64_t key_width)
    : MergeLayer(2), h_(query_width), he_(key_width) {
  if (query_width <= 0 || key_width <= 0) {
    throw std::invalid_argument("seq_attention: widths " + std::to_string(query_width) + " and " +
                                std::to_string(key_width) + " must be positive");
  }
}

std::string SeqAttention::describe() const {
  return "seq_attention(q=" + std::to_string(h_) + ", e=" + std::to_string(he_) + ")";
}

std::vector<ParamSpec> SeqAttention::param_specs() const {
  return {{"weight", {h_, he_}, Init::uniform_fan_in, 1.0f, he_}};
}

Shape SeqAttention::output_shape_n(std::span<const Shape> inputs) const {
  require_inputs(inputs);
  const Shape& q = inputs[0];
  const Shape& e = inputs[1];
  if (q.size() != 3 || q[1] < 1 || q[2] != h_ || e.size() != 3 || e[1] < 1 || e[2] != he_) {
    throw std::invalid_argument(describe() + ": inputs " + shape_str(q) + " and " + shape_str(e) +
                                " are not [batch, Td, " + std::to_string(h_) +
                                "] and [batch, Te, " + std::to_string(he_) + "]");
  }
  return {q[0], q[1], h_ + he_};
}

ForwardResult SeqAttention::forward_n(const Context& ctx, ParamView params,
                                      std::span<const Tensor> xs) const {
  const Kernels& k = ctx.k();
  const std::string who = describe();
  detail::require_params(k, params, param_specs(), who);
  const std::vector<Tensor> in = checked_inputs(k, xs);
  const Tensor& q = in[0];
  const Tensor& e = in[1];
  const std::int64_t b = q.dim(0);
  const std::int64_t td = q.dim(1);
  const std::int64_t te = e.dim(1);
  const std::int64_t w = h_ + he_;
  Tensor u = k.empty({b, td, he_});
  k.gemm(false, false, b * td, he_, h_, 1.0f, ptr(q), h_, ptr(params[0]), he_, 0.0f, ptr(u), he_);
  Tensor probs = k.empty({b, td, te});
  for (std::int64_t s = 0; s < b; ++s) {
    k.gemm(false, true, td, te, he_, 1.0f, ptr(u) + s * td * he_, he_, ptr(e) + s * te * he_, he_,
           0.0f, ptr(probs) + s * td * te, te);
  }
  k.softmax_forward(ptr(probs), ptr(probs), b * td, te);
  ForwardResult r;
  r.y = k.empty({b, td, w});
  k.copy_2d(ptr(q), h_, ptr(r.y), w, b * td, h_);
  for (std::int64_t s = 0; s < b; ++s) {
    k.gemm(false, false, td, he_, te, 1.0f, ptr(probs) + s * td * te, te, ptr(e) + s * te * he_,
           he_, 0.0f, ptr(r.y) + s * td * w + h_, w);
  }
  if (ctx.keep_saved) r.saved = {q, e, u, probs};
  return r;
}

std::vector<Tensor> SeqAttention::backward_input_n(const Context& ctx, ParamView params,
                                                   Saved& saved, const Tensor& dy,
                                                   const std::vector<bool>& want) const {
  const Kernels& k = ctx.k();
  const std::string who = describe();
  detail::require_params(k, params, param_specs(), who);
  detail::require_saved(saved, kForwardSaved, who);
  saved.resize(kForwardSaved);  // drop dU of an earlier backward_input_n
  const Tensor& q = saved[0];
  const Tensor& e = saved[1];
  const Tensor& u = saved[2];
  const Tensor& probs = saved[3];
  const std::int64_t b = q.dim(0);
  const std::int64_t td = q.dim(1);
  const std::int64_t te = e.dim(1);
  const std::int64_t w = h_ + he_;
  const Tensor dy32 = detail::as_f32(k, dy, who, "output gradient");
  detail::require_f32_shape(k, dy32, {b, td, w}, who, "output gradient");
  const float* dctx = ptr(dy32) + h_;  // the context's columns, leading dimension w
  // Through context = p e, then the softmax: dS = softmax'(dctx e^T).
  Tensor ds = k.empty({b, td, te});
  for (std::int64_t s = 0; s < b; ++s) {
    k.gemm(false, true, td, te, he_, 1.0f, dctx + s * td * w, w, ptr(e) + s * te * he_, he_, 0.0f,
           ptr(ds) + s * td * te, te);
  }
  k.softmax_backward(ptr(probs), ptr(ds), ptr(ds), b * td, te);
  // S = u e^T: dU = dS e (always: W's gradient needs it).
  Tensor du = k.empty({b, td, he_});
  for (std::int64_t s = 0; s < b; ++s) {
    k.gemm(false, false, td, he_, te, 1.0f, ptr(ds) + s * td * te, te, ptr(e) + s * te * he_, he_,
           0.0f, ptr(du) + s * td * he_, he_);
  }
  std::vector<Tensor> dx(2);
  if (want.size() > 0 && want[0]) {
    // q reaches the output directly and through u = q W.
    dx[0] = k.empty(q.shape());
    k.copy_2d(ptr(dy32), w, ptr(dx[0]), h_, b * td, h_);
    k.gemm(false, true, b * td, h_, he_, 1.0f, ptr(du), he_, ptr(params[0]), he_, 1.0f, ptr(dx[0]),
           h_);
  }
  if (want.size() > 1 && want[1]) {
    // e is read twice: de = p^T dctx + dS^T u.
    dx[1] = k.empty(e.shape());
    for (std::int64_t s = 0; s < b; ++s) {
      float* de = ptr(dx[1]) + s * te * he_;
      k.gemm(true, false, te, he_, td, 1.0f, ptr(probs) + s * td * te, te, dctx + s * td * w, w,
             0.0f, de, he_);
      k.gemm(true, false, te, he_, td, 1.0f, ptr(ds) + s * td * te, te, ptr(u) + s * td * he_, he_,
             1.0f, de, he_);
    }
  }
  saved.push_back(du);
  return dx;
}

void SeqAttention::backward_weight_into(const Context& ctx, const Saved& saved,
                                        const Tensor& /*dy*/, const GradSink& sink) const {
  const Kernels& k = ctx.k();
  const std::string who = describe();
  detail::require_sink(k, sink, param_specs(), who);
  if (saved.size() != kForwardSaved + 1) {
    throw std::invalid_argument(who + ": backward_weight needs backward_input_n to run first");
  }
  const Tensor& q = saved[0];
  const Tensor& du = saved[kForwardSaved];
  const std::int64_t rows = q.dim(0) * q.dim(1);
  k.gemm(true, false, h_, he_, rows, sink.alpha, ptr(q), h_, ptr(du), he_, sink.beta,
         ptr(sink.grads[0]), he_);
}

}  // namespace tandem::models

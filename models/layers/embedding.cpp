#include "models/layers/embedding.hpp"

#include <stdexcept>

#include "models/detail/checks.hpp"

namespace tandem::models {

Embedding::Embedding(std::int64_t vocab, std::int64_t dim, std::int64_t max_seq)
    : vocab_(vocab), dim_(dim), max_seq_(max_seq) {
  if (vocab <= 0 || dim <= 0 || max_seq < 0) {
    throw std::invalid_argument("Embedding: need vocab > 0, dim > 0, max_seq >= 0; got " +
                                std::to_string(vocab) + ", " + std::to_string(dim) + ", " +
                                std::to_string(max_seq));
  }
}

std::string Embedding::describe() const {
  return "embedding(vocab=" + std::to_string(vocab_) + ", dim=" + std::to_string(dim_) +
         (max_seq_ > 0 ? ", positions=" + std::to_string(max_seq_) : std::string()) + ")";
}

std::vector<ParamSpec> Embedding::param_specs() const {
  std::vector<ParamSpec> specs{{"tokens", {vocab_, dim_}, Init::normal, 0.02f, 1}};
  if (max_seq_ > 0) specs.push_back({"positions", {max_seq_, dim_}, Init::normal, 0.01f, 1});
  return specs;
}

Shape Embedding::output_shape(const Shape& input) const {
  if (input.size() != 2 || (max_seq_ > 0 && input[1] > max_seq_)) {
    throw std::invalid_argument(describe() + ": input shape " + shape_str(input) +
                                " is not [batch, seq]" +
                                (max_seq_ > 0 ? " with seq <= " + std::to_string(max_seq_) : ""));
  }
  return {input[0], input[1], dim_};
}

ForwardResult Embedding::forward(const Context& ctx, ParamView params, const Tensor& x) const {
  const Kernels& k = ctx.k();
  const std::string who = describe();
  detail::require_params(k, params, param_specs(), who);
  detail::require_on(k, x, who, "input");
  if (x.dtype() != DType::i32) {
    throw std::invalid_argument(who + ": input must be i32 token ids, got " + x.describe());
  }
  const Shape out = output_shape(x.shape());
  Tensor y = k.empty(out);
  k.embedding_forward(detail::ids(x), detail::ptr(params[0]),
                      max_seq_ > 0 ? detail::ptr(params[1]) : nullptr, detail::ptr(y), out[0],
                      out[1], vocab_, dim_);
  ForwardResult r{y, {}};
  if (ctx.keep_saved) r.saved.push_back(x);
  return r;
}

Tensor Embedding::backward_input(const Context& /*ctx*/, ParamView /*params*/, Saved& /*saved*/,
                                 const Tensor& /*dy*/) const {
  return Tensor();
}

void Embedding::backward_weight_into(const Context& ctx, const Saved& saved, const Tensor& dy,
                                     const GradSink& sink) const {
  const Kernels& k = ctx.k();
  const std::string who = describe();
  detail::require_sink(k, sink, param_specs(), who);
  detail::require_saved(saved, 1, who);
  const Tensor& ids = saved[0];
  const Tensor dy32 = detail::as_f32(k, dy, who, "output gradient");
  detail::require_f32_shape(k, dy32, output_shape(ids.shape()), who, "output gradient");
  float* dpos = nullptr;
  if (max_seq_ > 0) {
    // Positions past the sequence get no gradient: their rows only scale by beta.
    dpos = detail::ptr(sink.grads[1]);
    const std::int64_t seq = ids.dim(1);
    k.scale(dpos + seq * dim_, (max_seq_ - seq) * dim_, sink.beta);
  }
  k.embedding_backward(detail::ids(ids), detail::ptr(dy32), detail::ptr(sink.grads[0]), dpos,
                       ids.dim(0), ids.dim(1), vocab_, dim_, sink.alpha, sink.beta);
}

Tensor Embedding::backward_into(const Context& ctx, ParamView /*params*/, Saved& saved,
                                const Tensor& dy, bool /*need_dx*/, const GradSink& sink) const {
  backward_weight_into(ctx, saved, dy, sink);
  return Tensor();
}

}  // namespace tandem::models

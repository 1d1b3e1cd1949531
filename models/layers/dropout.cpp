#include "models/layers/dropout.hpp"

#include <stdexcept>

#include "models/detail/checks.hpp"
#include "models/detail/meta.hpp"
#include "runtime/counter_rng.hpp"

namespace tandem::models {

Dropout::Dropout(float p, std::uint64_t salt) : p_(p), salt_(salt) {
  if (!(p >= 0.0f && p < 1.0f)) {
    throw std::invalid_argument("Dropout: probability must be in [0, 1), got " + std::to_string(p));
  }
}

std::string Dropout::describe() const {
  return "dropout(p=" + std::to_string(p_) + ")";
}

std::uint64_t Dropout::key(std::uint64_t seed, std::uint64_t salt) {
  return counter_hash(splitmix64(seed), salt);
}

ForwardResult Dropout::forward(const Context& ctx, ParamView params, const Tensor& x) const {
  const Kernels& k = ctx.k();
  const std::string who = describe();
  detail::require_params(k, params, {}, who);
  const Tensor x32 = detail::as_f32(k, x, who, "input");
  if (!ctx.training || p_ == 0.0f) return {x32, {}};
  if (x32.rank() == 0)
    throw std::invalid_argument(who + ": input " + x32.describe() + " has no batch dimension");
  const detail::DropoutKey dk{key(ctx.seed, salt_), ctx.sample_begin};
  Tensor y = k.empty(x32.shape());
  const std::int64_t samples = x32.dim(0);
  k.dropout_apply(detail::ptr(x32), detail::ptr(y), samples,
                  samples == 0 ? 0 : x32.numel() / samples, p_, dk.key, dk.first_sample);
  ForwardResult r{y, {}};
  // Backward recomputes the mask from this record instead of keeping it.
  if (ctx.keep_saved) r.saved.push_back(detail::encode_dropout(dk));
  return r;
}

SavedLayout Dropout::saved_layout(std::size_t /*k*/) const {
  return SavedLayout::dropout_record;  // the only thing a training forward keeps
}

Tensor Dropout::backward_input(const Context& ctx, ParamView /*params*/, Saved& saved,
                               const Tensor& dy) const {
  const Kernels& k = ctx.k();
  const Tensor dy32 = detail::as_f32(k, dy, describe(), "output gradient");
  if (saved.empty()) return dy32;  // identity forward
  const detail::DropoutKey dk = detail::decode_dropout(saved[0]);
  Tensor dx = k.empty(dy32.shape());
  const std::int64_t samples = dy32.dim(0);
  k.dropout_apply(detail::ptr(dy32), detail::ptr(dx), samples,
                  samples == 0 ? 0 : dy32.numel() / samples, p_, dk.key, dk.first_sample);
  return dx;
}

}  // namespace tandem::models

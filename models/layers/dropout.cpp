#include "models/layers/dropout.hpp"

#include <stdexcept>

#include "models/detail/checks.hpp"
#include "models/detail/meta.hpp"
#include "models/kernels/cpu/dropout.hpp"
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
  const std::string who = describe();
  detail::require_params(params, {}, who);
  const Tensor x32 = detail::as_f32(x, who, "input");
  if (!ctx.training || p_ == 0.0f) return {x32, {}};
  if (x32.rank() == 0)
    throw std::invalid_argument(who + ": input " + x32.describe() + " has no batch dimension");
  const detail::DropoutKey k{key(ctx.seed, salt_), ctx.sample_begin};
  Tensor y = detail::new_f32(x32.shape());
  const std::int64_t samples = x32.dim(0);
  cpu::dropout_apply(x32.data<float>(), y.data<float>(), samples,
                     samples == 0 ? 0 : x32.numel() / samples, p_, k.key, k.first_sample);
  ForwardResult r{y, {}};
  // Backward recomputes the mask from this record instead of keeping it.
  if (ctx.keep_saved) r.saved.push_back(detail::encode_dropout(k));
  return r;
}

SavedLayout Dropout::saved_layout(std::size_t /*k*/) const {
  return SavedLayout::dropout_record;  // the only thing a training forward keeps
}

Tensor Dropout::backward_input(const Context& /*ctx*/, ParamView /*params*/, Saved& saved,
                               const Tensor& dy) const {
  const Tensor dy32 = detail::as_f32(dy, describe(), "output gradient");
  if (saved.empty()) return dy32;  // identity forward
  const detail::DropoutKey k = detail::decode_dropout(saved[0]);
  Tensor dx = detail::new_f32(dy32.shape());
  const std::int64_t samples = dy32.dim(0);
  cpu::dropout_apply(dy32.data<float>(), dx.data<float>(), samples,
                     samples == 0 ? 0 : dy32.numel() / samples, p_, k.key, k.first_sample);
  return dx;
}

}  // namespace tandem::models

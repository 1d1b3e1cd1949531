#include "models/layers/reshape.hpp"

#include <stdexcept>

#include "models/detail/checks.hpp"
#include "models/detail/meta.hpp"

namespace tandem::models {

Reshape::Reshape(Shape per_sample) : per_sample_(std::move(per_sample)) {
  if (per_sample_.empty()) throw std::invalid_argument("reshape: needs a per-sample shape");
  for (const std::int64_t d : per_sample_) {
    if (d <= 0) throw std::invalid_argument("reshape: dimensions must be positive");
  }
}

Shape Reshape::output_shape(const Shape& input) const {
  if (input.empty()) throw std::invalid_argument("reshape: input shape [] has no batch dimension");
  Shape out{input[0]};
  out.insert(out.end(), per_sample_.begin(), per_sample_.end());
  if (shape_numel(out) != shape_numel(input)) {
    throw std::invalid_argument(describe() + ": input shape " + shape_str(input) +
                                " has another number of elements per sample");
  }
  return out;
}

ForwardResult Reshape::forward(const Context& ctx, ParamView params, const Tensor& x) const {
  detail::require_params(ctx.k(), params, {}, "reshape");
  const Tensor x32 = detail::as_f32(ctx.k(), x, "reshape", "input");
  ForwardResult r{x32.reshape(output_shape(x32.shape())), {}};
  if (ctx.keep_saved) r.saved.push_back(detail::encode_shape(x32.shape()));
  return r;
}

SavedLayout Reshape::saved_layout(std::size_t /*k*/) const {
  return SavedLayout::shape_record;  // the input's shape, all it keeps
}

Tensor Reshape::backward_input(const Context& ctx, ParamView /*params*/, Saved& saved,
                               const Tensor& dy) const {
  detail::require_saved(saved, 1, "reshape");
  const Shape in = detail::decode_shape(saved[0]);
  const Tensor dy32 = detail::as_f32(ctx.k(), dy, "reshape", "output gradient");
  detail::require_f32_shape(ctx.k(), dy32, output_shape(in), "reshape", "output gradient");
  return dy32.reshape(in);
}

}  // namespace tandem::models

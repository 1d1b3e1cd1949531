#include "models/layers/flatten.hpp"

#include <stdexcept>

#include "models/detail/checks.hpp"
#include "models/detail/meta.hpp"

namespace tandem::models {

Shape Flatten::output_shape(const Shape& input) const {
  if (input.empty()) throw std::invalid_argument("flatten: input shape [] has no batch dimension");
  std::int64_t rest = 1;
  for (std::size_t i = 1; i < input.size(); ++i) rest *= input[i];
  return {input[0], rest};
}

ForwardResult Flatten::forward(const Context& ctx, ParamView params, const Tensor& x) const {
  detail::require_params(ctx.k(), params, {}, "flatten");
  const Tensor x32 = detail::as_f32(ctx.k(), x, "flatten", "input");
  ForwardResult r{x32.reshape(output_shape(x32.shape())), {}};
  if (ctx.keep_saved) r.saved.push_back(detail::encode_shape(x32.shape()));
  return r;
}

SavedLayout Flatten::saved_layout(std::size_t /*k*/) const {
  return SavedLayout::shape_record;  // the input's shape, all it keeps
}

Tensor Flatten::backward_input(const Context& ctx, ParamView /*params*/, Saved& saved,
                               const Tensor& dy) const {
  detail::require_saved(saved, 1, "flatten");
  const Shape in = detail::decode_shape(saved[0]);
  const Tensor dy32 = detail::as_f32(ctx.k(), dy, "flatten", "output gradient");
  detail::require_f32_shape(ctx.k(), dy32, output_shape(in), "flatten", "output gradient");
  return dy32.reshape(in);
}

}  // namespace tandem::models

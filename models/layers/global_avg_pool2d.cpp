#include "models/layers/global_avg_pool2d.hpp"

#include <stdexcept>

#include "models/detail/checks.hpp"
#include "models/detail/meta.hpp"

namespace tandem::models {

Shape GlobalAvgPool2d::output_shape(const Shape& input) const {
  if (input.size() != 4 || input[2] <= 0 || input[3] <= 0) {
    throw std::invalid_argument(describe() + ": input shape " + shape_str(input) +
                                " is not [batch, C, H, W] with H, W > 0");
  }
  return {input[0], input[1]};
}

ForwardResult GlobalAvgPool2d::forward(const Context& ctx, ParamView params,
                                       const Tensor& x) const {
  const Kernels& k = ctx.k();
  const std::string who = describe();
  detail::require_params(k, params, {}, who);
  const Tensor x32 = detail::as_f32(k, x, who, "input");
  const Shape out = output_shape(x32.shape());
  const std::int64_t hw = x32.dim(2) * x32.dim(3);
  Tensor y = k.empty(out);
  // Each (sample, channel) plane is a row of hw.
  k.row_sum(detail::ptr(x32), out[0] * out[1], hw, 1.0f / static_cast<float>(hw), 0.0f,
            detail::ptr(y));
  ForwardResult r{y, {}};
  if (ctx.keep_saved) r.saved = {detail::encode_shape(x32.shape())};
  return r;
}

SavedLayout GlobalAvgPool2d::saved_layout(std::size_t /*k*/) const {
  return SavedLayout::shape_record;
}

Tensor GlobalAvgPool2d::backward_input(const Context& ctx, ParamView /*params*/, Saved& saved,
                                       const Tensor& dy) const {
  const Kernels& k = ctx.k();
  const std::string who = describe();
  detail::require_saved(saved, 1, who);
  const Shape in = detail::decode_shape(saved[0]);
  const Tensor dy32 = detail::as_f32(k, dy, who, "output gradient");
  detail::require_f32_shape(k, dy32, output_shape(in), who, "output gradient");
  const std::int64_t planes = in[0] * in[1];
  const std::int64_t hw = in[2] * in[3];
  Tensor dx = k.empty(in);
  if (planes == 0) return dx;
  Tensor ones = k.empty({hw});
  k.fill(detail::ptr(ones), hw, 1.0f);
  // dx[plane, :] = dy[plane] / hw: dy [planes, 1] times ones [1, hw].
  k.gemm(false, false, planes, hw, 1, 1.0f / static_cast<float>(hw), detail::ptr(dy32), 1,
         detail::ptr(ones), hw, 0.0f, detail::ptr(dx), hw);
  return dx;
}

}  // namespace tandem::models

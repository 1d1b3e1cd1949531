#include "models/layers/avg_pool2d.hpp"

#include <algorithm>
#include <stdexcept>

#include "models/detail/checks.hpp"
#include "models/detail/meta.hpp"
#include "models/detail/pool_shape.hpp"

namespace tandem::models {
namespace {

// Planes per im2col chunk: the column buffer stays under this many floats (as Conv2d's).
constexpr std::int64_t kColBudget = std::int64_t{8} << 20;

}  // namespace

AvgPool2d::AvgPool2d(std::int64_t kernel, std::int64_t stride, std::int64_t pad)
    : kernel_(kernel), stride_(stride == 0 ? kernel : stride), pad_(pad) {
  if (kernel <= 0 || stride < 0) {
    throw std::invalid_argument("AvgPool2d: kernel must be positive and stride >= 0");
  }
  if (pad < 0 || 2 * pad > kernel) {
    throw std::invalid_argument("AvgPool2d: pad " + std::to_string(pad) +
                                " must be >= 0 and at most half the kernel " +
                                std::to_string(kernel));
  }
}

std::string AvgPool2d::describe() const {
  return "avg_pool2d(k=" + std::to_string(kernel_) + ", stride=" + std::to_string(stride_) +
         ", pad=" + std::to_string(pad_) + ")";
}

Shape AvgPool2d::output_shape(const Shape& input) const {
  return detail::pooled_shape(describe(), input, kernel_, stride_, pad_);
}

ForwardResult AvgPool2d::forward(const Context& ctx, ParamView params, const Tensor& x) const {
  const Kernels& k = ctx.k();
  const std::string who = describe();
  detail::require_params(k, params, {}, who);
  const Tensor x32 = detail::as_f32(k, x, who, "input");
  const Shape out = output_shape(x32.shape());
  // Every (sample, channel) plane is a one-channel image: im2col gives each output's window as
  // a column of k*k rows, in NCHW output order.
  const ConvGeometry g{1, x32.dim(2), x32.dim(3), kernel_, stride_, pad_};
  const std::int64_t planes = out[0] * out[1];
  const std::int64_t ohw = g.out_hw();
  const std::int64_t k2 = g.col_rows();
  const std::int64_t chunk = std::clamp<std::int64_t>(
      kColBudget / std::max<std::int64_t>(1, k2 * ohw), 1, std::max<std::int64_t>(planes, 1));
  Tensor y = k.empty(out);
  Tensor col = k.empty({k2, chunk * ohw});
  const float inv = 1.0f / static_cast<float>(k2);
  for (std::int64_t p0 = 0; p0 < planes; p0 += chunk) {
    const std::int64_t n = std::min(chunk, planes - p0);
    k.im2col(detail::ptr(x32) + p0 * g.sample_size(), g, n, detail::ptr(col));
    k.column_sum(detail::ptr(col), k2, n * ohw, inv, 0.0f, detail::ptr(y) + p0 * ohw);
  }
  ForwardResult r{y, {}};
  if (ctx.keep_saved) r.saved = {detail::encode_shape(x32.shape())};
  return r;
}

SavedLayout AvgPool2d::saved_layout(std::size_t /*k*/) const {
  return SavedLayout::shape_record;
}

Tensor AvgPool2d::backward_input(const Context& ctx, ParamView /*params*/, Saved& saved,
                                 const Tensor& dy) const {
  const Kernels& k = ctx.k();
  const std::string who = describe();
  detail::require_saved(saved, 1, who);
  const Shape in = detail::decode_shape(saved[0]);
  const Shape out = output_shape(in);
  const Tensor dy32 = detail::as_f32(k, dy, who, "output gradient");
  detail::require_f32_shape(k, dy32, out, who, "output gradient");
  const ConvGeometry g{1, in[2], in[3], kernel_, stride_, pad_};
  const std::int64_t planes = out[0] * out[1];
  const std::int64_t ohw = g.out_hw();
  const std::int64_t k2 = g.col_rows();
  const std::int64_t chunk = std::clamp<std::int64_t>(
      kColBudget / std::max<std::int64_t>(1, k2 * ohw), 1, std::max<std::int64_t>(planes, 1));
  Tensor dx = k.empty(in);
  Tensor ones = k.empty({k2});
  k.fill(detail::ptr(ones), k2, 1.0f);
  Tensor col = k.empty({k2, chunk * ohw});
  const float inv = 1.0f / static_cast<float>(k2);
  for (std::int64_t p0 = 0; p0 < planes; p0 += chunk) {
    const std::int64_t n = std::min(chunk, planes - p0);
    const std::int64_t cols = n * ohw;
    // Every row of the window's column gets dy / (k*k): ones [k2, 1] times dy [1, cols].
    k.gemm(false, false, k2, cols, 1, inv, detail::ptr(ones), 1, detail::ptr(dy32) + p0 * ohw, cols,
           0.0f, detail::ptr(col), cols);
    k.col2im(detail::ptr(col), g, n, detail::ptr(dx) + p0 * g.sample_size());
  }
  return dx;
}

}  // namespace tandem::models

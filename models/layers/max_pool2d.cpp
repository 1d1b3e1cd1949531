#include "models/layers/max_pool2d.hpp"

#include <stdexcept>

#include "models/detail/checks.hpp"
#include "models/detail/meta.hpp"
#include "models/detail/pool_shape.hpp"

namespace tandem::models {

MaxPool2d::MaxPool2d(std::int64_t kernel, std::int64_t stride, std::int64_t pad)
    : kernel_(kernel), stride_(stride == 0 ? kernel : stride), pad_(pad) {
  if (kernel <= 0 || stride < 0) {
    throw std::invalid_argument("MaxPool2d: kernel must be positive and stride >= 0");
  }
  if (pad < 0 || 2 * pad > kernel) {
    throw std::invalid_argument("MaxPool2d: pad " + std::to_string(pad) +
                                " must be >= 0 and at most half the kernel " +
                                std::to_string(kernel));
  }
}

std::string MaxPool2d::describe() const {
  std::string s = "max_pool2d(k=" + std::to_string(kernel_) + ", stride=" + std::to_string(stride_);
  if (pad_ != 0) s += ", pad=" + std::to_string(pad_);
  return s + ")";
}

Shape MaxPool2d::output_shape(const Shape& input) const {
  return detail::pooled_shape(describe(), input, kernel_, stride_, pad_);
}

ForwardResult MaxPool2d::forward(const Context& ctx, ParamView params, const Tensor& x) const {
  const Kernels& k = ctx.k();
  const std::string who = describe();
  detail::require_params(k, params, {}, who);
  const Tensor x32 = detail::as_f32(k, x, who, "input");
  const Shape out = output_shape(x32.shape());
  const ConvGeometry g{x32.dim(1), x32.dim(2), x32.dim(3), kernel_, stride_, pad_};
  Tensor y = k.empty(out);
  Tensor argmax = k.empty(out, DType::i32);
  k.max_pool_forward(detail::ptr(x32), g, out[0], detail::ptr(y), detail::ids(argmax));
  ForwardResult r{y, {}};
  if (ctx.keep_saved) r.saved = {argmax, detail::encode_shape(x32.shape())};
  return r;
}

SavedLayout MaxPool2d::saved_layout(std::size_t k) const {
  return k == 1 ? SavedLayout::shape_record : SavedLayout::rows;
}

Tensor MaxPool2d::backward_input(const Context& ctx, ParamView /*params*/, Saved& saved,
                                 const Tensor& dy) const {
  const Kernels& k = ctx.k();
  const std::string who = describe();
  detail::require_saved(saved, 2, who);
  const Shape in = detail::decode_shape(saved[1]);
  const Tensor dy32 = detail::as_f32(k, dy, who, "output gradient");
  detail::require_f32_shape(k, dy32, output_shape(in), who, "output gradient");
  const ConvGeometry g{in[1], in[2], in[3], kernel_, stride_, pad_};
  Tensor dx = k.empty(in);
  k.max_pool_backward(detail::ptr(dy32), detail::ids(saved[0]), g, in[0], detail::ptr(dx));
  return dx;
}

}  // namespace tandem::models

#include "models/layers/activation.hpp"

#include <stdexcept>

#include "models/detail/checks.hpp"

namespace tandem::models {

ActivationLayer::ActivationLayer(cpu::Activation act) : act_(act) {
  if (act == cpu::Activation::none) {
    throw std::invalid_argument("ActivationLayer: activation 'none' is not a layer");
  }
}

std::string ActivationLayer::kind() const {
  return cpu::activation_name(act_);
}

ForwardResult ActivationLayer::forward(const Context& ctx, ParamView params,
                                       const Tensor& x) const {
  detail::require_params(params, {}, kind());
  const Tensor x32 = detail::as_f32(x, kind(), "input");
  Tensor y = detail::new_f32(x32.shape());
  cpu::act_forward(x32.data<float>(), y.data<float>(), x32.numel(), act_);
  ForwardResult r{y, {}};
  if (ctx.keep_saved) r.saved.push_back(act_ == cpu::Activation::relu ? y : x32);
  return r;
}

Tensor ActivationLayer::backward_input(const Context& /*ctx*/, ParamView /*params*/, Saved& saved,
                                       const Tensor& dy) const {
  detail::require_saved(saved, 1, kind());
  const Tensor dy32 = detail::as_f32(dy, kind(), "output gradient");
  detail::require_f32_shape(dy32, saved[0].shape(), kind(), "output gradient");
  Tensor dx = detail::new_f32(dy32.shape());
  cpu::act_backward(dy32.data<float>(), saved[0].data<float>(), dx.data<float>(), dx.numel(), act_);
  return dx;
}

}  // namespace tandem::models

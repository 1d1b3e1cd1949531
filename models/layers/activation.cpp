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
  const Kernels& k = ctx.k();
  detail::require_params(k, params, {}, kind());
  const Tensor x32 = detail::as_f32(k, x, kind(), "input");
  Tensor y = k.empty(x32.shape());
  k.act_forward(detail::ptr(x32), detail::ptr(y), x32.numel(), act_);
  ForwardResult r{y, {}};
  if (ctx.keep_saved) r.saved.push_back(cpu::backward_reads_output(act_) ? y : x32);
  return r;
}

Tensor ActivationLayer::backward_input(const Context& ctx, ParamView /*params*/, Saved& saved,
                                       const Tensor& dy) const {
  const Kernels& k = ctx.k();
  detail::require_saved(saved, 1, kind());
  const Tensor dy32 = detail::as_f32(k, dy, kind(), "output gradient");
  detail::require_f32_shape(k, dy32, saved[0].shape(), kind(), "output gradient");
  Tensor dx = k.empty(dy32.shape());
  k.act_backward(detail::ptr(dy32), detail::ptr(saved[0]), detail::ptr(dx), dx.numel(), act_);
  return dx;
}

}  // namespace tandem::models

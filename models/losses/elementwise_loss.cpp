#include "models/losses/elementwise_loss.hpp"

#include <cmath>
#include <stdexcept>

namespace tandem::models::losses {

LossResult ElementwiseLoss::compute(const Context& ctx, const Tensor& output, const Tensor& targets,
                                    bool need_grad, float grad_scale) const {
  check_targets(output.shape(), targets.dtype(), targets.shape(), "targets");
  if (output.dtype() != DType::f32) {
    throw std::invalid_argument("loss " + name() + ": output " + output.describe() + " (want f32)");
  }
  const Kernels& k = ctx.k();
  const std::int64_t n = output.numel();
  LossResult r;
  r.count = n;
  if (!k.device().is_cpu()) {
    r.dlogits = k.empty(output.shape());
    r.device_sums = k.empty({4});  // a CrossEntropySums: 16 bytes
    k.pointwise_loss(kind(), static_cast<const float*>(output.raw_data()),
                     static_cast<const float*>(targets.raw_data()), n,
                     static_cast<float*>(r.dlogits.raw_data()), grad_scale,
                     static_cast<CrossEntropySums*>(r.device_sums.raw_data()));
    return r;
  }
  if (output.device() != Device::cpu() || targets.device() != Device::cpu()) {
    throw std::invalid_argument("loss " + name() + ": output " + output.describe() +
                                " and targets " + targets.describe() + " are not on the cpu");
  }
  const float* x = output.data<float>();
  const float* t = targets.data<float>();
  float* dx = nullptr;
  if (need_grad) {
    r.dlogits = Tensor::empty(output.shape(), DType::f32);
    dx = r.dlogits.data<float>();
  }
  double sum = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    float g = 0;
    sum += element(x[i], t[i], &g);
    if (dx != nullptr) dx[i] = grad_scale * g;
  }
  r.loss_sum = sum;
  return r;
}

}  // namespace tandem::models::losses

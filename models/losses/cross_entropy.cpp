#include "models/losses/cross_entropy.hpp"

#include <stdexcept>

#include "models/detail/checks.hpp"
#include "models/kernels/cpu/cross_entropy.hpp"

namespace tandem::models {

LossResult softmax_cross_entropy(const Tensor& logits, const Tensor& targets, bool need_grad,
                                 float grad_scale) {
  const std::string who = "softmax_cross_entropy";
  const Tensor z = detail::as_f32(logits, who, "logits");
  detail::require_cpu(targets, who, "targets");
  if (z.rank() < 1 || targets.dtype() != DType::i32 ||
      Shape(z.shape().begin(), z.shape().end() - 1) != targets.shape()) {
    throw std::invalid_argument(who + ": logits " + z.describe() + " and targets " +
                                targets.describe() +
                                " do not match (want logits [..., C] and i32 targets [...])");
  }
  const std::int64_t classes = z.dim(-1);
  const std::int64_t rows = targets.numel();
  LossResult r;
  r.count = rows;
  if (need_grad) r.dlogits = detail::new_f32(z.shape());
  const cpu::CrossEntropySums sums =
      cpu::cross_entropy(z.data<float>(), targets.data<std::int32_t>(), rows, classes,
                         need_grad ? r.dlogits.data<float>() : nullptr, grad_scale);
  r.loss_sum = sums.loss_sum;
  r.correct = sums.correct;
  return r;
}

namespace losses {

Shape CrossEntropy::target_shape(const Shape& output) const {
  if (output.empty()) {
    throw std::invalid_argument("loss cross_entropy: output " + shape_str(output) +
                                " has no class dimension");
  }
  return Shape(output.begin(), output.end() - 1);
}

LossResult CrossEntropy::compute(const Context& ctx, const Tensor& output, const Tensor& targets,
                                 bool need_grad, float grad_scale) const {
  const Kernels& k = ctx.k();
  if (k.device().is_cpu()) return softmax_cross_entropy(output, targets, need_grad, grad_scale);
  check_targets(output.shape(), targets.dtype(), targets.shape(), "targets");
  LossResult r;
  r.count = targets.numel();
  // The device kernel writes a gradient row with every loss row.
  r.dlogits = k.empty(output.shape());
  r.device_sums = k.empty({4});  // a CrossEntropySums: 16 bytes
  k.cross_entropy_loss(static_cast<const float*>(output.raw_data()),
                       static_cast<const std::int32_t*>(targets.raw_data()), r.count,
                       output.shape().back(), static_cast<float*>(r.dlogits.raw_data()), grad_scale,
                       static_cast<CrossEntropySums*>(r.device_sums.raw_data()));
  return r;
}

}  // namespace losses
}  // namespace tandem::models

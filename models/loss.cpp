#include "models/loss.hpp"

#include <cstring>
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

LossResult LossResult::resolved() const {
  LossResult r = *this;
  if (pending_sums.defined()) {
    // Written by the device as a CrossEntropySums: a double and an int64.
    const auto* bytes = static_cast<const unsigned char*>(pending_sums.raw_data());
    std::memcpy(&r.loss_sum, bytes, sizeof r.loss_sum);
    std::memcpy(&r.correct, bytes + sizeof(double), sizeof r.correct);
    r.pending_sums = Tensor();
  }
  return r;
}

}  // namespace tandem::models

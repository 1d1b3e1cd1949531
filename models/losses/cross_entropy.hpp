#pragma once
// Softmax cross-entropy of logits f32 [..., C] against class ids i32 [...]: the loss of every
// model until losses became a choice, and still the default (bit for bit the same sums).
#include "models/loss.hpp"

namespace tandem::models::losses {

class CrossEntropy final : public Loss {
 public:
  std::string name() const override { return "cross_entropy"; }
  bool classifies() const override { return true; }
  DType target_dtype() const override { return DType::i32; }
  Shape target_shape(const Shape& output) const override;
  LossResult compute(const Context& ctx, const Tensor& output, const Tensor& targets,
                     bool need_grad, float grad_scale) const override;
};

}  // namespace tandem::models::losses

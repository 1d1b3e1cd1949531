#pragma once
// What the element-wise losses (mse, bce_with_logits) share: f32 targets of the output's own
// shape, no accuracy, each element's loss added in double in element order on the CPU (so a
// run repeats bit for bit) and a device kernel of models/kernels elsewhere.
#include "models/loss.hpp"

namespace tandem::models::losses {

class ElementwiseLoss : public Loss {
 public:
  bool classifies() const override { return false; }
  DType target_dtype() const override { return DType::f32; }
  Shape target_shape(const Shape& output) const override { return output; }
  LossResult compute(const Context& ctx, const Tensor& output, const Tensor& targets,
                     bool need_grad, float grad_scale) const final;

 protected:
  virtual PointwiseLoss kind() const = 0;
  // The loss of one element and, through *grad, its derivative with respect to x.
  virtual double element(float x, float t, float* grad) const = 0;
};

}  // namespace tandem::models::losses

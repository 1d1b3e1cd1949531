#pragma once
// Mean squared error against f32 targets of the output's shape, averaged over every element of
// the minibatch (so a wider output does not weigh more per sample than in the mean).
#include "models/losses/elementwise_loss.hpp"

namespace tandem::models::losses {

class MeanSquaredError final : public ElementwiseLoss {
 public:
  std::string name() const override { return "mse"; }

 protected:
  PointwiseLoss kind() const override { return PointwiseLoss::squared_error; }
  double element(float x, float t, float* grad) const override {
    // In double: the difference of two floats rounded to f32 would cost the sum its last digits.
    const double d = static_cast<double>(x) - static_cast<double>(t);
    *grad = static_cast<float>(2.0 * d);
    return d * d;
  }
};

}  // namespace tandem::models::losses

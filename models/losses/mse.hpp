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
    const float d = x - t;
    *grad = 2.0f * d;
    return static_cast<double>(d) * static_cast<double>(d);
  }
};

}  // namespace tandem::models::losses

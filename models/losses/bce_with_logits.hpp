#pragma once
// Binary cross-entropy of logits x against probabilities t in [0, 1] (f32, the output's shape),
// in the form max(x, 0) - x t + log(1 + exp(-|x|)): neither exp can overflow, so logits of any
// size give a finite loss and the gradient sigmoid(x) - t.
#include "models/losses/elementwise_loss.hpp"

namespace tandem::models::losses {

class BceWithLogits final : public ElementwiseLoss {
 public:
  std::string name() const override { return "bce_with_logits"; }

 protected:
  PointwiseLoss kind() const override { return PointwiseLoss::bce_with_logits; }
  double element(float x, float t, float* grad) const override;
};

}  // namespace tandem::models::losses

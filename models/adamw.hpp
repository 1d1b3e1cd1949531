#pragma once

#include <unordered_map>

#include "models/optimizer.hpp"

namespace tandem::models {

// PyTorch's AdamW: p *= 1 - lr * wd; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
// p -= (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps), t = steps() + 1.
class AdamW final : public Optimizer {
 public:
  explicit AdamW(const OptimizerSpec& spec);
  using Optimizer::step;
  void step(ParamSet& params, const ParamSet& grads, const Kernels& kernels) override;
  ParamSet state() const override;
  void check_state(const ParamSet& state, const ParamSet& params) const override;

 private:
  void replace_state(const ParamSet& state, const ParamSet& params) override;
  double beta1_;
  double beta2_;
  double eps_;
  double weight_decay_;
  std::unordered_map<std::string, Tensor> exp_avg_;
  std::unordered_map<std::string, Tensor> exp_avg_sq_;
};

}  // namespace tandem::models

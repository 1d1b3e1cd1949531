#pragma once

#include <unordered_map>

#include "models/optimizer.hpp"

namespace tandem::models {

// PyTorch's SGD (dampening 0): d = g + wd * p; with momentum, buf = d on the first step and
// buf = momentum * buf + d after, d = nesterov ? d + momentum * buf : buf; then p -= lr * d.
class Sgd final : public Optimizer {
 public:
  explicit Sgd(const OptimizerSpec& spec);
  using Optimizer::step;
  void step(ParamSet& params, const ParamSet& grads, const Kernels& kernels) override;
  std::optional<FusedUpdate> fused_update() const override;
  ParamSet state() const override;
  void check_state(const ParamSet& state, const ParamSet& params) const override;

 private:
  void replace_state(const ParamSet& state, const ParamSet& params) override;
  double momentum_;
  double weight_decay_;
  bool nesterov_;
  std::unordered_map<std::string, Tensor> momentum_buffers_;
};

}  // namespace tandem::models

#pragma once

#include "models/kernels/cpu/activation.hpp"
#include "models/layer.hpp"

namespace tandem::models {

// Element-wise activation as a layer of its own (Linear and Conv2d can also fuse one).
class ActivationLayer : public Layer {
 public:
  explicit ActivationLayer(cpu::Activation act);
  std::string kind() const override;
  std::string describe() const override { return kind(); }
  Shape output_shape(const Shape& input) const override { return input; }
  ForwardResult forward(const Context& ctx, ParamView params, const Tensor& x) const override;
  Tensor backward_input(const Context& ctx, ParamView params, Saved& saved,
                        const Tensor& dy) const override;

 private:
  cpu::Activation act_;
};

// max(x, 0); keeps its output for backward.
class ReLU final : public ActivationLayer {
 public:
  ReLU() : ActivationLayer(cpu::Activation::relu) {}
};

// GELU, tanh approximation (as GPT-2); keeps its input for backward.
class GELU final : public ActivationLayer {
 public:
  GELU() : ActivationLayer(cpu::Activation::gelu) {}
};

}  // namespace tandem::models

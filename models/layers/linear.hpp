#pragma once

#include <cstdint>

#include "models/kernels/cpu/activation.hpp"
#include "models/layer.hpp"

namespace tandem::models {

// y = act(x W^T + b) over the last dimension of x ([..., in] -> [..., out]). W is [out, in].
// The activation is fused (one pass for bias and activation forward, one for the activation's
// gradient and the bias gradient backward); ReLU and GELU also exist as layers of their own.
class Linear final : public Layer {
 public:
  Linear(std::int64_t in, std::int64_t out, cpu::Activation act = cpu::Activation::none,
         bool bias = true);

  std::string kind() const override { return "linear"; }
  std::string describe() const override;
  std::vector<ParamSpec> param_specs() const override;
  Shape output_shape(const Shape& input) const override;
  LayerCost cost(const Shape& input) const override;

  ForwardResult forward(const Context& ctx, ParamView params, const Tensor& x) const override;
  Tensor backward_input(const Context& ctx, ParamView params, Saved& saved,
                        const Tensor& dy) const override;
  void backward_weight_into(const Context& ctx, const Saved& saved, const Tensor& dy,
                            const GradSink& sink) const override;
  Tensor backward_into(const Context& ctx, ParamView params, Saved& saved, const Tensor& dy,
                       bool need_dx, const GradSink& sink) const override;

  std::int64_t in_features() const { return in_; }
  std::int64_t out_features() const { return out_; }

 private:
  // dz = dy * act'(.), with the bias gradient when sink is given. Returns dy itself when there
  // is no activation.
  Tensor grad_pre_activation(const Kernels& k, const Saved& saved, const Tensor& dy,
                             const GradSink* sink) const;

  std::int64_t in_;
  std::int64_t out_;
  cpu::Activation act_;
  bool bias_;
};

}  // namespace tandem::models

#pragma once

#include <cstdint>

#include "models/kernels/cpu/activation.hpp"
#include "models/layer.hpp"

namespace tandem::models {

// 2-D convolution on NCHW f32 input via im2col + GEMM, optionally fused with ReLU.
// Parameters "weight" [out, in, k, k] and "bias" [out].
class Conv2d final : public Layer {
 public:
  Conv2d(std::int64_t in_channels, std::int64_t out_channels, std::int64_t kernel,
         std::int64_t stride = 1, std::int64_t pad = 0,
         cpu::Activation act = cpu::Activation::none);
  std::string kind() const override { return "conv2d"; }
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

 private:
  Tensor run_backward(const Kernels& k, ParamView params, const Saved& saved, const Tensor& dy,
                      bool need_dx, const GradSink* sink) const;

  std::int64_t in_;
  std::int64_t out_;
  std::int64_t kernel_;
  std::int64_t stride_;
  std::int64_t pad_;
  cpu::Activation act_;
};

}  // namespace tandem::models

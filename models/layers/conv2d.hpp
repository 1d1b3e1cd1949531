#pragma once

#include <cstdint>

#include "models/kernels/cpu/activation.hpp"
#include "models/layer.hpp"

namespace tandem::models {

// 2-D convolution on NCHW f32 input via im2col + GEMM, optionally fused with ReLU.
// The window may be rectangular (kernel_h x kernel_w, padded pad_h and pad_w: Inception's 1x7
// and 7x1); the stride is the same in both dimensions. Parameters "weight" [out, in, kernel_h,
// kernel_w] and "bias" [out].
class Conv2d final : public Layer {
 public:
  // A square window.
  Conv2d(std::int64_t in_channels, std::int64_t out_channels, std::int64_t kernel,
         std::int64_t stride = 1, std::int64_t pad = 0,
         cpu::Activation act = cpu::Activation::none);
  Conv2d(std::int64_t in_channels, std::int64_t out_channels, std::int64_t kernel_h,
         std::int64_t kernel_w, std::int64_t stride, std::int64_t pad_h, std::int64_t pad_w,
         cpu::Activation act);
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
  ConvGeometry geometry(const Shape& input) const;

  std::int64_t in_;
  std::int64_t out_;
  std::int64_t kernel_h_;
  std::int64_t kernel_w_;
  std::int64_t stride_;
  std::int64_t pad_h_;
  std::int64_t pad_w_;
  cpu::Activation act_;
};

}  // namespace tandem::models

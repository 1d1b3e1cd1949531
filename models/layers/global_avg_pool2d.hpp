#pragma once

#include "models/layer.hpp"

namespace tandem::models {

// The mean over each channel's plane: [N, C, H, W] -> [N, C] (ResNet's and Inception's head).
class GlobalAvgPool2d final : public Layer {
 public:
  std::string kind() const override { return "global_avg_pool2d"; }
  std::string describe() const override { return "global_avg_pool2d"; }
  Shape output_shape(const Shape& input) const override;
  ForwardResult forward(const Context& ctx, ParamView params, const Tensor& x) const override;
  Tensor backward_input(const Context& ctx, ParamView params, Saved& saved,
                        const Tensor& dy) const override;
  // saved = {input shape record}.
  SavedLayout saved_layout(std::size_t k) const override;
};

}  // namespace tandem::models

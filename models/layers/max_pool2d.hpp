#pragma once

#include <cstdint>

#include "models/layer.hpp"

namespace tandem::models {

// Max pooling with a square window, padded with -inf (pad <= kernel / 2, as PyTorch, so that
// every window holds an element of the input); keeps the argmax for backward.
class MaxPool2d final : public Layer {
 public:
  // stride 0: = kernel.
  explicit MaxPool2d(std::int64_t kernel = 2, std::int64_t stride = 0, std::int64_t pad = 0);
  std::string kind() const override { return "max_pool2d"; }
  std::string describe() const override;
  Shape output_shape(const Shape& input) const override;
  ForwardResult forward(const Context& ctx, ParamView params, const Tensor& x) const override;
  Tensor backward_input(const Context& ctx, ParamView params, Saved& saved,
                        const Tensor& dy) const override;
  // saved = {argmax (per-sample rows: indices within each plane), input shape record}.
  SavedLayout saved_layout(std::size_t k) const override;

 private:
  std::int64_t kernel_;
  std::int64_t stride_;
  std::int64_t pad_;
};

}  // namespace tandem::models

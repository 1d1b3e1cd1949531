#pragma once

#include <cstdint>

#include "models/layer.hpp"

namespace tandem::models {

// Average pooling with a square window, zero padded, dividing by the whole window (PyTorch's
// default count_include_pad=True: a window over padding averages its zeros too); pad <= kernel
// / 2 as PyTorch. Computed as im2col over each (sample, channel) plane then a column sum.
class AvgPool2d final : public Layer {
 public:
  // stride 0: = kernel.
  explicit AvgPool2d(std::int64_t kernel, std::int64_t stride = 0, std::int64_t pad = 0);
  std::string kind() const override { return "avg_pool2d"; }
  std::string describe() const override;
  Shape output_shape(const Shape& input) const override;
  ForwardResult forward(const Context& ctx, ParamView params, const Tensor& x) const override;
  Tensor backward_input(const Context& ctx, ParamView params, Saved& saved,
                        const Tensor& dy) const override;
  // saved = {input shape record}.
  SavedLayout saved_layout(std::size_t k) const override;

 private:
  std::int64_t kernel_;
  std::int64_t stride_;
  std::int64_t pad_;
};

}  // namespace tandem::models

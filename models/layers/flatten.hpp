#pragma once

#include "models/layer.hpp"

namespace tandem::models {

// [batch, d1, d2, ...] -> [batch, d1 * d2 * ...], sharing storage (no copy).
class Flatten final : public Layer {
 public:
  std::string kind() const override { return "flatten"; }
  std::string describe() const override { return "flatten"; }
  Shape output_shape(const Shape& input) const override;
  ForwardResult forward(const Context& ctx, ParamView params, const Tensor& x) const override;
  Tensor backward_input(const Context& ctx, ParamView params, Saved& saved,
                        const Tensor& dy) const override;
  SavedLayout saved_layout(std::size_t k) const override;
};

}  // namespace tandem::models

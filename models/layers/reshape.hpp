#pragma once

#include "models/layer.hpp"

namespace tandem::models {

// [batch, ...] -> [batch, shape...] with as many elements per sample, sharing storage (no copy):
// what turns a flattened sequence back into positions.
class Reshape final : public Layer {
 public:
  explicit Reshape(Shape per_sample);
  std::string kind() const override { return "reshape"; }
  std::string describe() const override { return "reshape(" + shape_str(per_sample_) + ")"; }
  Shape output_shape(const Shape& input) const override;
  ForwardResult forward(const Context& ctx, ParamView params, const Tensor& x) const override;
  Tensor backward_input(const Context& ctx, ParamView params, Saved& saved,
                        const Tensor& dy) const override;
  SavedLayout saved_layout(std::size_t k) const override;

 private:
  Shape per_sample_;
};

}  // namespace tandem::models

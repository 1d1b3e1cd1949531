#pragma once

#include <cstdint>

#include "models/layer.hpp"

namespace tandem::models {

// Layer normalisation over the last dimension, with a learned scale ("weight", ones) and shift
// ("bias", zeros).
class LayerNorm final : public Layer {
 public:
  explicit LayerNorm(std::int64_t dim, float eps = 1e-5f);
  std::string kind() const override { return "layer_norm"; }
  std::string describe() const override;
  std::vector<ParamSpec> param_specs() const override;
  Shape output_shape(const Shape& input) const override;
  ForwardResult forward(const Context& ctx, ParamView params, const Tensor& x) const override;
  Tensor backward_input(const Context& ctx, ParamView params, Saved& saved,
                        const Tensor& dy) const override;
  void backward_weight_into(const Context& ctx, const Saved& saved, const Tensor& dy,
                            const GradSink& sink) const override;

 private:
  std::int64_t dim_;
  float eps_;
};

}  // namespace tandem::models

#pragma once

#include <cstdint>

#include "models/layer.hpp"

namespace tandem::models {

// Causal multi-head self-attention on [batch, seq, d_model]: qkv = x Wqkv^T + b, per head
// softmax(q k^T / sqrt(d_head)) with positions attending only to themselves and earlier ones,
// heads concatenated, then an output projection. Parameters "qkv.weight" [3d, d], "qkv.bias",
// "proj.weight" [d, d], "proj.bias". backward_input appends dqkv to saved for backward_weight.
class CausalSelfAttention final : public Layer {
 public:
  CausalSelfAttention(std::int64_t d_model, std::int64_t heads, float proj_init_scale = 1.0f);
  std::string kind() const override { return "attention"; }
  std::string describe() const override;
  std::vector<ParamSpec> param_specs() const override;
  Shape output_shape(const Shape& input) const override;
  LayerCost cost(const Shape& input) const override;
  ForwardResult forward(const Context& ctx, ParamView params, const Tensor& x) const override;
  Tensor backward_input(const Context& ctx, ParamView params, Saved& saved,
                        const Tensor& dy) const override;
  void backward_weight_into(const Context& ctx, const Saved& saved, const Tensor& dy,
                            const GradSink& sink) const override;
  bool weight_needs_backward_input() const override { return true; }

 private:
  std::int64_t d_;
  std::int64_t heads_;
  float proj_scale_;
};

}  // namespace tandem::models

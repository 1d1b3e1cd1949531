#pragma once

#include <cstdint>

#include "models/layer.hpp"

namespace tandem::models {

// Pre-LayerNorm GPT block as one layer of the list:
//   x1 = x + dropout(attention(ln1(x))),  y = x1 + dropout(W2 gelu(W1 ln2(x1))).
// Parameters (in order): ln1.{weight,bias}, attn.qkv.{weight,bias}, attn.proj.{weight,bias},
// ln2.{weight,bias}, mlp.fc.{weight,bias} [d_ff, d], mlp.proj.{weight,bias} [d, d_ff].
// Output projections start at std 0.02 / sqrt(2 * n_layers) (GPT-2). backward_input appends
// the gradients of the inner linear maps' outputs to saved, for backward_weight (B/W split).
class TransformerBlock final : public Layer {
 public:
  TransformerBlock(std::int64_t d_model, std::int64_t heads, std::int64_t d_ff, float dropout,
                   std::uint64_t salt, std::int64_t n_layers);
  std::string kind() const override { return "transformer_block"; }
  std::string describe() const override;
  std::vector<ParamSpec> param_specs() const override;
  Shape output_shape(const Shape& input) const override;
  LayerCost cost(const Shape& input) const override;
  ForwardResult forward(const Context& ctx, ParamView params, const Tensor& x) const override;
  Tensor backward_input(const Context& ctx, ParamView params, Saved& saved,
                        const Tensor& dy) const override;
  void backward_weight_into(const Context& ctx, const Saved& saved, const Tensor& dy,
                            const GradSink& sink) const override;
  // All rows ([batch, seq, .] activations, [batch * seq] rstd) but the dropout record.
  SavedLayout saved_layout(std::size_t k) const override;
  bool weight_needs_backward_input() const override { return true; }

 private:
  std::int64_t d_;
  std::int64_t heads_;
  std::int64_t d_ff_;
  float dropout_;
  std::uint64_t salt_;
  float proj_scale_;
};

}  // namespace tandem::models

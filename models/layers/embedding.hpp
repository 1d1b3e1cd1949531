#pragma once

#include <cstdint>

#include "models/layer.hpp"

namespace tandem::models {

// Token embedding plus learned positions: i32 ids [batch, seq] -> f32 [batch, seq, dim].
// Parameters "tokens" [vocab, dim] and, when max_seq > 0, "positions" [max_seq, dim]
// (seq <= max_seq). Ids are not differentiable: backward_input returns an undefined tensor.
class Embedding final : public Layer {
 public:
  Embedding(std::int64_t vocab, std::int64_t dim, std::int64_t max_seq);
  std::string kind() const override { return "embedding"; }
  std::string describe() const override;
  std::vector<ParamSpec> param_specs() const override;
  Shape output_shape(const Shape& input) const override;
  DType input_dtype() const override { return DType::i32; }
  ForwardResult forward(const Context& ctx, ParamView params, const Tensor& x) const override;
  Tensor backward_input(const Context& ctx, ParamView params, Saved& saved,
                        const Tensor& dy) const override;
  void backward_weight_into(const Context& ctx, const Saved& saved, const Tensor& dy,
                            const GradSink& sink) const override;
  Tensor backward_into(const Context& ctx, ParamView params, Saved& saved, const Tensor& dy,
                       bool need_dx, const GradSink& sink) const override;

 private:
  std::int64_t vocab_;
  std::int64_t dim_;
  std::int64_t max_seq_;
};

}  // namespace tandem::models

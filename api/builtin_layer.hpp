#pragma once
// One of the models' layers (a built-in: tandem::layers::linear, ..., or a zoo model's) as a
// public tandem::Layer, which is what the API hands out. Model::classifier unwraps it, so in a
// pipeline it runs as itself; called directly (or from an application's own layer) it runs on
// the kernels of the LayerContext, which must be Tandem's.
#include <memory>
#include <string>
#include <vector>

#include "models/layer.hpp"
#include "tandem/layer.hpp"

namespace tandem::api {

class BuiltinLayer final : public tandem::Layer {
 public:
  explicit BuiltinLayer(std::shared_ptr<const models::Layer> impl);

  const std::shared_ptr<const models::Layer>& impl() const { return impl_; }

  std::string kind() const override { return impl_->kind(); }
  std::string describe() const override { return impl_->describe(); }
  std::vector<ParamSpec> param_specs() const override;
  Shape output_shape(const Shape& input) const override { return impl_->output_shape(input); }
  DType input_dtype() const override { return impl_->input_dtype(); }
  DType output_dtype() const override { return impl_->output_dtype(); }
  LayerCost cost(const Shape& input) const override;

  ForwardResult forward(const LayerContext& ctx, ParamView params, const Tensor& x) const override;
  Tensor backward_input(const LayerContext& ctx, ParamView params, Saved& saved,
                        const Tensor& dy) const override;
  void backward_weight_into(const LayerContext& ctx, const Saved& saved, const Tensor& dy,
                            const GradSink& sink) const override;
  SavedLayout saved_layout(std::size_t k) const override;
  bool weight_needs_backward_input() const override { return impl_->weight_needs_backward_input(); }

 private:
  std::shared_ptr<const models::Layer> impl_;
};

}  // namespace tandem::api

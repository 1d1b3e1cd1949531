#pragma once
// An application's layer (tandem::Layer, include/tandem/layer.hpp) as one of the models'
// layers, so that Model::classifier mixes it with the built-in ones. Each call hands the layer
// the public view of the stage's kernels; an exception from it comes back prefixed with the
// layer's index and describe(), of the same kind (invalid_argument, logic_error, or else
// runtime_error), and an output on the wrong device or of the wrong shape is refused the same
// way, so a layer that cannot run on a stage's device is named instead of corrupting it.
#include <memory>
#include <string>
#include <vector>

#include "models/layer.hpp"
#include "tandem/layer.hpp"

namespace tandem::api {

class CustomLayer final : public models::Layer {
 public:
  // `index`: the layer's position in its model, for error messages.
  CustomLayer(std::shared_ptr<const tandem::Layer> layer, int index);

  const std::shared_ptr<const tandem::Layer>& layer() const { return layer_; }

  std::string kind() const override { return layer_->kind(); }
  std::string describe() const override { return layer_->describe(); }
  std::vector<models::ParamSpec> param_specs() const override;
  Shape output_shape(const Shape& input) const override;
  DType input_dtype() const override { return layer_->input_dtype(); }
  DType output_dtype() const override { return layer_->output_dtype(); }
  models::LayerCost cost(const Shape& input) const override;

  models::ForwardResult forward(const models::Context& ctx, models::ParamView params,
                                const Tensor& x) const override;
  Tensor backward_input(const models::Context& ctx, models::ParamView params, models::Saved& saved,
                        const Tensor& dy) const override;
  void backward_weight_into(const models::Context& ctx, const models::Saved& saved,
                            const Tensor& dy, const models::GradSink& sink) const override;
  models::SavedLayout saved_layout(std::size_t k) const override;
  bool weight_needs_backward_input() const override {
    return layer_->weight_needs_backward_input();
  }

 private:
  // "layer 3 (residual(32)) forward: "
  std::string prefix(const char* op) const;
  // Runs `call`, rethrowing its exception with prefix(op).
  template <class F>
  auto named(const char* op, F&& call) const -> decltype(call());
  // Throws unless t is defined, on `device` and of `shape`.
  void check_output(const char* op, const char* what, const Tensor& t, Device device,
                    const Shape& shape) const;

  std::shared_ptr<const tandem::Layer> layer_;
  int index_;
};

}  // namespace tandem::api

#pragma once
// A graph layer that reads named model inputs out of the packed model input
// (models/input_layout.hpp): for each of its sources that is an input, it hands the inner layer
// that input's columns, reshaped to [batch, shape...] (a copy of the bits, any 4-byte dtype;
// i32 columns of a mixed f32 packing are converted back from their exact floats), and the inner
// layer does the rest. Parameters, saved state and costs are the inner layer's,
// so parameter names and layer indices stay those the graph declares. Model inputs take no
// gradient: the entries of viewed sources are undefined in every backward.
#include <memory>
#include <optional>
#include <vector>

#include "models/input_layout.hpp"
#include "models/layer.hpp"

namespace tandem::models {

class InputView final : public Layer {
 public:
  // `views[k]`: the columns source k reads, or nullopt where it reads a layer's output.
  InputView(std::shared_ptr<const Layer> inner, std::vector<std::optional<InputColumns>> views);

  std::string kind() const override { return inner_->kind(); }
  std::string describe() const override;
  std::vector<ParamSpec> param_specs() const override { return inner_->param_specs(); }
  Shape output_shape(const Shape& input) const override;
  DType input_dtype() const override;
  DType output_dtype() const override { return inner_->output_dtype(); }
  LayerCost cost(const Shape& input) const override;

  ForwardResult forward(const Context& ctx, ParamView params, const Tensor& x) const override;
  Tensor backward_input(const Context& ctx, ParamView params, Saved& saved,
                        const Tensor& dy) const override;
  void backward_weight_into(const Context& ctx, const Saved& saved, const Tensor& dy,
                            const GradSink& sink) const override;
  Tensor backward_into(const Context& ctx, ParamView params, Saved& saved, const Tensor& dy,
                       bool need_dx, const GradSink& sink) const override;
  SavedLayout saved_layout(std::size_t k) const override { return inner_->saved_layout(k); }
  bool weight_needs_backward_input() const override {
    return inner_->weight_needs_backward_input();
  }

  int arity() const override { return inner_->arity(); }
  Shape output_shape_n(std::span<const Shape> inputs) const override;
  ForwardResult forward_n(const Context& ctx, ParamView params,
                          std::span<const Tensor> xs) const override;
  std::vector<Tensor> backward_input_n(const Context& ctx, ParamView params, Saved& saved,
                                       const Tensor& dy,
                                       const std::vector<bool>& want) const override;

  const Layer& inner() const { return *inner_; }

 private:
  Shape viewed_shape(std::size_t k, const Shape& input) const;
  Tensor view(const Kernels& k, std::size_t source, const Tensor& x) const;
  bool viewed(std::size_t k) const { return k < views_.size() && views_[k].has_value(); }

  std::shared_ptr<const Layer> inner_;
  std::vector<std::optional<InputColumns>> views_;
};

}  // namespace tandem::models

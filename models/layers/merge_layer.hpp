#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/layer.hpp"

namespace tandem::models {

// A layer of a graph model that reads several tensors of one batch (add, concat, multiply; and
// seq_attention, the one with parameters). The single-input calls of Layer are never made on it
// (Model dispatches on arity()) and throw std::logic_error.
class MergeLayer : public Layer {
 public:
  explicit MergeLayer(int arity);
  int arity() const override { return arity_; }
  Shape output_shape(const Shape& input) const override;
  ForwardResult forward(const Context& ctx, ParamView params, const Tensor& x) const override;
  Tensor backward_input(const Context& ctx, ParamView params, Saved& saved,
                        const Tensor& dy) const override;

 protected:
  // Throws std::invalid_argument naming the layer unless there are arity() shapes, each of rank
  // >= 2 with the same dimension 0 (the batch).
  void require_inputs(std::span<const Shape> inputs) const;
  // The same, and every input of input 0's shape.
  void require_equal_shapes(std::span<const Shape> inputs) const;
  // `xs` as f32 tensors on k's device, after output_shape_n accepted their shapes.
  std::vector<Tensor> checked_inputs(const Kernels& k, std::span<const Tensor> xs) const;

 private:
  [[noreturn]] void single_input() const;
  int arity_;
};

// The element-wise sum of its inputs (a residual connection); all of one shape.
class AddLayer final : public MergeLayer {
 public:
  explicit AddLayer(int arity) : MergeLayer(arity) {}
  std::string kind() const override { return "add"; }
  std::string describe() const override;
  Shape output_shape_n(std::span<const Shape> inputs) const override;
  ForwardResult forward_n(const Context& ctx, ParamView params,
                          std::span<const Tensor> xs) const override;
  std::vector<Tensor> backward_input_n(const Context& ctx, ParamView params, Saved& saved,
                                       const Tensor& dy,
                                       const std::vector<bool>& want) const override;
};

// Its inputs joined along one dimension, whose sizes (`widths`, fixed when the graph is built)
// may differ; the other dimensions agree. `axis` counts from the batch's 0 (1: an image's
// channels, as Inception joins its branches), or from the end when negative (-1, the
// default: the features).
class ConcatLayer final : public MergeLayer {
 public:
  explicit ConcatLayer(std::vector<std::int64_t> widths, int axis = -1);
  std::string kind() const override { return "concat"; }
  std::string describe() const override;
  Shape output_shape_n(std::span<const Shape> inputs) const override;
  ForwardResult forward_n(const Context& ctx, ParamView params,
                          std::span<const Tensor> xs) const override;
  std::vector<Tensor> backward_input_n(const Context& ctx, ParamView params, Saved& saved,
                                       const Tensor& dy,
                                       const std::vector<bool>& want) const override;

 private:
  // The dimension joined in a tensor of `rank`; throws naming the layer when out of range.
  std::size_t dimension(std::size_t rank) const;

  std::vector<std::int64_t> widths_;
  std::int64_t total_ = 0;
  int axis_;
};

// The element-wise product of two inputs of one shape (a gate); keeps both for backward.
class MultiplyLayer final : public MergeLayer {
 public:
  MultiplyLayer() : MergeLayer(2) {}
  std::string kind() const override { return "multiply"; }
  std::string describe() const override { return "multiply"; }
  Shape output_shape_n(std::span<const Shape> inputs) const override;
  ForwardResult forward_n(const Context& ctx, ParamView params,
                          std::span<const Tensor> xs) const override;
  std::vector<Tensor> backward_input_n(const Context& ctx, ParamView params, Saved& saved,
                                       const Tensor& dy,
                                       const std::vector<bool>& want) const override;
};

}  // namespace tandem::models

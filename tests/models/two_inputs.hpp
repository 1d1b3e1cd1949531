#pragma once
// A test adapter: a layer of two inputs (seq_attention) as a layer of one, so that the tests
// written for one input (finite differences, layer_cases: kernels seam, split vs fused) cover it
// too. The one input is [batch, n0 + n1]: each sample's first input flattened, then its second.
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <vector>

#include "models/detail/checks.hpp"
#include "models/layer.hpp"

namespace tandem::models::testing {

class TwoInputs final : public Layer {
 public:
  // `shapes`: the two inputs' per-sample shapes.
  TwoInputs(std::shared_ptr<const Layer> inner, Shape first, Shape second)
      : inner_(std::move(inner)), shapes_{std::move(first), std::move(second)} {}
  std::string kind() const override { return inner_->kind(); }
  std::string describe() const override { return "two_inputs(" + inner_->describe() + ")"; }
  std::vector<ParamSpec> param_specs() const override { return inner_->param_specs(); }
  Shape output_shape(const Shape& input) const override {
    return inner_->output_shape_n(split_shapes(input));
  }
  ForwardResult forward(const Context& ctx, ParamView params, const Tensor& x) const override {
    const Kernels& k = ctx.k();
    const std::vector<Shape> shapes = split_shapes(x.shape());
    std::vector<Tensor> xs;
    std::int64_t at = 0;
    for (const Shape& s : shapes) {
      const std::int64_t n = shape_numel(s) / s[0];
      xs.push_back(k.empty(s));
      k.copy_2d(detail::ptr(x) + at, width(), detail::ptr(xs.back()), n, s[0], n);
      at += n;
    }
    return inner_->forward_n(ctx, params, xs);
  }
  Tensor backward_input(const Context& ctx, ParamView params, Saved& saved,
                        const Tensor& dy) const override {
    const Kernels& k = ctx.k();
    const std::vector<Tensor> d = inner_->backward_input_n(ctx, params, saved, dy, {true, true});
    Tensor dx = k.empty({d[0].dim(0), width()});
    std::int64_t at = 0;
    for (const Tensor& t : d) {
      const std::int64_t n = t.numel() / t.dim(0);
      k.copy_2d(detail::ptr(t), n, detail::ptr(dx) + at, width(), t.dim(0), n);
      at += n;
    }
    return dx;
  }
  void backward_weight_into(const Context& ctx, const Saved& saved, const Tensor& dy,
                            const GradSink& sink) const override {
    inner_->backward_weight_into(ctx, saved, dy, sink);
  }
  SavedLayout saved_layout(std::size_t k) const override { return inner_->saved_layout(k); }
  bool weight_needs_backward_input() const override {
    return inner_->weight_needs_backward_input();
  }

 private:
  std::int64_t width() const {
    std::int64_t w = 0;
    for (const Shape& s : shapes_) w += shape_numel(s);
    return w;
  }
  std::vector<Shape> split_shapes(const Shape& input) const {
    if (input.size() != 2 || input[1] != width()) {
      throw std::invalid_argument(describe() + ": input " + shape_str(input) + " is not [batch, " +
                                  std::to_string(width()) + "]");
    }
    std::vector<Shape> out;
    for (const Shape& s : shapes_) {
      Shape full{input[0]};
      full.insert(full.end(), s.begin(), s.end());
      out.push_back(std::move(full));
    }
    return out;
  }

  std::shared_ptr<const Layer> inner_;
  std::vector<Shape> shapes_;
};

}  // namespace tandem::models::testing

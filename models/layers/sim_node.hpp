#pragma once

#include <cstdint>

#include "models/layer.hpp"

namespace tandem::models {

// A layer that exists only for the sim device (graph node `layer: sim`): it reads any number of
// tensors of one batch and makes [batch, out] with `params` weights, so that a graph of them
// carries exactly the sizes of a measured profile's tensors and weights (what
// `scripts/pipedream-graph-config` writes from a PipeDream graph.txt). Its durations come from
// the profile (`tandem bench --profile`); on a device that computes, every op throws.
class SimNode final : public Layer {
 public:
  SimNode(int arity, std::int64_t out, std::int64_t params);
  std::string kind() const override { return "sim"; }
  std::string describe() const override;
  std::vector<ParamSpec> param_specs() const override;
  int arity() const override { return arity_; }
  Shape output_shape(const Shape& input) const override;
  Shape output_shape_n(std::span<const Shape> inputs) const override;
  ForwardResult forward(const Context& ctx, ParamView params, const Tensor& x) const override;
  Tensor backward_input(const Context& ctx, ParamView params, Saved& saved,
                        const Tensor& dy) const override;
  void backward_weight_into(const Context& ctx, const Saved& saved, const Tensor& dy,
                            const GradSink& sink) const override;
  ForwardResult forward_n(const Context& ctx, ParamView params,
                          std::span<const Tensor> xs) const override;
  std::vector<Tensor> backward_input_n(const Context& ctx, ParamView params, Saved& saved,
                                       const Tensor& dy,
                                       const std::vector<bool>& want) const override;

 private:
  [[noreturn]] void computes() const;
  int arity_;
  std::int64_t out_;
  std::int64_t params_;
};

}  // namespace tandem::models

#pragma once

#include <cstdint>

#include "models/layer.hpp"

namespace tandem::models {

// Batch normalisation of NCHW f32 input over (N, H, W) per channel, with an affine "weight"
// (ones) and "bias" (zeros).
//
// Training normalises with the statistics of the tensor it is given (biased variance, as
// PyTorch): a pipeline slice uses its own slice's statistics and each replica its own, as in
// GPipe and PipeDream. The saved state is therefore per slice: not_splittable (UMPIPE, which
// re-slices a stage's backward, refuses a model with batch norm).
//
// Evaluation (ctx.training false) normalises with the running statistics, the buffers
// "running_mean" (zeros) and "running_var" (ones), with "count" (the number of updates, as
// PyTorch's num_batches_tracked). Buffers are not trained: backward_weight_into writes into
// their gradient slots, per channel, the slice's sum of x (running_mean's slot) and sum of x^2
// (running_var's), and its element count N * H * W (count's); slices sum them, replicas average
// them, and update_buffers, once per optimizer step, turns them into the step's mean and
// unbiased variance and moves the running statistics by momentum 0.1 towards them.
class BatchNorm2d final : public Layer {
 public:
  explicit BatchNorm2d(std::int64_t channels, float eps = 1e-5f, float momentum = 0.1f);
  std::string kind() const override { return "batch_norm2d"; }
  std::string describe() const override;
  std::vector<ParamSpec> param_specs() const override;
  Shape output_shape(const Shape& input) const override;
  ForwardResult forward(const Context& ctx, ParamView params, const Tensor& x) const override;
  Tensor backward_input(const Context& ctx, ParamView params, Saved& saved,
                        const Tensor& dy) const override;
  void backward_weight_into(const Context& ctx, const Saved& saved, const Tensor& dy,
                            const GradSink& sink) const override;
  // Training: {xhat, rstd [C], sums [2C + 1]}; evaluation: {xhat}. Normalised by the statistics
  // of the whole forward: never cut into slices.
  SavedLayout saved_layout(std::size_t k) const override;
  void update_buffers(const Kernels& k, ParamView params, std::span<const Tensor> grads,
                      std::span<Tensor> out) const override;

 private:
  std::int64_t channels_;
  float eps_;
  float momentum_;
};

}  // namespace tandem::models

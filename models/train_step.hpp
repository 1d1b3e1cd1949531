#pragma once

#include <cstdint>
#include <limits>
#include <optional>

#include "models/model.hpp"
#include "models/optimizer.hpp"
#include "models/param_set.hpp"
#include "runtime/tensor.hpp"

namespace tandem::models {

struct StepOutput {
  float loss = 0;  // mean over the count
  std::int64_t correct = 0;
  std::int64_t count = 0;  // predictions: samples (mlp, vgg16) or tokens (gpt)
  ParamSet grads;          // gradient of the mean loss; empty after a fused update
  // The gradient's global norm before clipping (models/grad_norm.hpp); NaN unless asked for.
  double grad_norm = std::numeric_limits<double>::quiet_NaN();
};

// What the update does besides the optimizer's rule.
struct StepOptions {
  // Scale the gradients by clip_coefficient(norm, clip_norm) before the update.
  std::optional<double> clip_norm;
  // Compute StepOutput::grad_norm even without clipping.
  bool report_norm = false;
};

struct EvalOutput {
  float loss = 0;
  std::int64_t correct = 0;
  std::int64_t count = 0;
};

// Forward and backward of one minibatch on one device: the reference every pipeline schedule
// must reproduce. step_seed drives dropout.
StepOutput train_step(const Model& model, const ParamSet& params, const Tensor& inputs,
                      const Tensor& targets, std::uint64_t step_seed);

// train_step followed by the optimizer update. When the optimizer has a fused update and the
// weights are not shared, the gradients are written straight into the weights during backward
// (StepOutput::grads stays empty); otherwise equals train_step then optimizer.step.
StepOutput train_step(const Model& model, ParamSet& params, Optimizer& optimizer,
                      const Tensor& inputs, const Tensor& targets, std::uint64_t step_seed);

// The same with gradient clipping or a reported norm (never fused: the norm needs every
// gradient before any update).
StepOutput train_step(const Model& model, ParamSet& params, Optimizer& optimizer,
                      const Tensor& inputs, const Tensor& targets, std::uint64_t step_seed,
                      const StepOptions& options);

// Forward only (no dropout, nothing kept).
EvalOutput evaluate(const Model& model, const ParamSet& params, const Tensor& inputs,
                    const Tensor& targets);

}  // namespace tandem::models

#pragma once
// The global gradient norm and clipping by it (PyTorch's clip_grad_norm_ with norm type 2).
//
// The norm is defined on the whole model, so that a pipeline cut anywhere computes what one
// device does: each trainable parameter has a slot (model order, layer by layer); a slot holds
// the sum of squares of that parameter's gradient (f64 accumulation in a fixed order, rounded
// to f32 once: Kernels::sum_squares); the norm is the square root of the slots added in slot
// order in f64. A stage fills the slots of its own parameters and zeros elsewhere, so summing
// the stages' vectors (an all-reduce adds each slot to zeros only, which is exact) and folding
// the result gives one device's norm bit for bit, whatever the cut, replicas and reduction
// order. Buffers (batch norm's running statistics) have no slot; a tied parameter has one, its
// leader's (every copy holds the group's total once the copies are summed).
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>

#include "models/kernels/kernels.hpp"
#include "models/param_set.hpp"
#include "runtime/tensor.hpp"

namespace tandem::models {

class Model;

class GradNormLayout {
 public:
  explicit GradNormLayout(const Model& model);
  std::int64_t slots() const { return slots_; }
  // The slot of parameter `name` ("<layer>.<local>"), -1 for a buffer or a tie's follower.
  std::int64_t slot(std::string_view name) const;

 private:
  std::unordered_map<std::string, std::int64_t> slot_;
  std::int64_t slots_ = 0;
};

// Fills `squares` (an f32 tensor of layout.slots() elements on k's device): each parameter of
// `grads` that has a slot gets its gradient's sum of squares there, every other slot 0.
// Throws std::invalid_argument when `squares` does not fit. Nothing happens on a device without
// data (sim).
void gradient_squares(const Kernels& k, const GradNormLayout& layout, const ParamSet& grads,
                      Tensor& squares);

// sqrt of the slots added in slot order, in f64 (host memory).
double fold_norm(const float* squares, std::int64_t slots);

// The factor clipping multiplies gradients by: max_norm / (norm + 1e-6) when that is below 1,
// else 1 (PyTorch's clip_grad_norm_). A non-finite norm gives 1: the gradients are left as they
// are and the divergence shows in the loss and the reported norm.
float clip_coefficient(double norm, double max_norm);

// grads *= coefficient for every parameter with a slot (buffers' slots carry statistics, not
// gradients, and keep them). Does nothing for a coefficient of 1.
void scale_gradients(const Kernels& k, const GradNormLayout& layout, ParamSet& grads,
                     float coefficient);

// One device's norm of `grads` (tied copies already summed), through k, read back to the host.
double gradient_norm(const Kernels& k, const GradNormLayout& layout, const ParamSet& grads);

}  // namespace tandem::models

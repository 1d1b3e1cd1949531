#pragma once

#include <cstdint>

#include "runtime/tensor.hpp"

namespace tandem::models {

struct LossResult {
  double loss_sum = 0;       // sum over rows of -log softmax(logits)[target]
  std::int64_t correct = 0;  // rows whose argmax equals the target
  std::int64_t count = 0;    // rows
  Tensor dlogits;            // grad_scale * (softmax - onehot); undefined unless requested
  // Set by an asynchronous device: host memory that receives {loss_sum (f64), correct (i64)}
  // when the work completes. loss_sum and correct above are then 0 until resolved().
  Tensor pending_sums;

  // The sums, read from pending_sums when there are some. Call once the work has completed.
  LossResult resolved() const;
};

// Softmax cross-entropy over the last dimension: logits f32 [..., C], targets i32 [...]
// (class ids in [0, C)). The gradient is of grad_scale * loss_sum: pass 1 / (rows of the whole
// minibatch) so that the gradients of its slices add up to the gradient of the mean loss.
LossResult softmax_cross_entropy(const Tensor& logits, const Tensor& targets, bool need_grad,
                                 float grad_scale);

}  // namespace tandem::models

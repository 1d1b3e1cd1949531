#pragma once
// A model's loss: what the last stage compares its output with, and the gradient it sends back.
// Each loss lives in a file of its own under models/losses/; the stage reaches it only through
// this interface (and the executor, which knows how a device hands its sums back).
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "models/layer.hpp"
#include "runtime/tensor.hpp"

namespace tandem::models {

struct LossResult {
  double loss_sum = 0;       // sum over target elements of their loss
  std::int64_t correct = 0;  // rows whose argmax equals the target (losses that classify)
  std::int64_t count = 0;    // target elements: loss_sum / count is the mean loss
  Tensor dlogits;            // grad_scale * d(loss_sum)/d(output); undefined unless requested
  // Set by a loss computed on a device other than the CPU: a CrossEntropySums (16 bytes) in that
  // device's memory, which the executor brings to the host (pending_sums) without waiting.
  Tensor device_sums;
  // Set by an asynchronous device: host memory that receives {loss_sum (f64), correct (i64)}
  // when the work completes. loss_sum and correct above are then 0 until resolved().
  Tensor pending_sums;

  // The sums, read from pending_sums when there are some. Call once the work has completed.
  LossResult resolved() const;
};

class Loss {
 public:
  virtual ~Loss() = default;

  // The name a config and ModelSpec::loss give it ("mse"), or an application's describe().
  virtual std::string name() const = 0;
  // Whether an argmax of the output against the target means something: accuracy is reported
  // only then, so a regression run shows none instead of a meaningless 0%.
  virtual bool classifies() const = 0;
  virtual DType target_dtype() const = 0;
  // The targets of an output of this shape (a minibatch's or a slice's).
  virtual Shape target_shape(const Shape& output) const = 0;

  // Value and gradient of one slice on the device of ctx.k(). The gradient is of
  // grad_scale * loss_sum: pass 1 / (target elements of the whole minibatch) so that the
  // gradients of its slices add up to the gradient of the minibatch's mean. On the CPU
  // loss_sum and correct are set at once; elsewhere in device_sums.
  virtual LossResult compute(const Context& ctx, const Tensor& output, const Tensor& targets,
                             bool need_grad, float grad_scale) const = 0;

  // Throws std::invalid_argument naming the loss, `what` (where the targets come from), their
  // dtype and shape and the expected ones, unless `targets` fit an output of `output`'s shape.
  void check_targets(const Shape& output, DType dtype, const Shape& targets,
                     std::string_view what) const;
};

using LossPtr = std::shared_ptr<const Loss>;

// "cross_entropy", "mse" or "bce_with_logits"; throws std::invalid_argument naming `name`.
LossPtr make_loss(std::string_view name);
// The names make_loss takes, for errors and docs: "cross_entropy, mse or bce_with_logits".
const char* loss_names();

// Softmax cross-entropy over the last dimension on the CPU: logits f32 [..., C], targets i32
// [...] (class ids in [0, C)); models/losses/cross_entropy.hpp is the Loss around it.
LossResult softmax_cross_entropy(const Tensor& logits, const Tensor& targets, bool need_grad,
                                 float grad_scale);

}  // namespace tandem::models
